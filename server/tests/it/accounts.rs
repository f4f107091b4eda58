//! Accounts an admin manages: added with a password shown once and changed at the first sign-in,
//! reset, deleted (signed out, tokens revoked, sessions ended and refunded, history kept), and a
//! person's own new password; the first run's admin changes the printed one first.

use crate::common::{FakeRuntime, Response, TestApp};
use app::domain::scope::Scopes;
use app::model::Role;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use serde_json::json;

/// An admin with a token of every scope; (id, token).
async fn admin(app: &TestApp, name: &str) -> (String, String) {
    let user = app
        .service
        .accounts
        .create_user(name, Some("password123"), Role::Admin, None)
        .await
        .expect("admin");
    let (token, hash) = server::auth::new_api_token();
    app.store
        .create_token(&user.id, &hash, "test", Scopes::ALL, None)
        .await
        .expect("token");
    (user.id, token)
}

/// A server function called with a sign-in cookie, as the page's script calls it.
pub(crate) async fn server_fn(app: &TestApp, path: &str, cookie: &str, form: &str) -> Response {
    let request = Request::post(app.url(path))
        .header("cookie", format!("sandbox_session={cookie}"))
        .header("accept", "application/json")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Full::new(form.to_string().into()))
        .unwrap();
    app.send(request).await
}

pub(crate) fn path_of<T: leptos::server_fn::ServerFn>() -> &'static str {
    T::PATH
}

fn error_code(response: &Response) -> String {
    response.json()["error"].as_str().unwrap_or_default().into()
}

#[tokio::test]
async fn an_added_user_signs_in_with_the_shown_password_and_must_choose_their_own_first() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (_, root) = admin(&app, "root").await;
    let (_, plain) = app.user("uma").await;

    // Only admins add accounts; bad names and short passwords are refused with the rule.
    let new = json!({ "name": "newton", "password": "first-pass" });
    app.call(
        Method::POST,
        "/api/v1/admin/users",
        Some(&plain),
        Some(new.clone()),
    )
    .await
    .assert_status(StatusCode::FORBIDDEN);
    let bad = app
        .call(
            Method::POST,
            "/api/v1/admin/users",
            Some(&root),
            Some(json!({ "name": "a/b" })),
        )
        .await;
    bad.assert_status(StatusCode::BAD_REQUEST);
    assert!(bad.json()["message"].as_str().unwrap().contains("1 to 64"));
    let short = app
        .call(
            Method::POST,
            "/api/v1/admin/users",
            Some(&root),
            Some(json!({ "name": "x", "password": "short" })),
        )
        .await;
    short.assert_status(StatusCode::BAD_REQUEST);
    assert!(
        short.json()["message"]
            .as_str()
            .unwrap()
            .contains("at least 8")
    );

    let made = app
        .call(
            Method::POST,
            "/api/v1/admin/users",
            Some(&root),
            Some(new.clone()),
        )
        .await;
    made.assert_status(StatusCode::CREATED);
    assert_eq!(made.json()["name"], "newton");
    assert_eq!(made.json()["password"], "first-pass");
    let again = app
        .call(Method::POST, "/api/v1/admin/users", Some(&root), Some(new))
        .await;
    again.assert_status(StatusCode::CONFLICT);

    // Without a password the server makes one, shown once.
    let made = app
        .call(
            Method::POST,
            "/api/v1/admin/users",
            Some(&root),
            Some(json!({ "name": "ada", "role": "admin" })),
        )
        .await;
    made.assert_status(StatusCode::CREATED);
    let password = made.json()["password"].as_str().unwrap().to_string();
    assert!(password.len() >= 12, "{password}");
    let listed = app
        .get("/api/v1/admin/users?q=ada", Some(&root))
        .await
        .json();
    assert_eq!(listed["items"][0]["role"], "admin");
    assert_eq!(listed["items"][0]["must_change_password"], true);

    // Its sign-in works, and everything but the account is refused until it changes.
    let signed_in = app.sign_in("newton", "first-pass").await;
    signed_in.assert_status(StatusCode::OK);
    assert_eq!(signed_in.json()["must_change_password"], true);
    let cookie = signed_in.session_cookie().unwrap();
    let dashboard = server_fn(&app, path_of::<app::api::LoadDashboard>(), &cookie, "").await;
    dashboard.assert_status(StatusCode::FORBIDDEN);
    assert_eq!(error_code(&dashboard), "password_change_required");
    let rest = Request::get(app.url("/api/v1/sessions"))
        .header("cookie", format!("sandbox_session={cookie}"))
        .body(Full::new(bytes::Bytes::new()))
        .unwrap();
    let rest = app.send(rest).await;
    rest.assert_status(StatusCode::FORBIDDEN);
    assert_eq!(error_code(&rest), "password_change_required");
    let launch = server_fn(
        &app,
        path_of::<app::api::Launch>(),
        &cookie,
        "editor=jupyterlab&slice_mib=8192&duration_minutes=30",
    )
    .await;
    assert_eq!(error_code(&launch), "password_change_required");
    let whoami = server_fn(&app, path_of::<app::api::Whoami>(), &cookie, "").await;
    assert_eq!(whoami.json()["must_change_password"], true);
    let me = Request::get(app.url("/api/v1/me"))
        .header("cookie", format!("sandbox_session={cookie}"))
        .body(Full::new(bytes::Bytes::new()))
        .unwrap();
    app.send(me).await.assert_status(StatusCode::OK);

    // The change: the current password confirms it; the rules hold; then all is open.
    let change = path_of::<app::api::ChangePassword>();
    let wrong = server_fn(&app, change, &cookie, "current=guess-guess&new=my-own-pass").await;
    wrong.assert_status(StatusCode::FORBIDDEN);
    assert!(
        wrong.json()["message"]
            .as_str()
            .unwrap()
            .contains("current password")
    );
    let same = server_fn(&app, change, &cookie, "current=first-pass&new=first-pass").await;
    same.assert_status(StatusCode::BAD_REQUEST);
    let short = server_fn(&app, change, &cookie, "current=first-pass&new=short").await;
    short.assert_status(StatusCode::BAD_REQUEST);
    server_fn(&app, change, &cookie, "current=first-pass&new=my-own-pass")
        .await
        .assert_status(StatusCode::OK);
    server_fn(&app, path_of::<app::api::LoadDashboard>(), &cookie, "")
        .await
        .assert_status(StatusCode::OK);
    app.sign_in("newton", "first-pass")
        .await
        .assert_status(StatusCode::UNAUTHORIZED);
    let fresh = app.sign_in("newton", "my-own-pass").await;
    fresh.assert_status(StatusCode::OK);
    assert!(fresh.json().get("must_change_password").is_none());

    let audit = app.get("/api/v1/admin/audit", Some(&root)).await.json();
    let actions: Vec<&str> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|line| line["action"].as_str().unwrap())
        .collect();
    for action in ["user.create", "user.password"] {
        assert!(actions.contains(&action), "{action} in {actions:?}");
    }
    app.stop().await;
}

#[tokio::test]
async fn a_reset_password_ends_the_old_one_and_must_be_changed() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (root_id, root) = admin(&app, "root").await;
    let (uma_id, uma_token) = app.user("uma").await;
    let cookie = app.sign_in_cookie("uma").await;

    app.call(
        Method::POST,
        &format!("/api/v1/admin/users/{root_id}/password"),
        Some(&root),
        None,
    )
    .await
    .assert_status(StatusCode::FORBIDDEN);
    app.call(
        Method::POST,
        "/api/v1/admin/users/nobody/password",
        Some(&root),
        None,
    )
    .await
    .assert_status(StatusCode::NOT_FOUND);
    let reset = app
        .call(
            Method::POST,
            &format!("/api/v1/admin/users/{uma_id}/password"),
            Some(&root),
            None,
        )
        .await;
    reset.assert_status(StatusCode::OK);
    let password = reset.json()["password"].as_str().unwrap().to_string();

    app.sign_in("uma", "password123")
        .await
        .assert_status(StatusCode::UNAUTHORIZED);
    // The open sign-in is held to the change at once; her tokens stay hers.
    let held = server_fn(&app, path_of::<app::api::LoadDashboard>(), &cookie, "").await;
    assert_eq!(error_code(&held), "password_change_required");
    app.get("/api/v1/sessions", Some(&uma_token))
        .await
        .assert_status(StatusCode::OK);
    let signed_in = app.sign_in("uma", &password).await;
    assert_eq!(signed_in.json()["must_change_password"], true);
    let cookie = signed_in.session_cookie().unwrap();
    server_fn(
        &app,
        path_of::<app::api::ChangePassword>(),
        &cookie,
        &format!("current={password}&new=uma-chose-this"),
    )
    .await
    .assert_status(StatusCode::OK);
    server_fn(&app, path_of::<app::api::LoadDashboard>(), &cookie, "")
        .await
        .assert_status(StatusCode::OK);
    app.stop().await;
}

#[tokio::test]
async fn a_deleted_user_is_signed_out_their_sessions_end_refunded_and_their_name_stays_taken() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (root_id, root) = admin(&app, "root").await;
    let (uma_id, uma_token) = app.user("uma").await;
    let cookie = app.sign_in_cookie("uma").await;
    let session = app.launch_ready(&uma_token, "jupyterlab").await;
    let granted = app.store.credits(&uma_id).await.unwrap();

    app.delete(&format!("/api/v1/admin/users/{root_id}"), Some(&root))
        .await
        .assert_status(StatusCode::FORBIDDEN);
    app.delete(&format!("/api/v1/admin/users/{uma_id}"), Some(&uma_token))
        .await
        .assert_status(StatusCode::FORBIDDEN);
    app.delete(&format!("/api/v1/admin/users/{uma_id}"), Some(&root))
        .await
        .assert_status(StatusCode::NO_CONTENT);
    app.delete(&format!("/api/v1/admin/users/{uma_id}"), Some(&root))
        .await
        .assert_status(StatusCode::NOT_FOUND);

    // Signed out everywhere, tokens gone, the session ended by an admin with every unused
    // credit back.
    app.get("/api/v1/sessions", Some(&uma_token))
        .await
        .assert_status(StatusCode::UNAUTHORIZED);
    server_fn(&app, path_of::<app::api::LoadDashboard>(), &cookie, "")
        .await
        .assert_status(StatusCode::UNAUTHORIZED);
    app.sign_in("uma", "password123")
        .await
        .assert_status(StatusCode::UNAUTHORIZED);
    let record = app.record(&session).await;
    assert_eq!(record.state.as_str(), "ended");
    assert_eq!(record.end_reason.map(|r| r.as_str()), Some("admin"));
    let (balance, held) = app.store.credits(&uma_id).await.unwrap();
    assert_eq!(held, 0);
    assert!(balance <= granted.0 + granted.1 && balance > 0, "{balance}");
    let ledger: i64 = app
        .store
        .ledger(&uma_id)
        .await
        .unwrap()
        .iter()
        .map(|e| e.amount)
        .sum();
    assert_eq!(ledger, balance, "the history stays whole");

    // Off the list, not to be unlocked, and its name not to be taken by a newcomer.
    let users = app.get("/api/v1/admin/users", Some(&root)).await.json();
    assert_eq!(users["total"], 1, "{users}");
    app.call(
        Method::PATCH,
        &format!("/api/v1/admin/users/{uma_id}"),
        Some(&root),
        Some(json!({ "locked": false })),
    )
    .await
    .assert_status(StatusCode::NOT_FOUND);
    let taken = app
        .call(
            Method::POST,
            "/api/v1/admin/users",
            Some(&root),
            Some(json!({ "name": "uma" })),
        )
        .await;
    taken.assert_status(StatusCode::CONFLICT);
    assert!(
        taken.json()["message"]
            .as_str()
            .unwrap()
            .contains("deleted")
    );
    let audit = app.get("/api/v1/admin/audit", Some(&root)).await.json();
    assert!(
        audit["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|line| line["action"] == "user.delete"),
        "{audit}"
    );
    app.stop().await;
}

#[tokio::test]
async fn the_first_runs_admin_changes_the_printed_password_at_the_first_sign_in() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let printed = app
        .service
        .accounts
        .ensure_admin()
        .await
        .unwrap()
        .expect("a first admin on an empty database");
    let signed_in = app.sign_in("admin", &printed).await;
    signed_in.assert_status(StatusCode::OK);
    assert_eq!(signed_in.json()["must_change_password"], true);
    let cookie = signed_in.session_cookie().unwrap();
    let access = server_fn(&app, path_of::<app::api::AdminAccess>(), &cookie, "").await;
    assert_eq!(error_code(&access), "password_change_required");
    let tokens = server_fn(&app, path_of::<app::api::LoadTokens>(), &cookie, "").await;
    assert_eq!(error_code(&tokens), "password_change_required");
    server_fn(
        &app,
        path_of::<app::api::ChangePassword>(),
        &cookie,
        &format!("current={printed}&new=the-admins-own"),
    )
    .await
    .assert_status(StatusCode::OK);
    let access = server_fn(&app, path_of::<app::api::AdminAccess>(), &cookie, "").await;
    access.assert_status(StatusCode::OK);
    assert_eq!(access.json()["confirmed"], false);
    app.stop().await;
}

/// The dashboard's charts, credit history, pool and ended sessions come drawn by the server (the
/// browser carries no code for them): drawn by the pages' own components, so a note an admin
/// typed is text there, never markup, and each card of the pool is drawn.
#[tokio::test]
async fn the_dashboards_drawn_parts_show_what_was_typed_as_text() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (_, root) = admin(&app, "root").await;
    let (uma_id, uma) = app.user("uma").await;
    let session = app.launch_ready(&uma, "marimo").await;
    app.delete(&format!("/api/v1/sessions/{session}"), Some(&uma))
        .await
        .assert_status(StatusCode::OK);
    app.wait_for(&uma, &session, |v| v["state"] == "ended")
        .await;
    let note = r#"<img src=x onerror="alert(1)"> & more"#;
    app.call(
        Method::POST,
        &format!("/api/v1/admin/users/{uma_id}/credits"),
        Some(&root),
        Some(json!({ "amount": "3", "note": note })),
    )
    .await
    .assert_status(StatusCode::OK);
    let cookie = app.sign_in_cookie("uma").await;
    let page = server_fn(&app, path_of::<app::api::LoadDashboard>(), &cookie, "").await;
    page.assert_status(StatusCode::OK);
    let page = page.json();
    let history = page["drawn"]["history"].as_str().unwrap();
    assert!(
        history.contains("&lt;img src=x onerror=&quot;alert(1)&quot;&gt; &amp; more")
            || history.contains("&lt;img src=x onerror=\"alert(1)\"&gt; &amp; more"),
        "{history}"
    );
    assert!(!history.contains("<img"), "{history}");
    assert!(history.contains(r#"<tr data-kind="grant">"#), "{history}");
    let spending = page["drawn"]["spending"].as_str().unwrap();
    for part in ["balance-line", "my-usage-days"] {
        assert!(
            spending.contains(&format!(r#"data-testid="{part}""#)),
            "{part}: {spending}"
        );
    }
    let pool = page["drawn"]["pool"].as_str().unwrap();
    let cards = app.store.pool().await.unwrap().len();
    assert!(cards > 0);
    assert_eq!(
        pool.matches(r#"data-testid="gpu""#).count(),
        cards,
        "{pool}"
    );
    assert!(pool.contains(r#"id="pool-title""#), "{pool}");
    // The ended session is a drawn card; no registry here, so no promotions either.
    let recent = page["drawn"]["recent"].as_str().unwrap();
    assert_eq!(
        recent.matches(r#"data-testid="session-card""#).count(),
        1,
        "{recent}"
    );
    assert!(
        recent.contains(&format!(r#"data-session-id="{session}""#)),
        "{recent}"
    );
    assert!(recent.contains("Ended: stopped by you"), "{recent}");
    assert_eq!(page["drawn"]["promotions"], "");
    // What the page's own code reads is still data.
    assert_eq!(page["viewer"]["name"], "uma");
    assert!(page.get("history").is_none() && page.get("gpus").is_none());
}

/// A plain form's post, as a browser sends it before the page's script has loaded.
async fn plain_form_post(app: &TestApp, path: &str, cookie: &str, form: &str) -> Response {
    let request = Request::post(app.url(path))
        .header("cookie", format!("sandbox_session={cookie}"))
        .header("accept", "text/html,application/xhtml+xml")
        .header("content-type", "application/x-www-form-urlencoded")
        .header("referer", app.url("/"))
        .body(Full::new(form.to_string().into()))
        .unwrap();
    app.send(request).await
}

/// Withdrawing an ask and signing out are plain forms on the dashboard (no script of the page's
/// own): each does its work and sends the browser on, to the dashboard and to the sign-in page.
#[tokio::test]
async fn withdrawing_an_ask_and_signing_out_work_as_plain_forms() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    app.user("uma").await;
    let cookie = app.sign_in_cookie("uma").await;
    server_fn(
        &app,
        path_of::<app::api::AskForCredits>(),
        &cookie,
        "amount=5&note=course",
    )
    .await
    .assert_status(StatusCode::OK);
    let me = async || {
        let request = Request::get(app.url("/api/v1/me"))
            .header("cookie", format!("sandbox_session={cookie}"))
            .body(Full::new(bytes::Bytes::new()))
            .unwrap();
        app.send(request).await
    };
    assert_eq!(me().await.json()["credits"]["request"]["amount"], 5_000);

    let withdrawn = plain_form_post(
        &app,
        path_of::<app::api::WithdrawCreditRequest>(),
        &cookie,
        "",
    )
    .await;
    assert!(withdrawn.status.is_redirection(), "{:?}", withdrawn.status);
    assert_eq!(withdrawn.headers["location"], "/");
    assert!(me().await.json()["credits"].get("request").is_none());

    let out = plain_form_post(&app, path_of::<app::api::Logout>(), &cookie, "").await;
    assert!(out.status.is_redirection(), "{:?}", out.status);
    assert_eq!(out.headers["location"], "/login");
    me().await.assert_status(StatusCode::UNAUTHORIZED);
    app.stop().await;
}
