//! One way to build a running server for tests (crates.io's TestApp idea): a temp data dir,
//! SQLite, a real listener on 127.0.0.1:0, and a chosen runtime.
#![allow(dead_code)]

use app::domain::launch::EditorKind;
use app::domain::scope::Scopes;
use app::model::Role;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use server::config::Config;
use server::runtime::{EditorLaunch, LocalRuntime, Running, Runtime, RuntimeError};
use server::service::Service;
use server::store::Store;
use server::util::ManualClock;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The runtime a test server runs on; None: the real local one.
enum Runtimes {
    Any(Option<Arc<dyn Runtime>>),
    Kube(Arc<server::runtime::kube::KubeRuntime>),
}

pub struct TestApp {
    pub addr: SocketAddr,
    pub service: Arc<Service>,
    /// The server's database, to set up and look at what no API shows.
    pub store: Store,
    /// The runtime the server's editors run on.
    pub runtime: Arc<dyn Runtime>,
    /// The clock the server's store and service read, when the test set it by hand.
    pub clock: Option<Arc<ManualClock>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
    pub dir: tempfile::TempDir,
    client: Client<HttpConnector, Full<Bytes>>,
}

pub fn tools_dir() -> PathBuf {
    std::env::var("SANDBOX_EDITORS__TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tools"))
}

pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Response {
    /// Fails the test with the body when the status is not `expected`.
    pub fn assert_status(&self, expected: StatusCode) -> &Response {
        assert_eq!(
            self.status,
            expected,
            "{}",
            String::from_utf8_lossy(&self.body)
        );
        self
    }

    /// The whole `Set-Cookie` of the cookie `name` (its attributes too), if this answer sets it.
    pub fn set_cookie(&self, name: &str) -> Option<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|v| v.split_once('=').is_some_and(|(n, _)| n == name))
            .map(str::to_string)
    }

    /// The sign-in cookie this answer sets, if it sets one.
    pub fn session_cookie(&self) -> Option<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|v| v.strip_prefix("sandbox_session="))
            .and_then(|v| v.split(';').next())
            .map(str::to_string)
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

impl TestApp {
    /// A server whose editors run through `runtime`; None means the real local runtime.
    pub async fn start(runtime: Option<Arc<dyn Runtime>>) -> TestApp {
        Self::start_with(runtime, |_| {}).await
    }

    pub async fn start_with(
        runtime: Option<Arc<dyn Runtime>>,
        adjust: impl FnOnce(&mut Config),
    ) -> TestApp {
        Self::start_inner(Runtimes::Any(runtime), adjust, None).await
    }

    /// A server on Kubernetes (a fake API server behind `runtime`), with its reconciler.
    pub async fn start_kube(
        runtime: server::runtime::kube::KubeRuntime,
        adjust: impl FnOnce(&mut Config),
    ) -> TestApp {
        Self::start_inner(Runtimes::Kube(Arc::new(runtime)), adjust, None).await
    }

    /// A server on Kubernetes whose time stands still until the test moves it.
    pub async fn start_kube_clocked(
        runtime: server::runtime::kube::KubeRuntime,
        adjust: impl FnOnce(&mut Config),
    ) -> TestApp {
        let clock = Some(Arc::new(ManualClock::now()));
        Self::start_inner(Runtimes::Kube(Arc::new(runtime)), adjust, clock).await
    }

    /// A server whose time stands still until the test moves [`TestApp::clock`].
    pub async fn start_clocked(
        runtime: Option<Arc<dyn Runtime>>,
        adjust: impl FnOnce(&mut Config),
    ) -> TestApp {
        Self::start_inner(
            Runtimes::Any(runtime),
            adjust,
            Some(Arc::new(ManualClock::now())),
        )
        .await
    }

    /// Moves the server's clock on (a server started with [`TestApp::start_clocked`]).
    pub fn advance(&self, by: Duration) {
        self.clock.as_ref().expect("a clocked server").advance(by);
    }

    async fn start_inner(
        runtimes: Runtimes,
        adjust: impl FnOnce(&mut Config),
        clock: Option<Arc<ManualClock>>,
    ) -> TestApp {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = Config {
            data_dir: dir.path().to_path_buf(),
            ..Config::default()
        };
        config.editors.tools_dir = tools_dir();
        config.pool.detect_nvidia = false;
        // Tests that want pre-started editors ask for them.
        config.pool.warm.clear();
        // Bound first: the configuration names the address the server really has (a sandbox
        // forwards it in).
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        config.listen = listener.local_addr().unwrap().to_string();
        adjust(&mut config);
        config.validate().expect("test config");
        let store = Store::connect(&config.database_url()).await.expect("store");
        store.migrate().await.expect("migrate");
        let store = match &clock {
            Some(clock) => store.with_clock(clock.clone()),
            None => store,
        };
        let gpus = config.declared_gpus();
        let (service, runtime) = match runtimes {
            Runtimes::Kube(kube) => {
                let (gpus, enforcement) = server::gpu::on_kube(&config);
                (
                    Service::on_kube(config, store.clone(), kube.clone(), gpus, enforcement),
                    kube as Arc<dyn Runtime>,
                )
            }
            Runtimes::Any(runtime) => {
                let runtime =
                    runtime.unwrap_or_else(|| Arc::new(LocalRuntime::from_config(&config)));
                let service = Service::new(
                    config,
                    store.clone(),
                    runtime.clone(),
                    gpus,
                    server::gpu::Enforcement::None,
                );
                (service, runtime)
            }
        };
        let service = Arc::new(service);
        service.guard.sync_pool().await.expect("pool");
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let running = service.clone();
        let server = tokio::spawn(async move {
            server::run(listener, running, async move {
                let _ = rx.await;
            })
            .await
            .expect("server");
        });
        let client = Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
        TestApp {
            addr,
            service,
            store,
            runtime,
            clock,
            shutdown: Some(tx),
            server: Some(server),
            dir,
            client,
        }
    }

    /// The session's record as the store has it.
    /// Points another server at this one's database and data directory: a restart, once this
    /// one has stopped.
    pub fn same_store(&self) -> impl Fn(&mut Config) + use<> {
        let database = self.service.config().database_url();
        let data_dir = self.service.config().data_dir.clone();
        move |c| {
            c.database_url = database.clone();
            c.data_dir = data_dir.clone();
        }
    }

    pub async fn record(&self, id: &str) -> server::store::SessionRecord {
        self.store
            .session(id)
            .await
            .expect("the store answers")
            .expect("the session exists")
    }

    /// A user with a password ("password123") and an API token.
    pub async fn user(&self, name: &str) -> (String, String) {
        let user = self
            .service
            .accounts
            .create_user(name, Some("password123"), Role::User, None)
            .await
            .expect("user");
        let (token, hash) = server::auth::new_api_token();
        self.store
            .create_token(&user.id, &hash, "test", Scopes::ALL, None)
            .await
            .expect("token");
        (user.id, token)
    }

    /// A sign-in through the pages' server function, as the page's script sends it.
    pub async fn sign_in(&self, name: &str, password: &str) -> Response {
        let request =
            Request::post(self.url(<app::api::Login as leptos::server_fn::ServerFn>::PATH))
                .header("accept", "application/json")
                .header("content-type", "application/x-www-form-urlencoded")
                .body(Full::new(format!("name={name}&password={password}").into()))
                .unwrap();
        self.send(request).await
    }

    /// Signs `name` (password "password123") in through the pages' server function; the
    /// session cookie's value.
    pub async fn sign_in_cookie(&self, name: &str) -> String {
        let answer = self.sign_in(name, "password123").await;
        answer
            .session_cookie()
            .unwrap_or_else(|| panic!("signed in: {:?}", answer.status))
    }

    /// Runs SQL against the server's database, for setting up what no API offers (a past end time).
    pub async fn sql(&self, statement: &str, id: &str) {
        sqlx::any::install_default_drivers();
        let pool = sqlx::AnyPool::connect(&self.service.config().database_url())
            .await
            .expect("database");
        sqlx::query(statement)
            .bind(id)
            .execute(&pool)
            .await
            .expect("sql");
        pool.close().await;
    }

    /// One number from the server's database (`$1` bound to `id`).
    pub async fn sql_i64(&self, statement: &str, id: &str) -> i64 {
        sqlx::any::install_default_drivers();
        let pool = sqlx::AnyPool::connect(&self.service.config().database_url())
            .await
            .expect("database");
        let value = sqlx::query_scalar::<_, i64>(statement)
            .bind(id)
            .fetch_one(&pool)
            .await
            .expect("sql");
        pool.close().await;
        value
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The answer as it arrives: its body is read by the caller.
    pub async fn open(
        &self,
        request: Request<Full<Bytes>>,
    ) -> hyper::Response<hyper::body::Incoming> {
        self.client.request(request).await.expect("request")
    }

    pub async fn send(&self, request: Request<Full<Bytes>>) -> Response {
        collected(self.client.request(request).await.expect("request")).await
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        json: Option<serde_json::Value>,
    ) -> Response {
        self.send(request_to(self.addr, method, path, token, json))
            .await
    }

    pub async fn get(&self, path: &str, token: Option<&str>) -> Response {
        self.call(Method::GET, path, token, None).await
    }

    pub async fn delete(&self, path: &str, token: Option<&str>) -> Response {
        self.call(Method::DELETE, path, token, None).await
    }

    /// The session's progress stream, read to its end (which must come `within`).
    pub async fn events(&self, id: &str, token: &str, within: Duration) -> Response {
        let path = format!("/api/v1/sessions/{id}/events");
        tokio::time::timeout(within, self.get(&path, Some(token)))
            .await
            .expect("the progress stream ends in time")
    }

    /// A WebSocket to `path` through the proxy, as the owner of `token`.
    pub async fn websocket(&self, path: &str, token: &str) -> Result<WebSocket, WsError> {
        websocket_at(self.addr, path, token).await
    }

    /// Polls the session until `done` holds for it (90 s at most).
    pub async fn wait_for(
        &self,
        token: &str,
        id: &str,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
        loop {
            let view = self
                .get(&format!("/api/v1/sessions/{id}"), Some(token))
                .await
                .json();
            if done(&view) {
                return view;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the session did not get there in time: {view}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for session `id` to end `failed`, its detail saying `why`, and checks that its user
    /// (`user_id`) has exactly the credits `before` it: a failed launch costs nothing.
    pub async fn assert_fails_free(
        &self,
        token: &str,
        id: &str,
        why: &str,
        user_id: &str,
        before: (i64, i64),
    ) {
        let view = self.wait_for(token, id, |v| v["state"] == "ended").await;
        assert_eq!(view["end_reason"], "failed", "{view}");
        assert!(
            view["detail"].as_str().unwrap_or_default().contains(why),
            "{view}"
        );
        assert_eq!(
            self.store.credits(user_id).await.unwrap(),
            before,
            "a failed launch costs nothing"
        );
    }

    /// A new admin `name` and a token of theirs with every scope.
    pub async fn admin_token(&self, name: &str) -> String {
        let admin = self
            .service
            .accounts
            .create_user(name, Some("password123"), app::model::Role::Admin, None)
            .await
            .expect("admin");
        let (token, hash) = server::auth::new_api_token();
        self.store
            .create_token(
                &admin.id,
                &hash,
                "test",
                app::domain::scope::Scopes::ALL,
                None,
            )
            .await
            .expect("token");
        token
    }

    /// `POST /api/v1/sessions` for an 8 GB slice.
    pub async fn launch(&self, token: &str, editor: &str, minutes: u32) -> Response {
        let body =
            serde_json::json!({ "editor": editor, "slice_mib": 8192, "duration_minutes": minutes });
        self.call(Method::POST, "/api/v1/sessions", Some(token), Some(body))
            .await
    }

    /// Launches 30 minutes of `editor`; the new session's id.
    pub async fn launch_id(&self, token: &str, editor: &str) -> String {
        let created = self.launch(token, editor, 30).await;
        created.assert_status(StatusCode::CREATED);
        created.json()["id"].as_str().unwrap().to_string()
    }

    /// Launches and waits until the session is ready (or fails the test with the session's detail).
    pub async fn launch_ready(&self, token: &str, editor: &str) -> String {
        let id = self.launch_id(token, editor).await;
        let view = self
            .wait_for(token, &id, |v| {
                v["state"] == "ready" || v["state"] == "ended"
            })
            .await;
        assert_eq!(view["state"], "ready", "launch failed: {}", view["detail"]);
        id
    }

    /// Shuts the server down; returns its data directory, deleted when dropped.
    pub async fn stop(mut self) -> StoppedData {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            tokio::time::timeout(Duration::from_secs(30), server)
                .await
                .expect("the server shuts down in time")
                .expect("the server task");
        }
        StoppedData(std::mem::replace(
            &mut self.dir,
            tempfile::tempdir().expect("temp dir"),
        ))
    }
}

/// A stopped server's data directory, deleted when dropped, what is mounted in it (workspaces'
/// file systems) unmounted first.
pub struct StoppedData(tempfile::TempDir);

impl StoppedData {
    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for StoppedData {
    fn drop(&mut self) {
        unmount_under(self.0.path());
    }
}

/// An editor stand-in: an in-process HTTP server that checks the proxy's credentials and
/// answers status, echo, upload and WebSocket echo routes under its base path.
pub struct FakeRuntime {
    pub started: std::sync::Mutex<Vec<String>>,
    pub stopped: std::sync::Mutex<Vec<String>>,
    pub fail_start: bool,
    /// What its Jupyter-like `api/kernels` says: a kernel executing.
    pub busy: Arc<std::sync::atomic::AtomicBool>,
    /// Offers pre-started editors; `bound` records (session, user) of each workspace binding.
    pub prestart: bool,
    pub bound: std::sync::Mutex<Vec<(String, String)>>,
    /// Binding a user's workspace to a pre-started editor fails.
    pub fail_bind: bool,
    /// How long a stop takes, as a real editor's does.
    pub stop_takes: Duration,
    /// Started editors never answer.
    pub never_ready: bool,
    /// Cores every editor's processes use, in hundredths (as `cpu_load` reports them).
    pub cpu_centi_cores: Arc<std::sync::atomic::AtomicU32>,
    /// Where users' workspaces lie (one directory per user name), for promotion.
    pub workspaces: Option<PathBuf>,
}

impl FakeRuntime {
    pub fn new() -> Arc<FakeRuntime> {
        Arc::new(Self::plain())
    }

    pub fn plain() -> FakeRuntime {
        FakeRuntime {
            started: Default::default(),
            stopped: Default::default(),
            fail_start: false,
            busy: Default::default(),
            prestart: false,
            bound: Default::default(),
            fail_bind: false,
            stop_takes: Duration::ZERO,
            never_ready: false,
            cpu_centi_cores: Default::default(),
            workspaces: None,
        }
    }

    /// The editor process dies on its own (the crash the reaper must notice).
    pub fn crash(handle: &str) {
        if let Some(task) = FAKE_TASKS.lock().unwrap().remove(handle) {
            task.abort();
        }
    }
}

#[async_trait::async_trait]
impl Runtime for FakeRuntime {
    fn availability(&self) -> Vec<(EditorKind, Result<(), String>)> {
        EditorKind::ALL.into_iter().map(|e| (e, Ok(()))).collect()
    }

    async fn start(&self, launch: &EditorLaunch) -> Result<Running, RuntimeError> {
        if self.fail_start {
            return Err(RuntimeError::Failed {
                message: "fake editor refused to start".into(),
                log_tail: "Traceback: something broke".into(),
            });
        }
        let secret = format!("secret-{}", launch.session_id);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let expected = match server::editors::upstream_auth(launch.editor, &secret) {
            server::editors::UpstreamAuth::Header(_, value) => value,
            server::editors::UpstreamAuth::Cookie(name, value) => format!("{name}={value}"),
        };
        let app = fake_editor(launch.base_path.clone(), expected, self.busy.clone());
        let handle = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        // The handle string names the task so stop() can end it.
        let key = format!("{}", addr.port());
        FAKE_TASKS.lock().unwrap().insert(key.clone(), handle);
        self.started.lock().unwrap().push(launch.session_id.clone());
        Ok(Running {
            upstream: addr.to_string(),
            secret,
            handle: key,
        })
    }

    async fn wait_ready(
        &self,
        _: &EditorLaunch,
        _: &Running,
        _: Duration,
    ) -> Result<(), RuntimeError> {
        if self.never_ready {
            std::future::pending::<()>().await;
        }
        Ok(())
    }

    async fn stop(&self, handle: &str) -> Result<(), RuntimeError> {
        tokio::time::sleep(self.stop_takes).await;
        if let Some(task) = FAKE_TASKS.lock().unwrap().remove(handle) {
            task.abort();
        }
        self.stopped.lock().unwrap().push(handle.to_string());
        Ok(())
    }

    async fn is_alive(&self, handle: &str) -> bool {
        FAKE_TASKS.lock().unwrap().contains_key(handle)
    }

    async fn last_words(&self, handle: &str) -> String {
        format!("MemoryError in the kernel of {handle}")
    }

    async fn cpu_load(&self, handles: &[String]) -> std::collections::HashMap<String, f64> {
        let cores = f64::from(
            self.cpu_centi_cores
                .load(std::sync::atomic::Ordering::Relaxed),
        ) / 100.0;
        handles.iter().map(|h| (h.clone(), cores)).collect()
    }

    async fn memory_used(&self, handles: &[String]) -> std::collections::HashMap<String, u64> {
        handles.iter().map(|h| (h.clone(), FAKE_RAM_MIB)).collect()
    }

    fn workspace_dir(&self, user_name: &str) -> Option<PathBuf> {
        self.workspaces.as_ref().map(|w| w.join(user_name))
    }

    fn prestarts_editors(&self) -> bool {
        self.prestart
    }

    async fn bind_workspace(
        &self,
        launch_id: &str,
        user_name: &str,
        _disk_mib: u64,
    ) -> Result<(), RuntimeError> {
        if self.fail_bind {
            // After the hand-over's clock started, as a real bind would: time passed is not charged.
            tokio::time::sleep(Duration::from_millis(5)).await;
            return Err(RuntimeError::Failed {
                message: "the workspace volume is missing".into(),
                log_tail: String::new(),
            });
        }
        self.bound
            .lock()
            .unwrap()
            .push((launch_id.to_string(), user_name.to_string()));
        Ok(())
    }
}

/// Lets the stand-in's `stream` route send its last line.
pub static STREAM_GATE: std::sync::LazyLock<tokio::sync::Notify> =
    std::sync::LazyLock::new(tokio::sync::Notify::new);

/// What the fake runtime says every editor's processes hold.
pub const FAKE_RAM_MIB: u64 = 256;

static FAKE_TASKS: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<String, tokio::task::JoinHandle<()>>>,
> = std::sync::LazyLock::new(Default::default);

fn fake_editor(
    base: String,
    expected_auth: String,
    busy: Arc<std::sync::atomic::AtomicBool>,
) -> axum::Router {
    use axum::extract::ws::{Message, WebSocketUpgrade};
    use axum::http::HeaderMap as Headers;
    use axum::routing::{any, get, post};
    let check = move |headers: &Headers| {
        headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(expected_auth.as_str())
    };
    let status_check = check.clone();
    let ws_check = check.clone();
    let kernels_check = check.clone();
    axum::Router::new()
        .route(
            &format!("{base}api/kernels"),
            get(move |headers: Headers| async move {
                if !kernels_check(&headers) {
                    return (StatusCode::FORBIDDEN, "wrong token".to_string());
                }
                let state = if busy.load(std::sync::atomic::Ordering::Relaxed) {
                    "busy"
                } else {
                    "idle"
                };
                (
                    StatusCode::OK,
                    serde_json::json!([{ "id": "k1", "name": "python3", "execution_state": state }])
                        .to_string(),
                )
            }),
        )
        .route(
            &format!("{base}api/status"),
            get(move |headers: Headers| async move {
                if !status_check(&headers) {
                    return (StatusCode::FORBIDDEN, "wrong token".to_string());
                }
                let leaked = headers
                    .get("cookie")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .contains("sandbox_session");
                let forwarded_for = headers
                    .get("x-forwarded-for")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                let cookies = headers
                    .get("cookie")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                let forwarded_proto = headers
                    .get("x-forwarded-proto")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                (
                    StatusCode::OK,
                    serde_json::json!({
                        "ok": true,
                        "saw_our_cookie": leaked,
                        "forwarded_for": forwarded_for,
                        "cookies": cookies,
                        "forwarded_proto": forwarded_proto,
                    })
                    .to_string(),
                )
            }),
        )
        .route(
            &format!("{base}hang"),
            // An editor that never answers.
            get(std::future::pending::<&'static str>),
        )
        .route(
            &format!("{base}overreach"),
            // Headers an editor might send that would act on our whole site.
            get({
                let base = base.clone();
                move || async move {
                    let mut headers = axum::http::HeaderMap::new();
                    for cookie in [
                        "sandbox_session=someone-elses; Path=/; HttpOnly".to_string(),
                        "theme=dark; Path=/; Domain=example.com".to_string(),
                        format!("xsrf=abc; Path={base}; SameSite=Lax"),
                        "plain=1".to_string(),
                    ] {
                        headers.append("set-cookie", cookie.parse().unwrap());
                    }
                    headers.insert("clear-site-data", "\"cookies\"".parse().unwrap());
                    headers.insert("service-worker-allowed", "/".parse().unwrap());
                    (headers, "overreaching")
                }
            }),
        )
        .route(
            &format!("{base}close"),
            // An editor that closes the connection after each answer.
            get(|| async { ([("connection", "close")], "closing") }),
        )
        .route(
            &format!("{base}stream"),
            // A first line at once, the last only when the test says so.
            get(|| async {
                let lines = futures_util::stream::unfold(0u8, |step| async move {
                    let line: &'static [u8] = match step {
                        0 => b"first\n",
                        1 => {
                            let _ = tokio::time::timeout(
                                Duration::from_secs(10),
                                STREAM_GATE.notified(),
                            )
                            .await;
                            b"last\n"
                        }
                        _ => return None,
                    };
                    Some((Ok::<_, std::io::Error>(Bytes::from_static(line)), step + 1))
                });
                axum::body::Body::from_stream(lines)
            }),
        )
        .route(
            &format!("{base}upload"),
            post(|body: axum::body::Body| async move {
                use futures_util::StreamExt;
                let mut stream = body.into_data_stream();
                let mut total = 0usize;
                while let Some(chunk) = stream.next().await {
                    total += chunk.map(|c| c.len()).unwrap_or(0);
                }
                total.to_string()
            }),
        )
        .route(
            &format!("{base}ws"),
            any(move |headers: Headers, ws: WebSocketUpgrade| async move {
                if !ws_check(&headers) {
                    return axum::response::IntoResponse::into_response((
                        StatusCode::FORBIDDEN,
                        "wrong token",
                    ));
                }
                ws.on_upgrade(|mut socket| async move {
                    while let Some(Ok(message)) = socket.recv().await {
                        if let Message::Text(text) = message
                            && socket.send(Message::Text(text)).await.is_err()
                        {
                            break;
                        }
                    }
                })
            }),
        )
}

impl Drop for TestApp {
    /// A test that panicked never called `stop`: end the editors it started anyway (every one
    /// runs in a workspace under this app's data directory, or in a sandbox whose command line
    /// names it, in a cgroup of its own), so no process outlives the test.
    fn drop(&mut self) {
        if self.server.is_some() {
            self.end_what_it_started();
        }
        unmount_under(self.dir.path());
    }
}

/// Unmounts what is mounted under `root`, deepest first: workspaces' file systems, pre-started
/// editors' homes (a folder still mounted would outlive the test's data directory).
fn unmount_under(root: &Path) {
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    for point in server::runtime::sandbox::mount_points_under(&root) {
        let Ok(path) = std::ffi::CString::new(point.as_os_str().as_encoded_bytes()) else {
            continue;
        };
        // SAFETY: umount2 of a valid C string path under this test's own data directory.
        unsafe {
            libc::umount2(path.as_ptr(), libc::MNT_DETACH);
        }
    }
}

impl TestApp {
    fn end_what_it_started(&mut self) {
        end_editors_under(self.dir.path());
    }
}

/// Ends every editor of the data directory `root`: processes working in it or naming it, and
/// its sessions' cgroups (editors outlive the server that started them, by design).
pub fn end_editors_under(root: &Path) {
    let root = root.to_path_buf();
    let named = root.to_string_lossy().into_owned();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let in_workspace =
            std::fs::read_link(entry.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(&root));
        let names_it = std::fs::read(entry.path().join("cmdline"))
            .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(&named));
        if (in_workspace || names_it) && pid != std::process::id() as i32 {
            // SAFETY: only signals, to processes of this test's own data directory.
            unsafe {
                libc::killpg(pid, libc::SIGKILL);
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
    let groups = server::runtime::cgroup::parent_name(&root);
    if let Some(layout) = server::runtime::cgroup::Layout::detect(&groups) {
        for name in layout.groups() {
            let group = layout.group(&name);
            group.kill();
            let deadline = std::time::Instant::now() + Duration::from_secs(2);
            while group.is_populated() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            group.remove();
        }
        layout.remove_parent();
    }
}

pub type WebSocket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;
pub type WsError = tokio_tungstenite::tungstenite::Error;

/// A WebSocket to `path` on the server at `addr`, with `token` as the bearer.
/// A request to the server at `addr`, with a bearer token and a JSON body where given.
fn request_to(
    addr: SocketAddr,
    method: Method,
    path: &str,
    token: Option<&str>,
    json: Option<serde_json::Value>,
) -> Request<Full<Bytes>> {
    let mut request = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let body = match json {
        Some(json) => {
            request = request.header("content-type", "application/json");
            Full::new(Bytes::from(json.to_string()))
        }
        None => Full::new(Bytes::new()),
    };
    request.body(body).unwrap()
}

/// [`TestApp::call`] for a server of another process, at `addr`.
pub async fn call_at(
    addr: SocketAddr,
    method: Method,
    path: &str,
    token: Option<&str>,
    json: Option<serde_json::Value>,
) -> Response {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
    let response = client
        .request(request_to(addr, method, path, token, json))
        .await
        .expect("request");
    collected(response).await
}

/// The whole answer, its body read.
async fn collected(response: hyper::Response<hyper::body::Incoming>) -> Response {
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    Response {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

pub async fn websocket_at(addr: SocketAddr, path: &str, token: &str) -> Result<WebSocket, WsError> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = format!("ws://{addr}{path}").into_client_request()?;
    request.headers_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("header"),
    );
    tokio_tungstenite::connect_async(request)
        .await
        .map(|(socket, _)| socket)
}

/// Sends `n` text messages one at a time through an echo and checks each answer.
pub async fn assert_echoes(socket: &mut WebSocket, n: usize) {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    for i in 0..n {
        let text = format!("message {i}");
        socket.send(Message::text(text.clone())).await.unwrap();
        let echo = socket.next().await.unwrap().unwrap();
        assert_eq!(echo.into_text().unwrap().as_str(), text);
    }
}
