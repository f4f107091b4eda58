//! Our reverse proxy: `/s/<id>/…` reaches the editor of session `<id>`, for its owner only (and an
//! admin who chose to enter it, audited, while that lasts). Requests come from the connection's
//! `Front` (`http`), past the router.
//!
//! - A state-changing request, or a WebSocket open, that a browser sent from another origin is
//!   refused (403 `cross_site`, see `identity::auth::from_foreign_origin`): the editors trust what
//!   we forward and skip their own XSRF and origin checks.
//! - The caller comes from the bearer token or the sign-in cookie (cached for 5 s, so the hot path
//!   makes no query). An anonymous browser's GET is sent to `/login?next=…`, anything else
//!   anonymous gets 401. A token must carry the scope `access`, checked before the route is looked
//!   up, so that its scopes say nothing about which sessions exist.
//! - Routes (`service::routes`) are an in-memory table per server, filled from the database on a
//!   miss, so any replica can serve any session. Another user's session answers 404 exactly as a
//!   missing one, unless the caller is an admin with a running grant who came with a bearer token
//!   (`Admin::admin_entry`, asked only for non-owners, so the owner's path gains no query). Every
//!   background tick drops the routes whose session is no longer ready or whose editor moved
//!   (`forget_stale_routes`, one query), and a request that cannot reach the editor drops its
//!   route, so a session another replica stopped is not forwarded to.
//! - Every request and every chunk of upgraded traffic marks the session active: an atomic
//!   timestamp on the route, written to the database on each background tick. A token's traffic is
//!   also API traffic (`last_api_at`); an admin's counts not at all, so looking in never keeps a
//!   GPU from the reaper.
//! - Headers (`headers`): hop-by-hop headers, our cookie and our bearer token go; the editor's own
//!   credential comes in (Jupyter: `Authorization: token …`; marimo: `Authorization: Bearer …`;
//!   code-server: its session cookie, the argon2 hash it was started with), made into a header
//!   value once per route. `Host` is kept, so Jupyter's origin checks and `frame-ancestors 'self'`
//!   hold. `X-Forwarded-For` is the client's address; `X-Forwarded-Proto` says `https` only when
//!   the request did (a TLS ingress), else `http`. Answers are confined to the session and get
//!   `X-Frame-Options: SAMEORIGIN` and `Content-Security-Policy: frame-ancestors 'self'`.
//! - Bodies stream both ways over an HTTP/1 connection that the request's own task drives
//!   ([`crate::net::upstream`]). An editor that has not answered (status and headers) within
//!   `proxy.answer_timeout_seconds` (120 s by default) of the request's last byte, each chunk of an
//!   upload moving the deadline, gets the browser a 504 `editor_timeout`, so a hung editor cannot
//!   hold the browser's connections to our pages; an upload that stops arriving for as long is
//!   the client's doing, and gets 408 `request_timeout`. The deadline is the connection's, since
//!   its requests take turns.
//!
//! WebSockets (any upgrade) get a connection of their own to the editor and are spliced byte for
//! byte after the editor's 101 ([`crate::net::relay`]), so frames, subprotocols and extensions pass
//! untouched. The relay stays on its connection's serving thread and keeps the connection's place
//! under the cap; one session may hold at most `proxy.max_websockets_per_session` (64 by default;
//! 429 `too_many_websockets` past it), so one page or script cannot take every place. At most one
//! connection per two cores busy-polls at a time, none on a single core.
//!
//! An open WebSocket is checked again. The credential it was opened with is kept, and the relay
//! ends when that credential no longer stands for the session's owner (for an admin who entered:
//! for an admin acting as one, and while the grant runs): at once when this server forgets that
//! user or that sign-in (a lock, a logout, a revoked token; only the sockets standing on it check),
//! and within 10 s when another replica did (a periodic re-check, each connection at its own
//! phase). A failing database keeps the connection open, the user's work being worth more than a
//! few seconds of doubt. The server's shutdown ends relays too, so the drain does not wait for
//! them.
//!
//! The per-request path is kept short: header names are constants, the headers to remove are found
//! in one pass over those present, and the database's futures (cache misses, an admin's grant) are
//! boxed so each request's own future stays small. `bench/instructions.py` counts instructions per
//! request against nginx's (BENCHMARKS.md, section 7: 43,223 against about 24,800).
//!
//! A request goes through named phases, each in a function of its own that hands the next what
//! it learned in one `Exchange`: `authorize` (the caller), `route` (the editor, and the answers
//! we give ourselves: `detour`), `rewrite` the request, `send` it, `splice` an upgrade, or
//! `respond` (and the secret `scrubbed`), each in the file of its name.

mod alone;
mod authorize;
mod detour;
mod headers;
mod respond;
mod rewrite;
mod route;
mod secret;
mod send;
mod upgrade;

use headers::*;
pub(crate) use respond::cross_site_refused;
use respond::json_error;

use crate::http::AppState;
use crate::identity::auth::Caller;
use crate::service::routes::Route;
use axum::body::Body;
use axum::response::Response;
use http::header::{self, HeaderValue};
use http::{Request, StatusCode};
use std::sync::Arc;
use std::time::Duration;

/// The client connection a request came on.
#[derive(Clone, Copy)]
pub struct Client<'a> {
    /// The client's address, sent on to the editor.
    pub forwarded_for: Option<&'a HeaderValue>,
    /// The connection's deadline for the editor's answer (requests on it take turns).
    pub answer: &'a crate::net::deadline::Deadline,
    /// The connection's place under the cap, which a WebSocket keeps while it lasts.
    pub slot: Option<&'a crate::http::ConnectionSlot>,
    /// Sent to the entry origin (`crate::http::entry`): only an entry token counts there.
    pub entering: bool,
}

/// One request on its way to an editor, once its caller and route are known: what the phases
/// after [`route`](route::route) read.
struct Exchange<'a> {
    state: &'a AppState,
    client: Client<'a>,
    caller: Arc<Caller>,
    route: Arc<Route>,
    /// Set when an admin enters another user's editor: until when their grant lets them.
    admin_until: Option<i64>,
    /// Whose traffic this is, for the idle reaper.
    activity: Activity,
    /// The request opens a WebSocket (any upgrade).
    upgrade: bool,
    /// How long the editor has to answer after the request's last byte.
    answer_timeout: Duration,
}

/// Forwards `req` for its owner.
pub async fn handle(state: &AppState, client: Client<'_>, mut req: Request<Body>) -> Response {
    let upgrade = is_upgrade(req.headers());
    // The browser's side of a WebSocket, taken while the request is whole; used once admitted.
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (mut head, body) = req.into_parts();
    let caller = match authorize::authorize(state, client.entering, &head, upgrade).await {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    let (route, admin_until, uri) = {
        let routed = match route::route(state, &caller, head.uri.path()).await {
            Ok(routed) => routed,
            Err(refused) => return refused,
        };
        if let Some(ours) = detour::detour(state, &caller, &head, &routed).await {
            return ours;
        }
        let Some(uri) = route::upstream_uri(&routed.route, &head.uri, routed.tail) else {
            return json_error(StatusCode::BAD_REQUEST, "invalid", "malformed path");
        };
        (routed.route, routed.admin_until, uri)
    };
    let activity = match (admin_until, caller.by_token) {
        // An admin looking in is not the user working: it keeps nothing alive.
        (Some(_), _) => Activity::Uncounted,
        (None, true) => Activity::Api,
        (None, false) => Activity::Page,
    };
    activity.record(&route);
    let answer_timeout = Duration::from_secs(state.service.config().proxy.answer_timeout_seconds);
    let cx = Exchange {
        state,
        client,
        caller,
        route,
        admin_until,
        activity,
        upgrade,
        answer_timeout,
    };
    // Held until the editor's answer: the WebSocket's place, the browser's side, its credential.
    let pending = match client_upgrade {
        Some(on) => match upgrade::admit(&cx, &head.headers, on) {
            Some(pending) => Some(pending),
            None => return upgrade::too_many(&cx),
        },
        None => None,
    };
    let outgoing = rewrite::rewrite(&cx, &mut head, body, uri);
    let request = Request::from_parts(head, outgoing.body);
    let response = match send::send(&cx, request, outgoing.uploaded).await {
        Ok(response) => response,
        Err(ours) => return ours,
    };
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        return upgrade::splice(&cx, response, pending);
    }
    let (mut parts, body) = response.into_parts();
    respond(&cx, &mut parts.headers);
    match outgoing.secret {
        // Boxed, as rare: only pages that may quote the editor's secret are read whole.
        Some(secret) if secret::is_plain_html(&parts.headers) => {
            Box::pin(secret::scrubbed(parts, body, secret)).await
        }
        _ => Response::from_parts(parts, body),
    }
}

/// The last phase: the editor's answer on its way back, confined to its session and framed by
/// our pages only (a page that may quote the editor's secret is then [`secret::scrubbed`]).
fn respond(cx: &Exchange<'_>, headers: &mut http::HeaderMap) {
    strip_hop_by_hop(headers);
    confine_to_session(headers, &cx.route);
    // Only our own pages may frame the editor.
    headers.insert(header::X_FRAME_OPTIONS, SAMEORIGIN);
    headers.append(header::CONTENT_SECURITY_POLICY, FRAME_ANCESTORS_SELF);
}

/// Whose traffic a request is, for the idle reaper.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Activity {
    /// The user's browser.
    Page,
    /// The user's scripts (a bearer token).
    Api,
    /// An admin who entered: not the user's work.
    Uncounted,
}

impl Activity {
    fn record(self, route: &Route) {
        match self {
            Activity::Page => route.touch(),
            Activity::Api => route.touch_api(),
            Activity::Uncounted => {}
        }
    }
}
