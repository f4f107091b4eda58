//! Workspace exports on a cluster, against the simulated cluster through the chart's RBAC and
//! admission: tar runs in the user's running editor pod (its exec API) or, with no session, in a
//! short-lived reader pod that mounts the claim; the bytes, unpacked, are the volume's files.

use crate::backups::{BURST, fill_workspace, noise, read_paced, tree, unpack};
use crate::cluster::{
    SERVER_NAMESPACE, SERVER_TOKEN, chart, client, kube_config, node, pods_run_here, product_with,
};
use crate::common::TestApp;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use server::runtime::kube::export::READER_POD;
use server::runtime::kube::objects::UserPlan;
use server::runtime::kube::{KubeRuntime, names};
use sim_cluster::{Options, SimCluster};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn namespace_of(user: &str) -> String {
    names::namespace_of(&kube_config().namespace_prefix, user)
}

/// The names of the pods in `namespace`, as the API server holds them.
fn pods_in(cluster: &SimCluster, namespace: &str) -> Vec<String> {
    cluster.api.store.read(|o| {
        o.list("pods", Some(namespace))
            .iter()
            .map(|p| {
                p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    })
}

async fn until_no_pods(cluster: &SimCluster, namespace: &str, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !pods_in(cluster, namespace).is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The user's workspace volume on the node, with the test's files under `work/` (nested
/// folders, names with spaces and brackets, a link inside) and two links leading out of it,
/// owned by the editor's user as the kubelet gives the volume to the pod's fsGroup.
fn volume_with_files(cluster: &SimCluster, user: &str) -> PathBuf {
    let volume = cluster.kubelets[0].volume_path(&namespace_of(user), names::WORKSPACE_PVC);
    let work = volume.join("work");
    fill_workspace(&work);
    std::fs::write(
        work.join("notebooks/runs/a file with spaces.txt"),
        "spaced\n",
    )
    .unwrap();
    std::os::unix::fs::symlink("/etc", work.join("out")).unwrap();
    std::os::unix::fs::symlink("/usr", work.join("usr")).unwrap();
    let chown = std::process::Command::new("chown")
        .args(["-R", "1000:100"])
        .arg(&volume)
        .status()
        .unwrap();
    assert!(chown.success());
    work
}

/// The export of `path` (None: all), its status and body.
async fn export(app: &TestApp, token: &str, path: Option<&str>) -> crate::common::Response {
    let query = path.map_or_else(String::new, |p| format!("?path={p}"));
    app.get(&format!("/api/v1/workspace/export{query}"), Some(token))
        .await
}

/// What the export's unpacked `work/` holds against the volume's, and a folder's export.
fn assert_export_is(answer: &crate::common::Response, work: &Path) {
    answer.assert_status(StatusCode::OK);
    assert_eq!(answer.headers["content-type"], "application/gzip");
    let unpacked = unpack(&answer.body);
    assert_eq!(
        tree(&unpacked.path().join("work")),
        tree(work),
        "the export is the workspace"
    );
}

/// The export on the cluster, through a real JupyterLab's pod and then, its session ended,
/// through a reader pod that goes when the download ends: the bytes, unpacked, equal the
/// volume's; a folder's export holds that folder; what leads out is a 400 with its reason.
#[tokio::test]
async fn on_the_cluster_an_export_reads_the_volume_through_the_editor_or_a_reader_pod() {
    if !pods_run_here() {
        return;
    }
    let (cluster, app) = product_with(vec![node("export-node")], |_| {}).await;
    let (_, token) = app.user("fern").await;
    let namespace = namespace_of("fern");
    // The dashboard offers the download on a cluster too, with no snapshot class set.
    let cookie = app.sign_in_cookie("fern").await;
    let dashboard = crate::accounts::server_fn(
        &app,
        crate::accounts::path_of::<app::api::LoadDashboard>(),
        &cookie,
        "",
    )
    .await;
    dashboard.assert_status(StatusCode::OK);
    let card = dashboard.json()["drawn"]["backups"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(card.contains(r#"data-testid="export-workspace""#), "{card}");
    // Before any session there is no workspace to read: said so, no pod made.
    let none = export(&app, &token, None).await;
    none.assert_status(StatusCode::BAD_REQUEST);
    assert!(
        none.json()["message"]
            .as_str()
            .unwrap()
            .contains("your workspace is empty"),
        "{:?}",
        none.json()
    );
    assert!(pods_in(&cluster, &namespace).is_empty());

    let session = app.launch_ready(&token, "jupyterlab").await;
    let work = volume_with_files(&cluster, "fern");
    let before = pods_in(&cluster, &namespace);
    assert_eq!(before.len(), 1, "{before:?}");
    assert_export_is(&export(&app, &token, None).await, &work);

    let folder = export(&app, &token, Some("work/notebooks")).await;
    folder.assert_status(StatusCode::OK);
    let unpacked = unpack(&folder.body);
    let top: Vec<String> = std::fs::read_dir(unpacked.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(top, ["notebooks"], "a folder's export holds that folder");
    assert_eq!(
        tree(&unpacked.path().join("notebooks")),
        tree(&work.join("notebooks"))
    );
    let file = export(
        &app,
        &token,
        Some("work/notebooks/runs/a%20file%20with%20spaces.txt"),
    )
    .await;
    file.assert_status(StatusCode::OK);
    let unpacked = unpack(&file.body);
    assert_eq!(
        std::fs::read_to_string(unpacked.path().join("a file with spaces.txt")).unwrap(),
        "spaced\n"
    );

    for (path, says) in [
        ("../fern", "no `..`"),
        ("/etc", "without a leading `/`"),
        ("work/out/passwd", "lies behind a link"),
        ("work/usr/bin/sh", "leads outside your workspace"),
        ("work/nothing/here", "no file or folder `work/nothing/here`"),
    ] {
        let refused = export(&app, &token, Some(path)).await;
        assert_eq!(
            refused.status,
            StatusCode::BAD_REQUEST,
            "{path}: {}",
            String::from_utf8_lossy(&refused.body)
        );
        let message = refused.json()["message"].as_str().unwrap().to_string();
        assert!(message.contains(says), "{path}: {message}");
    }
    // All of it went through the editor's pod: no other pod was made.
    assert_eq!(pods_in(&cluster, &namespace), before);

    // The session ends and its pod goes: a reader pod mounts the claim for the next export,
    // and goes with its download.
    let stopped = app
        .delete(&format!("/api/v1/sessions/{session}"), Some(&token))
        .await;
    assert!(stopped.status.is_success(), "{:?}", stopped.status);
    app.wait_for(&token, &session, |v| v["state"] == "ended")
        .await;
    until_no_pods(&cluster, &namespace, "the editor's pod went").await;
    assert_export_is(&export(&app, &token, None).await, &work);
    let refused = export(&app, &token, Some("work/out/passwd")).await;
    refused.assert_status(StatusCode::BAD_REQUEST);
    until_no_pods(
        &cluster,
        &namespace,
        "the reader pod went with its download",
    )
    .await;
    app.stop().await;
    cluster.shut_down().await;
}

/// Through a reader pod the export keeps its pace by the server's clock (moved by hand here,
/// never measured) and still unpacks to the volume's files; a download left half-read takes
/// its reader pod with it.
#[tokio::test]
async fn on_the_cluster_an_export_goes_no_faster_than_its_cap() {
    if !pods_run_here() {
        return;
    }
    const CAP: u64 = 256 * 1024;
    let cluster = SimCluster::start(Options {
        rbac: chart().clone(),
        service_accounts: vec![(
            SERVER_NAMESPACE.into(),
            "gpu-sandbox".into(),
            SERVER_TOKEN.into(),
        )],
        nodes: vec![node("paced-node")],
    })
    .await
    .unwrap();
    let kube = kube_config();
    let runtime = KubeRuntime::new(client(&cluster, SERVER_TOKEN).await, kube.clone());
    runtime
        .ensure_user(&UserPlan::new(runtime.config(), "gil"))
        .await
        .expect("the user's namespace and volume");
    let app = TestApp::start_kube_clocked(runtime, |c| {
        c.kube = kube;
        c.backups.export_bytes_per_second = CAP;
        c.backups.export_max_seconds = 0;
    })
    .await;
    let (_, token) = app.user("gil").await;
    let namespace = namespace_of("gil");
    let volume = cluster.kubelets[0].volume_path(&namespace, names::WORKSPACE_PVC);
    std::fs::create_dir_all(&volume).unwrap();
    std::fs::write(volume.join("big.bin"), noise(17, 1 << 20)).unwrap();
    let request = || {
        Request::get(app.url("/api/v1/workspace/export"))
            .header("authorization", format!("Bearer {token}"))
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    let answer = app.open(request()).await;
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(
        answer.headers()["x-export-limits"],
        "at most 256 KiB/s, no time limit"
    );
    assert_eq!(pods_in(&cluster, &namespace), [READER_POD]);
    let (got, moved_ms) = read_paced(&app, answer, CAP).await;
    assert_eq!(tree(unpack(&got).path()), tree(&volume));
    assert!(moved_ms * CAP / 1000 + BURST >= got.len() as u64);
    until_no_pods(
        &cluster,
        &namespace,
        "the reader pod went with its download",
    )
    .await;

    // A download left after its first chunk: its reader pod goes too.
    let answer = app.open(request()).await;
    assert_eq!(answer.status(), StatusCode::OK);
    let mut body = answer.into_body();
    assert!(body.frame().await.is_some());
    assert_eq!(pods_in(&cluster, &namespace), [READER_POD]);
    drop(body);
    until_no_pods(&cluster, &namespace, "a left download's reader pod went").await;
    app.stop().await;
    cluster.shut_down().await;
}
