//! The pages' door to the admin pages.

use super::*;

#[async_trait::async_trait]
impl app::api::AdminBackend for PagesBackend {
    async fn admin_users(
        &self,
        viewer: &Viewer,
        query: &app::domain::listing::ListQuery,
    ) -> Result<app::domain::listing::Page<AdminUser>, AppError> {
        self.0.admin.admin_users(viewer, query).await
    }

    async fn admin_sessions(
        &self,
        viewer: &Viewer,
        query: &app::domain::listing::ListQuery,
    ) -> Result<app::domain::listing::Page<AdminSession>, AppError> {
        self.0.admin.admin_sessions(viewer, query).await
    }

    async fn admin_audit(
        &self,
        viewer: &Viewer,
        query: &app::domain::listing::ListQuery,
    ) -> Result<app::domain::listing::Page<AuditLine>, AppError> {
        self.0.admin.admin_audit(viewer, query).await
    }

    async fn admin_usage(
        &self,
        viewer: &Viewer,
        query: &app::domain::listing::ListQuery,
    ) -> Result<app::domain::listing::Page<UsageRow>, AppError> {
        self.0.admin.admin_usage(viewer, query).await
    }

    async fn admin_usage_days(
        &self,
        viewer: &Viewer,
        query: &app::domain::listing::ListQuery,
    ) -> Result<Vec<UsageDay>, AppError> {
        self.0.admin.admin_usage_days(viewer, query).await
    }

    async fn admin_pool_page(&self, viewer: &Viewer) -> Result<String, AppError> {
        let gpus = self.0.admin.admin_pool(viewer).await?;
        let waiting = self.0.admin.admin_queue(viewer).await?;
        Ok(app::admin_pool_page(gpus, waiting))
    }

    fn admin_settings(&self, viewer: &Viewer) -> Result<Vec<SettingsSection>, AppError> {
        self.0.admin.admin_settings(viewer)
    }

    async fn change_user(
        &self,
        viewer: &Viewer,
        user_id: &str,
        change: UserChange,
    ) -> Result<(), AppError> {
        self.0.admin.change_user(viewer, user_id, &change).await
    }

    async fn grant_credits(
        &self,
        viewer: &Viewer,
        user_id: &str,
        amount: &str,
        note: &str,
    ) -> Result<i64, AppError> {
        self.0
            .admin
            .grant_credits(Some(viewer), user_id, amount, note)
            .await
    }

    async fn admin_stop(&self, viewer: &Viewer, id: &str) -> Result<AdminSession, AppError> {
        self.0.admin.admin_stop(viewer, id).await
    }

    async fn decline_credit_request(&self, viewer: &Viewer, user_id: &str) -> Result<(), AppError> {
        self.0.admin.decline_credit_request(viewer, user_id).await
    }

    async fn add_user(
        &self,
        viewer: &Viewer,
        account: NewAccount,
    ) -> Result<MadePassword, AppError> {
        self.0.admin.admin_add_user(viewer, account).await
    }

    async fn reset_password(
        &self,
        viewer: &Viewer,
        user_id: &str,
    ) -> Result<MadePassword, AppError> {
        self.0.admin.admin_reset_password(viewer, user_id).await
    }

    async fn bulk_users(
        &self,
        viewer: &Viewer,
        csv: &str,
        apply: bool,
    ) -> Result<app::model::BulkUsers, AppError> {
        self.0.admin.bulk_users(viewer, csv, apply).await
    }

    async fn open_credit_requests(&self, viewer: &Viewer) -> Result<u32, AppError> {
        self.0.admin.open_credit_requests(viewer).await
    }

    async fn delete_user(&self, viewer: &Viewer, user_id: &str) -> Result<(), AppError> {
        self.0.admin.admin_delete_user(viewer, user_id).await
    }

    async fn undelete_user(&self, viewer: &Viewer, user_id: &str) -> Result<(), AppError> {
        self.0.admin.admin_undelete_user(viewer, user_id).await
    }

    async fn admin_open_editor(
        &self,
        viewer: &Viewer,
        id: &str,
    ) -> Result<app::model::EditorAccess, AppError> {
        self.0.admin.admin_open_editor(viewer, id).await
    }

    async fn set_user_quota(
        &self,
        viewer: &Viewer,
        user_id: &str,
        overrides: app::domain::quota::Overrides,
    ) -> Result<app::domain::quota::Limits, AppError> {
        self.0
            .admin
            .set_user_quota(viewer, user_id, &overrides)
            .await
    }
}
