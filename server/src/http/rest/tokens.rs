//! `/api/v1/tokens…`: a user's API tokens.

use super::{ApiJson, ApiResult, ApiUser, PathId};
use crate::http::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TokenRequest {
    label: String,
    /// Days until it expires; never when left out.
    days: Option<u32>,
    /// What it may do; when left out, what the caller may.
    scopes: Option<app::domain::scope::Scopes>,
    /// The account's password, asked of a browser's sign-in (not of a token).
    password: Option<String>,
}

pub(super) async fn list_tokens(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<Vec<crate::store::TokenRecord>>> {
    Ok(Json(state.service.accounts.tokens(&viewer).await?))
}

/// With a sign-in cookie, the password too: editors are served from our origin, and a script in
/// an editor's page must not be able to mint a lasting credential from the browser's cookie.
pub(super) async fn create_token(
    State(state): State<AppState>,
    // First, as every route of the API: no body is read for a caller who is nobody.
    _: ApiUser,
    headers: http::HeaderMap,
    session: tower_sessions::Session,
    ApiJson(request): ApiJson<TokenRequest>,
) -> ApiResult<(StatusCode, Json<crate::service::NewToken>)> {
    let auth = crate::http::request_auth(&state.service, &headers, Some(&session)).await?;
    let token = state
        .service
        .accounts
        .make_token(
            &auth,
            &request.label,
            request.scopes,
            request.days,
            request.password.as_deref(),
        )
        .await?;
    Ok((StatusCode::CREATED, Json(token)))
}

pub(super) async fn revoke_token(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<StatusCode> {
    state.service.accounts.revoke_token(&viewer, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
