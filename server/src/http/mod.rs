//! The doors: the pages (server functions through [`pages::PagesBackend`]), the REST API, sign-in
//! with a provider, and the proxy to the editors, all behind one router, and the [`listener`] that
//! serves them. May import: `service`, `identity`, `net`, `runtime::editors`, `store` (the sign-in
//! session store only), `util`, `app`. Imported only by `boot` and `cli`.
//!
//! Each client connection gets a [`Front`], made by [`App`]: `/s/…` requests go straight to the
//! proxy, past the router's matching, path parameters and session layer, with the client's address
//! formatted for `X-Forwarded-For` once per connection and one deadline for the editor's answers;
//! every other path goes through the router (BENCHMARKS.md, History, `30b4472`: 23 → 21 µs of CPU a
//! request). Before anything reads a request, cookies that are not plain text are dropped
//! (`auth::drop_unreadable_cookies`). An answer given before its request's body was read to the end
//! (a refusal, a body too large) carries `Connection: close`: hyper closes such a connection with
//! the rest of the body unread, and a client not told so may send its next request on it as it
//! closes.
//!
//! The router's layers: the sign-in session (cookie `sandbox_session`, see `identity::auth`);
//! `server_fn_error_status`, since server functions answer every error with 500, arguments that do
//! not parse included, so it reads the `AppError` back from such an answer and gives it its own
//! status; and `refuse_cross_site`, which refuses with 403 `cross_site` any state-changing request
//! that a browser sent from another origin, on every page, server function and REST route. Reads
//! pass. Every answer of the router carries `own_page_headers`: no framing by anyone
//! (`X-Frame-Options: DENY`, `frame-ancestors 'none'`), `nosniff`, `Referrer-Policy:
//! same-origin` and a Content-Security-Policy for our pages; behind TLS (`secure_cookies`) also
//! `Strict-Transport-Security`, and the sign-in cookie is then `__Host-sandbox_session`, Secure.

mod entry;
pub mod listener;
pub mod pages;
pub mod proxy;
pub mod rest;
pub mod sign_in;

use crate::identity::auth;
use crate::net::deadline;
use crate::service::Service;
use crate::service::accounts::RequestAuth;
use crate::service::workers::Workers;
use axum::Router;
use axum::extract::FromRef;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use leptos::prelude::*;
use leptos_axum::{LeptosRoutes, generate_route_list};
use pages::PagesBackend;
use std::future::Future;
use std::sync::Arc;
use tower_sessions::{Expiry, SessionManagerLayer};

/// What every handler gets; one `Arc`, so handing it to a request costs one increment.
#[derive(Clone)]
pub struct AppState(Arc<AppStateInner>);

pub struct AppStateInner {
    pub service: Arc<Service>,
    pub leptos: LeptosOptions,
    /// `proxy.entry_origin`'s host, where only entered editors are served (`entry`).
    pub entry_host: Option<String>,
}

impl std::ops::Deref for AppState {
    type Target = AppStateInner;
    fn deref(&self) -> &AppStateInner {
        &self.0
    }
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos.clone()
    }
}

pub fn leptos_options(config: &crate::config::Config) -> LeptosOptions {
    LeptosOptions::builder()
        .output_name("sandbox")
        .site_root(config.site_root.to_string_lossy().to_string())
        .site_pkg_dir("pkg")
        .site_addr(config.listen_addr())
        .env(leptos::config::Env::PROD)
        .build()
}

/// The whole HTTP surface: pages and server functions, the REST API, the proxy, static files.
/// It makes one [`Front`] per client connection.
#[derive(Clone)]
pub struct App {
    state: AppState,
    router: Router,
}

impl App {
    pub fn new(service: Arc<Service>) -> App {
        let state = router_state(&service);
        let router = router(state.clone(), service);
        App { state, router }
    }

    /// The service for one client connection from `client`; tests drive it with `oneshot`.
    pub fn front(&self, client: std::net::IpAddr) -> Front {
        self.front_holding(client, None)
    }

    fn front_holding(&self, client: std::net::IpAddr, slot: Option<ConnectionSlot>) -> Front {
        Front(Arc::new(Connection {
            state: self.state.clone(),
            router: self.router.clone(),
            client,
            forwarded_for: http::HeaderValue::from_str(&client.to_string()).ok(),
            answer: deadline::Deadline::unset(),
            slot,
        }))
    }
}

/// One client connection's requests. Proxied requests (`/s/…`, the hot path) go straight to the
/// proxy, past the router's matching, path parameters and extensions; the client's address is
/// formatted once per connection. hyper clones it for every request: one `Arc`.
#[derive(Clone)]
pub struct Front(Arc<Connection>);

/// The client's address, on every request the router sees (sign-in counts failures by it).
#[derive(Clone, Copy, Debug)]
pub struct ClientAddr(pub std::net::IpAddr);

struct Connection {
    state: AppState,
    router: Router,
    client: std::net::IpAddr,
    forwarded_for: Option<http::HeaderValue>,
    /// How long the editor may take to answer this connection's request in flight.
    answer: deadline::Deadline,
    /// This connection's place under the cap, kept by a WebSocket it becomes.
    slot: Option<ConnectionSlot>,
}

/// A client connection's place under the connection cap: given back when the connection and
/// the WebSocket relay it may have become have both ended.
pub type ConnectionSlot = Arc<Slot>;

/// What a connection holds while it lasts: its place under its client's cap and under the
/// server's. Fields drop in order: the client's place goes first, so that the connection the
/// freed permit lets in never finds its client's count still full.
pub struct Slot {
    pub(crate) _client: listener::ClientPlace,
    pub(crate) _permit: tokio::sync::OwnedSemaphorePermit,
    /// The place is one of those kept for signed-in traffic (the rest were taken): its
    /// requests must carry a credential (see [`listener`]).
    pub(crate) reserved: bool,
}

type FrontFuture = std::pin::Pin<
    Box<dyn Future<Output = Result<axum::response::Response, std::convert::Infallible>> + Send>,
>;

impl tower::Service<axum::extract::Request> for Front {
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = FrontFuture;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: axum::extract::Request) -> FrontFuture {
        self.serve(request)
    }
}

/// What the server's connections call.
impl hyper::service::Service<http::Request<hyper::body::Incoming>> for Front {
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = FrontFuture;

    fn call(&self, request: http::Request<hyper::body::Incoming>) -> FrontFuture {
        self.serve(request.map(axum::body::Body::new))
    }
}

impl Front {
    fn serve(&self, mut request: axum::extract::Request) -> FrontFuture {
        // Not a proxy for other hosts: and a request without a path would reach code that
        // expects one.
        if request.method() == http::Method::CONNECT {
            let refused = refusal_that_closes(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "CONNECT is not served here",
            );
            return Box::pin(async move { Ok(refused) });
        }
        auth::drop_unreadable_cookies(request.headers_mut());
        if self.0.slot.as_ref().is_some_and(|slot| slot.reserved) && !is_probe(&request) {
            return self.serve_signed_in_only(request);
        }
        self.serve_checked(request)
    }

    fn serve_checked(&self, request: axum::extract::Request) -> FrontFuture {
        if !http_body::Body::is_end_stream(request.body()) {
            return self.serve_with_body(request);
        }
        self.route(request)
    }

    /// On a place kept for signed-in traffic, only a request whose sign-in or token stands for
    /// someone is served; anyone else hears 503 and the place goes back.
    fn serve_signed_in_only(&self, request: axum::extract::Request) -> FrontFuture {
        let front = self.clone();
        Box::pin(async move {
            let signed_in = front
                .0
                .state
                .service
                .accounts
                .caller(request.headers())
                .await
                .is_ok_and(|caller| caller.is_some());
            if signed_in {
                return front.serve_checked(request).await;
            }
            let mut busy = refusal_that_closes(
                StatusCode::SERVICE_UNAVAILABLE,
                "busy",
                "the server is at its connection limit; signed-in requests are still served",
            );
            busy.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_static("5"),
            );
            Ok(busy)
        })
    }

    /// A request with a body that is answered before the body was read to its end (refused,
    /// or too large) leaves the rest of the body on the connection, and hyper then closes it.
    /// Such an answer says so (`Connection: close`), or the client may send its next request on
    /// the connection as it closes, and see that request fail.
    fn serve_with_body(&self, request: axum::extract::Request) -> FrontFuture {
        let read = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = read.clone();
        let request = request.map(|body| {
            Watched::body(body, move |_: &Polled, ended| {
                if ended {
                    seen.store(true, std::sync::atomic::Ordering::Release);
                }
            })
        });
        let answer = self.route(request);
        Box::pin(async move {
            let mut response = answer.await?;
            if !read.load(std::sync::atomic::Ordering::Acquire) {
                response
                    .headers_mut()
                    .insert(http::header::CONNECTION, CLOSE);
            }
            Ok(response)
        })
    }

    fn route(&self, mut request: axum::extract::Request) -> FrontFuture {
        let entering = self
            .0
            .state
            .entry_host
            .as_deref()
            .is_some_and(|host| entry::is_for(host, &request));
        if request.uri().path().starts_with("/s/") {
            let connection = self.0.clone();
            Box::pin(async move {
                let client = proxy::Client {
                    forwarded_for: connection.forwarded_for.as_ref(),
                    answer: &connection.answer,
                    slot: connection.slot.as_ref(),
                    entering,
                };
                Ok(proxy::handle(&connection.state, client, request).await)
            })
        } else if entering {
            let connection = self.0.clone();
            Box::pin(async move { Ok(entry::handle(&connection.state, request).await) })
        } else {
            request.extensions_mut().insert(ClientAddr(self.0.client));
            Box::pin(tower::ServiceExt::oneshot(self.0.router.clone(), request))
        }
    }
}

/// A request's credential, as the service takes it; unauthenticated without one.
pub(crate) async fn request_auth<'a>(
    service: &Service,
    headers: &'a http::HeaderMap,
    session: Option<&'a tower_sessions::Session>,
) -> Result<RequestAuth<'a>, app::error::AppError> {
    let viewer = service
        .accounts
        .caller(headers)
        .await?
        .ok_or(app::error::AppError::Unauthenticated)?
        .viewer()
        .settled()?;
    let sso_confirmed_at = match session {
        Some(session) => auth::sso_confirmed_at(session).await,
        None => None,
    };
    Ok(RequestAuth {
        viewer,
        by_token: auth::bearer_token(headers).is_some(),
        sso_confirmed_at,
        session,
        cookie: service.accounts.session_cookie(headers),
    })
}

const CLOSE: http::HeaderValue = http::HeaderValue::from_static("close");

/// `{error, message}` with `status`, and the connection closed after it.
fn refusal_that_closes(status: StatusCode, code: &str, message: &str) -> axum::response::Response {
    let mut refused = (
        status,
        axum::Json(serde_json::json!({ "error": code, "message": message })),
    )
        .into_response();
    refused
        .headers_mut()
        .insert(http::header::CONNECTION, CLOSE);
    refused
}

/// Health and probe routes, answered on any connection (an orchestrator's probe carries no
/// credential, and a full server must still say it is alive).
fn is_probe(request: &axum::extract::Request) -> bool {
    request.method() == http::Method::GET
        && matches!(
            request.uri().path(),
            "/livez" | "/readyz" | "/api/v1/health"
        )
}

/// A request body whose reading is watched: `seen` is told of each poll's outcome, and whether
/// the body has then reached its end.
pub(crate) struct Watched<F> {
    body: axum::body::Body,
    seen: F,
}

pub(crate) type Polled =
    std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, axum::Error>>>;

impl<F: FnMut(&Polled, bool) + Send + Unpin + 'static> Watched<F> {
    pub(crate) fn body(body: axum::body::Body, seen: F) -> axum::body::Body {
        axum::body::Body::new(Watched { body, seen })
    }
}

impl<F: FnMut(&Polled, bool) + Unpin> http_body::Body for Watched<F> {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Polled {
        let this = &mut *self;
        let polled = std::pin::Pin::new(&mut this.body).poll_frame(cx);
        // The end is a frame with nothing after it, or none.
        let ended = matches!(polled, std::task::Poll::Ready(None)) || this.body.is_end_stream();
        (this.seen)(&polled, ended);
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

fn router_state(service: &Arc<Service>) -> AppState {
    AppState(Arc::new(AppStateInner {
        leptos: leptos_options(service.config()),
        entry_host: service.config().proxy.entry_host(),
        service: service.clone(),
    }))
}

fn router(state: AppState, service: Arc<Service>) -> Router {
    let sessions = SessionManagerLayer::new(service.sign_in_sessions())
        .with_name(auth::session_cookie_name(service.config().secure_cookies))
        .with_http_only(true)
        .with_same_site(tower_sessions::cookie::SameSite::Lax)
        .with_secure(service.config().secure_cookies)
        .with_expiry(Expiry::OnInactivity(time::Duration::days(
            auth::SIGN_IN_IDLE_DAYS,
        )));
    let backend: Arc<dyn app::api::Backend> = Arc::new(PagesBackend(service));
    let routes = generate_route_list(app::App);
    let pages = Router::new()
        .leptos_routes_with_context(&state, routes, move || provide_context(backend.clone()), {
            let options = state.leptos.clone();
            move || app::shell(options.clone())
        })
        .fallback(leptos_axum::file_and_error_handler::<AppState, _>(
            app::shell,
        ))
        .merge(rest::router())
        .merge(sign_in::router());
    let body_state = state.clone();
    Router::new()
        .merge(
            pages
                .layer(axum::middleware::from_fn_with_state(
                    state.clone(),
                    extend_used_sign_in,
                ))
                .layer(sessions),
        )
        .layer(axum::middleware::from_fn_with_state(
            body_state,
            read_body_in_time,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            while_the_database_is_down,
        ))
        .layer(axum::middleware::from_fn(server_fn_error_status))
        .layer(axum::middleware::from_fn(refuse_cross_site))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            own_page_headers,
        ))
        .layer(axum::middleware::from_fn(request_span))
        .with_state(state)
}

/// While the database does not answer, a request that needs it gets 503
/// `database_unavailable` at once, and one already waiting for it gets it as soon as that is
/// seen, rather than each waiting out the pool's timeout. Liveness and the pages' files need no
/// database; editors are past this (`/s/`, from the route cache).
async fn while_the_database_is_down(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let path = request.uri().path();
    if path == "/livez" || path.starts_with("/pkg/") || path == "/favicon.svg" {
        return next.run(request).await;
    }
    let unavailable = || {
        let error = app::error::AppError::DatabaseUnavailable;
        (
            StatusCode::SERVICE_UNAVAILABLE,
            // The next look at the database is a second away.
            [(http::header::RETRY_AFTER, "1")],
            axum::Json(serde_json::json!({ "error": error.code(), "message": error.to_string() })),
        )
            .into_response()
    };
    if state.service.database_down() {
        return unavailable();
    }
    let mut watch = state.service.database_watch();
    tokio::select! {
        answer = next.run(request) => answer,
        _ = watch.wait_for(|down| *down) => unavailable(),
    }
}

const REQUEST_ID: http::HeaderName = http::HeaderName::from_static("x-request-id");

/// Every request to our own routes gets an id (a load balancer's `X-Request-Id`, when it is a
/// plain token, or one made here), carried by every log line of its span and sent back, so that
/// a user's report and the logs meet. Errors are logged at `error`, refusals at `info`, the
/// rest at `debug`. (Proxied editor traffic, the hot path, goes past this.)
async fn request_span(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use tracing::Instrument;
    let id = request
        .headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            (1..=64).contains(&v.len())
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        })
        .map_or_else(crate::util::new_id, str::to_string);
    let span = tracing::info_span!(
        "request",
        request_id = %id,
        method = %request.method(),
        path = %request.uri().path(),
    );
    let started = std::time::Instant::now();
    let mut response = next.run(request).instrument(span.clone()).await;
    let status = response.status().as_u16();
    let ms = started.elapsed().as_millis() as u64;
    span.in_scope(|| match status {
        500.. => tracing::error!(status, ms, "answered"),
        400..=499 => tracing::info!(status, ms, "answered"),
        _ => tracing::debug!(status, ms, "answered"),
    });
    if let Ok(value) = http::HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    response
}

/// A sign-in lasts [`auth::SIGN_IN_IDLE_DAYS`] from its last use: a request of a browser whose
/// sign-in was last extended over an hour ago writes the time into its session, which the
/// session layer then saves with a new end and sends again as a cookie with a new lifetime.
async fn extend_used_sign_in(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let service = &state.service;
    let stale = match service.accounts.caller(request.headers()).await {
        Ok(Some(caller)) => caller
            .sign_in_expires_at
            .is_some_and(|end| auth::sign_in_wants_extending(end, service.now())),
        _ => false,
    };
    if stale
        && let Some(session) = request.extensions().get::<tower_sessions::Session>()
        && let Err(e) = session.insert(auth::SEEN_KEY, service.now()).await
    {
        tracing::warn!(error = %e, "noting a sign-in's use");
    }
    next.run(request).await
}

/// The largest body our own routes read (the server functions' limit); the API's is smaller,
/// but for a scanner's report on an image.
const MAX_OWN_BODY: usize = 2 * 1024 * 1024;

fn own_body_limit(path: &str) -> usize {
    let scans = path
        .strip_prefix("/api/v1/admin/images/")
        .is_some_and(|rest| rest.ends_with("/scans"));
    if scans {
        crate::service::images::MAX_REPORT_BYTES
    } else {
        MAX_OWN_BODY
    }
}

/// A request's body must arrive within `proxy.body_timeout_seconds` of its head (none of our
/// own routes takes a large one): a client that trickles one byte at a time cannot hold its
/// connection, and gets 408; one past [`MAX_OWN_BODY`] gets 413. Either way the connection
/// closes (the body was not read to its end).
async fn read_body_in_time(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use http_body::Body as _;
    if request.body().is_end_stream() {
        return next.run(request).await;
    }
    let refuse = |status: StatusCode, code: &str, message: &str| {
        (
            status,
            axum::Json(serde_json::json!({ "error": code, "message": message })),
        )
            .into_response()
    };
    let limit = own_body_limit(request.uri().path());
    let too_large = || {
        refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            &format!(
                "the request's body is larger than {} MiB",
                limit / (1024 * 1024)
            ),
        )
    };
    let within = std::time::Duration::from_secs(state.service.config().proxy.body_timeout_seconds);
    let (parts, body) = request.into_parts();
    match tokio::time::timeout(within, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => {
            let request = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
            next.run(request).await
        }
        Ok(Err(e)) if e.to_string().contains("length limit") => too_large(),
        Ok(Err(_)) => refuse(
            StatusCode::BAD_REQUEST,
            "invalid",
            "the request's body could not be read",
        ),
        Err(_) => refuse(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "the request's body did not arrive in time",
        ),
    }
}

/// Our pages may be framed by nobody (an editor's answers, which our page frames, have their
/// own through the proxy): no other site can overlay them to steal a click.
const OWN_PAGE_HEADERS: [(http::HeaderName, http::HeaderValue); 4] = [
    (
        http::header::X_FRAME_OPTIONS,
        http::HeaderValue::from_static("DENY"),
    ),
    (
        http::header::X_CONTENT_TYPE_OPTIONS,
        http::HeaderValue::from_static("nosniff"),
    ),
    (
        http::header::REFERRER_POLICY,
        http::HeaderValue::from_static("same-origin"),
    ),
    (
        http::header::CONTENT_SECURITY_POLICY,
        // Leptos' hydration starts from an inline module script, hence 'unsafe-inline' for
        // scripts; the wasm bundle needs 'wasm-unsafe-eval'; editors open in frames of our own.
        http::HeaderValue::from_static(
            "default-src 'self'; script-src 'self' 'unsafe-inline' 'wasm-unsafe-eval'; \
             style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; \
             frame-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; \
             frame-ancestors 'none'",
        ),
    ),
];

/// Behind TLS (`secure_cookies`) browsers are told to come back over HTTPS only, for a year:
/// a later plain-HTTP link cannot be used to strip TLS from a sign-in.
const HSTS: http::HeaderValue = http::HeaderValue::from_static("max-age=31536000");

async fn own_page_headers(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in OWN_PAGE_HEADERS {
        headers.entry(name).or_insert(value);
    }
    if state.service.config().secure_cookies {
        headers.insert(http::header::STRICT_TRANSPORT_SECURITY, HSTS);
    }
    response
}

/// Server functions answer every error they return with 500, including bad arguments, which
/// never reach the function. The body is an [`app::error::AppError`]; it carries its own status.
async fn server_fn_error_status(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let path = request.uri().path();
    let server_fn = path.starts_with("/api/") && !path.starts_with("/api/v1/");
    let mut response = next.run(request).await;
    // A form posted to a server function without script goes back to the page it came from,
    // as its `Referer` says: only a path of ours is somewhere to send a browser.
    if server_fn
        && response.status().is_redirection()
        && response
            .headers()
            .get(http::header::LOCATION)
            .is_some_and(|to| !to.to_str().is_ok_and(app::domain::paths::is_local_path))
    {
        response
            .headers_mut()
            .insert(http::header::LOCATION, http::HeaderValue::from_static("/"));
    }
    if response.status() != StatusCode::INTERNAL_SERVER_ERROR
        || !response
            .headers()
            .contains_key(leptos::server_fn::error::SERVER_FN_ERROR_HEADER)
    {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // An error is a short JSON object; anything else passes on as it came.
    let Ok(bytes) = axum::body::to_bytes(body, 64 * 1024).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    if let Ok(error) = serde_json::from_slice::<app::error::AppError>(&bytes)
        && let Ok(status) = StatusCode::from_u16(error.status())
    {
        parts.status = status;
    }
    axum::response::Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// Another site must not make a signed-in browser act here: sign in as someone else, launch,
/// stop. Reads pass; the REST API's callers are scripts, which send no Origin.
async fn refuse_cross_site(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if !request.method().is_safe() && auth::from_foreign_origin(request.headers()) {
        return proxy::cross_site_refused();
    }
    next.run(request).await
}

/// Serves until `shutdown` resolves; background work (activity flushing, ending expired
/// sessions) runs alongside. On shutdown, long streams end first, editors are stopped when so
/// configured, then open requests get a few seconds to finish.
pub async fn run(
    listener: tokio::net::TcpListener,
    service: Arc<Service>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let workers = Arc::new(Workers::start(&service));
    let app = App::new(service);
    let winding = workers.clone();
    let signal = async move {
        shutdown.await;
        winding.wind_down().await;
    };
    listener::serve_connections(listener, app, signal).await;
    workers.abort();
    Ok(())
}
