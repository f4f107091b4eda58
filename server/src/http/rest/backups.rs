//! `/api/v1/workspace/export`: the caller's workspace, or a folder of it, as a streamed
//! `.tar.gz`; the rules are in `service::backups`.

use super::{ApiError, ApiResult, ApiUser};
use crate::http::AppState;
use app::error::AppError;
use axum::Router;
use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The routes of this file, merged into `/api/v1`.
pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/workspace/export", get(export))
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
