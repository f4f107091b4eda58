#![recursion_limit = "512"]
//! The server: everything that touches the world.
//!
//! - [`config`]: one TOML file plus `SANDBOX_*` environment overrides.
//! - [`store`]: SQLite or PostgreSQL (sqlx `Any`), migrations, the ledger, the session history.
//! - [`auth`]: local accounts (argon2), session cookies (tower-sessions), bearer tokens.
//! - [`runtime`]: where editors run (`local` processes or `kube` pods), behind the [`runtime::Runtime`] trait.
//! - [`service`]: the rules of who may do what; the pages and the REST API both call it.
//! - [`proxy`]: `/s/<id>/…` to the session's editor, HTTP and WebSocket, owner only.
//! - [`rest`]: the REST API under `/api/v1`.
//!
//! [`run`] serves on a listener until a shutdown signal, so tests bind `127.0.0.1:0`.

pub mod activity;
pub mod admin;
pub mod auth;
pub mod config;
pub mod deadline;
pub mod editors;
pub mod events;
pub mod gpu;
pub mod guard;
pub mod images;
pub mod oidc;
pub mod outbound;
pub mod promotion;
pub mod proxy;
pub mod registry;
pub mod relay;
pub mod rest;
pub mod runtime;
pub mod service;
pub mod serving;
pub mod sign_in;
pub mod store;
pub mod upstream;

use axum::Router;
use axum::extract::FromRef;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use leptos::prelude::*;
use leptos_axum::{LeptosRoutes, generate_route_list};
use service::{PagesBackend, Service};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tower_sessions::{Expiry, SessionManagerLayer};

/// What every handler gets; one `Arc`, so handing it to a request costs one increment.
#[derive(Clone)]
pub struct AppState(Arc<AppStateInner>);

pub struct AppStateInner {
    pub service: Arc<Service>,
    pub leptos: LeptosOptions,
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

pub fn leptos_options(config: &config::Config) -> LeptosOptions {
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

struct Connection {
    state: AppState,
    router: Router,
    forwarded_for: Option<http::HeaderValue>,
    /// How long the editor may take to answer this connection's request in flight.
    answer: deadline::Deadline,
    /// This connection's place under the cap, kept by a WebSocket it becomes.
    slot: Option<ConnectionSlot>,
}

/// A client connection's place under the connection cap: given back when the connection and
/// the WebSocket relay it may have become have both ended.
pub type ConnectionSlot = Arc<tokio::sync::OwnedSemaphorePermit>;

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
        auth::drop_unreadable_cookies(request.headers_mut());
        if !http_body::Body::is_end_stream(request.body()) {
            return self.serve_with_body(request);
        }
        self.route(request)
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

    fn route(&self, request: axum::extract::Request) -> FrontFuture {
        if request.uri().path().starts_with("/s/") {
            let connection = self.0.clone();
            Box::pin(async move {
                let client = proxy::Client {
                    forwarded_for: connection.forwarded_for.as_ref(),
                    answer: &connection.answer,
                    slot: connection.slot.as_ref(),
                };
                Ok(proxy::handle(&connection.state, client, request).await)
            })
        } else {
            Box::pin(tower::ServiceExt::oneshot(self.0.router.clone(), request))
        }
    }
}

const CLOSE: http::HeaderValue = http::HeaderValue::from_static("close");

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
        leptos: leptos_options(&service.config),
        service: service.clone(),
    }))
}

fn router(state: AppState, service: Arc<Service>) -> Router {
    let sessions = SessionManagerLayer::new(store::HttpSessionStore::new(service.store.clone()))
        .with_name(auth::SESSION_COOKIE)
        .with_http_only(true)
        .with_same_site(tower_sessions::cookie::SameSite::Lax)
        .with_secure(service.config.secure_cookies)
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
    Router::new()
        .merge(pages.layer(sessions))
        .layer(axum::middleware::from_fn(server_fn_error_status))
        .layer(axum::middleware::from_fn(refuse_cross_site))
        .with_state(state)
}

/// Server functions answer every error they return with 500, including bad arguments, which
/// never reach the function. The body is an [`app::error::AppError`]; it carries its own status.
async fn server_fn_error_status(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let response = next.run(request).await;
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
    let background = tokio::spawn(background(service.clone()));
    let lease = tokio::spawn(guard::keep_instance_lease(service.clone()));
    let warm_pool = tokio::spawn(service.clone().keep_warm_pool());
    let queue = tokio::spawn(service.clone().keep_queue_moving());
    let app = App::new(service.clone());
    let stopping = service.clone();
    let signal = async move {
        shutdown.await;
        // The keeper first, and waited for: no editor starts after this, and none is left
        // half-started without a record of it.
        stopping.closing.send_replace(true);
        let _ = warm_pool.await;
        stopping.flush_activity().await;
        if stopping.config.sessions.stop_on_shutdown {
            stopping
                .stop_all(
                    app::domain::session::EndReason::Admin,
                    "the server shut down; unused credits were refunded",
                )
                .await;
        }
        stopping.stop_warm_pool().await;
        stopping.release_instance().await;
        // After the stops, so open progress streams show the end before they close.
        stopping.shutdown.send_replace(true);
    };
    serve_connections(listener, app, signal).await;
    background.abort();
    lease.abort();
    queue.abort();
    Ok(())
}

/// Serves HTTP/1.1 (upgrades included) on `listener` until `stop` resolves, then lets open
/// requests finish, for [`DRAIN_TIMEOUT`] at most. A client that opens connections and sends
/// nothing does not keep them (`proxy.header_timeout_seconds`, also the keep-alive idle time).
/// Holds no more connections at once, WebSockets included, than `proxy.max_connections` (by
/// default half the file limit, since each may also open one to an editor).
async fn serve_connections(
    listener: tokio::net::TcpListener,
    app: App,
    stop: impl Future<Output = ()>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(deadline::CoarseTimer)
        .header_read_timeout(Duration::from_secs(
            app.state.service.config.proxy.header_timeout_seconds,
        ));
    let cap = connection_cap(app.state.service.config.proxy.max_connections);
    let serving_threads = serving::thread_count(app.state.service.config.proxy.serving_threads);
    let open = Arc::new(tokio::sync::Semaphore::new(cap));
    let (draining, drain) = tokio::sync::watch::channel(false);
    let mut stop = std::pin::pin!(stop);
    loop {
        let permit = tokio::select! {
            biased;
            () = &mut stop => break,
            permit = open.clone().acquire_owned() => permit.expect("the semaphore stays open"),
        };
        let (tcp, peer) = tokio::select! {
            biased;
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, say: wait rather than spin; a client that gave up
                    // before we accepted is no error of ours.
                    if !matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::ConnectionReset
                    ) {
                        tracing::warn!(error = %e, "accepting a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    continue;
                }
            },
        };
        // Small writes (WebSocket frames, short responses) go out at once.
        let _ = tcp.set_nodelay(true);
        keep_alive(&tcp);
        // Off this runtime's driver, to be watched by the serving thread's.
        let Ok(tcp) = tcp.into_std() else { continue };
        let front = app.front_holding(peer.ip(), Some(Arc::new(permit)));
        let http = http.clone();
        let mut drain = drain.clone();
        serving::spawn(serving_threads, async move {
            let Ok(tcp) = tokio::net::TcpStream::from_std(tcp) else {
                return;
            };
            let connection = http
                .serve_connection(hyper_util::rt::TokioIo::new(tcp), front)
                .with_upgrades();
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => return,
                _ = drain.wait_for(|draining| *draining) => {}
            }
            // Finishes the request in flight, if any, then closes.
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        });
    }
    drop(listener);
    draining.send_replace(true);
    // Each connection gives its permit back when it closes.
    let all = u32::try_from(cap).unwrap_or(u32::MAX);
    if tokio::time::timeout(DRAIN_TIMEOUT, open.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!("requests still open after {DRAIN_TIMEOUT:?}; closing them");
    }
}

/// Has the kernel probe an idle client connection after a minute, so that one whose client
/// vanished (a laptop closed on an open WebSocket) ends within about two more and gives its
/// place under the cap back.
fn keep_alive(tcp: &tokio::net::TcpStream) {
    use std::os::fd::AsRawFd;
    let fd = tcp.as_raw_fd();
    for (level, option, value) in [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 60),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 15),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 8),
    ] {
        let value: libc::c_int = value;
        // SAFETY: `fd` is the open socket `tcp` owns; `value` outlives the call and its size
        // is passed with it.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                option,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

/// How many client connections to hold at once: `configured`, or else half the open-file
/// limit (the other half is for editors, the database and files). The limit is raised to its
/// hard limit first either way.
fn connection_cap(configured: u64) -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid rlimit for the call to fill in and to read.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 512;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    if configured > 0 {
        return usize::try_from(configured).unwrap_or(usize::MAX);
    }
    usize::try_from(limit.rlim_cur / 2)
        .unwrap_or(usize::MAX)
        .clamp(64, 65_536)
}

/// How long open requests may take to finish once the server shuts down.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

async fn background(service: Arc<Service>) {
    let sessions = store::HttpSessionStore::new(service.store.clone());
    let period = Duration::from_millis(service.config.idle.reaper_period_ms);
    // The first pass comes a period after start (start-up has recovered the sessions itself).
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let sample_every = Duration::from_secs(service.config.idle.sample_seconds);
    let mut sampled = tokio::time::Instant::now();
    let mut swept = tokio::time::Instant::now();
    let mut sign_ins_swept = tokio::time::Instant::now();
    let mut reconciled = tokio::time::Instant::now();
    // Pushes left waiting by a restart go out at once; then a look each minute.
    let mut promoted: Option<tokio::time::Instant> = None;
    loop {
        tick.tick().await;
        // Activity first, so the reaper judges on what the proxy saw up to now.
        service.flush_activity().await;
        if sampled.elapsed() >= sample_every {
            sampled = tokio::time::Instant::now();
            let sampler = service.clone();
            tokio::spawn(async move { sampler.sample_activity().await });
        }
        service.reap().await;
        service.forget_stale_routes().await;
        if service.config.runtime == runtime::RuntimeKind::Kube
            && reconciled.elapsed() >= Duration::from_secs(15)
        {
            reconciled = tokio::time::Instant::now();
            runtime::kube::reconcile::tick(&service).await;
        }
        if promoted.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
            promoted = Some(tokio::time::Instant::now());
            let pusher = service.clone();
            tokio::spawn(async move { pusher.resume_promotions().await });
        }
        if swept.elapsed() >= Duration::from_secs(10) {
            swept = tokio::time::Instant::now();
            service.events.sweep();
            service.upstreams.sweep();
        }
        if sign_ins_swept.elapsed() >= Duration::from_secs(3600) {
            sign_ins_swept = tokio::time::Instant::now();
            if let Err(e) = sessions.delete_expired().await {
                tracing::warn!(error = %e, "removing expired sign-ins");
            }
        }
    }
}

/// Opens the store and applies migrations: enough for the command line, which must not
/// touch the pool or the sessions of a server that may be running.
pub async fn open_service(config: config::Config) -> anyhow_lite::Result<Arc<Service>> {
    std::fs::create_dir_all(&config.data_dir).map_err(|e| {
        anyhow_lite::Error(format!(
            "cannot create data_dir {}: {e}",
            config.data_dir.display()
        ))
    })?;
    let store = store::Store::connect(&config.database_url())
        .await
        .map_err(anyhow_lite::wrap("database"))?;
    store
        .migrate()
        .await
        .map_err(anyhow_lite::wrap("migration"))?;
    let (gpus, enforcement) = gpu::discover(&config);
    let runtime: Arc<dyn runtime::Runtime> = match config.runtime {
        runtime::RuntimeKind::Local => Arc::new(runtime::LocalRuntime::new(
            runtime::ToolPaths::from_config(&config.editors),
            &config.data_dir,
        )),
        // In the cluster: its service account; outside: KUBECONFIG or ~/.kube/config.
        runtime::RuntimeKind::Kube => {
            let client = kube::Client::try_default()
                .await
                .map_err(anyhow_lite::wrap("kubernetes client"))?;
            let timing = runtime::kube::Timing {
                start_timeout: Duration::from_secs(config.sessions.ready_timeout_seconds),
                ..runtime::kube::Timing::default()
            };
            Arc::new(
                runtime::kube::KubeRuntime::new(client, config.kube.clone()).with_timing(timing),
            )
        }
    };
    Ok(Arc::new(Service::new(
        config,
        store,
        runtime,
        gpus,
        enforcement,
    )))
}

/// A service ready to serve: the pool written, sessions left by a previous run recovered.
pub async fn build_service(config: config::Config) -> anyhow_lite::Result<Arc<Service>> {
    let service = open_service(config).await?;
    service
        .sync_pool()
        .await
        .map_err(anyhow_lite::wrap("pool"))?;
    // Alive before recovering, so that no other server takes this one's launches for orphans.
    service.keep_alive().await;
    service
        .recover()
        .await
        .map_err(anyhow_lite::wrap("recovery"))?;
    Ok(service)
}

/// A plain error for start-up, where the only thing to do is to say what failed.
pub mod anyhow_lite {
    #[derive(Debug)]
    pub struct Error(pub String);
    impl std::fmt::Display for Error {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }
    impl std::error::Error for Error {}
    pub type Result<T> = std::result::Result<T, Error>;
    pub fn wrap<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> Error {
        move |e| Error(format!("{what}: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    fn option(tcp: &tokio::net::TcpStream, level: libc::c_int, name: libc::c_int) -> libc::c_int {
        let mut value: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `value` and `len` are valid for the call to fill in.
        let done = unsafe {
            libc::getsockopt(
                tcp.as_raw_fd(),
                level,
                name,
                (&mut value as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(done, 0);
        value
    }

    #[tokio::test]
    async fn client_connections_are_probed_when_idle() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        assert_eq!(option(&accepted, libc::SOL_SOCKET, libc::SO_KEEPALIVE), 0);
        super::keep_alive(&accepted);
        assert_eq!(option(&accepted, libc::SOL_SOCKET, libc::SO_KEEPALIVE), 1);
        assert_eq!(option(&accepted, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE), 60);
        assert_eq!(option(&accepted, libc::IPPROTO_TCP, libc::TCP_KEEPCNT), 8);
    }
}
