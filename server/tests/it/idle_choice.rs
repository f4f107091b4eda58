//! A person's own idle timeout, within the bounds an admin set (`idle.min_timeout_seconds`,
//! `idle.max_timeout_seconds`), on a clock the test moves: a longer choice keeps a quiet
//! session the default would have ended, and a choice outside the bounds is refused with them.

use crate::common::{FakeRuntime, TestApp};
use http::{Method, StatusCode};
use serde_json::{Value, json};
use std::time::Duration;

const MINUTE_MS: i64 = 60_000;

async fn launch(app: &TestApp, token: &str, idle_minutes: Option<u32>) -> crate::common::Response {
    let mut body = json!({ "editor": "jupyterlab", "slice_mib": 8192, "duration_minutes": 240 });
    if let Some(minutes) = idle_minutes {
        body["idle_minutes"] = json!(minutes);
    }
    app.call(Method::POST, "/api/v1/sessions", Some(token), Some(body))
        .await
}

/// A JupyterLab of 8 GB for four hours, ready; `idle_minutes` its person's own timeout.
pub(crate) async fn ready(
    app: &TestApp,
    token: &str,
    idle_minutes: Option<u32>,
) -> (String, Value) {
    let created = launch(app, token, idle_minutes).await;
    created.assert_status(StatusCode::CREATED);
    let id = created.json()["id"].as_str().unwrap().to_string();
    let view = app
        .wait_for(token, &id, |v| {
            v["state"] == "ready" || v["state"] == "ended"
        })
        .await;
    assert_eq!(view["state"], "ready", "{view}");
    (id, view)
}

async fn state(app: &TestApp, token: &str, id: &str) -> Value {
    app.get(&format!("/api/v1/sessions/{id}"), Some(token))
        .await
        .json()["state"]
        .clone()
}

#[tokio::test]
async fn a_longer_chosen_timeout_keeps_a_session_the_default_would_end() {
    // The defaults: 30 minutes, and a person may choose 10 to 120; no page opens here, so the
    // away rule (its own tests: reclaim.rs) is off.
    let app = TestApp::start_clocked(Some(FakeRuntime::new()), |c| {
        c.idle.reaper_period_ms = 100;
        c.idle.away_timeout_seconds = 0;
    })
    .await;
    let (_, default_token) = app.user("dora").await;
    let (_, chooser_token) = app.user("carl").await;
    let (default_id, default_view) = ready(&app, &default_token, None).await;
    let (chosen_id, chosen_view) = ready(&app, &chooser_token, Some(90)).await;
    let at = |v: &Value, key: &str| v[key].as_i64().unwrap_or_else(|| panic!("{key}: {v}"));
    // The session page counts down to the chosen timeout.
    assert_eq!(
        at(&default_view, "idle_at_ms") - at(&default_view, "ready_at_ms"),
        30 * MINUTE_MS
    );
    assert_eq!(
        at(&chosen_view, "idle_at_ms") - at(&chosen_view, "ready_at_ms"),
        90 * MINUTE_MS
    );
    // Both quiet for 31 minutes: the default ends, the chosen one stays.
    app.advance(Duration::from_secs(31 * 60));
    app.service.guard.reap().await;
    let ended = app
        .wait_for(&default_token, &default_id, |v| v["state"] == "ended")
        .await;
    assert_eq!(ended["end_reason"], "idle", "{ended}");
    assert_eq!(state(&app, &chooser_token, &chosen_id).await, "ready");
    // At its own timeout it ends too.
    app.advance(Duration::from_secs(60 * 60));
    app.service.guard.reap().await;
    let ended = app
        .wait_for(&chooser_token, &chosen_id, |v| v["state"] == "ended")
        .await;
    assert_eq!(ended["end_reason"], "idle", "{ended}");
}

#[tokio::test]
async fn a_timeout_outside_the_bounds_is_refused_with_them() {
    let app = TestApp::start_clocked(Some(FakeRuntime::new()), |_| {}).await;
    let (user_id, token) = app.user("olga").await;
    for minutes in [121, 9] {
        let refused = launch(&app, &token, Some(minutes)).await;
        refused.assert_status(StatusCode::BAD_REQUEST);
        let body = refused.json().to_string();
        assert!(
            body.contains("between 10 and 120 minutes for this size"),
            "{body}"
        );
    }
    // Nothing was launched or held.
    let (_, held) = app.store.credits(&user_id).await.unwrap();
    assert_eq!(held, 0);
}
