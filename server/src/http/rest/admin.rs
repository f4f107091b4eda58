//! `/api/v1/admin/…` (role admin and the scope `admin`; see `crate::service::admin`).

use super::{ApiError, ApiJson, ApiQuery, ApiResult, ApiUser, PathId, images, promotions};
use crate::http::AppState;
use app::error::AppError;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;

pub(super) fn admin_router() -> Router<AppState> {
    Router::new()
        .route("/users", get(admin_users).post(admin_add_user))
        .route("/users/bulk", post(admin_bulk_users))
        .route("/credit-requests", get(admin_open_credit_requests))
        .route("/users.csv", get(super::export::users_csv))
        .route("/sessions.csv", get(super::export::sessions_csv))
        .route("/usage.csv", get(super::export::usage_csv))
        .route("/audit.csv", get(super::export::audit_csv))
        .route(
            "/users/{id}",
            axum::routing::patch(admin_change_user).delete(admin_delete_user),
        )
        .route("/users/{id}/password", post(admin_reset_password))
        .route("/users/{id}/undelete", post(admin_undelete_user))
        .route("/users/{id}/credits", post(admin_grant))
        .route(
            "/users/{id}/credit-request",
            axum::routing::delete(admin_decline_credit_request),
        )
        .route(
            "/users/{id}/quota",
            axum::routing::put(admin_set_quota).patch(admin_change_quota),
        )
        .route("/sessions", get(admin_sessions))
        .route("/sessions/{id}", get(admin_session).delete(admin_stop))
        .route("/sessions/{id}/access", post(admin_open_editor))
        .route("/pool", get(admin_pool))
        .route("/queue", get(admin_queue))
        .route("/audit", get(admin_audit))
        .route("/usage", get(admin_usage))
        .route("/usage/days", get(admin_usage_days))
        .route("/settings", get(admin_settings))
        .route("/promotions", get(promotions::admin_promotions))
        .route(
            "/images",
            get(images::admin_images).post(images::admin_add_image),
        )
        .route(
            "/images/{id}",
            axum::routing::patch(images::admin_set_image),
        )
        .route(
            "/images/{id}/scans",
            post(images::admin_post_scan).layer(axum::extract::DefaultBodyLimit::max(
                crate::service::images::MAX_REPORT_BYTES,
            )),
        )
        .route(
            "/promotions/{id}/{decision}",
            post(promotions::admin_decide_promotion),
        )
}

pub(super) async fn admin_users(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiQuery(query): ApiQuery,
) -> ApiResult<Json<app::domain::listing::Page<app::model::AdminUser>>> {
    Ok(Json(
        state.service.admin.admin_users(&viewer, &query).await?,
    ))
}

pub(super) async fn admin_change_user(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
    ApiJson(change): ApiJson<app::model::UserChange>,
) -> ApiResult<StatusCode> {
    state
        .service
        .admin
        .change_user(&viewer, &id, &change)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `201` with the password to hand over (shown this once).
pub(super) async fn admin_add_user(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiJson(account): ApiJson<app::model::NewAccount>,
) -> ApiResult<(StatusCode, Json<app::model::MadePassword>)> {
    let made = state.service.admin.admin_add_user(&viewer, account).await?;
    Ok((StatusCode::CREATED, Json(made)))
}

/// A CSV file of accounts (`app::domain::bulk`): `{"csv": "...", "dry_run": true}` answers the
/// plan, or every bad line; without `dry_run` it adds and grants all of it, or nothing (400
/// naming every bad line). JSON rather than a `text/csv` body: a form of another site cannot
/// send it with an admin's cookie.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BulkBody {
    csv: String,
    #[serde(default)]
    dry_run: bool,
}

pub(super) async fn admin_bulk_users(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiJson(body): ApiJson<BulkBody>,
) -> ApiResult<(StatusCode, Json<app::model::BulkUsers>)> {
    let answer = state
        .service
        .admin
        .bulk_users(&viewer, &body.csv, !body.dry_run)
        .await?;
    let status = if answer.applied {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(answer)))
}

#[derive(Serialize)]
pub(super) struct OpenAsks {
    open: u32,
}

/// How many people wait for an answer to their ask for credits.
pub(super) async fn admin_open_credit_requests(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<OpenAsks>> {
    Ok(Json(OpenAsks {
        open: state.service.admin.open_credit_requests(&viewer).await?,
    }))
}

/// A new password made by the server, shown this once; changed at the next sign-in.
pub(super) async fn admin_reset_password(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<Json<app::model::MadePassword>> {
    Ok(Json(
        state
            .service
            .admin
            .admin_reset_password(&viewer, &id)
            .await?,
    ))
}

pub(super) async fn admin_delete_user(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<StatusCode> {
    state.service.admin.admin_delete_user(&viewer, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Brings a deleted account back while its storage is still kept.
pub(super) async fn admin_undelete_user(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<StatusCode> {
    state
        .service
        .admin
        .admin_undelete_user(&viewer, &id)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GrantBody {
    /// Credits as text or a number: "10", 2.5; negative takes back.
    amount: serde_json::Value,
    #[serde(default)]
    note: String,
}

/// An amount of credits sent as text or a number: "10", 2.5.
pub(super) fn amount_text(amount: &serde_json::Value) -> ApiResult<String> {
    match amount {
        serde_json::Value::String(text) => Ok(text.clone()),
        serde_json::Value::Number(number) => Ok(number.to_string()),
        _ => Err(ApiError(AppError::Invalid(
            "`amount` is a number of credits, e.g. 10 or \"2.5\"".into(),
        ))),
    }
}

/// Declines the user's open ask for credits without granting.
pub(super) async fn admin_decline_credit_request(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<StatusCode> {
    state
        .service
        .admin
        .decline_credit_request(&viewer, &id)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Serialize)]
pub(super) struct Granted {
    /// Milli-credits.
    balance: i64,
    /// The balance in credits, as the pages write it.
    credits: String,
}

pub(super) async fn admin_grant(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
    ApiJson(body): ApiJson<GrantBody>,
) -> ApiResult<Json<Granted>> {
    let amount = amount_text(&body.amount)?;
    let balance = state
        .service
        .admin
        .grant_credits(Some(&viewer), &id, &amount, &body.note)
        .await?;
    Ok(Json(Granted {
        balance,
        credits: app::domain::credits::format(balance),
    }))
}

pub(super) async fn admin_sessions(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiQuery(query): ApiQuery,
) -> ApiResult<Json<app::domain::listing::Page<app::model::AdminSession>>> {
    Ok(Json(
        state.service.admin.admin_sessions(&viewer, &query).await?,
    ))
}

pub(super) async fn admin_session(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<Json<app::model::AdminSession>> {
    Ok(Json(state.service.admin.admin_session(&viewer, &id).await?))
}

pub(super) async fn admin_open_editor(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<Json<app::model::EditorAccess>> {
    Ok(Json(
        state.service.admin.admin_open_editor(&viewer, &id).await?,
    ))
}

pub(super) async fn admin_stop(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<Json<app::model::AdminSession>> {
    Ok(Json(state.service.admin.admin_stop(&viewer, &id).await?))
}

pub(super) async fn admin_pool(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<Vec<app::model::AdminGpu>>> {
    Ok(Json(state.service.admin.admin_pool(&viewer).await?))
}

pub(super) async fn admin_queue(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<Vec<app::model::AdminQueued>>> {
    Ok(Json(state.service.admin.admin_queue(&viewer).await?))
}

pub(super) async fn admin_audit(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiQuery(query): ApiQuery,
) -> ApiResult<Json<app::domain::listing::Page<app::model::AuditLine>>> {
    Ok(Json(
        state.service.admin.admin_audit(&viewer, &query).await?,
    ))
}

pub(super) async fn admin_usage(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiQuery(query): ApiQuery,
) -> ApiResult<Json<app::domain::listing::Page<app::model::UsageRow>>> {
    Ok(Json(
        state.service.admin.admin_usage(&viewer, &query).await?,
    ))
}

/// Everyone's usage per day over the period `?filter=7d|30d|90d` (default 30 days).
pub(super) async fn admin_usage_days(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiQuery(query): ApiQuery,
) -> ApiResult<Json<Vec<app::domain::usage::UsageDay>>> {
    Ok(Json(
        state
            .service
            .admin
            .admin_usage_days(&viewer, &query)
            .await?,
    ))
}

/// A user's quota overrides; each left out (or null) goes back to the configured default.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct QuotaBody {
    #[serde(default)]
    max_sessions: Option<u32>,
    #[serde(default)]
    max_gpu_mib: Option<u64>,
    #[serde(default)]
    max_minutes: Option<u32>,
    #[serde(default)]
    max_disk_mib: Option<u64>,
}

pub(super) async fn admin_set_quota(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
    ApiJson(body): ApiJson<QuotaBody>,
) -> ApiResult<Json<app::domain::quota::Limits>> {
    let overrides = app::domain::quota::Overrides {
        max_sessions: body.max_sessions,
        max_gpu_mib: body.max_gpu_mib,
        max_minutes: body.max_minutes,
        max_disk_mib: body.max_disk_mib,
    };
    Ok(Json(
        state
            .service
            .admin
            .set_user_quota(&viewer, &id, &overrides)
            .await?,
    ))
}

pub(super) async fn admin_change_quota(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
    ApiJson(change): ApiJson<app::domain::quota::OverridesChange>,
) -> ApiResult<Json<app::domain::quota::Limits>> {
    Ok(Json(
        state
            .service
            .admin
            .change_user_quota(&viewer, &id, change)
            .await?,
    ))
}

pub(super) async fn admin_settings(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<Vec<app::model::SettingsSection>>> {
    Ok(Json(state.service.admin.admin_settings(&viewer)?))
}
