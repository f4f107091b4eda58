//! Parking on the one-server runtime, sandbox on, with a real JupyterLab: a session with no work
//! for `idle.park_after_seconds` gives its slot back, its editor frozen in its control group with
//! its kernel; another launch gets the slot; its person's typing (a beat with input) or a
//! script's call brings it back once a slot of its card is free, and the same kernel still
//! holds what it held.

use crate::common::TestApp;
use crate::isolation::{execute, start_kernel};
use http::{Method, StatusCode};
use serde_json::{Value, json};
use server::config::DeclaredGpu;
use server::runtime::cgroup::Group;
use std::time::Duration;

async fn launch(app: &TestApp, token: &str) -> String {
    crate::idle_choice::ready(app, token, None).await.0
}

async fn view(app: &TestApp, token: &str, id: &str) -> Value {
    app.get(&format!("/api/v1/sessions/{id}"), Some(token))
        .await
        .json()
}

/// A beat with input, as the page sends when its person types; the session as it is after.
async fn typed(app: &TestApp, token: &str, id: &str) -> Value {
    let answer = app
        .call(
            Method::POST,
            &format!("/api/v1/sessions/{id}/heartbeat"),
            Some(token),
            Some(json!({ "input": true })),
        )
        .await;
    answer.assert_status(StatusCode::OK);
    answer.json()
}

/// The control group the session's editor runs in.
async fn group_of(app: &TestApp, id: &str) -> Group {
    let handle: Value =
        serde_json::from_str(&app.record(id).await.runtime_handle.expect("a handle")).unwrap();
    serde_json::from_value(handle["sandbox"]["cgroup"].clone()).expect("a control group")
}

#[tokio::test]
async fn a_parked_editor_lends_its_slot_and_comes_back_with_its_kernel() {
    let app = TestApp::start_clocked(None, |c| {
        c.idle.park_after_seconds = 300;
        // One slot: whoever holds it, the other waits.
        c.pool.gpus = vec![DeclaredGpu {
            name: "virtual-0".into(),
            model: "Virtual 8 GB".into(),
            memory_mib: 8192,
            slice_mib: 8192,
        }];
    })
    .await;
    if !app.runtime.parks_editors() {
        eprintln!("skipped: this server may not make cgroups (not root?), so it cannot park");
        return;
    }
    let (_, alice) = app.user("alice").await;
    let (_, bob) = app.user("bob").await;
    let id = launch(&app, &alice).await;
    let kernel = start_kernel(app.addr, &alice, &id).await;
    assert_eq!(
        execute(app.addr, &alice, &id, &kernel, "x = 41\nprint('set')")
            .await
            .trim(),
        "set"
    );
    let group = group_of(&app, &id).await;
    assert!(!group.is_frozen());

    // Six quiet minutes: parked, frozen, its slot free.
    app.advance(Duration::from_secs(6 * 60));
    app.service.guard.reap().await;
    let parked = view(&app, &alice, &id).await;
    assert_eq!(parked["state"], "parked", "{parked}");
    assert!(
        parked["url"].is_string(),
        "its page keeps the editor: {parked}"
    );
    // Its open page's polling does not wake it, and is not told the server is gone (503, which
    // JupyterLab shows as "Server Connection Error").
    let cookie = app.sign_in_cookie("alice").await;
    let polled = app
        .send(
            http::Request::get(app.url(&format!("/s/{id}/api/kernels")))
                .header("cookie", format!("sandbox_session={cookie}"))
                .body(http_body_util::Full::new(bytes::Bytes::new()))
                .unwrap(),
        )
        .await;
    polled.assert_status(StatusCode::CONFLICT);
    assert_eq!(polled.json()["error"], "parked");
    assert_eq!(view(&app, &alice, &id).await["state"], "parked");
    assert!(group.is_frozen(), "its processes are frozen");
    let bobs = launch(&app, &bob).await;

    // Its person types, and a script calls: no slot is free on its card, so it waits, parked.
    assert_eq!(typed(&app, &alice, &id).await["state"], "parked");
    let call = app.get(&format!("/s/{id}/api/kernels"), Some(&alice)).await;
    call.assert_status(StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(call.json()["error"], "parked");
    assert_eq!(view(&app, &alice, &id).await["state"], "parked");
    assert!(group.is_frozen());

    // The other session ends: the next beat with input takes the slot back, and the kernel
    // answers as it was.
    app.call(
        Method::DELETE,
        &format!("/api/v1/sessions/{bobs}"),
        Some(&bob),
        None,
    )
    .await;
    app.wait_for(&bob, &bobs, |v| v["state"] == "ended").await;
    assert_eq!(typed(&app, &alice, &id).await["state"], "ready");
    assert!(!group.is_frozen());
    assert_eq!(
        execute(app.addr, &alice, &id, &kernel, "print(x + 1)")
            .await
            .trim(),
        "42",
        "the same kernel, its variable kept"
    );

    // Parked again, a script's call alone brings it back (its slot is free now).
    app.advance(Duration::from_secs(6 * 60));
    app.service.guard.reap().await;
    assert_eq!(view(&app, &alice, &id).await["state"], "parked");
    app.get(&format!("/s/{id}/api/kernels"), Some(&alice))
        .await
        .assert_status(StatusCode::OK);
    assert_eq!(view(&app, &alice, &id).await["state"], "ready");

    // A parked session stops like a running one, frozen processes and all.
    app.advance(Duration::from_secs(6 * 60));
    app.service.guard.reap().await;
    assert_eq!(view(&app, &alice, &id).await["state"], "parked");
    app.call(
        Method::DELETE,
        &format!("/api/v1/sessions/{id}"),
        Some(&alice),
        None,
    )
    .await;
    let ended = app.wait_for(&alice, &id, |v| v["state"] == "ended").await;
    assert_eq!(ended["end_reason"], "user", "{ended}");
    assert!(!group.is_populated(), "nothing of it runs");
}
