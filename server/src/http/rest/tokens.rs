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
    Ok(Json(state.service.tokens(&viewer).await?))
}

/// With a sign-in cookie, the password too: editors are served from our origin, and a script in
/// an editor's page must not be able to mint a lasting credential from the browser's cookie.
pub(super) async fn create_token(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    headers: http::HeaderMap,
    session: tower_sessions::Session,
    ApiJson(request): ApiJson<TokenRequest>,
) -> ApiResult<(StatusCode, Json<crate::service::NewToken>)> {
    let confirmed_at = crate::identity::auth::sso_confirmed_at(&session).await;
    state
        .service
        .confirm_token_maker(
            &viewer,
            crate::identity::auth::bearer_token(&headers).is_some(),
            request.password.as_deref(),
            confirmed_at,
        )
        .await?;
    // A sign-in that proved itself just now: an admin's may give the new token `admin`. A
    // token only ever grants what it has.
    let viewer = if crate::identity::auth::bearer_token(&headers).is_some() {
        viewer
    } else {
        crate::service::confirmed(viewer)
    };
    let token = state
        .service
        .create_token(&viewer, &request.label, request.scopes, request.days)
        .await?;
    Ok((StatusCode::CREATED, Json(token)))
}

pub(super) async fn revoke_token(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<StatusCode> {
    state.service.revoke_token(&viewer, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
