//! The pages' door: the server functions of `app::api` reach the service through
//! [`PagesBackend`], the `Backend` they get from context.

use crate::service::accounts::RequestAuth;
use crate::service::{NewToken, Service};
use app::domain::launch::LaunchRequest;
use app::domain::usage::{SessionReadings, UsageDay};
use app::error::AppError;
use app::model::*;
use std::sync::Arc;

/// The request's credential, as the service takes it.
async fn request_auth<'a>(
    service: &Service,
    request: &'a http::request::Parts,
) -> Result<RequestAuth<'a>, AppError> {
    super::request_auth(
        service,
        &request.headers,
        request.extensions.get::<tower_sessions::Session>(),
    )
    .await
}

/// The browser's sign-in session (the session layer puts one on every page request).
fn session(request: &http::request::Parts) -> Result<&tower_sessions::Session, AppError> {
    request
        .extensions
        .get::<tower_sessions::Session>()
        .ok_or(AppError::Internal)
}

/// The pages' door: server functions call these through `Arc<dyn Backend>`.
#[derive(Clone)]
pub struct PagesBackend(pub Arc<Service>);

#[async_trait::async_trait]
impl app::api::Backend for PagesBackend {
    async fn viewer(&self, request: &http::request::Parts) -> Result<Option<Viewer>, AppError> {
        Ok(self
            .0
            .accounts
            .caller(&request.headers)
            .await?
            .map(|c| c.viewer()))
    }

    fn single_sign_on(&self) -> Option<String> {
        self.0.accounts.single_sign_on()
    }

    async fn login(
        &self,
        request: &http::request::Parts,
        name: &str,
        password: &str,
    ) -> Result<Viewer, AppError> {
        self.0
            .accounts
            .sign_in_with_password(
                session(request)?,
                self.0.accounts.session_cookie(&request.headers),
                name,
                password,
                request.extensions.get::<super::ClientAddr>().map(|c| c.0),
            )
            .await
    }

    async fn logout(&self, request: &http::request::Parts) -> Result<(), AppError> {
        self.0
            .accounts
            .logout(
                session(request)?,
                self.0.accounts.session_cookie(&request.headers),
            )
            .await
    }

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

    async fn tokens_page(&self, request: &http::request::Parts) -> Result<TokensPage, AppError> {
        let auth = request_auth(&self.0, request).await?;
        self.0.accounts.tokens_page(&auth).await
    }

    async fn make_token(
        &self,
        request: &http::request::Parts,
        form: app::api::TokenForm,
    ) -> Result<NewToken, AppError> {
        let auth = request_auth(&self.0, request).await?;
        self.0
            .accounts
            .make_token(
                &auth,
                &form.label,
                Some(form.scopes),
                form.days,
                form.password.as_deref(),
            )
            .await
    }

    async fn revoke_token(&self, viewer: &Viewer, id: &str) -> Result<(), AppError> {
        self.0.accounts.revoke_token(viewer, id).await
    }

    async fn launch(
        &self,
        viewer: &Viewer,
        request: LaunchRequest,
    ) -> Result<SessionView, AppError> {
        self.0.sessions.launch(viewer, request).await
    }

    async fn heartbeat(
        &self,
        viewer: &Viewer,
        id: &str,
        input: bool,
    ) -> Result<SessionView, AppError> {
        self.0.sessions.heartbeat(viewer, id, input).await?;
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

    async fn admin_usage_days(
        &self,
        viewer: &Viewer,
        query: &app::domain::listing::ListQuery,
    ) -> Result<Vec<UsageDay>, AppError> {
        self.0.admin.admin_usage_days(viewer, query).await
    }

    async fn stop(&self, viewer: &Viewer, id: &str) -> Result<SessionView, AppError> {
        self.0.sessions.stop(viewer, id).await
    }

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

    async fn admin_access(
        &self,
        request: &http::request::Parts,
    ) -> Result<app::model::AdminAccess, AppError> {
        let auth = request_auth(&self.0, request).await?;
        self.0.accounts.admin_access(&auth).await
    }

    async fn confirm_admin(
        &self,
        request: &http::request::Parts,
        password: &str,
    ) -> Result<(), AppError> {
        let auth = request_auth(&self.0, request).await?;
        self.0.accounts.confirm_admin(&auth, password).await
    }

    fn admin_settings(&self, viewer: &Viewer) -> Result<Vec<SettingsSection>, AppError> {
        self.0.admin.admin_settings(viewer)
    }

    async fn admin_pool_page(&self, viewer: &Viewer) -> Result<String, AppError> {
        let gpus = self.0.admin.admin_pool(viewer).await?;
        let waiting = self.0.admin.admin_queue(viewer).await?;
        Ok(app::admin_pool_page(gpus, waiting))
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

    async fn ask_for_credits(
        &self,
        viewer: &Viewer,
        amount: &str,
        note: &str,
    ) -> Result<app::model::CreditRequest, AppError> {
        self.0.accounts.ask_for_credits(viewer, amount, note).await
    }

    async fn withdraw_credit_request(&self, viewer: &Viewer) -> Result<(), AppError> {
        self.0.accounts.withdraw_credit_request(viewer).await
    }

    async fn decline_credit_request(&self, viewer: &Viewer, user_id: &str) -> Result<(), AppError> {
        self.0.admin.decline_credit_request(viewer, user_id).await
    }

    async fn change_password(
        &self,
        viewer: &Viewer,
        current: &str,
        new: &str,
    ) -> Result<(), AppError> {
        self.0.accounts.change_password(viewer, current, new).await
    }

    async fn add_user(
        &self,
        viewer: &Viewer,
        account: NewAccount,
    ) -> Result<MadePassword, AppError> {
        self.0.admin.admin_add_user(viewer, account).await
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

    async fn reset_password(
        &self,
        viewer: &Viewer,
        user_id: &str,
    ) -> Result<MadePassword, AppError> {
        self.0.admin.admin_reset_password(viewer, user_id).await
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
