//! What the server functions need from the server, and how they find it (ssr only).
//!
//! The server crate implements [`Backend`] with its service layer and provides it as
//! `Arc<dyn Backend>` context; the helpers below read it and the request from that context.

use super::TokenForm;
use crate::domain::launch::LaunchRequest;
use crate::domain::listing::{ListQuery, Page};
use crate::domain::usage::{SessionReadings, UsageDay};
use crate::error::AppError;
use crate::model::{
    AdminSession, AdminUser, AuditLine, DashboardPage, NewToken, PromotionView, Promotions,
    SessionView, TokensPage, UsageRow, UserChange, Viewer,
};
use leptos::prelude::*;
use std::sync::Arc;

/// What the pages need from the server, one trait an area. Implemented by the server crate's
/// service layer, provided to server functions as `Arc<dyn Backend>` context.
pub trait Backend:
    AccountsBackend
    + SessionsBackend
    + AdminBackend
    + PromotionsBackend
    + ImagesBackend
    + DatasetsBackend
{
}

impl<T> Backend for T where
    T: AccountsBackend
        + SessionsBackend
        + AdminBackend
        + PromotionsBackend
        + ImagesBackend
        + DatasetsBackend
{
}

/// Sign-in, one's own account and tokens, credit asks, the admin confirmation.
#[async_trait::async_trait]
pub trait AccountsBackend: Send + Sync + 'static {
    /// The viewer behind a request's session cookie or bearer token.
    async fn viewer(&self, request: &http::request::Parts) -> Result<Option<Viewer>, AppError>;
    async fn login(
        &self,
        request: &http::request::Parts,
        name: &str,
        password: &str,
    ) -> Result<Viewer, AppError>;
    async fn logout(&self, request: &http::request::Parts) -> Result<(), AppError>;
    /// The OpenID Connect provider's name for "Sign in with …", when one is configured.
    fn single_sign_on(&self) -> Option<String>;
    /// The viewer's tokens and what making one takes.
    async fn tokens_page(&self, request: &http::request::Parts) -> Result<TokensPage, AppError>;
    async fn make_token(
        &self,
        request: &http::request::Parts,
        form: TokenForm,
    ) -> Result<NewToken, AppError>;
    async fn revoke_token(&self, viewer: &Viewer, id: &str) -> Result<(), AppError>;
    async fn change_password(
        &self,
        viewer: &Viewer,
        current: &str,
        new: &str,
    ) -> Result<(), AppError>;
    async fn ask_for_credits(
        &self,
        viewer: &Viewer,
        amount: &str,
        note: &str,
    ) -> Result<crate::model::CreditRequest, AppError>;
    async fn withdraw_credit_request(&self, viewer: &Viewer) -> Result<(), AppError>;
    /// Whether the admin pages are open to this request's sign-in now.
    async fn admin_access(
        &self,
        request: &http::request::Parts,
    ) -> Result<crate::model::AdminAccess, AppError>;
    /// Opens the admin pages to this browser's sign-in for a while, with the password.
    async fn confirm_admin(
        &self,
        request: &http::request::Parts,
        password: &str,
    ) -> Result<(), AppError>;
}

/// The dashboard and one's own sessions.
#[async_trait::async_trait]
pub trait SessionsBackend: Send + Sync + 'static {
    async fn dashboard(&self, viewer: &Viewer) -> Result<DashboardPage, AppError>;
    async fn launch(
        &self,
        viewer: &Viewer,
        request: LaunchRequest,
    ) -> Result<SessionView, AppError>;
    async fn session(&self, viewer: &Viewer, id: &str) -> Result<SessionView, AppError>;
    async fn session_readings(
        &self,
        viewer: &Viewer,
        id: &str,
    ) -> Result<SessionReadings, AppError>;
    async fn stop(&self, viewer: &Viewer, id: &str) -> Result<SessionView, AppError>;
    async fn heartbeat(
        &self,
        viewer: &Viewer,
        id: &str,
        beat: crate::domain::presence::Beat,
    ) -> Result<SessionView, AppError>;
    async fn extend(
        &self,
        viewer: &Viewer,
        id: &str,
        minutes: u32,
    ) -> Result<SessionView, AppError>;
}

/// The admin pages: users, credits, quotas, everyone's sessions, usage, the pool, settings.
#[async_trait::async_trait]
pub trait AdminBackend: Send + Sync + 'static {
    async fn admin_users(
        &self,
        viewer: &Viewer,
        query: &ListQuery,
    ) -> Result<Page<AdminUser>, AppError>;
    async fn admin_sessions(
        &self,
        viewer: &Viewer,
        query: &ListQuery,
    ) -> Result<Page<AdminSession>, AppError>;
    async fn admin_audit(
        &self,
        viewer: &Viewer,
        query: &ListQuery,
    ) -> Result<Page<AuditLine>, AppError>;
    async fn admin_usage(
        &self,
        viewer: &Viewer,
        query: &ListQuery,
    ) -> Result<Page<UsageRow>, AppError>;
    async fn admin_usage_days(
        &self,
        viewer: &Viewer,
        query: &ListQuery,
    ) -> Result<Vec<UsageDay>, AppError>;
    /// The pool tab, drawn (`crate::admin_pool_page`).
    async fn admin_pool_page(&self, viewer: &Viewer) -> Result<String, AppError>;
    fn admin_settings(
        &self,
        viewer: &Viewer,
    ) -> Result<Vec<crate::model::SettingsSection>, AppError>;
    async fn change_user(
        &self,
        viewer: &Viewer,
        user_id: &str,
        change: UserChange,
    ) -> Result<(), AppError>;
    /// Returns the new balance in milli-credits.
    async fn grant_credits(
        &self,
        viewer: &Viewer,
        user_id: &str,
        amount: &str,
        note: &str,
    ) -> Result<i64, AppError>;
    async fn admin_stop(&self, viewer: &Viewer, id: &str) -> Result<AdminSession, AppError>;
    async fn decline_credit_request(&self, viewer: &Viewer, user_id: &str) -> Result<(), AppError>;
    async fn add_user(
        &self,
        viewer: &Viewer,
        account: crate::model::NewAccount,
    ) -> Result<crate::model::MadePassword, AppError>;
    async fn reset_password(
        &self,
        viewer: &Viewer,
        user_id: &str,
    ) -> Result<crate::model::MadePassword, AppError>;
    /// A CSV file of accounts: its plan (`apply` false), or all of it applied.
    async fn bulk_users(
        &self,
        viewer: &Viewer,
        csv: &str,
        apply: bool,
    ) -> Result<crate::model::BulkUsers, AppError>;
    async fn open_credit_requests(&self, viewer: &Viewer) -> Result<u32, AppError>;
    async fn delete_user(&self, viewer: &Viewer, user_id: &str) -> Result<(), AppError>;
    async fn undelete_user(&self, viewer: &Viewer, user_id: &str) -> Result<(), AppError>;
    async fn admin_open_editor(
        &self,
        viewer: &Viewer,
        id: &str,
    ) -> Result<crate::model::EditorAccess, AppError>;
    async fn set_user_quota(
        &self,
        viewer: &Viewer,
        user_id: &str,
        overrides: crate::domain::quota::Overrides,
    ) -> Result<crate::domain::quota::Limits, AppError>;
}

/// Promotions to the registry.
#[async_trait::async_trait]
pub trait PromotionsBackend: Send + Sync + 'static {
    async fn promote_file(
        &self,
        viewer: &Viewer,
        session_id: &str,
        request: crate::domain::promotion::PromotionRequest,
    ) -> Result<PromotionView, AppError>;
    async fn promotions(&self, viewer: &Viewer) -> Result<Promotions, AppError>;
    async fn admin_promotions(
        &self,
        viewer: &Viewer,
        query: &ListQuery,
    ) -> Result<Page<PromotionView>, AppError>;
    async fn decide_promotion(
        &self,
        viewer: &Viewer,
        id: &str,
        decision: crate::domain::promotion::Decision,
        reason: Option<String>,
    ) -> Result<PromotionView, AppError>;
}

/// The approved editor images.
#[async_trait::async_trait]
pub trait ImagesBackend: Send + Sync + 'static {
    async fn admin_images(&self, viewer: &Viewer) -> Result<crate::model::AdminImages, AppError>;
    async fn add_image(
        &self,
        viewer: &Viewer,
        image: crate::domain::images::NewImage,
    ) -> Result<crate::model::ImageView, AppError>;
    async fn set_image_state(
        &self,
        viewer: &Viewer,
        id: &str,
        state: crate::domain::images::ImageState,
    ) -> Result<crate::model::ImageView, AppError>;
}

/// The shared datasets.
#[async_trait::async_trait]
pub trait DatasetsBackend: Send + Sync + 'static {
    async fn admin_datasets(
        &self,
        viewer: &Viewer,
    ) -> Result<crate::domain::datasets::AdminDatasets, AppError>;
    async fn add_dataset(
        &self,
        viewer: &Viewer,
        dataset: crate::domain::datasets::NewDataset,
    ) -> Result<crate::domain::datasets::DatasetView, AppError>;
    async fn change_dataset(
        &self,
        viewer: &Viewer,
        id: &str,
        change: crate::domain::datasets::DatasetChange,
    ) -> Result<crate::domain::datasets::DatasetView, AppError>;
    async fn remove_dataset(&self, viewer: &Viewer, id: &str) -> Result<(), AppError>;
}

pub(super) fn backend() -> Result<Arc<dyn Backend>, AppError> {
    use_context::<Arc<dyn Backend>>().ok_or(AppError::Internal)
}

fn parts() -> Result<http::request::Parts, AppError> {
    use_context::<http::request::Parts>().ok_or(AppError::Internal)
}

pub(super) async fn current_viewer() -> Result<Option<Viewer>, AppError> {
    backend()?.viewer(&parts()?).await
}

/// The signed-in viewer, once free to act: a sign-in whose password an admin set (or the first
/// run printed) may do nothing but change it.
pub(super) async fn require_viewer() -> Result<Viewer, AppError> {
    current_viewer()
        .await?
        .ok_or(AppError::Unauthenticated)?
        .settled()
}

/// The signed-in viewer, even one who must change their password first.
pub(super) async fn signed_in_viewer() -> Result<Viewer, AppError> {
    current_viewer().await?.ok_or(AppError::Unauthenticated)
}

/// A form the browser posted itself (before the page's wasm took over), rather than a call
/// from the page's code: the browser wants a page back, not data.
pub(super) fn is_plain_form_post() -> bool {
    parts().is_ok_and(|parts| {
        parts
            .headers
            .get(http::header::ACCEPT)
            .and_then(|accept| accept.to_str().ok())
            .is_some_and(|accept| accept.contains("text/html"))
    })
}

pub(super) async fn login(name: &str, password: &str) -> Result<Viewer, AppError> {
    backend()?.login(&parts()?, name, password).await
}

pub(super) async fn logout() -> Result<(), AppError> {
    backend()?.logout(&parts()?).await
}

pub(super) async fn tokens_page() -> Result<TokensPage, AppError> {
    backend()?.tokens_page(&parts()?).await
}

pub(super) async fn make_token(form: TokenForm) -> Result<NewToken, AppError> {
    backend()?.make_token(&parts()?, form).await
}

pub(super) async fn admin_access() -> Result<crate::model::AdminAccess, AppError> {
    backend()?.admin_access(&parts()?).await
}

pub(super) async fn confirm_admin(password: &str) -> Result<(), AppError> {
    backend()?.confirm_admin(&parts()?, password).await
}
