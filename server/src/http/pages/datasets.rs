//! The pages' door to the shared datasets.

use super::*;

#[async_trait::async_trait]
impl app::api::DatasetsBackend for PagesBackend {
    async fn admin_datasets(
        &self,
        viewer: &Viewer,
    ) -> Result<app::domain::datasets::AdminDatasets, AppError> {
        Ok(app::domain::datasets::AdminDatasets {
            datasets: self.0.datasets.admin_datasets(viewer).await?,
            on_cluster: self.0.datasets.takes_claims(),
        })
    }

    async fn add_dataset(
        &self,
        viewer: &Viewer,
        dataset: app::domain::datasets::NewDataset,
    ) -> Result<app::domain::datasets::DatasetView, AppError> {
        self.0.datasets.add(viewer, &dataset).await
    }

    async fn change_dataset(
        &self,
        viewer: &Viewer,
        id: &str,
        change: app::domain::datasets::DatasetChange,
    ) -> Result<app::domain::datasets::DatasetView, AppError> {
        self.0.datasets.change(viewer, id, &change).await
    }

    async fn remove_dataset(&self, viewer: &Viewer, id: &str) -> Result<(), AppError> {
        self.0.datasets.remove(viewer, id).await
    }
}
