//! Workspaces taken home and kept safe: the export's bytes unpacked and compared with the
//! workspace's files, paths that lead out refused, one export per user at a time.

use crate::common::{FakeRuntime, TestApp};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A server on the fake runtime whose users' workspaces lie in `workspaces`.
async fn app_on(workspaces: &Path, adjust: impl FnOnce(&mut server::config::Config)) -> TestApp {
    let runtime = Arc::new(FakeRuntime {
        workspaces: Some(workspaces.to_path_buf()),
        ..FakeRuntime::plain()
    });
    TestApp::start_with(Some(runtime), adjust).await
}

/// What a tree holds, by relative path: a file's bytes, a link's target, or a folder.
pub(crate) fn tree(root: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, into: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.strip_prefix(root).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                into.insert(name, format!("link → {}", target.display()));
            } else if meta.is_dir() {
                into.insert(name, "folder".into());
                walk(root, &path, into);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                into.insert(name, format!("{} bytes, {}", bytes.len(), hex_of(&bytes)));
            }
        }
    }
    let mut found = BTreeMap::new();
    walk(root, root, &mut found);
    found
}

fn hex_of(bytes: &[u8]) -> String {
    use std::hash::{Hash, Hasher};
    // Every byte matters, not only a hash's worth: two hashers over the whole content.
    let mut a = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut a);
    let mut b = std::collections::hash_map::DefaultHasher::new();
    (bytes.len(), bytes).hash(&mut b);
    format!("{:016x}{:016x}", a.finish(), b.finish())
}

/// Bytes nobody can compress, `n` of them, from a seed.
pub(crate) fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A workspace of a few kinds of things: nested folders, an empty one, binary and text files,
/// a name with spaces and brackets, a link.
pub(crate) fn fill_workspace(ws: &Path) {
    std::fs::create_dir_all(ws.join("notebooks/runs")).unwrap();
    std::fs::create_dir_all(ws.join("empty")).unwrap();
    std::fs::write(ws.join("notebooks/a.ipynb"), br#"{"cells": []}"#).unwrap();
    std::fs::write(ws.join("notebooks/runs/model [v1].bin"), noise(1, 300_000)).unwrap();
    std::fs::write(ws.join("notes.txt"), "first words\n").unwrap();
    std::os::unix::fs::symlink("notebooks/a.ipynb", ws.join("latest")).unwrap();
}

fn get_request(app: &TestApp, path: &str, token: &str) -> Request<Full<Bytes>> {
    Request::get(app.url(path))
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::new()))
        .unwrap()
}

/// Unpacks a `.tar.gz` with Debian's tar into a new folder.
pub(crate) fn unpack(archive: &[u8]) -> tempfile::TempDir {
    let into = tempfile::tempdir().unwrap();
    let mut tar = std::process::Command::new("tar")
        .args(["-xzf", "-", "-C"])
        .arg(into.path())
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    tar.stdin.take().unwrap().write_all(archive).unwrap();
    assert!(tar.wait().unwrap().success(), "the export unpacks");
    into
}

#[tokio::test]
async fn an_export_holds_exactly_the_workspaces_files() {
    let workspaces = tempfile::tempdir().unwrap();
    let app = app_on(workspaces.path(), |_| {}).await;
    let (_, token) = app.user("alice").await;
    let ws = workspaces.path().join("alice");
    fill_workspace(&ws);

    let whole = app.get("/api/v1/workspace/export", Some(&token)).await;
    whole.assert_status(StatusCode::OK);
    assert_eq!(whole.headers["content-type"], "application/gzip");
    let disposition = whole.headers["content-disposition"].to_str().unwrap();
    assert!(
        disposition.starts_with("attachment; filename=\"workspace-alice-"),
        "{disposition}"
    );
    let unpacked = unpack(&whole.body);
    assert_eq!(
        tree(unpacked.path()),
        tree(&ws),
        "the export is the workspace"
    );
    assert!(tree(&ws).contains_key("empty"), "an empty folder comes too");

    let folder = app
        .get(
            "/api/v1/workspace/export?path=notebooks/runs/",
            Some(&token),
        )
        .await;
    folder.assert_status(StatusCode::OK);
    let unpacked = unpack(&folder.body);
    assert_eq!(
        tree(unpacked.path()),
        tree(&ws)
            .into_iter()
            .filter_map(|(k, v)| k.strip_prefix("notebooks/").map(|k| (k.to_string(), v)))
            .filter(|(k, _)| k.starts_with("runs"))
            .collect::<BTreeMap<_, _>>(),
        "a folder's export holds that folder, under its own name"
    );

    let file = app
        .get("/api/v1/workspace/export?path=notes.txt", Some(&token))
        .await;
    file.assert_status(StatusCode::OK);
    assert_eq!(
        std::fs::read(unpack(&file.body).path().join("notes.txt")).unwrap(),
        b"first words\n"
    );
}

#[tokio::test]
async fn an_export_never_leads_out_of_the_workspace() {
    let workspaces = tempfile::tempdir().unwrap();
    let app = app_on(workspaces.path(), |_| {}).await;
    let (_, token) = app.user("alice").await;
    let (_, bob) = app.user("bob").await;
    let ws = workspaces.path().join("alice");
    fill_workspace(&ws);
    std::fs::create_dir_all(workspaces.path().join("bob")).unwrap();
    std::fs::write(workspaces.path().join("bob/secret"), "bob's").unwrap();
    std::fs::create_dir_all(workspaces.path().join("bob/inner")).unwrap();
    std::fs::write(workspaces.path().join("bob/inner/key"), "bob's key").unwrap();
    std::os::unix::fs::symlink(workspaces.path().join("bob"), ws.join("to-bob")).unwrap();

    for (path, why) in [
        ("../bob", "no `..`"),
        ("..%2Fbob%2Fsecret", "no `..`"),
        ("%2Fetc", "relative"),
        ("to-bob/secret", "behind a link"),
        ("to-bob/inner/key", "leads outside your workspace"),
        ("nothing-here", "no file or folder"),
    ] {
        let refused = app
            .get(
                &format!("/api/v1/workspace/export?path={path}"),
                Some(&token),
            )
            .await;
        refused.assert_status(StatusCode::BAD_REQUEST);
        let message = refused.json()["message"].as_str().unwrap().to_string();
        assert!(message.contains(why), "{path}: {message}");
        assert!(
            !message.contains(&workspaces.path().display().to_string()),
            "{message}"
        );
    }
    // The link itself is exported as the link it is, not what it points to.
    let link = app
        .get("/api/v1/workspace/export?path=to-bob", Some(&token))
        .await;
    link.assert_status(StatusCode::OK);
    let unpacked = unpack(&link.body);
    assert!(
        std::fs::symlink_metadata(unpacked.path().join("to-bob"))
            .unwrap()
            .is_symlink()
    );
    assert!(!unpacked.path().join("secret").exists());

    // Bob's own export is his, never alice's.
    let his = app.get("/api/v1/workspace/export", Some(&bob)).await;
    his.assert_status(StatusCode::OK);
    assert_eq!(
        tree(unpack(&his.body).path()),
        tree(&workspaces.path().join("bob"))
    );

    let unknown = app
        .get("/api/v1/workspace/export?file=x", Some(&token))
        .await;
    unknown.assert_status(StatusCode::BAD_REQUEST);
    app.get("/api/v1/workspace/export", None)
        .await
        .assert_status(StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn one_export_at_a_time_per_user_and_the_slot_comes_back_when_the_client_leaves() {
    let workspaces = tempfile::tempdir().unwrap();
    let app = app_on(workspaces.path(), |_| {}).await;
    let (_, token) = app.user("alice").await;
    let (_, bob) = app.user("bob").await;
    let ws = workspaces.path().join("alice");
    std::fs::create_dir_all(&ws).unwrap();
    // More than the sockets' buffers hold, so the first download stays under way until read.
    std::fs::write(ws.join("big.bin"), noise(7, 64 << 20)).unwrap();
    std::fs::create_dir_all(workspaces.path().join("bob")).unwrap();

    let first = app
        .open(get_request(&app, "/api/v1/workspace/export", &token))
        .await;
    assert_eq!(first.status(), StatusCode::OK);
    let second = app.get("/api/v1/workspace/export", Some(&token)).await;
    second.assert_status(StatusCode::CONFLICT);
    assert!(
        second.json()["message"]
            .as_str()
            .unwrap()
            .contains("under way")
    );
    app.get("/api/v1/workspace/export", Some(&bob))
        .await
        .assert_status(StatusCode::OK);

    // The first client hangs up: its slot is given back, its tar killed.
    drop(first);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let again = app
            .open(get_request(&app, "/api/v1/workspace/export", &token))
            .await;
        if again.status() == StatusCode::OK {
            let bytes = again.into_body().collect().await.unwrap().to_bytes();
            let unpacked = unpack(&bytes);
            assert_eq!(tree(unpacked.path()), tree(&ws));
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the slot came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A server on the fake runtime whose clock stands still until the test moves it, exports
/// capped at `cap` bytes a second and `max_seconds`, and alice's workspace of 1 MiB of noise.
async fn paced_app(
    workspaces: &Path,
    cap: u64,
    max_seconds: u64,
) -> (TestApp, String, std::path::PathBuf) {
    let runtime = Arc::new(FakeRuntime {
        workspaces: Some(workspaces.to_path_buf()),
        ..FakeRuntime::plain()
    });
    let app = TestApp::start_clocked(Some(runtime), |c| {
        c.backups.export_bytes_per_second = cap;
        c.backups.export_max_seconds = max_seconds;
    })
    .await;
    let (_, token) = app.user("alice").await;
    let ws = workspaces.join("alice");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("big.bin"), noise(11, 1 << 20)).unwrap();
    (app, token, ws)
}

/// The export's pacing bucket: one 64 KiB chunk of burst.
pub(crate) const BURST: u64 = 64 * 1024;

/// An export's body read on the server's hand-moved clock: what comes while the clock stands
/// still, then the clock moved on 500 ms when nothing more does. Each chunk is held to one
/// burst plus `cap` × the time moved. The bytes, and the milliseconds the clock was moved.
pub(crate) async fn read_paced(
    app: &TestApp,
    answer: hyper::Response<hyper::body::Incoming>,
    cap: u64,
) -> (Vec<u8>, u64) {
    let mut body = answer.into_body();
    let (mut got, mut moved_ms, mut moves) = (Vec::new(), 0u64, 0u32);
    loop {
        match tokio::time::timeout(Duration::from_millis(400), body.frame()).await {
            Ok(Some(frame)) => {
                if let Ok(data) = frame.unwrap().into_data() {
                    got.extend_from_slice(&data);
                }
                let allowed = BURST + cap * moved_ms / 1000;
                assert!(
                    got.len() as u64 <= allowed,
                    "{} bytes came with the clock moved {moved_ms} ms: at most {allowed} may",
                    got.len()
                );
            }
            Ok(None) => return (got, moved_ms),
            Err(_) => {
                app.advance(Duration::from_millis(500));
                moved_ms += 500;
                moves += 1;
                assert!(moves < 200, "the export moves on with the clock");
            }
        }
    }
}

/// Opens the whole workspace's export: a 200 that states `limits`.
async fn open_export(
    app: &TestApp,
    token: &str,
    limits: &str,
) -> hyper::Response<hyper::body::Incoming> {
    let answer = app
        .open(get_request(app, "/api/v1/workspace/export", token))
        .await;
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(answer.headers()["x-export-limits"], limits);
    answer
}

#[tokio::test]
async fn an_export_goes_no_faster_than_its_cap_and_still_holds_the_workspace() {
    // No wall-clock timing: the server's clock moves only when the test moves it, so what
    // may have gone by any moment is known exactly: one burst plus the cap × the time moved.
    const CAP: u64 = 256 * 1024;
    let workspaces = tempfile::tempdir().unwrap();
    let (app, token, ws) = paced_app(workspaces.path(), CAP, 0).await;
    let answer = open_export(&app, &token, "at most 256 KiB/s, no time limit").await;
    let (got, moved_ms) = read_paced(&app, answer, CAP).await;
    // All of it came, in order: it unpacks to the workspace, and it took the time the cap says.
    assert_eq!(tree(unpack(&got).path()), tree(&ws));
    assert!(
        moved_ms * CAP / 1000 + BURST >= got.len() as u64,
        "{} bytes in {moved_ms} ms of the server's clock",
        got.len()
    );
}

#[tokio::test]
async fn an_export_past_its_time_limit_is_cut_and_audited() {
    let workspaces = tempfile::tempdir().unwrap();
    let (app, token, ws) = paced_app(workspaces.path(), 256 * 1024, 60).await;
    let answer = open_export(&app, &token, "at most 256 KiB/s, cut after 1 min").await;
    let mut body = answer.into_body();
    let mut got = Vec::new();
    // The first burst, then a minute and a second pass on the server's clock.
    if let Some(frame) = body.frame().await {
        got.extend_from_slice(&frame.unwrap().into_data().unwrap());
    }
    app.advance(Duration::from_secs(61));
    let ended = loop {
        match tokio::time::timeout(Duration::from_secs(30), body.frame())
            .await
            .expect("the cut comes without the clock moving again")
        {
            Some(Ok(frame)) => got.extend_from_slice(&frame.into_data().unwrap_or_default()),
            Some(Err(e)) => break Err(e),
            None => break Ok(()),
        }
    };
    assert!(
        ended.is_err(),
        "a cut download ends broken, not as if whole"
    );
    let whole = std::fs::metadata(ws.join("big.bin")).unwrap().len();
    assert!((got.len() as u64) < whole, "{} bytes came", got.len());
    let mut tar = std::process::Command::new("tar")
        .args(["-tzf", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    let _ = tar.stdin.take().unwrap().write_all(&got);
    assert!(!tar.wait().unwrap().success(), "what came does not unpack");

    // The cut is audited with its reason, and the slot is free again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let cut = loop {
        let audit = app.store.audit_log(20).await.unwrap();
        if let Some(cut) = audit.into_iter().find(|a| a.action == "export.cut") {
            break cut;
        }
        assert!(tokio::time::Instant::now() < deadline, "the cut is audited");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(cut.target, "user:alice");
    assert!(
        cut.detail
            .contains("longer than 60 s (backups.export_max_seconds)"),
        "{}",
        cut.detail
    );
    drop(body);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let again = app
            .get("/api/v1/workspace/export?path=missing", Some(&token))
            .await;
        if again.status == StatusCode::BAD_REQUEST {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the slot came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A server on the fake runtime with backups on, into a repository under `repo`.
async fn backed_up_app(
    workspaces: &Path,
    repo: &Path,
    adjust: impl FnOnce(&mut server::config::Config),
) -> TestApp {
    let repo = repo.to_path_buf();
    app_on(workspaces, move |c| {
        c.backups.enabled = true;
        c.backups.repository = repo.display().to_string();
        adjust(c);
    })
    .await
}

async fn post(
    app: &TestApp,
    path: &str,
    token: &str,
    body: Option<serde_json::Value>,
) -> crate::common::Response {
    app.call(http::Method::POST, path, Some(token), body).await
}

/// Backs up as the owner of `token`; the snapshot's id.
async fn back_up(app: &TestApp, token: &str) -> String {
    let done = post(app, "/api/v1/backups", token, None).await;
    done.assert_status(StatusCode::CREATED);
    let done = done.json();
    assert_eq!(done["ok"], true, "{done}");
    done["snapshot_id"].as_str().unwrap().to_string()
}

/// A tree without the restore folders: what the user had.
fn own_files(ws: &Path) -> BTreeMap<String, String> {
    tree(ws)
        .into_iter()
        .filter(|(k, _)| !k.starts_with("restored-"))
        .collect()
}

#[tokio::test]
async fn a_file_and_the_whole_workspace_come_back_beside_the_current_files() {
    let (workspaces, repo) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let app = backed_up_app(workspaces.path(), &repo.path().join("r"), |_| {}).await;
    let (_, token) = app.user("alice").await;
    let (_, bob) = app.user("bob").await;
    let ws = workspaces.path().join("alice");
    fill_workspace(&ws);
    let before = tree(&ws);

    let listed = app.get("/api/v1/backups", Some(&token)).await.json();
    assert_eq!(listed["enabled"], true);
    assert_eq!(listed["snapshots"].as_array().unwrap().len(), 0);
    let snapshot = back_up(&app, &token).await;
    let listed = app.get("/api/v1/backups", Some(&token)).await.json();
    let full = listed["snapshots"][0]["id"].as_str().unwrap().to_string();
    assert!(full.starts_with(&snapshot), "{listed}");
    assert_eq!(listed["last"]["ok"], true);
    assert_eq!(
        listed["kept"],
        "the newest of each of the last 7 days and 4 weeks"
    );

    // The user changes a file, deletes one and makes one.
    std::fs::write(ws.join("notes.txt"), "second words\n").unwrap();
    std::fs::remove_file(ws.join("notebooks/a.ipynb")).unwrap();
    std::fs::write(ws.join("new.txt"), "made after").unwrap();
    let current = own_files(&ws);

    let short = &snapshot[..8];
    let one = post(
        &app,
        &format!("/api/v1/backups/{short}/restore"),
        &token,
        Some(serde_json::json!({ "path": "notebooks/a.ipynb" })),
    )
    .await;
    one.assert_status(StatusCode::CREATED);
    let folder = one.json()["folder"].as_str().unwrap().to_string();
    assert!(folder.starts_with("restored-"), "{folder}");
    assert_eq!(
        std::fs::read(ws.join(&folder).join("notebooks/a.ipynb")).unwrap(),
        br#"{"cells": []}"#
    );
    assert_eq!(
        tree(&ws.join(&folder)).len(),
        2,
        "only the file (and its folder) came back"
    );
    assert_eq!(own_files(&ws), current, "no current file was written over");

    let whole = post(
        &app,
        &format!("/api/v1/backups/{snapshot}/restore"),
        &token,
        None,
    )
    .await;
    whole.assert_status(StatusCode::CREATED);
    let whole_folder = whole.json()["folder"].as_str().unwrap().to_string();
    assert_eq!(
        whole_folder,
        format!("{folder}-2"),
        "a name in use is never reused"
    );
    assert_eq!(
        tree(&ws.join(&whole_folder)),
        before,
        "the whole workspace, byte for byte"
    );
    assert_eq!(own_files(&ws), current, "no current file was written over");
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.txt")).unwrap(),
        "second words\n"
    );
    assert!(
        std::fs::read_dir(&ws).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with(".sandbox-restore")),
        "no staging folder is left"
    );

    // Refusals, each a clear 400 or a 404 like a missing snapshot.
    for (body, why) in [
        (serde_json::json!({ "path": "../bob" }), "no `..`"),
        (serde_json::json!({ "path": "/etc/passwd" }), "relative"),
        (
            serde_json::json!({ "path": "never-was.txt" }),
            "not in that snapshot",
        ),
        (serde_json::json!({ "file": "x" }), "unknown field"),
    ] {
        let refused = post(
            &app,
            &format!("/api/v1/backups/{short}/restore"),
            &token,
            Some(body.clone()),
        )
        .await;
        refused.assert_status(StatusCode::BAD_REQUEST);
        let message = refused.json()["message"].as_str().unwrap().to_string();
        assert!(message.contains(why), "{body}: {message}");
    }
    post(&app, "/api/v1/backups/not-hex!/restore", &token, None)
        .await
        .assert_status(StatusCode::BAD_REQUEST);
    post(&app, "/api/v1/backups/deadbeef/restore", &token, None)
        .await
        .assert_status(StatusCode::NOT_FOUND);
    // Bob cannot restore alice's snapshot, nor see it.
    std::fs::create_dir_all(workspaces.path().join("bob")).unwrap();
    post(
        &app,
        &format!("/api/v1/backups/{snapshot}/restore"),
        &bob,
        None,
    )
    .await
    .assert_status(StatusCode::NOT_FOUND);
    let his = app.get("/api/v1/backups", Some(&bob)).await.json();
    assert_eq!(his["snapshots"].as_array().unwrap().len(), 0, "{his}");
    assert!(
        !workspaces
            .path()
            .join("bob")
            .read_dir()
            .unwrap()
            .any(|_| true)
    );

    let audit = app.store.audit_log(20).await.unwrap();
    let restores = audit
        .iter()
        .filter(|a| a.action == "backup.restore")
        .count();
    assert_eq!(restores, 2);
    assert!(
        audit
            .iter()
            .any(|a| a.action == "backup.run" && a.target == "user:alice")
    );
}

#[tokio::test]
async fn admins_back_up_and_restore_for_a_user_and_see_everyones_last_backup() {
    let (workspaces, repo) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let app = backed_up_app(workspaces.path(), &repo.path().join("r"), |_| {}).await;
    let (alice_id, alice) = app.user("alice").await;
    let root = app.admin_token("root").await;
    let ws = workspaces.path().join("alice");
    fill_workspace(&ws);

    let base = format!("/api/v1/admin/users/{alice_id}/backups");
    post(&app, &base, &alice, None)
        .await
        .assert_status(StatusCode::FORBIDDEN);
    let made = post(&app, &base, &root, None).await;
    made.assert_status(StatusCode::CREATED);
    let snapshot = made.json()["snapshot_id"].as_str().unwrap().to_string();
    let listed = app.get(&base, Some(&root)).await.json();
    assert!(
        listed["snapshots"][0]["id"]
            .as_str()
            .unwrap()
            .starts_with(&snapshot)
    );
    std::fs::remove_file(ws.join("notes.txt")).unwrap();
    let restored = post(
        &app,
        &format!("{base}/{snapshot}/restore"),
        &root,
        Some(serde_json::json!({ "path": "notes.txt" })),
    )
    .await;
    restored.assert_status(StatusCode::CREATED);
    let folder = restored.json()["folder"].as_str().unwrap().to_string();
    assert_eq!(
        std::fs::read_to_string(ws.join(folder).join("notes.txt")).unwrap(),
        "first words\n"
    );
    let everyone = app.get("/api/v1/admin/backups", Some(&root)).await.json();
    let row = everyone
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["user_name"] == "alice")
        .unwrap();
    assert_eq!(row["ok"], true, "{everyone}");
    assert!(row["succeeded_at_ms"].as_i64().is_some());
    app.get("/api/v1/admin/backups", Some(&alice))
        .await
        .assert_status(StatusCode::FORBIDDEN);
    // The Settings tab says how backups run and how each user's last one went.
    let settings = app.get("/api/v1/admin/settings", Some(&root)).await.json();
    let section = |title: &str| {
        settings
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["title"] == title)
            .unwrap_or_else(|| panic!("{title}: {settings}"))
            .to_string()
    };
    assert!(section("Backups").contains("daily at 02:30 UTC"));
    let last = section("Last backups");
    assert!(
        last.contains("alice") && last.contains("backed up"),
        "{last}"
    );
    let audit = app.store.audit_log(10).await.unwrap();
    let restore = audit.iter().find(|a| a.action == "backup.restore").unwrap();
    assert_eq!(restore.target, "user:alice");
    assert!(restore.detail.contains("notes.txt"), "{}", restore.detail);
}

/// The bytes a folder's files take.
fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() {
            bytes_under(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

#[tokio::test]
async fn retention_keeps_the_newest_of_each_day_as_configured_and_prunes_the_rest() {
    let (workspaces, repo) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let repo_dir = repo.path().join("r");
    let runtime = Arc::new(FakeRuntime {
        workspaces: Some(workspaces.path().to_path_buf()),
        ..FakeRuntime::plain()
    });
    let place = repo_dir.display().to_string();
    let app = TestApp::start_clocked(Some(runtime), move |c| {
        c.backups.enabled = true;
        c.backups.repository = place;
        c.backups.keep_daily = 2;
        c.backups.keep_weekly = 0;
    })
    .await;
    let (_, token) = app.user("alice").await;
    let ws = workspaces.path().join("alice");
    std::fs::create_dir_all(&ws).unwrap();
    // Day one holds a large file the later days do not.
    std::fs::write(ws.join("big.bin"), noise(3, 8 << 20)).unwrap();
    let mut made = Vec::new();
    for day in 0..4 {
        std::fs::write(ws.join("day.txt"), format!("day {day}")).unwrap();
        made.push(back_up(&app, &token).await);
        if day == 0 {
            std::fs::remove_file(ws.join("big.bin")).unwrap();
        }
        app.advance(Duration::from_secs(86_400));
    }
    let with_big = bytes_under(&repo_dir);
    let listed = app.get("/api/v1/backups", Some(&token)).await.json();
    let kept: Vec<&str> = listed["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["short_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        kept,
        vec![made[3].as_str(), made[2].as_str()],
        "the two newest days, newest first"
    );
    assert!(
        with_big < 4 << 20,
        "the big file's data went with the last snapshot that held it: {with_big} bytes"
    );
}

#[tokio::test]
async fn a_missing_or_damaged_repository_is_a_clear_error_and_loses_nothing() {
    let (workspaces, repo) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let repo_dir = repo.path().join("r");
    let app = backed_up_app(workspaces.path(), &repo_dir, |_| {}).await;
    let (_, token) = app.user("alice").await;
    let root = app.admin_token("root").await;
    let ws = workspaces.path().join("alice");
    fill_workspace(&ws);
    let snapshot = back_up(&app, &token).await;
    let before = tree(&ws);

    // Missing: moved away. Never replaced by a new empty repository.
    let aside = repo.path().join("aside");
    std::fs::rename(&repo_dir, &aside).unwrap();
    let failed = post(&app, "/api/v1/backups", &token, None).await;
    failed.assert_status(StatusCode::SERVICE_UNAVAILABLE);
    let message = failed.json()["message"].as_str().unwrap().to_string();
    assert!(message.contains("repository is missing"), "{message}");
    assert!(
        message.contains("nothing of your workspace was changed"),
        "{message}"
    );
    assert!(
        !message.contains(&repo_dir.display().to_string()),
        "no path shown: {message}"
    );
    assert!(
        !repo_dir.exists(),
        "no new repository was made in its place"
    );
    let restore = post(
        &app,
        &format!("/api/v1/backups/{snapshot}/restore"),
        &token,
        None,
    )
    .await;
    restore.assert_status(StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        tree(&ws),
        before,
        "the workspace is untouched: no restored or staging folder"
    );
    let status = app.get("/api/v1/admin/backups", Some(&root)).await.json();
    let alice = status
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["user_name"] == "alice")
        .unwrap();
    assert_eq!(alice["ok"], false, "{status}");
    assert!(
        alice["message"]
            .as_str()
            .unwrap()
            .contains("no backup repository"),
        "the admin reads why: {status}"
    );
    assert!(
        alice["succeeded_at_ms"].as_i64().is_some(),
        "the last good one is kept"
    );
    let metrics = app.get("/metrics", Some(&root)).await;
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(
        text.contains("sandbox_backup_last_failed{user=\"alice\"} 1"),
        "{text}"
    );
    assert!(text.contains("sandbox_backup_last_success_timestamp_seconds{user=\"alice\"}"));
    assert!(text.contains("sandbox_backups_failed 1"), "{text}");

    // Damaged: its config overwritten.
    std::fs::rename(&aside, &repo_dir).unwrap();
    let config = repo_dir.join("config");
    let good = std::fs::read(&config).unwrap();
    std::fs::write(&config, noise(9, good.len())).unwrap();
    let failed = post(&app, "/api/v1/backups", &token, None).await;
    failed.assert_status(StatusCode::SERVICE_UNAVAILABLE);
    let message = failed.json()["message"].as_str().unwrap().to_string();
    assert!(message.contains("cannot be read"), "{message}");
    assert_eq!(tree(&ws), before);

    // Mended: the earlier snapshot is all there.
    std::fs::write(&config, good).unwrap();
    let restored = post(
        &app,
        &format!("/api/v1/backups/{snapshot}/restore"),
        &token,
        None,
    )
    .await;
    restored.assert_status(StatusCode::CREATED);
    let folder = restored.json()["folder"].as_str().unwrap().to_string();
    assert_eq!(tree(&ws.join(folder)), before);
    back_up(&app, &token).await;
}

#[tokio::test]
async fn a_backup_during_a_live_session_leaves_it_answering() {
    let (workspaces, repo) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let app = backed_up_app(workspaces.path(), &repo.path().join("r"), |_| {}).await;
    let (_, token) = app.user("alice").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    let ws = workspaces.path().join("alice");
    std::fs::create_dir_all(&ws).unwrap();
    for i in 0..40 {
        std::fs::write(ws.join(format!("part-{i}.bin")), noise(i, 1 << 20)).unwrap();
    }
    let backing_up = {
        let (client_app, token) = (app.url("/api/v1/backups"), token.clone());
        tokio::spawn(async move {
            let client =
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .build_http();
            let answer = client
                .request(
                    Request::post(client_app)
                        .header("authorization", format!("Bearer {token}"))
                        .body(Full::new(Bytes::new()))
                        .unwrap(),
                )
                .await
                .unwrap();
            answer.status()
        })
    };
    let mut answered = 0;
    while !backing_up.is_finished() {
        let status = app.get(&format!("/s/{id}/api/status"), Some(&token)).await;
        status.assert_status(StatusCode::OK);
        answered += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(backing_up.await.unwrap(), StatusCode::CREATED);
    assert!(answered > 0);
    let view = app
        .get(&format!("/api/v1/sessions/{id}"), Some(&token))
        .await
        .json();
    assert_eq!(view["state"], "ready", "the session goes on: {view}");
}

#[tokio::test]
async fn the_schedule_backs_every_workspace_up_when_it_is_due() {
    let (workspaces, repo) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let runtime = Arc::new(FakeRuntime {
        workspaces: Some(workspaces.path().to_path_buf()),
        ..FakeRuntime::plain()
    });
    let place = repo.path().join("r").display().to_string();
    let app = TestApp::start_clocked(Some(runtime), move |c| {
        c.backups.enabled = true;
        c.backups.repository = place;
        c.backups.schedule = "every 1h".into();
        c.idle.reaper_period_ms = 50;
    })
    .await;
    let (alice_id, token) = app.user("alice").await;
    let (carol_id, _) = app.user("carol").await;
    fill_workspace(&workspaces.path().join("alice"));
    // Carol never launched: she has no workspace, and nothing is recorded for her.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        app.store
            .backup_record(&alice_id)
            .await
            .unwrap()
            .unwrap()
            .attempted_at
            .is_none(),
        "not due yet"
    );
    app.advance(Duration::from_secs(3600));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let record = app.store.backup_record(&alice_id).await.unwrap().unwrap();
        if record.attempted_at.is_some() {
            assert!(record.ok, "{record:?}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the scheduled pass ran"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let listed = app.get("/api/v1/backups", Some(&token)).await.json();
    assert_eq!(listed["snapshots"].as_array().unwrap().len(), 1, "{listed}");
    assert!(
        app.store
            .backup_record(&carol_id)
            .await
            .unwrap()
            .unwrap()
            .attempted_at
            .is_none()
    );
}

#[tokio::test]
async fn the_dashboard_lists_the_snapshots_and_its_restore_form_answers_with_a_page() {
    use crate::accounts::{path_of, server_fn};
    let (workspaces, repo) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let app = backed_up_app(workspaces.path(), &repo.path().join("r"), |_| {}).await;
    let (_, token) = app.user("alice").await;
    let ws = workspaces.path().join("alice");
    fill_workspace(&ws);
    let snapshot = back_up(&app, &token).await;
    let cookie = app.sign_in_cookie("alice").await;
    let page = server_fn(&app, path_of::<app::api::LoadDashboard>(), &cookie, "").await;
    page.assert_status(StatusCode::OK);
    let card = page.json()["drawn"]["backups"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        card.contains(r#"href="/api/v1/workspace/export""#),
        "{card}"
    );
    assert!(
        card.contains(&format!(r#"action="/api/v1/backups/{snapshot}/restore""#)),
        "{card}"
    );
    assert!(card.contains("daily at 02:30 UTC"), "{card}");

    std::fs::remove_file(ws.join("notes.txt")).unwrap();
    let form = |path: &str, body: &str| {
        Request::post(app.url(path))
            .header("cookie", format!("sandbox_session={cookie}"))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("sec-fetch-site", "same-origin")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap()
    };
    let restored = app
        .send(form(
            &format!("/api/v1/backups/{snapshot}/restore"),
            "path=notes.txt",
        ))
        .await;
    restored.assert_status(StatusCode::OK);
    let text = String::from_utf8_lossy(&restored.body).to_string();
    assert!(
        text.contains("Restored notes.txt into the folder restored-"),
        "{text}"
    );
    let folder = std::fs::read_dir(&ws)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("restored-")
        })
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(folder.join("notes.txt")).unwrap(),
        "first words\n"
    );
    let refused = app
        .send(form(
            &format!("/api/v1/backups/{snapshot}/restore"),
            "path=..%2Fx",
        ))
        .await;
    refused.assert_status(StatusCode::BAD_REQUEST);
    assert!(String::from_utf8_lossy(&refused.body).contains("no `..`"));
    // Cross-site, the same form is refused.
    let mut cross = form("/api/v1/backups", "");
    cross
        .headers_mut()
        .insert("sec-fetch-site", "cross-site".parse().unwrap());
    app.send(cross).await.assert_status(StatusCode::FORBIDDEN);
    let again = app.send(form("/api/v1/backups", "")).await;
    again.assert_status(StatusCode::OK);
    assert!(String::from_utf8_lossy(&again.body).contains("Your workspace is backed up"));
}

/// Whether `path` is where a file system is mounted (its own ext4 image, as root).
fn is_mount_point(path: &Path) -> bool {
    let path = std::fs::canonicalize(path).unwrap();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(path.to_str().unwrap()))
}

/// A server with the real local runtime and backups on, into a repository of its own (kept
/// while the returned folder lives).
async fn real_lab_app() -> (TestApp, tempfile::TempDir) {
    let lab = crate::common::tools_dir().join("venv/bin/jupyter-lab");
    assert!(
        lab.exists(),
        "JupyterLab is not installed; run scripts/setup.sh"
    );
    let repo = tempfile::tempdir().unwrap();
    let place = repo.path().join("r").display().to_string();
    let app = TestApp::start_with(None, move |c| {
        c.backups.enabled = true;
        c.backups.repository = place;
    })
    .await;
    (app, repo)
}

#[tokio::test]
async fn a_real_jupyterlab_saves_is_backed_up_live_and_reads_what_was_restored() {
    let (app, _repo) = real_lab_app().await;
    let (_, token) = app.user("alice").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    let ws = app.runtime.workspace_dir("alice").unwrap();
    // As root the workspace is a file system of its own: read through its mount.
    // SAFETY: geteuid(2) reads the process's own id and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        assert!(is_mount_point(&ws), "{} is mounted", ws.display());
    }

    // JupyterLab saves a notebook (by its atomic write) into the workspace.
    let notebook = serde_json::json!({
        "type": "notebook", "format": "json",
        "content": { "cells": [{ "cell_type": "markdown", "metadata": {}, "source": "kept" }],
                     "metadata": {}, "nbformat": 4, "nbformat_minor": 5 }
    });
    app.call(
        http::Method::PUT,
        &format!("/s/{id}/api/contents/nb.ipynb"),
        Some(&token),
        Some(notebook),
    )
    .await
    .assert_status(StatusCode::CREATED);
    std::fs::create_dir_all(ws.join("data")).unwrap();
    std::fs::write(ws.join("data/weights.bin"), noise(5, 4 << 20)).unwrap();

    let snapshot = back_up(&app, &token).await;
    app.get(&format!("/s/{id}/api/status"), Some(&token))
        .await
        .assert_status(StatusCode::OK);
    let exported = app.get("/api/v1/workspace/export", Some(&token)).await;
    exported.assert_status(StatusCode::OK);
    let unpacked = unpack(&exported.body);
    let files = |root: &Path| {
        tree(root)
            .into_iter()
            .filter(|(k, _)| !k.starts_with('.'))
            .collect::<BTreeMap<_, _>>()
    };
    assert_eq!(
        files(unpacked.path()),
        files(&ws),
        "the export is the workspace, read through its mount"
    );

    // The notebook is deleted in the editor, then restored: the editor reads the copy.
    app.delete(&format!("/s/{id}/api/contents/nb.ipynb"), Some(&token))
        .await
        .assert_status(StatusCode::NO_CONTENT);
    let restored = post(
        &app,
        &format!("/api/v1/backups/{snapshot}/restore"),
        &token,
        Some(serde_json::json!({ "path": "nb.ipynb" })),
    )
    .await;
    restored.assert_status(StatusCode::CREATED);
    let folder = restored.json()["folder"].as_str().unwrap().to_string();
    let read = app
        .get(
            &format!("/s/{id}/api/contents/{folder}/nb.ipynb"),
            Some(&token),
        )
        .await;
    read.assert_status(StatusCode::OK);
    assert_eq!(read.json()["content"]["cells"][0]["source"], "kept");
    // The editor may change what was restored: it is its user's.
    app.call(
        http::Method::DELETE,
        &format!("/s/{id}/api/contents/{folder}/nb.ipynb"),
        Some(&token),
        None,
    )
    .await
    .assert_status(StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn a_restore_past_the_workspaces_quota_fails_clearly_and_leaves_nothing() {
    let lab = crate::common::tools_dir().join("venv/bin/jupyter-lab");
    assert!(
        lab.exists(),
        "JupyterLab is not installed; run scripts/setup.sh"
    );
    let repo = tempfile::tempdir().unwrap();
    let place = repo.path().join("r").display().to_string();
    let app = TestApp::start_with(None, move |c| {
        c.backups.enabled = true;
        c.backups.repository = place;
        c.quotas.max_disk_mib = 64;
    })
    .await;
    let (_, token) = app.user("alice").await;
    let _id = app.launch_ready(&token, "jupyterlab").await;
    let ws = app.runtime.workspace_dir("alice").unwrap();
    if !is_mount_point(&ws) {
        eprintln!("skipped: workspaces are file systems of their own only as root");
        return;
    }
    std::fs::write(ws.join("data.bin"), noise(8, 36 << 20)).unwrap();
    let snapshot = back_up(&app, &token).await;
    let before = tree(&ws);
    let full = post(
        &app,
        &format!("/api/v1/backups/{snapshot}/restore"),
        &token,
        None,
    )
    .await;
    full.assert_status(StatusCode::SERVICE_UNAVAILABLE);
    let message = full.json()["message"].as_str().unwrap().to_string();
    assert!(message.contains("no room left"), "{message}");
    assert_eq!(
        tree(&ws),
        before,
        "nothing half-restored is left, nothing current was touched"
    );
}

/// A workspace follows its user: on a server with no workspace for them (a fresh disk, the same
/// database and repository), their first launch restores the newest snapshot as the workspace,
/// says so in its steps, and the editor reads the files as its own. Where nothing was backed
/// up, the launch starts empty and says nothing of it.
#[tokio::test]
async fn a_users_first_launch_where_no_workspace_is_brings_the_backup_back() {
    let (app, _repo) = real_lab_app().await;
    let (_, alice) = app.user("alice").await;
    let ws = app.runtime.workspace_dir("alice").unwrap();
    std::fs::create_dir_all(ws.join("data")).unwrap();
    std::fs::write(ws.join("data/notes.txt"), "carried over").unwrap();
    back_up(&app, &alice).await;
    std::fs::remove_dir_all(&ws).unwrap();

    let id = app.launch_ready(&alice, "jupyterlab").await;
    let view = app
        .get(&format!("/api/v1/sessions/{id}"), Some(&alice))
        .await
        .json();
    let said = serde_json::to_string(&view["steps"]).unwrap();
    assert!(
        said.contains("Restored your workspace from its backup of"),
        "{said}"
    );
    let read = app
        .get(
            &format!("/s/{id}/api/contents/data/notes.txt?content=1"),
            Some(&alice),
        )
        .await;
    read.assert_status(StatusCode::OK);
    assert_eq!(read.json()["content"], "carried over");
    assert_eq!(
        std::fs::read_to_string(ws.join("data/notes.txt")).unwrap(),
        "carried over"
    );

    // Nobody else's backup comes along: bob starts empty, and no step says otherwise.
    let (_, bob) = app.user("bob").await;
    let id = app.launch_ready(&bob, "jupyterlab").await;
    let view = app
        .get(&format!("/api/v1/sessions/{id}"), Some(&bob))
        .await
        .json();
    let said = serde_json::to_string(&view["steps"]).unwrap();
    assert!(!said.contains("backup"), "{said}");
    assert!(
        !app.runtime
            .workspace_dir("bob")
            .unwrap()
            .join("data")
            .exists()
    );
}
