//! Requests the proxy answers itself instead of the editor, once the route is known.
//!
//! For the owner's browser: the editor alone in its tab when asked for (`alone`); a tab's own
//! navigation into the editor, sent to the session page that frames it; the editor's own Shut
//! Down, which stops the session through us. For anyone: `/s/<id>` gains its slash.

use super::alone;
use super::headers::SEC_FETCH_DEST;
use super::respond::json_error;
use super::route::Routed;
use crate::http::AppState;
use crate::identity::auth::Caller;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::header;
use http::request::Parts;

/// Our own answer to `req`, if it is not the editor's to give.
pub(super) async fn detour(
    state: &AppState,
    caller: &Caller,
    req: &Parts,
    routed: &Routed<'_>,
) -> Option<Response> {
    let Routed {
        session_id, tail, ..
    } = *routed;
    let owner = routed.admin_until.is_none();
    let browser = owner && !caller.by_token;
    // The owner asked for the editor alone in its tab (`alone`): remembered for this
    // session's editor, then there.
    if browser
        && req.method == http::Method::GET
        && let Some(place) = alone::requested(session_id, tail, req.uri.query())
    {
        let cookie = alone::cookie(session_id, state.service.config().secure_cookies);
        return Some(
            (
                StatusCode::SEE_OTHER,
                [(header::LOCATION, place), (header::SET_COOKIE, cookie)],
            )
                .into_response(),
        );
    }
    // The owner's own tab, not the page's frame, went into the editor (marimo opens new
    // notebooks so, a link does): sent to the session page, which frames that place with
    // the toolbar, the countdowns and the presence that keeps the session alive; unless
    // they asked for the editor alone.
    if browser && is_tab_navigation(req) && !alone::chosen(&req.headers) {
        let tail = match req.uri.query() {
            Some(query) => format!("{tail}?{query}"),
            None => tail.to_string(),
        };
        let location = app::domain::paths::session_page_for(session_id, &tail);
        return Some((StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response());
    }
    // The editor's own Shut Down ends the session through us: stopped, settled and
    // refunded like a Stop, which the page then shows; the editor never hears of it.
    if owner && req.method == http::Method::POST && is_shutdown(tail) {
        return Some(Box::pin(shut_down(state, caller, session_id)).await);
    }
    if tail.is_empty() {
        let query = req.uri.query().map(|q| format!("?{q}")).unwrap_or_default();
        let path = req.uri.path();
        return Some(
            (
                StatusCode::PERMANENT_REDIRECT,
                [(header::LOCATION, format!("{path}/{query}"))],
            )
                .into_response(),
        );
    }
    None
}

/// Stops the session as the editor's own Shut Down asked, answering as the editors expect.
async fn shut_down(state: &AppState, caller: &Caller, session_id: &str) -> Response {
    let viewer = caller.viewer();
    match state
        .service
        .sessions
        .stop_from_editor(&viewer, session_id)
        .await
    {
        Ok(_) => (
            StatusCode::OK,
            axum::Json(serde_json::json!({ "success": true })),
        )
            .into_response(),
        Err(e) => json_error(
            StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            e.code(),
            &e.to_string(),
        ),
    }
}

/// A browser tab's own navigation (typed, a link, `window.open`), not our page's frame nor a
/// script's request, and not a download (JupyterLab's `?download=1`), which must reach the editor.
fn is_tab_navigation(req: &Parts) -> bool {
    req.method == http::Method::GET
        && req
            .headers
            .get(SEC_FETCH_DEST)
            .is_some_and(|dest| dest.as_bytes() == b"document")
        && !req.uri.query().is_some_and(|q| q.contains("download="))
}

/// The editors' own "shut down the server": JupyterLab's and marimo's.
fn is_shutdown(tail: &str) -> bool {
    matches!(tail, "/api/shutdown" | "/api/kernel/shutdown")
}
