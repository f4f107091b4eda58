//! The pages' door to the approved editor images.

use super::*;

#[async_trait::async_trait]
impl app::api::ImagesBackend for PagesBackend {
    async fn admin_images(&self, viewer: &Viewer) -> Result<app::model::AdminImages, AppError> {
        Ok(app::model::AdminImages {
            images: self.0.images.admin_images(viewer).await?,
            runs_images: self.0.images.runs_images(),
        })
    }

    async fn add_image(
        &self,
        viewer: &Viewer,
        image: app::domain::images::NewImage,
    ) -> Result<ImageView, AppError> {
        self.0.images.add_image(viewer, &image).await
    }

    async fn set_image_state(
        &self,
        viewer: &Viewer,
        id: &str,
        state: app::domain::images::ImageState,
    ) -> Result<ImageView, AppError> {
        self.0.images.set_image_state(viewer, id, state).await
    }
}
