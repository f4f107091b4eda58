//! Shared datasets on a cluster, against the simulated cluster through the chart's RBAC: per
//! user and dataset a read-only volume and claim pre-bound to each other, made from the source
//! in `[kube.dataset_sources]`, mounted read-only at `~/datasets/<name>`; a launch that cannot
//! attach one says so in a step and starts without it; a departed user's volumes go.

use crate::cluster::{
    SERVER_TOKEN, chart, chart_with, client, kube_config, node, pods_run_here, product_with, quick,
    start_cluster,
};
use http::{Method, StatusCode};
use serde_json::{Value, json};
use server::config::dataset_sources::{DatasetSource, NfsSource};
use server::runtime::Runtime;
use server::runtime::kube::datasets::{Attached, Wanted, claim_name, volume_name};
use server::runtime::kube::{KubeConfig, KubeRuntime, names};
use sim_cluster::SimCluster;
use std::time::Duration;

const NFS_SERVER: &str = "nfs.lab.internal";

fn with_sources(config: &mut KubeConfig) {
    exported_at("/exports/imagenet")(config);
}

/// The `imagenet` source at `path` of the NFS server.
fn exported_at(path: &str) -> impl Fn(&mut KubeConfig) + use<> {
    let path = path.to_string();
    move |config: &mut KubeConfig| {
        config.dataset_sources.insert(
            "imagenet".into(),
            DatasetSource {
                nfs: Some(NfsSource {
                    server: NFS_SERVER.into(),
                    path: path.clone(),
                }),
                csi: None,
            },
        );
    }
}

fn namespace_of(user: &str) -> String {
    names::namespace_of(&kube_config().namespace_prefix, user)
}

/// The NFS server the cluster reaches, as the simulated cluster's storage table maps it: a host
/// folder holding `/exports/imagenet/readme.txt`.
fn serve_nfs(cluster: &SimCluster) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    export(root.path(), "imagenet", "the first 1000 classes");
    export(root.path(), "imagenet-v2", "the second release");
    let table = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": sim_cluster::volumes::STORAGE_CONFIG, "namespace": sim_cluster::volumes::STORAGE_NAMESPACE},
        "data": {NFS_SERVER: root.path().to_string_lossy()},
    });
    cluster.api.store.write(|o| o.put("configmaps", table));
    root
}

/// `/exports/<name>/readme.txt` holding `line`, under the NFS server's folder `root`.
fn export(root: &std::path::Path, name: &str, line: &str) {
    let export = root.join("exports").join(name);
    std::fs::create_dir_all(&export).unwrap();
    std::fs::write(export.join("readme.txt"), format!("{line}\n")).unwrap();
    // Readable by the editor's user, as an export is to its clients.
    use std::os::unix::fs::PermissionsExt;
    for dir in [root, &root.join("exports"), &export] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(
        export.join("readme.txt"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    // Owned by the editor's user (uid 1000), as an export squashing to it would be: only the
    // read-only mount keeps the session from writing.
    for path in [export.clone(), export.join("readme.txt")] {
        std::os::unix::fs::chown(&path, Some(1000), Some(100)).unwrap();
    }
}

fn volumes(cluster: &SimCluster) -> Vec<Value> {
    cluster
        .api
        .store
        .read(|o| o.list("persistentvolumes", None))
}

fn volume_names(cluster: &SimCluster) -> Vec<Value> {
    volumes(cluster)
        .iter()
        .map(|v| v["metadata"]["name"].clone())
        .collect()
}

fn claim(cluster: &SimCluster, namespace: &str, name: &str) -> Option<Value> {
    cluster
        .api
        .store
        .read(|o| o.get("persistentvolumeclaims", namespace, name).cloned())
}

async fn until(
    cluster: &SimCluster,
    what: &str,
    check: impl Fn(&sim_cluster::store::Objects) -> bool,
) {
    for _ in 0..600 {
        if cluster.api.store.read(&check) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}: not seen");
}

fn imagenet() -> Vec<Wanted> {
    vec![Wanted {
        name: "imagenet".into(),
        source: "imagenet".into(),
    }]
}

/// The runtime's part, without a node: a pair per user, bound, made again without change; a
/// departed user's volumes deleted (cluster-scoped, they do not go with the namespace) and
/// another's kept; the chart without the volume grant refused in words.
#[tokio::test]
async fn each_user_gets_their_own_bound_pair_and_loses_it_on_departure() {
    let mut config = kube_config();
    with_sources(&mut config);
    let cluster = start_cluster(chart().clone()).await;
    let runtime =
        KubeRuntime::new(client(&cluster, SERVER_TOKEN).await, config.clone()).with_timing(quick());
    for user in ["gail", "hank", "gail"] {
        let attached = runtime.attach_datasets(user, &imagenet()).await;
        assert_eq!(
            attached,
            vec![("imagenet".to_string(), Ok(Attached::Ready))],
            "{user}"
        );
    }
    let all = volumes(&cluster);
    assert_eq!(all.len(), 2, "one volume per user, made once: {all:?}");
    for user in ["gail", "hank"] {
        let namespace = namespace_of(user);
        let pv = all
            .iter()
            .find(|v| v["metadata"]["name"] == volume_name(&namespace, "imagenet"))
            .unwrap_or_else(|| panic!("{user}'s volume: {all:?}"));
        assert_eq!(pv["spec"]["claimRef"]["namespace"], namespace.as_str());
        assert_eq!(pv["spec"]["claimRef"]["name"], claim_name("imagenet"));
        assert_eq!(pv["spec"]["persistentVolumeReclaimPolicy"], "Retain");
        assert_eq!(pv["spec"]["accessModes"], json!(["ReadOnlyMany"]));
        assert_eq!(pv["spec"]["nfs"]["readOnly"], true);
        assert_eq!(pv["status"]["phase"], "Bound");
        let pvc = claim(&cluster, &namespace, &claim_name("imagenet")).expect("the claim");
        assert_eq!(pvc["status"]["phase"], "Bound", "{pvc}");
    }
    runtime
        .remove_workspace("gail")
        .await
        .expect("gail's storage goes");
    // Terminating until its claim has gone with the namespace (pv-protection).
    let gail = volume_name(&namespace_of("gail"), "imagenet");
    until(&cluster, "gail's volume goes", |o| {
        o.get("persistentvolumes", "", &gail).is_none()
    })
    .await;
    assert_eq!(
        volume_names(&cluster),
        vec![json!(volume_name(&namespace_of("hank"), "imagenet"))]
    );
    cluster.shut_down().await;

    // The chart as if it forgot the volumes: the dataset is refused, said as a missing grant.
    let without = chart_with(|rules| {
        rules.retain(|r| r["resources"] != json!(["persistentvolumes"]));
    });
    let cluster = start_cluster(without).await;
    let runtime =
        KubeRuntime::new(client(&cluster, SERVER_TOKEN).await, config).with_timing(quick());
    let attached = runtime.attach_datasets("gail", &imagenet()).await;
    let why = attached[0].1.clone().expect_err("refused");
    assert_eq!(
        why,
        "The server is not allowed to create the dataset's volume in the cluster; an administrator must grant it."
    );
    assert!(volumes(&cluster).is_empty());
    cluster.shut_down().await;
}

/// The volume controller binds a claim to the volume it names only when they match, and a pod
/// on an unbound claim is not scheduled, as a cluster does: through the product's own client.
#[tokio::test]
async fn a_claim_that_does_not_match_its_volume_stays_pending_with_the_reason() {
    use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim};
    use kube::api::{Api, PostParams};
    let cluster = start_cluster(chart().clone()).await;
    let admin = client(&cluster, sim_cluster::ADMIN_TOKEN).await;
    let default: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap();
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &default)
        .await
        .unwrap();
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "small"},
        "spec": {"capacity": {"storage": "1Mi"}, "accessModes": ["ReadOnlyMany"],
                 "storageClassName": "", "nfs": {"server": NFS_SERVER, "path": "/exports/x"}}
    }))
    .unwrap();
    Api::<PersistentVolume>::all(admin.clone())
        .create(&PostParams::default(), &pv)
        .await
        .unwrap();
    let no_source: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "nothing"},
        "spec": {"capacity": {"storage": "1Mi"}, "accessModes": ["ReadOnlyMany"]}
    }))
    .unwrap();
    let refused = Api::<PersistentVolume>::all(admin.clone())
        .create(&PostParams::default(), &no_source)
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("must specify a volume type"), "{refused}");
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "big", "namespace": "default"},
        "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "", "volumeName": "small",
                 "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap();
    Api::<PersistentVolumeClaim>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &pvc)
        .await
        .unwrap();
    until(&cluster, "the controller's verdict", |o| {
        o.list("events", Some("default")).iter().any(|e| {
            e["reason"] == "VolumeMismatch"
                && e["message"]
                    == "Cannot bind to requested volume \"small\": requested PV is too small"
        })
    })
    .await;
    assert_eq!(
        claim(&cluster, "default", "big").unwrap()["status"]["phase"],
        "Pending"
    );
    cluster.shut_down().await;
}

async fn add(app: &crate::common::TestApp, root: &str, body: Value) -> crate::common::Response {
    app.call(
        Method::POST,
        "/api/v1/admin/datasets",
        Some(root),
        Some(body),
    )
    .await
}

/// A registration names a configured source or is refused with the reason; a source gone from
/// the configuration since is a launch step naming the dataset, and the editor's pod is
/// written without it: no volume, no claim.
#[tokio::test]
async fn an_unknown_source_is_a_400_and_a_source_gone_is_a_launch_step() {
    let (cluster, app) = product_with(Vec::new(), with_sources).await;
    let root = app.admin_token("root").await;
    let (_, token) = app.user("ivan").await;
    let bad = add(
        &app,
        &root,
        json!({"name": "x", "claim": "no-such", "users": "everyone"}),
    )
    .await;
    bad.assert_status(StatusCode::BAD_REQUEST);
    let said = bad.json()["message"].as_str().unwrap().to_string();
    assert!(
        said.contains("`no-such` is not a dataset source") && said.contains("configured: imagenet"),
        "{said}"
    );
    let folder = add(
        &app,
        &root,
        json!({"name": "here", "path": "/srv", "users": "everyone"}),
    )
    .await;
    folder.assert_status(StatusCode::BAD_REQUEST);
    // Registered while its source was configured; the configuration has lost it since.
    let admin_id = app.store.user_by_name("root").await.unwrap().unwrap().id;
    app.store
        .add_dataset(
            &server::store::DatasetWrite {
                name: "old",
                description: "",
                place: &app::domain::datasets::Place::Claim("retired".into()),
                everyone: true,
                user_ids: &[],
            },
            "",
            &admin_id,
        )
        .await
        .unwrap();
    let id = app.launch_id(&token, "jupyterlab").await;
    let namespace = namespace_of("ivan");
    until(&cluster, "the session's pod is written", |o| {
        !o.list("pods", Some(&namespace)).is_empty()
    })
    .await;
    let view = app
        .get(&format!("/api/v1/sessions/{id}"), Some(&token))
        .await
        .json();
    let steps = serde_json::to_string(&view["steps"]).unwrap();
    assert!(
        steps.contains(
            "Dataset old could not be attached: its source `retired` is not in the server's configuration (kube.dataset_sources); launched without it"
        ),
        "{steps}"
    );
    assert!(
        view["datasets"].as_array().is_none_or(Vec::is_empty),
        "{view}"
    );
    assert!(volumes(&cluster).is_empty());
    assert!(claim(&cluster, &namespace, &claim_name("old")).is_none());
    app.stop().await;
    cluster.shut_down().await;
}

/// The whole path with a real JupyterLab: a permitted user's session reads the export's file at
/// `~/datasets/imagenet` and cannot write there; a second permitted user gets a pair of their
/// own; a user without access gets none.
#[tokio::test]
async fn a_permitted_session_reads_the_dataset_and_cannot_write_it() {
    if !pods_run_here() {
        return;
    }
    let (cluster, app) = product_with(vec![node("dataset-node")], with_sources).await;
    let _nfs = serve_nfs(&cluster);
    let root = app.admin_token("root").await;
    let (_, dana) = app.user("dana").await;
    let (_, erin) = app.user("erin").await;
    let (_, frank) = app.user("frank").await;
    add(
        &app,
        &root,
        json!({"name": "imagenet", "claim": "imagenet", "users": ["dana", "erin"]}),
    )
    .await
    .assert_status(StatusCode::CREATED);
    let id = app.launch_ready(&dana, "jupyterlab").await;
    let namespace = namespace_of("dana");
    let pod = cluster.api.store.read(|o| o.list("pods", Some(&namespace)))[0].clone();
    let volume = pod["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "dataset-imagenet")
        .cloned()
        .unwrap_or_else(|| panic!("no dataset volume: {pod}"));
    assert_eq!(
        volume["persistentVolumeClaim"],
        json!({"claimName": "dataset-imagenet", "readOnly": true})
    );
    let printed = crate::isolation::run_python(
        &app,
        &dana,
        &id,
        r#"
import os
base = os.path.expanduser("~/datasets/imagenet")
print(open(os.path.join(base, "readme.txt")).read().strip())
for attempt in ("write", "delete"):
    try:
        if attempt == "write":
            open(os.path.join(base, "mine.txt"), "w").write("x")
        else:
            os.remove(os.path.join(base, "readme.txt"))
        print(attempt, "allowed")
    except OSError as e:
        print(attempt, "refused", e.strerror)
"#,
    )
    .await;
    assert_eq!(
        printed.trim(),
        "the first 1000 classes\nwrite refused Read-only file system\ndelete refused Read-only file system",
        "{printed}"
    );
    let view = app
        .get(&format!("/api/v1/sessions/{id}"), Some(&dana))
        .await
        .json();
    assert_eq!(view["datasets"], json!(["imagenet"]), "{view}");

    // Erin: a pair of her own. Frank, not permitted: none.
    for (token, user) in [(&erin, "erin"), (&frank, "frank")] {
        app.launch_id(token, "jupyterlab").await;
        let namespace = namespace_of(user);
        until(&cluster, "the pod is written", |o| {
            !o.list("pods", Some(&namespace)).is_empty()
        })
        .await;
    }
    assert_eq!(
        volume_names(&cluster),
        vec![
            json!(volume_name(&namespace_of("dana"), "imagenet")),
            json!(volume_name(&namespace_of("erin"), "imagenet")),
        ]
    );
    assert!(claim(&cluster, &namespace_of("erin"), &claim_name("imagenet")).is_some());
    assert!(claim(&cluster, &namespace_of("frank"), &claim_name("imagenet")).is_none());
    app.stop().await;
    cluster.shut_down().await;
}

/// The path of the user's volume's NFS export, and its uid.
fn export_of(cluster: &SimCluster, user: &str) -> (Value, Value) {
    let name = volume_name(&namespace_of(user), "imagenet");
    let pv = cluster
        .api
        .store
        .read(|o| o.get("persistentvolumes", "", &name).cloned())
        .unwrap_or_else(|| panic!("{user}'s volume"));
    (
        pv["spec"]["nfs"]["path"].clone(),
        pv["metadata"]["uid"].clone(),
    )
}

/// A source changed in the configuration after the volume was made (its source is immutable in
/// Kubernetes): while a live pod of the user mounts the claim, the old pair is kept and said so;
/// once none does, claim and volume are deleted and made again from the new source and bind.
#[tokio::test]
async fn a_changed_source_makes_the_pair_again_unless_a_pod_mounts_it() {
    let cluster = start_cluster(chart().clone()).await;
    let runtime_with = |path: &str| {
        let mut config = kube_config();
        exported_at(path)(&mut config);
        let cluster = &cluster;
        async move { KubeRuntime::new(client(cluster, SERVER_TOKEN).await, config).with_timing(quick()) }
    };
    let before = runtime_with("/exports/imagenet").await;
    let attached = before.attach_datasets("gail", &imagenet()).await;
    assert_eq!(attached[0].1, Ok(Attached::Ready));
    let (path, first_uid) = export_of(&cluster, "gail");
    assert_eq!(path, "/exports/imagenet");

    // A session of hers runs on it (a scheduled pod mounting the claim).
    let namespace = namespace_of("gail");
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "session-running", "namespace": namespace},
        "spec": {"nodeName": "elsewhere", "containers": [{"name": "editor", "image": "lab"}],
                 "volumes": [{"name": "dataset-imagenet",
                              "persistentVolumeClaim": {"claimName": claim_name("imagenet"), "readOnly": true}}]},
        "status": {"phase": "Running"}});
    cluster.api.store.write(|o| o.put("pods", pod));
    let after = runtime_with("/exports/imagenet-v2").await;
    let attached = after.attach_datasets("gail", &imagenet()).await;
    assert_eq!(attached[0].1, Ok(Attached::PreviousSource), "{attached:?}");
    assert_eq!(
        export_of(&cluster, "gail"),
        (json!("/exports/imagenet"), first_uid.clone()),
        "kept for the running session"
    );

    // The session ends: the next attach makes the pair again from the new source.
    cluster
        .api
        .store
        .write(|o| o.remove("pods", &namespace, "session-running"));
    let attached = after.attach_datasets("gail", &imagenet()).await;
    assert_eq!(attached[0].1, Ok(Attached::Ready), "{attached:?}");
    let (path, uid) = export_of(&cluster, "gail");
    assert_eq!(path, "/exports/imagenet-v2");
    assert_ne!(uid, first_uid, "a new volume");
    let pvc = claim(&cluster, &namespace, &claim_name("imagenet")).expect("the claim");
    assert_eq!(pvc["status"]["phase"], "Bound", "{pvc}");
    // Again without change: nothing is made again.
    after.attach_datasets("gail", &imagenet()).await;
    assert_eq!(export_of(&cluster, "gail").1, uid);
    cluster.shut_down().await;
}

/// A claim found still being deleted (held by a pod going away) is not applied over, to vanish
/// from under the next pod: the launch waits for it to go and makes the pair again.
#[tokio::test]
async fn a_claim_still_being_deleted_is_waited_on_and_made_again() {
    let mut config = kube_config();
    with_sources(&mut config);
    let cluster = start_cluster(chart().clone()).await;
    let runtime =
        KubeRuntime::new(client(&cluster, SERVER_TOKEN).await, config).with_timing(quick());
    runtime.attach_datasets("gail", &imagenet()).await;
    let namespace = namespace_of("gail");
    let name = claim_name("imagenet");
    let first = claim(&cluster, &namespace, &name).unwrap()["metadata"]["uid"].clone();
    // A stopping session's pod still mounts it when the claim is deleted: Terminating.
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "session-stopping", "namespace": namespace},
        "spec": {"nodeName": "elsewhere", "containers": [{"name": "editor", "image": "lab"}],
                 "volumes": [{"name": "dataset-imagenet", "persistentVolumeClaim": {"claimName": name}}]}});
    cluster.api.store.write(|o| o.put("pods", pod));
    let kind = sim_cluster::kinds::find("", "v1", "persistentvolumeclaims").unwrap();
    let target = sim_cluster::api::Target {
        kind,
        namespace: Some(namespace.clone()),
        name: name.clone(),
    };
    cluster.api.delete(&target, None).unwrap();
    let store = cluster.api.store.clone();
    let ns = namespace.clone();
    let gone = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        store.write(|o| o.remove("pods", &ns, "session-stopping"));
    });
    let attached = runtime.attach_datasets("gail", &imagenet()).await;
    gone.await.unwrap();
    assert_eq!(attached[0].1, Ok(Attached::Ready), "{attached:?}");
    // Past the controllers' next passes, the claim is a new one, bound, and stays.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let now = claim(&cluster, &namespace, &name).expect("the claim stays");
    assert_ne!(now["metadata"]["uid"], first, "made again");
    assert!(now["metadata"]["deletionTimestamp"].is_null(), "{now}");
    assert_eq!(now["status"]["phase"], "Bound", "{now}");
    cluster.shut_down().await;
}

/// `readme.txt` of the session's `~/datasets/imagenet`, read from inside its kernel.
async fn readme(app: &crate::common::TestApp, token: &str, id: &str) -> String {
    crate::isolation::run_python(
        app,
        token,
        id,
        "import os; print(open(os.path.expanduser('~/datasets/imagenet/readme.txt')).read().strip())",
    )
    .await
    .trim()
    .to_string()
}

/// A server on `cluster` whose `imagenet` source is at `path`, leaving its sessions running when
/// it stops; `same` points it at an earlier server's database.
async fn server_at(
    cluster: &SimCluster,
    path: &str,
    same: Option<&dyn Fn(&mut server::config::Config)>,
) -> crate::common::TestApp {
    let mut kube = kube_config();
    exported_at(path)(&mut kube);
    let runtime = KubeRuntime::new(client(cluster, SERVER_TOKEN).await, kube.clone());
    crate::common::TestApp::start_kube(runtime, |c| {
        if let Some(same) = same {
            same(c);
        }
        c.kube = kube;
        c.sessions.ready_timeout_seconds = 120;
        c.sessions.stop_on_shutdown = false;
    })
    .await
}

/// With real JupyterLabs: the source changes (a server restarted with a new configuration)
/// while a session runs; that session keeps reading the old export, a second session launched
/// meanwhile shares it and says the new source applies from the next session, and the next
/// session, once they have ended, reads the new export.
#[tokio::test]
async fn a_changed_source_reaches_the_next_session_and_spares_the_running_one() {
    if !pods_run_here() {
        return;
    }
    let (cluster, first) = product_with(vec![node("drift-node")], with_sources).await;
    first.stop().await;
    let _nfs = serve_nfs(&cluster);
    let app = server_at(&cluster, "/exports/imagenet", None).await;
    let root = app.admin_token("root").await;
    let (_, dana) = app.user("dana").await;
    add(
        &app,
        &root,
        json!({"name": "imagenet", "claim": "imagenet", "users": ["dana"]}),
    )
    .await
    .assert_status(StatusCode::CREATED);
    let running = app.launch_ready(&dana, "jupyterlab").await;
    assert_eq!(
        readme(&app, &dana, &running).await,
        "the first 1000 classes"
    );

    // The administrator moves the source; the server restarts with it.
    let same_store = app.same_store();
    let _data = app.stop().await;
    let app = server_at(&cluster, "/exports/imagenet-v2", Some(&same_store)).await;
    let beside = app.launch_ready(&dana, "jupyterlab").await;
    let view = app
        .get(&format!("/api/v1/sessions/{beside}"), Some(&dana))
        .await
        .json();
    let steps = serde_json::to_string(&view["steps"]).unwrap();
    assert!(
        steps.contains("Dataset imagenet: its source changed while another session of yours uses it; this session reads the previous source, the new one applies from your next session"),
        "{steps}"
    );
    assert_eq!(readme(&app, &dana, &beside).await, "the first 1000 classes");
    assert_eq!(
        readme(&app, &dana, &running).await,
        "the first 1000 classes",
        "the running session's mount still works"
    );

    for id in [&running, &beside] {
        app.delete(&format!("/api/v1/sessions/{id}"), Some(&dana))
            .await
            .assert_status(StatusCode::OK);
        app.wait_for(&dana, id, |v| v["state"] == "ended").await;
    }
    let next = app.launch_ready(&dana, "jupyterlab").await;
    assert_eq!(readme(&app, &dana, &next).await, "the second release");
    let view = app
        .get(&format!("/api/v1/sessions/{next}"), Some(&dana))
        .await
        .json();
    let steps = serde_json::to_string(&view["steps"]).unwrap();
    assert!(!steps.contains("its source changed"), "{steps}");
    assert_eq!(export_of(&cluster, "dana").0, "/exports/imagenet-v2");
    app.stop().await;
    cluster.shut_down().await;
}
