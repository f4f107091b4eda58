//! The pages' door to the dashboard and one's own sessions.

use super::*;
use app::api::PromotionsBackend;

#[async_trait::async_trait]
impl app::api::SessionsBackend for PagesBackend {
    async fn dashboard(&self, viewer: &Viewer) -> Result<DashboardPage, AppError> {
        let dashboard = self.0.sessions.dashboard(viewer).await?;
        let promotions = self.promotions(viewer).await?;
        let mut page = app::dashboard_page(dashboard, promotions);
        if let Some(backups) = self.0.backups.workspace_card(viewer).await {
            page.drawn.backups = app::backups_drawn(backups);
        }
        // What the launch form says its sessions mount.
        page.datasets = match self.0.datasets.usable(viewer).await {
            Ok(usable) => usable.into_iter().map(|d| d.name).collect(),
            Err(_) => Vec::new(),
        };
        Ok(page)
    }

    async fn launch(
        &self,
        viewer: &Viewer,
        request: LaunchRequest,
    ) -> Result<SessionView, AppError> {
        self.0.sessions.launch(viewer, request).await
    }

    async fn session(&self, viewer: &Viewer, id: &str) -> Result<SessionView, AppError> {
        self.0.sessions.session(viewer, id).await
    }

    async fn session_readings(
        &self,
        viewer: &Viewer,
        id: &str,
    ) -> Result<SessionReadings, AppError> {
        self.0.sessions.readings(viewer, id).await
    }

    async fn stop(&self, viewer: &Viewer, id: &str) -> Result<SessionView, AppError> {
        self.0.sessions.stop(viewer, id).await
    }

    async fn heartbeat(
        &self,
        viewer: &Viewer,
        id: &str,
        beat: app::domain::presence::Beat,
    ) -> Result<SessionView, AppError> {
        self.0.sessions.heartbeat(viewer, id, beat).await?;
        self.0.sessions.session(viewer, id).await
    }

    async fn extend(
        &self,
        viewer: &Viewer,
        id: &str,
        minutes: u32,
    ) -> Result<SessionView, AppError> {
        self.0.sessions.extend(viewer, id, minutes).await
    }
}
