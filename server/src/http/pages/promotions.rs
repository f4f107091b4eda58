//! The pages' door to promotions to the registry.

use super::*;

#[async_trait::async_trait]
impl app::api::PromotionsBackend for PagesBackend {
    async fn promote_file(
        &self,
        viewer: &Viewer,
        session_id: &str,
        request: app::domain::promotion::PromotionRequest,
    ) -> Result<app::model::PromotionView, AppError> {
        self.0
            .promotions
            .request_promotion(viewer, session_id, &request)
            .await
    }

    async fn promotions(&self, viewer: &Viewer) -> Result<app::model::Promotions, AppError> {
        let settings = &self.0.config().promotion;
        Ok(app::model::Promotions {
            enabled: settings.enabled(),
            needs_approval: settings.require_approval,
            items: self.0.promotions.promotions(viewer).await?,
        })
    }

    async fn admin_promotions(
        &self,
        viewer: &Viewer,
        query: &app::domain::listing::ListQuery,
    ) -> Result<app::domain::listing::Page<app::model::PromotionView>, AppError> {
        self.0.promotions.admin_promotions(viewer, query).await
    }

    async fn decide_promotion(
        &self,
        viewer: &Viewer,
        id: &str,
        decision: app::domain::promotion::Decision,
        reason: Option<String>,
    ) -> Result<app::model::PromotionView, AppError> {
        self.0
            .promotions
            .decide_promotion(viewer, id, decision, reason.as_deref())
            .await
    }
}
