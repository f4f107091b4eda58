//! The approved editor images (admin).

use super::*;

#[server(endpoint = "admin_images")]
pub async fn admin_images() -> Result<crate::model::AdminImages, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_images(&viewer).await
}

#[server(endpoint = "add_image", input = leptos::server_fn::codec::Json)]
pub async fn add_image(
    image: crate::domain::images::NewImage,
) -> Result<crate::model::ImageView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.add_image(&viewer, image).await
}

#[server(endpoint = "set_image_state", input = leptos::server_fn::codec::Json)]
pub async fn set_image_state(
    id: String,
    state: crate::domain::images::ImageState,
) -> Result<crate::model::ImageView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .set_image_state(&viewer, &id, state)
        .await
}
