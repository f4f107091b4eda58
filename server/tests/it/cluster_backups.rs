//! Workspace backups on a cluster: VolumeSnapshots of the workspace claim, against the simulated
//! cluster (its snapshot controller and node-local driver), through the chart's RBAC.

use crate::cluster::{
    SERVER_TOKEN, chart, chart_with, client, kube_config, node, pods_run_here, quick, start_cluster,
};
use app::domain::backups::Retention;
use serde_json::{Value, json};
use server::runtime::Runtime;
use server::runtime::kube::objects::UserPlan;
use server::runtime::kube::{KubeConfig, KubeRuntime, names};
use server::runtime::restic::RepositoryError;
use sim_cluster::validate::FieldValidation;
use sim_cluster::{Options, SimCluster};

const CLASS: &str = "csi-snapclass";
// 2026-12-05 08:30:00 UTC.
const AT: i64 = 1_796_459_400_000;
const DAY: i64 = 86_400_000;

fn snapshot_config(class: &str) -> KubeConfig {
    KubeConfig {
        snapshot_class: class.into(),
        ..kube_config()
    }
}

/// The cluster's VolumeSnapshotClass, as its admin installs it with the CSI driver.
fn add_class(cluster: &SimCluster) {
    let kind =
        sim_cluster::kinds::by_kind("snapshot.storage.k8s.io/v1", "VolumeSnapshotClass").unwrap();
    cluster
        .api
        .create(
            kind,
            None,
            json!({"metadata": {"name": CLASS}, "driver": "hostpath.csi.k8s.io", "deletionPolicy": "Delete"}),
            FieldValidation::Strict,
            None,
        )
        .expect("the class");
}

fn snapshots_in(cluster: &SimCluster, namespace: &str) -> Vec<Value> {
    cluster
        .api
        .store
        .read(|o| o.list("volumesnapshots", Some(namespace)))
}

fn contents_of(cluster: &SimCluster) -> Vec<Value> {
    cluster
        .api
        .store
        .read(|o| o.list("volumesnapshotcontents", None))
}

fn namespace_of(user: &str) -> String {
    names::namespace_of(&kube_config().namespace_prefix, user)
}

/// The user's namespace and workspace claim, as a first launch makes them.
async fn with_workspace(runtime: &KubeRuntime, user: &str) {
    let plan = UserPlan::new(runtime.config(), user);
    runtime
        .ensure_user(&plan)
        .await
        .expect("the user's objects");
}

/// A snapshot request carries the right spec and is listed back once the controller has it
/// ready; a restore makes a claim from it and copies a file, then everything, into new
/// `restored-<date>` folders, never over what is there; the retention deletes the oldest.
#[tokio::test]
async fn workspace_snapshots_are_taken_listed_restored_and_pruned() {
    if !pods_run_here() {
        return;
    }
    let cluster = SimCluster::start(Options {
        rbac: chart().clone(),
        service_accounts: vec![(
            crate::cluster::SERVER_NAMESPACE.into(),
            "gpu-sandbox".into(),
            SERVER_TOKEN.into(),
        )],
        nodes: vec![node("backup-node")],
    })
    .await
    .unwrap();
    add_class(&cluster);
    let runtime = KubeRuntime::new(client(&cluster, SERVER_TOKEN).await, snapshot_config(CLASS))
        .with_timing(quick());
    with_workspace(&runtime, "erin").await;
    let namespace = namespace_of("erin");
    let volume = cluster.kubelets[0].volume_path(&namespace, names::WORKSPACE_PVC);
    std::fs::create_dir_all(volume.join("notes")).unwrap();
    std::fs::write(volume.join("notes/a.txt"), "first words").unwrap();
    std::fs::write(volume.join("b.txt"), "kept").unwrap();
    // The editor's user owns the workspace, as the kubelet gives it to the pod's fsGroup.
    std::process::Command::new("chown")
        .args(["-R", "1000:100"])
        .arg(&volume)
        .status()
        .unwrap();

    let snapshots = runtime.workspace_snapshots().expect("backups by snapshot");
    let done = snapshots.back_up("erin", AT).await.expect("a snapshot");
    let objects = snapshots_in(&cluster, &namespace);
    assert_eq!(objects.len(), 1);
    assert_eq!(objects[0]["metadata"]["name"], "workspace-20261205-083000");
    assert_eq!(
        objects[0]["spec"],
        json!({"source": {"persistentVolumeClaimName": "workspace"}, "volumeSnapshotClassName": CLASS})
    );
    assert_eq!(objects[0]["status"]["readyToUse"], true);
    // The controller made its content, cluster-scoped and bound both ways, as a CSI
    // snapshotter does; the server never touches contents (the chart grants it none).
    let contents = contents_of(&cluster);
    assert_eq!(contents.len(), 1);
    let content = &contents[0];
    assert_eq!(
        objects[0]["status"]["boundVolumeSnapshotContentName"],
        content["metadata"]["name"]
    );
    assert_eq!(
        content["spec"]["volumeSnapshotRef"],
        json!({"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
            "name": "workspace-20261205-083000", "namespace": namespace,
            "uid": objects[0]["metadata"]["uid"]})
    );
    assert_eq!(content["spec"]["driver"], "hostpath.csi.k8s.io");
    assert_eq!(content["spec"]["deletionPolicy"], "Delete");
    assert_eq!(content["status"]["readyToUse"], true);
    let listed = snapshots.snapshots("erin").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, done.snapshot_id);
    assert_eq!(listed[0].time_ms, AT);

    // Changed and deleted after the backup.
    std::fs::write(volume.join("notes/a.txt"), "second words").unwrap();
    std::fs::remove_file(volume.join("b.txt")).unwrap();
    let folder = snapshots
        .restore("erin", &listed[0], Some("notes/a.txt"))
        .await
        .expect("a file restored");
    assert_eq!(folder, "restored-2026-12-05-0830");
    assert_eq!(
        std::fs::read_to_string(volume.join(&folder).join("notes/a.txt")).unwrap(),
        "first words"
    );
    assert_eq!(
        std::fs::read_to_string(volume.join("notes/a.txt")).unwrap(),
        "second words",
        "the current file is left as it is"
    );
    let whole = snapshots.restore("erin", &listed[0], None).await.unwrap();
    assert_eq!(
        whole, "restored-2026-12-05-0830-2",
        "never into one that is there"
    );
    assert_eq!(
        std::fs::read_to_string(volume.join(&whole).join("b.txt")).unwrap(),
        "kept"
    );
    let missing = snapshots
        .restore("erin", &listed[0], Some("no/such"))
        .await
        .unwrap_err();
    assert!(
        matches!(&missing, RepositoryError::NotInSnapshot(p) if p == "no/such"),
        "{missing}"
    );
    // The restore's claim and pod are gone again (the claim once its pod is: pvc-protection).
    let count = || {
        cluster.api.store.read(|o| {
            (
                o.list("persistentvolumeclaims", Some(&namespace)).len(),
                o.list("pods", Some(&namespace)).len(),
            )
        })
    };
    for _ in 0..100 {
        if count() == (1, 0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(count(), (1, 0), "only the workspace claim stays");

    // Two more days: keep the newest two days, the oldest goes.
    snapshots.back_up("erin", AT + DAY).await.unwrap();
    snapshots.back_up("erin", AT + 2 * DAY).await.unwrap();
    snapshots
        .forget(
            "erin",
            Retention {
                keep_daily: 2,
                keep_weekly: 0,
            },
        )
        .await
        .unwrap();
    let mut kept: Vec<String> = snapshots_in(&cluster, &namespace)
        .iter()
        .map(|s| s["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    kept.sort();
    assert_eq!(
        kept,
        ["workspace-20261206-083000", "workspace-20261207-083000"]
    );
    // The forgotten snapshot's content goes with it (the class's deletionPolicy: Delete).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while contents_of(&cluster).len() != 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the forgotten snapshot's content is deleted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    cluster.shut_down().await;
}

/// A class the cluster does not have: the API server takes the object (a CRD does not look
/// classes up), the snapshot controller says why in its status, and the backup fails with
/// those words and leaves no snapshot behind.
#[tokio::test]
async fn an_unknown_snapshot_class_fails_the_backup_with_the_controllers_words() {
    let cluster = start_cluster(chart().clone()).await;
    add_class(&cluster);
    let runtime = KubeRuntime::new(
        client(&cluster, SERVER_TOKEN).await,
        snapshot_config("no-such-class"),
    )
    .with_timing(quick());
    with_workspace(&runtime, "fred").await;
    let failed = runtime
        .workspace_snapshots()
        .unwrap()
        .back_up("fred", AT)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        failed.contains("volumesnapshotclass.snapshot.storage.k8s.io \"no-such-class\" not found"),
        "{failed}"
    );
    assert!(snapshots_in(&cluster, &namespace_of("fred")).is_empty());
}

/// The API server refuses a VolumeSnapshot as the CRD's schema does: without a source, with
/// two sources, or with a field the schema does not have (strict, or applied).
#[tokio::test]
async fn the_simulated_api_server_refuses_a_malformed_volume_snapshot() {
    let cluster = start_cluster(chart().clone()).await;
    let runtime = KubeRuntime::new(client(&cluster, SERVER_TOKEN).await, snapshot_config(CLASS));
    with_workspace(&runtime, "gina").await;
    let namespace = namespace_of("gina");
    let kind = sim_cluster::kinds::by_kind("snapshot.storage.k8s.io/v1", "VolumeSnapshot").unwrap();
    let create = |body: Value, validation| {
        cluster
            .api
            .create(kind, Some(&namespace), body, validation, None)
            .map(|_| ())
            .map_err(|r| (r.code, r.message))
    };
    let no_source = create(
        json!({"metadata": {"name": "a"}, "spec": {"volumeSnapshotClassName": CLASS}}),
        FieldValidation::Strict,
    )
    .unwrap_err();
    assert_eq!(no_source.0, 422);
    assert!(
        no_source.1.contains("spec.source: Required value"),
        "{}",
        no_source.1
    );
    let both = create(
        json!({"metadata": {"name": "b"}, "spec": {"source": {"persistentVolumeClaimName": "workspace", "volumeSnapshotContentName": "c"}}}),
        FieldValidation::Strict,
    )
    .unwrap_err();
    assert_eq!(both.0, 422);
    let unknown = create(
        json!({"metadata": {"name": "c"}, "spec": {"source": {"persistentVolumeClaimName": "workspace"}, "retainDays": 3}}),
        FieldValidation::Strict,
    )
    .unwrap_err();
    assert_eq!(unknown.0, 400);
    assert!(
        unknown.1.contains("unknown field \"spec.retainDays\""),
        "{}",
        unknown.1
    );
    create(
        json!({"metadata": {"name": "d"}, "spec": {"source": {"persistentVolumeClaimName": "workspace"}}}),
        FieldValidation::Strict,
    )
    .expect("a well-formed one");
    // Its source is fixed once made.
    let target = sim_cluster::api::Target {
        kind,
        namespace: Some(namespace.clone()),
        name: "d".into(),
    };
    let changed = cluster
        .api
        .merge(
            &target,
            &json!({"spec": {"source": {"persistentVolumeClaimName": "other"}}}),
            false,
            "someone",
        )
        .unwrap_err();
    assert_eq!(changed.code, 422);
}

/// The chart's rule for volumesnapshots is what lets the server back up: without it the
/// API server refuses, and the backup says an administrator must grant it.
#[tokio::test]
async fn backups_on_the_cluster_need_the_charts_volumesnapshot_rule() {
    let without = chart_with(|rules| {
        rules.retain(|rule| rule["resources"] != json!(["volumesnapshots"]));
    });
    for (rbac, granted) in [(without, false), (chart().clone(), true)] {
        let cluster = start_cluster(rbac).await;
        add_class(&cluster);
        let runtime =
            KubeRuntime::new(client(&cluster, SERVER_TOKEN).await, snapshot_config(CLASS))
                .with_timing(quick());
        with_workspace(&runtime, "hal").await;
        let taken = runtime
            .workspace_snapshots()
            .unwrap()
            .back_up("hal", AT)
            .await;
        if granted {
            taken.expect("taken with the chart's rule");
            assert_eq!(snapshots_in(&cluster, &namespace_of("hal")).len(), 1);
        } else {
            let said = taken.unwrap_err().to_string();
            assert!(said.contains("not allowed"), "{said}");
            assert!(snapshots_in(&cluster, &namespace_of("hal")).is_empty());
        }
    }
}

/// Through the product's REST API on the cluster: a user backs up now, sees the snapshot in
/// their list, and an admin sees their last backup; another user's snapshot id is a 404.
#[tokio::test]
async fn users_back_up_and_list_their_snapshots_through_the_api_on_a_cluster() {
    use http::{Method, StatusCode};
    let cluster = start_cluster(chart().clone()).await;
    add_class(&cluster);
    let runtime = KubeRuntime::new(client(&cluster, SERVER_TOKEN).await, snapshot_config(CLASS));
    let app = crate::common::TestApp::start_kube(runtime, |c| {
        c.kube = snapshot_config(CLASS);
        c.backups.enabled = true;
    })
    .await;
    // The product's server has backups on (its config), and ida has a workspace claim.
    let side = KubeRuntime::new(client(&cluster, SERVER_TOKEN).await, snapshot_config(CLASS));
    let (_, token) = app.user("ida").await;
    with_workspace(&side, "ida").await;
    let made = app
        .call(Method::POST, "/api/v1/backups", Some(&token), None)
        .await;
    made.assert_status(StatusCode::CREATED);
    assert_eq!(made.json()["ok"], true, "{}", made.json());
    let view = app.get("/api/v1/backups", Some(&token)).await.json();
    let listed = view["snapshots"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{view}");
    let (_, other) = app.user("jon").await;
    let id = listed[0]["id"].as_str().unwrap();
    let stranger = app
        .call(
            Method::POST,
            &format!("/api/v1/backups/{id}/restore"),
            Some(&other),
            None,
        )
        .await;
    assert_eq!(stranger.status, StatusCode::NOT_FOUND);
    // jon has no workspace yet: nothing to back up, said as such.
    let nothing = app
        .call(Method::POST, "/api/v1/backups", Some(&other), None)
        .await;
    nothing.assert_status(StatusCode::BAD_REQUEST);
    app.stop().await;
    cluster.shut_down().await;
}
