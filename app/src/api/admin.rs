//! The admin pages: users, credits, quotas, everyone's sessions, usage, the pool, settings.

use super::*;

#[server(endpoint = "admin_users", input = leptos::server_fn::codec::Json)]
pub async fn admin_users(query: ListQuery) -> Result<Page<AdminUser>, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_users(&viewer, &query).await
}

// JSON: a table's query may be all defaults, which a form encodes as nothing at all.

#[server(endpoint = "admin_sessions", input = leptos::server_fn::codec::Json)]
pub async fn admin_sessions(query: ListQuery) -> Result<Page<AdminSession>, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_sessions(&viewer, &query).await
}

// JSON: a table's query may be all defaults, which a form encodes as nothing at all.

#[server(endpoint = "admin_audit", input = leptos::server_fn::codec::Json)]
pub async fn admin_audit(query: ListQuery) -> Result<Page<AuditLine>, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_audit(&viewer, &query).await
}

// JSON: a table's query may be all defaults, which a form encodes as nothing at all.

#[server(endpoint = "admin_usage", input = leptos::server_fn::codec::Json)]
pub async fn admin_usage(query: ListQuery) -> Result<Page<UsageRow>, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_usage(&viewer, &query).await
}

// JSON: a table's query may be all defaults, which a form encodes as nothing at all.

#[server(endpoint = "admin_usage_days", input = leptos::server_fn::codec::Json)]
pub async fn admin_usage_days(query: ListQuery) -> Result<Vec<UsageDay>, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_usage_days(&viewer, &query).await
}

/// The pool tab, drawn: the pool map, the queue and each GPU's slots.
#[server(endpoint = "load_admin_pool")]
pub async fn load_admin_pool() -> Result<String, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_pool_page(&viewer).await
}

// JSON: a table's query may be all defaults, which a form encodes as nothing at all.

#[server(endpoint = "change_user", input = leptos::server_fn::codec::Json)]
pub async fn change_user(user_id: String, change: UserChange) -> Result<(), AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .change_user(&viewer, &user_id, change)
        .await
}

#[server(endpoint = "grant_credits")]
pub async fn grant_credits(user_id: String, amount: String, note: String) -> Result<i64, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .grant_credits(&viewer, &user_id, &amount, &note)
        .await
}

#[server(endpoint = "decline_credit_request")]
pub async fn decline_credit_request(user_id: String) -> Result<(), AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .decline_credit_request(&viewer, &user_id)
        .await
}

/// Adds a local account; the password to hand over comes back this once.
#[server(endpoint = "add_user", input = leptos::server_fn::codec::Json)]
pub async fn add_user(
    account: crate::model::NewAccount,
) -> Result<crate::model::MadePassword, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.add_user(&viewer, account).await
}

/// A CSV file of accounts to add and grant to (`crate::domain::bulk`): its plan, or every bad
/// line, when `apply` is false; else all of it, or nothing. Added accounts' passwords come back
/// this once.
#[server(endpoint = "bulk_users")]
pub async fn bulk_users(csv: String, apply: bool) -> Result<crate::model::BulkUsers, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.bulk_users(&viewer, &csv, apply).await
}

/// How many people wait for an answer to their ask for credits, for the Users tab's label.
#[server(endpoint = "open_credit_requests")]
pub async fn open_credit_requests() -> Result<u32, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.open_credit_requests(&viewer).await
}

/// A new password for another account, made by the server and shown this once.
#[server(endpoint = "reset_password")]
pub async fn reset_password(user_id: String) -> Result<crate::model::MadePassword, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.reset_password(&viewer, &user_id).await
}

#[server(endpoint = "delete_user")]
pub async fn delete_user(user_id: String) -> Result<(), AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.delete_user(&viewer, &user_id).await
}

#[server(endpoint = "undelete_user")]
pub async fn undelete_user(user_id: String) -> Result<(), AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.undelete_user(&viewer, &user_id).await
}

#[server(endpoint = "admin_stop")]
pub async fn admin_stop(id: String) -> Result<AdminSession, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_stop(&viewer, &id).await
}

#[server(endpoint = "admin_open_editor")]
pub async fn admin_open_editor(id: String) -> Result<crate::model::EditorAccess, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_open_editor(&viewer, &id).await
}

#[server(endpoint = "set_user_quota", input = leptos::server_fn::codec::Json)]
pub async fn set_user_quota(
    user_id: String,
    overrides: crate::domain::quota::Overrides,
) -> Result<crate::domain::quota::Limits, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .set_user_quota(&viewer, &user_id, overrides)
        .await
}

#[server(endpoint = "admin_settings")]
pub async fn admin_settings() -> Result<Vec<crate::model::SettingsSection>, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_settings(&viewer)
}
