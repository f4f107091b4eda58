//! The promotion path against a real registry: Debian's `docker-registry` (the CNCF
//! distribution server) on loopback, with basic auth. A file goes from a user's workspace to
//! the registry as an OCI artifact with its provenance, after an admin's approval.

use crate::common::{FakeRuntime, TestApp};
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub(crate) const REGISTRY_USER: &str = "pusher";
pub(crate) const REGISTRY_PASSWORD: &str = "registry-secret";

/// A registry server of our own, on a free port; stopped when dropped.
pub(crate) struct Registry {
    pub(crate) addr: SocketAddr,
    dir: tempfile::TempDir,
    child: Option<tokio::process::Child>,
}

impl Registry {
    pub(crate) async fn start() -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let addr = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        let hash = bcrypt::hash(REGISTRY_PASSWORD, 4).unwrap();
        std::fs::write(
            dir.path().join("htpasswd"),
            format!("{REGISTRY_USER}:{hash}\n"),
        )
        .unwrap();
        let mut registry = Registry {
            addr,
            dir,
            child: None,
        };
        registry.run().await;
        registry
    }

    /// Starts (or starts again) the server on the same port and storage.
    async fn run(&mut self) {
        let config = self.dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: error, accesslog: {{disabled: true}}}}\nstorage: {{filesystem: {{rootdirectory: {}}}}}\n\
                 http: {{addr: {}}}\nauth: {{htpasswd: {{realm: test, path: {}}}}}\n",
                self.dir.path().join("data").display(),
                self.addr,
                self.dir.path().join("htpasswd").display()
            ),
        )
        .unwrap();
        let binary = std::env::var("SANDBOX_TEST_REGISTRY").unwrap_or("docker-registry".into());
        let child = tokio::process::Command::new(&binary)
            .arg("serve")
            .arg(&config)
            .kill_on_drop(true)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(self.dir.path().join("registry.log")).unwrap())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("{binary}: {e}; scripts/setup.sh --test installs Debian's docker-registry")
            });
        self.child = Some(child);
        for _ in 0..100 {
            if fetch(self.addr, "/v2/", None, &[]).await.0 == StatusCode::UNAUTHORIZED {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let log = std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default();
        panic!("the registry did not come up on {}:\n{log}", self.addr);
    }

    async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().await.unwrap();
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// A GET to the registry: (status, headers, body).
pub(crate) async fn fetch(
    addr: SocketAddr,
    path: &str,
    credentials: Option<(&str, &str)>,
    accept: &[&str],
) -> (StatusCode, http::HeaderMap, Bytes) {
    use base64::Engine;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let mut request = Request::builder()
        .method(Method::GET)
        .uri(format!("http://{addr}{path}"));
    if let Some((user, password)) = credentials {
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        request = request.header("authorization", format!("Basic {basic}"));
    }
    for media_type in accept {
        request = request.header("accept", *media_type);
    }
    match client.request(request.body(Full::default()).unwrap()).await {
        Ok(response) => {
            let (parts, body) = response.into_parts();
            let body = body.collect().await.unwrap().to_bytes();
            (parts.status, parts.headers, body)
        }
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Default::default(),
            Bytes::new(),
        ),
    }
}

async fn promotion_app(registry: &Registry, workspaces: &Path) -> TestApp {
    let runtime = FakeRuntime {
        workspaces: Some(workspaces.to_path_buf()),
        ..FakeRuntime::plain()
    };
    let url = registry.url();
    TestApp::start_with(Some(Arc::new(runtime)), move |c| {
        c.promotion.registry = url;
        c.promotion.repository_prefix = "sandbox/".into();
        c.promotion.username = REGISTRY_USER.into();
        c.promotion.password = REGISTRY_PASSWORD.into();
        c.promotion.require_approval = true;
    })
    .await
}

async fn admin_token(app: &TestApp) -> String {
    app.admin_token("root").await
}

/// Polls the promotion until `done` holds for it (a minute at most: a bound on a hang, not a
/// speed check).
pub(crate) async fn wait_for(
    app: &TestApp,
    token: &str,
    id: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    for _ in 0..600 {
        let view = app
            .get(&format!("/api/v1/promotions/{id}"), Some(token))
            .await
            .json();
        if done(&view) {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("promotion {id} never got there");
}

async fn promote(
    app: &TestApp,
    token: String,
    session: String,
    body: Value,
) -> crate::common::Response {
    let path = format!("/api/v1/sessions/{session}/promotions");
    call(app, token, path, Some(body)).await
}

async fn call(
    app: &TestApp,
    token: String,
    path: String,
    body: Option<Value>,
) -> crate::common::Response {
    app.call(Method::POST, &path, Some(&token), body).await
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[tokio::test]
async fn an_approved_file_lands_in_the_registry_with_its_provenance() {
    let mut registry = Registry::start().await;
    let workspaces = tempfile::tempdir().unwrap();
    let app = promotion_app(&registry, workspaces.path()).await;
    let admin = admin_token(&app).await;
    let (_, alice) = app.user("alice").await;
    let (_, bob) = app.user("bob").await;
    let session = app.launch_ready(&alice, "jupyterlab").await;

    // More than one of the client's pieces, and not a multiple of them.
    let model: Vec<u8> = (0..700_001u32).map(|i| (i % 251) as u8).collect();
    let ws = workspaces.path().join("alice");
    std::fs::create_dir_all(ws.join("models")).unwrap();
    std::fs::write(ws.join("models/m.onnx"), &model).unwrap();
    std::fs::write(workspaces.path().join("bob-secret"), b"not alice's").unwrap();
    std::os::unix::fs::symlink(workspaces.path().join("bob-secret"), ws.join("sneaky")).unwrap();

    let promote = |token: &str, session: &str, body: Value| {
        promote(&app, token.to_string(), session.to_string(), body)
    };
    let (alice, bob) = (alice.as_str(), bob.as_str());

    // Bad requests are refused with the reason, and leave nothing behind.
    for (body, status, says) in [
        (
            json!({"path": "../bob-secret", "name": "x"}),
            StatusCode::BAD_REQUEST,
            "inside your workspace",
        ),
        (
            json!({"path": "sneaky", "name": "x"}),
            StatusCode::BAD_REQUEST,
            "is a link",
        ),
        (
            json!({"path": "models/none.onnx", "name": "x"}),
            StatusCode::BAD_REQUEST,
            "no file",
        ),
        (
            json!({"path": "models/m.onnx", "name": "Bad Name"}),
            StatusCode::BAD_REQUEST,
            "not a valid artifact name",
        ),
        (
            json!({"path": "models/m.onnx", "name": "m", "tag": "-x"}),
            StatusCode::BAD_REQUEST,
            "not a valid tag",
        ),
        (
            json!({"path": "models/m.onnx"}),
            StatusCode::BAD_REQUEST,
            "malformed JSON",
        ),
    ] {
        let answer = promote(alice, &session, body.clone()).await;
        answer.assert_status(status);
        let message = answer.json()["message"].as_str().unwrap().to_string();
        assert!(message.contains(says), "{body}: {message}");
    }
    // Someone else's session does not exist for bob.
    promote(bob, &session, json!({"path": "models/m.onnx", "name": "m"}))
        .await
        .assert_status(StatusCode::NOT_FOUND);
    let listed = app.get("/api/v1/promotions", Some(alice)).await.json();
    assert_eq!(listed, json!([]), "no bad request left a promotion");
    let staged = app.service.config().data_dir.join("promotions");
    assert!(
        !staged.exists() || std::fs::read_dir(&staged).unwrap().next().is_none(),
        "no bad request left a copy"
    );

    let created = promote(
        alice,
        &session,
        json!({"path": "models/m.onnx", "name": "vision/m", "tag": "v1"}),
    )
    .await;
    created.assert_status(StatusCode::CREATED);
    let view = created.json();
    let id = view["id"].as_str().unwrap().to_string();
    assert_eq!(view["state"], "pending", "it waits for an admin");
    assert_eq!(view["repository"], "sandbox/alice/vision/m");
    assert_eq!(view["sha256"], sha256_hex(&model));
    assert_eq!(view["size_bytes"], model.len());
    assert_eq!(view["media_type"], "application/onnx");

    // What was approved is what is pushed: the file changing afterwards changes nothing.
    std::fs::write(ws.join("models/m.onnx"), b"changed later").unwrap();

    // Neither the owner nor another user may approve; bob cannot even see it.
    let decide = |token: &str, id: &str, decision: &str, body: Option<Value>| {
        let path = format!("/api/v1/admin/promotions/{id}/{decision}");
        call(&app, token.to_string(), path, body)
    };
    decide(alice, &id, "approve", None)
        .await
        .assert_status(StatusCode::FORBIDDEN);
    app.get(&format!("/api/v1/promotions/{id}"), Some(bob))
        .await
        .assert_status(StatusCode::NOT_FOUND);

    let admin = admin.as_str();
    let pending = app
        .get("/api/v1/admin/promotions?filter=pending", Some(admin))
        .await
        .json();
    assert_eq!(pending["total"], 1);
    decide(admin, &id, "approve", None)
        .await
        .assert_status(StatusCode::OK);
    let pushed = wait_for(&app, alice, &id, |v| {
        v["state"] == "pushed" || v["state"] == "failed"
    })
    .await;
    assert_eq!(pushed["state"], "pushed", "{}", pushed["message"]);
    assert_eq!(pushed["decided_by"], "root");
    let digest = pushed["digest"].as_str().unwrap().to_string();
    assert_eq!(
        pushed["reference"],
        format!("{}/sandbox/alice/vision/m@{digest}", registry.addr)
    );
    // Approving twice is refused with where it stands.
    let again = decide(admin, &id, "approve", None).await;
    again.assert_status(StatusCode::CONFLICT);
    assert!(again.json()["message"].as_str().unwrap().contains("pushed"));

    // The registry has it: read back with the registry's own credentials.
    let credentials = Some((REGISTRY_USER, REGISTRY_PASSWORD));
    let oci = "application/vnd.oci.image.manifest.v1+json";
    assert_eq!(
        fetch(
            registry.addr,
            "/v2/sandbox/alice/vision/m/manifests/v1",
            None,
            &[oci]
        )
        .await
        .0,
        StatusCode::UNAUTHORIZED,
        "the registry wants credentials, so the push used ours"
    );
    let (status, headers, body) = fetch(
        registry.addr,
        "/v2/sandbox/alice/vision/m/manifests/v1",
        credentials,
        &[oci],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["docker-content-digest"], digest.as_str());
    assert_eq!(format!("sha256:{}", sha256_hex(&body)), digest);
    let manifest: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        manifest["artifactType"],
        "application/vnd.gpu-sandbox.promotion.v1"
    );
    let annotations = &manifest["annotations"];
    assert_eq!(annotations["dev.gpu-sandbox.promotion.user"], "alice");
    assert_eq!(
        annotations["dev.gpu-sandbox.promotion.session"],
        session.as_str()
    );
    assert_eq!(annotations["dev.gpu-sandbox.promotion.approved-by"], "root");
    assert_eq!(
        annotations["dev.gpu-sandbox.promotion.image"],
        "local/jupyterlab"
    );
    assert_eq!(
        annotations["dev.gpu-sandbox.promotion.sha256"],
        format!("sha256:{}", sha256_hex(&model))
    );
    let layer = &manifest["layers"][0];
    assert_eq!(
        layer["annotations"]["org.opencontainers.image.title"],
        "m.onnx"
    );
    let blob = format!(
        "/v2/sandbox/alice/vision/m/blobs/{}",
        layer["digest"].as_str().unwrap()
    );
    let (status, _, content) = fetch(registry.addr, &blob, credentials, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        content == model,
        "the registry holds the file as it was when asked for"
    );
    assert!(!staged.join(&id).exists(), "the copy is gone once pushed");

    // A rejection, with its reason; it is then final.
    std::fs::write(ws.join("notes.txt"), b"draft").unwrap();
    let second = promote(
        alice,
        &session,
        json!({"path": "notes.txt", "name": "notes"}),
    )
    .await
    .json();
    let second_id = second["id"].as_str().unwrap().to_string();
    assert_eq!(second["tag"], "latest");
    decide(
        admin,
        &second_id,
        "reject",
        Some(json!({"reason": "not for production"})),
    )
    .await
    .assert_status(StatusCode::OK);
    let rejected = app
        .get(&format!("/api/v1/promotions/{second_id}"), Some(alice))
        .await
        .json();
    assert_eq!(rejected["state"], "rejected");
    assert_eq!(rejected["message"], "not for production");
    decide(admin, &second_id, "approve", None)
        .await
        .assert_status(StatusCode::CONFLICT);
    assert!(
        !staged.join(&second_id).exists(),
        "a rejected copy is removed"
    );

    // The registry away: the push fails with the reason; once back, a retry lands it.
    registry.stop().await;
    let third = promote(
        alice,
        &session,
        json!({"path": "notes.txt", "name": "notes", "tag": "v2"}),
    )
    .await
    .json();
    let third_id = third["id"].as_str().unwrap().to_string();
    decide(admin, &third_id, "approve", None)
        .await
        .assert_status(StatusCode::OK);
    let failed = wait_for(&app, alice, &third_id, |v| v["state"] == "failed").await;
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("could not be reached"),
        "{}",
        failed["message"]
    );
    assert!(
        !failed["message"].as_str().unwrap().contains("127.0.0.1"),
        "the connection's details stay in the log: {}",
        failed["message"]
    );
    registry.run().await;
    decide(admin, &third_id, "retry", None)
        .await
        .assert_status(StatusCode::OK);
    let retried = wait_for(&app, alice, &third_id, |v| v["state"] == "pushed").await;
    assert!(retried["message"].is_null());
    let (status, _, _) = fetch(
        registry.addr,
        "/v2/sandbox/alice/notes/manifests/v2",
        credentials,
        &[oci],
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    // Every step is in the audit log.
    let audit = app.store.audit_log(100).await.unwrap();
    for (action, target) in [
        ("promotion.request", &id),
        ("promotion.approve", &id),
        ("promotion.push", &id),
        ("promotion.reject", &second_id),
        ("promotion.fail", &third_id),
        ("promotion.retry", &third_id),
        ("promotion.push", &third_id),
    ] {
        assert!(
            audit
                .iter()
                .any(|e| e.action == action && e.target == format!("promotion:{target}")),
            "{action} on {target} is audited"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn without_a_registry_promotion_says_it_is_not_set_up() {
    let workspaces = tempfile::tempdir().unwrap();
    let runtime = FakeRuntime {
        workspaces: Some(workspaces.path().to_path_buf()),
        ..FakeRuntime::plain()
    };
    let app = TestApp::start(Some(Arc::new(runtime))).await;
    let (_, alice) = app.user("alice").await;
    let session = app.launch_ready(&alice, "marimo").await;
    let answer = app
        .call(
            Method::POST,
            &format!("/api/v1/sessions/{session}/promotions"),
            Some(&alice),
            Some(json!({"path": "a.txt", "name": "a"})),
        )
        .await;
    answer.assert_status(StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        answer.json()["message"]
            .as_str()
            .unwrap()
            .contains("promotion.registry")
    );
    app.stop().await;
}

/// Forty requests at once by one user, against a limit of ten waiting and a disk quota that
/// holds three of the copies: the limits hold however the requests interleave, and the copies
/// of the refused are gone.
#[tokio::test]
async fn promotions_at_once_cannot_pass_the_waiting_limit_or_the_disk_quota() {
    let registry = Registry::start().await;
    let workspaces = tempfile::tempdir().unwrap();
    let app = promotion_app(&registry, workspaces.path()).await;
    let (alice_id, alice) = app.user("alice").await;
    let session = app.launch_ready(&alice, "jupyterlab").await;
    let ws = workspaces.path().join("alice");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("small.bin"), vec![1u8; 1024]).unwrap();
    let requests = (0..40).map(|i| {
        let body = json!({ "path": "small.bin", "name": format!("m{i}") });
        promote(&app, alice.clone(), session.clone(), body)
    });
    let answers = futures_util::future::join_all(requests).await;
    let accepted = answers
        .iter()
        .filter(|a| a.status == StatusCode::CREATED)
        .count();
    assert_eq!(accepted, 10, "ten may wait at once");
    for refused in answers.iter().filter(|a| a.status != StatusCode::CREATED) {
        refused.assert_status(StatusCode::FORBIDDEN);
    }
    let staged = std::fs::read_dir(app.dir.path().join("promotions"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(staged, 10, "only the accepted keep a copy");

    // Copies count against the disk quota: 3 MiB of copies into a 2 MiB quota is refused.
    let (bob_id, bob) = app.user("bob").await;
    let two_mib = app::domain::quota::Overrides {
        max_disk_mib: Some(2),
        ..Default::default()
    };
    app.store.set_quota(&bob_id, &two_mib, None).await.unwrap();
    let bobs = app.launch_ready(&bob, "jupyterlab").await;
    let bob_ws = workspaces.path().join("bob");
    std::fs::create_dir_all(&bob_ws).unwrap();
    std::fs::write(bob_ws.join("big.bin"), vec![2u8; 1024 * 1024 + 1]).unwrap();
    let mut answers = Vec::new();
    for i in 0..3 {
        let body = json!({ "path": "big.bin", "name": format!("b{i}") });
        answers.push(promote(&app, bob.clone(), bobs.clone(), body).await.status);
    }
    assert_eq!(
        answers,
        [
            StatusCode::CREATED,
            StatusCode::FORBIDDEN,
            StatusCode::FORBIDDEN
        ],
        "a 1 MiB copy fits a 2 MiB quota once"
    );
    assert_eq!(
        app.store.promotions_of(&alice_id, 100).await.unwrap().len(),
        10
    );
}
