//! Real editors through the real local runtime and our proxy.
//! Needs the editors from scripts/setup.sh (the test command installs them).

use crate::common::TestApp;
use futures_util::{SinkExt, StreamExt};
use http::{Method, StatusCode};
use serde_json::json;
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

fn require(editor: &str, program: &str) {
    let path = crate::common::tools_dir().join(program);
    assert!(
        path.exists(),
        "{editor} is not installed at {}; run scripts/setup.sh (or scripts/test.sh, which does)",
        path.display()
    );
}

fn execute_request(code: &str) -> String {
    let msg_id = format!("exec-{}", std::process::id());
    json!({
        "header": { "msg_id": msg_id, "username": "test", "session": "test-session", "msg_type": "execute_request", "version": "5.3", "date": "2026-01-01T00:00:00Z" },
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": { "code": code, "silent": false, "store_history": false, "user_expressions": {}, "allow_stdin": false, "stop_on_error": true }
    })
    .to_string()
}

#[tokio::test]
async fn jupyterlab_runs_a_kernel_through_the_proxy() {
    require("JupyterLab", "venv/bin/jupyter-lab");
    let app = TestApp::start(None).await;
    let (_, owner) = app.user("jane").await;
    let (_, other) = app.user("mallory").await;
    let id = app.launch_ready(&owner, "jupyterlab").await;
    let editor_socket = private_socket(&app, &id).await;

    let status = app.get(&format!("/s/{id}/api/status"), Some(&owner)).await;
    status.assert_status(StatusCode::OK);
    assert!(status.json()["started"].is_string());
    let lab = app.get(&format!("/s/{id}/lab"), Some(&owner)).await;
    assert_eq!(lab.status, StatusCode::OK);
    assert!(String::from_utf8_lossy(&lab.body).contains("JupyterLab"));
    // The page a browser loads quotes no secret of the editor's (its page config would).
    let secret = app.record(&id).await.editor_token.expect("a token");
    let page = app
        .send(
            http::Request::get(app.url(&format!("/s/{id}/lab")))
                .header("authorization", format!("Bearer {owner}"))
                .header("accept", "text/html,application/xhtml+xml")
                .header("accept-encoding", "gzip, br")
                .body(http_body_util::Full::new(bytes::Bytes::new()))
                .unwrap(),
        )
        .await;
    let page_text = String::from_utf8_lossy(&page.body);
    assert!(page_text.contains("jupyter-config-data"), "{page_text}");
    assert!(
        !page_text.contains(&secret),
        "the editor's token is on its page"
    );
    // Only our own pages may frame it.
    assert_eq!(lab.headers["x-frame-options"], "SAMEORIGIN");
    assert!(
        lab.headers
            .get_all("content-security-policy")
            .iter()
            .any(|v| v == "frame-ancestors 'self'"),
        "{:?}",
        lab.headers
    );

    // Reached without us, the editor refuses: only the proxy knows its token.
    let upstream = app.record(&id).await.upstream.unwrap();
    let direct = http::Request::get(format!("/s/{id}/api/contents"))
        .body(http_body_util::Empty::new())
        .unwrap();
    let (direct_status, _) = server::upstream::fetch(&upstream, direct, 64 * 1024)
        .await
        .expect("the editor answers");
    assert_eq!(direct_status, StatusCode::FORBIDDEN);

    // A file saved in the workspace, to find again in the next session.
    let saved = app
        .call(
            Method::PUT,
            &format!("/s/{id}/api/contents/kept.txt"),
            Some(&owner),
            Some(json!({ "type": "file", "format": "text", "content": "still here" })),
        )
        .await;
    assert!(saved.status.is_success(), "{:?}", saved.body);

    // The same requests from another user find nothing.
    let theirs = app.get(&format!("/s/{id}/api/status"), Some(&other)).await;
    assert_eq!(theirs.status, StatusCode::NOT_FOUND);

    let kernel = app
        .call(
            Method::POST,
            &format!("/s/{id}/api/kernels"),
            Some(&owner),
            Some(json!({ "name": "python3" })),
        )
        .await;
    kernel.assert_status(StatusCode::CREATED);
    let kernel_id = kernel.json()["id"].as_str().unwrap().to_string();

    let path = format!("/s/{id}/api/kernels/{kernel_id}/channels");
    match app.websocket(&path, &other).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => {
            assert_eq!(r.status(), StatusCode::NOT_FOUND)
        }
        other => panic!("another user's kernel websocket must be refused: {other:?}"),
    }

    let mut socket = app
        .websocket(&path, &owner)
        .await
        .expect("kernel websocket");
    socket
        .send(Message::text(execute_request("1+1")))
        .await
        .unwrap();
    let result = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(message) = socket.next().await {
            let Ok(Message::Text(text)) = message else {
                continue;
            };
            let msg: serde_json::Value = serde_json::from_str(&text).unwrap();
            if msg["msg_type"] == "execute_result" || msg["header"]["msg_type"] == "execute_result"
            {
                return msg["content"]["data"]["text/plain"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
            }
        }
        String::new()
    })
    .await
    .expect("the kernel answers within a minute");
    assert_eq!(result, "2");
    socket.close(None).await.ok();

    let session = app.record(&id).await;
    let handle = session.runtime_handle.clone().unwrap();
    assert!(app.runtime.is_alive(&handle).await);
    // Kept beside the socket too, for a server that dies before recording it.
    let kept_handle = editor_socket.with_file_name("handle.json");
    assert_eq!(std::fs::read_to_string(&kept_handle).unwrap(), handle);
    let stopped = app
        .delete(&format!("/api/v1/sessions/{id}"), Some(&owner))
        .await;
    assert_eq!(stopped.json()["state"], "ended");
    assert!(
        !app.runtime.is_alive(&handle).await,
        "the editor's process group is gone"
    );
    assert!(!editor_socket.exists(), "its socket is removed");
    assert!(!kept_handle.exists(), "and its handle's copy");

    // The next session, a new editor process, opens the same workspace; another user's does not.
    let next = app.launch_ready(&owner, "jupyterlab").await;
    let file = app
        .get(&format!("/s/{next}/api/contents/kept.txt"), Some(&owner))
        .await;
    file.assert_status(StatusCode::OK);
    assert_eq!(file.json()["content"], "still here");
    app.delete(&format!("/api/v1/sessions/{next}"), Some(&owner))
        .await;
    let theirs = app.launch_ready(&other, "jupyterlab").await;
    let missing = app
        .get(&format!("/s/{theirs}/api/contents/kept.txt"), Some(&other))
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    app.stop().await;
}

/// The editor of session `id` listens on a Unix socket that only the server's user can reach.
async fn private_socket(app: &TestApp, id: &str) -> std::path::PathBuf {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let upstream = app.record(id).await.upstream.unwrap();
    let path = std::path::PathBuf::from(
        upstream
            .strip_prefix("unix:")
            .unwrap_or_else(|| panic!("{upstream} is not a socket")),
    );
    let meta = std::fs::metadata(&path).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(
        meta.permissions().mode() & 0o777,
        0o600,
        "{}",
        path.display()
    );
    let dir = std::fs::metadata(path.parent().unwrap()).unwrap();
    assert_eq!(dir.permissions().mode() & 0o777, 0o700);
    path
}

#[tokio::test]
async fn a_server_restart_re_adopts_live_editors_and_shutdown_stops_them() {
    require("JupyterLab", "venv/bin/jupyter-lab");
    let app = TestApp::start_with(None, |c| c.sessions.stop_on_shutdown = false).await;
    let (_, owner) = app.user("kim").await;
    let id = app.launch_ready(&owner, "jupyterlab").await;
    let handle = app.record(&id).await.runtime_handle.unwrap();
    let same_store = app.same_store();
    let (store, runtime) = (app.store.clone(), app.runtime.clone());
    let _data = app.stop().await;
    assert!(
        runtime.is_alive(&handle).await,
        "kept running across the restart"
    );

    // A new server on the same database adopts it; the proxy reaches it again.
    let again = TestApp::start_with(None, same_store).await;
    again.service.guard.recover().await.unwrap();
    let token = {
        let user = again.store.user_by_name("kim").await.unwrap().unwrap();
        let (token, hash) = server::auth::new_api_token();
        again
            .store
            .create_token(&user.id, &hash, "t", app::domain::scope::Scopes::ALL, None)
            .await
            .unwrap();
        token
    };
    let status = again
        .get(&format!("/s/{id}/api/status"), Some(&token))
        .await;
    assert_eq!(status.status, StatusCode::OK);
    // This one stops editors on shutdown: nothing is left behind.
    again.stop().await;
    assert!(!runtime.is_alive(&handle).await, "stopped at shutdown");
    let ended = store.session(&id).await.unwrap().unwrap();
    assert_eq!(ended.state, app::domain::session::SessionState::Ended);
}

#[tokio::test]
async fn marimo_answers_through_the_proxy() {
    require("marimo", "venv/bin/marimo");
    let app = TestApp::start(None).await;
    let (_, owner) = app.user("mo").await;
    let id = app.launch_ready(&owner, "marimo").await;
    let page = app.get(&format!("/s/{id}/"), Some(&owner)).await;
    page.assert_status(StatusCode::OK);
    assert!(
        String::from_utf8_lossy(&page.body)
            .to_lowercase()
            .contains("marimo")
    );
    app.stop().await;
}

/// Real marimo and JupyterLab: their own "shut down" ends the session through us, and the
/// editor's processes are gone.
#[tokio::test]
async fn an_editors_own_shutdown_stops_the_real_editor() {
    require("marimo", "venv/bin/marimo");
    require("JupyterLab", "venv/bin/jupyter-lab");
    let app = TestApp::start(None).await;
    let (_, owner) = app.user("shutter").await;
    for (editor, path) in [
        ("marimo", "/api/kernel/shutdown"),
        ("jupyterlab", "/api/shutdown"),
    ] {
        let id = app.launch_ready(&owner, editor).await;
        let started = std::time::Instant::now();
        let answer = app
            .call(Method::POST, &format!("/s/{id}{path}"), Some(&owner), None)
            .await;
        answer.assert_status(StatusCode::OK);
        let record = app.record(&id).await;
        assert_eq!(
            record.state.as_str(),
            "ended",
            "{editor}: {:?}",
            started.elapsed()
        );
        app.get(&format!("/s/{id}/"), Some(&owner))
            .await
            .assert_status(StatusCode::NOT_FOUND);
    }
    app.stop().await;
}

#[tokio::test]
async fn code_server_answers_through_the_proxy() {
    require("code-server", "npm/node_modules/.bin/code-server");
    let app = TestApp::start(None).await;
    let (_, owner) = app.user("cody").await;
    let id = app.launch_ready(&owner, "code-server").await;
    private_socket(&app, &id).await;
    serves_the_workbench(&app, &id, &owner).await;
    app.stop().await;
}

/// code-server's workbench page through the proxy: code-server first sends the browser to its
/// workspace folder, relative to our prefix.
async fn serves_the_workbench(app: &TestApp, id: &str, token: &str) {
    let first = app.get(&format!("/s/{id}/"), Some(token)).await;
    first.assert_status(StatusCode::FOUND);
    let location = first.headers["location"].to_str().unwrap().to_string();
    assert!(location.starts_with("./?folder="), "{location}");
    let page = app
        .call(
            Method::GET,
            &format!("/s/{id}/{}", &location[2..]),
            Some(token),
            None,
        )
        .await;
    page.assert_status(StatusCode::OK);
    assert!(
        String::from_utf8_lossy(&page.body).contains("vscode"),
        "the workbench page"
    );
}

#[tokio::test]
async fn code_server_starts_set_up_and_keeps_the_users_own_settings() {
    require("code-server", "npm/node_modules/.bin/code-server");
    let app = TestApp::start(None).await;
    let settings_of = |user: &str| {
        app.dir
            .path()
            .join("workspaces")
            .join(user)
            .join(".local/share/code-server/User/settings.json")
    };
    // A user who has their own settings already: a choice of theirs the defaults also name.
    let (_, dana) = app.user("dana").await;
    let own = settings_of("dana");
    std::fs::create_dir_all(own.parent().unwrap()).unwrap();
    std::fs::write(
        &own,
        r#"{"workbench.startupEditor": "readme", "editor.fontSize": 15}"#,
    )
    .unwrap();
    let (_, cody) = app.user("cody").await;
    let read = |path: &std::path::Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    for (token, user) in [(&cody, "cody"), (&dana, "dana")] {
        let id = app.launch_ready(token, "code-server").await;
        // Still the workbench, through the proxy.
        serves_the_workbench(&app, &id, token).await;
        // The settings file is the one code-server reads (its user data folder in the user's
        // home), made by the editor's own account: no walkthrough, telemetry off.
        let file = settings_of(user);
        use std::os::unix::fs::MetadataExt;
        let home = std::fs::metadata(app.dir.path().join("workspaces").join(user)).unwrap();
        assert_eq!(
            std::fs::metadata(&file).unwrap().uid(),
            home.uid(),
            "{user}"
        );
        let settings = read(&file);
        assert_eq!(
            settings["telemetry.telemetryLevel"], "off",
            "{user}: {settings}"
        );
        if user == "cody" {
            assert_eq!(settings["workbench.startupEditor"], "none", "{settings}");
        } else {
            // Dana's own choices stay.
            assert_eq!(settings["workbench.startupEditor"], "readme", "{settings}");
            assert_eq!(settings["editor.fontSize"], 15, "{settings}");
        }
    }
    app.stop().await;
}

/// An "editor" that is a shell script, to see failures as a user would.
fn script(dir: &std::path::Path, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_string_lossy().to_string()
}

async fn launch_until_ended(app: &TestApp, token: &str) -> serde_json::Value {
    let id = app.launch_id(token, "jupyterlab").await;
    app.wait_for(token, &id, |v| v["state"] == "ended").await
}

#[tokio::test]
async fn an_editor_that_dies_fails_fast_with_its_log_tail_and_a_refund() {
    let scripts = tempfile::tempdir().unwrap();
    let program = script(
        scripts.path(),
        "broken-lab",
        "echo 'Traceback (most recent call last):'\necho 'ImportError: no module named jupyterlab' >&2\nexit 1",
    );
    let app = TestApp::start_with(None, |c| c.editors.jupyterlab = program.clone()).await;
    let (user_id, token) = app.user("pat").await;
    let view = launch_until_ended(&app, &token).await;
    assert_eq!(view["end_reason"], "failed");
    let detail = view["detail"].as_str().unwrap();
    assert!(detail.contains("exited before it was ready"), "{detail}");
    assert!(
        detail.contains("ImportError: no module named jupyterlab"),
        "{detail}"
    );
    assert_eq!(
        app.store.credits(&user_id).await.unwrap(),
        (100_000, 0),
        "fully refunded"
    );
    app.stop().await;
}

#[tokio::test]
async fn an_editor_that_never_answers_times_out_and_is_killed() {
    let scripts = tempfile::tempdir().unwrap();
    // Found afterwards by its command line: in a sandbox its pid is its namespace's own.
    let marker = format!("300.{}", std::process::id());
    let program = script(
        scripts.path(),
        "silent-lab",
        &format!("echo 'starting, slowly'\nexec sleep {marker}"),
    );
    let app = TestApp::start_with(None, |c| {
        c.editors.jupyterlab = program.clone();
        // Long enough for the script's first line to be written, on a busy machine too.
        c.sessions.ready_timeout_seconds = 5;
    })
    .await;
    let (_, token) = app.user("quinn").await;
    let view = launch_until_ended(&app, &token).await;
    let detail = view["detail"].as_str().unwrap();
    assert!(detail.contains("did not answer within 5 s"), "{detail}");
    assert!(detail.contains("starting, slowly"), "{detail}");
    let running = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|p| std::fs::read(p.path().join("cmdline")).ok())
        .any(|cmdline| String::from_utf8_lossy(&cmdline).contains(&marker));
    assert!(!running, "the editor's process was killed");
    app.stop().await;
}

/// Pre-started editors of every kind, taken over by a user: each must show that user's own files,
/// which were bound to it after it started.
#[tokio::test]
async fn warm_editors_open_the_users_own_workspace() {
    require("JupyterLab", "venv/bin/jupyter-lab");
    require("marimo", "venv/bin/marimo");
    require("code-server", "npm/node_modules/.bin/code-server");
    let app = TestApp::start_with(None, |c| {
        c.quotas.max_sessions = 3;
        c.quotas.max_gpu_mib = 3 * 8192;
        c.pool.warm = ["jupyterlab", "marimo", "code-server"]
            .into_iter()
            .map(|editor| server::config::WarmTarget {
                editor: editor.into(),
                slice_mib: 8192,
                count: 1,
            })
            .collect();
    })
    .await;
    let warm = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let warm = app.store.warm_editors().await.unwrap();
            if warm.iter().filter(|w| w.ready).count() == 3 {
                return warm;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("three warm editors within two minutes");
    let (_, token) = app.user("wren").await;
    let workspace = app.dir.path().join("workspaces/wren");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("notes.txt"), "mine").unwrap();

    let launch_warm = async |editor: &str| {
        let view = app.launch(&token, editor, 30).await.json();
        assert_eq!(view["state"], "ready", "{editor} launches warm: {view}");
        let id = view["id"].as_str().unwrap().to_string();
        assert!(warm.iter().any(|w| w.id == id), "{editor} is a warm one");
        id
    };

    // JupyterLab lists the user's file and saves new ones into the user's workspace.
    let lab = launch_warm("jupyterlab").await;
    let listing = app
        .get(&format!("/s/{lab}/api/contents"), Some(&token))
        .await;
    listing.assert_status(StatusCode::OK);
    let names = names_in(&listing.json()["content"]);
    assert!(names.contains(&"notes.txt".to_string()), "{names:?}");
    app.call(
        Method::PUT,
        &format!("/s/{lab}/api/contents/from-lab.txt"),
        Some(&token),
        Some(json!({ "type": "file", "format": "text", "content": "saved" })),
    )
    .await
    .assert_status(StatusCode::CREATED);
    assert_eq!(
        std::fs::read_to_string(workspace.join("from-lab.txt")).unwrap(),
        "saved"
    );
    // A notebook too: saving one signs it with a secret the editor keeps under its home, which
    // it made before the user's workspace took the place of its empty one.
    let notebook = json!({ "cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5 });
    let saved = app
        .call(
            Method::PUT,
            &format!("/s/{lab}/api/contents/from-lab.ipynb"),
            Some(&token),
            Some(json!({ "type": "notebook", "format": "json", "content": notebook })),
        )
        .await;
    saved.assert_status(StatusCode::CREATED);
    assert!(workspace.join("from-lab.ipynb").exists());
    // And its kernel starts, as the page starts one (a session for the notebook's path).
    let kernel = app
        .call(
            Method::POST,
            &format!("/s/{lab}/api/sessions"),
            Some(&token),
            Some(json!({ "path": "from-lab.ipynb", "type": "notebook", "name": "", "kernel": { "name": "python3" } })),
        )
        .await;
    kernel.assert_status(StatusCode::CREATED);

    // marimo's file browser shows the same workspace.
    let mo = launch_warm("marimo").await;
    let page = app.get(&format!("/s/{mo}/"), Some(&token)).await;
    page.assert_status(StatusCode::OK);
    let page = String::from_utf8_lossy(&page.body).to_string();
    let server_token = page
        .split("data-token=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("marimo's page carries its server token")
        .to_string();
    let request = http::Request::post(app.url(&format!("/s/{mo}/api/files/list_files")))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .header("marimo-server-token", server_token)
        .body(http_body_util::Full::new(bytes::Bytes::from("{}")))
        .unwrap();
    let files = app.send(request).await;
    files.assert_status(StatusCode::OK);
    let names = names_in(&files.json()["files"]);
    assert!(names.contains(&"notes.txt".to_string()), "{names:?}");
    assert!(names.contains(&"from-lab.txt".to_string()), "{names:?}");

    // code-server opens the folder it was started on, which now leads to the user's workspace.
    let code = launch_warm("code-server").await;
    let first = app.get(&format!("/s/{code}/"), Some(&token)).await;
    first.assert_status(StatusCode::FOUND);
    let location = first.headers["location"].to_str().unwrap().to_string();
    let folder = location
        .strip_prefix("./?folder=")
        .map(percent_decode)
        .expect("code-server names its folder");
    if app.runtime.isolation().is_ok() {
        // In its sandbox the workspace is the editor's home, mounted over the empty one.
        assert_eq!(folder, "/home/user", "code-server opens its home");
    } else {
        assert_eq!(
            std::fs::canonicalize(&folder).unwrap(),
            std::fs::canonicalize(&workspace).unwrap(),
            "code-server's folder {folder} leads to the user's workspace"
        );
    }

    // Stopped, an editor leaves the user's workspace and its log, not its run directory or the
    // link and empty home it was pre-started on.
    for id in [&lab, &mo, &code] {
        app.delete(&format!("/api/v1/sessions/{id}"), Some(&token))
            .await
            .assert_status(StatusCode::OK);
        app.wait_for(&token, id, |v| v["state"] == "ended").await;
        let leftovers = || -> Vec<String> {
            ["run", "bind", "slots"]
                .iter()
                .filter_map(|dir| std::fs::read_dir(app.dir.path().join(dir)).ok())
                .flatten()
                .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with(id.as_str()))
                .collect()
        };
        // The run directory is deleted just after the stop, off its path.
        for _ in 0..100 {
            if leftovers().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            leftovers().is_empty(),
            "{id} left {:?} in {:?}",
            leftovers(),
            ["run", "bind", "slots"]
                .iter()
                .filter(
                    |d| std::fs::read_dir(app.dir.path().join(d)).is_ok_and(|mut e| e.any(|e| e
                        .unwrap()
                        .file_name()
                        .to_string_lossy()
                        .starts_with(id.as_str())))
                )
                .collect::<Vec<_>>()
        );
        assert!(app.dir.path().join(format!("logs/{id}.log")).exists());
    }
    assert_eq!(
        std::fs::read_to_string(workspace.join("notes.txt")).unwrap(),
        "mine"
    );
    app.stop().await;
}

/// The `name` of each entry of a file listing.
fn names_in(listing: &serde_json::Value) -> Vec<String> {
    listing
        .as_array()
        .expect("a list of files")
        .iter()
        .map(|f| f["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(byte) = u8::from_str_radix(&text[i + 1..i + 3], 16)
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
