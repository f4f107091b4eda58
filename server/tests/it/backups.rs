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
    std::os::unix::fs::symlink(workspaces.path().join("bob"), ws.join("to-bob")).unwrap();

    for (path, why) in [
        ("../bob", "no `..`"),
        ("..%2Fbob%2Fsecret", "no `..`"),
        ("%2Fetc", "relative"),
        ("to-bob/secret", "behind a link"),
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
    assert_eq!(tree(unpack(&his.body).path()).len(), 1);

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
