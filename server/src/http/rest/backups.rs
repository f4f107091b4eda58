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
    headers: axum::http::HeaderMap,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Response> {
    let done = state.service.backups.back_up_now(&viewer).await;
    if is_form(&headers) {
        return Ok(form_answer(done.map(|d| {
            format!(
                "Your workspace is backed up: snapshot {} ({} files).",
                d.snapshot_id.unwrap_or_default(),
                d.files.unwrap_or(0)
            )
        })));
    }
    Ok((StatusCode::CREATED, Json(done?)).into_response())
}

async fn restore(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    if is_form(&headers) {
        // The dashboard's Restore: `path=` from its form, an empty one for everything.
        let path = form_field(&body, "path").filter(|p| !p.trim().is_empty());
        let done = state
            .service
            .backups
            .restore(&viewer, &id, path.as_deref())
            .await;
        return Ok(form_answer(done.map(|d| {
            format!(
                "Restored {} into the folder {} of your workspace; your other files are as they were.",
                d.path.as_deref().unwrap_or("everything"),
                d.folder
            )
        })));
    }
    let body = restore_body(&body)?;
    let done = state
        .service
        .backups
        .restore(&viewer, &id, body.path.as_deref())
        .await?;
    Ok((StatusCode::CREATED, Json(done)).into_response())
}

/// A plain form's post (the dashboard's buttons), answered with a page rather than JSON.
fn is_form(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"))
}

/// `name`'s value in a URL-encoded form body.
fn form_field(body: &[u8], name: &str) -> Option<String> {
    std::str::from_utf8(body).ok()?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (key == name).then(|| {
            percent_encoding::percent_decode_str(&value.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}

/// A small page saying how a form's action went, with the way back to the dashboard.
fn form_answer(outcome: Result<String, AppError>) -> Response {
    let (status, title, words) = match outcome {
        Ok(words) => (StatusCode::OK, "Done", words),
        Err(e) => (
            StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            "Not done",
            e.to_string(),
        ),
    };
    let escape = |text: &str| {
        text.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    let page = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title} · GPU Sandbox</title>\
         <meta name=\"viewport\" content=\"width=device-width\"></head><body><main>\
         <h1>{title}</h1><p role=\"status\">{}</p><p><a href=\"/#workspace\">Back to the dashboard</a></p>\
         </main></body></html>",
        escape(&words)
    );
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8")],
        page,
    )
        .into_response()
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
            // Said before the bytes: a cut download cannot say why afterwards.
            (
                axum::http::HeaderName::from_static("x-export-limits"),
                export.limits,
            ),
        ],
        axum::body::Body::from_stream(export.body),
    )
        .into_response())
}
