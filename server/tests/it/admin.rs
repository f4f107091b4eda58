//! The admin API (`/api/v1/admin/…`) and the pages' admin server functions, through a real
//! listener: who may use them, and that what they change takes effect at once and is audited.

use crate::common::{FakeRuntime, Response, TestApp};
use app::domain::scope::{Scope, Scopes};
use app::model::Role;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use serde_json::json;

/// An admin with a token of `scopes`; (id, token).
async fn admin(app: &TestApp, name: &str, scopes: Scopes) -> (String, String) {
    let user = app
        .service
        .accounts
        .create_user(name, Some("password123"), Role::Admin, None)
        .await
        .expect("admin");
    let (token, hash) = server::auth::new_api_token();
    app.store
        .create_token(&user.id, &hash, "test", scopes, None)
        .await
        .expect("token");
    (user.id, token)
}

/// A page's server function called with a sign-in cookie, as the page's script calls it: a JSON
/// body, or none.
async fn server_fn(
    app: &TestApp,
    cookie: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> Response {
    let (kind, body) = match body {
        Some(json) => ("application/json", json.to_string()),
        None => ("application/x-www-form-urlencoded", String::new()),
    };
    let request = Request::post(app.url(path))
        .header("cookie", format!("sandbox_session={cookie}"))
        .header("accept", "application/json")
        .header("content-type", kind)
        .body(Full::new(body.into()))
        .unwrap();
    app.send(request).await
}

/// Confirms an admin's sign-in with their password (the test admins' "password123").
async fn confirm_admin(app: &TestApp, cookie: &str, password: &str) -> Response {
    let confirm = <app::api::ConfirmAdmin as leptos::server_fn::ServerFn>::PATH;
    let request = Request::post(app.url(confirm))
        .header("cookie", format!("sandbox_session={cookie}"))
        .header("accept", "application/json")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Full::new(format!("password={password}").into()))
        .unwrap();
    app.send(request).await
}

fn refused(response: &Response, status: StatusCode, says: &str) {
    response.assert_status(status);
    let message = response.json()["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(message.contains(says), "expected '{says}' in: {message}");
}

#[tokio::test]
async fn only_admins_with_the_admin_scope_reach_the_admin_api() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (_, user) = app.user("uma").await;
    let (_, root) = admin(&app, "root", Scopes::ALL).await;
    let (_, reader) = admin(&app, "reader", Scopes::of(&[Scope::Read])).await;
    for path in [
        "/api/v1/admin/users",
        "/api/v1/admin/sessions",
        "/api/v1/admin/pool",
        "/api/v1/admin/queue",
        "/api/v1/admin/audit",
        "/api/v1/admin/usage",
        "/api/v1/admin/settings",
    ] {
        app.get(path, None)
            .await
            .assert_status(StatusCode::UNAUTHORIZED);
        refused(
            &app.get(path, Some(&user)).await,
            StatusCode::FORBIDDEN,
            "admins only",
        );
        refused(
            &app.get(path, Some(&reader)).await,
            StatusCode::FORBIDDEN,
            "`admin`",
        );
        app.get(path, Some(&root))
            .await
            .assert_status(StatusCode::OK);
    }
    let users = app.get("/api/v1/admin/users", Some(&root)).await.json();
    assert_eq!(users["total"], 3);
    let names: Vec<&str> = users["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["reader", "root", "uma"]);
    let settings = app.get("/api/v1/admin/settings", Some(&root)).await.json();
    let titles: Vec<&str> = settings
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["title"].as_str().unwrap())
        .collect();
    assert!(
        titles.contains(&"Default quota") && titles.contains(&"Editors"),
        "{settings}"
    );
    let pool = app.get("/api/v1/admin/pool", Some(&root)).await.json();
    assert_eq!(pool[0]["slots"].as_array().unwrap().len(), 6);

    // A user's credentials never carry `admin`: not this token, written with every scope, nor
    // the ones they make, asked for or by default.
    let me = app.get("/api/v1/me", Some(&user)).await.json();
    assert!(
        !me["scopes"].as_array().unwrap().contains(&json!("admin")),
        "{me}"
    );
    assert!(
        me["scopes"].as_array().unwrap().contains(&json!("tokens")),
        "{me}"
    );
    refused(
        &app.call(
            Method::POST,
            "/api/v1/tokens",
            Some(&user),
            Some(json!({ "label": "sneaky", "scopes": ["admin"] })),
        )
        .await,
        StatusCode::FORBIDDEN,
        "only an admin",
    );
    let made = app
        .call(
            Method::POST,
            "/api/v1/tokens",
            Some(&user),
            Some(json!({ "label": "all" })),
        )
        .await;
    made.assert_status(StatusCode::CREATED);
    let scopes = made.json()["scopes"].clone();
    assert!(
        !scopes.as_array().unwrap().contains(&json!("admin")),
        "{scopes}"
    );
    let made = app
        .call(
            Method::POST,
            "/api/v1/tokens",
            Some(&root),
            Some(json!({ "label": "all" })),
        )
        .await;
    let scopes = made.json()["scopes"].clone();
    assert!(
        !scopes.as_array().unwrap().contains(&json!("admin")),
        "only when asked: {scopes}"
    );
    let made = app
        .call(
            Method::POST,
            "/api/v1/tokens",
            Some(&root),
            Some(json!({ "label": "admin", "scopes": ["admin", "read"] })),
        )
        .await;
    made.assert_status(StatusCode::CREATED);
    let admin_token = made.json()["token"].as_str().unwrap().to_string();
    app.get("/api/v1/admin/users", Some(&admin_token))
        .await
        .assert_status(StatusCode::OK);

    // Bad tables are clear 400s.
    for (query, says) in [
        ("page=0", "`page` starts at 1"),
        ("per_page=1000", "`per_page`"),
        ("sort=password_hash", "cannot sort by `password_hash`"),
        ("filter=root", "unknown filter `root`"),
        ("page=abc", "query string is malformed"),
        ("colour=red", "query string is malformed"),
    ] {
        let answer = app
            .get(&format!("/api/v1/admin/users?{query}"), Some(&root))
            .await;
        refused(&answer, StatusCode::BAD_REQUEST, says);
    }
    for (query, says) in [
        ("filter=8d", "usage covers 1d, 7d, 30d or 90d"),
        ("sort=name,cost", "cannot sort by `name,cost`"),
    ] {
        let answer = app
            .get(&format!("/api/v1/admin/usage?{query}"), Some(&root))
            .await;
        refused(&answer, StatusCode::BAD_REQUEST, says);
    }
    app.get("/api/v1/admin/nothing", Some(&root))
        .await
        .assert_status(StatusCode::NOT_FOUND);
    app.stop().await;
}

#[tokio::test]
async fn admins_grant_lock_promote_and_stop_and_each_is_audited() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (alice_id, alice) = app.user("alice").await;
    let (root_id, root) = admin(&app, "root", Scopes::ALL).await;
    let user_path = format!("/api/v1/admin/users/{alice_id}");
    let credits_path = format!("{user_path}/credits");

    // Credits: granted, and visible to her at once; taking back stops at zero.
    let before = app.get("/api/v1/me", Some(&alice)).await.json()["credits"]["balance"]
        .as_i64()
        .unwrap();
    let granted = app
        .call(
            Method::POST,
            &credits_path,
            Some(&root),
            Some(json!({ "amount": "2.5", "note": "hackathon" })),
        )
        .await;
    granted.assert_status(StatusCode::OK);
    assert_eq!(granted.json()["balance"], before + 2_500);
    let me = app.get("/api/v1/me", Some(&alice)).await.json();
    assert_eq!(me["credits"]["balance"], before + 2_500);
    let number = app
        .call(
            Method::POST,
            &credits_path,
            Some(&root),
            Some(json!({ "amount": -1 })),
        )
        .await;
    assert_eq!(number.json()["balance"], before + 1_500);
    refused(
        &app.call(
            Method::POST,
            &credits_path,
            Some(&root),
            Some(json!({ "amount": "-1000000" })),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "more than the balance",
    );
    refused(
        &app.call(
            Method::POST,
            &credits_path,
            Some(&root),
            Some(json!({ "amount": "2000000" })),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "at most 1000000 credits",
    );
    for body in [
        json!({ "amount": "lots" }),
        json!({ "amount": "0" }),
        json!({ "amount": true }),
    ] {
        app.call(Method::POST, &credits_path, Some(&root), Some(body))
            .await
            .assert_status(StatusCode::BAD_REQUEST);
    }
    app.call(
        Method::POST,
        "/api/v1/admin/users/nobody/credits",
        Some(&root),
        Some(json!({ "amount": "1" })),
    )
    .await
    .assert_status(StatusCode::NOT_FOUND);
    refused(
        &app.call(
            Method::POST,
            &credits_path,
            Some(&alice),
            Some(json!({ "amount": "5" })),
        )
        .await,
        StatusCode::FORBIDDEN,
        "admins only",
    );
    let balance = app.get("/api/v1/me", Some(&alice)).await.json()["credits"]["balance"].clone();
    assert_eq!(balance, before + 1_500, "refused grants wrote nothing");

    // Lock: her token stops working at once; unlock: it works again.
    let patch = async |path: &str, token: &str, body: serde_json::Value| {
        app.call(Method::PATCH, path, Some(token), Some(body)).await
    };
    patch(&user_path, &root, json!({ "locked": true }))
        .await
        .assert_status(StatusCode::NO_CONTENT);
    app.get("/api/v1/me", Some(&alice))
        .await
        .assert_status(StatusCode::UNAUTHORIZED);
    patch(&user_path, &root, json!({ "locked": false }))
        .await
        .assert_status(StatusCode::NO_CONTENT);
    app.get("/api/v1/me", Some(&alice))
        .await
        .assert_status(StatusCode::OK);

    // Promotion takes effect on her next request; an admin cannot demote or lock themselves.
    patch(&user_path, &root, json!({ "role": "admin" }))
        .await
        .assert_status(StatusCode::NO_CONTENT);
    app.get("/api/v1/admin/users", Some(&alice))
        .await
        .assert_status(StatusCode::OK);
    let root_path = format!("/api/v1/admin/users/{root_id}");
    for body in [json!({ "role": "user" }), json!({ "locked": true })] {
        refused(
            &patch(&root_path, &root, body).await,
            StatusCode::FORBIDDEN,
            "ask another admin",
        );
    }
    patch(&user_path, &root, json!({ "role": "user" }))
        .await
        .assert_status(StatusCode::NO_CONTENT);
    refused(
        &app.get("/api/v1/admin/users", Some(&alice)).await,
        StatusCode::FORBIDDEN,
        "admins only",
    );
    refused(
        &patch(&user_path, &root, json!({})).await,
        StatusCode::BAD_REQUEST,
        "say what to change",
    );
    refused(
        &patch(&user_path, &root, json!({ "role": "owner" })).await,
        StatusCode::BAD_REQUEST,
        "malformed JSON",
    );
    patch(
        "/api/v1/admin/users/nobody",
        &root,
        json!({ "locked": true }),
    )
    .await
    .assert_status(StatusCode::NOT_FOUND);

    // Stop: anyone's session ends with the reason `admin`, and her view says so.
    let id = app.launch_ready(&alice, "jupyterlab").await;
    let live = app
        .get("/api/v1/admin/sessions?filter=live", Some(&root))
        .await
        .json();
    assert_eq!(live["total"], 1);
    assert_eq!(live["items"][0]["user_name"], "alice");
    refused(
        &app.delete(&format!("/api/v1/admin/sessions/{id}"), Some(&alice))
            .await,
        StatusCode::FORBIDDEN,
        "admins only",
    );
    let stopped = app
        .delete(&format!("/api/v1/admin/sessions/{id}"), Some(&root))
        .await;
    stopped.assert_status(StatusCode::OK);
    assert_eq!(stopped.json()["state"], "ended");
    assert_eq!(stopped.json()["end_reason"], "admin");
    let hers = app
        .get(&format!("/api/v1/sessions/{id}"), Some(&alice))
        .await
        .json();
    assert_eq!(hers["state"], "ended");
    assert_eq!(hers["end_reason"], "admin");
    assert!(hers["detail"].as_str().unwrap().contains("root"), "{hers}");
    let live = app
        .get("/api/v1/admin/sessions?filter=live", Some(&root))
        .await
        .json();
    assert_eq!(live["total"], 0);
    app.delete("/api/v1/admin/sessions/nope", Some(&root))
        .await
        .assert_status(StatusCode::NOT_FOUND);
    // Her session counts in the usage of the last day, with what it was charged.
    let usage = app
        .get("/api/v1/admin/usage?filter=1d", Some(&root))
        .await
        .json();
    assert_eq!(usage["total"], 1);
    assert_eq!(usage["items"][0]["user_name"], "alice");
    assert_eq!(usage["items"][0]["sessions"], 1);
    assert!(
        usage["items"][0]["charged"].as_i64().unwrap() > 0,
        "{usage}"
    );

    // Quota: zero sessions stops her launches; an empty body gives her the defaults back.
    let quota_path = format!("{user_path}/quota");
    let put = async |path: &str, token: &str, body: serde_json::Value| {
        app.call(Method::PUT, path, Some(token), Some(body)).await
    };
    let none = put(
        &quota_path,
        &root,
        json!({ "max_sessions": 0, "max_minutes": 45 }),
    )
    .await;
    none.assert_status(StatusCode::OK);
    assert_eq!(none.json()["max_sessions"], 0);
    assert_eq!(none.json()["max_minutes"], 45);
    let hers = app.get("/api/v1/quota", Some(&alice)).await.json();
    assert_eq!(hers["limits"]["max_sessions"], 0);
    refused(
        &app.launch(&alice, "jupyterlab", 30).await,
        StatusCode::FORBIDDEN,
        "limit is 0 concurrent sessions",
    );
    let back = put(&quota_path, &root, json!({})).await;
    back.assert_status(StatusCode::OK);
    let defaults = app.service.config().default_limits();
    assert_eq!(back.json()["max_sessions"], defaults.max_sessions);
    for (body, says) in [
        (json!({ "max_minutes": 0 }), "at least 1 minute"),
        (json!({ "max_gpu_mib": 1u64 << 40 }), "at most"),
        (json!({ "max_sessions": -1 }), "malformed JSON"),
        (json!({ "sessions": 1 }), "malformed JSON"),
    ] {
        refused(
            &put(&quota_path, &root, body).await,
            StatusCode::BAD_REQUEST,
            says,
        );
    }
    // An array is not an object (serde would read `[]` as every field left out): refused, and
    // her override stays.
    put(&quota_path, &root, json!({ "max_minutes": 45 }))
        .await
        .assert_status(StatusCode::OK);
    refused(
        &put(&quota_path, &root, json!([])).await,
        StatusCode::BAD_REQUEST,
        "JSON object",
    );
    let hers = app.get("/api/v1/quota", Some(&alice)).await.json();
    assert_eq!(hers["limits"]["max_minutes"], 45, "{hers}");
    put(&quota_path, &root, json!({}))
        .await
        .assert_status(StatusCode::OK);
    // A path that is not even text is a JSON 400 too.
    let odd = app
        .call(
            Method::POST,
            "/api/v1/admin/promotions/%FF/approve",
            Some(&root),
            None,
        )
        .await;
    refused(&odd, StatusCode::BAD_REQUEST, "path is not valid");
    refused(
        &put(&quota_path, &alice, json!({})).await,
        StatusCode::FORBIDDEN,
        "admins only",
    );
    put("/api/v1/admin/users/nobody/quota", &root, json!({}))
        .await
        .assert_status(StatusCode::NOT_FOUND);

    // The audit log has each change with the admin who made it, newest first.
    let log = app
        .get("/api/v1/admin/audit?per_page=100", Some(&root))
        .await
        .json();
    let by_root: Vec<(String, String)> = log["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["actor"] == "root")
        .map(|l| {
            (
                l["action"].as_str().unwrap().to_string(),
                l["target_name"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let expected = [
        ("quota.set", "alice"),
        ("quota.set", "alice"),
        ("quota.set", "alice"),
        ("quota.set", "alice"),
        ("session.stop", "alice"),
        ("user.role", "alice"),
        ("user.role", "alice"),
        ("user.unlock", "alice"),
        ("user.lock", "alice"),
        ("credits.grant", "alice"),
        ("credits.grant", "alice"),
        // The test's own set-up.
        ("token.create", "root"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(a, t)| (a.to_string(), t.to_string()))
        .collect();
    assert_eq!(by_root, expected);
    let grants = app
        .get("/api/v1/admin/audit?q=credits.grant", Some(&root))
        .await
        .json();
    assert_eq!(grants["total"], 2);
    app.stop().await;
}

#[tokio::test]
async fn a_user_asks_for_credits_and_a_grant_or_a_decline_answers_it() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (alice_id, alice) = app.user("alice").await;
    let (_, root) = admin(&app, "root", Scopes::ALL).await;
    let ask = "/api/v1/me/credit-request";

    // Bad asks are refused in words and leave nothing open.
    for (body, says) in [
        (json!({ "amount": "-3" }), "positive"),
        (json!({ "amount": "lots" }), "not an amount"),
        (
            json!({ "amount": 5, "note": "x".repeat(201) }),
            "at most 200",
        ),
    ] {
        refused(
            &app.call(Method::PUT, ask, Some(&alice), Some(body)).await,
            StatusCode::BAD_REQUEST,
            says,
        );
    }
    assert!(app.get("/api/v1/me", Some(&alice)).await.json()["credits"]["request"].is_null());

    // An ask, then a second that replaces it; admins find it by the `asking` filter.
    app.call(
        Method::PUT,
        ask,
        Some(&alice),
        Some(json!({ "amount": 10 })),
    )
    .await
    .assert_status(StatusCode::OK);
    let open = app
        .call(
            Method::PUT,
            ask,
            Some(&alice),
            Some(json!({ "amount": "20", "note": "course project" })),
        )
        .await;
    open.assert_status(StatusCode::OK);
    assert_eq!(open.json()["amount"], 20_000);
    let me = app.get("/api/v1/me", Some(&alice)).await.json();
    assert_eq!(me["credits"]["request"]["note"], "course project");
    let asking = app
        .get("/api/v1/admin/users?filter=asking", Some(&root))
        .await
        .json();
    assert_eq!(asking["total"], 1);
    assert_eq!(asking["items"][0]["name"], "alice");
    assert_eq!(asking["items"][0]["credit_request"]["amount"], 20_000);

    // A grant of any amount answers it.
    app.call(
        Method::POST,
        &format!("/api/v1/admin/users/{alice_id}/credits"),
        Some(&root),
        Some(json!({ "amount": "15", "note": "for the course" })),
    )
    .await
    .assert_status(StatusCode::OK);
    assert!(app.get("/api/v1/me", Some(&alice)).await.json()["credits"]["request"].is_null());
    let asking = app
        .get("/api/v1/admin/users?filter=asking", Some(&root))
        .await
        .json();
    assert_eq!(asking["total"], 0);

    // Declined: closed without credits; declining again says there is nothing open.
    app.call(Method::PUT, ask, Some(&alice), Some(json!({ "amount": 5 })))
        .await
        .assert_status(StatusCode::OK);
    let decline = format!("/api/v1/admin/users/{alice_id}/credit-request");
    refused(
        &app.call(Method::DELETE, &decline, Some(&alice), None).await,
        StatusCode::FORBIDDEN,
        "admins only",
    );
    app.call(Method::DELETE, &decline, Some(&root), None)
        .await
        .assert_status(StatusCode::NO_CONTENT);
    refused(
        &app.call(Method::DELETE, &decline, Some(&root), None).await,
        StatusCode::CONFLICT,
        "no open ask",
    );
    assert!(app.get("/api/v1/me", Some(&alice)).await.json()["credits"]["request"].is_null());

    // Withdrawn by her.
    app.call(Method::PUT, ask, Some(&alice), Some(json!({ "amount": 5 })))
        .await
        .assert_status(StatusCode::OK);
    app.call(Method::DELETE, ask, Some(&alice), None)
        .await
        .assert_status(StatusCode::NO_CONTENT);
    assert!(app.get("/api/v1/me", Some(&alice)).await.json()["credits"]["request"].is_null());

    let log = app
        .get(
            "/api/v1/admin/audit?q=credits.ask&per_page=100",
            Some(&root),
        )
        .await
        .json();
    let actions: Vec<&str> = log["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["action"].as_str().unwrap())
        .collect();
    for action in [
        "credits.ask",
        "credits.ask_declined",
        "credits.ask_withdrawn",
    ] {
        assert!(actions.contains(&action), "{action} in {actions:?}");
    }
    app.stop().await;
}

#[tokio::test]
async fn a_quota_patch_changes_only_the_overrides_it_names() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (alice_id, alice) = app.user("alice").await;
    let (_, root) = admin(&app, "root", Scopes::ALL).await;
    let path = format!("/api/v1/admin/users/{alice_id}/quota");
    let call = async |method: Method, token: &str, body: serde_json::Value| {
        app.call(method, &path, Some(token), Some(body)).await
    };
    let defaults = app.service.config().default_limits();
    call(
        Method::PUT,
        &root,
        json!({ "max_sessions": 1, "max_minutes": 45 }),
    )
    .await
    .assert_status(StatusCode::OK);

    let patched = call(Method::PATCH, &root, json!({ "max_gpu_mib": 16384 })).await;
    patched.assert_status(StatusCode::OK);
    let limits = patched.json();
    assert_eq!(
        (
            &limits["max_sessions"],
            &limits["max_minutes"],
            &limits["max_gpu_mib"]
        ),
        (&json!(1), &json!(45), &json!(16384)),
        "the others are kept"
    );
    let patched = call(Method::PATCH, &root, json!({ "max_minutes": null })).await;
    patched.assert_status(StatusCode::OK);
    assert_eq!(patched.json()["max_minutes"], defaults.max_minutes);
    assert_eq!(patched.json()["max_sessions"], 1);
    let hers = app.get("/api/v1/quota", Some(&alice)).await.json();
    assert_eq!(hers["limits"]["max_gpu_mib"], 16384);

    // Bad input changes nothing.
    for (body, says) in [
        (json!({ "max_minutes": 0 }), "at least 1 minute"),
        (json!({ "max_minute": 5 }), "malformed JSON"),
        (json!({ "max_sessions": "two" }), "malformed JSON"),
    ] {
        refused(
            &call(Method::PATCH, &root, body).await,
            StatusCode::BAD_REQUEST,
            says,
        );
    }
    refused(
        &call(Method::PATCH, &alice, json!({ "max_sessions": 9 })).await,
        StatusCode::FORBIDDEN,
        "admins only",
    );
    let after = app.store.quota_overrides(&alice_id).await.unwrap();
    assert_eq!(
        (after.max_sessions, after.max_gpu_mib, after.max_minutes),
        (Some(1), Some(16384), None)
    );
    // A change that names nothing changes nothing, and is not audited as a change.
    let audited = async || {
        app.get("/api/v1/admin/audit?q=quota.set", Some(&root))
            .await
            .json()["total"]
            .clone()
    };
    assert_eq!(audited().await, 3, "one PUT, two PATCHes");
    // In words, as the limits read (no program's notation).
    let newest = app
        .get("/api/v1/admin/audit?q=quota.set", Some(&root))
        .await
        .json()["items"][0]["detail"]
        .clone();
    assert_eq!(
        newest,
        "sessions 1 · GPU memory 16 GB · minutes per session default · workspace default"
    );
    let unchanged = call(Method::PATCH, &root, json!({})).await;
    unchanged.assert_status(StatusCode::OK);
    assert_eq!(unchanged.json()["max_gpu_mib"], 16384);
    assert_eq!(audited().await, 3);
    app.call(
        Method::PATCH,
        "/api/v1/admin/users/nobody/quota",
        Some(&root),
        Some(json!({})),
    )
    .await
    .assert_status(StatusCode::NOT_FOUND);
    app.stop().await;
}

/// Limits nobody could launch with are refused through both doors, naming what the server
/// offers (the test pool: one 48 GB card in 8 GB slices; sessions of 15 to 480 minutes).
#[tokio::test]
async fn a_quota_nobody_can_launch_with_is_refused_naming_the_bounds() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (alice_id, _) = app.user("alice").await;
    let (_, root) = admin(&app, "root", Scopes::ALL).await;
    let path = format!("/api/v1/admin/users/{alice_id}/quota");
    let cases = [
        (json!({ "max_gpu_mib": 1000 }), "smallest slice, 8 GB"),
        (json!({ "max_minutes": 5 }), "shortest session, 15 minutes"),
        (
            json!({ "max_minutes": 100_000 }),
            "longest session, 480 minutes",
        ),
        (json!({ "max_disk_mib": 1 }), "too small for an editor"),
    ];
    for method in [Method::PUT, Method::PATCH] {
        for (body, says) in &cases {
            let answer = app
                .call(method.clone(), &path, Some(&root), Some(body.clone()))
                .await;
            refused(&answer, StatusCode::BAD_REQUEST, says);
        }
    }
    // The page's server function says the same.
    let cookie = app.sign_in_cookie("root").await;
    confirm_admin(&app, &cookie, "password123")
        .await
        .assert_status(StatusCode::OK);
    let set = <app::api::SetUserQuota as leptos::server_fn::ServerFn>::PATH;
    let tiny = json!({ "user_id": alice_id, "overrides": { "max_gpu_mib": 1000 } });
    refused(
        &server_fn(&app, &cookie, set, Some(tiny)).await,
        StatusCode::BAD_REQUEST,
        "smallest slice, 8 GB",
    );
    let fine =
        json!({ "user_id": alice_id, "overrides": { "max_gpu_mib": 8192, "max_minutes": 15 } });
    server_fn(&app, &cookie, set, Some(fine))
        .await
        .assert_status(StatusCode::OK);
    // Nothing refused was kept.
    let kept = app.store.quota_overrides(&alice_id).await.unwrap();
    assert_eq!(
        (kept.max_gpu_mib, kept.max_minutes, kept.max_disk_mib),
        (Some(8192), Some(15), None)
    );
    app.stop().await;
}

#[tokio::test]
async fn the_pages_admin_functions_refuse_a_user_and_wait_for_an_admins_password() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    app.user("uma").await;
    admin(&app, "root", Scopes::ALL).await;
    let uma = app.sign_in_cookie("uma").await;
    let root = app.sign_in_cookie("root").await;
    let call = async |cookie: &str, path: &str, body: Option<serde_json::Value>| {
        server_fn(&app, cookie, path, body).await
    };
    let rest = async |cookie: &str, path: &str| {
        let request = Request::get(app.url(path))
            .header("cookie", format!("sandbox_session={cookie}"))
            .body(Full::new(bytes::Bytes::new()))
            .unwrap();
        app.send(request).await
    };
    let pool = <app::api::LoadAdminPool as leptos::server_fn::ServerFn>::PATH;
    let users = <app::api::AdminUsers as leptos::server_fn::ServerFn>::PATH;
    let access = <app::api::AdminAccess as leptos::server_fn::ServerFn>::PATH;
    let everyone = Some(json!({ "query": {} }));

    refused(
        &call(&uma, pool, None).await,
        StatusCode::FORBIDDEN,
        "admins only",
    );
    refused(
        &call(&uma, users, everyone.clone()).await,
        StatusCode::FORBIDDEN,
        "admins only",
    );
    refused(
        &call(&uma, access, None).await,
        StatusCode::FORBIDDEN,
        "admins only",
    );

    // An admin's cookie alone is not enough: a script in an editor's page sends it too.
    let open = call(&root, access, None).await;
    open.assert_status(StatusCode::OK);
    assert_eq!(open.json()["confirmed"], false);
    assert_eq!(open.json()["confirmation"], "Password");
    refused(
        &call(&root, users, everyone.clone()).await,
        StatusCode::FORBIDDEN,
        "password",
    );
    refused(
        &rest(&root, "/api/v1/admin/users").await,
        StatusCode::FORBIDDEN,
        "password",
    );
    let me = rest(&root, "/api/v1/me").await.json();
    assert!(
        !me["scopes"].as_array().unwrap().contains(&json!("admin")),
        "{me}"
    );

    let form = "application/x-www-form-urlencoded";
    refused(
        &confirm_admin(&app, &root, "guess").await,
        StatusCode::FORBIDDEN,
        "not your password",
    );
    refused(
        &call(&root, users, everyone.clone()).await,
        StatusCode::FORBIDDEN,
        "password",
    );
    confirm_admin(&app, &root, "password123")
        .await
        .assert_status(StatusCode::OK);

    assert_eq!(call(&root, access, None).await.json()["confirmed"], true);
    let answer = call(&root, users, everyone.clone()).await;
    answer.assert_status(StatusCode::OK);
    assert_eq!(answer.json()["total"], 2);
    call(&root, pool, None).await.assert_status(StatusCode::OK);
    rest(&root, "/api/v1/admin/users")
        .await
        .assert_status(StatusCode::OK);
    // A new sign-in in this browser starts without the confirmation.
    let again = Request::post(app.url(<app::api::Login as leptos::server_fn::ServerFn>::PATH))
        .header("cookie", format!("sandbox_session={root}"))
        .header("accept", "application/json")
        .header("content-type", form)
        .body(Full::new("name=root&password=password123".into()))
        .unwrap();
    let again = app.send(again).await;
    again.assert_status(StatusCode::OK);
    let cycled = again.session_cookie().unwrap();
    assert_ne!(cycled, root);
    assert_eq!(call(&cycled, access, None).await.json()["confirmed"], false);
    // Another browser of the same admin has not confirmed.
    let elsewhere = app.sign_in_cookie("root").await;
    refused(
        &call(&elsewhere, users, everyone).await,
        StatusCode::FORBIDDEN,
        "password",
    );
    app.stop().await;
}

/// Guessing the password at the admin confirmation (as a script in an editor's page could, with
/// the cookie) is held to the sign-in's limit.
#[tokio::test]
async fn guesses_at_the_admin_confirmation_are_limited_like_sign_ins() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    admin(&app, "root", Scopes::ALL).await;
    let root = app.sign_in_cookie("root").await;
    let confirm = async |password: &str| confirm_admin(&app, &root, password).await;
    for guess in 0..5 {
        refused(
            &confirm(&format!("guess{guess}")).await,
            StatusCode::FORBIDDEN,
            "not your password",
        );
    }
    refused(
        &confirm("password123").await,
        StatusCode::TOO_MANY_REQUESTS,
        "Try again in",
    );
    let log = app
        .store
        .audit_log(20)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.action == "confirm.failed")
        .count();
    assert_eq!(log, 5);
    app.stop().await;
}

/// An admin reaches a user's editor only by asking for it: the request is audited, the grant is
/// theirs alone, ends by itself, and needs a running editor.
#[tokio::test]
async fn an_admin_enters_a_users_editor_only_by_an_audited_grant() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (alice_id, alice) = app.user("alice").await;
    let (_, bob) = app.user("bob").await;
    let (root_id, root) = admin(&app, "root", Scopes::ALL).await;
    let (_, other_admin) = admin(&app, "ada", Scopes::ALL).await;
    let (_, no_admin_scope) = admin(&app, "eve", Scopes::ALL.without(Scope::Admin)).await;
    let id = app.launch_ready(&alice, "jupyterlab").await;
    let editor = format!("/s/{id}/api/status");
    let enter = format!("/api/v1/admin/sessions/{id}/access");

    // Being an admin is not enough: without a grant, the session does not exist for them.
    app.get(&editor, Some(&root))
        .await
        .assert_status(StatusCode::NOT_FOUND);
    for (who, token) in [
        ("a user", &bob),
        ("an admin's token without `admin`", &no_admin_scope),
    ] {
        let refused = app.call(Method::POST, &enter, Some(token), None).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{who}");
    }

    let granted = app.call(Method::POST, &enter, Some(&root), None).await;
    granted.assert_status(StatusCode::OK);
    let access = granted.json();
    assert_eq!(access["url"], format!("/s/{id}/"));
    assert!(
        access["entry_url"].is_null(),
        "no entry origin, no link: {access}"
    );
    let until = access["expires_at_ms"].as_i64().unwrap();
    let minutes = (until - server::store::now_ms()) / 60_000;
    assert!((14..=15).contains(&minutes), "{minutes} minutes");
    app.get(&editor, Some(&root))
        .await
        .assert_status(StatusCode::OK);
    // Its owner is told who may reach it, and until when.
    let seen = app
        .get(&format!("/api/v1/sessions/{id}"), Some(&alice))
        .await
        .json();
    assert_eq!(seen["admin_access"]["admin"], "root", "{seen}");
    assert_eq!(seen["admin_access"]["until_ms"], until);
    // By the token only: root's browser sign-in, confirmed as an admin, stays out, since the
    // user's page would run in it with root's cookie.
    let cookie = app.sign_in_cookie("root").await;
    let confirm =
        Request::post(app.url(<app::api::ConfirmAdmin as leptos::server_fn::ServerFn>::PATH))
            .header("cookie", format!("sandbox_session={cookie}"))
            .header("accept", "application/json")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Full::new("password=password123".into()))
            .unwrap();
    app.send(confirm).await.assert_status(StatusCode::OK);
    let grant_by_cookie = Request::post(app.url(&enter))
        .header("cookie", format!("sandbox_session={cookie}"))
        .body(Full::default())
        .unwrap();
    app.send(grant_by_cookie)
        .await
        .assert_status(StatusCode::OK);
    let by_cookie = Request::get(app.url(&editor))
        .header("cookie", format!("sandbox_session={cookie}"))
        .body(Full::default())
        .unwrap();
    app.send(by_cookie)
        .await
        .assert_status(StatusCode::NOT_FOUND);
    // The grant is root's alone.
    app.get(&editor, Some(&other_admin))
        .await
        .assert_status(StatusCode::NOT_FOUND);
    let audit = app.store.audit_log(20).await.unwrap();
    let entry = audit
        .iter()
        .find(|e| e.action == "session.access")
        .expect("the entry is audited");
    assert_eq!(entry.actor_id.as_deref(), Some(root_id.as_str()));
    assert_eq!(entry.target, format!("user:{alice_id}"));
    assert!(entry.detail.contains(&id), "{}", entry.detail);

    // It ends by itself.
    app.sql(
        "UPDATE editor_grants SET expires_at = 0 WHERE session_id = $1",
        &id,
    )
    .await;
    app.get(&editor, Some(&root))
        .await
        .assert_status(StatusCode::NOT_FOUND);
    let seen = app
        .get(&format!("/api/v1/sessions/{id}"), Some(&alice))
        .await
        .json();
    assert!(seen.get("admin_access").is_none(), "{seen}");

    // A session that is not running has no editor to enter.
    app.delete(&format!("/api/v1/sessions/{id}"), Some(&alice))
        .await
        .assert_status(StatusCode::OK);
    app.wait_for(&alice, &id, |v| v["state"] == "ended").await;
    let ended = app.call(Method::POST, &enter, Some(&root), None).await;
    refused(&ended, StatusCode::CONFLICT, "not running");
    app.call(
        Method::POST,
        "/api/v1/admin/sessions/nope/access",
        Some(&root),
        None,
    )
    .await
    .assert_status(StatusCode::NOT_FOUND);
}

/// With an entry origin, "Enter editor" gives a one-time link there: it becomes a cookie of that
/// origin, for that session's path, that only the proxy there honours; our sign-in counts for
/// nothing there, the entry cookie for nothing here, and the editor sees neither.
#[tokio::test]
async fn an_admins_browser_enters_a_users_editor_on_the_entry_origin_only() {
    const ENTRY: &str = "enter.test";
    let app = TestApp::start_with(Some(FakeRuntime::new()), |config| {
        config.proxy.entry_origin = Some(format!("http://{ENTRY}"));
    })
    .await;
    let (_, alice) = app.user("alice").await;
    let (_, root) = admin(&app, "root", Scopes::ALL).await;
    let id = app.launch_ready(&alice, "jupyterlab").await;
    let editor = format!("/s/{id}/api/status");
    let get = |path: &str, host: Option<&str>, cookie: Option<String>| {
        let mut request = Request::get(app.url(path));
        if let Some(host) = host {
            request = request.header("host", host);
        }
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        app.send(request.body(Full::default()).unwrap())
    };
    let enter = |token: String| {
        let app = &app;
        let path = format!("/api/v1/admin/sessions/{id}/access");
        async move {
            let granted = app.call(Method::POST, &path, Some(&token), None).await;
            granted.assert_status(StatusCode::OK);
            let link = granted.json()["entry_url"].as_str().unwrap().to_string();
            link.strip_prefix(&format!("http://{ENTRY}"))
                .expect("a link on the entry origin")
                .to_string()
        }
    };
    let link = enter(root.clone()).await;
    assert!(link.starts_with("/enter/"), "{link}");

    // Our own origin does not redeem it.
    let here = get(&link, None, None).await;
    assert!(
        here.headers.get("set-cookie").is_none(),
        "{:?}",
        here.headers
    );
    assert_ne!(here.status, StatusCode::SEE_OTHER);

    let entered = get(&link, Some(ENTRY), None).await;
    entered.assert_status(StatusCode::SEE_OTHER);
    assert_eq!(entered.headers["location"], format!("/s/{id}/"));
    let set_cookie = entered.headers["set-cookie"].to_str().unwrap().to_string();
    for part in [
        format!("Path=/s/{id}/"),
        "HttpOnly".into(),
        "SameSite=Lax".into(),
    ] {
        assert!(set_cookie.contains(&part), "{set_cookie}");
    }
    assert!(
        !set_cookie.to_ascii_lowercase().contains("domain="),
        "{set_cookie}"
    );
    let cookie = set_cookie.split(';').next().unwrap().to_string();
    assert!(cookie.starts_with("sandbox_enter=gsb_"), "{cookie}");
    // Once only.
    let says = |answer: &Response, text: &str| {
        answer.assert_status(StatusCode::FORBIDDEN);
        let body = String::from_utf8_lossy(&answer.body);
        assert!(body.contains(text), "expected '{text}' in: {body}");
    };
    says(&get(&link, Some(ENTRY), None).await, "used up");

    let inside = get(&editor, Some(ENTRY), Some(cookie.clone())).await;
    inside.assert_status(StatusCode::OK);
    let seen = inside.json();
    assert_eq!(
        seen["cookies"], "",
        "the editor sees none of our cookies: {seen}"
    );
    // The entry cookie is nothing on our origin, and nothing for another path there.
    get(&editor, None, Some(cookie.clone()))
        .await
        .assert_status(StatusCode::UNAUTHORIZED);
    // Our sign-in is nothing on the entry origin, and nothing but editors answers there.
    let sign_in = format!("sandbox_session={}", app.sign_in_cookie("root").await);
    get(&editor, Some(ENTRY), Some(sign_in.clone()))
        .await
        .assert_status(StatusCode::UNAUTHORIZED);
    get("/api/v1/sessions", Some(ENTRY), Some(sign_in))
        .await
        .assert_status(StatusCode::NOT_FOUND);
    get("/admin", Some(ENTRY), None)
        .await
        .assert_status(StatusCode::NOT_FOUND);

    // A link not used within its minute is spent.
    let late = enter(root.clone()).await;
    app.sql(
        "UPDATE entry_tickets SET expires_at = 0 WHERE admin_id <> $1",
        "",
    )
    .await;
    says(&get(&late, Some(ENTRY), None).await, "expired");
    // When the grant ends, so does the cookie.
    app.sql(
        "UPDATE editor_grants SET expires_at = 0 WHERE session_id = $1",
        &id,
    )
    .await;
    get(&editor, Some(ENTRY), Some(cookie))
        .await
        .assert_status(StatusCode::NOT_FOUND);
}

/// Admins keep the list of approved images; each change is audited; bad ones are refused.
#[tokio::test]
async fn admins_add_and_retire_approved_images() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (root_id, root) = admin(&app, "root", Scopes::ALL).await;
    let (_, alice) = app.user("alice").await;
    let add = |token: String, body: serde_json::Value| {
        let app = &app;
        async move {
            app.call(
                Method::POST,
                "/api/v1/admin/images",
                Some(&token),
                Some(body),
            )
            .await
        }
    };
    let good =
        json!({"editor": "marimo", "reference": "ghcr.io/team/marimo:0.9", "label": "marimo 0.9"});
    add(alice.clone(), good.clone())
        .await
        .assert_status(StatusCode::FORBIDDEN);
    for (body, status, says) in [
        (
            json!({"editor": "emacs", "reference": "a/b:1", "label": "x"}),
            StatusCode::BAD_REQUEST,
            "unknown editor",
        ),
        (
            json!({"editor": "marimo", "reference": "Bad/Ref", "label": "x"}),
            StatusCode::BAD_REQUEST,
            "not an image reference",
        ),
        (
            json!({"editor": "marimo", "reference": "a/b:1", "label": ""}),
            StatusCode::BAD_REQUEST,
            "label",
        ),
        (
            json!({"editor": "marimo", "reference": server::config::kube::KubeImages::default().marimo, "label": "x"}),
            StatusCode::CONFLICT,
            "configured default",
        ),
        (
            json!({"editor": "marimo", "reference": "a/b:1"}),
            StatusCode::BAD_REQUEST,
            "malformed JSON",
        ),
    ] {
        refused(&add(root.clone(), body).await, status, says);
    }
    let added = add(root.clone(), good.clone()).await;
    added.assert_status(StatusCode::CREATED);
    let image = added.json();
    assert_eq!(image["state"], "approved");
    assert_eq!(image["pinned"], false);
    assert_eq!(image["added_by"], "root");
    refused(
        &add(root.clone(), good).await,
        StatusCode::CONFLICT,
        "already exists",
    );

    let listed = app.get("/api/v1/admin/images", Some(&root)).await.json();
    let listed = listed.as_array().unwrap();
    assert_eq!(
        listed.len(),
        1,
        "the new one only: the configured defaults are the kube runtime's, which this is not"
    );
    assert_eq!(listed[0]["id"], image["id"]);

    let id = image["id"].as_str().unwrap();
    let retire = app
        .call(
            Method::PATCH,
            &format!("/api/v1/admin/images/{id}"),
            Some(&root),
            Some(json!({"state": "retired"})),
        )
        .await;
    retire.assert_status(StatusCode::OK);
    assert_eq!(retire.json()["state"], "retired");
    app.call(
        Method::PATCH,
        "/api/v1/admin/images/nope",
        Some(&root),
        Some(json!({"state": "retired"})),
    )
    .await
    .assert_status(StatusCode::NOT_FOUND);

    // This server runs local processes: no image to offer, and none may be named.
    assert_eq!(
        app.get("/api/v1/images", Some(&alice)).await.json(),
        json!([])
    );
    let named = app
        .call(
            Method::POST,
            "/api/v1/sessions",
            Some(&alice),
            Some(
                json!({"editor": "marimo", "slice_mib": 8192, "duration_minutes": 30, "image": id}),
            ),
        )
        .await;
    refused(&named, StatusCode::BAD_REQUEST, "no image to choose");

    let audit = app.store.audit_log(20).await.unwrap();
    for action in ["image.add", "image.retire"] {
        assert!(
            audit.iter().any(|e| e.action == action
                && e.actor_id.as_deref() == Some(root_id.as_str())
                && e.target == format!("image:{id}")),
            "{action} is audited"
        );
    }
}

/// A failed sign-in as a name with a newline and a direction override is recorded as an
/// unknown name, escaped: it cannot read as an admin's entry. A failed sign-in of a real user
/// still names them.
#[tokio::test]
async fn a_forged_name_in_a_failed_sign_in_is_recorded_as_unknown_and_escaped() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (_, root) = admin(&app, "root", Scopes::ALL).await;
    app.user("bob").await;
    let forged = "mallory\n2026-12-02 root role.change user:bob admin\u{202e}";
    let encoded: String = forged.bytes().map(|b| format!("%{b:02X}")).collect();
    app.sign_in(&encoded, "wrong-password").await;
    app.sign_in("bob", "wrong-password").await;
    let log = app
        .get("/api/v1/admin/audit?q=login.failed", Some(&root))
        .await
        .json();
    let targets: Vec<String> = log["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["action"] == "login.failed")
        .map(|l| l["target"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(targets.len(), 2, "{log}");
    let unknown = targets
        .iter()
        .find(|t| t.starts_with("unknown:"))
        .expect("unknown");
    assert!(
        !unknown.contains('\n') && !unknown.contains('\u{202e}'),
        "{unknown:?}"
    );
    assert!(unknown.contains("mallory\\u{a}"), "{unknown:?}");
    assert!(targets.contains(&"user:bob".to_string()), "{targets:?}");
    app.stop().await;
}

/// A scanner's report in one of the two formats, about `artifact`, made `days_ago`.
pub fn report(format: &str, artifact: &str, days_ago: i64) -> String {
    let created = app::domain::dates::rfc3339(server::util::now_ms() - days_ago * 86_400_000);
    let template = match format {
        "trivy" => include_str!("scans/trivy.json"),
        _ => include_str!("scans/sarif.json"),
    };
    template
        .replace("@ARTIFACT@", artifact)
        .replace("@CREATED@", &created)
}

pub async fn post_report(app: &TestApp, token: &str, image_id: &str, body: String) -> Response {
    let request = Request::builder()
        .method(Method::POST)
        .uri(app.url(&format!("/api/v1/admin/images/{image_id}/scans")))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Full::new(body.into()))
        .unwrap();
    app.send(request).await
}

/// An image's newest scan decides, by the configured policy, whether it may be approved: no
/// report, an old one, or a critical finding with a fix hold it back, with the reason; reports
/// about another image, in another format or malformed are refused and change nothing.
#[tokio::test]
async fn an_images_scan_decides_whether_it_may_be_approved() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (_, root) = admin(&app, "root", Scopes::ALL).await;
    let (_, alice) = app.user("alice").await;
    let reference = "registry.example.com/ml/torch-notebook:2.5";
    let added = app
        .call(
            Method::POST,
            "/api/v1/admin/images",
            Some(&root),
            Some(json!({"editor": "jupyterlab", "reference": reference, "label": "PyTorch 2.5"})),
        )
        .await;
    added.assert_status(StatusCode::CREATED);
    let image = added.json();
    let id = image["id"].as_str().unwrap().to_string();
    assert!(image["scan"].is_null());
    assert!(
        image["blocked"]
            .as_str()
            .unwrap()
            .contains("no scan report yet"),
        "{image}"
    );

    // Who may post, and what is not a report.
    post_report(&app, &alice, &id, report("trivy", reference, 1))
        .await
        .assert_status(StatusCode::FORBIDDEN);
    post_report(&app, &root, "nope", report("trivy", reference, 1))
        .await
        .assert_status(StatusCode::NOT_FOUND);
    for (body, says) in [
        ("{\"bomFormat\": \"CycloneDX\"}".to_string(), "Trivy's JSON"),
        ("not json".to_string(), "not JSON"),
        (
            "{\"version\": \"2.0.0\", \"runs\": []}".to_string(),
            "version 2.1.0",
        ),
        (
            report("trivy", "registry.example.com/ml/other:1", 1),
            "not `registry.example.com/ml/torch-notebook:2.5`",
        ),
        (report("sarif", reference, -3), "more than a day from now"),
    ] {
        refused(
            &post_report(&app, &root, &id, body).await,
            StatusCode::BAD_REQUEST,
            says,
        );
    }

    // Trivy's JSON with a critical finding that has a fix: held back, with the counts.
    let posted = post_report(&app, &root, &id, report("trivy", reference, 2)).await;
    posted.assert_status(StatusCode::CREATED);
    let image = posted.json();
    let scan = &image["scan"];
    assert_eq!(scan["format"], "trivy");
    assert_eq!(scan["scanner"], "Trivy 0.57.1");
    assert_eq!(
        scan["found"],
        json!({"critical": 1, "high": 1, "medium": 1, "low": 1, "unknown": 0})
    );
    assert_eq!(scan["fixable"]["critical"], 1);
    assert_eq!(scan["fixable"]["low"], 0);
    assert_eq!(scan["top"][0]["id"], "CVE-2024-45491");
    assert_eq!(scan["posted_by"], "root");
    assert!(
        image["blocked"]
            .as_str()
            .unwrap()
            .starts_with("1 critical finding has a fix available"),
        "{image}"
    );
    // Retired, it may not be approved again while the policy says no.
    app.call(
        Method::PATCH,
        &format!("/api/v1/admin/images/{id}"),
        Some(&root),
        Some(json!({"state": "retired"})),
    )
    .await
    .assert_status(StatusCode::OK);
    let image_path = format!("/api/v1/admin/images/{id}");
    let approve = || {
        app.call(
            Method::PATCH,
            &image_path,
            Some(&root),
            Some(json!({"state": "approved"})),
        )
    };
    refused(
        &approve().await,
        StatusCode::CONFLICT,
        "PyTorch 2.5 may not be approved: 1 critical finding has a fix",
    );

    // A report older than the policy's 30 days counts no more.
    post_report(&app, &root, &id, report("sarif", reference, 40))
        .await
        .assert_status(StatusCode::CREATED);
    refused(&approve().await, StatusCode::CONFLICT, "40 days old");

    // SARIF of the rebuilt image (a low and a medium finding): approved.
    let posted = post_report(&app, &root, &id, report("sarif", reference, 0)).await;
    posted.assert_status(StatusCode::CREATED);
    let image = posted.json();
    assert_eq!(image["scan"]["format"], "sarif");
    assert_eq!(
        image["scan"]["found"],
        json!({"critical": 0, "high": 0, "medium": 1, "low": 1, "unknown": 0})
    );
    assert_eq!(image["scan"]["fixable"]["medium"], 1);
    assert!(image["blocked"].is_null(), "{image}");
    let approved = approve().await;
    approved.assert_status(StatusCode::OK);
    assert_eq!(approved.json()["state"], "approved");

    // The admin list shows the newest scan; each post is in the audit log.
    let listed = app.get("/api/v1/admin/images", Some(&root)).await.json();
    assert_eq!(listed[0]["scan"]["format"], "sarif");
    let audit = app
        .get("/api/v1/admin/audit?q=image.scan", Some(&root))
        .await
        .json();
    assert_eq!(audit["total"], 3, "{audit}");
    app.stop().await;
}

#[tokio::test]
async fn admin_tables_download_as_csv_with_the_listings_filters_and_no_formulas() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (alice_id, alice) = app.user("alice").await;
    let (_, root) = admin(&app, "root", Scopes::ALL).await;
    // A note that a spreadsheet would run as a formula.
    app.call(
        Method::POST,
        &format!("/api/v1/admin/users/{alice_id}/credits"),
        Some(&root),
        Some(json!({ "amount": 5, "note": "=HYPERLINK(\"http://evil\")" })),
    )
    .await
    .assert_status(StatusCode::OK);
    for table in ["users", "sessions", "usage", "audit"] {
        refused(
            &app.get(&format!("/api/v1/admin/{table}.csv"), Some(&alice))
                .await,
            StatusCode::FORBIDDEN,
            "admins only",
        );
    }
    let users = app.get("/api/v1/admin/users.csv", Some(&root)).await;
    users.assert_status(StatusCode::OK);
    assert_eq!(users.headers["content-type"], "text/csv; charset=utf-8");
    assert!(
        users.headers["content-disposition"]
            .to_str()
            .unwrap()
            .contains("users.csv")
    );
    let mut read = csv::Reader::from_reader(users.body.as_ref());
    assert_eq!(&read.headers().unwrap()[0], "name");
    let rows: Vec<csv::StringRecord> = read.records().map(Result::unwrap).collect();
    let names: Vec<&str> = rows.iter().map(|r| &r[0]).collect();
    assert!(
        names.contains(&"alice") && names.contains(&"root"),
        "{names:?}"
    );
    let alice_row = rows.iter().find(|r| &r[0] == "alice").unwrap();
    let balance = app.get("/api/v1/me", Some(&alice)).await.json()["credits"]["balance"]
        .as_i64()
        .unwrap();
    assert_eq!(&alice_row[4], app::domain::credits::format(balance));

    // The listing's filter applies: nobody is locked.
    let locked = app
        .get("/api/v1/admin/users.csv?filter=locked", Some(&root))
        .await;
    assert_eq!(
        csv::Reader::from_reader(locked.body.as_ref())
            .records()
            .count(),
        0
    );
    app.get("/api/v1/admin/users.csv?filter=nonsense", Some(&root))
        .await
        .assert_status(StatusCode::BAD_REQUEST);

    // The grant's note is in the audit download, written so that it is not a formula.
    let audit = app
        .get("/api/v1/admin/audit.csv?q=credits.grant", Some(&root))
        .await;
    audit.assert_status(StatusCode::OK);
    let details: Vec<String> = csv::Reader::from_reader(audit.body.as_ref())
        .records()
        .map(|r| r.unwrap()[4].to_string())
        .collect();
    assert!(
        details.iter().any(|d| d.contains("HYPERLINK")),
        "{details:?}"
    );
    assert!(
        details.iter().all(|d| !d.starts_with(['=', '+', '-', '@'])),
        "{details:?}"
    );
    app.stop().await;
}

/// A CSV file adds and grants every one of its lines or none of them, naming every bad line;
/// only an admin may send one, at either door, and each line is audited as its single twin.
#[tokio::test]
async fn a_csv_file_adds_and_grants_every_line_or_none() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (alice_id, alice) = app.user("alice").await;
    let (_, root) = admin(&app, "root", Scopes::ALL).await;
    let bulk = "/api/v1/admin/users/bulk";
    let total = async || {
        app.get("/api/v1/admin/users", Some(&root)).await.json()["total"]
            .as_i64()
            .unwrap()
    };
    let balance = async |id: &str| app.store.credits(id).await.unwrap().0;
    let before = total().await;
    let alice_had = balance(&alice_id).await;

    // A user is refused at the REST door and at the pages' door.
    let zed = Some(json!({ "csv": "zed,,5\n" }));
    refused(
        &app.call(Method::POST, bulk, Some(&alice), zed).await,
        StatusCode::FORBIDDEN,
        "admins only",
    );
    let cookie = app.sign_in_cookie("alice").await;
    let page_door =
        Request::post(app.url(<app::api::BulkUsers as leptos::server_fn::ServerFn>::PATH))
            .header("cookie", format!("sandbox_session={cookie}"))
            .header("accept", "application/json")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Full::new("csv=zed%2C%2C5%0A&apply=true".into()))
            .unwrap();
    refused(
        &app.send(page_door).await,
        StatusCode::FORBIDDEN,
        "admins only",
    );
    assert!(app.store.user_by_name("zed").await.unwrap().is_none());

    // One bad line and nothing is added or granted; every bad line is named, by number.
    let bad = "name,role,credits,note\nbea,user,10\ncal,boss,5\ndan,,lots\nalice,,1\n";
    let dry = app
        .call(
            Method::POST,
            bulk,
            Some(&root),
            Some(json!({ "csv": bad, "dry_run": true })),
        )
        .await;
    dry.assert_status(StatusCode::OK);
    let lines: Vec<i64> = dry.json()["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["line"].as_i64().unwrap())
        .collect();
    assert_eq!(lines, [3, 4], "{}", dry.json());
    let applied = app
        .call(Method::POST, bulk, Some(&root), Some(json!({ "csv": bad })))
        .await;
    refused(
        &applied,
        StatusCode::BAD_REQUEST,
        "line 3: the role is `boss`",
    );
    refused(&applied, StatusCode::BAD_REQUEST, "line 4: the credits");
    refused(&applied, StatusCode::BAD_REQUEST, "nothing was added");
    assert_eq!(total().await, before);
    assert!(app.store.user_by_name("bea").await.unwrap().is_none());
    assert_eq!(balance(&alice_id).await, alice_had);

    // A good file: its dry run plans every line and changes nothing; applied, all of it.
    let good = "name,role,credits,note\nbea,user,10,course\ncal,admin\nalice,,2.5,extra\n";
    let plan = app
        .call(
            Method::POST,
            bulk,
            Some(&root),
            Some(json!({ "csv": good, "dry_run": true })),
        )
        .await;
    plan.assert_status(StatusCode::OK);
    let plan = plan.json();
    assert_eq!(plan["planned"].as_array().unwrap().len(), 3, "{plan}");
    assert_eq!(plan["planned"][2]["action"], "grant");
    assert_eq!(plan["applied"], false);
    assert_eq!(total().await, before);
    let done = app
        .call(
            Method::POST,
            bulk,
            Some(&root),
            Some(json!({ "csv": good })),
        )
        .await;
    done.assert_status(StatusCode::CREATED);
    let done = done.json();
    let passwords = done["passwords"].as_array().unwrap();
    assert_eq!(
        passwords
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["bea", "cal"]
    );
    assert_eq!(total().await, before + 2);
    let bea = app.store.user_by_name("bea").await.unwrap().unwrap();
    let cal = app.store.user_by_name("cal").await.unwrap().unwrap();
    assert_eq!((bea.role, cal.role), (Role::User, Role::Admin));
    assert!(bea.must_change_password, "a password an admin made");
    assert_eq!(balance(&bea.id).await, balance(&cal.id).await + 10_000);
    assert_eq!(balance(&alice_id).await, alice_had + 2_500);
    // The password shown is the one that signs in.
    let password = passwords[0]["password"].as_str().unwrap();
    app.sign_in("bea", password)
        .await
        .assert_status(StatusCode::OK);

    // Audited as single adds and grants are, each with its line.
    let log = app
        .get("/api/v1/admin/audit?q=CSV%20line&per_page=100", Some(&root))
        .await
        .json();
    let mut actions: Vec<String> = log["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            format!(
                "{} {}",
                l["action"].as_str().unwrap(),
                l["detail"].as_str().unwrap()
            )
        })
        .collect();
    actions.sort();
    assert_eq!(actions.len(), 4, "{actions:?}");
    assert!(
        actions[0].starts_with(
            "credits.grant +10 credits: granted by root (CSV file): course (CSV line 2)"
        ),
        "{actions:?}"
    );
    assert!(
        actions[3].starts_with("user.create user (CSV line 2)"),
        "{actions:?}"
    );

    // The same file again: the accounts exist now, and cal's line grants nothing.
    let again = app
        .call(
            Method::POST,
            bulk,
            Some(&root),
            Some(json!({ "csv": good })),
        )
        .await;
    refused(&again, StatusCode::BAD_REQUEST, "line 3: cal exists");
    assert_eq!(balance(&alice_id).await, alice_had + 2_500);

    // The Users tab's count of open asks.
    let asks = "/api/v1/admin/credit-requests";
    assert_eq!(app.get(asks, Some(&root)).await.json()["open"], 0);
    app.call(
        Method::PUT,
        "/api/v1/me/credit-request",
        Some(&alice),
        Some(json!({ "amount": 5 })),
    )
    .await
    .assert_status(StatusCode::OK);
    assert_eq!(app.get(asks, Some(&root)).await.json()["open"], 1);
    refused(
        &app.get(asks, Some(&alice)).await,
        StatusCode::FORBIDDEN,
        "admins only",
    );
    app.stop().await;
}

/// An ended session's page offers the same launch again only to who could make it now: not
/// under a quota of no sessions (how an admin stops someone's launches).
#[tokio::test]
async fn an_ended_session_is_offered_again_only_to_who_could_launch_it() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (ada_id, ada) = app.user("ada").await;
    let (_, root) = admin(&app, "root", Scopes::ALL).await;
    let id = app.launch_ready(&ada, "jupyterlab").await;
    app.delete(&format!("/api/v1/admin/sessions/{id}"), Some(&root))
        .await
        .assert_status(StatusCode::OK);
    let path = format!("/api/v1/sessions/{id}");
    let ended = app.wait_for(&ada, &id, |v| v["state"] == "ended").await;
    assert_eq!(ended["end_reason"], "admin");
    let view = app.get(&path, Some(&ada)).await.json();
    assert!(view.get("launch_refused").is_none(), "{view}");

    app.call(
        Method::PATCH,
        &format!("/api/v1/admin/users/{ada_id}/quota"),
        Some(&root),
        Some(json!({ "max_sessions": 0 })),
    )
    .await
    .assert_status(StatusCode::OK);
    let view = app.get(&path, Some(&ada)).await.json();
    let why = view["launch_refused"].as_str().unwrap_or_default();
    assert!(why.contains("quota allows no sessions"), "{view}");
    app.stop().await;
}

/// An admin's confirmation lasts its minutes by the server's own clock (the store's, which the
/// rules read), not the machine's: moved past it, the admin functions ask for the password again.
#[tokio::test]
async fn an_admin_confirmation_runs_out_by_the_servers_clock() {
    let app = TestApp::start_clocked(Some(FakeRuntime::new()), |_| {}).await;
    admin(&app, "root", Scopes::ALL).await;
    let root = app.sign_in_cookie("root").await;
    let users = <app::api::AdminUsers as leptos::server_fn::ServerFn>::PATH;
    let everyone = Some(json!({ "query": {} }));
    confirm_admin(&app, &root, "password123")
        .await
        .assert_status(StatusCode::OK);
    server_fn(&app, &root, users, everyone.clone())
        .await
        .assert_status(StatusCode::OK);

    let lasts = server::auth::ADMIN_CONFIRMATION_MS as u64;
    app.advance(std::time::Duration::from_millis(lasts - 60_000));
    server_fn(&app, &root, users, everyone.clone())
        .await
        .assert_status(StatusCode::OK);
    // The credential is cached for a few seconds: the clock is read at each request anyway.
    app.advance(std::time::Duration::from_secs(61));
    refused(
        &server_fn(&app, &root, users, everyone).await,
        StatusCode::FORBIDDEN,
        "password",
    );
    app.stop().await;
}
