//! The shared datasets (admin).

use super::*;

#[server(endpoint = "admin_datasets")]
pub async fn admin_datasets() -> Result<crate::domain::datasets::AdminDatasets, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_datasets(&viewer).await
}

#[server(endpoint = "add_dataset", input = leptos::server_fn::codec::Json)]
pub async fn add_dataset(
    dataset: crate::domain::datasets::NewDataset,
) -> Result<crate::domain::datasets::DatasetView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.add_dataset(&viewer, dataset).await
}

#[server(endpoint = "change_dataset", input = leptos::server_fn::codec::Json)]
pub async fn change_dataset(
    id: String,
    change: crate::domain::datasets::DatasetChange,
) -> Result<crate::domain::datasets::DatasetView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .change_dataset(&viewer, &id, change)
        .await
}

#[server(endpoint = "remove_dataset", input = leptos::server_fn::codec::Json)]
pub async fn remove_dataset(id: String) -> Result<(), AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.remove_dataset(&viewer, &id).await
}
