//! A bounded fuzz of every server function and REST route: valid calls bent out of shape (a
//! field dropped, a value of another type, huge numbers, long or non-UTF-8 text, arrays for
//! objects, bodies cut short) from anonymous callers, users and admins. It fails on a 5xx that
//! is not a documented 503, on internals in an answer, on a panic in the server's code, and on
//! credits that differ from the ledger's. `FUZZ_SEED` and `FUZZ_REQUESTS` change the run.

use crate::common::{FakeRuntime, TestApp};
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use leptos::server_fn::ServerFn;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Panics whose place is the product's code (not a test's assertion), wherever they happen.
static SERVER_PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());
static HOOKED: AtomicUsize = AtomicUsize::new(0);

fn count_server_panics() {
    if HOOKED.fetch_add(1, Ordering::SeqCst) > 0 {
        return;
    }
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let place = info
            .location()
            .map(|l| l.file().to_string())
            .unwrap_or_default();
        if !place.contains("tests/") {
            SERVER_PANICS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!("{info}"));
        }
        previous(info);
    }));
}

/// How a call's arguments travel.
#[derive(Clone, Copy)]
enum Body {
    /// `application/x-www-form-urlencoded`, the pages' default for server functions.
    Form,
    Json,
}

/// One endpoint and a call to it that would be valid.
struct Endpoint {
    method: Method,
    /// `{id}`, `{user}`, `{decision}` are filled in per call.
    path: String,
    body: Body,
    seed: Value,
}

fn server_fn<T: ServerFn>(body: Body, seed: Value) -> Endpoint {
    Endpoint {
        method: Method::POST,
        path: T::PATH.to_string(),
        body,
        seed,
    }
}

fn rest(method: Method, path: &str, seed: Value) -> Endpoint {
    Endpoint {
        method,
        path: format!("/api/v1{path}"),
        body: Body::Json,
        seed,
    }
}

fn endpoints() -> Vec<Endpoint> {
    use Body::{Form, Json};
    use app::api::*;
    let query = json!({ "query": { "page": 1, "per_page": 20, "sort": "name", "q": "" } });
    vec![
        server_fn::<Whoami>(Form, json!({})),
        server_fn::<Login>(
            Form,
            json!({ "name": "fuzz", "password": "password123", "next": "/" }),
        ),
        server_fn::<SingleSignOn>(Form, json!({})),
        server_fn::<Logout>(Form, json!({})),
        server_fn::<LoadDashboard>(Form, json!({})),
        server_fn::<Launch>(
            Form,
            json!({ "editor": "jupyterlab", "slice_mib": 8192, "duration_minutes": 30 }),
        ),
        server_fn::<GetSession>(Form, json!({ "id": "{id}" })),
        server_fn::<LoadSessionReadings>(Form, json!({ "id": "{id}" })),
        server_fn::<StopSession>(Form, json!({ "id": "{id}" })),
        server_fn::<Heartbeat>(Form, json!({ "id": "{id}", "input": true })),
        server_fn::<ExtendSession>(Form, json!({ "id": "{id}", "minutes": 30 })),
        server_fn::<LoadTokens>(Form, json!({})),
        server_fn::<MakeToken>(
            Form,
            json!({ "form": { "label": "x", "days": 3, "scopes": "read", "password": "password123" } }),
        ),
        server_fn::<RevokeToken>(Form, json!({ "id": "{id}" })),
        server_fn::<AdminUsers>(Json, query.clone()),
        server_fn::<AdminSessions>(Json, query.clone()),
        server_fn::<AdminAudit>(Json, query.clone()),
        server_fn::<AdminUsage>(Json, query.clone()),
        server_fn::<AdminUsageDays>(Json, query.clone()),
        server_fn::<LoadAdminPool>(Form, json!({})),
        server_fn::<ChangeUser>(
            Json,
            json!({ "user_id": "{user}", "change": { "role": "user", "locked": false } }),
        ),
        server_fn::<GrantCredits>(
            Form,
            json!({ "user_id": "{user}", "amount": "10", "note": "fuzz" }),
        ),
        server_fn::<AdminStop>(Form, json!({ "id": "{id}" })),
        server_fn::<AskForCredits>(Form, json!({ "amount": "20", "note": "fuzz" })),
        server_fn::<WithdrawCreditRequest>(Form, json!({})),
        server_fn::<DeclineCreditRequest>(Form, json!({ "user_id": "{user}" })),
        server_fn::<AddUser>(
            Json,
            json!({ "account": { "name": "fuzzed", "role": "user", "password": "password123" } }),
        ),
        server_fn::<ResetPassword>(Form, json!({ "user_id": "{user}" })),
        server_fn::<BulkUsers>(
            Form,
            json!({ "csv": "name,role,credits\nfuzzed-csv,user,1\n", "apply": true }),
        ),
        server_fn::<OpenCreditRequests>(Form, json!({})),
        server_fn::<DeleteUser>(Form, json!({ "user_id": "{user}" })),
        server_fn::<UndeleteUser>(Form, json!({ "user_id": "{user}" })),
        server_fn::<ChangePassword>(
            Form,
            json!({ "current": "password123", "new": "password123" }),
        ),
        server_fn::<AdminOpenEditor>(Form, json!({ "id": "{id}" })),
        server_fn::<SetUserQuota>(
            Json,
            json!({ "user_id": "{user}", "overrides": { "max_sessions": 3, "max_gpu_mib": 16384, "max_minutes": 120, "max_disk_mib": null } }),
        ),
        server_fn::<AdminSettings>(Form, json!({})),
        server_fn::<AdminAccess>(Form, json!({})),
        server_fn::<ConfirmAdmin>(Form, json!({ "password": "password123" })),
        server_fn::<PromoteFile>(
            Json,
            json!({ "session_id": "{id}", "request": { "path": "a.ipynb", "name": "team/a", "tag": "v1" } }),
        ),
        server_fn::<MyPromotions>(Form, json!({})),
        server_fn::<AdminPromotions>(Json, query),
        server_fn::<DecidePromotion>(
            Json,
            json!({ "id": "{id}", "decision": "approve", "reason": null }),
        ),
        server_fn::<AdminImages>(Form, json!({})),
        server_fn::<AddImage>(
            Json,
            json!({ "image": { "editor": "jupyterlab", "reference": "registry.example/lab:1", "label": "Lab" } }),
        ),
        server_fn::<SetImageState>(Json, json!({ "id": "{id}", "state": "retired" })),
        server_fn::<AdminDatasets>(Form, json!({})),
        server_fn::<AddDataset>(
            Json,
            json!({ "dataset": { "name": "fuzzed", "path": "/srv", "users": "everyone" } }),
        ),
        server_fn::<ChangeDataset>(
            Json,
            json!({ "id": "{id}", "change": { "users": ["fuzz"] } }),
        ),
        server_fn::<RemoveDataset>(Json, json!({ "id": "{id}" })),
        rest(Method::GET, "/health", json!(null)),
        rest(Method::GET, "/me", json!(null)),
        rest(
            Method::PUT,
            "/me/credit-request",
            json!({ "amount": 20, "note": "fuzz" }),
        ),
        rest(Method::DELETE, "/me/credit-request", json!(null)),
        rest(Method::GET, "/sessions", json!(null)),
        rest(
            Method::POST,
            "/sessions",
            json!({ "editor": "marimo", "slice_mib": 8192, "duration_minutes": 30 }),
        ),
        rest(Method::GET, "/sessions/{id}", json!(null)),
        rest(Method::DELETE, "/sessions/{id}", json!(null)),
        rest(Method::GET, "/sessions/{id}/events", json!(null)),
        rest(Method::GET, "/sessions/{id}/readings", json!(null)),
        rest(
            Method::POST,
            "/sessions/{id}/heartbeat",
            json!({ "input": true }),
        ),
        rest(
            Method::POST,
            "/sessions/{id}/extend",
            json!({ "minutes": 15 }),
        ),
        rest(Method::GET, "/quota", json!(null)),
        rest(Method::GET, "/tokens", json!(null)),
        rest(
            Method::POST,
            "/tokens",
            json!({ "label": "fuzz", "scopes": ["read"], "days": 1 }),
        ),
        rest(Method::DELETE, "/tokens/{id}", json!(null)),
        rest(Method::GET, "/pool", json!(null)),
        rest(
            Method::POST,
            "/sessions/{id}/promotions",
            json!({ "path": "a.ipynb", "name": "team/a", "tag": "v1" }),
        ),
        rest(Method::GET, "/promotions", json!(null)),
        rest(Method::GET, "/images", json!(null)),
        rest(Method::GET, "/workspace/export", json!(null)),
        rest(Method::GET, "/backups", json!(null)),
        rest(Method::POST, "/backups", json!(null)),
        rest(
            Method::POST,
            "/backups/{id}/restore",
            json!({ "path": "a.ipynb" }),
        ),
        rest(Method::GET, "/admin/backups", json!(null)),
        rest(Method::GET, "/admin/users/{user}/backups", json!(null)),
        rest(Method::POST, "/admin/users/{user}/backups", json!(null)),
        rest(
            Method::POST,
            "/admin/users/{user}/backups/{id}/restore",
            json!({}),
        ),
        rest(Method::GET, "/datasets", json!(null)),
        rest(Method::GET, "/admin/datasets", json!(null)),
        rest(
            Method::POST,
            "/admin/datasets",
            json!({ "name": "fuzzed", "path": "/srv", "users": ["fuzz"] }),
        ),
        rest(
            Method::PATCH,
            "/admin/datasets/{id}",
            json!({ "description": "fuzz", "users": "everyone" }),
        ),
        rest(Method::DELETE, "/admin/datasets/{id}", json!(null)),
        rest(Method::GET, "/promotions/{id}", json!(null)),
        rest(Method::GET, "/admin/users", json!(null)),
        rest(Method::GET, "/admin/users.csv", json!(null)),
        rest(Method::GET, "/admin/sessions.csv", json!(null)),
        rest(Method::GET, "/admin/usage.csv", json!(null)),
        rest(Method::GET, "/admin/audit.csv", json!(null)),
        rest(
            Method::POST,
            "/admin/users",
            json!({ "name": "fuzzed-rest", "role": "admin" }),
        ),
        rest(
            Method::POST,
            "/admin/users/bulk",
            json!({ "csv": "fuzzed-bulk,admin,2,a note\n", "dry_run": false }),
        ),
        rest(Method::GET, "/admin/credit-requests", json!(null)),
        rest(Method::DELETE, "/admin/users/{user}", json!(null)),
        rest(Method::POST, "/admin/users/{user}/password", json!(null)),
        rest(Method::POST, "/admin/users/{user}/undelete", json!(null)),
        rest(
            Method::DELETE,
            "/admin/users/{user}/credit-request",
            json!(null),
        ),
        rest(
            Method::PATCH,
            "/admin/users/{user}",
            json!({ "locked": false }),
        ),
        rest(
            Method::POST,
            "/admin/users/{user}/credits",
            json!({ "amount": 5, "note": "fuzz" }),
        ),
        rest(
            Method::PUT,
            "/admin/users/{user}/quota",
            json!({ "max_sessions": 2 }),
        ),
        rest(
            Method::PATCH,
            "/admin/users/{user}/quota",
            json!({ "max_minutes": null }),
        ),
        rest(Method::GET, "/admin/sessions", json!(null)),
        rest(Method::GET, "/admin/sessions/{id}", json!(null)),
        rest(Method::DELETE, "/admin/sessions/{id}", json!(null)),
        rest(
            Method::POST,
            "/admin/sessions/{id}/access",
            json!({ "reason": "fuzz" }),
        ),
        rest(Method::GET, "/admin/pool", json!(null)),
        rest(Method::GET, "/admin/queue", json!(null)),
        rest(Method::GET, "/admin/audit", json!(null)),
        rest(Method::GET, "/admin/usage", json!(null)),
        rest(Method::GET, "/admin/usage/days", json!(null)),
        rest(Method::GET, "/admin/settings", json!(null)),
        rest(Method::GET, "/admin/promotions", json!(null)),
        rest(Method::GET, "/admin/images", json!(null)),
        rest(
            Method::POST,
            "/admin/images",
            json!({ "editor": "marimo", "reference": "registry.example/m:1", "label": "M" }),
        ),
        rest(
            Method::PATCH,
            "/admin/images/{id}",
            json!({ "state": "approved" }),
        ),
        rest(
            Method::POST,
            "/admin/images/{id}/scans",
            json!({ "SchemaVersion": 2, "Results": [] }),
        ),
        rest(
            Method::POST,
            "/admin/promotions/{id}/{decision}",
            json!({ "reason": "fuzz" }),
        ),
    ]
}

/// Every `.route("…")` of the REST routers is in [`endpoints`], so a new route cannot go
/// unfuzzed.
#[test]
fn the_fuzz_covers_every_rest_route() {
    let listed: std::collections::BTreeSet<String> = endpoints()
        .iter()
        .filter_map(|e| e.path.strip_prefix("/api/v1").map(str::to_string))
        .map(|p| p.replace("{user}", "{id}"))
        .collect();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/http/rest");
    let mut missing = Vec::new();
    for (file, prefix) in [("mod.rs", ""), ("admin.rs", "/admin")] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        for piece in text.split(".route(").skip(1) {
            let path = piece.trim_start().trim_start_matches('"');
            let path = &path[..path.find('"').unwrap()];
            // Outside /api/v1, without input: the probes, and /metrics (tests/it/observe.rs).
            if path == "/livez" || path == "/readyz" || path == "/metrics" {
                continue;
            }
            let path = format!("{prefix}{path}");
            if !listed.contains(&path) {
                missing.push(path);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "routes the fuzz does not call: {missing:?}"
    );
}

/// Every server function the pages register is in [`endpoints`].
#[test]
fn the_fuzz_covers_every_server_function() {
    let listed: std::collections::BTreeSet<String> =
        endpoints().into_iter().map(|e| e.path).collect();
    let registered: Vec<String> = leptos::server_fn::axum::server_fn_paths()
        .map(|(path, _)| path.to_string())
        .collect();
    assert!(registered.len() >= 30, "{registered:?}");
    let missing: Vec<_> = registered.iter().filter(|p| !listed.contains(*p)).collect();
    assert!(
        missing.is_empty(),
        "server functions the fuzz does not call: {missing:?}"
    );
}

/// A value of any shape, now and then a huge or odd one.
fn any_value(rng: &mut StdRng, depth: u32) -> Value {
    match rng.gen_range(0..16) {
        0 => Value::Null,
        1 => json!(rng.r#gen::<bool>()),
        2 => json!(rng.gen_range(-3i64..100)),
        3 => json!(u64::MAX),
        4 => json!(i64::MIN),
        5 => json!(1e308),
        6 => json!(-0.5),
        7 => json!("x".repeat(rng.gen_range(0..70_000))),
        8 => json!("../../etc/passwd"),
        9 => json!("ü\u{0}\u{202e}😀%FF%00'\"<script>"),
        10 => json!(""),
        11 if depth < 3 => Value::Array(
            (0..rng.gen_range(0..4))
                .map(|_| any_value(rng, depth + 1))
                .collect(),
        ),
        12 if depth < 3 => {
            let mut object = serde_json::Map::new();
            for _ in 0..rng.gen_range(0..4) {
                object.insert(any_key(rng), any_value(rng, depth + 1));
            }
            Value::Object(object)
        }
        13 => json!("jupyterlab"),
        14 => json!("approve"),
        _ => json!(rng.gen_range(0u64..1 << 40).to_string()),
    }
}

fn any_key(rng: &mut StdRng) -> String {
    const KEYS: &[&str] = &[
        "id",
        "name",
        "password",
        "editor",
        "slice_mib",
        "duration_minutes",
        "minutes",
        "input",
        "label",
        "scopes",
        "days",
        "amount",
        "note",
        "role",
        "locked",
        "query",
        "page",
        "sort",
        "q",
        "state",
        "reference",
        "path",
        "tag",
        "reason",
        "__proto__",
        "",
    ];
    KEYS[rng.gen_range(0..KEYS.len())].to_string()
}

/// The seed bent out of shape, in one of many ways; now and then left valid.
fn mutate(rng: &mut StdRng, seed: &Value) -> Value {
    let mut value = seed.clone();
    for _ in 0..rng.gen_range(0..3) {
        match (rng.gen_range(0..6), &mut value) {
            (0, Value::Object(object)) if !object.is_empty() => {
                let key = object.keys().nth(rng.gen_range(0..object.len())).cloned();
                object.remove(&key.unwrap());
            }
            (1 | 2, Value::Object(object)) if !object.is_empty() => {
                let key = object.keys().nth(rng.gen_range(0..object.len())).cloned();
                let key = key.unwrap();
                let replaced = match &object[&key] {
                    Value::Object(_) if rng.gen_bool(0.5) => mutate(rng, &object[&key]),
                    _ => any_value(rng, 0),
                };
                object.insert(key, replaced);
            }
            (3, Value::Object(object)) => {
                object.insert(any_key(rng), any_value(rng, 0));
            }
            (4, _) => value = any_value(rng, 0),
            _ => {}
        }
    }
    value
}

/// `value` as a form: nested objects as `outer[inner]`, arrays repeated.
fn form_of(value: &Value) -> String {
    fn add(out: &mut Vec<String>, key: &str, value: &Value) {
        match value {
            Value::Object(object) => {
                for (k, v) in object {
                    let k = if key.is_empty() {
                        k.clone()
                    } else {
                        format!("{key}[{k}]")
                    };
                    add(out, &k, v);
                }
            }
            Value::Array(items) => items.iter().for_each(|v| add(out, key, v)),
            Value::String(s) => out.push(format!("{}={}", encode(key), encode(s))),
            Value::Null => out.push(format!("{}=", encode(key))),
            other => out.push(format!("{}={}", encode(key), encode(&other.to_string()))),
        }
    }
    fn encode(text: &str) -> String {
        text.bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect()
    }
    let mut out = Vec::new();
    add(&mut out, "", value);
    out.join("&")
}

/// Fills the path's holes with ids that exist (the caller's, someone else's) or do not.
fn fill(rng: &mut StdRng, path: &str, ids: &[String], users: &[String]) -> String {
    let odd = [
        "",
        "..",
        "%2e%2e%2f",
        "x%00y",
        "%FF%FE",
        "😀",
        "00000000000000000000",
    ];
    let mut pick = |pool: &[String]| match rng.gen_range(0..4) {
        0 => odd[rng.gen_range(0..odd.len())].to_string(),
        1 => "a".repeat(rng.gen_range(1..3000)),
        _ if !pool.is_empty() => pool[rng.gen_range(0..pool.len())].clone(),
        _ => "missing".to_string(),
    };
    let path = path.replace("{id}", &pick(ids));
    let path = path.replace("{user}", &pick(users));
    let decision = ["approve", "reject", "retry", "maybe", ""][rng.gen_range(0..5)];
    path.replace("{decision}", decision)
}

/// What a documented refusal for a 5xx may be: the server or its database unavailable.
const DOCUMENTED_503: &[&str] = &["unavailable", "database_unavailable", "storage_full"];
/// Words that would show internals.
const INTERNALS: &[&str] = &[
    "sqlx",
    "SQLITE",
    "panicked",
    "stack backtrace",
    "src/",
    "database error",
];

#[tokio::test]
async fn every_server_function_and_route_survives_bent_input() {
    count_server_panics();
    let seed: u64 = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20261202);
    let requests: usize = std::env::var("FUZZ_REQUESTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    // Bounded in time too: past the first `AT_LEAST` calls a slow machine runs fewer, and never
    // fails for being slow.
    const AT_LEAST: usize = 200;
    let until = Instant::now() + Duration::from_secs(120);
    let mut rng = StdRng::seed_from_u64(seed);
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (fuzz_id, fuzz_token) = app.user("fuzz").await;
    let (other_id, other_token) = app.user("other").await;
    let admin = app
        .service
        .accounts
        .create_user("boss", Some("password123"), app::model::Role::Admin, None)
        .await
        .unwrap();
    let (admin_token, hash) = server::auth::new_api_token();
    app.store
        .create_token(
            &admin.id,
            &hash,
            "fuzz",
            app::domain::scope::Scopes::ALL,
            None,
        )
        .await
        .unwrap();
    let mine = app.launch_ready(&fuzz_token, "jupyterlab").await;
    let theirs = app.launch_ready(&other_token, "marimo").await;
    let ids = vec![mine, theirs];
    let mut users = vec![fuzz_id.clone(), other_id.clone(), admin.id.clone()];
    // Accounts for the fuzz to reset and delete besides its own.
    for spare in ["spare1", "spare2", "spare3"] {
        users.push(app.user(spare).await.0);
    }
    let endpoints = endpoints();
    let mut cookies = Vec::new();
    let mut sent = 0;
    let mut failures = Vec::new();
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    while sent < requests && (sent < AT_LEAST.min(requests) || Instant::now() < until) {
        // Sign-ins are refreshed now and then: the fuzz calls `logout` too. An account the
        // fuzz deleted or reset keeps its last cookie, which is refused.
        if sent % 200 == 0 {
            for (i, name) in ["fuzz", "boss"].into_iter().enumerate() {
                if let Some(cookie) = app.sign_in(name, "password123").await.session_cookie() {
                    match cookies.get_mut(i) {
                        Some(kept) => *kept = cookie,
                        None => cookies.push(cookie),
                    }
                }
            }
            assert_eq!(cookies.len(), 2, "both sign in at the start");
        }
        let endpoint = &endpoints[rng.gen_range(0..endpoints.len())];
        let path = fill(&mut rng, &endpoint.path, &ids, &users);
        let value = if rng.gen_bool(0.15) {
            endpoint.seed.clone()
        } else {
            mutate(&mut rng, &endpoint.seed)
        };
        let (content_type, mut body) = match (endpoint.body, rng.gen_range(0..10)) {
            (_, 0) => ("application/json", Vec::from(&b"{\"id\": [1, "[..])),
            (_, 1) => ("text/plain", vec![0xff, 0xfe, 0x00, b'{']),
            (Body::Form, _) => ("application/x-www-form-urlencoded", form_of(&value).into()),
            (Body::Json, _) if value.is_null() => ("", Vec::new()),
            (Body::Json, _) => ("application/json", value.to_string().into()),
        };
        if rng.gen_bool(0.05) {
            body.truncate(rng.gen_range(0..body.len().max(1)));
        }
        let is_server_fn = !endpoint.path.starts_with("/api/v1");
        let method = if rng.gen_bool(0.05) {
            [Method::GET, Method::PUT, Method::DELETE][rng.gen_range(0..3)].clone()
        } else {
            endpoint.method.clone()
        };
        let query = match rng.gen_range(0..8) {
            0 => "?page=-1&per_page=99999999999&sort=%FF&q=%00",
            1 => "?page=2&sort=-name",
            _ => "",
        };
        let mut request = Request::builder()
            .method(method.clone())
            .uri(app.url(&format!("{path}{query}")));
        if !content_type.is_empty() {
            request = request.header("content-type", content_type);
        }
        request = match (is_server_fn, rng.gen_range(0..3)) {
            (_, 0) => request,
            (true, who) => {
                request.header("cookie", format!("sandbox_session={}", cookies[who - 1]))
            }
            (false, 1) => request.header("authorization", format!("Bearer {fuzz_token}")),
            (false, _) => request.header("authorization", format!("Bearer {admin_token}")),
        };
        if is_server_fn {
            request = request.header("accept", "application/json");
        }
        let Ok(request) = request.body(Full::new(Bytes::from(body))) else {
            continue;
        };
        // The events stream stays open: only its head is read.
        let answer = if path.ends_with("/events") && method == Method::GET {
            let opened = tokio::time::timeout(Duration::from_secs(10), app.open(request))
                .await
                .expect("the events stream answers");
            crate::common::Response {
                status: opened.status(),
                headers: opened.headers().clone(),
                body: Bytes::new(),
            }
        } else {
            tokio::time::timeout(Duration::from_secs(30), app.send(request))
                .await
                .expect("every call answers")
        };
        sent += 1;
        *statuses.entry(answer.status.as_u16()).or_default() += 1;
        let text = String::from_utf8_lossy(&answer.body);
        let code = serde_json::from_slice::<Value>(&answer.body)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .unwrap_or_default();
        let documented = answer.status == StatusCode::SERVICE_UNAVAILABLE
            && DOCUMENTED_503.contains(&code.as_str());
        if answer.status.is_server_error() && !documented {
            failures.push(format!("{method} {path} -> {}: {text:.300}", answer.status));
        }
        if let Some(word) = INTERNALS.iter().find(|w| text.contains(*w)) {
            failures.push(format!("{method} {path} shows `{word}`: {text:.300}"));
        }
    }
    eprintln!("fuzz: {sent} calls, seed {seed}, answers by status {statuses:?}");
    assert!(
        failures.is_empty(),
        "{} failures: {failures:#?}",
        failures.len()
    );
    let panics = SERVER_PANICS.lock().unwrap().clone();
    assert!(panics.is_empty(), "panics in the server: {panics:#?}");

    // Every balance the API tells is the ledger's sum (the store's, for an account the fuzz
    // deleted); a session that ended released its whole hold and was charged no more than it
    // held; a live one holds what it took.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (user_id, token) in [(&fuzz_id, &fuzz_token), (&other_id, &other_token)] {
        let ledger = app.store.ledger(user_id).await.unwrap();
        let sum: i64 = ledger.iter().map(|entry| entry.amount).sum();
        let me = app.get("/api/v1/me", Some(token)).await;
        let balance = if me.status == StatusCode::OK {
            me.json()["credits"]["balance"].as_i64()
        } else {
            Some(app.store.credits(user_id).await.unwrap().0)
        };
        assert_eq!(balance, Some(sum), "{:?}", me.status);
        assert!(sum >= 0, "a balance below zero: {sum}");
        for session in app.store.sessions_of(user_id, 1000).await.unwrap() {
            let of = |kind: &str| -> i64 {
                ledger
                    .iter()
                    .filter(|e| e.session_id.as_deref() == Some(&session.id) && e.kind == kind)
                    .map(|e| e.amount.abs())
                    .sum()
            };
            let (held, refunded, charged) = (of("hold"), of("refund"), of("charge"));
            if session.state.is_live() {
                assert_eq!(refunded + charged, 0, "{}: settled while live", session.id);
            } else {
                assert_eq!(refunded, held, "{}: the hold released whole", session.id);
                assert!(charged <= held, "{}: charged past its hold", session.id);
            }
        }
    }
    app.stop().await;
}
