//! Faults and bad input: a client that goes away in the middle of a write, and what must still
//! work afterwards.

use crate::common::{FakeRuntime, TestApp};
use http::StatusCode;
use serde_json::json;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// The head and body of an authenticated `POST /api/v1/tokens`, as one write.
fn token_request(token: &str, label: &str) -> Vec<u8> {
    let body = json!({ "label": label }).to_string();
    format!(
        "POST /api/v1/tokens HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[tokio::test]
async fn writes_survive_clients_that_hang_up_in_the_middle_of_one() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (user_id, token) = app.user("quitter").await;
    // Each client sends a whole write and closes at once, or a moment later: the server is
    // inside the write's transaction when it notices, or about to begin it.
    let hang_up = |i: u64| {
        let request = token_request(&token, &format!("gone {i}"));
        let addr = app.addr;
        async move {
            let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            tcp.write_all(&request).await.unwrap();
            // Closed at once or within 2 ms: while the server reads, begins or holds the write.
            let wait = (i * 37) % 2000;
            if wait > 100 {
                tokio::time::sleep(Duration::from_micros(wait)).await;
            }
            drop(tcp);
        }
    };
    for round in 0..100u64 {
        futures_util::future::join_all((0..8).map(|k| hang_up(round * 8 + k))).await;
    }
    // Writes still go through, one after another and several at once, and every account's
    // tokens can still be listed and made.
    for i in 0..5 {
        let made = app
            .call(
                http::Method::POST,
                "/api/v1/tokens",
                Some(&token),
                Some(json!({ "label": format!("after {i}") })),
            )
            .await;
        made.assert_status(StatusCode::CREATED);
    }
    let together = futures_util::future::join_all((0..8).map(|i| {
        app.call(
            http::Method::POST,
            "/api/v1/tokens",
            Some(&token),
            Some(json!({ "label": format!("together {i}") })),
        )
    }))
    .await;
    for made in together {
        made.assert_status(StatusCode::CREATED);
    }
    let (_, other) = app.user("stayer").await;
    app.launch_ready(&other, "jupyterlab").await;
    // What the hung-up clients asked for was either done whole or not at all.
    let listed = app.get("/api/v1/tokens", Some(&token)).await;
    listed.assert_status(StatusCode::OK);
    let labels: Vec<String> = listed
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["label"].as_str().unwrap().to_string())
        .collect();
    assert!(
        labels.iter().filter(|l| l.starts_with("after ")).count() == 5,
        "{labels:?}"
    );
    let tokens = app.store.tokens_of(&user_id).await.unwrap();
    assert_eq!(tokens.len(), labels.len());
}

/// A PostgreSQL database that stops taking connections (as in an outage: every connection
/// dropped, new ones refused): readiness and every route that needs it answer 503
/// `database_unavailable` instead of hanging into a 500, liveness stays 200, and all heals
/// once the database is back.
#[tokio::test]
async fn a_database_outage_answers_503_and_heals() {
    use sqlx::{Connection, Executor};
    let admin_url = match std::env::var("DATABASE_URL") {
        Ok(url) if url.starts_with("postgres") => url,
        _ => {
            eprintln!("skipped: DATABASE_URL (postgres://...) is not set");
            return;
        }
    };
    let db = format!("outage_{}", std::process::id());
    let mut admin = sqlx::PgConnection::connect(&admin_url).await.unwrap();
    admin
        .execute(format!("DROP DATABASE IF EXISTS {db}").as_str())
        .await
        .unwrap();
    admin
        .execute(format!("CREATE DATABASE {db}").as_str())
        .await
        .unwrap();
    let (base, _) = admin_url.rsplit_once('/').unwrap();
    let url = format!("{base}/{db}");
    let app = TestApp::start_with(Some(FakeRuntime::new()), |c| c.database_url = url).await;
    let (_, token) = app.user("olga").await;
    app.get("/readyz", None).await.assert_status(StatusCode::OK);

    let outage = |allow: bool| format!("ALTER DATABASE {db} ALLOW_CONNECTIONS {allow}");
    admin.execute(outage(false).as_str()).await.unwrap();
    admin
        .execute(
            format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{db}'"
            )
            .as_str(),
        )
        .await
        .unwrap();
    for (path, who) in [
        ("/readyz", None),
        ("/api/v1/health", None),
        ("/api/v1/me", Some(token.as_str())),
        ("/api/v1/sessions", Some(token.as_str())),
    ] {
        let answer = app.get(path, who).await;
        answer.assert_status(StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(answer.json()["error"], "database_unavailable", "{path}");
    }
    // Once the server's own look has seen the outage, every request is answered from it, not
    // after the pool's wait: the answer says when to look again.
    let seen = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let answer = app.get("/api/v1/me", Some(&token)).await;
            if answer.headers.get("retry-after").is_some() {
                return answer;
            }
        }
    })
    .await
    .expect("the outage is seen by the server's look at the database");
    seen.assert_status(StatusCode::SERVICE_UNAVAILABLE);
    for path in ["/api/v1/sessions", "/", "/admin"] {
        let answer = app.get(path, Some(&token)).await;
        answer.assert_status(StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(answer.headers["retry-after"], "1", "{path}");
    }
    let launch = app.launch(&token, "jupyterlab", 30).await;
    launch.assert_status(StatusCode::SERVICE_UNAVAILABLE);
    app.get("/livez", None).await.assert_status(StatusCode::OK);

    admin.execute(outage(true).as_str()).await.unwrap();
    let healed = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if app.get("/readyz", None).await.status == StatusCode::OK {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(healed.is_ok(), "ready again once the database is back");
    app.get("/api/v1/me", Some(&token))
        .await
        .assert_status(StatusCode::OK);
    app.stop().await;
    let _ = admin
        .execute(format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)").as_str())
        .await;
}

/// The head of a write whose body never comes (`Content-Length` promised, one byte sent).
const TRICKLED_SIGN_IN: &[u8] = b"POST /api/v1/tokens HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: 100000\r\n\r\nn";

/// A client from `address` (of the loopback) connected to the app.
async fn connect_from(app: &TestApp, address: [u8; 4]) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(std::net::SocketAddr::from((address, 0)))
        .unwrap();
    socket.connect(app.addr).await.unwrap()
}

/// What the server sent on `tcp` before closing it (nothing for a connection refused at once;
/// the end of a reset counts as the end).
async fn all_it_says(tcp: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut said = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(120), tcp.read_to_end(&mut said)).await;
    String::from_utf8_lossy(&said).into_owned()
}

/// What one request on a fresh connection from `address` gets, read to the connection's end.
async fn ask_from(app: &TestApp, address: [u8; 4], request: &str) -> String {
    let mut tcp = connect_from(app, address).await;
    tcp.write_all(request.as_bytes()).await.unwrap();
    all_it_says(&mut tcp).await
}

/// A CONNECT is refused in JSON (it reached an `unwrap` in leptos_axum), and a form posted to a
/// server function without script is never sent back to a `Referer` of another site.
#[tokio::test]
async fn odd_requests_get_clear_answers_and_no_foreign_redirect() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let said = ask_from(
        &app,
        [127, 0, 0, 1],
        "CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n",
    )
    .await;
    assert!(said.starts_with("HTTP/1.1 405"), "{said}");
    assert!(said.contains("method_not_allowed"), "{said}");
    let login = <app::api::Login as leptos::server_fn::ServerFn>::PATH;
    for referer in [
        "//evil.example/x",
        "javascript:alert(1)",
        "https://evil.example/",
    ] {
        let said = ask_from(
            &app,
            [127, 0, 0, 1],
            &format!(
                "POST {login} HTTP/1.1\r\nhost: x\r\naccept: text/html\r\ncontent-type: application/x-www-form-urlencoded\r\nreferer: {referer}\r\ncontent-length: 26\r\nconnection: close\r\n\r\nname=nobody&password=wrong"
            ),
        )
        .await;
        let location = said
            .lines()
            .find_map(|l| l.strip_prefix("location: "))
            .unwrap_or_else(|| panic!("a redirect back: {said}"));
        assert!(
            app::domain::paths::is_local_path(location),
            "{referer} -> {location}"
        );
    }
}

/// A flood from many addresses that takes every ordinary place still leaves a tenth of the cap
/// to people signed in (and to health probes); anyone else is told 503 at once, and a kept place
/// is not held by a request head that trickles in.
#[tokio::test]
async fn a_share_of_the_connections_is_kept_for_signed_in_people() {
    let app = TestApp::start_with(Some(FakeRuntime::new()), |c| {
        c.proxy.max_connections = 20;
        c.proxy.max_connections_per_client = 20;
        // The flood's bodies never finish while the test runs, however busy the machine.
        c.proxy.body_timeout_seconds = 600;
    })
    .await;
    let (_, token) = app.user("kim").await;
    // 18 ordinary places (the cap less its tenth), taken from two addresses.
    let mut flood = Vec::new();
    for i in 0..18 {
        let mut tcp = connect_from(&app, [127, 0, 0, 20 + (i % 2)]).await;
        let _ = tcp.write_all(TRICKLED_SIGN_IN).await;
        flood.push(tcp);
    }
    let me = |auth: &str| {
        format!("GET /api/v1/me HTTP/1.1\r\nhost: x\r\n{auth}connection: close\r\n\r\n")
    };
    let stranger = ask_from(&app, [127, 0, 0, 30], &me("")).await;
    assert!(stranger.starts_with("HTTP/1.1 503"), "{stranger}");
    assert!(stranger.contains("\"busy\""), "{stranger}");
    let probe = ask_from(
        &app,
        [127, 0, 0, 30],
        "GET /api/v1/health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(probe.starts_with("HTTP/1.1 200"), "{probe}");
    let bearer = format!("authorization: Bearer {token}\r\n");
    let kim = ask_from(&app, [127, 0, 0, 31], &me(&bearer)).await;
    assert!(kim.starts_with("HTTP/1.1 200"), "signed in, served: {kim}");
    assert!(kim.contains("\"kim\""), "{kim}");
    // Both kept places taken by heads that never end: they are closed soon, and Kim gets in.
    let mut trickling = Vec::new();
    for _ in 0..2 {
        let mut tcp = connect_from(&app, [127, 0, 0, 32]).await;
        tcp.write_all(b"GET /api/v1/me HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        trickling.push(tcp);
    }
    let kim = ask_from(&app, [127, 0, 0, 31], &me(&bearer)).await;
    assert!(kim.starts_with("HTTP/1.1 200"), "{kim}");
    for tcp in &mut trickling {
        let said = all_it_says(tcp).await;
        assert!(!said.starts_with("HTTP/1.1 200"), "{said}");
    }
    drop(flood);
    app.stop().await;
}

/// A body that trickles in is answered 408 once it is late; one client's many connections stop
/// at its share of the cap, while everyone else is served.
#[tokio::test]
async fn slow_bodies_time_out_and_one_client_cannot_take_every_connection() {
    let app = TestApp::start_with(Some(FakeRuntime::new()), |c| {
        c.proxy.max_connections = 64;
        c.proxy.max_connections_per_client = 8;
        // Long enough that every connection below is accepted before the first is answered,
        // however busy the machine.
        c.proxy.body_timeout_seconds = 10;
    })
    .await;
    let mut slow = connect_from(&app, [127, 0, 0, 1]).await;
    slow.write_all(TRICKLED_SIGN_IN).await.unwrap();
    let answer = all_it_says(&mut slow).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");

    let mut flood = Vec::new();
    for _ in 0..20 {
        let mut tcp = connect_from(&app, [127, 0, 0, 5]).await;
        let _ = tcp.write_all(TRICKLED_SIGN_IN).await;
        flood.push(tcp);
    }
    // While they are held, everyone else is served.
    app.get("/api/v1/health", None)
        .await
        .assert_status(StatusCode::OK);
    let mut other = connect_from(&app, [127, 0, 0, 6]).await;
    other
        .write_all(b"GET /api/v1/health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let served = all_it_says(&mut other).await;
    assert!(
        served.starts_with("HTTP/1.1 200"),
        "another client is let in: {served}"
    );
    // Held connections are answered 408 in the end; the rest were closed without a word.
    let mut held = 0;
    let mut refused = 0;
    for tcp in &mut flood {
        match all_it_says(tcp).await {
            said if said.starts_with("HTTP/1.1 408") => held += 1,
            said if said.is_empty() => refused += 1,
            said => panic!("unexpected: {said}"),
        }
    }
    assert_eq!(
        (held, refused),
        (8, 12),
        "eight held, the rest closed at once"
    );
    app.stop().await;
}

/// A small file system of its own (a tmpfs), unmounted when dropped; None where this machine
/// will not mount one (not root).
struct SmallDisk(tempfile::TempDir);

impl SmallDisk {
    fn mount(mib: u32) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        mounted.then_some(SmallDisk(dir))
    }

    /// Writes a file until the file system has no byte left; removing it frees them again.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.0.path().join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        for chunk in [65536, 512, 1] {
            while file.write_all(&vec![0u8; chunk]).is_ok() {}
        }
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.0.path())
            .status();
    }
}

/// A full disk under the data directory: readiness says so, every write either happens whole
/// or answers 503 `storage_full` (never a 500, never a stop that answers 200 and leaves the
/// session running), and once space is freed every write works again at once, with no
/// connection of the pool left counting a transaction SQLite already rolled back; a graceful
/// shutdown still stops every editor.
#[tokio::test]
async fn a_full_disk_answers_503_and_every_write_works_once_space_is_freed() {
    let Some(disk) = SmallDisk::mount(8) else {
        eprintln!("skipped: this machine does not let the test mount a tmpfs (not root)");
        return;
    };
    let runtime = FakeRuntime::new();
    let data_dir = disk.0.path().to_path_buf();
    let app = TestApp::start_with(Some(runtime.clone()), move |c| {
        c.data_dir = data_dir;
        c.sessions.stop_on_shutdown = true;
    })
    .await;
    let (_, token) = app.user("fern").await;
    let running = app.launch_ready(&token, "jupyterlab").await;
    app.get("/readyz", None).await.assert_status(StatusCode::OK);

    let filler = disk.fill();
    let ready = app.get("/readyz", None).await;
    ready.assert_status(StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(ready.json()["error"], "storage_full");
    let refused_as_full = |answer: &crate::common::Response| {
        answer.assert_status(StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            answer.json()["error"],
            "storage_full",
            "{}",
            String::from_utf8_lossy(&answer.body)
        );
    };
    // SQLite may still have room in pages it already has: writes go on until one needs more.
    let mut refused = 0;
    for i in 0..2000 {
        let made = app
            .call(
                http::Method::POST,
                "/api/v1/tokens",
                Some(&token),
                Some(json!({ "label": format!("full {i} {}", "x".repeat(40)) })),
            )
            .await;
        if made.status == StatusCode::CREATED {
            continue;
        }
        refused_as_full(&made);
        refused += 1;
        if refused == 3 {
            break;
        }
    }
    assert_eq!(refused, 3, "the disk filled up and writes were refused");
    let stop = app
        .delete(&format!("/api/v1/sessions/{running}"), Some(&token))
        .await;
    refused_as_full(&stop);
    assert_eq!(app.record(&running).await.state.as_str(), "ready");
    refused_as_full(&app.launch(&token, "marimo", 30).await);
    refused_as_full(&app.sign_in("fern", "password123").await);

    std::fs::remove_file(filler).unwrap();
    app.get("/readyz", None).await.assert_status(StatusCode::OK);
    for i in 0..20 {
        app.call(
            http::Method::POST,
            "/api/v1/tokens",
            Some(&token),
            Some(json!({ "label": format!("freed {i}") })),
        )
        .await
        .assert_status(StatusCode::CREATED);
    }
    for _ in 0..10 {
        let signed_in = app.sign_in("fern", "password123").await;
        assert!(
            signed_in.session_cookie().is_some(),
            "{} {}",
            signed_in.status,
            String::from_utf8_lossy(&signed_in.body)
        );
    }
    let stopped = app
        .delete(&format!("/api/v1/sessions/{running}"), Some(&token))
        .await;
    stopped.assert_status(StatusCode::OK);
    assert_eq!(stopped.json()["state"], "ended");
    app.launch_ready(&token, "marimo").await;
    app.stop().await;
    assert_eq!(
        runtime.started.lock().unwrap().len(),
        runtime.stopped.lock().unwrap().len(),
        "every editor started was stopped at shutdown"
    );
}
