//! Typed server functions: the pages' door to the service layer.
//!
//! Each one is thin: find the backend and the viewer, call one service function.
//! The REST API in the server crate is the other door to the same functions.
//!
//! A server function is reached at a URL hashed from its module path (`app::api`) and the
//! build's `SERVER_FN_OVERRIDE_KEY`: they stay in this file so that the URLs do not move.
//! `Backend`, what they call, and the helpers that find it are in `backend.rs` (ssr only).

#[cfg(feature = "ssr")]
use crate::domain::launch::LaunchRequest;
use crate::domain::listing::{ListQuery, Page};
use crate::domain::usage::{SessionReadings, UsageDay};
use crate::error::AppError;
use crate::model::{
    AdminSession, AdminUser, AuditLine, DashboardPage, NewToken, PromotionView, Promotions,
    SessionView, TokensPage, UsageRow, UserChange, Viewer,
};
use leptos::prelude::*;

#[cfg(feature = "ssr")]
mod backend;

#[cfg(feature = "ssr")]
pub use backend::Backend;

#[server]
pub async fn whoami() -> Result<Option<Viewer>, AppError> {
    backend::current_viewer().await
}

#[server]
pub async fn login(
    name: String,
    password: String,
    next: Option<String>,
) -> Result<Viewer, AppError> {
    let viewer = backend::login(&name, &password).await?;
    // Signed in before the page's script had loaded: send the browser on as the page would.
    if backend::is_plain_form_post() {
        let next = next.filter(|n| crate::domain::paths::is_local_path(n));
        let to = if viewer.must_change_password {
            crate::domain::paths::after_password_change(next.as_deref())
        } else {
            next.unwrap_or_else(|| "/".into())
        };
        leptos_axum::redirect(&to);
    }
    Ok(viewer)
}

/// The single sign-on provider's name, when one is configured.
#[server]
pub async fn single_sign_on() -> Result<Option<String>, AppError> {
    Ok(backend::backend()?.single_sign_on())
}

/// The signed-in person's own new password (the current one confirms it); the only thing a
/// sign-in whose password an admin set may do.
#[server]
pub async fn change_password(current: String, new: String) -> Result<(), AppError> {
    let viewer = backend::signed_in_viewer().await?;
    backend::backend()?
        .change_password(&viewer, &current, &new)
        .await
}

#[server]
pub async fn logout() -> Result<(), AppError> {
    backend::logout().await?;
    if backend::is_plain_form_post() {
        leptos_axum::redirect("/login");
    }
    Ok(())
}

#[server]
pub async fn load_dashboard() -> Result<DashboardPage, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.dashboard(&viewer).await
}

#[server]
pub async fn launch(
    editor: String,
    slice_mib: u64,
    duration_minutes: u32,
    #[server(default)] image: Option<String>,
) -> Result<SessionView, AppError> {
    let viewer = backend::require_viewer().await?;
    let request = LaunchRequest {
        editor,
        slice_mib,
        duration_minutes,
        image,
    };
    backend::backend()?.launch(&viewer, request).await
}

#[server]
pub async fn get_session(id: String) -> Result<SessionView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.session(&viewer, &id).await
}

/// The session's readings of the last hour, for its sparklines.
#[server]
pub async fn load_session_readings(id: String) -> Result<SessionReadings, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.session_readings(&viewer, &id).await
}

#[server]
pub async fn stop_session(id: String) -> Result<SessionView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.stop(&viewer, &id).await
}

/// A visible page says the person is (`input`) or may be there; returns the session's new countdowns.
#[server]
pub async fn heartbeat(id: String, input: bool) -> Result<SessionView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.heartbeat(&viewer, &id, input).await
}

#[server]
pub async fn extend_session(id: String, minutes: u32) -> Result<SessionView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.extend(&viewer, &id, minutes).await
}

/// A new token as the tokens page asks for it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TokenForm {
    pub label: String,
    /// Days until it expires; never when left out.
    pub days: Option<u32>,
    pub scopes: crate::domain::scope::Scopes,
    /// The account's password, for accounts that have one.
    pub password: Option<String>,
}

#[server]
pub async fn load_tokens() -> Result<TokensPage, AppError> {
    backend::tokens_page().await
}

#[server]
pub async fn make_token(form: TokenForm) -> Result<NewToken, AppError> {
    backend::make_token(form).await
}

#[server]
pub async fn revoke_token(id: String) -> Result<(), AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.revoke_token(&viewer, &id).await
}

// ---- admin: each checks the role and the scope `admin` behind the backend ----

// JSON: a table's query may be all defaults, which a form encodes as nothing at all.
#[server(input = leptos::server_fn::codec::Json)]
pub async fn admin_users(query: ListQuery) -> Result<Page<AdminUser>, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_users(&viewer, &query).await
}

// JSON: a table's query may be all defaults, which a form encodes as nothing at all.
#[server(input = leptos::server_fn::codec::Json)]
pub async fn admin_sessions(query: ListQuery) -> Result<Page<AdminSession>, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_sessions(&viewer, &query).await
}

// JSON: a table's query may be all defaults, which a form encodes as nothing at all.
#[server(input = leptos::server_fn::codec::Json)]
pub async fn admin_audit(query: ListQuery) -> Result<Page<AuditLine>, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_audit(&viewer, &query).await
}

// JSON: a table's query may be all defaults, which a form encodes as nothing at all.
#[server(input = leptos::server_fn::codec::Json)]
pub async fn admin_usage(query: ListQuery) -> Result<Page<UsageRow>, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_usage(&viewer, &query).await
}

// JSON: a table's query may be all defaults, which a form encodes as nothing at all.
#[server(input = leptos::server_fn::codec::Json)]
pub async fn admin_usage_days(query: ListQuery) -> Result<Vec<UsageDay>, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_usage_days(&viewer, &query).await
}

/// The pool tab, drawn: the pool map, the queue and each GPU's slots.
#[server]
pub async fn load_admin_pool() -> Result<String, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_pool_page(&viewer).await
}

// JSON: a table's query may be all defaults, which a form encodes as nothing at all.
#[server(input = leptos::server_fn::codec::Json)]
pub async fn change_user(user_id: String, change: UserChange) -> Result<(), AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .change_user(&viewer, &user_id, change)
        .await
}

#[server]
pub async fn grant_credits(user_id: String, amount: String, note: String) -> Result<i64, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .grant_credits(&viewer, &user_id, &amount, &note)
        .await
}

/// Asks the admins for credits; a grant answers it.
#[server]
pub async fn ask_for_credits(
    amount: String,
    note: String,
) -> Result<crate::model::CreditRequest, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .ask_for_credits(&viewer, &amount, &note)
        .await
}

#[server]
pub async fn withdraw_credit_request() -> Result<(), AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.withdraw_credit_request(&viewer).await?;
    if backend::is_plain_form_post() {
        leptos_axum::redirect("/");
    }
    Ok(())
}

#[server]
pub async fn decline_credit_request(user_id: String) -> Result<(), AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .decline_credit_request(&viewer, &user_id)
        .await
}

/// Adds a local account; the password to hand over comes back this once.
#[server(input = leptos::server_fn::codec::Json)]
pub async fn add_user(
    account: crate::model::NewAccount,
) -> Result<crate::model::MadePassword, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.add_user(&viewer, account).await
}

/// A CSV file of accounts to add and grant to (`crate::domain::bulk`): its plan, or every bad
/// line, when `apply` is false; else all of it, or nothing. Added accounts' passwords come back
/// this once.
#[server]
pub async fn bulk_users(csv: String, apply: bool) -> Result<crate::model::BulkUsers, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.bulk_users(&viewer, &csv, apply).await
}

/// How many people wait for an answer to their ask for credits, for the Users tab's label.
#[server]
pub async fn open_credit_requests() -> Result<u32, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.open_credit_requests(&viewer).await
}

/// A new password for another account, made by the server and shown this once.
#[server]
pub async fn reset_password(user_id: String) -> Result<crate::model::MadePassword, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.reset_password(&viewer, &user_id).await
}

#[server]
pub async fn delete_user(user_id: String) -> Result<(), AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.delete_user(&viewer, &user_id).await
}

#[server]
pub async fn undelete_user(user_id: String) -> Result<(), AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.undelete_user(&viewer, &user_id).await
}

#[server]
pub async fn admin_stop(id: String) -> Result<AdminSession, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_stop(&viewer, &id).await
}

#[server]
pub async fn admin_open_editor(id: String) -> Result<crate::model::EditorAccess, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_open_editor(&viewer, &id).await
}

#[server(input = leptos::server_fn::codec::Json)]
pub async fn set_user_quota(
    user_id: String,
    overrides: crate::domain::quota::Overrides,
) -> Result<crate::domain::quota::Limits, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .set_user_quota(&viewer, &user_id, overrides)
        .await
}

#[server]
pub async fn admin_settings() -> Result<Vec<crate::model::SettingsSection>, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_settings(&viewer)
}

#[server]
pub async fn admin_access() -> Result<crate::model::AdminAccess, AppError> {
    backend::admin_access().await
}

#[server]
pub async fn confirm_admin(password: String) -> Result<(), AppError> {
    backend::confirm_admin(&password).await
}

// JSON: the request is a struct, and its tag may be absent.
#[server(input = leptos::server_fn::codec::Json)]
pub async fn promote_file(
    session_id: String,
    request: crate::domain::promotion::PromotionRequest,
) -> Result<PromotionView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .promote_file(&viewer, &session_id, request)
        .await
}

#[server]
pub async fn my_promotions() -> Result<Promotions, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.promotions(&viewer).await
}

#[server(input = leptos::server_fn::codec::Json)]
pub async fn admin_promotions(query: ListQuery) -> Result<Page<PromotionView>, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_promotions(&viewer, &query).await
}

#[server(input = leptos::server_fn::codec::Json)]
pub async fn decide_promotion(
    id: String,
    decision: crate::domain::promotion::Decision,
    reason: Option<String>,
) -> Result<PromotionView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .decide_promotion(&viewer, &id, decision, reason)
        .await
}

#[server]
pub async fn admin_images() -> Result<crate::model::AdminImages, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_images(&viewer).await
}

#[server(input = leptos::server_fn::codec::Json)]
pub async fn add_image(
    image: crate::domain::images::NewImage,
) -> Result<crate::model::ImageView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.add_image(&viewer, image).await
}

#[server]
pub async fn admin_datasets() -> Result<crate::domain::datasets::AdminDatasets, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_datasets(&viewer).await
}

#[server(input = leptos::server_fn::codec::Json)]
pub async fn add_dataset(
    dataset: crate::domain::datasets::NewDataset,
) -> Result<crate::domain::datasets::DatasetView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.add_dataset(&viewer, dataset).await
}

#[server(input = leptos::server_fn::codec::Json)]
pub async fn change_dataset(
    id: String,
    change: crate::domain::datasets::DatasetChange,
) -> Result<crate::domain::datasets::DatasetView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .change_dataset(&viewer, &id, change)
        .await
}

#[server(input = leptos::server_fn::codec::Json)]
pub async fn remove_dataset(id: String) -> Result<(), AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.remove_dataset(&viewer, &id).await
}

#[server(input = leptos::server_fn::codec::Json)]
pub async fn set_image_state(
    id: String,
    state: crate::domain::images::ImageState,
) -> Result<crate::model::ImageView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .set_image_state(&viewer, &id, state)
        .await
}
