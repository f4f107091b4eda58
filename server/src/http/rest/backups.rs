//! `/api/v1/workspace/export` (the caller's workspace, or a folder of it, as a streamed
//! `.tar.gz`), `/api/v1/backups…` (the caller's snapshots, a backup now, a restore into
//! `restored-<date>/`) and the admins' equivalents under `/api/v1/admin/users/{id}/backups…`;
//! the rules are in `service::backups`.

use super::{ApiError, ApiPath, ApiResult, ApiUser, PathId};
use crate::http::AppState;
use app::error::AppError;
use app::model::{BackupStatus, BackupsView, RestoreDone};
use axum::Json;
use axum::Router;
use axum::extract::{FromRequestParts, Query, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

/// The routes of this file, merged into `/api/v1`.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/workspace/export", get(export))
        .route("/backups", get(list).post(back_up))
        .route("/backups/{id}/restore", post(restore))
        .route("/admin/backups", get(admin_status))
        .route(
            "/admin/users/{id}/backups",
            get(admin_list).post(admin_back_up),
        )
        .route(
            "/admin/users/{id}/backups/{snapshot}/restore",
            post(admin_restore),
        )
}

/// `{path?}`: what to restore, relative to the workspace; no body or `{}`: all of it.
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RestoreBody {
    #[serde(default)]
    path: Option<String>,
}

fn restore_body(body: &[u8]) -> Result<RestoreBody, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(RestoreBody::default());
    }
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|_| {
        ApiError(AppError::Invalid(
            "the body is not JSON: send {\"path\": \"notebooks/a.ipynb\"}, or nothing to restore everything".into(),
        ))
    })?;
    super::object_of(value).map_err(ApiError)
}

async fn list(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<BackupsView>> {
    Ok(Json(state.service.backups.backups(&viewer).await?))
}

async fn back_up(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<(StatusCode, Json<BackupStatus>)> {
    let done = state.service.backups.back_up_now(&viewer).await?;
    Ok((StatusCode::CREATED, Json(done)))
}

async fn restore(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
    body: axum::body::Bytes,
) -> ApiResult<(StatusCode, Json<RestoreDone>)> {
    let body = restore_body(&body)?;
    let done = state
        .service
        .backups
        .restore(&viewer, &id, body.path.as_deref())
        .await?;
    Ok((StatusCode::CREATED, Json(done)))
}

async fn admin_status(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<Vec<BackupStatus>>> {
    Ok(Json(
        state.service.backups.admin_backup_status(&viewer).await?,
    ))
}

async fn admin_list(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(user): PathId,
) -> ApiResult<Json<BackupsView>> {
    Ok(Json(
        state.service.backups.admin_backups(&viewer, &user).await?,
    ))
}

async fn admin_back_up(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(user): PathId,
) -> ApiResult<(StatusCode, Json<BackupStatus>)> {
    let done = state.service.backups.admin_back_up(&viewer, &user).await?;
    Ok((StatusCode::CREATED, Json(done)))
}

async fn admin_restore(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiPath((user, id)): ApiPath<(String, String)>,
    body: axum::body::Bytes,
) -> ApiResult<(StatusCode, Json<RestoreDone>)> {
    let body = restore_body(&body)?;
    let done = state
        .service
        .backups
        .admin_restore(&viewer, &user, &id, body.path.as_deref())
        .await?;
    Ok((StatusCode::CREATED, Json(done)))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PathQuery {
    path: Option<String>,
}

/// `?path=…`; an unreadable query string is a clear 400.
struct ApiPathQuery(Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for ApiPathQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<PathQuery>::from_request_parts(parts, state).await {
            Ok(Query(query)) => Ok(ApiPathQuery(query.path)),
            Err(_) => Err(ApiError(AppError::Invalid(
                "the query string takes one key, `path`: a file or folder of your workspace".into(),
            ))),
        }
    }
}

/// Streams the export as it is made.
async fn export(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiPathQuery(path): ApiPathQuery,
) -> ApiResult<Response> {
    let export = state
        .service
        .backups
        .export(&viewer, path.as_deref())
        .await?;
    Ok((
        [
            (
                axum::http::header::CONTENT_TYPE,
                "application/gzip".to_string(),
            ),
            (
                axum::http::header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{}\"", export.file_name),
            ),
            (axum::http::header::CACHE_CONTROL, "no-store".to_string()),
        ],
        axum::body::Body::from_stream(export.body),
    )
        .into_response())
}
