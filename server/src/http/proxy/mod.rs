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
//! request against nginx's (BENCHMARKS.md, section 7: 42,389 against about 24,700).

mod alone;
mod headers;
mod respond;

use headers::*;
pub(crate) use respond::cross_site_refused;
use respond::{internal_error, json_error, wants_html};

use crate::http::AppState;
use crate::net::relay;
use crate::net::upstream::EditorStream;
use crate::service::routes::Route;
use app::domain::encode::{PATH, percent_encode};
use app::domain::scope::Scope;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::header::{self, HeaderValue};
use http::{Request, StatusCode};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::sync::LazyLock;
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

/// Forwards `req` for its owner.
pub async fn handle(state: &AppState, client: Client<'_>, mut req: Request<Body>) -> Response {
    let forwarded_for = client.forwarded_for;
    let upgrade = is_upgrade(req.headers());
    // Another site must not make a signed-in browser change things in the editor, or open its
    // kernels: editors trust us and skip their own cross-site checks for what we forward.
    if (!req.method().is_safe() || upgrade)
        && crate::identity::auth::from_foreign_origin(req.headers())
    {
        return cross_site_refused();
    }
    let accounts = &state.service.accounts;
    let caller = if client.entering {
        Box::pin(accounts.entry_caller(req.headers())).await
    } else {
        accounts.caller(req.headers()).await
    };
    let caller = match caller {
        Ok(caller) => caller,
        Err(e) => {
            tracing::error!(error = %e, "proxy auth");
            return internal_error();
        }
    };
    let Some(caller) = caller else {
        if client.entering {
            return json_error(
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                crate::service::admin::ENTRY_REFUSED,
            );
        }
        if req.method() == http::Method::GET && wants_html(req.headers()) {
            let next = req
                .uri()
                .path_and_query()
                .map(|p| p.as_str())
                .unwrap_or("/");
            let location = format!("/login?next={}", percent_encode(next, PATH));
            return (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response();
        }
        return json_error(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "please sign in",
        );
    };
    // Before the route: a token's scopes say nothing about which sessions exist.
    if !caller.scopes.allows(Scope::Access) {
        return json_error(
            StatusCode::FORBIDDEN,
            "forbidden",
            "this token lacks the scope `access`, which reaching an editor takes",
        );
    }
    let by_token = caller.by_token;
    // Set when an admin enters another user's editor: until when their grant lets them.
    let mut admin_until: Option<i64> = None;
    let (route, uri) = {
        let path = req.uri().path();
        let rest = path.strip_prefix("/s/").unwrap_or_default();
        let (session_id, tail) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let route = match state.service.access.route(session_id).await {
            Ok(route) => route,
            Err(e) => {
                tracing::error!(error = %e, "proxy route");
                return internal_error();
            }
        };
        let Some(route) = route else {
            return json_error(StatusCode::NOT_FOUND, "not_found", "no such session");
        };
        // Someone else's session answers exactly like one that does not exist, unless an
        // admin chose to enter it (audited) and the grant still runs.
        if route.owner_id != caller.user.id {
            // Boxed, as rare: see `Service::route`.
            match Box::pin(
                state
                    .service
                    .admin
                    .admin_entry(&caller, session_id, by_token),
            )
            .await
            {
                Some(until) => admin_until = Some(until),
                None => {
                    return json_error(StatusCode::NOT_FOUND, "not_found", "no such session");
                }
            }
        }
        // The owner asked for the editor alone in its tab (`alone`): remembered for this
        // session's editor, then there.
        if admin_until.is_none()
            && !by_token
            && req.method() == http::Method::GET
            && let Some(place) = alone::requested(session_id, tail, req.uri().query())
        {
            let cookie = alone::cookie(session_id, state.service.config().secure_cookies);
            return (
                StatusCode::SEE_OTHER,
                [(header::LOCATION, place), (header::SET_COOKIE, cookie)],
            )
                .into_response();
        }
        // The owner's own tab, not the page's frame, went into the editor (marimo opens new
        // notebooks so, a link does): sent to the session page, which frames that place with
        // the toolbar, the countdowns and the presence that keeps the session alive; unless
        // they asked for the editor alone.
        if admin_until.is_none()
            && !by_token
            && is_tab_navigation(&req)
            && !alone::chosen(req.headers())
        {
            let tail = match req.uri().query() {
                Some(query) => format!("{tail}?{query}"),
                None => tail.to_string(),
            };
            let location = app::domain::paths::session_page_for(session_id, &tail);
            return (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response();
        }
        // The editor's own Shut Down ends the session through us: stopped, settled and
        // refunded like a Stop, which the page then shows; the editor never hears of it.
        if admin_until.is_none() && req.method() == http::Method::POST && is_shutdown(tail) {
            let viewer = caller.viewer();
            let stopped =
                Box::pin(state.service.sessions.stop_from_editor(&viewer, session_id)).await;
            return match stopped {
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
            };
        }
        if tail.is_empty() {
            let query = req
                .uri()
                .query()
                .map(|q| format!("?{q}"))
                .unwrap_or_default();
            return (
                StatusCode::PERMANENT_REDIRECT,
                [(header::LOCATION, format!("{path}/{query}"))],
            )
                .into_response();
        }
        match upstream_uri(&route, req.uri(), tail) {
            Some(uri) => (route, uri),
            None => return json_error(StatusCode::BAD_REQUEST, "invalid", "malformed path"),
        }
    };
    let activity = match (admin_until, by_token) {
        // An admin looking in is not the user working: it keeps nothing alive.
        (Some(_), _) => Activity::Uncounted,
        (None, true) => Activity::Api,
        (None, false) => Activity::Page,
    };
    activity.record(&route);

    // One session's WebSockets have a ceiling, so that one page or script cannot hold every
    // connection the server has.
    let websocket = if upgrade {
        let max = state.service.config().proxy.max_websockets_per_session;
        match route.open_websocket(max) {
            Some(open) => Some(open),
            None => {
                return json_error(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too_many_websockets",
                    &format!(
                        "this session has {max} WebSockets open already; close some (other tabs, perhaps) and try again"
                    ),
                );
            }
        }
    } else {
        None
    };
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    // An upgraded connection outlives this request: it is checked again while it lasts.
    let credential = upgrade
        .then(|| match client.entering {
            true => state.service.accounts.entry_credential(req.headers()),
            false => state.service.accounts.credential(req.headers()),
        })
        .flatten();
    let (mut parts, body) = req.into_parts();
    // A page the browser navigates to may quote the editor's secret (JupyterLab's page config
    // does): asked for uncompressed, to be read and scrubbed on its way back.
    let secret = is_navigation(&parts.headers)
        .then(|| editor_secret(&route.credential))
        .flatten();
    if secret.is_some() {
        parts.headers.remove(header::ACCEPT_ENCODING);
    }
    let upgrade_to = parts.headers.get(header::UPGRADE).cloned();
    strip_hop_by_hop(&mut parts.headers);
    strip_our_credentials(&mut parts.headers, by_token);
    add_editor_auth(&mut parts.headers, &route.credential);
    if let Some(ip) = forwarded_for {
        parts.headers.insert(X_FORWARDED_FOR, ip.clone());
    }
    // Behind a TLS ingress the page is https, and the editor's redirects and origin checks must
    // know; anything else is plain http (a client that claims https only misleads itself).
    let https = parts
        .headers
        .get(X_FORWARDED_PROTO)
        .is_some_and(|proto| proto.as_bytes().eq_ignore_ascii_case(b"https"));
    parts
        .headers
        .insert(X_FORWARDED_PROTO, if https { HTTPS } else { HTTP });
    if let Some(protocol) = upgrade_to {
        parts
            .headers
            .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        parts.headers.insert(header::UPGRADE, protocol);
    }
    parts.uri = uri;
    parts.version = http::Version::HTTP_11;
    // An editor answers once it has read the body: the wait for its answer counts from the last
    // byte of an upload, however long the upload takes.
    let answer_timeout = Duration::from_secs(state.service.config().proxy.answer_timeout_seconds);
    // Whether the browser has sent all of its body: a deadline that passes before is an
    // upload that stopped arriving (the client's doing), not an editor that did not answer.
    // (None: no body, nothing to wait for; the common case makes no allocation.)
    let mut uploaded = None;
    let body = if http_body::Body::is_end_stream(&body) {
        body
    } else {
        // Every chunk of the upload moves the deadline for the answer.
        let answer = client.answer.clone();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        uploaded = Some(done.clone());
        crate::http::Watched::body(body, move |polled: &crate::http::Polled, ended| {
            if let std::task::Poll::Ready(Some(Ok(_))) = polled {
                answer.reset(std::time::Instant::now() + answer_timeout);
            }
            if ended {
                done.store(true, std::sync::atomic::Ordering::Release);
            }
        })
    };
    let outgoing = Request::from_parts(parts, body);

    let started = std::time::Instant::now();
    let sending = async {
        if upgrade {
            Box::pin(crate::net::upstream::upgrade(&route.upstream, outgoing))
                .await
                .map(|r| r.map(Body::new))
        } else {
            state
                .service
                .access
                .upstreams()
                .send(&route.upstream, outgoing)
                .await
        }
    };
    // A hung editor must not hold the browser's connections to us (and so our own pages).
    let Some(sent) = crate::net::deadline::within(client.answer, answer_timeout, sending).await
    else {
        if uploaded.is_some_and(|done| !done.load(std::sync::atomic::Ordering::Acquire)) {
            tracing::info!(session = %route.session_id, "an upload through the proxy stalled");
            let mut stalled = json_error(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                "the upload stopped arriving; send it again",
            );
            stalled
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return stalled;
        }
        tracing::warn!(session = %route.session_id, "the editor did not answer in time");
        return json_error(
            StatusCode::GATEWAY_TIMEOUT,
            "editor_timeout",
            "the editor did not answer in time; it may be busy or stuck",
        );
    };
    let mut response = match sent {
        Ok(response) => {
            state
                .service
                .metrics()
                .proxied(started.elapsed().as_secs_f64());
            response
        }
        Err(e) => {
            tracing::warn!(session = %route.session_id, error = %e, "editor unreachable");
            // The session may have ended elsewhere: the next request reads it again.
            state.service.access.forget_route(&route.session_id);
            return json_error(
                StatusCode::BAD_GATEWAY,
                "editor_unreachable",
                "the editor is not answering; it may have stopped",
            );
        }
    };

    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        // Browsers take cookies from a handshake's answer too.
        confine_to_session(response.headers_mut(), &route);
        if let Some(client_upgrade) = client_upgrade {
            let upstream_upgrade = hyper::upgrade::on(&mut response);
            let route = route.clone();
            let busy_poll =
                Duration::from_micros(state.service.config().proxy.websocket_busy_poll_us);
            let service = state.service.clone();
            let slot = client.slot.cloned();
            // Whose credential it is: the owner's, or an admin's who entered.
            let user_id = caller.user.id.clone();
            tokio::spawn(async move {
                let _held = (slot, websocket);
                let (Ok(client), Ok(upstream)) = tokio::join!(client_upgrade, upstream_upgrade)
                else {
                    return;
                };
                let _counted = service.metrics().websocket_opened();
                let relay = relay_upgraded(client, upstream, route.clone(), activity, busy_poll);
                let revoked = async {
                    let grant_ends = async {
                        match admin_until {
                            Some(until) => {
                                let left = (until - service.now()).max(0) as u64;
                                tokio::time::sleep(Duration::from_millis(left)).await;
                            }
                            None => std::future::pending().await,
                        }
                    };
                    match &credential {
                        Some(credential) => tokio::select! {
                            () = until_revoked(&service.accounts, credential, &user_id, admin_until.is_some()) => {}
                            () = grant_ends => {}
                        },
                        None => std::future::pending().await,
                    }
                };
                // The server's shutdown ends it too, so that draining does not wait for it.
                let mut shutdown = service.shutting_down();
                tokio::select! {
                    () = relay => {}
                    () = revoked => {
                        tracing::info!(session = %route.session_id, "closed a WebSocket whose sign-in ended");
                    }
                    _ = shutdown.wait_for(|closing| *closing) => {}
                }
            });
        }
        let (parts, _) = response.into_parts();
        return Response::from_parts(parts, Body::empty());
    }

    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    confine_to_session(&mut parts.headers, &route);
    // Only our own pages may frame the editor.
    parts.headers.insert(header::X_FRAME_OPTIONS, SAMEORIGIN);
    parts
        .headers
        .append(header::CONTENT_SECURITY_POLICY, FRAME_ANCESTORS_SELF);
    let body = match secret {
        Some(secret) if is_plain_html(&parts.headers) => {
            // The browser is signed in to us; the editor's own secret is no business of its.
            let Ok(page) = axum::body::to_bytes(body, MAX_SCRUBBED_PAGE).await else {
                return json_error(
                    StatusCode::BAD_GATEWAY,
                    "editor_unreachable",
                    "the editor's page could not be read",
                );
            };
            parts.headers.remove(header::CONTENT_LENGTH);
            Body::from(scrub(&page, secret.as_bytes()))
        }
        _ => body,
    };
    Response::from_parts(parts, body)
}

/// The largest editor page read whole to take its secret out; a larger one is refused.
const MAX_SCRUBBED_PAGE: usize = 8 * 1024 * 1024;

/// The secret an editor's credential carries, where it is one a page could quote (a token).
fn editor_secret(credential: &crate::service::routes::EditorCredential) -> Option<String> {
    match credential {
        crate::service::routes::EditorCredential::Header(_, value) => value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("token "))
            .filter(|secret| secret.len() >= 16)
            .map(str::to_string),
        _ => None,
    }
}

/// A browser's page load (it accepts HTML), not a script's call.
/// A browser tab's own navigation (typed, a link, `window.open`), not our page's frame nor a
/// script's request, and not a download (JupyterLab's `?download=1`), which must reach the editor.
fn is_tab_navigation(req: &Request<Body>) -> bool {
    req.method() == http::Method::GET
        && req
            .headers()
            .get(SEC_FETCH_DEST)
            .is_some_and(|dest| dest.as_bytes() == b"document")
        && !req.uri().query().is_some_and(|q| q.contains("download="))
}

/// The editors' own "shut down the server": JupyterLab's and marimo's.
fn is_shutdown(tail: &str) -> bool {
    matches!(tail, "/api/shutdown" | "/api/kernel/shutdown")
}

fn is_navigation(headers: &http::HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/html"))
}

fn is_plain_html(headers: &http::HeaderMap) -> bool {
    let html = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|kind| kind.starts_with("text/html"));
    html && !headers.contains_key(header::CONTENT_ENCODING)
}

/// `page` with every occurrence of `secret` taken out.
fn scrub(page: &[u8], secret: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(page.len());
    let mut rest = page;
    while let Some(at) = rest.windows(secret.len()).position(|w| w == secret) {
        out.extend_from_slice(&rest[..at]);
        rest = &rest[at + secret.len()..];
    }
    out.extend_from_slice(rest);
    out
}

#[cfg(test)]
mod scrub_tests {
    #[test]
    fn every_copy_of_the_secret_goes_and_nothing_else() {
        let page = br#"<script id="jupyter-config-data">{"token": "s3cr3t-s3cr3t-s3cr3t", "x": "s3cr3t-s3cr3t-s3cr3t"}</script>"#;
        let scrubbed = super::scrub(page, b"s3cr3t-s3cr3t-s3cr3t");
        assert_eq!(
            scrubbed,
            br#"<script id="jupyter-config-data">{"token": "", "x": ""}</script>"#
        );
        assert_eq!(super::scrub(b"plain", b"s3cr3t-s3cr3t-s3cr3t"), b"plain");
    }
}

/// The request's target at the editor: the same path and query (the editor knows its base URL),
/// or only what follows the prefix for editors that serve from "/".
fn upstream_uri(route: &Route, original: &http::Uri, tail: &str) -> Option<http::Uri> {
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

/// Connections busy-polling at once (see [`crate::net::relay`]): one per two cores, so none on a
/// single core, where a poll would stall every other task and the side it waits for.
static SPIN_LIMIT: LazyLock<relay::SpinLimit> = LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    relay::SpinLimit::new(cores / 2)
});

/// How often an open WebSocket's credential is checked again, for changes on other replicas
/// (those on this one are seen at once): a lock, a logout, a revoked token.
const RECHECK_CREDENTIAL: Duration = Duration::from_secs(10);

/// Returns once `credential` no longer stands for `owner_id` (whoever it was made for), or, `as_admin`,
/// no longer for an admin acting as one: checked
/// at once when this server forgets that user or that sign-in, and every [`RECHECK_CREDENTIAL`] otherwise, each
/// connection at its own phase so that they do not all ask at once. A failing database keeps the
/// connection: it is the editor's work the user would lose.
async fn until_revoked(
    auth: &crate::service::Accounts,
    credential: &crate::identity::auth::Credential,
    owner_id: &str,
    as_admin: bool,
) {
    use tokio::sync::broadcast::error::RecvError;
    let mut forgotten = auth.forgotten();
    let phase =
        Duration::from_millis(rand::random::<u64>() % RECHECK_CREDENTIAL.as_millis() as u64);
    let mut recheck =
        tokio::time::interval_at(tokio::time::Instant::now() + phase, RECHECK_CREDENTIAL);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut listening = true;
    loop {
        tokio::select! {
            _ = recheck.tick() => {}
            what = forgotten.recv(), if listening => match what {
                Ok(what) if credential.touched_by(&what, owner_id) => {}
                Ok(_) => continue,
                // Missed some: one of them may have been ours.
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => {
                    listening = false;
                    continue;
                }
            },
        }
        match auth.caller_of(credential).await {
            // An admin who entered must stay one (a demotion ends it), acting as one now.
            Ok(Some(caller))
                if caller.user.id == owner_id
                    && (!as_admin
                        || (caller.user.role == app::model::Role::Admin
                            && caller.scopes().allows(Scope::Admin))) => {}
            Ok(_) => return,
            Err(e) => tracing::warn!(error = %e, "checking a WebSocket's credential again"),
        }
    }
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

/// hyper's upgraded stream may hold bytes it read ahead, so the relay never reads under it.
impl relay::Side for TokioIo<Upgraded> {
    fn pollable(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}

/// Relays an upgraded connection until both sides have ended it; bytes either way count as
/// `activity`.
async fn relay_upgraded(
    client: Upgraded,
    upstream: Upgraded,
    route: Arc<Route>,
    activity: Activity,
    busy_poll: Duration,
) {
    // Always our own connection type (`upstream::upgrade`), a plain socket.
    let editor = match upstream.downcast::<TokioIo<EditorStream>>() {
        Ok(editor) => editor,
        Err(_) => {
            tracing::error!(session = %route.session_id, "an upgraded editor connection of an unknown type");
            return;
        }
    };
    let mut editor_stream = editor.io.into_inner();
    let traffic = || activity.record(&route);
    // A plain socket from our own listener; other servers (tests') keep hyper's stream.
    let relayed = match client.downcast::<TokioIo<tokio::net::TcpStream>>() {
        Ok(client) => {
            let mut tcp = client.io.into_inner();
            let (pending, editor_pending) = (&client.read_buf, &editor.read_buf);
            relay::relay(
                &mut tcp,
                pending,
                &mut editor_stream,
                editor_pending,
                busy_poll,
                &SPIN_LIMIT,
                traffic,
            )
            .await
        }
        Err(client) => {
            let mut client = TokioIo::new(client);
            relay::relay(
                &mut client,
                b"",
                &mut editor_stream,
                &editor.read_buf,
                busy_poll,
                &SPIN_LIMIT,
                traffic,
            )
            .await
        }
    };
    if let Err(e) = relayed {
        tracing::debug!(session = %route.session_id, error = %e, "upgraded connection ended");
    }
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
