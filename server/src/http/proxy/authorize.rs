//! The first phase: who is asking, and may they reach an editor at all.
//!
//! A request another site made a browser send is refused before anything is read; then the caller
//! comes from the bearer token or the sign-in cookie (the entry origin reads only its own cookie).
//! The token's scope is checked before the route is looked up, so that its scopes say nothing
//! about which sessions exist.

use super::respond::{cross_site_refused, internal_error, json_error, wants_html};
use crate::http::AppState;
use crate::identity::auth::Caller;
use app::domain::encode::{PATH, percent_encode};
use app::domain::scope::Scope;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::header;
use http::request::Parts;
use std::sync::Arc;

/// The caller of the request `req` heads, or the answer that refuses it. `upgrade`: it opens a WebSocket.
pub(super) async fn authorize(
    state: &AppState,
    entering: bool,
    req: &Parts,
    upgrade: bool,
) -> Result<Arc<Caller>, Response> {
    // Another site must not make a signed-in browser change things in the editor, or open its
    // kernels: editors trust us and skip their own cross-site checks for what we forward.
    if (!req.method.is_safe() || upgrade)
        && crate::identity::auth::from_foreign_origin(&req.headers)
    {
        return Err(cross_site_refused());
    }
    let accounts = &state.service.accounts;
    let caller = if entering {
        Box::pin(accounts.entry_caller(&req.headers)).await
    } else {
        accounts.caller(&req.headers).await
    };
    let caller = match caller {
        Ok(Some(caller)) => caller,
        Ok(None) => return Err(unauthenticated(entering, req)),
        Err(e) => {
            tracing::error!(error = %e, "proxy auth");
            return Err(internal_error());
        }
    };
    // Before the route: a token's scopes say nothing about which sessions exist.
    if !caller.scopes.allows(Scope::Access) {
        return Err(json_error(
            StatusCode::FORBIDDEN,
            "forbidden",
            "this token lacks the scope `access`, which reaching an editor takes",
        ));
    }
    Ok(caller)
}

/// The answer to a request that came with no credential: an anonymous browser's GET is sent to
/// sign in and come back; anything else gets 401.
#[cold]
fn unauthenticated(entering: bool, req: &Parts) -> Response {
    if entering {
        return json_error(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            crate::service::admin::ENTRY_REFUSED,
        );
    }
    if req.method == http::Method::GET && wants_html(&req.headers) {
        let next = req.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let location = format!("/login?next={}", percent_encode(next, PATH));
        return (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response();
    }
    json_error(
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
        "please sign in",
    )
}
