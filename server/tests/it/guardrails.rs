//! The guardrails end to end, through the REST API and the proxy, with a stand-in editor and
//! short timeouts: the reaper ends idle and crashed sessions, keeps busy ones, follows the
//! open-tab policy; the queue starts launches by itself; warm editors launch at once; quotas
//! and extensions answer with clear messages.

use crate::common::{FakeRuntime, TestApp};
use app::domain::session::{EndReason, SessionState};
use http::{Method, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

const REAPER_MS: u64 = 100;

/// Idle after 2 s, warned 1 s before; the reaper runs every 100 ms, the sampler every second.
async fn quick(runtime: Arc<FakeRuntime>, open_tab: bool) -> TestApp {
    TestApp::start_with(Some(runtime), move |c| {
        c.idle.timeout_seconds = 2;
        c.idle.warn_seconds = 1;
        c.idle.reaper_period_ms = REAPER_MS;
        c.idle.sample_seconds = 1;
        c.idle.open_tab_keeps_alive = open_tab;
    })
    .await
}

fn step_at(view: &Value, needle: &str) -> i64 {
    view["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["message"].as_str().unwrap().contains(needle))
        .unwrap_or_else(|| panic!("no step with '{needle}' in {view}"))["at_ms"]
        .as_i64()
        .unwrap()
}

async fn ended(app: &TestApp, token: &str, id: &str) -> Value {
    app.wait_for(token, id, |v| v["state"] == "ended").await
}

async fn still_ready_after(
    app: &TestApp,
    token: &str,
    id: &str,
    wait: Duration,
    beat: impl AsyncFn(),
) {
    let until = tokio::time::Instant::now() + wait;
    while tokio::time::Instant::now() < until {
        beat().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let view = app
        .get(&format!("/api/v1/sessions/{id}"), Some(token))
        .await
        .json();
    assert_eq!(view["state"], "ready", "ended too early: {view}");
}

/// Like [`quick`], on a clock that stands still until the test moves it.
async fn clocked(runtime: Arc<FakeRuntime>) -> TestApp {
    TestApp::start_clocked(Some(runtime), move |c| {
        c.idle.timeout_seconds = 2;
        c.idle.warn_seconds = 1;
        c.idle.reaper_period_ms = REAPER_MS;
        c.idle.sample_seconds = 1;
    })
    .await
}

async fn view(app: &TestApp, token: &str, id: &str) -> Value {
    app.get(&format!("/api/v1/sessions/{id}"), Some(token))
        .await
        .json()
}

#[tokio::test]
async fn an_idle_session_ends_at_its_timeout_by_the_clock() {
    let app = clocked(FakeRuntime::new()).await;
    let (user_id, token) = app.user("ida").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    let idle_at = view(&app, &token, &id).await["idle_at_ms"]
        .as_i64()
        .expect("an idle countdown");
    let now = app.service.now();
    // Real time passes, the clock does not: nothing ends.
    tokio::time::sleep(Duration::from_secs(3)).await;
    app.service.guard.reap().await;
    assert_eq!(view(&app, &token, &id).await["state"], "ready");
    // A moment before its idle time it is kept; at its idle time it ends.
    app.advance(Duration::from_millis((idle_at - now - 1) as u64));
    app.service.guard.reap().await;
    assert_eq!(view(&app, &token, &id).await["state"], "ready");
    app.advance(Duration::from_millis(1));
    app.service.guard.reap().await;
    // The background reaper may have begun this stop a moment before: wait for its end.
    let ended = ended(&app, &token, &id).await;
    assert_eq!(ended["end_reason"], "idle", "{ended}");
    assert_eq!(step_at(&ended, "idle too long"), idle_at);
    // The slot is free again and the unused credits are back: 2 s cost one minute.
    let (balance, held) = app.store.credits(&user_id).await.unwrap();
    assert_eq!((balance, held), (100_000 - 17, 0));
}

#[tokio::test]
async fn a_session_ends_when_its_time_is_up_by_the_clock_and_pays_its_hold() {
    // Idle only after two hours, and no page to go away: its time runs out first.
    let app = TestApp::start_clocked(Some(FakeRuntime::new()), |c| {
        c.idle.timeout_seconds = 7200;
        c.idle.away_timeout_seconds = 0;
        c.idle.reaper_period_ms = REAPER_MS;
    })
    .await;
    let (user_id, token) = app.user("tim").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    let ends_at = view(&app, &token, &id).await["ends_at_ms"]
        .as_i64()
        .expect("an end time");
    app.advance(Duration::from_millis(
        (ends_at - app.service.now() - 1) as u64,
    ));
    app.service.guard.reap().await;
    assert_eq!(view(&app, &token, &id).await["state"], "ready");
    app.advance(Duration::from_millis(1));
    app.service.guard.reap().await;
    let ended = ended(&app, &token, &id).await;
    assert_eq!(ended["end_reason"], "timer", "{ended}");
    // 30 minutes at one credit an hour: the whole hold is charged, nothing is held any more.
    let (balance, held) = app.store.credits(&user_id).await.unwrap();
    assert_eq!((balance, held), (100_000 - 500, 0));
}

#[tokio::test]
async fn a_token_stops_working_the_moment_it_expires_by_the_clock() {
    let app = clocked(FakeRuntime::new()).await;
    let (user_id, _) = app.user("exp").await;
    let user = app.store.user_by_id(&user_id).await.unwrap().unwrap();
    let made = app
        .service
        .accounts
        .create_token(
            &user.viewer(app::domain::scope::Scopes::ALL),
            "one day",
            None,
            Some(1),
        )
        .await
        .unwrap();
    app.get("/api/v1/me", Some(&made.token))
        .await
        .assert_status(StatusCode::OK);
    app.advance(Duration::from_secs(86_400) - Duration::from_millis(1));
    app.get("/api/v1/me", Some(&made.token))
        .await
        .assert_status(StatusCode::OK);
    // Cached a moment ago, and expired now: refused all the same.
    app.advance(Duration::from_millis(1));
    app.get("/api/v1/me", Some(&made.token))
        .await
        .assert_status(StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_busy_kernel_without_a_browser_is_not_idle() {
    let runtime = FakeRuntime::new();
    runtime.busy.store(true, Ordering::Relaxed);
    let app = quick(runtime.clone(), false).await;
    let (_, token) = app.user("bea").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    still_ready_after(&app, &token, &id, Duration::from_secs(5), async || {}).await;
    // The job finishes: now it is idle, and ends.
    runtime.busy.store(false, Ordering::Relaxed);
    assert_eq!(ended(&app, &token, &id).await["end_reason"], "idle");
}

#[tokio::test]
async fn a_job_on_the_cpu_without_a_browser_is_not_idle() {
    let runtime = FakeRuntime::new();
    // One core's worth: a marimo or code-server job, which no editor API reports.
    runtime.cpu_centi_cores.store(100, Ordering::Relaxed);
    let app = quick(runtime.clone(), false).await;
    let (_, token) = app.user("cyd").await;
    let id = app.launch_ready(&token, "marimo").await;
    still_ready_after(&app, &token, &id, Duration::from_secs(5), async || {}).await;
    // Background noise below the threshold (20 % of a core) is not work.
    runtime.cpu_centi_cores.store(5, Ordering::Relaxed);
    assert_eq!(ended(&app, &token, &id).await["end_reason"], "idle");
}

#[tokio::test]
async fn an_open_tab_alone_does_not_hold_a_gpu_by_default() {
    let app = quick(FakeRuntime::new(), false).await;
    let (_, token) = app.user("tab").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    let beat = format!("/api/v1/sessions/{id}/heartbeat");
    let started = tokio::time::Instant::now();
    loop {
        let r = app
            .call(
                Method::POST,
                &beat,
                Some(&token),
                Some(json!({"input": false})),
            )
            .await;
        if r.status != StatusCode::OK {
            break;
        }
        if r.json()["state"] == "ended" {
            break;
        }
        // A guard against a loop for ever, not a measure of speed.
        assert!(started.elapsed() < Duration::from_secs(90), "never ended");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(ended(&app, &token, &id).await["end_reason"], "idle");
}

#[tokio::test]
async fn a_page_that_says_it_left_starts_the_away_timeout_at_once() {
    // On a clock the test moves, with the defaults: 30 minutes at a page, 15 with none.
    let app = TestApp::start_clocked(Some(FakeRuntime::new()), |_| {}).await;
    let (_, token) = app.user("lou").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    let beat = format!("/api/v1/sessions/{id}/heartbeat");
    let now = || {
        use server::util::Clock;
        app.clock.as_ref().expect("a clocked server").now_ms()
    };
    let idle_in = async |body: Value| {
        let r = app
            .call(Method::POST, &beat, Some(&token), Some(body))
            .await;
        r.assert_status(StatusCode::OK);
        let view = view(&app, &token, &id).await;
        let idle_at = view["idle_at_ms"].as_i64().expect("idle_at_ms");
        (idle_at - now()) / 60_000
    };
    // Typing at a visible page: the full timeout.
    assert_eq!(idle_in(json!({"input": true})).await, 30);
    // A minute on, the tab goes into the background: the away timeout, from then.
    app.advance(Duration::from_secs(60));
    assert_eq!(idle_in(json!({"left": true})).await, 15);
    app.advance(Duration::from_secs(4 * 60));
    assert_eq!(idle_in(json!({"input": false})).await, 25, "back in sight");
    // Without a word on leaving, the page counts as there until a beat is overdue.
    assert_eq!(idle_in(json!({"input": true})).await, 30);
    app.advance(Duration::from_secs(60));
    let quiet = view(&app, &token, &id).await["idle_at_ms"]
        .as_i64()
        .unwrap();
    assert_eq!((quiet - now()) / 60_000, 29);
}

#[tokio::test]
async fn an_open_tab_keeps_a_session_when_configured_and_input_always_does() {
    let app = quick(FakeRuntime::new(), true).await;
    let (_, token) = app.user("tab").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    let beat = format!("/api/v1/sessions/{id}/heartbeat");
    still_ready_after(&app, &token, &id, Duration::from_secs(5), async || {
        app.call(
            Method::POST,
            &beat,
            Some(&token),
            Some(json!({"input": false})),
        )
        .await
        .assert_status(StatusCode::OK);
    })
    .await;

    let strict = quick(FakeRuntime::new(), false).await;
    let (_, token) = strict.user("typist").await;
    let id = strict.launch_ready(&token, "jupyterlab").await;
    let beat = format!("/api/v1/sessions/{id}/heartbeat");
    still_ready_after(&strict, &token, &id, Duration::from_secs(5), async || {
        strict
            .call(
                Method::POST,
                &beat,
                Some(&token),
                Some(json!({"input": true})),
            )
            .await
            .assert_status(StatusCode::OK);
    })
    .await;
    // A script using its editor through the proxy with a token is a person's work too.
    let status = format!("/s/{id}/api/status");
    still_ready_after(&strict, &token, &id, Duration::from_secs(4), async || {
        strict
            .get(&status, Some(&token))
            .await
            .assert_status(StatusCode::OK);
    })
    .await;
}

#[tokio::test]
async fn a_killed_editor_is_detected_and_refunded() {
    let app = TestApp::start_with(Some(FakeRuntime::new()), |c| {
        c.idle.reaper_period_ms = 1000;
    })
    .await;
    let (user_id, token) = app.user("kay").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    let handle = app.record(&id).await.runtime_handle.unwrap();
    FakeRuntime::crash(&handle);
    let view = ended(&app, &token, &id).await;
    assert_eq!(view["end_reason"], "crash");
    let detail = view["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("Last lines of the editor's log:")
            && detail.contains(&format!("MemoryError in the kernel of {handle}")),
        "the owner is told what the editor said last: {detail}"
    );
    let (balance, held) = app.store.credits(&user_id).await.unwrap();
    assert_eq!(
        (balance, held),
        (100_000 - 17, 0),
        "unused credits come back"
    );
}

/// The name of a server that ran on this machine and is gone (its pid no longer runs).
fn dead_server_of_this_machine() -> String {
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    format!(
        "{}~{gone_pid}~0123456789abcdef0123",
        server::util::host_name()
    )
}

/// The reaper lease still held, for minutes, by a server of this machine that was killed: the
/// restarted server takes it over and notices a re-adopted editor's crash at once, not once the
/// dead one's lease runs out.
#[tokio::test]
async fn a_crash_is_noticed_at_once_though_a_dead_server_held_the_reaper_lease() {
    let app = TestApp::start_with(Some(FakeRuntime::new()), |c| {
        c.idle.reaper_period_ms = REAPER_MS;
    })
    .await;
    let (_, token) = app.user("kit").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    let dead = dead_server_of_this_machine();
    let in_ten_minutes = server::store::now_ms() + 600_000;
    app.sql(
        &format!(
            "UPDATE leases SET holder = '{dead}', expires_at = {in_ten_minutes} WHERE name = $1"
        ),
        "reaper",
    )
    .await;
    FakeRuntime::crash(&app.record(&id).await.runtime_handle.unwrap());
    let view = app.wait_for(&token, &id, |v| v["state"] == "ended").await;
    assert_eq!(view["end_reason"], "crash");
    assert_eq!(
        app.store.lease_holder("reaper").await.unwrap().as_deref(),
        Some(app.service.guard.instance())
    );
    app.stop().await;
}

/// An editor found dead at start-up, after the server was down for a while, is charged until
/// the last time a server was watching it, not for the time nobody was.
#[tokio::test]
async fn an_editor_found_dead_after_downtime_is_not_charged_for_it() {
    let runtime = FakeRuntime::new();
    let app = TestApp::start_with(Some(runtime.clone()), |c| {
        c.idle.reaper_period_ms = 3_600_000;
    })
    .await;
    let (user_id, token) = app.user("dawn").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    // Ready 20 minutes ago; the last server stopped watching 10 minutes ago; the editor died
    // with the machine.
    let now = server::store::now_ms();
    let (ready_at, watched_until) = (now - 20 * 60_000, now - 10 * 60_000);
    app.sql(
        &format!("UPDATE sessions SET ready_at = {ready_at} WHERE id = $1"),
        &id,
    )
    .await;
    app.sql(
        &format!(
            "INSERT INTO leases (name, holder, expires_at) VALUES ($1, 'a-server-gone', {watched_until})"
        ),
        "reaper",
    )
    .await;
    FakeRuntime::crash(&app.record(&id).await.runtime_handle.unwrap());
    app.service.guard.recover().await.unwrap();

    let record = app.record(&id).await;
    assert_eq!(record.state, SessionState::Ended);
    assert_eq!(record.end_reason, Some(EndReason::Crash));
    let (charge, _) = app::domain::credits::settle(500, 1000, watched_until - ready_at);
    assert!(charge > 0);
    assert_eq!(
        app.store.credits(&user_id).await.unwrap(),
        (100_000 - charge, 0),
        "ten minutes charged, not twenty"
    );
}

#[tokio::test]
async fn a_full_pool_queues_with_positions_and_starts_by_itself() {
    let app = TestApp::start_with(Some(FakeRuntime::new()), |c| {
        // No reaper pass in the test's time: a stop that frees a slot moves the line itself.
        c.idle.reaper_period_ms = 3_600_000;
        c.pool.gpus[0].memory_mib = 16384;
    })
    .await;
    let mut tokens = Vec::new();
    for name in ["u1", "u2", "u3", "u4"] {
        tokens.push(app.user(name).await);
    }
    let first = app.launch_ready(&tokens[0].1, "jupyterlab").await;
    app.launch_ready(&tokens[1].1, "jupyterlab").await;
    let third = app.launch(&tokens[2].1, "jupyterlab", 30).await;
    third.assert_status(StatusCode::CREATED);
    let third = third.json();
    assert_eq!(
        (third["state"].as_str(), third["queue_position"].as_u64()),
        (Some("queued"), Some(1))
    );
    let fourth = app.launch(&tokens[3].1, "marimo", 30).await.json();
    assert_eq!(fourth["queue_position"], 2);
    // The REST view says by when, and what frees the place by then: both running sessions are
    // worked in, so their time's end (not an idle deadline, no editor started ahead).
    let waiting = app
        .get(
            &format!("/api/v1/sessions/{}", third["id"].as_str().unwrap()),
            Some(&tokens[2].1),
        )
        .await
        .json();
    assert!(waiting["queue_eta_ms"].as_i64().is_some(), "{waiting}");
    assert_eq!(
        waiting["queue_why"],
        "when a running session's time ends (sooner if one stops)"
    );
    let dashboard_slices = app
        .service
        .sessions
        .dashboard(
            &app.store
                .user_by_name("u4")
                .await
                .unwrap()
                .unwrap()
                .viewer(app::domain::scope::Scopes::ALL),
        )
        .await
        .unwrap()
        .slices;
    assert_eq!(dashboard_slices[0].queued, 2);
    // Admins see the line beside the pool: who waits, for what, in which place, until when.
    let root = app.admin_token("root").await;
    let line = app.get("/api/v1/admin/queue", Some(&root)).await.json();
    let seen: Vec<(&str, &str, u64, u64)> = line
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            (
                q["user_name"].as_str().unwrap(),
                q["editor"].as_str().unwrap(),
                q["slice_mib"].as_u64().unwrap(),
                q["position"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [("u3", "jupyterlab", 8192, 1), ("u4", "marimo", 8192, 2)]
    );
    assert_eq!(line[0]["session_id"], third["id"]);
    let eta = |i: usize| line[i]["eta_ms"].as_i64();
    assert!(
        eta(0).is_some() && eta(1) >= eta(0),
        "each starts when one of the two running sessions ends: {line}"
    );
    app.get("/api/v1/admin/queue", Some(&tokens[0].1))
        .await
        .assert_status(StatusCode::FORBIDDEN);

    app.delete(&format!("/api/v1/sessions/{first}"), Some(&tokens[0].1))
        .await
        .assert_status(StatusCode::OK);
    let third_id = third["id"].as_str().unwrap();
    let started = app
        .wait_for(&tokens[2].1, third_id, |v| v["state"] == "ready")
        .await;
    assert!(started["steps"].to_string().contains("Your turn"));
    let fourth_id = fourth["id"].as_str().unwrap();
    let moved = app
        .wait_for(&tokens[3].1, fourth_id, |v| v["queue_position"] == 1)
        .await;
    assert_eq!(moved["state"], "queued");
    // Leaving the queue ends it with every credit back.
    app.delete(&format!("/api/v1/sessions/{fourth_id}"), Some(&tokens[3].1))
        .await
        .assert_status(StatusCode::OK);
    let left = ended(&app, &tokens[3].1, fourth_id).await;
    assert_eq!(left["end_reason"], "user");
    let (balance, held) = app.store.credits(&tokens[3].0).await.unwrap();
    assert_eq!((balance, held), (100_000, 0));
}

#[tokio::test]
async fn queued_sessions_keep_their_place_across_a_restart() {
    let runtime = FakeRuntime::new();
    let two_slices_kept_on_shutdown = |c: &mut server::config::Config| {
        c.idle.reaper_period_ms = REAPER_MS;
        c.pool.gpus[0].memory_mib = 16384;
        c.sessions.stop_on_shutdown = false;
    };
    let app = TestApp::start_with(Some(runtime.clone()), two_slices_kept_on_shutdown).await;
    let mut users = Vec::new();
    for name in ["q1", "q2", "q3", "q4"] {
        users.push(app.user(name).await);
    }
    let first = app.launch_ready(&users[0].1, "jupyterlab").await;
    app.launch_ready(&users[1].1, "jupyterlab").await;
    let third = app.launch(&users[2].1, "jupyterlab", 30).await.json();
    let fourth = app.launch(&users[3].1, "marimo", 30).await.json();
    let (third, fourth) = (
        third["id"].as_str().unwrap().to_string(),
        fourth["id"].as_str().unwrap().to_string(),
    );
    let held_before = app.store.credits(&users[2].0).await.unwrap().1;
    assert!(held_before > 0, "a queued launch holds its credits");
    let same_store = app.same_store();
    let _data = app.stop().await;

    let again = TestApp::start_with(Some(runtime), |c| {
        two_slices_kept_on_shutdown(c);
        same_store(c);
    })
    .await;
    again.service.guard.recover().await.unwrap();
    for (id, token, position) in [(&third, &users[2].1, 1), (&fourth, &users[3].1, 2)] {
        let view = again
            .get(&format!("/api/v1/sessions/{id}"), Some(token))
            .await
            .json();
        assert_eq!(
            (view["state"].as_str(), view["queue_position"].as_u64()),
            (Some("queued"), Some(position)),
            "still in line after the restart: {view}"
        );
    }
    assert_eq!(
        again.store.credits(&users[2].0).await.unwrap().1,
        held_before,
        "the hold stays while the session waits"
    );

    // The line moves as before: a freed slot goes to the head of it.
    again
        .delete(&format!("/api/v1/sessions/{first}"), Some(&users[0].1))
        .await
        .assert_status(StatusCode::OK);
    let started = again
        .wait_for(&users[2].1, &third, |v| v["state"] == "ready")
        .await;
    assert!(started["steps"].to_string().contains("Your turn"));
    let moved = again
        .wait_for(&users[3].1, &fourth, |v| v["queue_position"] == 1)
        .await;
    assert_eq!(moved["state"], "queued");
    again.stop().await;
}

/// With the default `stop_on_shutdown`, a shutdown ends the running sessions but not the queue,
/// and gives the slots it frees to nobody; a size the pool no longer has after the restart ends
/// the wait with a refund.
#[tokio::test]
async fn a_shutdown_keeps_the_queue_and_a_size_gone_after_it_refunds() {
    let two_slices = |c: &mut server::config::Config| {
        c.idle.reaper_period_ms = REAPER_MS;
        c.pool.gpus[0].memory_mib = 16384;
    };
    let app = TestApp::start_with(Some(FakeRuntime::new()), two_slices).await;
    let mut users = Vec::new();
    for name in ["s1", "s2", "s3"] {
        users.push(app.user(name).await);
    }
    let running = app.launch_ready(&users[0].1, "jupyterlab").await;
    app.launch_ready(&users[1].1, "jupyterlab").await;
    let waiting = app.launch(&users[2].1, "jupyterlab", 30).await.json();
    let waiting = waiting["id"].as_str().unwrap().to_string();
    let (balance, held) = app.store.credits(&users[2].0).await.unwrap();
    assert!(held > 0);
    let service = app.service.clone();
    let store = app.store.clone();
    let same_store = app.same_store();
    let _data = app.stop().await;
    let stopped = store.session(&running).await.unwrap().unwrap();
    assert_eq!(
        stopped.state,
        SessionState::Ended,
        "running sessions end at shutdown"
    );
    let kept = store.session(&waiting).await.unwrap().unwrap();
    assert_eq!(
        kept.state,
        SessionState::Queued,
        "the queue is kept, not started"
    );
    drop(service);

    // The card is now cut into 4 GB slices: no 8 GB slice will ever free up.
    let again = TestApp::start_with(Some(FakeRuntime::new()), |c| {
        two_slices(c);
        c.pool.gpus[0].slice_mib = 4096;
        same_store(c);
    })
    .await;
    again.service.guard.recover().await.unwrap();
    let view = ended(&again, &users[2].1, &waiting).await;
    assert_eq!(view["end_reason"], "failed");
    assert!(
        view["detail"]
            .as_str()
            .unwrap()
            .contains("no longer has 8 GB"),
        "{view}"
    );
    assert_eq!(
        again.store.credits(&users[2].0).await.unwrap(),
        (balance + held, 0),
        "every credit back"
    );
    again.stop().await;
}

/// A server whose editors never answer, with a readiness timeout long enough that every launch
/// stays `starting` for the test's length.
async fn launches_stay_starting(configure: impl FnOnce(&mut server::config::Config)) -> TestApp {
    let runtime = Arc::new(FakeRuntime {
        never_ready: true,
        ..FakeRuntime::plain()
    });
    TestApp::start_with(Some(runtime), |c| {
        c.sessions.ready_timeout_seconds = 600;
        configure(c);
    })
    .await
}

#[tokio::test]
async fn launches_and_stops_that_nothing_drives_are_finished_by_the_reaper() {
    let app = launches_stay_starting(|c| c.idle.reaper_period_ms = REAPER_MS).await;
    let (user_id, token) = app.user("stu").await;
    let before = app.store.credits(&user_id).await.unwrap();
    // A launch that has been starting for longer than any launch task waits: as if the task
    // had died with the replica that ran it.
    let stuck = app.launch_id(&token, "jupyterlab").await;
    app.sql(
        "UPDATE session_events SET at = at - 100000000 WHERE session_id = $1",
        &stuck,
    )
    .await;
    app.assert_fails_free(&token, &stuck, "did not start in time", &user_id, before)
        .await;
    app.stop().await;

    // A stop begun long ago that never finished (its server died in between).
    let runtime = FakeRuntime::new();
    let app = TestApp::start_with(Some(runtime.clone()), |c| {
        c.idle.reaper_period_ms = REAPER_MS;
    })
    .await;
    let (user_id, token) = app.user("sue").await;
    let id = app.launch_ready(&token, "marimo").await;
    let handle = app.record(&id).await.runtime_handle.unwrap();
    app.sql(
        "UPDATE sessions SET state = 'stopping', end_reason = 'user', created_at = created_at - 100000000 WHERE id = $1",
        &id,
    )
    .await;
    let view = app.wait_for(&token, &id, |v| v["state"] == "ended").await;
    assert_eq!(view["end_reason"], "user");
    assert!(runtime.stopped.lock().unwrap().contains(&handle));
    let pool = app.store.pool().await.unwrap();
    assert!(
        pool.iter()
            .flat_map(|(_, slots)| slots)
            .all(|slot| slot.session_id.as_deref() != Some(id.as_str())),
        "the slot is free"
    );
    assert_eq!(
        app.store.credits(&user_id).await.unwrap().1,
        0,
        "nothing held"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_server_starting_up_leaves_alone_the_launches_a_live_server_drives() {
    let first = launches_stay_starting(|_| {}).await;
    let (user_id, token) = first.user("ray").await;
    let before = first.store.credits(&user_id).await.unwrap();
    let id = first.launch_id(&token, "jupyterlab").await;
    tokio::time::timeout(Duration::from_secs(10), async {
        while first.record(&id).await.driver.as_deref() != Some(first.service.guard.instance()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the first server drives the launch");

    // A second server on the same database starts while the first one lives.
    let second = TestApp::start_with(Some(FakeRuntime::new()), first.same_store()).await;
    second.service.guard.recover().await.unwrap();
    assert_eq!(
        second.record(&id).await.state,
        SessionState::Starting,
        "the launch is the first server's to finish"
    );
    // Its driver died without a word (no lease): the next server to start ends it, refunded.
    first
        .sql(
            "UPDATE sessions SET driver = 'a-server-that-died' WHERE id = $1",
            &id,
        )
        .await;
    second.service.guard.recover().await.unwrap();
    second
        .assert_fails_free(
            &token,
            &id,
            "restarted before the editor was ready",
            &user_id,
            before,
        )
        .await;
    second.stop().await;
    first.stop().await;
}

/// A server killed on this machine mid-launch: the next one to start ends its launches at once,
/// refunded, although the dead one's lease has not run out (it is no process of this machine).
#[tokio::test]
async fn a_server_restarted_on_the_same_machine_ends_its_predecessors_launches_at_once() {
    let first = launches_stay_starting(|_| {}).await;
    let (user_id, token) = first.user("rex").await;
    let before = first.store.credits(&user_id).await.unwrap();
    let id = first.launch_id(&token, "jupyterlab").await;
    // The process that drove it, here, is gone; its lease still runs for a minute.
    let dead = dead_server_of_this_machine();
    assert!(
        first
            .store
            .try_lease(&format!("instance:{dead}"), &dead, 60_000)
            .await
            .unwrap()
    );
    first
        .sql(
            &format!("UPDATE sessions SET driver = '{dead}' WHERE id = $1"),
            &id,
        )
        .await;
    let second = TestApp::start_with(Some(FakeRuntime::new()), first.same_store()).await;
    second.service.guard.recover().await.unwrap();
    second
        .assert_fails_free(
            &token,
            &id,
            "restarted before the editor was ready",
            &user_id,
            before,
        )
        .await;
    second.stop().await;
    first.stop().await;
}

#[tokio::test]
async fn a_warm_launch_whose_workspace_cannot_be_bound_costs_nothing() {
    let runtime = Arc::new(FakeRuntime {
        prestart: true,
        fail_bind: true,
        ..FakeRuntime::plain()
    });
    let app = TestApp::start_with(Some(runtime), |c| {
        c.pool.warm = vec![server::config::WarmTarget {
            editor: "jupyterlab".into(),
            slice_mib: 8192,
            count: 1,
        }];
    })
    .await;
    tokio::time::timeout(Duration::from_secs(10), async {
        while !app
            .store
            .warm_editors()
            .await
            .unwrap()
            .iter()
            .any(|w| w.ready)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("a warm editor");
    let (user_id, token) = app.user("walt").await;
    let before = app.store.credits(&user_id).await.unwrap();
    let id = app.launch_id(&token, "jupyterlab").await;
    app.assert_fails_free(&token, &id, "workspace volume", &user_id, before)
        .await;
    app.stop().await;
}

#[tokio::test]
async fn a_warm_editor_launches_at_once_on_the_users_workspace_and_is_replaced() {
    let runtime = Arc::new(FakeRuntime {
        prestart: true,
        stop_takes: Duration::from_millis(300),
        ..FakeRuntime::plain()
    });
    let app = TestApp::start_with(Some(runtime.clone()), |c| {
        c.idle.reaper_period_ms = REAPER_MS;
        c.pool.warm = vec![server::config::WarmTarget {
            editor: "jupyterlab".into(),
            slice_mib: 8192,
            count: 2,
        }];
    })
    .await;
    let warm_ready = async || {
        loop {
            let warm = app.store.warm_editors().await.unwrap();
            if warm.iter().filter(|w| w.ready).count() == 2 {
                return warm;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let before = tokio::time::timeout(Duration::from_secs(10), warm_ready())
        .await
        .expect("two warm editors");
    let (_, token) = app.user("wendy").await;
    let launched = app.launch(&token, "jupyterlab", 30).await;
    launched.assert_status(StatusCode::CREATED);
    let view = launched.json();
    assert_eq!(
        view["state"], "ready",
        "a warm launch is ready in its first answer"
    );
    let id = view["id"].as_str().unwrap().to_string();
    assert!(
        before.iter().any(|w| w.id == id),
        "it is one of the warm editors"
    );
    assert_eq!(
        runtime.bound.lock().unwrap().clone(),
        vec![(id.clone(), "wendy".to_string())]
    );
    app.get(&format!("/s/{id}/api/status"), Some(&token))
        .await
        .assert_status(StatusCode::OK);
    // The pool refills to two.
    let after = tokio::time::timeout(Duration::from_secs(10), warm_ready())
        .await
        .expect("refilled");
    assert!(after.iter().all(|w| w.id != id));
    // Another editor kind starts cold, on a slot without a warm editor.
    let cold = app.launch(&token, "marimo", 30).await.json();
    let cold_id = cold["id"].as_str().unwrap();
    // (Starting, or already ready: the stand-in editor answers at once.)
    assert!(
        cold["state"] == "starting" || cold["state"] == "ready",
        "{cold}"
    );
    assert!(
        after.iter().all(|w| w.id != cold_id),
        "not a pre-started editor"
    );
    let warm: Vec<String> = app
        .store
        .warm_editors()
        .await
        .unwrap()
        .into_iter()
        .filter_map(|w| w.runtime_handle)
        .collect();
    assert_eq!(warm.len(), 2);
    // Shutdown returns only once the pre-started editors are stopped.
    app.stop().await;
    let stopped = runtime.stopped.lock().unwrap().clone();
    for handle in warm {
        assert!(stopped.contains(&handle), "{handle} left running");
    }
}

#[tokio::test]
async fn a_shutdown_in_the_middle_of_a_warm_start_stops_that_editor() {
    let runtime = Arc::new(FakeRuntime {
        prestart: true,
        never_ready: true,
        ..FakeRuntime::plain()
    });
    let app = TestApp::start_with(Some(runtime.clone()), |c| {
        c.pool.warm = vec![server::config::WarmTarget {
            editor: "marimo".into(),
            slice_mib: 8192,
            count: 1,
        }];
    })
    .await;
    let handle = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let warm = app.store.warm_editors().await.unwrap();
            if let Some(handle) = warm.iter().find_map(|w| w.runtime_handle.clone()) {
                assert!(!warm[0].ready);
                return handle;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a warm editor starting");
    app.stop().await;
    assert!(
        runtime.stopped.lock().unwrap().contains(&handle),
        "the half-started editor is stopped"
    );
}

#[tokio::test]
async fn quotas_and_extensions_answer_clearly() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let (user_id, token) = app.user("quinn").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    app.launch_ready(&token, "marimo").await;
    let third = app.launch(&token, "jupyterlab", 30).await;
    third.assert_status(StatusCode::FORBIDDEN);
    assert_eq!(third.json()["error"], "quota_exceeded");
    let message = third.json()["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("2 concurrent sessions") && message.contains("you have 2"),
        "{message}"
    );
    let quota = app.get("/api/v1/quota", Some(&token)).await.json();
    assert_eq!(quota["usage"]["sessions"], 2);

    let before = app
        .get(&format!("/api/v1/sessions/{id}"), Some(&token))
        .await
        .json();
    let extended = app
        .call(
            Method::POST,
            &format!("/api/v1/sessions/{id}/extend"),
            Some(&token),
            Some(json!({"minutes": 30})),
        )
        .await;
    extended.assert_status(StatusCode::OK);
    let after = extended.json();
    assert_eq!(
        after["ends_at_ms"].as_i64().unwrap() - before["ends_at_ms"].as_i64().unwrap(),
        30 * 60_000
    );
    assert_eq!(after["duration_minutes"], 60);
    let (_, held) = app.store.credits(&user_id).await.unwrap();
    assert_eq!(
        held,
        1_000 + 500,
        "60 min held on this one, 30 on the other"
    );
    let too_long = app
        .call(
            Method::POST,
            &format!("/api/v1/sessions/{id}/extend"),
            Some(&token),
            Some(json!({"minutes": 900})),
        )
        .await;
    too_long.assert_status(StatusCode::BAD_REQUEST);
    let malformed = app
        .call(
            Method::POST,
            &format!("/api/v1/sessions/{id}/extend"),
            Some(&token),
            Some(json!({"minutes": "lots"})),
        )
        .await;
    malformed.assert_status(StatusCode::BAD_REQUEST);

    // A user's own limit above the server's longest session (480 minutes) does not lift it.
    let generous = app::domain::quota::Overrides {
        max_minutes: Some(10_000),
        ..Default::default()
    };
    app.store
        .set_quota(&user_id, &generous, None)
        .await
        .unwrap();
    let extend = async |minutes: u32| {
        app.call(
            Method::POST,
            &format!("/api/v1/sessions/{id}/extend"),
            Some(&token),
            Some(json!({ "minutes": minutes })),
        )
        .await
    };
    extend(420).await.assert_status(StatusCode::OK);
    let past_the_cap = extend(30).await;
    past_the_cap.assert_status(StatusCode::FORBIDDEN);
    assert!(
        past_the_cap.json()["message"]
            .as_str()
            .unwrap()
            .contains("at most 480 minutes"),
        "{}",
        past_the_cap.json()
    );

    // Once its time is up, the session is being ended: no more time is sold for it.
    app.sql(
        &format!(
            "UPDATE sessions SET ends_at = {} WHERE id = $1",
            server::store::now_ms() - 1
        ),
        &id,
    )
    .await;
    let (_, held_before) = app.store.credits(&user_id).await.unwrap();
    let late = extend(5).await;
    late.assert_status(StatusCode::CONFLICT);
    assert!(
        late.json()["message"]
            .as_str()
            .unwrap()
            .contains("time is up")
    );
    assert_eq!(
        app.store.credits(&user_id).await.unwrap().1,
        held_before,
        "nothing more held"
    );
}
