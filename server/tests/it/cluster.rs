//! The kube runtime, unchanged, against the simulated cluster (`server/sim-cluster`) over TCP:
//! its requests pass the API server's schema, server-side apply, admission and the RBAC the chart
//! grants (rendered by `scripts/render-chart.sh`), or fail as they would on a real cluster.

use app::domain::launch::EditorKind;
use serde_json::{Value, json};
use server::runtime::kube::{KubeConfig, KubeRuntime, Timing};
use server::runtime::{EditorLaunch, Runtime, SliceBinding};
use sim_cluster::{ADMIN_TOKEN, Options, SimCluster};
use std::sync::OnceLock;
use std::time::Duration;

/// The chart's namespace and service account, as `scripts/render-chart.sh` renders it.
const SERVER_NAMESPACE: &str = "gpu-sandbox";
const SERVER_ACCOUNT: &str = "gpu-sandbox";
const SERVER_TOKEN: &str = "server-token";

/// The chart, rendered once per test run.
fn chart() -> &'static Vec<Value> {
    static CHART: OnceLock<Vec<Value>> = OnceLock::new();
    CHART.get_or_init(|| {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let out = std::process::Command::new(root.join("scripts/render-chart.sh"))
            .output()
            .expect("scripts/render-chart.sh");
        assert!(
            out.status.success(),
            "render-chart: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("the chart as JSON")
    })
}

/// The chart's objects with `edit` applied to its ClusterRole's rules.
fn chart_with(edit: impl Fn(&mut Vec<Value>)) -> Vec<Value> {
    let mut objects = chart().clone();
    for object in &mut objects {
        if object["kind"] == "ClusterRole"
            && let Some(rules) = object["rules"].as_array_mut()
        {
            edit(rules);
        }
    }
    objects
}

async fn start_cluster(rbac: Vec<Value>) -> SimCluster {
    SimCluster::start(Options {
        rbac,
        service_accounts: vec![(
            SERVER_NAMESPACE.into(),
            SERVER_ACCOUNT.into(),
            SERVER_TOKEN.into(),
        )],
        logs: None,
    })
    .await
    .expect("the simulated cluster")
}

async fn client(cluster: &SimCluster, token: &str) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&cluster.kubeconfig(token)).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    kube::Client::try_from(config).unwrap()
}

fn quick() -> Timing {
    Timing {
        poll: Duration::from_millis(50),
        watch_seconds: 2,
        start_timeout: Duration::from_secs(2),
        unschedulable_grace: Duration::ZERO,
    }
}

fn kube_config() -> KubeConfig {
    KubeConfig {
        server_namespace: SERVER_NAMESPACE.into(),
        ..KubeConfig::default()
    }
}

fn launch(user: &str, session_id: &str) -> EditorLaunch {
    EditorLaunch {
        session_id: session_id.into(),
        user_name: user.into(),
        editor: EditorKind::JupyterLab,
        base_path: format!("/s/{session_id}/"),
        env: vec![],
        slice: SliceBinding {
            memory_mib: 8192,
            cores_pct: 25,
            ..SliceBinding::default()
        },
        prestart: false,
        image: None,
        disk_mib: 0,
    }
}

/// Everything a launch writes, as the API server holds it afterwards.
fn objects_in(cluster: &SimCluster, namespace: &str) -> Vec<(String, String)> {
    let store = &cluster.api.store;
    store.read(|o| {
        o.objects
            .keys()
            .filter(|(r, ns, name)| ns == namespace || (r == "namespaces" && name == namespace))
            .map(|(r, _, name)| (r.clone(), name.clone()))
            .collect()
    })
}

/// The launch path of the kube runtime passes what the chart's RBAC grants, the schema of every
/// object, server-side apply and admission: the user's namespace, quota, limits, network policy,
/// account, volume, token and pod all land. No node runs the pod here (no kubelet yet), so the
/// start times out, says so, and takes its pod and token away again.
#[tokio::test]
async fn a_launch_writes_every_object_through_the_charts_rbac_and_the_schema() {
    let cluster = start_cluster(chart().clone()).await;
    let runtime =
        KubeRuntime::new(client(&cluster, SERVER_TOKEN).await, kube_config()).with_timing(quick());
    let refused = runtime
        .start(&launch("alice", "s1"))
        .await
        .expect_err("no node takes the pod");
    let said = refused.to_string();
    assert!(!said.contains("forbidden"), "{said}");
    let namespace =
        server::runtime::kube::names::namespace_of(&kube_config().namespace_prefix, "alice");
    let written = objects_in(&cluster, &namespace);
    let kinds: Vec<&str> = written.iter().map(|(r, _)| r.as_str()).collect();
    for wanted in [
        "namespaces",
        "resourcequotas",
        "limitranges",
        "networkpolicies",
        "serviceaccounts",
        "persistentvolumeclaims",
    ] {
        assert!(kinds.contains(&wanted), "{wanted} missing from {written:?}");
    }
    assert!(
        !kinds.contains(&"pods") && !kinds.contains(&"secrets"),
        "a failed start removes its pod and token: {written:?}"
    );
    // Written by server-side apply under the product's field manager.
    let quota = cluster.api.store.read(|o| {
        o.list("resourcequotas", Some(&namespace))
            .into_iter()
            .next()
            .unwrap()
    });
    assert_eq!(
        quota["metadata"]["managedFields"][0]["manager"],
        json!(kube_config().field_manager)
    );
    assert_eq!(quota["metadata"]["managedFields"][0]["operation"], "Apply");
}

/// A verb the chart forgot fails the launch as it would on a cluster: with the API server's
/// refusal, said as a missing permission, not a hang.
#[tokio::test]
async fn a_verb_missing_from_the_chart_fails_the_launch_with_a_clear_message() {
    // The chart as if its author forgot pods in the rule for what goes into a user's namespace.
    let without_pods = chart_with(|rules| {
        for rule in rules.iter_mut() {
            if let Some(resources) = rule["resources"].as_array_mut() {
                resources.retain(|r| r != "pods");
            }
        }
    });
    let cluster = start_cluster(without_pods).await;
    let runtime =
        KubeRuntime::new(client(&cluster, SERVER_TOKEN).await, kube_config()).with_timing(quick());
    let started =
        tokio::time::timeout(Duration::from_secs(30), runtime.start(&launch("bob", "s2")))
            .await
            .expect("an answer, not a hang");
    let said = started.expect_err("refused").to_string();
    assert_eq!(
        said,
        "The server is not allowed to create the editor pod in the cluster; an administrator must grant it."
    );
    // With the chart as it is, the same request passes RBAC.
    let cluster = start_cluster(chart().clone()).await;
    let runtime =
        KubeRuntime::new(client(&cluster, SERVER_TOKEN).await, kube_config()).with_timing(quick());
    let said = runtime
        .start(&launch("bob", "s2"))
        .await
        .unwrap_err()
        .to_string();
    assert!(!said.contains("not allowed"), "{said}");
}

/// The API server refuses what a cluster refuses, to the product's own client: an unknown
/// token, a stale write, a watch from a compacted version (410), a bad name.
#[tokio::test]
async fn the_simulated_api_server_refuses_what_a_cluster_refuses() {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use kube::api::{Api, PostParams, WatchEvent, WatchParams};
    let cluster = start_cluster(chart().clone()).await;
    let stranger = client(&cluster, "no-such-token").await;
    let err = Api::<Namespace>::all(stranger)
        .list(&Default::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 401),
        "{err:?}"
    );
    let admin = client(&cluster, ADMIN_TOKEN).await;
    let namespaces = Api::<Namespace>::all(admin.clone());
    let bad: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "Not_A_Name"}})).unwrap();
    let err = namespaces
        .create(&PostParams::default(), &bad)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422 && s.message.contains("RFC 1123 label")),
        "{err:?}"
    );
    let ok: Namespace = serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap();
    let made = namespaces
        .create(&PostParams::default(), &ok)
        .await
        .unwrap();
    let maps = Api::<ConfigMap>::namespaced(admin.clone(), "team");
    let map: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "m"}, "data": {"a": "1"}})).unwrap();
    let first = maps.create(&PostParams::default(), &map).await.unwrap();
    let mut stale = first.clone();
    maps.replace("m", &PostParams::default(), &first)
        .await
        .unwrap();
    stale.data = Some([("a".to_string(), "2".to_string())].into());
    let err = maps
        .replace("m", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409),
        "{err:?}"
    );
    // A watch resumes from a version in the window and sees the change after it.
    let version = made.metadata.resource_version.clone().unwrap();
    let mut events = Box::pin(
        maps.watch(&WatchParams::default().timeout(2), &version)
            .await
            .unwrap(),
    );
    use futures_util::StreamExt;
    let first_event = events.next().await.unwrap().unwrap();
    assert!(
        matches!(&first_event, WatchEvent::Added(m) if m.metadata.name.as_deref() == Some("m"))
    );
    // Enough writes push that version out of the window: 410 Gone, as after a compaction.
    for i in 0..=sim_cluster::store::WINDOW {
        let map: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("m{i}")}})).unwrap();
        maps.create(&PostParams::default(), &map).await.unwrap();
    }
    let mut events = Box::pin(
        maps.watch(&WatchParams::default().timeout(2), &version)
            .await
            .unwrap(),
    );
    let gone = events.next().await.unwrap().unwrap();
    assert!(
        matches!(&gone, WatchEvent::Error(e) if e.code == 410),
        "{gone:?}"
    );
}
