//! Shared datasets: the admin API's refusals and who may use what (with a stand-in runtime), and
//! from inside real sandboxed JupyterLab kernels: a permitted user reads a dataset and can
//! neither change it nor reach past it, another user does not see it, one added while a session
//! runs appears in the next session, and one whose folder has gone is a launch step.

use crate::common::{FakeRuntime, Response, TestApp};
use crate::isolation::run_python;
use http::{Method, StatusCode};
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn refused(response: &Response, status: StatusCode, says: &str) {
    response.assert_status(status);
    let message = response.json()["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(message.contains(says), "expected '{says}' in: {message}");
}

/// A folder outside the data directory (and outside `/tmp`, which a sandbox has its own of),
/// holding `<name>/data.txt` (open to everyone's writes on the host: only the mount holds it)
/// and, beside the dataset, `secret.txt`.
fn host_folder(names: &[&str]) -> (tempfile::TempDir, Vec<PathBuf>) {
    let root = tempfile::Builder::new()
        .prefix("datasets-")
        .tempdir_in("/var/tmp")
        .expect("a folder in /var/tmp");
    std::fs::write(root.path().join("secret.txt"), "beside the dataset").unwrap();
    let folders = names
        .iter()
        .map(|name| {
            let folder = root.path().join(name);
            std::fs::create_dir(&folder).unwrap();
            std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o777)).unwrap();
            let file = folder.join("data.txt");
            std::fs::write(&file, format!("rows of {name}")).unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
            // A link out of the dataset, to the file beside it on the host.
            std::os::unix::fs::symlink("../secret.txt", folder.join("escape")).unwrap();
            folder
        })
        .collect();
    (root, folders)
}

async fn add(app: &TestApp, token: &str, body: Value) -> Response {
    app.call(
        Method::POST,
        "/api/v1/admin/datasets",
        Some(token),
        Some(body),
    )
    .await
}

fn names(listed: &Value) -> Vec<String> {
    listed
        .as_array()
        .expect("a list")
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn admins_register_datasets_and_bad_input_is_a_400_naming_the_reason() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    let root = app.admin_token("root").await;
    let (_, alice) = app.user("alice").await;
    let (_, bob) = app.user("bob").await;
    let (host, folders) = host_folder(&["imagenet", "public"]);
    let path = |p: &Path| p.to_string_lossy().into_owned();

    // A user reaches none of the admin's routes.
    let body = json!({"name": "x", "path": path(&folders[0]), "users": "everyone"});
    add(&app, &alice, body.clone())
        .await
        .assert_status(StatusCode::FORBIDDEN);
    app.get("/api/v1/admin/datasets", Some(&alice))
        .await
        .assert_status(StatusCode::FORBIDDEN);
    for method in [Method::PATCH, Method::DELETE] {
        app.call(
            method,
            "/api/v1/admin/datasets/any",
            Some(&alice),
            Some(json!({})),
        )
        .await
        .assert_status(StatusCode::FORBIDDEN);
    }

    let data_dir_inside = app.dir.path().join("workspaces");
    std::fs::create_dir_all(&data_dir_inside).unwrap();
    for (body, says) in [
        (
            json!({"name": "gone", "path": path(&host.path().join("gone")), "users": "everyone"}),
            "does not exist",
        ),
        (
            json!({"name": "file", "path": path(&host.path().join("secret.txt")), "users": "everyone"}),
            "is not a directory",
        ),
        (
            json!({"name": "ws", "path": path(&data_dir_inside), "users": "everyone"}),
            "inside the server's data directory",
        ),
        (
            json!({"name": "above", "path": path(app.dir.path().parent().unwrap()), "users": "everyone"}),
            "holds the server's data directory",
        ),
        (
            json!({"name": "x", "path": path(&folders[0]), "users": ["alice", "nobody"]}),
            "no such user: `nobody`",
        ),
        (
            json!({"name": "Bad Name", "path": path(&folders[0]), "users": "everyone"}),
            "not a dataset name",
        ),
        (
            json!({"name": "x", "claim": "imagenet-ro", "users": "everyone"}),
            "give the dataset's folder as path",
        ),
        (
            json!({"name": "x", "path": "relative/x", "users": "everyone"}),
            "absolute",
        ),
        (
            json!({"name": "x", "path": path(&folders[0]), "users": "all"}),
            "malformed JSON",
        ),
    ] {
        refused(&add(&app, &root, body).await, StatusCode::BAD_REQUEST, says);
    }

    let added = add(
        &app,
        &root,
        json!({"name": "imagenet", "description": "ILSVRC 2012", "path": path(&folders[0]), "users": ["alice"]}),
    )
    .await;
    added.assert_status(StatusCode::CREATED);
    let imagenet = added.json();
    assert_eq!(imagenet["users"], json!(["alice"]));
    assert_eq!(imagenet["added_by"], "root");
    add(
        &app,
        &root,
        json!({"name": "public", "path": path(&folders[1]), "users": "everyone"}),
    )
    .await
    .assert_status(StatusCode::CREATED);
    refused(
        &add(
            &app,
            &root,
            json!({"name": "imagenet", "path": path(&folders[1]), "users": "everyone"}),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "that name is taken",
    );

    // Each caller lists what they may use, and where their sessions find it.
    let of = |token: String| {
        let app = &app;
        async move { app.get("/api/v1/datasets", Some(&token)).await.json() }
    };
    let alices = of(alice.clone()).await;
    assert_eq!(names(&alices), ["imagenet", "public"]);
    assert_eq!(alices[0]["mounted_at"], "~/datasets/imagenet");
    assert!(
        alices[0].get("path").is_none(),
        "users are not told host paths"
    );
    assert_eq!(names(&of(bob.clone()).await), ["public"]);
    assert_eq!(
        names(&of(root.clone()).await),
        ["public"],
        "an admin is a user here"
    );
    assert_eq!(
        names(&app.get("/api/v1/admin/datasets", Some(&root)).await.json()),
        ["imagenet", "public"]
    );

    // Changes: to everyone; a name taken; gone.
    let id = imagenet["id"].as_str().unwrap();
    let at = format!("/api/v1/admin/datasets/{id}");
    let changed = app
        .call(
            Method::PATCH,
            &at,
            Some(&root),
            Some(json!({"users": "everyone"})),
        )
        .await;
    changed.assert_status(StatusCode::OK);
    assert_eq!(changed.json()["description"], "ILSVRC 2012", "kept");
    assert_eq!(names(&of(bob.clone()).await), ["imagenet", "public"]);
    refused(
        &app.call(
            Method::PATCH,
            &at,
            Some(&root),
            Some(json!({"name": "public"})),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "taken",
    );
    app.delete(&at, Some(&root))
        .await
        .assert_status(StatusCode::NO_CONTENT);
    app.delete(&at, Some(&root))
        .await
        .assert_status(StatusCode::NOT_FOUND);
    assert_eq!(names(&of(bob).await), ["public"]);
    let audited = app
        .sql_i64(
            "SELECT COUNT(*) FROM audit_events WHERE action LIKE $1",
            "dataset.%",
        )
        .await;
    assert_eq!(audited, 4, "two adds, a change, a removal");
}

/// Python that tries each thing and prints what happened, one `key=outcome` per line.
const PROBE: &str = r#"
import os, errno
home = os.path.expanduser('~')
d = os.path.join(home, 'datasets', 'imagenet')
def attempt(key, f):
    try:
        out = f()
        print(f"{key}=ok:{out}")
    except OSError as e:
        print(f"{key}=refused:{errno.errorcode.get(e.errno, e.errno)}")
attempt('read', lambda: open(os.path.join(d, 'data.txt')).read())
attempt('write', lambda: open(os.path.join(d, 'data.txt'), 'a').write('x'))
attempt('create', lambda: open(os.path.join(d, 'new.txt'), 'w').write('x'))
attempt('delete', lambda: os.remove(os.path.join(d, 'data.txt')))
attempt('rename', lambda: os.rename(os.path.join(d, 'data.txt'), os.path.join(d, 'moved.txt')))
attempt('chmod', lambda: os.chmod(os.path.join(d, 'data.txt'), 0o600))
attempt('escape', lambda: open(os.path.join(d, 'escape')).read())
attempt('parent', lambda: sorted(os.listdir(os.path.join(d, '..'))))
attempt('host', lambda: open(HOST_SECRET).read())
"#;

fn outcomes(printed: &str) -> std::collections::BTreeMap<String, String> {
    printed
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn a_permitted_user_reads_a_dataset_and_can_neither_change_it_nor_reach_past_it() {
    let app = TestApp::start(None).await;
    let root = app.admin_token("root").await;
    let (_, alice) = app.user("alice").await;
    let (_, bob) = app.user("bob").await;
    let (host, folders) = host_folder(&["imagenet"]);
    add(
        &app,
        &root,
        json!({"name": "imagenet", "path": folders[0].to_string_lossy(), "users": ["alice"]}),
    )
    .await
    .assert_status(StatusCode::CREATED);

    let session = app.launch_ready(&alice, "jupyterlab").await;
    let view = app
        .get(&format!("/api/v1/sessions/{session}"), Some(&alice))
        .await
        .json();
    assert_eq!(view["datasets"], json!(["imagenet"]), "its page lists it");
    let said = serde_json::to_string(&view["steps"]).unwrap();
    assert!(
        said.contains("Datasets, read-only in ~/datasets: imagenet"),
        "{said}"
    );
    let secret = host.path().join("secret.txt");
    let code = PROBE.replace("HOST_SECRET", &format!("{:?}", secret.to_string_lossy()));
    let got = outcomes(&run_python(&app, &alice, &session, &code).await);
    assert_eq!(got["read"], "ok:rows of imagenet", "{got:?}");
    for key in ["write", "create", "delete", "rename", "chmod"] {
        assert_eq!(got[key], "refused:EROFS", "{key}: {got:?}");
    }
    assert!(got["escape"].starts_with("refused:ENOENT"), "{got:?}");
    assert_eq!(
        got["parent"], "ok:['imagenet']",
        "above the dataset is the user's own ~/datasets, not the host's folder: {got:?}"
    );
    assert!(got["host"].starts_with("refused:ENOENT"), "{got:?}");
    assert_eq!(
        std::fs::read_to_string(folders[0].join("data.txt")).unwrap(),
        "rows of imagenet",
        "the host's file is as it was"
    );

    // Bob may not use it: his session has no such folder, and his page lists nothing.
    let his = app.launch_ready(&bob, "jupyterlab").await;
    let seen = run_python(
        &app,
        &bob,
        &his,
        "import os\nprint(os.path.exists(os.path.expanduser('~/datasets/imagenet')))",
    )
    .await;
    assert_eq!(seen.trim(), "False");
    let view = app
        .get(&format!("/api/v1/sessions/{his}"), Some(&bob))
        .await
        .json();
    assert!(view.get("datasets").is_none(), "{view}");
}

async fn stop_and_wait(app: &TestApp, token: &str, id: &str) {
    app.delete(&format!("/api/v1/sessions/{id}"), Some(token))
        .await
        .assert_status(StatusCode::OK);
    app.wait_for(token, id, |v| v["state"] == "ended").await;
}

#[tokio::test]
async fn a_dataset_added_while_a_session_runs_appears_in_the_next_and_a_missing_one_is_a_step() {
    let app = TestApp::start(None).await;
    let root = app.admin_token("root").await;
    let (_, alice) = app.user("alice").await;
    let (_host, folders) = host_folder(&["first", "second", "gone"]);
    let register = |name: &'static str, folder: &Path| {
        let body = json!({"name": name, "path": folder.to_string_lossy(), "users": "everyone"});
        let (app, root) = (&app, root.clone());
        async move {
            add(app, &root, body)
                .await
                .assert_status(StatusCode::CREATED);
        }
    };
    register("first", &folders[0]).await;
    let listing = "import os\nprint(sorted(os.listdir(os.path.expanduser('~/datasets'))))";

    let one = app.launch_ready(&alice, "jupyterlab").await;
    register("second", &folders[1]).await;
    let seen = run_python(&app, &alice, &one, listing).await;
    assert_eq!(seen.trim(), "['first']", "decided at launch");
    stop_and_wait(&app, &alice, &one).await;

    // The next session has it; a dataset whose folder has gone is said, and the editor starts.
    register("gone", &folders[2]).await;
    std::fs::remove_dir_all(&folders[2]).unwrap();
    let two = app.launch_ready(&alice, "jupyterlab").await;
    let read = run_python(
        &app,
        &alice,
        &two,
        "import os\nprint(open(os.path.expanduser('~/datasets/second/data.txt')).read())",
    )
    .await;
    assert_eq!(read.trim(), "rows of second");
    let view = app
        .get(&format!("/api/v1/sessions/{two}"), Some(&alice))
        .await
        .json();
    assert_eq!(view["datasets"], json!(["first", "second"]));
    let said = serde_json::to_string(&view["steps"]).unwrap();
    assert!(
        said.contains("Dataset gone is missing on this server; launched without it"),
        "{said}"
    );
    let admins = app.get("/api/v1/admin/datasets", Some(&root)).await.json();
    let gone = admins
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "gone")
        .unwrap();
    assert_eq!(gone["missing"], true, "the admin page says so too");
}

/// A pre-started editor's sandbox was made before anyone took it, without datasets: a user with
/// datasets gets an editor started for them, with their datasets, and the warm one stays.
#[tokio::test]
async fn a_user_with_datasets_is_not_given_a_pre_started_editor_without_them() {
    let app = TestApp::start_with(None, |c| {
        c.pool.warm = vec![server::config::WarmTarget {
            editor: "jupyterlab".into(),
            slice_mib: 8192,
            count: 1,
        }];
    })
    .await;
    let warm = tokio::time::timeout(std::time::Duration::from_secs(120), async {
        loop {
            let warm = app.store.warm_editors().await.unwrap();
            if warm.iter().any(|w| w.ready) {
                return warm;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("a warm editor within two minutes");
    let root = app.admin_token("root").await;
    let (_, alice) = app.user("alice").await;
    let (_host, folders) = host_folder(&["shared"]);
    add(
        &app,
        &root,
        json!({"name": "shared", "path": folders[0].to_string_lossy(), "users": ["alice"]}),
    )
    .await
    .assert_status(StatusCode::CREATED);
    let session = app.launch_ready(&alice, "jupyterlab").await;
    assert!(
        !warm.iter().any(|w| w.id == session),
        "the pre-started editor was not handed over"
    );
    let read = run_python(
        &app,
        &alice,
        &session,
        "import os\nprint(open(os.path.expanduser('~/datasets/shared/data.txt')).read())",
    )
    .await;
    assert_eq!(read.trim(), "rows of shared");
}
