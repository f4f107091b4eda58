//! Our reverse proxy: `/s/<id>/…` reaches the editor of session `<id>`, for its owner only (and
//! an admin who chose to enter it, audited, while that lasts).
//!
//! HTTP bodies stream both ways; WebSocket (any upgrade) is spliced byte for byte after the
//! editor's 101. Every request and every chunk of upgraded traffic counts as activity.

use crate::AppState;
use crate::editors::UpstreamAuth;
use crate::relay;
use crate::store::now_ms;
use crate::upstream::EditorStream;
use app::domain::scope::Scope;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, StatusCode};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Where a ready session's editor is, and when it was last used.
pub struct Route {
    pub session_id: String,
    pub owner_id: String,
    /// The editor's address (see [`crate::upstream`]).
    pub upstream: String,
    credential: EditorCredential,
    pub strip_prefix: bool,
    last_activity: AtomicI64,
    flushed_activity: AtomicI64,
    /// Traffic from API-token clients (scripts); the idle policy counts it even when tabs do not.
    last_api: AtomicI64,
    flushed_api: AtomicI64,
    /// WebSockets open to this editor now.
    websockets: AtomicUsize,
}

/// One of a session's open WebSockets, counted until it is dropped.
pub struct OpenWebSocket(Arc<Route>);

impl Drop for OpenWebSocket {
    fn drop(&mut self) {
        self.0.websockets.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Route {
    pub fn new(
        session_id: String,
        owner_id: String,
        upstream: String,
        auth: UpstreamAuth,
        strip_prefix: bool,
        last_activity: i64,
    ) -> Route {
        Route {
            session_id,
            owner_id,
            upstream,
            credential: EditorCredential::of(&auth),
            strip_prefix,
            last_activity: AtomicI64::new(last_activity),
            flushed_activity: AtomicI64::new(last_activity),
            last_api: AtomicI64::new(0),
            flushed_api: AtomicI64::new(0),
            websockets: AtomicUsize::new(0),
        }
    }

    /// Counts one more WebSocket, unless `max` are open already.
    pub fn open_websocket(self: &Arc<Self>, max: usize) -> Option<OpenWebSocket> {
        self.websockets
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| OpenWebSocket(Arc::clone(self)))
    }

    pub fn touch(&self) {
        self.last_activity.store(now_ms(), Ordering::Relaxed);
    }

    pub fn touch_api(&self) {
        let now = now_ms();
        self.last_activity.store(now, Ordering::Relaxed);
        self.last_api.store(now, Ordering::Relaxed);
    }

    pub fn last_activity(&self) -> i64 {
        self.last_activity.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
pub struct RouteTable {
    routes: RwLock<crate::auth::FastMap<String, Arc<Route>>>,
}

impl RouteTable {
    pub fn get(&self, session_id: &str) -> Option<Arc<Route>> {
        self.routes.read().expect("routes").get(session_id).cloned()
    }

    pub fn insert(&self, route: Arc<Route>) {
        self.routes
            .write()
            .expect("routes")
            .insert(route.session_id.clone(), route);
    }

    pub fn remove(&self, session_id: &str) {
        self.routes.write().expect("routes").remove(session_id);
    }

    /// Each cached route's session and editor address.
    pub fn ids(&self) -> Vec<(String, String)> {
        let routes = self.routes.read().expect("routes");
        routes
            .values()
            .map(|r| (r.session_id.clone(), r.upstream.clone()))
            .collect()
    }

    /// Activity not yet written to the database: (session, last activity, last API activity).
    pub fn take_activity(&self) -> Vec<(String, i64, Option<i64>)> {
        let routes = self.routes.read().expect("routes");
        routes
            .values()
            .filter_map(|route| {
                let last = route.last_activity();
                let flushed = route.flushed_activity.swap(last, Ordering::Relaxed);
                let api = route.last_api.load(Ordering::Relaxed);
                let api_flushed = route.flushed_api.swap(api, Ordering::Relaxed);
                (last > flushed).then(|| {
                    (
                        route.session_id.clone(),
                        last,
                        (api > api_flushed).then_some(api),
                    )
                })
            })
            .collect()
    }
}

// Made at compile time: a name or value given as a string is checked at every use.
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const CLEAR_SITE_DATA: HeaderName = HeaderName::from_static("clear-site-data");
const SERVICE_WORKER_ALLOWED: HeaderName = HeaderName::from_static("service-worker-allowed");
const HTTP: HeaderValue = HeaderValue::from_static("http");
const HTTPS: HeaderValue = HeaderValue::from_static("https");
const SAMEORIGIN: HeaderValue = HeaderValue::from_static("SAMEORIGIN");
const FRAME_ANCESTORS_SELF: HeaderValue = HeaderValue::from_static("frame-ancestors 'self'");

const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Connection options that name no header of their own, or one in [`HOP_BY_HOP`].
const PLAIN_CONNECTION_OPTIONS: [&str; 3] = ["close", "keep-alive", "upgrade"];

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Headers the `Connection` header lists are hop-by-hop too; it usually lists none.
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|option| {
            !option.is_empty()
                && !PLAIN_CONNECTION_OPTIONS
                    .iter()
                    .any(|plain| option.eq_ignore_ascii_case(plain))
        })
        .filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok())
        .collect();
    remove_present(headers, &HOP_BY_HOP);
    for name in &listed {
        headers.remove(name);
    }
}

/// Removes those of `names` that `headers` holds. On the per-request path: the names present
/// are read once, and a header that is absent (most are) costs a comparison, not a hash lookup.
fn remove_present<const N: usize>(headers: &mut HeaderMap, names: &[HeaderName; N]) {
    let mut present = [false; N];
    for name in headers.keys() {
        if let Some(i) = names.iter().position(|n| n == name) {
            present[i] = true;
        }
    }
    for (name, _) in names.iter().zip(present).filter(|(_, present)| *present) {
        headers.remove(name);
    }
}

fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| {
                v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
}

/// Our own credentials never reach the editor: our cookie and, when the request carries one
/// (`by_token`), our bearer token are removed.
fn strip_our_credentials(headers: &mut HeaderMap, by_token: bool) {
    if headers.contains_key(header::COOKIE) {
        let kept = cookies_but(headers, crate::auth::SESSION_COOKIE).join("; ");
        set_cookie_header(headers, &kept);
    }
    if by_token {
        headers.remove(header::AUTHORIZATION);
    }
}

/// The request's cookies (`name=value` pairs) other than those named `name`.
fn cookies_but<'a>(headers: &'a HeaderMap, name: &str) -> Vec<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|pair| {
            !pair.is_empty() && pair.split_once('=').map_or(*pair, |(n, _)| n).trim() != name
        })
        .collect()
}

/// Replaces the `Cookie` header with `cookies`; none when it is empty.
fn set_cookie_header(headers: &mut HeaderMap, cookies: &str) {
    let value = (!cookies.is_empty())
        .then(|| HeaderValue::from_str(cookies).ok())
        .flatten();
    headers.remove(header::COOKIE);
    if let Some(value) = value {
        headers.insert(header::COOKIE, value);
    }
}

/// Editors answer on our origin, so what they send must not act beyond their session: no
/// cookie of ours (it would sign the browser in as someone else), no clearing of the site's
/// data, no service worker for the whole site, and their cookies stay under `/s/<id>/`.
fn confine_to_session(headers: &mut HeaderMap, route: &Route) {
    remove_present(headers, &[CLEAR_SITE_DATA, SERVICE_WORKER_ALLOWED]);
    if !headers.contains_key(header::SET_COOKIE) {
        return;
    }
    let prefix = format!("/s/{}/", route.session_id);
    let cookies: Vec<HeaderValue> = headers
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|value| confined_cookie(value.as_bytes(), &prefix, route.strip_prefix))
        .filter_map(|cookie| HeaderValue::from_str(&cookie).ok())
        .collect();
    headers.remove(header::SET_COOKIE);
    for cookie in cookies {
        headers.append(header::SET_COOKIE, cookie);
    }
}

/// `Set-Cookie` as the browser may keep it: None for our own cookie's name (or one we cannot
/// read); without `Domain`; its `Path` under `prefix` (an editor that believes it is at "/"
/// has its paths moved under it).
fn confined_cookie(value: &[u8], prefix: &str, strip_prefix: bool) -> Option<String> {
    let value = std::str::from_utf8(value).ok()?;
    let mut parts = value.split(';').map(str::trim);
    let pair = parts.next()?;
    let name = pair.split_once('=').map_or(pair, |(name, _)| name).trim();
    if name.is_empty() || name == crate::auth::SESSION_COOKIE {
        return None;
    }
    let mut out = vec![pair.to_string()];
    let mut path = None;
    for attribute in parts {
        let key = attribute
            .split_once('=')
            .map_or(attribute, |(k, _)| k)
            .trim();
        if key.eq_ignore_ascii_case("domain") {
            continue;
        }
        if key.eq_ignore_ascii_case("path") {
            path = attribute.split_once('=').map(|(_, v)| v.trim().to_string());
            continue;
        }
        out.push(attribute.to_string());
    }
    let path = match path {
        // Kept for the request's own directory, which is inside the session.
        None => return Some(out.join("; ")),
        Some(path) if path.starts_with(prefix) => path,
        Some(path) if strip_prefix && path.starts_with('/') => {
            format!("{}{path}", prefix.trim_end_matches('/'))
        }
        Some(_) => prefix.to_string(),
    };
    out.push(format!("Path={path}"));
    Some(out.join("; "))
}

/// The editor's secret as a proxied request carries it, made once per route.
enum EditorCredential {
    Header(HeaderName, HeaderValue),
    /// The cookie's name, and `name=value`.
    Cookie(&'static str, HeaderValue),
    /// A secret no header can carry (our runtimes never make one): the editor refuses us.
    Unusable,
}

impl EditorCredential {
    fn of(auth: &UpstreamAuth) -> EditorCredential {
        let made = match auth {
            UpstreamAuth::Header(name, value) => HeaderName::from_bytes(name.as_bytes())
                .ok()
                .zip(HeaderValue::from_str(value).ok())
                .map(|(name, value)| EditorCredential::Header(name, value)),
            UpstreamAuth::Cookie(name, value) => HeaderValue::from_str(&format!("{name}={value}"))
                .ok()
                .map(|pair| EditorCredential::Cookie(name, pair)),
        };
        made.unwrap_or(EditorCredential::Unusable)
    }
}

fn add_editor_auth(headers: &mut HeaderMap, credential: &EditorCredential) {
    match credential {
        EditorCredential::Header(name, value) => {
            headers.insert(name.clone(), value.clone());
        }
        EditorCredential::Cookie(_, pair) if !headers.contains_key(header::COOKIE) => {
            headers.insert(header::COOKIE, pair.clone());
        }
        EditorCredential::Cookie(name, pair) => {
            // A cookie of that name the browser holds would come first, and editors read the
            // first one: it goes.
            let mut cookies = cookies_but(headers, name);
            cookies.push(pair.to_str().unwrap_or_default());
            let cookies = cookies.join("; ");
            set_cookie_header(headers, &cookies);
        }
        EditorCredential::Unusable => {}
    }
}

fn json_error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(serde_json::json!({ "error": code, "message": message })),
    )
        .into_response()
}

/// A state-changing request a browser sent from another site (see [`crate::auth::from_foreign_origin`]).
pub(crate) fn cross_site_refused() -> Response {
    json_error(
        StatusCode::FORBIDDEN,
        "cross_site",
        "requests from other sites are refused; open the sandbox's own page",
    )
}

/// What the caller sees when our side failed; the cause is logged where it happened.
fn internal_error() -> Response {
    json_error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "something went wrong on our side",
    )
}

fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"))
}

/// The client connection a request came on.
#[derive(Clone, Copy)]
pub struct Client<'a> {
    /// The client's address, sent on to the editor.
    pub forwarded_for: Option<&'a HeaderValue>,
    /// The connection's deadline for the editor's answer (requests on it take turns).
    pub answer: &'a crate::deadline::Deadline,
    /// The connection's place under the cap, which a WebSocket keeps while it lasts.
    pub slot: Option<&'a crate::ConnectionSlot>,
}

/// Forwards `req` for its owner.
pub async fn handle(state: &AppState, client: Client<'_>, mut req: Request<Body>) -> Response {
    let forwarded_for = client.forwarded_for;
    let upgrade = is_upgrade(req.headers());
    // Another site must not make a signed-in browser change things in the editor, or open its
    // kernels: editors trust us and skip their own cross-site checks for what we forward.
    if (!req.method().is_safe() || upgrade) && crate::auth::from_foreign_origin(req.headers()) {
        return cross_site_refused();
    }
    let caller = match state.service.auth.caller(req.headers()).await {
        Ok(caller) => caller,
        Err(e) => {
            tracing::error!(error = %e, "proxy auth");
            return internal_error();
        }
    };
    let Some(caller) = caller else {
        if req.method() == http::Method::GET && wants_html(req.headers()) {
            let next = req
                .uri()
                .path_and_query()
                .map(|p| p.as_str())
                .unwrap_or("/");
            let location = format!("/login?next={}", percent_encode(next));
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
        let route = match state.service.route(session_id).await {
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
            match Box::pin(state.service.admin_entry(&caller, session_id, by_token)).await {
                Some(until) => admin_until = Some(until),
                None => {
                    return json_error(StatusCode::NOT_FOUND, "not_found", "no such session");
                }
            }
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
        let max = state.service.config.proxy.max_websockets_per_session;
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
        .then(|| crate::auth::Credential::of(req.headers()))
        .flatten();
    let (mut parts, body) = req.into_parts();
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
    let answer_timeout = Duration::from_secs(state.service.config.proxy.answer_timeout_seconds);
    let body = if http_body::Body::is_end_stream(&body) {
        body
    } else {
        // Every chunk of the upload moves the deadline for the answer.
        let answer = client.answer.clone();
        crate::Watched::body(body, move |polled: &crate::Polled, _| {
            if let std::task::Poll::Ready(Some(Ok(_))) = polled {
                answer.reset(std::time::Instant::now() + answer_timeout);
            }
        })
    };
    let outgoing = Request::from_parts(parts, body);

    let sending = async {
        if upgrade {
            Box::pin(crate::upstream::upgrade(&route.upstream, outgoing))
                .await
                .map(|r| r.map(Body::new))
        } else {
            state
                .service
                .upstreams
                .send(&route.upstream, outgoing)
                .await
        }
    };
    // A hung editor must not hold the browser's connections to us (and so our own pages).
    let Some(sent) = crate::deadline::within(client.answer, answer_timeout, sending).await else {
        tracing::warn!(session = %route.session_id, "the editor did not answer in time");
        return json_error(
            StatusCode::GATEWAY_TIMEOUT,
            "editor_timeout",
            "the editor did not answer in time; it may be busy or stuck",
        );
    };
    let mut response = match sent {
        Ok(response) => response,
        Err(e) => {
            tracing::warn!(session = %route.session_id, error = %e, "editor unreachable");
            // The session may have ended elsewhere: the next request reads it again.
            state.service.routes.remove(&route.session_id);
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
                Duration::from_micros(state.service.config.proxy.websocket_busy_poll_us);
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
                let relay = relay_upgraded(client, upstream, route.clone(), activity, busy_poll);
                let revoked = async {
                    let grant_ends = async {
                        match admin_until {
                            Some(until) => {
                                let left = (until - crate::store::now_ms()).max(0) as u64;
                                tokio::time::sleep(Duration::from_millis(left)).await;
                            }
                            None => std::future::pending().await,
                        }
                    };
                    match &credential {
                        Some(credential) => tokio::select! {
                            () = until_revoked(&service.auth, credential, &user_id, admin_until.is_some()) => {}
                            () = grant_ends => {}
                        },
                        None => std::future::pending().await,
                    }
                };
                // The server's shutdown ends it too, so that draining does not wait for it.
                let mut shutdown = service.shutdown.subscribe();
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
    Response::from_parts(parts, body)
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

fn percent_encode(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Connections busy-polling at once (see [`crate::relay`]): one per two cores, so none on a
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
    auth: &crate::auth::Authenticator,
    credential: &crate::auth::Credential,
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

    #[test]
    fn hop_by_hop_and_listed_headers_go() {
        let mut h = HeaderMap::new();
        h.insert("connection", "keep-alive, x-secret".parse().unwrap());
        h.append("connection", "Close".parse().unwrap());
        h.insert("x-secret", "1".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
        h.insert("transfer-encoding", "chunked".parse().unwrap());
        h.insert("te", "trailers".parse().unwrap());
        h.insert("content-type", "text/plain".parse().unwrap());
        h.insert("close-enough", "kept".parse().unwrap());
        strip_hop_by_hop(&mut h);
        let mut left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        left.sort();
        assert_eq!(left, ["close-enough", "content-type"]);
    }

    #[test]
    fn only_the_named_headers_present_are_removed() {
        let mut h = HeaderMap::new();
        h.insert("clear-site-data", "\"*\"".parse().unwrap());
        h.append("set-cookie", "a=1".parse().unwrap());
        remove_present(&mut h, &[CLEAR_SITE_DATA, SERVICE_WORKER_ALLOWED]);
        assert!(!h.contains_key("clear-site-data"));
        assert_eq!(h.len(), 1);
        remove_present(&mut h, &[SERVICE_WORKER_ALLOWED]);
        assert_eq!(h.get("set-cookie").unwrap(), "a=1");
    }

    #[test]
    fn the_editors_secret_is_made_once_and_an_unusable_one_is_not_sent() {
        let cookie = EditorCredential::of(&UpstreamAuth::Cookie("s", "v".into()));
        let mut h = HeaderMap::new();
        add_editor_auth(&mut h, &cookie);
        assert_eq!(h.get("cookie").unwrap(), "s=v");
        let broken = EditorCredential::of(&UpstreamAuth::Header("authorization", "a\nb".into()));
        assert!(matches!(broken, EditorCredential::Unusable));
        let mut h = HeaderMap::new();
        add_editor_auth(&mut h, &broken);
        assert!(h.is_empty());
    }

    #[test]
    fn an_editors_cookies_stay_inside_its_session() {
        let at = "/s/abc/";
        let confined = |cookie: &str, strip| confined_cookie(cookie.as_bytes(), at, strip);
        assert_eq!(confined("sandbox_session=x; Path=/", false), None);
        assert_eq!(confined(" sandbox_session = x", true), None);
        assert_eq!(
            confined("a=1; Domain=example.com; Path=/; Secure", false).unwrap(),
            "a=1; Secure; Path=/s/abc/"
        );
        assert_eq!(
            confined("a=1; path=/s/abc/lab", false).unwrap(),
            "a=1; Path=/s/abc/lab"
        );
        // An editor that believes it is at "/" gets its paths under the session's.
        assert_eq!(
            confined("code=1; Path=/stable", true).unwrap(),
            "code=1; Path=/s/abc/stable"
        );
        assert_eq!(
            confined("code=1; Path=/", true).unwrap(),
            "code=1; Path=/s/abc/"
        );
        assert_eq!(
            confined("bare=1; HttpOnly", false).unwrap(),
            "bare=1; HttpOnly"
        );
        assert_eq!(confined("=oops", false), None);
    }

    #[test]
    fn a_cookie_of_the_editors_name_from_the_browser_gives_way_to_ours() {
        let mut h = HeaderMap::new();
        h.insert("cookie", "code-server-session=stale; b=2".parse().unwrap());
        add_editor_auth(
            &mut h,
            &EditorCredential::of(&UpstreamAuth::Cookie("code-server-session", "H".into())),
        );
        assert_eq!(h.get("cookie").unwrap(), "b=2; code-server-session=H");
    }

    #[test]
    fn our_cookie_and_token_never_reach_the_editor() {
        let mut h = HeaderMap::new();
        h.insert(
            "cookie",
            "_xsrf=1; sandbox_session=SECRET; b=2".parse().unwrap(),
        );
        h.insert("authorization", "Bearer gsb_abc".parse().unwrap());
        strip_our_credentials(&mut h, true);
        assert_eq!(h.get("cookie").unwrap(), "_xsrf=1; b=2");
        assert!(!h.contains_key("authorization"));
        add_editor_auth(
            &mut h,
            &EditorCredential::of(&UpstreamAuth::Cookie("code-server-session", "H".into())),
        );
        assert_eq!(
            h.get("cookie").unwrap(),
            "_xsrf=1; b=2; code-server-session=H"
        );
        add_editor_auth(
            &mut h,
            &EditorCredential::of(&UpstreamAuth::Header("authorization", "token T".into())),
        );
        assert_eq!(h.get("authorization").unwrap(), "token T");
    }

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

    #[test]
    fn recognizes_upgrades() {
        let mut h = HeaderMap::new();
        h.insert("upgrade", "websocket".parse().unwrap());
        assert!(!is_upgrade(&h));
        h.insert("connection", "keep-alive, Upgrade".parse().unwrap());
        assert!(is_upgrade(&h));
    }

    #[test]
    fn activity_is_taken_once() {
        let table = RouteTable::default();
        let route = Arc::new(Route::new(
            "s".into(),
            "u".into(),
            "x:1".into(),
            UpstreamAuth::Header("a", "b".into()),
            false,
            0,
        ));
        table.insert(route.clone());
        route.touch();
        assert_eq!(table.take_activity().len(), 1);
        assert!(table.take_activity().is_empty());
    }
}
