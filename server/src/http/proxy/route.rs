//! The second phase: which editor the request is for, and whether this caller may reach it.
//!
//! Someone else's session answers exactly like one that does not exist, unless an admin chose to
//! enter it (audited) and the grant still runs; that is asked only for non-owners, so the owner's
//! path gains no query.

use super::respond::{internal_error, json_error};
use crate::http::AppState;
use crate::identity::auth::Caller;
use crate::service::routes::Route;
use axum::response::Response;
use http::StatusCode;
use std::sync::Arc;

/// Where a request goes, and on whose grant.
pub(super) struct Routed<'r> {
    pub route: Arc<Route>,
    /// Set when an admin enters another user's editor: until when their grant lets them.
    pub admin_until: Option<i64>,
    /// The session named by the path (`/s/<id>/…`).
    pub session_id: &'r str,
    /// The path after `/s/<id>`: empty, or beginning with `/`.
    pub tail: &'r str,
}

/// The route for `path` (`/s/<id>/…`) that `caller` may take, or the answer that refuses it.
pub(super) async fn route<'r>(
    state: &AppState,
    caller: &Caller,
    path: &'r str,
) -> Result<Routed<'r>, Response> {
    let rest = path.strip_prefix("/s/").unwrap_or_default();
    let (session_id, tail) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let mut found = state.service.access.route(session_id).await;
    if let Ok(None) = found {
        // Boxed, as rare: see `Service::route`.
        let wake = state
            .service
            .sessions
            .wake_parked(&caller.user.id, session_id, caller.by_token);
        found = match Box::pin(wake).await {
            Some(true) => state.service.access.route(session_id).await,
            Some(false) => return Err(parked(caller.by_token)),
            None => Ok(None),
        };
    }
    let route = match found {
        Ok(Some(route)) => route,
        Ok(None) => return Err(no_such_session()),
        Err(e) => {
            tracing::error!(error = %e, "proxy route");
            return Err(internal_error());
        }
    };
    let mut admin_until = None;
    // Someone else's session answers exactly like one that does not exist, unless an admin
    // chose to enter it (audited) and the grant still runs.
    if route.owner_id != caller.user.id {
        // Boxed, as rare: see `Service::route`.
        let entry = state
            .service
            .admin
            .admin_entry(caller, session_id, caller.by_token);
        match Box::pin(entry).await {
            Some(until) => admin_until = Some(until),
            None => return Err(no_such_session()),
        }
    }
    Ok(Routed {
        route,
        admin_until,
        session_id,
        tail,
    })
}

/// A parked session's editor is frozen. A script's call that could not wake it (its card is full)
/// may ask again in a few seconds: 503 with Retry-After. A browser's request does not wake it, and
/// is answered 409 instead: JupyterLab reads 503 from its own server as the server gone (as
/// JupyterHub answers for a stopped one) and shows a "Server Connection Error" dialog.
fn parked(by_script: bool) -> Response {
    let (status, retry_after) = match by_script {
        true => (StatusCode::SERVICE_UNAVAILABLE, Some("5")),
        false => (StatusCode::CONFLICT, None),
    };
    let mut answer = json_error(
        status,
        "parked",
        "this session is parked: its GPU slice went back to the pool while it had no work; it \
         resumes when you type in its page or a script calls it, once its slice is free",
    );
    if let Some(seconds) = retry_after {
        answer.headers_mut().insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static(seconds),
        );
    }
    answer
}

fn no_such_session() -> Response {
    json_error(StatusCode::NOT_FOUND, "not_found", "no such session")
}

/// The request's target at the editor: the same path and query (the editor knows its base URL),
/// or only what follows the prefix for editors that serve from "/".
pub(super) fn upstream_uri(route: &Route, original: &http::Uri, tail: &str) -> Option<http::Uri> {
    let path_and_query = if route.strip_prefix {
        let query = original
            .query()
            .map(|q| format!("?{q}"))
            .unwrap_or_default();
        format!("{tail}{query}").parse().ok()?
    } else {
        original.path_and_query()?.clone()
    };
    Some(http::Uri::from(path_and_query))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::editors::UpstreamAuth;
    #[test]
    fn upstream_targets_keep_or_strip_the_prefix() {
        let keep = Route::new(
            "s".into(),
            "u".into(),
            "127.0.0.1:9".into(),
            UpstreamAuth::Header("a", "b".into()),
            false,
            0,
        );
        let strip = Route::new(
            "s".into(),
            "u".into(),
            "unix:/run/e.sock".into(),
            UpstreamAuth::Header("a", "b".into()),
            true,
            0,
        );
        let original: http::Uri = "/s/abc/lab/tree?x=1&y=%20".parse().unwrap();
        assert_eq!(
            upstream_uri(&keep, &original, "/lab/tree").unwrap(),
            "/s/abc/lab/tree?x=1&y=%20"
        );
        assert_eq!(
            upstream_uri(&strip, &original, "/lab/tree").unwrap(),
            "/lab/tree?x=1&y=%20"
        );
    }
}
