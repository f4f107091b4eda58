//! The REST API and the proxy, through a real listener, with a stand-in editor.

use crate::common::{FakeRuntime, Response, TestApp};
use app::domain::scope::{Scope, Scopes};
use app::domain::session::{EndReason, SessionState};
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use serde_json::json;
use std::time::Duration;

fn launch_body(editor: &str, slice_mib: u64, minutes: u32) -> serde_json::Value {
    json!({ "editor": editor, "slice_mib": slice_mib, "duration_minutes": minutes })
}

async fn session_count(app: &TestApp, user_id: &str) -> usize {
    app.store.sessions_of(user_id, 1000).await.unwrap().len()
}

#[tokio::test]
async fn me_needs_a_token_and_shows_credits() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (_, token) = app.user("alice").await;
    let anonymous = app.get("/api/v1/me", None).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    assert_eq!(anonymous.json()["error"], "unauthenticated");
    let wrong = app
        .call(Method::GET, "/api/v1/me", Some("gsb_nope"), None)
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    let me = app.get("/api/v1/me", Some(&token)).await;
    assert_eq!(me.status, StatusCode::OK);
    assert_eq!(me.json()["name"], "alice");
    assert_eq!(me.json()["credits"]["balance"], 100_000);
    app.stop().await;
}

#[tokio::test]
async fn bad_launches_get_clear_errors_and_write_nothing() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (user_id, token) = app.user("bob").await;
    let cases = [
        (
            launch_body("emacs", 8192, 60),
            StatusCode::BAD_REQUEST,
            "unknown editor 'emacs'",
        ),
        (
            launch_body("jupyterlab", 1234, 60),
            StatusCode::BAD_REQUEST,
            "no 1234 MiB slice",
        ),
        (
            launch_body("jupyterlab", 8192, 5),
            StatusCode::BAD_REQUEST,
            "duration must be between",
        ),
        (
            launch_body("jupyterlab", 8192, 100_000),
            StatusCode::BAD_REQUEST,
            "duration must be between",
        ),
        (
            json!({ "editor": "jupyterlab" }),
            StatusCode::BAD_REQUEST,
            "malformed JSON",
        ),
        (
            json!({ "editor": "jupyterlab", "slice_mib": "big", "duration_minutes": 60 }),
            StatusCode::BAD_REQUEST,
            "malformed JSON",
        ),
        (
            json!({ "editor": "jupyterlab", "slice_mib": 8192, "duration_minutes": 60, "duration_minute": 240 }),
            StatusCode::BAD_REQUEST,
            "unknown field `duration_minute`",
        ),
    ];
    for (body, status, message) in cases {
        let response = app
            .call(
                Method::POST,
                "/api/v1/sessions",
                Some(&token),
                Some(body.clone()),
            )
            .await;
        assert_eq!(response.status, status, "{body}");
        let error = response.json();
        assert!(
            error["message"].as_str().unwrap().contains(message),
            "{body} -> {error}"
        );
    }
    // Not JSON at all.
    let request = Request::post(app.url("/api/v1/sessions"))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Full::new("{not json".into()))
        .unwrap();
    let response = app.send(request).await;
    assert_eq!(response.status, StatusCode::BAD_REQUEST);
    assert_eq!(response.json()["error"], "invalid");
    assert!(
        !response.headers.contains_key("connection"),
        "a body read to its end leaves the connection open"
    );
    // Too large.
    let huge = format!("{{\"editor\": \"{}\"}}", "x".repeat(100_000));
    let request = Request::post(app.url("/api/v1/sessions"))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Full::new(huge.into()))
        .unwrap();
    let response = app.send(request).await;
    assert_eq!(response.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(response.json()["error"], "too_large");
    // Past what any of our routes reads, the rest of the body is left unread, so the
    // connection closes: the answer says so, and the client's next request goes on a new one.
    let request = Request::post(app.url("/api/v1/sessions"))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Full::new(vec![b' '; 3 * 1024 * 1024].into()))
        .unwrap();
    let response = app.send(request).await;
    assert_eq!(response.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(response.headers["connection"], "close");
    // A session id that is not text: the same JSON error as any bad input.
    let response = app.get("/api/v1/sessions/%FF", Some(&token)).await;
    assert_eq!(response.status, StatusCode::BAD_REQUEST);
    assert_eq!(response.json()["error"], "invalid");

    assert_eq!(
        session_count(&app, &user_id).await,
        0,
        "a refused launch wrote a session"
    );
    let (balance, held) = app.store.credits(&user_id).await.unwrap();
    assert_eq!((balance, held), (100_000, 0));
    app.stop().await;
}

#[tokio::test]
async fn a_launch_without_enough_credits_is_refused_with_the_numbers() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (user_id, token) = app.user("carol").await;
    app.store
        .grant(&user_id, -99_900, None, "test")
        .await
        .unwrap();
    let response = app.launch(&token, "jupyterlab", 60).await;
    assert_eq!(response.status, StatusCode::PAYMENT_REQUIRED);
    let message = response.json()["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("holds 1 credit and") && message.contains("balance is 0.1"),
        "{message}"
    );
    assert_eq!(session_count(&app, &user_id).await, 0);
    app.stop().await;
}

#[tokio::test]
async fn launch_proxy_and_stop_with_owner_checks() {
    let runtime = FakeRuntime::new();
    let app = TestApp::start(Some(runtime.clone())).await;
    let (owner_id, owner) = app.user("dora").await;
    let (_, other) = app.user("eve").await;
    let id = app.launch_ready(&owner, "jupyterlab").await;

    let view = app
        .get(&format!("/api/v1/sessions/{id}"), Some(&owner))
        .await
        .json();
    assert_eq!(view["url"], format!("/s/{id}/lab"));
    assert!(view["time_left_seconds"].as_i64().unwrap() > 29 * 60);
    let (_, held) = app.store.credits(&owner_id).await.unwrap();
    assert_eq!(held, 500, "30 minutes of an 8 GB slice at 1 credit/h");

    // The owner reaches the editor; the proxy presents the editor's token, not ours.
    let status = app.get(&format!("/s/{id}/api/status"), Some(&owner)).await;
    status.assert_status(StatusCode::OK);
    assert_eq!(status.json()["saw_our_cookie"], false);
    assert_eq!(
        status.json()["forwarded_for"],
        "127.0.0.1",
        "the client's address"
    );
    // The connection to the editor is kept for the next request, and reused by it.
    assert_eq!(app.service.access.upstreams().idle_count(), 1);
    let again = app.get(&format!("/s/{id}/api/status"), Some(&owner)).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(app.service.access.upstreams().idle_count(), 1);
    assert_eq!(status.headers["x-frame-options"], "SAMEORIGIN");

    // Someone else, or nobody, does not.
    let theirs = app.get(&format!("/s/{id}/api/status"), Some(&other)).await;
    assert_eq!(theirs.status, StatusCode::NOT_FOUND);
    let missing = app.get("/s/doesnotexist/api/status", Some(&other)).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(
        theirs.body, missing.body,
        "another's session must look like a missing one"
    );
    let api_theirs = app
        .get(&format!("/api/v1/sessions/{id}"), Some(&other))
        .await;
    assert_eq!(api_theirs.status, StatusCode::NOT_FOUND);
    let stop_theirs = app
        .delete(&format!("/api/v1/sessions/{id}"), Some(&other))
        .await;
    assert_eq!(stop_theirs.status, StatusCode::NOT_FOUND);
    let anonymous = app
        .send(
            Request::get(app.url(&format!("/s/{id}/lab")))
                .header("accept", "text/html")
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(anonymous.status, StatusCode::SEE_OTHER);
    assert!(
        anonymous.headers["location"]
            .to_str()
            .unwrap()
            .starts_with("/login?next=/s/")
    );

    // An editor that closes its connection after an answer is fine, every time.
    for _ in 0..3 {
        let closing = app.get(&format!("/s/{id}/close"), Some(&owner)).await;
        assert_eq!(closing.status, StatusCode::OK);
        assert_eq!(&closing.body[..], b"closing");
    }

    // Large uploads stream through.
    let upload = vec![7u8; 8 * 1024 * 1024];
    let request = Request::post(app.url(&format!("/s/{id}/upload")))
        .header("authorization", format!("Bearer {owner}"))
        .body(Full::new(upload.into()))
        .unwrap();
    let response = app.send(request).await;
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(&response.body[..], b"8388608");
    assert!(
        !response.headers.contains_key("connection"),
        "an upload the editor read whole keeps the connection"
    );

    // Stop: the editor goes, the slot frees, the unused credits come back.
    let stopped = app
        .delete(&format!("/api/v1/sessions/{id}"), Some(&owner))
        .await;
    assert_eq!(stopped.status, StatusCode::OK);
    assert_eq!(stopped.json()["state"], "ended");
    assert_eq!(stopped.json()["end_reason"], "user");
    assert_eq!(runtime.stopped.lock().unwrap().len(), 1);
    let after = app.get(&format!("/s/{id}/api/status"), Some(&owner)).await;
    assert_eq!(after.status, StatusCode::NOT_FOUND);
    assert_eq!(
        app.service.access.upstreams().idle_count(),
        0,
        "connections to a stopped editor are dropped"
    );
    let (balance, held) = app.store.credits(&owner_id).await.unwrap();
    assert_eq!(held, 0);
    assert_eq!(balance, 100_000 - 17, "one minute used");
    let pool = app.store.pool().await.unwrap();
    assert!(
        pool.iter()
            .flat_map(|(_, s)| s)
            .all(|s| s.session_id.is_none())
    );
    app.stop().await;
}

#[tokio::test]
async fn websocket_frames_pass_through_the_proxy() {
    websocket_frames_pass_with_busy_polling(0).await;
}

#[tokio::test]
async fn websocket_frames_pass_through_the_proxy_that_busy_polls() {
    websocket_frames_pass_with_busy_polling(100).await;
}

async fn websocket_frames_pass_with_busy_polling(busy_poll_us: u64) {
    let app = TestApp::start_with(Some(FakeRuntime::new()), |c| {
        c.proxy.websocket_busy_poll_us = busy_poll_us;
    })
    .await;
    let (_, owner) = app.user("fay").await;
    let (_, other) = app.user("gus").await;
    let id = app.launch_ready(&owner, "marimo").await;
    let path = format!("/s/{id}/ws");

    let mut socket = app
        .websocket(&path, &owner)
        .await
        .expect("websocket through the proxy");
    crate::common::assert_echoes(&mut socket, 20).await;
    socket.close(None).await.ok();

    match app.websocket(&path, &other).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), StatusCode::NOT_FOUND)
        }
        other => panic!("another user's websocket should get 404, got {other:?}"),
    }
    app.stop().await;
}

/// The editor answers on our origin: nothing it sends may act beyond its session, and a
/// browser's cookies reach it without ours. A hung editor gets the browser 504, not a hang.
#[tokio::test]
async fn the_editor_cannot_reach_beyond_its_session() {
    let app = TestApp::start_with(Some(FakeRuntime::new()), |c| {
        c.proxy.answer_timeout_seconds = 1;
    })
    .await;
    let (_, token) = app.user("iris").await;
    let id = app.launch_ready(&token, "jupyterlab").await;

    // A browser's request: our cookie among the page's own, one of them with a byte that is
    // not ASCII (a script may set such a cookie); it neither signs the browser out nor goes on.
    let cookie = app.sign_in_cookie("iris").await;
    let cookies = format!("theme=dark; sandbox_session={cookie}; odd=caf\u{e9}");
    let request = Request::get(app.url(&format!("/s/{id}/api/status")))
        .header(
            "cookie",
            http::HeaderValue::from_bytes(&latin1(&cookies)).unwrap(),
        )
        .body(Full::new(bytes::Bytes::new()))
        .unwrap();
    let status = app.send(request).await;
    status.assert_status(StatusCode::OK);
    assert_eq!(status.json()["saw_our_cookie"], false);
    assert_eq!(status.json()["cookies"], "theme=dark");
    assert_eq!(status.json()["forwarded_proto"], "http");
    // Behind a TLS ingress the editor learns the page is https (its redirects and origin
    // checks depend on it); anything else is not passed on.
    for (sent, seen) in [("https", "https"), ("gopher", "http")] {
        let request = Request::get(app.url(&format!("/s/{id}/api/status")))
            .header("authorization", format!("Bearer {token}"))
            .header("x-forwarded-proto", sent)
            .body(Full::new(bytes::Bytes::new()))
            .unwrap();
        assert_eq!(app.send(request).await.json()["forwarded_proto"], seen);
    }

    let answer = app.get(&format!("/s/{id}/overreach"), Some(&token)).await;
    answer.assert_status(StatusCode::OK);
    let set: Vec<&str> = answer
        .headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    let session = format!("/s/{id}/");
    assert_eq!(
        set,
        [
            format!("theme=dark; Path={session}"),
            format!("xsrf=abc; SameSite=Lax; Path={session}"),
            "plain=1".to_string(),
        ],
        "no cookie of ours, no other domain, every path inside the session"
    );
    assert!(answer.headers.get("clear-site-data").is_none());
    assert!(answer.headers.get("service-worker-allowed").is_none());

    // An upload slower than the answer timeout is not cut: the wait counts from its last byte.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut slow = tokio::net::TcpStream::connect(app.addr).await.unwrap();
        let head = format!(
            "POST /s/{id}/upload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"
        );
        slow.write_all(head.as_bytes()).await.unwrap();
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(700)).await;
            slow.write_all(b"x").await.unwrap();
        }
        let mut answer = String::new();
        slow.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(
            answer.ends_with("\r\n\r\n5"),
            "the editor read all 5 bytes: {answer}"
        );
    }

    // One that stops arriving is the client's: 408, after the answer timeout from its last byte.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stalled = tokio::net::TcpStream::connect(app.addr).await.unwrap();
        let head = format!(
            "POST /s/{id}/upload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Length: 5\r\n\r\nx"
        );
        stalled.write_all(head.as_bytes()).await.unwrap();
        let mut answer = String::new();
        let _ = stalled.read_to_string(&mut answer).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("request_timeout"), "{answer}");
    }

    let hung = app.get(&format!("/s/{id}/hang"), Some(&token)).await;
    hung.assert_status(StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(hung.json()["error"], "editor_timeout");
    app.stop().await;
}

/// A client that opens a connection and never finishes its request does not keep it.
#[tokio::test]
async fn a_connection_that_sends_no_request_is_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = TestApp::start_with(Some(FakeRuntime::new()), |c| {
        c.proxy.header_timeout_seconds = 1;
    })
    .await;
    let (_, token) = app.user("sloane").await;
    let mut slow = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    slow.write_all(b"GET /api/v1/me HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), slow.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the server closed the connection");
    // Everyone else is served as before.
    app.get("/api/v1/me", Some(&token))
        .await
        .assert_status(StatusCode::OK);
    app.stop().await;
}

/// Five failed sign-ins for a name from one address make that address wait a minute for it,
/// whether or not the name exists; other names, and the name from elsewhere, sign in as before.
#[tokio::test]
async fn repeated_failed_sign_ins_make_the_name_wait() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    app.user("pat").await;
    app.user("quin").await;
    let attempt = async |name: &str, password: &str| app.sign_in(name, password).await;
    for name in ["pat", "nobody"] {
        for _ in 0..5 {
            let wrong = attempt(name, "not-the-password").await;
            wrong.assert_status(StatusCode::UNAUTHORIZED);
            assert_eq!(wrong.json()["error"], "sign_in_failed");
        }
        let refused = attempt(name, "password123").await;
        refused.assert_status(StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.json()["error"], "rate_limited");
        assert!(
            refused.json()["message"]
                .as_str()
                .unwrap()
                .contains("Try again in"),
            "{}",
            refused.json()
        );
    }
    attempt("quin", "password123")
        .await
        .assert_status(StatusCode::OK);
    // The owner, from another address, is not kept out by what this one did.
    assert_eq!(
        sign_in_from(&app, [127, 0, 0, 2], "pat", "password123").await,
        StatusCode::OK
    );
    // Sent all at once, guesses are counted all the same: five are checked, the rest wait.
    app.user("ray").await;
    let at_once =
        futures_util::future::join_all((0..10).map(|_| app.sign_in("ray", "not-the-password")))
            .await;
    let checked = at_once
        .iter()
        .filter(|r| r.status == StatusCode::UNAUTHORIZED)
        .count();
    let refused = at_once
        .iter()
        .filter(|r| r.status == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!((checked, refused), (5, 5));
    app.stop().await;
}

/// A password sign-in sent from `from` (an address of the loopback), its status.
async fn sign_in_from(app: &TestApp, from: [u8; 4], name: &str, password: &str) -> StatusCode {
    let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
    connector.set_local_address(Some(std::net::IpAddr::from(from)));
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, Full<bytes::Bytes>>(connector);
    let request = Request::post(app.url(<app::api::Login as leptos::server_fn::ServerFn>::PATH))
        .header("accept", "application/json")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Full::new(format!("name={name}&password={password}").into()))
        .unwrap();
    client.request(request).await.expect("sign-in").status()
}

/// One client trying a password on many names is stopped, whoever it tries next.
#[tokio::test]
async fn one_client_cannot_try_a_password_across_many_names() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    app.user("sue").await;
    for i in 0..server::auth::SignInThrottle::PER_CLIENT {
        let status = sign_in_from(&app, [127, 0, 0, 3], &format!("guess{i}"), "Summer2026!").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "attempt {i}");
    }
    assert_eq!(
        sign_in_from(&app, [127, 0, 0, 3], "sue", "password123").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        sign_in_from(&app, [127, 0, 0, 4], "sue", "password123").await,
        StatusCode::OK
    );
    app.stop().await;
}

/// A session another replica ended is no longer forwarded to after this server's next pass.
#[tokio::test]
async fn routes_of_sessions_ended_elsewhere_are_forgotten() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (_, token) = app.user("rhea").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    let status = format!("/s/{id}/api/status");
    app.get(&status, Some(&token))
        .await
        .assert_status(StatusCode::OK);
    // Another replica ends it: the database knows, this server's route table does not.
    let store = &app.store;
    store.begin_stop(&id, EndReason::User, None).await.unwrap();
    store.finish(&id).await.unwrap();
    app.service.access.forget_stale_routes().await;
    app.get(&status, Some(&token))
        .await
        .assert_status(StatusCode::NOT_FOUND);
    app.stop().await;
}

/// A user makes tokens for their scripts, sees them listed (never their secrets), and revokes
/// one: it stops working at once, the others go on; nobody can revoke another user's token.
#[tokio::test]
async fn tokens_are_made_listed_and_revoked_by_their_owner() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (_, token) = app.user("tess").await;
    let (_, other) = app.user("otto").await;
    let made = app
        .call(
            Method::POST,
            "/api/v1/tokens",
            Some(&token),
            Some(json!({ "label": "nightly job", "days": 30 })),
        )
        .await;
    made.assert_status(StatusCode::CREATED);
    let made = made.json();
    let secret = made["token"].as_str().unwrap().to_string();
    let id = made["id"].as_str().unwrap().to_string();
    assert!(made["expires_at_ms"].as_i64().unwrap() > server::store::now_ms() + 29 * 86_400_000);
    app.get("/api/v1/me", Some(&secret))
        .await
        .assert_status(StatusCode::OK);

    let listed = app.get("/api/v1/tokens", Some(&token)).await;
    listed.assert_status(StatusCode::OK);
    let listed = listed.json();
    let labels: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["nightly job", "test"], "newest first");
    assert!(
        !listed.to_string().contains(&secret) && !listed.to_string().contains("hash"),
        "no secret is listed: {listed}"
    );

    for bad in [
        json!({ "label": "" }),
        json!({ "label": "x", "days": 0 }),
        json!({ "label": "x", "scope": "all" }),
    ] {
        let refused = app
            .call(
                Method::POST,
                "/api/v1/tokens",
                Some(&token),
                Some(bad.clone()),
            )
            .await;
        refused.assert_status(StatusCode::BAD_REQUEST);
        assert_eq!(refused.json()["error"], "invalid", "{bad}");
    }
    // With a browser's sign-in (which a script in an editor's page, on our origin, can use),
    // making a token takes the password.
    let cookie = app.sign_in_cookie("tess").await;
    let from_browser = async |body: serde_json::Value| {
        let request = Request::post(app.url("/api/v1/tokens"))
            .header("cookie", format!("sandbox_session={cookie}"))
            .header("sec-fetch-site", "same-origin")
            .header("content-type", "application/json")
            .body(Full::new(body.to_string().into()))
            .unwrap();
        app.send(request).await
    };
    let refused = from_browser(json!({ "label": "from a page" })).await;
    refused.assert_status(StatusCode::FORBIDDEN);
    assert!(
        refused.json()["message"]
            .as_str()
            .unwrap()
            .contains("password")
    );
    from_browser(json!({ "label": "from a page", "password": "wrong-password" }))
        .await
        .assert_status(StatusCode::FORBIDDEN);
    from_browser(json!({ "label": "from a page", "password": "password123" }))
        .await
        .assert_status(StatusCode::CREATED);

    let path = format!("/api/v1/tokens/{id}");
    app.delete(&path, Some(&other))
        .await
        .assert_status(StatusCode::NOT_FOUND);
    app.get("/api/v1/me", Some(&secret))
        .await
        .assert_status(StatusCode::OK);
    app.delete(&path, Some(&token))
        .await
        .assert_status(StatusCode::NO_CONTENT);
    app.get("/api/v1/me", Some(&secret))
        .await
        .assert_status(StatusCode::UNAUTHORIZED);
    app.get("/api/v1/me", Some(&token))
        .await
        .assert_status(StatusCode::OK);
    app.delete(&path, Some(&token))
        .await
        .assert_status(StatusCode::NOT_FOUND);
    app.stop().await;
}

/// `text` with each character as one byte (ISO-8859-1), as a header may carry it.
fn latin1(text: &str) -> Vec<u8> {
    text.chars().map(|c| c as u8).collect()
}

/// Calls a server function as the page's script does, with the sign-in `cookie`.
async fn server_fn(app: &TestApp, path: &str, cookie: &str) -> Response {
    let request = Request::post(app.url(path))
        .header("cookie", format!("sandbox_session={cookie}"))
        .header("accept", "application/json")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Full::new(bytes::Bytes::new()))
        .unwrap();
    app.send(request).await
}

/// A WebSocket through the proxy as a browser opens it: with the sign-in cookie, from our page.
async fn cookie_websocket(app: &TestApp, path: &str, cookie: &str) -> crate::common::WebSocket {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = format!("ws://{}{path}", app.addr)
        .into_client_request()
        .unwrap();
    let headers = request.headers_mut();
    headers.insert(
        "cookie",
        format!("sandbox_session={cookie}").parse().unwrap(),
    );
    headers.insert("sec-fetch-site", "same-origin".parse().unwrap());
    tokio_tungstenite::connect_async(request)
        .await
        .expect("a websocket with the sign-in cookie")
        .0
}

/// Waits for the proxy to end `socket` (a close, an error or the end of the stream).
async fn ends_within(socket: &mut crate::common::WebSocket, within: Duration, why: &str) {
    use futures_util::StreamExt;
    tokio::time::timeout(within, async {
        loop {
            match socket.next().await {
                None | Some(Err(_)) => return,
                Some(Ok(message)) if message.is_close() => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the WebSocket stayed open: {why}"));
}

#[tokio::test]
async fn an_open_websocket_ends_when_its_user_is_locked() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let mut sockets = Vec::new();
    for name in ["liz", "max"] {
        let (user_id, token) = app.user(name).await;
        let id = app.launch_ready(&token, "marimo").await;
        let mut socket = app
            .websocket(&format!("/s/{id}/ws"), &token)
            .await
            .expect("websocket through the proxy");
        crate::common::assert_echoes(&mut socket, 3).await;
        sockets.push((user_id, socket));
    }
    let (liz, mut liz_socket) = sockets.remove(0);
    let (max, mut max_socket) = sockets.remove(0);

    // A browser's socket stands on its sign-in: signing out ends it, and it alone.
    let (_, ned_token) = app.user("ned").await;
    let ned_session = app.launch_ready(&ned_token, "marimo").await;
    let cookie = app.sign_in_cookie("ned").await;
    let mut browser = cookie_websocket(&app, &format!("/s/{ned_session}/ws"), &cookie).await;
    crate::common::assert_echoes(&mut browser, 3).await;
    let signed_out = server_fn(
        &app,
        <app::api::Logout as leptos::server_fn::ServerFn>::PATH,
        &cookie,
    )
    .await;
    assert!(signed_out.status.is_success(), "{:?}", signed_out.body);
    ends_within(&mut browser, Duration::from_secs(3), "signed out").await;
    crate::common::assert_echoes(&mut liz_socket, 1).await;

    app.service
        .accounts
        .set_locked(&liz, true, None)
        .await
        .unwrap();
    ends_within(
        &mut liz_socket,
        Duration::from_secs(3),
        "locked on this server",
    )
    .await;
    // Locked by another replica: only the database knows, and the periodic check finds it.
    app.sql("UPDATE users SET locked = 1 WHERE id = $1", &max)
        .await;
    ends_within(&mut max_socket, Duration::from_secs(20), "locked elsewhere").await;
    app.stop().await;
}

#[tokio::test]
async fn a_launch_while_the_server_shuts_down_is_refused() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (user_id, token) = app.user("sid").await;
    // What a shutdown sets first: from here on no editor may start.
    app.service.guard.close();
    let refused = app.launch(&token, "jupyterlab", 30).await;
    refused.assert_status(StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        refused.json()["message"]
            .as_str()
            .unwrap()
            .contains("restarting"),
        "{}",
        refused.json()
    );
    assert_eq!(session_count(&app, &user_id).await, 0);
    assert_eq!(app.store.credits(&user_id).await.unwrap(), (100_000, 0));
    app.stop().await;
}

#[tokio::test]
async fn a_failed_start_refunds_and_says_why() {
    let runtime = std::sync::Arc::new(FakeRuntime {
        fail_start: true,
        ..FakeRuntime::plain()
    });
    let app = TestApp::start(Some(runtime)).await;
    let (user_id, token) = app.user("hal").await;
    let created = app.launch(&token, "jupyterlab", 60).await;
    assert_eq!(created.status, StatusCode::CREATED);
    let id = created.json()["id"].as_str().unwrap().to_string();
    let before = (100_000, 0);
    app.assert_fails_free(&token, &id, "Traceback: something broke", &user_id, before)
        .await;
    app.stop().await;
}

#[tokio::test]
async fn progress_streams_as_server_sent_events() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (_, token) = app.user("ida").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    // Stop in the background so the stream has an end to reach.
    let stopper = {
        let url = app.url(&format!("/api/v1/sessions/{id}"));
        let token = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            let client =
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .build_http();
            let request = Request::delete(url)
                .header("authorization", format!("Bearer {token}"))
                .body(Full::<bytes::Bytes>::default())
                .unwrap();
            client.request(request).await.unwrap();
        })
    };
    let response = app
        .events(&id, &token, std::time::Duration::from_secs(20))
        .await;
    stopper.await.unwrap();
    assert_eq!(response.headers["content-type"], "text/event-stream");
    let text = String::from_utf8_lossy(&response.body);
    let states: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| {
            serde_json::from_str::<serde_json::Value>(d).unwrap()["state"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    for state in ["requested", "starting", "ready", "stopping", "ended"] {
        assert!(
            states.iter().any(|s| s == state),
            "missing {state} in {states:?}"
        );
    }
    assert_eq!(states.last().unwrap(), "ended");
    app.stop().await;
}

#[tokio::test]
async fn a_locked_account_loses_access_at_once_and_cannot_sign_in() {
    let runtime = FakeRuntime::new();
    let app = TestApp::start(Some(runtime.clone())).await;
    let (user_id, token) = app.user("lou").await;
    let running = app.launch_ready(&token, "jupyterlab").await;
    assert_eq!(
        app.get("/api/v1/me", Some(&token)).await.status,
        StatusCode::OK
    );

    let store = std::sync::Arc::new(server::store::HttpSessionStore::new(app.store.clone()));
    let session = tower_sessions::Session::new(None, store.clone(), None);
    app.service
        .accounts
        .login(&session, "lou", "password123")
        .await
        .expect("the right password signs in");
    let wrong = app
        .service
        .accounts
        .login(&session, "lou", "wrong-password")
        .await
        .unwrap_err();
    let unknown = app
        .service
        .accounts
        .login(&session, "nobody", "password123")
        .await
        .unwrap_err();
    assert_eq!(wrong, unknown, "no hint whether the user exists");

    app.service
        .accounts
        .set_locked(&user_id, true, None)
        .await
        .unwrap();
    let me = app.get("/api/v1/me", Some(&token)).await;
    assert_eq!(
        me.status,
        StatusCode::UNAUTHORIZED,
        "the token stops working at once"
    );
    let locked = app
        .service
        .accounts
        .login(&session, "lou", "password123")
        .await
        .unwrap_err();
    assert_eq!(locked, wrong, "a locked account gets the same message");
    assert!(locked.to_string().contains("Wrong user name or password"));

    // Its session ends at the reaper's next pass, with the unused credits back.
    app.service.guard.reap().await;
    let ended = app.record(&running).await;
    assert_eq!(ended.state, SessionState::Ended);
    assert_eq!(ended.end_reason, Some(EndReason::Admin));
    assert!(ended.detail.unwrap().contains("locked"));
    assert_eq!(
        runtime.stopped.lock().unwrap().len(),
        1,
        "its editor stopped"
    );
    assert_eq!(app.store.credits(&user_id).await.unwrap().1, 0);
    app.stop().await;
}

#[tokio::test]
async fn a_session_whose_time_ran_out_is_ended_with_a_charge() {
    let runtime = FakeRuntime::new();
    let app = TestApp::start(Some(runtime.clone())).await;
    let (user_id, token) = app.user("tim").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    // Pretend it became ready 30 minutes ago and its 30 minutes are over.
    let past = server::store::now_ms() - 30 * 60_000;
    app.sql(
        &format!(
            "UPDATE sessions SET ready_at = {past}, ends_at = {} WHERE id = $1",
            past + 30 * 60_000
        ),
        &id,
    )
    .await;
    app.service.guard.reap().await;
    // The background reaper may have begun this stop a moment before: wait for its end.
    let view = app.wait_for(&token, &id, |v| v["state"] == "ended").await;
    assert_eq!(view["end_reason"], "timer");
    assert_eq!(
        runtime.stopped.lock().unwrap().len(),
        1,
        "the editor was stopped"
    );
    let (balance, held) = app.store.credits(&user_id).await.unwrap();
    assert_eq!(
        (balance, held),
        (100_000 - 500, 0),
        "30 minutes charged, nothing held"
    );
    app.stop().await;
}

#[tokio::test]
async fn the_progress_stream_ends_when_another_server_ends_the_session() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (_, token) = app.user("una").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    let ender = {
        let store = app.store.clone();
        let id = id.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            // Straight through the store, as another replica would: no in-process event.
            store
                .begin_stop(&id, app::domain::session::EndReason::Admin, None)
                .await
                .unwrap();
            store.finish(&id).await.unwrap();
        })
    };
    // The stream must notice the end from the database alone.
    let response = app
        .events(&id, &token, std::time::Duration::from_secs(15))
        .await;
    ender.await.unwrap();
    assert!(String::from_utf8_lossy(&response.body).contains("\"state\":\"ended\""));
    app.stop().await;
}

#[tokio::test]
async fn shutdown_ends_open_streams_and_stops_editors() {
    let runtime = FakeRuntime::new();
    let app = TestApp::start(Some(runtime.clone())).await;
    let (_, token) = app.user("vic").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    let url = app.url(&format!("/api/v1/sessions/{id}/events"));
    let stream = tokio::spawn(async move {
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http();
        let request = Request::get(url)
            .header("authorization", format!("Bearer {token}"))
            .body(Full::<bytes::Bytes>::default())
            .unwrap();
        let response = client.request(request).await.unwrap();
        use http_body_util::BodyExt;
        let mut body = response.into_body();
        let mut seen = Vec::new();
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) => {
                    if let Some(data) = frame.data_ref() {
                        seen.extend_from_slice(data);
                    }
                }
                Err(e) => {
                    eprintln!("stream error after {} bytes: {e}", seen.len());
                    break;
                }
            }
        }
        bytes::Bytes::from(seen)
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let store = app.store.clone();
    app.stop().await; // fails the test if the server does not stop
    let body = tokio::time::timeout(std::time::Duration::from_secs(5), stream)
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&body);
    assert!(
        text.contains("\"state\":\"ended\""),
        "the stream saw the end: {text}"
    );
    assert_eq!(runtime.stopped.lock().unwrap().len(), 1);
    let record = store.session(&id).await.unwrap().unwrap();
    assert_eq!(
        record.end_reason,
        Some(app::domain::session::EndReason::Admin)
    );
}

#[tokio::test]
async fn a_restart_adopts_live_editors_and_ends_the_rest_with_a_refund() {
    let runtime = FakeRuntime::new();
    let keep_editors = |c: &mut server::config::Config| {
        c.sessions.stop_on_shutdown = false;
        c.quotas.max_sessions = 3;
        c.quotas.max_gpu_mib = 3 * 8192;
    };
    let app = TestApp::start_with(Some(runtime.clone()), keep_editors).await;
    let (user_id, token) = app.user("rue").await;
    let alive = app.launch_ready(&token, "jupyterlab").await;
    let crashed = app.launch_ready(&token, "jupyterlab").await;
    let starting = app.launch_ready(&token, "jupyterlab").await;
    let (_, held) = app.store.credits(&user_id).await.unwrap();
    assert_eq!(held, 3 * 500);
    let crashed_handle = app.record(&crashed).await.runtime_handle.unwrap();
    let starting_handle = app.record(&starting).await.runtime_handle.unwrap();
    // The server went down while this one was still starting; that editor went down too.
    app.sql(
        "UPDATE sessions SET state = 'starting' WHERE id = ?",
        &starting,
    )
    .await;
    let same_store = app.same_store();
    let _data = app.stop().await;
    FakeRuntime::crash(&crashed_handle);

    let again = TestApp::start_with(Some(runtime.clone()), |c| {
        keep_editors(c);
        same_store(c);
    })
    .await;
    again.service.guard.recover().await.unwrap();

    let kept = again.record(&alive).await;
    assert_eq!(kept.state, SessionState::Ready);
    let proxied = again
        .get(&format!("/s/{alive}/api/status"), Some(&token))
        .await;
    assert_eq!(proxied.status, StatusCode::OK, "the proxy reaches it again");

    let gone = again.record(&crashed).await;
    assert_eq!(gone.state, SessionState::Ended);
    assert_eq!(gone.end_reason, Some(EndReason::Crash));
    let cut_short = again.record(&starting).await;
    assert_eq!(cut_short.state, SessionState::Ended);
    assert_eq!(cut_short.end_reason, Some(EndReason::Failed));
    assert!(
        cut_short.detail.unwrap_or_default().contains("refunded"),
        "the user is told"
    );
    assert!(
        !again.runtime.is_alive(&starting_handle).await,
        "no editor is left running for a session that ended"
    );
    let (_, held) = again.store.credits(&user_id).await.unwrap();
    assert_eq!(held, 500, "only the adopted session still holds credits");
    let free = again
        .store
        .pool()
        .await
        .unwrap()
        .iter()
        .flat_map(|(_, slots)| slots)
        .filter(|s| s.session_id.is_none())
        .count();
    assert_eq!(free, 5, "the two ended sessions' slots are free again");
    again.stop().await;
}

#[tokio::test]
async fn responses_stream_through_the_proxy_as_the_editor_sends_them() {
    use http_body_util::BodyExt;
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (_, token) = app.user("sam").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    let request = Request::get(app.url(&format!("/s/{id}/stream")))
        .header("authorization", format!("Bearer {token}"))
        .body(Full::default())
        .unwrap();
    let response = app.open(request).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    // The editor holds its last line back until the first one has reached us.
    let first = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .expect("the first line arrives while the editor still holds the rest")
        .expect("a frame")
        .expect("data");
    assert_eq!(first.into_data().unwrap(), "first\n");
    crate::common::STREAM_GATE.notify_one();
    let rest = body.collect().await.unwrap().to_bytes();
    assert_eq!(rest, "last\n");
    app.stop().await;
}

/// A token does only what its scopes say, at the REST API and at the proxy alike; a token that
/// makes tokens cannot grant more than it has.
#[tokio::test]
async fn tokens_do_only_what_their_scopes_allow() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (_, full) = app.user("sage").await;
    let id = app.launch_ready(&full, "jupyterlab").await;
    let make = async |token: &str, body: serde_json::Value| {
        app.call(Method::POST, "/api/v1/tokens", Some(token), Some(body))
            .await
    };
    let secret = |made: Response| {
        made.assert_status(StatusCode::CREATED);
        let made = made.json();
        made["token"].as_str().unwrap().to_string()
    };
    let reader = secret(make(&full, json!({ "label": "dashboards", "scopes": ["read"] })).await);
    let notebook = secret(make(&full, json!({ "label": "notebook", "scopes": ["access"] })).await);
    let launcher = secret(
        make(
            &full,
            json!({ "label": "ci", "scopes": ["sessions", "tokens"] }),
        )
        .await,
    );
    let session = format!("/api/v1/sessions/{id}");
    let editor = format!("/s/{id}/api/status");
    let forbidden = |response: Response, scope: &str| {
        response.assert_status(StatusCode::FORBIDDEN);
        let body = response.json();
        assert_eq!(body["error"], "forbidden");
        assert!(
            body["message"].as_str().unwrap().contains(scope),
            "names the scope `{scope}`: {body}"
        );
    };

    // read: sees the account and its sessions; changes nothing, reaches no editor.
    app.get(&session, Some(&reader))
        .await
        .assert_status(StatusCode::OK);
    app.get("/api/v1/sessions", Some(&reader))
        .await
        .assert_status(StatusCode::OK);
    app.get("/api/v1/me", Some(&reader))
        .await
        .assert_status(StatusCode::OK);
    forbidden(app.launch(&reader, "marimo", 30).await, "sessions");
    forbidden(
        app.call(
            Method::POST,
            &format!("{session}/extend"),
            Some(&reader),
            Some(json!({ "minutes": 5 })),
        )
        .await,
        "sessions",
    );
    forbidden(app.delete(&session, Some(&reader)).await, "sessions");
    forbidden(app.get(&editor, Some(&reader)).await, "access");
    forbidden(app.get("/api/v1/tokens", Some(&reader)).await, "tokens");

    // access: reaches the editor, and nothing else.
    app.get(&editor, Some(&notebook))
        .await
        .assert_status(StatusCode::OK);
    forbidden(app.get(&session, Some(&notebook)).await, "read");
    forbidden(app.delete(&session, Some(&notebook)).await, "sessions");

    // sessions + tokens: makes tokens within its own scopes only.
    let listed = app.get("/api/v1/tokens", Some(&launcher)).await.json();
    let scopes_of = |label: &str| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["label"] == label)
            .map(|t| t["scopes"].clone())
            .unwrap()
    };
    assert_eq!(scopes_of("ci"), json!(["read", "sessions", "tokens"]));
    assert_eq!(
        scopes_of("test"),
        json!(["read", "sessions", "access", "tokens"])
    );
    forbidden(
        make(&launcher, json!({ "label": "wider", "scopes": ["access"] })).await,
        "only scopes it has",
    );
    let inherited = make(&launcher, json!({ "label": "narrower" })).await;
    let inherited_scopes = inherited.json()["scopes"].clone();
    assert_eq!(inherited_scopes, json!(["read", "sessions", "tokens"]));
    for bad in [json!([]), json!(["root"]), json!("read")] {
        let refused = make(&full, json!({ "label": "bad", "scopes": bad })).await;
        refused.assert_status(StatusCode::BAD_REQUEST);
        assert_eq!(refused.json()["error"], "invalid", "{bad}");
    }
    forbidden(app.get(&editor, Some(&launcher)).await, "access");
    // Only a token that may read sees the credits.
    assert!(app.get("/api/v1/me", Some(&reader)).await.json()["credits"]["balance"].is_i64());
    let notebook_me = app.get("/api/v1/me", Some(&notebook)).await.json();
    assert_eq!(notebook_me["name"], "sage");
    assert!(notebook_me.get("credits").is_none(), "{notebook_me}");
    // A token that expires makes none that outlives it.
    let made = make(
        &full,
        json!({ "label": "day", "days": 1, "scopes": ["tokens"] }),
    )
    .await
    .json();
    let (day, day_ends) = (
        made["token"].as_str().unwrap().to_string(),
        made["expires_at_ms"].as_i64().unwrap(),
    );
    for asked in [
        json!({ "label": "forever" }),
        json!({ "label": "month", "days": 30 }),
    ] {
        let child = make(&day, asked.clone()).await;
        child.assert_status(StatusCode::CREATED);
        assert_eq!(child.json()["expires_at_ms"], day_ends, "{asked}");
    }
    app.delete(&session, Some(&launcher))
        .await
        .assert_status(StatusCode::OK);
    app.stop().await;
}

/// WebSockets count toward `proxy.max_connections` for as long as they last: once the cap is
/// reached, a new connection waits until one of them closes.
#[tokio::test]
async fn websockets_count_toward_the_connection_cap() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const CAP: usize = 3;
    let app = TestApp::start_with(Some(FakeRuntime::new()), |c| {
        c.proxy.max_connections = CAP as u64;
    })
    .await;
    let (_, token) = app.user("cora").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    let path = format!("/s/{id}/ws");
    // The test's own HTTP client may keep a connection of its own open, so the count of
    // WebSockets that fit is CAP or one less; without the cap on them it would have no end.
    let mut sockets = Vec::new();
    while sockets.len() <= 2 * CAP {
        match tokio::time::timeout(Duration::from_secs(2), app.websocket(&path, &token)).await {
            Ok(socket) => sockets.push(socket.expect("a websocket")),
            Err(_) => break,
        }
    }
    assert!(
        (CAP - 1..=CAP).contains(&sockets.len()),
        "{} WebSockets opened under a cap of {CAP}",
        sockets.len()
    );
    crate::common::assert_echoes(&mut sockets[0], 3).await;

    // A new connection waits while the cap is full ...
    let mut probe = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    probe
        .write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let waited =
        tokio::time::timeout(Duration::from_millis(700), probe.read_to_end(&mut answer)).await;
    assert!(waited.is_err(), "answered past the cap: {answer:?}");
    // ... and is served once a WebSocket closes.
    sockets.pop().unwrap().close(None).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), probe.read_to_end(&mut answer))
        .await
        .expect("served once a slot freed")
        .unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    drop(sockets);
    app.stop().await;
}

/// One session holds at most `proxy.max_websockets_per_session` WebSockets; one more is refused
/// with 429 until another closes.
#[tokio::test]
async fn a_session_has_a_ceiling_on_open_websockets() {
    let app = TestApp::start_with(Some(FakeRuntime::new()), |c| {
        c.proxy.max_websockets_per_session = 2;
    })
    .await;
    let (_, token) = app.user("wren").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    let path = format!("/s/{id}/ws");
    let mut first = app.websocket(&path, &token).await.expect("first");
    let mut second = app.websocket(&path, &token).await.expect("second");
    match app.websocket(&path, &token).await {
        Err(crate::common::WsError::Http(answer)) => {
            assert_eq!(answer.status(), StatusCode::TOO_MANY_REQUESTS)
        }
        other => panic!("a third WebSocket: {:?}", other.map(|_| "opened")),
    }
    crate::common::assert_echoes(&mut second, 2).await;
    // Another user's session counts for itself.
    let (_, other) = app.user("yara").await;
    let theirs = app.launch_ready(&other, "jupyterlab").await;
    app.websocket(&format!("/s/{theirs}/ws"), &other)
        .await
        .expect("another session's");
    first.close(None).await.unwrap();
    drop(first);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut third = loop {
        match app.websocket(&path, &token).await {
            Ok(socket) => break socket,
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("a place freed when one closed: {e}"),
        }
    };
    crate::common::assert_echoes(&mut third, 2).await;
    app.stop().await;
}

/// A sign-in ends after `SIGN_IN_MAX_DAYS` however much it is used: the person signs in again
/// (a provider's account removed since does not live on here).
#[tokio::test]
async fn a_sign_in_ends_after_its_longest_life_however_busy() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (olga, _) = app.user("olga").await;
    let cookie = app.sign_in_cookie("olga").await;
    let me = |cookie: String| {
        let app = &app;
        async move {
            let request = Request::get(app.url("/api/v1/me"))
                .header("cookie", format!("sandbox_session={cookie}"))
                .body(Full::default())
                .unwrap();
            app.send(request).await
        }
    };
    me(cookie.clone()).await.assert_status(StatusCode::OK);
    // Signed in just inside the limit: still in.
    let day_ms: i64 = 24 * 3600 * 1000;
    let age = |days: i64| {
        format!(
            "UPDATE http_sessions SET data = json_set(data, '$.{}', {}) WHERE id = $1",
            server::auth::SIGNED_IN_KEY,
            server::store::now_ms() - days * day_ms
        )
    };
    app.sql(
        &age(server::auth::SIGN_IN_MAX_DAYS - 1),
        &server::store::HttpSessionStore::key_of(&cookie),
    )
    .await;
    // The database is asked again, not the few seconds' cache.
    app.service.accounts.forget_user(&olga);
    me(cookie.clone()).await.assert_status(StatusCode::OK);
    app.sql(
        &age(server::auth::SIGN_IN_MAX_DAYS),
        &server::store::HttpSessionStore::key_of(&cookie),
    )
    .await;
    app.service.accounts.forget_user(&olga);
    me(cookie.clone())
        .await
        .assert_status(StatusCode::UNAUTHORIZED);
    // A new sign-in starts a new life.
    let fresh = app.sign_in_cookie("olga").await;
    me(fresh).await.assert_status(StatusCode::OK);
}

/// `GET /api/v1/me` with the cookie `name=value`.
async fn me_by_cookie(app: &TestApp, name: &str, value: &str) -> crate::common::Response {
    let request = Request::get(app.url("/api/v1/me"))
        .header("cookie", format!("{name}={value}"))
        .body(Full::default())
        .unwrap();
    app.send(request).await
}

/// "Seven days unused" is what happens: a request moves a sign-in's end (in the database and
/// in the browser's cookie), while one nobody uses ends seven days after its last use.
#[tokio::test]
async fn a_used_sign_in_lasts_seven_days_from_its_last_use() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (pia, _) = app.user("pia").await;
    let cookie = app.sign_in_cookie("pia").await;
    let key = server::store::HttpSessionStore::key_of(&cookie);
    let now_s = || server::store::now_ms() / 1000;
    let week_s = server::auth::SIGN_IN_IDLE_DAYS * 24 * 3600;
    let (app_ref, pia_ref, key_ref) = (&app, &pia, &key);
    let end_at = |at: i64| async move {
        app_ref
            .sql(
                &format!("UPDATE http_sessions SET expires_at = {at} WHERE id = $1"),
                key_ref,
            )
            .await;
        // The database is asked again, not the few seconds' cache.
        app_ref.service.accounts.forget_user(pia_ref);
    };
    // Last extended six days ago: one day left.
    end_at(now_s() + 24 * 3600).await;
    let before = now_s();
    let answer = me_by_cookie(&app, "sandbox_session", &cookie).await;
    let after = now_s();
    answer.assert_status(StatusCode::OK);
    let end = app
        .sql_i64("SELECT expires_at FROM http_sessions WHERE id = $1", &key)
        .await;
    // However long the request took: a week from when it was served.
    assert!(
        (before + week_s - 1..=after + week_s + 1).contains(&end),
        "a used sign-in ends a week from its use, not {} s after it",
        end - before
    );
    // The browser is told the cookie's new lifetime, under the same id.
    let set = answer
        .set_cookie("sandbox_session")
        .expect("the cookie is sent again");
    assert_eq!(answer.session_cookie().as_deref(), Some(cookie.as_str()));
    let max_age: i64 = set
        .split(';')
        .find_map(|a| a.trim().strip_prefix("Max-Age="))
        .expect("Max-Age")
        .parse()
        .unwrap();
    assert!(
        (week_s - (after - before) - 1..=week_s).contains(&max_age),
        "{set}"
    );
    // One whose end has passed signs nobody in.
    end_at(now_s() - 1).await;
    me_by_cookie(&app, "sandbox_session", &cookie)
        .await
        .assert_status(StatusCode::UNAUTHORIZED);
}

/// Behind TLS the sign-in cookie is Secure and `__Host-` (a plain-HTTP answer or a sibling
/// subdomain cannot plant one), the plain name no longer signs anyone in, and every page tells
/// the browser to stay on HTTPS.
#[tokio::test]
async fn secure_cookies_are_host_cookies_and_pages_ask_for_https() {
    let app = TestApp::start_with(Some(FakeRuntime::new()), |c| c.secure_cookies = true).await;
    app.user("sol").await;
    let answer = app.sign_in("sol", "password123").await;
    let set = answer
        .set_cookie("__Host-sandbox_session")
        .unwrap_or_else(|| panic!("a __Host- cookie: {:?}", answer.headers));
    let attributes: Vec<&str> = set.split(';').map(str::trim).collect();
    assert!(attributes.contains(&"Secure"), "{set}");
    assert!(attributes.contains(&"Path=/"), "{set}");
    assert!(!set.contains("Domain"), "{set}");
    let value = attributes[0].split_once('=').unwrap().1.to_string();
    let signed_in = me_by_cookie(&app, "__Host-sandbox_session", &value).await;
    signed_in.assert_status(StatusCode::OK);
    assert_eq!(
        signed_in.headers.get("strict-transport-security").unwrap(),
        "max-age=31536000"
    );
    me_by_cookie(&app, "sandbox_session", &value)
        .await
        .assert_status(StatusCode::UNAUTHORIZED);
    let login = app
        .send(
            Request::get(app.url("/login"))
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert!(login.headers.contains_key("strict-transport-security"));
    // Without TLS, no such promise.
    let plain = TestApp::start(Some(FakeRuntime::new())).await;
    let login = plain
        .send(
            Request::get(plain.url("/login"))
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert!(!login.headers.contains_key("strict-transport-security"));
}

#[tokio::test]
async fn the_database_holds_no_sign_in_that_signs_anyone_in() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    app.user("hash").await;
    let cookie = app.sign_in_cookie("hash").await;
    let me = |cookie: String| {
        let app = &app;
        async move {
            let request = Request::get(app.url("/api/v1/me"))
                .header("cookie", format!("sandbox_session={cookie}"))
                .body(Full::new(bytes::Bytes::new()))
                .unwrap();
            app.send(request).await
        }
    };
    me(cookie.clone()).await.assert_status(StatusCode::OK);
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&app.service.config().database_url())
        .await
        .unwrap();
    let keys: Vec<String> = sqlx::query_scalar("SELECT id FROM http_sessions")
        .fetch_all(&pool)
        .await
        .unwrap();
    pool.close().await;
    assert!(!keys.is_empty());
    assert!(
        !keys.contains(&cookie),
        "the sign-in's id is stored as it is"
    );
    for key in keys {
        me(key).await.assert_status(StatusCode::UNAUTHORIZED);
    }
}

/// A POST whose body the server refuses before reading it: the head and as much of the body as
/// the server takes, then the answer as it came (its status and body, chunks joined).
async fn oversized(
    app: &TestApp,
    path: &str,
    kind: &str,
    body: &[u8],
    cookie: Option<&str>,
) -> crate::common::Response {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let cookie = cookie
        .map(|c| format!("cookie: sandbox_session={c}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\naccept: application/json\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n{cookie}\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    // The server may stop reading and close midway: a failed write is expected.
    let _ = tcp.write_all(body).await;
    let mut raw = Vec::new();
    let _ = tcp.read_to_end(&mut raw).await;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no answer: {text:.300}"));
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut joined = String::new();
        let mut rest = rest;
        while let Some((size, after)) = rest.split_once("\r\n") {
            let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if size == 0 || after.len() < size {
                break;
            }
            joined.push_str(&after[..size]);
            rest = after[size..].trim_start_matches("\r\n");
        }
        joined
    } else {
        rest.to_string()
    };
    crate::common::Response {
        status: StatusCode::from_u16(status).unwrap(),
        headers: http::HeaderMap::new(),
        body: bytes::Bytes::from(body),
    }
}

/// A server function called with what its arguments cannot be read from: a 400 (413 for a body
/// past the limit) in a short message that does not echo the input, for anyone; nothing written.
#[tokio::test]
async fn server_functions_answer_bad_input_with_400_or_413() {
    use leptos::server_fn::ServerFn;
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (user_id, _) = app.user("uma").await;
    let cookie = app.sign_in_cookie("uma").await;
    let call = |path: &'static str, kind: &'static str, body: Vec<u8>, signed_in: bool| {
        let mut request = Request::post(app.url(path))
            .header("accept", "application/json")
            .header("content-type", kind);
        if signed_in {
            request = request.header("cookie", format!("sandbox_session={cookie}"));
        }
        let request = request.body(Full::new(bytes::Bytes::from(body))).unwrap();
        app.send(request)
    };
    let form = "application/x-www-form-urlencoded";
    let json_kind = "application/json";
    let launch = <app::api::Launch as ServerFn>::PATH;
    let users = <app::api::AdminUsers as ServerFn>::PATH;
    let long = "x".repeat(70_000);
    let cases: Vec<(&str, &str, Vec<u8>, StatusCode)> = vec![
        (
            launch,
            form,
            b"editor=jupyterlab".to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            launch,
            form,
            b"slice_mib=abc&editor=x".to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            launch,
            form,
            format!("editor={long}&slice_mib=8192&duration_minutes=30").into_bytes(),
            StatusCode::BAD_REQUEST,
        ),
        (
            launch,
            form,
            vec![0xff, 0xfe, 0x3d, 0x80],
            StatusCode::BAD_REQUEST,
        ),
        (
            users,
            json_kind,
            b"{not json".to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (users, json_kind, b"[]".to_vec(), StatusCode::BAD_REQUEST),
        (users, json_kind, vec![0xff; 16], StatusCode::BAD_REQUEST),
        (
            launch,
            form,
            vec![b'a'; 3 * 1024 * 1024],
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
    ];
    for signed_in in [true, false] {
        for (path, kind, body, want) in &cases {
            // Well-formed, anonymous: refused for that, before anything reads the editor.
            let well_formed = body.len() == 70_042;
            let want = if well_formed && !signed_in {
                &StatusCode::UNAUTHORIZED
            } else {
                want
            };
            // Past the limit the server answers before the body is read whole and closes: the
            // client may see its write fail first, so the answer is read off the socket.
            let answer = if body.len() > 2 * 1024 * 1024 {
                oversized(&app, path, kind, body, signed_in.then_some(cookie.as_str())).await
            } else {
                call(path, kind, body.clone(), signed_in).await
            };
            let shown =
                String::from_utf8_lossy(&answer.body[..answer.body.len().min(300)]).into_owned();
            assert_eq!(
                answer.status,
                *want,
                "{path} {kind} ({} bytes, signed in: {signed_in}): {shown}",
                body.len()
            );
            assert!(
                answer.body.len() < 1024,
                "{path}: the answer echoes its input ({} bytes)",
                answer.body.len()
            );
            let error: serde_json::Value = serde_json::from_slice(&answer.body)
                .unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {shown}"));
            assert!(error["error"].is_string(), "{error}");
        }
    }
    assert_eq!(
        session_count(&app, &user_id).await,
        0,
        "nothing was launched"
    );
    app.stop().await;
}

/// Our own pages, server functions and API answers can be framed by no site; an editor's
/// answers through the proxy stay framable by our page alone.
#[tokio::test]
async fn our_pages_carry_the_framing_and_content_headers() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (_, token) = app.user("fay").await;
    for path in [
        "/",
        "/login",
        "/tokens",
        "/admin",
        "/api/v1/health",
        "/no-such-page",
    ] {
        let answer = app.get(path, None).await;
        let header = |name: &str| {
            answer
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        assert_eq!(header("x-frame-options"), "DENY", "{path}");
        assert_eq!(header("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(header("referrer-policy"), "same-origin", "{path}");
        let csp = header("content-security-policy");
        assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
        assert!(csp.contains("object-src 'none'"), "{path}: {csp}");
    }
    let id = app.launch_ready(&token, "marimo").await;
    let proxied = app.get(&format!("/s/{id}/"), Some(&token)).await;
    assert_eq!(
        proxied.headers.get("x-frame-options").unwrap(),
        "SAMEORIGIN",
        "an editor is framed by our page"
    );
    app.stop().await;
}

/// A tab of its own that navigates into the editor (marimo's new notebook, a link) is sent to
/// the session page with its place; the page's frame and scripts reach the editor as before.
#[tokio::test]
async fn a_tab_that_goes_into_the_editor_is_framed_by_the_session_page() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (_, token) = app.user("tab").await;
    let id = app.launch_ready(&token, "marimo").await;
    let cookie = app.sign_in_cookie("tab").await;
    let visit = async |path: &str, dest: Option<&str>| {
        let mut request = Request::get(app.url(path))
            .header("cookie", format!("sandbox_session={cookie}"))
            .header("accept", "text/html");
        if let Some(dest) = dest {
            request = request
                .header("sec-fetch-dest", dest)
                .header("sec-fetch-mode", "navigate");
        }
        app.send(request.body(Full::new(bytes::Bytes::new())).unwrap())
            .await
    };
    let tab = visit(&format!("/s/{id}/?file=new_notebook.py"), Some("document")).await;
    tab.assert_status(StatusCode::SEE_OTHER);
    assert_eq!(
        tab.headers["location"],
        format!("/sessions/{id}?path=%3Ffile%3Dnew_notebook.py")
    );
    let home = visit(&format!("/s/{id}/"), Some("document")).await;
    assert_eq!(home.headers["location"], format!("/sessions/{id}"));
    // The page's own frame, a script's request, a download, a token: the editor answers.
    visit(&format!("/s/{id}/api/status"), Some("iframe"))
        .await
        .assert_status(StatusCode::OK);
    visit(&format!("/s/{id}/api/status"), None)
        .await
        .assert_status(StatusCode::OK);
    visit(&format!("/s/{id}/api/status?download=1"), Some("document"))
        .await
        .assert_status(StatusCode::OK);
    let scripted = Request::get(app.url(&format!("/s/{id}/api/status")))
        .header("authorization", format!("Bearer {token}"))
        .header("sec-fetch-dest", "document")
        .body(Full::new(bytes::Bytes::new()))
        .unwrap();
    app.send(scripted).await.assert_status(StatusCode::OK);
    // Another user's tab learns nothing: 404 as for a session that does not exist.
    app.user("other-tab").await;
    let theirs = app.sign_in_cookie("other-tab").await;
    let request = Request::get(app.url(&format!("/s/{id}/")))
        .header("cookie", format!("sandbox_session={theirs}"))
        .header("sec-fetch-dest", "document")
        .body(Full::new(bytes::Bytes::new()))
        .unwrap();
    app.send(request).await.assert_status(StatusCode::NOT_FOUND);
    app.stop().await;
}

/// The editor's own Shut Down (JupyterLab's `/api/shutdown`, marimo's `/api/kernel/shutdown`)
/// ends the session through us: stopped by the user, settled, the editor never asked.
#[tokio::test]
async fn an_editors_own_shutdown_ends_the_session_through_us() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (user_id, token) = app.user("shut").await;
    for (editor, path) in [
        ("jupyterlab", "/api/shutdown"),
        ("marimo", "/api/kernel/shutdown"),
    ] {
        let id = app.launch_ready(&token, editor).await;
        // A token that may reach the editor but not stop sessions cannot end it so.
        let (limited, hash) = server::auth::new_api_token();
        app.store
            .create_token(
                &user_id,
                &hash,
                "access only",
                Scopes::of(&[Scope::Access]),
                None,
            )
            .await
            .unwrap();
        let shutdown = format!("/s/{id}{path}");
        app.call(Method::POST, &shutdown, Some(&limited), None)
            .await
            .assert_status(StatusCode::FORBIDDEN);
        assert_eq!(app.record(&id).await.state.as_str(), "ready");

        let answer = app.call(Method::POST, &shutdown, Some(&token), None).await;
        answer.assert_status(StatusCode::OK);
        assert_eq!(answer.json()["success"], true);
        let record = app.record(&id).await;
        assert_eq!(record.state.as_str(), "ended", "{editor}");
        assert_eq!(record.end_reason.map(|r| r.as_str()), Some("user"));
        assert_eq!(
            record.detail.as_deref(),
            Some("shut down from inside the editor")
        );
        let view = app
            .get(&format!("/api/v1/sessions/{id}"), Some(&token))
            .await
            .json();
        assert_eq!(
            view["cost"]["returned"].as_i64().unwrap() + view["cost"]["charged"].as_i64().unwrap(),
            view["cost"]["held"].as_i64().unwrap(),
            "{view}"
        );
        assert!(view["cost"]["returned"].as_i64().unwrap() > 0, "{view}");
    }
    let (_, held) = app.store.credits(&user_id).await.unwrap();
    assert_eq!(held, 0);
    app.stop().await;
}

/// Where no registry is configured, a running session's page offers no Promote.
#[tokio::test]
async fn promote_is_not_offered_where_promotion_is_off() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (_, token) = app.user("plain").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    let cookie = app.sign_in_cookie("plain").await;
    let request = Request::get(app.url(&format!("/sessions/{id}")))
        .header("cookie", format!("sandbox_session={cookie}"))
        .header("accept", "text/html")
        .body(Full::new(bytes::Bytes::new()))
        .unwrap();
    let page = app.send(request).await;
    page.assert_status(StatusCode::OK);
    let html = String::from_utf8_lossy(&page.body);
    assert!(
        html.contains("data-testid=\"time-left\""),
        "the running session's toolbar"
    );
    assert!(
        !html.contains("class=\"promote\""),
        "no Promote without a registry"
    );
    app.stop().await;
}
