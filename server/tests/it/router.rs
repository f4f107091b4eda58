//! The whole HTTP surface driven in-process with `oneshot`: one request at a time through the
//! same per-connection service the listener uses, no socket in between (and one test serving that
//! service on a socket of its own, for a WebSocket).

use crate::common::{FakeRuntime, TestApp};
use axum::body::Body;
use http::{HeaderMap, Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use leptos::server_fn::ServerFn;
use serde_json::json;
use tower::ServiceExt;

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Answer {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// The session cookie this answer sets, with its attributes.
    fn session_cookie(&self) -> Option<String> {
        self.headers
            .get_all(header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|v| v.starts_with("sandbox_session="))
            .map(str::to_string)
    }
}

fn cookie_value(set_cookie: &str) -> String {
    set_cookie
        .split(';')
        .next()
        .and_then(|pair| pair.split_once('='))
        .map(|(_, value)| value.to_string())
        .expect("a name=value pair")
}

async fn send(app: &TestApp, request: Request<Body>) -> Answer {
    let front = server::App::new(app.service.clone()).front("127.0.0.1".parse().unwrap());
    let response = front.oneshot(request).await.expect("infallible");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

fn get(path: &str) -> http::request::Builder {
    Request::builder().method(Method::GET).uri(path)
}

/// Signs in through the pages' server function, as the page's script does.
async fn sign_in(app: &TestApp, name: &str, cookie: Option<&str>) -> Answer {
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(app::api::Login::PATH)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::ACCEPT, "application/json");
    if let Some(cookie) = cookie {
        request = request.header(header::COOKIE, format!("sandbox_session={cookie}"));
    }
    let form = format!("name={name}&password=password123");
    send(app, request.body(Body::from(form)).unwrap()).await
}

/// `POST /api/v1/sessions` for a 30-minute 8 GB session of `editor`, with a bearer token.
async fn launch(app: &TestApp, token: &str, editor: &str) -> Answer {
    let request = Request::builder()
        .method(Method::POST)
        .uri("/api/v1/sessions")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(
            json!({"editor": editor, "slice_mib": 8192, "duration_minutes": 30}).to_string(),
        ))
        .unwrap();
    send(app, request).await
}

async fn me_with_cookie(app: &TestApp, cookie: &str) -> StatusCode {
    let request = get("/api/v1/me")
        .header(header::COOKIE, format!("sandbox_session={cookie}"))
        .body(Body::empty())
        .unwrap();
    send(app, request).await.status
}

#[tokio::test]
async fn api_errors_are_json_with_a_fitting_status() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (_, token) = app.user("ada").await;

    let anonymous = send(&app, get("/api/v1/me").body(Body::empty()).unwrap()).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    assert_eq!(anonymous.json()["error"], "unauthenticated");
    assert!(anonymous.json()["message"].as_str().unwrap().len() > 10);

    let malformed = Request::builder()
        .method(Method::POST)
        .uri("/api/v1/sessions")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{\"editor\": \"jupyterlab\","))
        .unwrap();
    let malformed = send(&app, malformed).await;
    assert_eq!(
        malformed.status,
        StatusCode::BAD_REQUEST,
        "{}",
        malformed.body
    );
    assert!(malformed.json()["error"].is_string());

    let missing = get("/api/v1/sessions/no-such-session")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    let missing = send(&app, missing).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.json()["error"], "not_found");

    let wrong_method = Request::builder()
        .method(Method::PUT)
        .uri("/api/v1/sessions")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    let wrong_method = send(&app, wrong_method).await;
    assert_eq!(wrong_method.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(wrong_method.json()["error"], "method_not_allowed");
    let unknown = get("/api/v1/no-such-thing")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&app, unknown).await.json()["error"], "not_found");
    app.stop().await;
}

#[tokio::test]
async fn the_proxy_sends_strangers_to_sign_in_and_hides_other_users_sessions() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (_, owner) = app.user("owner").await;
    let (_, other) = app.user("other").await;
    // Ready, so that the owner reaches it and a refusal is the owner check, not a missing route.
    let id = app.launch_ready(&owner, "jupyterlab").await;
    let owners = get(&format!("/s/{id}/api/status"))
        .header(header::AUTHORIZATION, format!("Bearer {owner}"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&app, owners).await.status, StatusCode::OK);

    let browser = get(&format!("/s/{id}/lab"))
        .header(header::ACCEPT, "text/html,application/xhtml+xml")
        .body(Body::empty())
        .unwrap();
    let browser = send(&app, browser).await;
    assert_eq!(browser.status, StatusCode::SEE_OTHER);
    assert_eq!(
        browser.headers[header::LOCATION],
        format!("/login?next=/s/{id}/lab").as_str()
    );
    let script = send(
        &app,
        get(&format!("/s/{id}/lab")).body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(script.status, StatusCode::UNAUTHORIZED);
    assert_eq!(script.json()["error"], "unauthenticated");

    let as_other = |path: String| {
        get(&path)
            .header(header::AUTHORIZATION, format!("Bearer {other}"))
            .body(Body::empty())
            .unwrap()
    };
    let theirs = send(&app, as_other(format!("/s/{id}/lab"))).await;
    let nobodys = send(&app, as_other("/s/no-such-session/lab".into())).await;
    assert_eq!(theirs.status, StatusCode::NOT_FOUND);
    assert_eq!(
        (theirs.status, theirs.body),
        (nobodys.status, nobodys.body),
        "another user's session looks exactly like one that does not exist"
    );
    app.stop().await;
}

#[tokio::test]
async fn requests_another_site_makes_a_browser_send_are_refused() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (_, token) = app.user("cyd").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    let refused = |answer: &Answer| {
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{}", answer.body);
        assert_eq!(answer.json()["error"], "cross_site");
    };

    // Login CSRF: another site signing the browser in as someone else.
    let login = |site: &'static str, origin: &'static str| {
        Request::builder()
            .method(Method::POST)
            .uri(app::api::Login::PATH)
            .header(header::HOST, "sandbox.example")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header("sec-fetch-site", site)
            .header(header::ORIGIN, origin)
            .body(Body::from("name=cyd&password=password123"))
            .unwrap()
    };
    let cross = send(&app, login("cross-site", "https://evil.example")).await;
    refused(&cross);
    assert_eq!(cross.session_cookie(), None, "no sign-in happened");
    let ours = send(&app, login("same-origin", "http://sandbox.example")).await;
    assert_eq!(ours.status, StatusCode::OK, "{}", ours.body);
    assert!(ours.session_cookie().is_some());
    // Without Fetch Metadata (older browsers), Origin against Host decides.
    let old_browser = Request::builder()
        .method(Method::DELETE)
        .uri(format!("/api/v1/sessions/{id}"))
        .header(header::HOST, "sandbox.example")
        .header(header::ORIGIN, "https://evil.example")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    refused(&send(&app, old_browser).await);

    // The editor: no cross-site writes, no cross-site WebSocket (a kernel), reads pass.
    let to_editor = |method: Method, origin: &'static str| {
        Request::builder()
            .method(method)
            .uri(format!("/s/{id}/upload"))
            .header(header::HOST, "sandbox.example")
            .header(header::ORIGIN, origin)
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Body::from("data"))
            .unwrap()
    };
    refused(&send(&app, to_editor(Method::POST, "https://evil.example")).await);
    let same = send(&app, to_editor(Method::POST, "http://sandbox.example")).await;
    assert_eq!(same.status, StatusCode::OK, "{}", same.body);
    let websocket = get(&format!("/s/{id}/ws"))
        .header(header::HOST, "sandbox.example")
        .header("sec-fetch-site", "cross-site")
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    refused(&send(&app, websocket).await);
    let read = get(&format!("/s/{id}/api/status"))
        .header("sec-fetch-site", "cross-site")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&app, read).await.status, StatusCode::OK);

    let view = app
        .get(&format!("/api/v1/sessions/{id}"), Some(&token))
        .await;
    assert_eq!(view.json()["state"], "ready", "nothing refused took effect");
    app.stop().await;
}

#[tokio::test]
async fn signing_in_cycles_the_session_id_and_signing_out_revokes_it_at_once() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    app.user("ada").await;

    let first = sign_in(&app, "ada", None).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    let set_cookie = first.session_cookie().expect("a session cookie");
    let attributes = set_cookie.to_ascii_lowercase();
    assert!(attributes.contains("httponly"), "{set_cookie}");
    assert!(attributes.contains("samesite=lax"), "{set_cookie}");
    assert!(attributes.contains("path=/"), "{set_cookie}");
    let first_id = cookie_value(&set_cookie);
    assert_eq!(me_with_cookie(&app, &first_id).await, StatusCode::OK);

    // Signing in again from a browser that holds an id: the id changes, the old one is dead.
    let second = sign_in(&app, "ada", Some(&first_id)).await;
    assert_eq!(second.status, StatusCode::OK, "{}", second.body);
    let second_id = cookie_value(&second.session_cookie().expect("a new session cookie"));
    assert_ne!(second_id, first_id);
    assert_eq!(
        me_with_cookie(&app, &first_id).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(me_with_cookie(&app, &second_id).await, StatusCode::OK);

    // Within the credential cache's lifetime: logout must not wait for it.
    let logout = Request::builder()
        .method(Method::POST)
        .uri(app::api::Logout::PATH)
        .header(header::COOKIE, format!("sandbox_session={second_id}"))
        .header(header::ACCEPT, "application/json")
        .body(Body::empty())
        .unwrap();
    let logout = send(&app, logout).await;
    assert_eq!(logout.status, StatusCode::OK, "{}", logout.body);
    assert_eq!(
        me_with_cookie(&app, &second_id).await,
        StatusCode::UNAUTHORIZED,
        "the cookie stops working the moment its owner signs out"
    );
    let proxied = get("/s/anything/")
        .header(header::COOKIE, format!("sandbox_session={second_id}"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&app, proxied).await.status, StatusCode::UNAUTHORIZED);
    app.stop().await;
}

#[tokio::test]
async fn a_missing_editor_is_shown_unavailable_with_the_reason_and_refused() {
    // The real local runtime, told code-server lives where nothing is installed.
    let app = TestApp::start_with(None, |c| {
        c.editors.code_server = "/nonexistent/code-server".into();
    })
    .await;
    let (user_id, token) = app.user("ada").await;

    let signed_in = sign_in(&app, "ada", None).await;
    let cookie = cookie_value(&signed_in.session_cookie().expect("a session cookie"));
    let dashboard = Request::builder()
        .method(Method::POST)
        .uri(app::api::LoadDashboard::PATH)
        .header(header::COOKIE, format!("sandbox_session={cookie}"))
        .header(header::ACCEPT, "application/json")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::empty())
        .unwrap();
    let dashboard = send(&app, dashboard).await;
    assert_eq!(dashboard.status, StatusCode::OK, "{}", dashboard.body);
    let editors = dashboard.json()["editors"].clone();
    let code_server = editors
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "code-server" || e["label"] == "code-server")
        .unwrap_or_else(|| panic!("{editors}"))
        .clone();
    let reason = code_server["unavailable"].as_str().unwrap_or_default();
    assert!(reason.contains("not installed"), "{code_server}");

    let refused = launch(&app, &token, "code-server").await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.body);
    let message = refused.json()["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("(code-server) is unavailable") && message.contains("not installed"),
        "{message}"
    );
    let (_, held) = app.store.credits(&user_id).await.unwrap();
    assert_eq!(held, 0, "nothing is held for a launch that cannot run");
    app.stop().await;
}

/// Calls a server function as the page's script does, signed in with `cookie`.
async fn server_fn(app: &TestApp, path: &str, cookie: &str, form: &str) -> Answer {
    let request = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::COOKIE, format!("sandbox_session={cookie}"))
        .header(header::ACCEPT, "application/json")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(form.to_string()))
        .unwrap();
    send(app, request).await
}

#[tokio::test]
async fn server_functions_act_only_on_the_callers_own_sessions() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (_, owner) = app.user("owner").await;
    app.user("other").await;
    let id = launch(&app, &owner, "jupyterlab").await.json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let other = sign_in(&app, "other", None).await;
    let other = cookie_value(&other.session_cookie().unwrap());
    let owner_cookie = sign_in(&app, "owner", None).await;
    let owner_cookie = cookie_value(&owner_cookie.session_cookie().unwrap());
    let form = format!("id={id}");

    for path in [app::api::GetSession::PATH, app::api::StopSession::PATH] {
        let refused = server_fn(&app, path, &other, &form).await;
        assert_eq!(
            refused.status,
            StatusCode::NOT_FOUND,
            "{path}: {}",
            refused.body
        );
        assert_eq!(refused.json()["error"], "not_found", "{path}");
    }
    let still = app.record(&id).await;
    assert_ne!(
        still.state,
        app::domain::session::SessionState::Ended,
        "another user's stop changed nothing"
    );

    let seen = server_fn(&app, app::api::GetSession::PATH, &owner_cookie, &form).await;
    assert_eq!(seen.status, StatusCode::OK, "{}", seen.body);
    assert_eq!(seen.json()["id"], id.as_str());
    let stopped = server_fn(&app, app::api::StopSession::PATH, &owner_cookie, &form).await;
    assert_eq!(stopped.status, StatusCode::OK, "{}", stopped.body);
    assert_eq!(stopped.json()["state"], "ended");

    let anonymous = Request::builder()
        .method(Method::POST)
        .uri(app::api::GetSession::PATH)
        .header(header::ACCEPT, "application/json")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(form.clone()))
        .unwrap();
    let anonymous = send(&app, anonymous).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    assert_eq!(anonymous.json()["error"], "unauthenticated");
    let malformed = server_fn(
        &app,
        app::api::ExtendSession::PATH,
        &owner_cookie,
        &format!("id={id}&minutes=lots"),
    )
    .await;
    assert_eq!(
        malformed.status,
        StatusCode::BAD_REQUEST,
        "{}",
        malformed.body
    );
    assert_eq!(malformed.json()["error"], "invalid", "{}", malformed.body);
    app.stop().await;
}

/// The per-connection service relays WebSockets whatever serves it: here hyper's own HTTP/1
/// connection rather than `axum::serve`, so nothing depends on how the listener wraps sockets.
#[tokio::test]
async fn a_websocket_relays_through_the_per_connection_service_on_any_server() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (_, token) = app.user("wes").await;
    let id = app.launch_ready(&token, "marimo").await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let front = server::App::new(app.service.clone()).front("127.0.0.1".parse().unwrap());
    let serving = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
            front.clone().oneshot(request.map(Body::new))
        });
        hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
            .with_upgrades()
            .await
    });

    let mut socket = crate::common::websocket_at(addr, &format!("/s/{id}/ws"), &token)
        .await
        .expect("the upgrade goes through");
    crate::common::assert_echoes(&mut socket, 20).await;
    socket.close(None).await.ok();
    drop(socket);
    serving.await.unwrap().ok();
    app.stop().await;
}
