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
pub(crate) const SERVER_NAMESPACE: &str = "gpu-sandbox";
const SERVER_ACCOUNT: &str = "gpu-sandbox";
pub(crate) const SERVER_TOKEN: &str = "server-token";

/// Whether the simulated kubelet can run pods here (network namespaces and a bridge take root);
/// says why not. The tests without a node run anywhere.
pub(crate) fn pods_run_here() -> bool {
    // SAFETY: geteuid only reads this process's effective user id.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipped: the simulated kubelet makes network namespaces (not root)");
    }
    root
}

/// The chart, rendered once per test run.
pub(crate) fn chart() -> &'static Vec<Value> {
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
pub(crate) fn chart_with(edit: impl Fn(&mut Vec<Value>)) -> Vec<Value> {
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

pub(crate) async fn start_cluster(rbac: Vec<Value>) -> SimCluster {
    SimCluster::start(Options {
        rbac,
        service_accounts: vec![(
            SERVER_NAMESPACE.into(),
            SERVER_ACCOUNT.into(),
            SERVER_TOKEN.into(),
        )],
        nodes: Vec::new(),
    })
    .await
    .expect("the simulated cluster")
}

pub(crate) async fn client(cluster: &SimCluster, token: &str) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&cluster.kubeconfig(token)).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    kube::Client::try_from(config).unwrap()
}

pub(crate) fn quick() -> Timing {
    Timing {
        poll: Duration::from_millis(50),
        watch_seconds: 2,
        start_timeout: Duration::from_secs(2),
        unschedulable_grace: Duration::ZERO,
    }
}

pub(crate) fn kube_config() -> KubeConfig {
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
        datasets: Vec::new(),
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

/// A departed user's storage on a cluster is their namespace: deleting it (the chart grants
/// it) takes their volume claim and everything else of theirs; without the grant it is refused
/// in the API server's words, and the storage stays to be tried again.
#[tokio::test]
async fn a_departed_users_namespace_and_volume_claim_go_with_the_chart_s_grant() {
    let namespace =
        server::runtime::kube::names::namespace_of(&kube_config().namespace_prefix, "carol");
    let without_delete = chart_with(|rules| {
        for rule in rules.iter_mut() {
            if rule["resources"] == json!(["namespaces"])
                && let Some(verbs) = rule["verbs"].as_array_mut()
            {
                verbs.retain(|v| v != "delete");
            }
        }
    });
    for (rbac, granted) in [(without_delete, false), (chart().clone(), true)] {
        let cluster = start_cluster(rbac).await;
        let runtime = KubeRuntime::new(client(&cluster, SERVER_TOKEN).await, kube_config())
            .with_timing(quick());
        let _ = runtime.start(&launch("carol", "s9")).await;
        let kinds = |cluster: &SimCluster| -> Vec<String> {
            objects_in(cluster, &namespace)
                .into_iter()
                .map(|(r, _)| r)
                .collect()
        };
        assert!(kinds(&cluster).contains(&"persistentvolumeclaims".to_string()));
        let removed = runtime.remove_workspace("carol").await;
        if granted {
            removed.expect("the namespace is deleted");
            let mut left = kinds(&cluster);
            // A deadline far past what the deletion takes, so a busy machine does not fail it.
            for _ in 0..1200 {
                if left.is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                left = kinds(&cluster);
            }
            assert!(left.is_empty(), "nothing of carol's stays: {left:?}");
            // Gone already: a second try is done, not an error.
            runtime.remove_workspace("carol").await.unwrap();
        } else {
            let said = removed.expect_err("refused").to_string();
            assert!(said.contains("not allowed"), "{said}");
            assert!(kinds(&cluster).contains(&"persistentvolumeclaims".to_string()));
        }
    }
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
    if !pods_run_here() {
        return;
    }
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

/// A node of a simulated cluster: its kubelet runs the editor images from this machine's
/// editors (`SANDBOX_EDITORS__TOOLS_DIR`), on one 48 GB card split in ten.
pub(crate) fn node(name: &str) -> sim_cluster::NodeSpec {
    use sim_cluster::kubelet::{Config, Image};
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let tools = crate::common::tools_dir();
    let python = std::process::Command::new(tools.join("venv/bin/python3"))
        .args(["-c", "import sys; print(sys.base_prefix)"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let mut dirs = vec![tools.join("venv"), tools.join("npm")];
    if !python.is_empty() {
        dirs.push(python.into());
    }
    let images = KubeConfig::default().images;
    let name_of = |reference: &str| {
        let base = reference.split('@').next().unwrap();
        base.rsplit_once(':').map_or(base, |(n, _)| n).to_string()
    };
    let root = std::env::temp_dir().join(format!("sim-node-{}-{n}", std::process::id()));
    sim_cluster::NodeSpec {
        kubelet: Config {
            node: name.into(),
            root,
            images: [&images.jupyterlab, &images.marimo, &images.code_server]
                .into_iter()
                .map(|r| Image {
                    name: name_of(r),
                    dirs: dirs.clone(),
                })
                .collect(),
            subnet: std::net::Ipv4Addr::new(
                198,
                18,
                (std::process::id() % 200) as u8,
                (n % 4) as u8 * 64,
            ),
            bridge: format!("sb{:05}{:03}", std::process::id() % 100_000, n % 1000),
            system: ["/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc"]
                .into_iter()
                .map(std::path::PathBuf::from)
                .collect(),
            backoff: Duration::from_millis(500),
        },
        cards: vec![sim_cluster::scheduler::Card {
            uuid: format!("GPU-sim-{name}"),
            split: 10,
            memory_mib: 49152,
            cores: 100,
            model: "NVIDIA-L40S".into(),
        }],
    }
}

/// The whole session path on the cluster with a real editor: a launch through the product's
/// API becomes a pod the scheduler places with HAMi's annotations and the kubelet runs as a
/// real JupyterLab at its own pod IP; the session is ready when the pod's probe passes; the
/// proxy carries HTTP and a kernel's `1+1` over WebSocket to the pod; a stop deletes the pod
/// and the credits held for the unused time come back.
#[tokio::test]
async fn a_session_on_the_cluster_runs_a_real_jupyterlab_through_the_proxy() {
    if !pods_run_here() {
        return;
    }
    if !crate::common::tools_dir()
        .join("venv/bin/jupyter-lab")
        .exists()
    {
        panic!("JupyterLab is not installed: scripts/setup.sh --test");
    }
    let (cluster, app) = product_on(vec![node("gpu-node-1")]).await;
    let (carol, token) = app.user("carol").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    let namespace =
        server::runtime::kube::names::namespace_of(&kube_config().namespace_prefix, "carol");
    let pod = cluster
        .api
        .store
        .read(|o| o.list("pods", Some(&namespace)).into_iter().next())
        .expect("the session's pod");
    assert_eq!(pod["status"]["phase"], "Running");
    assert_eq!(
        pod["metadata"]["annotations"]["hami.io/vgpu-node"],
        "gpu-node-1"
    );
    let pod_ip = pod["status"]["podIP"].as_str().unwrap().to_string();
    assert!(pod_ip.starts_with("198.18."), "{pod_ip}");
    let record = app.record(&id).await;
    assert_eq!(
        record.upstream.as_deref(),
        Some(format!("{pod_ip}:8888").as_str())
    );
    let status = app.get(&format!("/s/{id}/api/status"), Some(&token)).await;
    status.assert_status(http::StatusCode::OK);
    let printed = crate::isolation::run_python(&app, &token, &id, "print(1+1)").await;
    assert_eq!(printed.trim(), "2");
    let stopped = app
        .delete(&format!("/api/v1/sessions/{id}"), Some(&token))
        .await;
    assert!(stopped.status.is_success(), "{:?}", stopped.status);
    app.wait_for(&token, &id, |v| v["state"] == "ended").await;
    // The pod goes (its grace period, then the kubelet removes it).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while cluster
        .api
        .store
        .read(|o| !o.list("pods", Some(&namespace)).is_empty())
    {
        assert!(tokio::time::Instant::now() < deadline, "the pod stayed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // 30 minutes were held; what was not used came back.
    let (balance, held) = app.store.credits(&carol).await.unwrap();
    assert_eq!(held, 0);
    let charged = 100_000 - balance;
    assert!(
        charged > 0 && charged < 17 * 30,
        "charged {charged} of 510 held"
    );
    app.stop().await;
    cluster.shut_down().await;
}

/// A cluster of `nodes` with the chart's RBAC, and the product's server on it.
async fn product_on(nodes: Vec<sim_cluster::NodeSpec>) -> (SimCluster, crate::common::TestApp) {
    product_with(nodes, |_| {}).await
}

/// As [`product_on`], the product's `[kube]` settings adjusted.
pub(crate) async fn product_with(
    nodes: Vec<sim_cluster::NodeSpec>,
    adjust: impl FnOnce(&mut KubeConfig),
) -> (SimCluster, crate::common::TestApp) {
    let mut kube = kube_config();
    adjust(&mut kube);
    let cluster = SimCluster::start(Options {
        rbac: chart().clone(),
        service_accounts: vec![(
            SERVER_NAMESPACE.into(),
            SERVER_ACCOUNT.into(),
            SERVER_TOKEN.into(),
        )],
        nodes,
    })
    .await
    .expect("the simulated cluster");
    let runtime = KubeRuntime::new(client(&cluster, SERVER_TOKEN).await, kube.clone());
    let app = crate::common::TestApp::start_kube(runtime, |c| {
        c.kube = kube;
        c.sessions.ready_timeout_seconds = 120;
        c.idle.reaper_period_ms = 200;
    })
    .await;
    (cluster, app)
}

/// marimo (its token a Secret volume's file) and code-server (a hashed password from the
/// Secret) run on the cluster too, each answering through the proxy at its pod.
#[tokio::test]
async fn marimo_and_code_server_run_on_the_cluster() {
    if !pods_run_here() {
        return;
    }
    let (cluster, app) = product_on(vec![node("gpu-node-1")]).await;
    let (_, token) = app.user("dora").await;
    let marimo = app.launch_ready(&token, "marimo").await;
    let page = app.get(&format!("/s/{marimo}/"), Some(&token)).await;
    page.assert_status(http::StatusCode::OK);
    assert!(String::from_utf8_lossy(&page.body).contains("marimo"));
    let code = app.launch_ready(&token, "code-server").await;
    let first = app.get(&format!("/s/{code}/"), Some(&token)).await;
    first.assert_status(http::StatusCode::FOUND);
    let location = first.headers["location"].to_str().unwrap().to_string();
    let page = app
        .call(
            http::Method::GET,
            &format!("/s/{code}/{}", &location[2..]),
            Some(&token),
            None,
        )
        .await;
    page.assert_status(http::StatusCode::OK);
    assert!(String::from_utf8_lossy(&page.body).contains("vscode"));
    // Started set up: its settings seeded into the user's data folder on the volume.
    let namespace = namespace_of("dora");
    let claim = cluster.api.store.read(|o| {
        o.list("persistentvolumeclaims", Some(&namespace))[0]["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_string()
    });
    let settings = cluster.kubelets[0]
        .volume_path(&namespace, &claim)
        .join(".local/share/code-server/User/settings.json");
    let seeded: Value = serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    assert_eq!(seeded["workbench.startupEditor"], "none", "{seeded}");
    assert_eq!(seeded["telemetry.telemetryLevel"], "off", "{seeded}");
    let pods = cluster.api.store.read(|o| o.list("pods", None));
    assert_eq!(pods.len(), 2, "two sessions, two pods");
    let ips: std::collections::BTreeSet<&str> = pods
        .iter()
        .map(|p| p["status"]["podIP"].as_str().unwrap())
        .collect();
    assert_eq!(ips.len(), 2, "each pod its own address");
    app.stop().await;
    cluster.shut_down().await;
}

/// Waits until `check` holds of the cluster's store.
async fn until(
    cluster: &SimCluster,
    what: &str,
    check: impl Fn(&sim_cluster::store::Objects) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !cluster.api.store.read(&check) {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The first pod of `namespace`, as the API server holds it.
fn pod_of(cluster: &SimCluster, namespace: &str) -> Value {
    cluster
        .api
        .store
        .read(|o| o.list("pods", Some(namespace)).into_iter().next())
        .expect("a pod")
}

fn namespace_of(user: &str) -> String {
    server::runtime::kube::names::namespace_of(&kube_config().namespace_prefix, user)
}

/// A node drained mid-session (`kubectl drain`): its pod is deleted, the session ends as lost
/// and the credits held for its unused time come back; nothing is scheduled there again.
#[tokio::test]
async fn a_node_drained_mid_session_ends_its_sessions_lost_and_refunded() {
    if !pods_run_here() {
        return;
    }
    let (cluster, app) = product_on(vec![node("gpu-node-1")]).await;
    let (erin, token) = app.user("erin").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    cluster.kubelets[0].drain();
    let view = app.wait_for(&token, &id, |v| v["state"] == "ended").await;
    assert_eq!(view["end_reason"], "lost", "{view}");
    let (balance, held) = app.store.credits(&erin).await.unwrap();
    assert_eq!(held, 0);
    assert!(100_000 - balance < 17 * 30, "refunded: {balance}");
    // The cordoned node takes nothing: the next launch waits, unschedulable.
    let next = app.launch_id(&token, "jupyterlab").await;
    until(&cluster, "the next pod is refused by the scheduler", |o| {
        o.list("pods", Some(&namespace_of("erin")))
            .iter()
            .any(|p| p["status"]["conditions"][0]["reason"] == "Unschedulable")
    })
    .await;
    let _ = app
        .delete(&format!("/api/v1/sessions/{next}"), Some(&token))
        .await;
    app.stop().await;
    cluster.shut_down().await;
}

/// The namespace's ResourceQuota refuses a pod past its `pods` limit, in Kubernetes' own words,
/// and the launch fails with them and is refunded.
#[tokio::test]
async fn the_namespaces_quota_refuses_a_second_pod_in_its_words() {
    if !pods_run_here() {
        return;
    }
    let (cluster, app) = product_with(vec![node("gpu-node-1")], |k| k.max_pods_per_user = 1).await;
    let (frank, token) = app.user("frank").await;
    app.launch_ready(&token, "jupyterlab").await;
    let second = app.launch_id(&token, "jupyterlab").await;
    let view = app
        .wait_for(&token, &second, |v| v["state"] == "ended")
        .await;
    let detail = view["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("exceeded quota: ") && detail.contains("limited: pods=1"),
        "{view}"
    );
    let (_, held) = app.store.credits(&frank).await.unwrap();
    assert!(held > 0, "the first session still holds its credits");
    app.stop().await;
    cluster.shut_down().await;
}

/// An image no node has never gets ready: the launch fails with the pull error, not a hang.
#[tokio::test]
async fn a_pod_whose_image_cannot_be_pulled_fails_the_launch_with_why() {
    if !pods_run_here() {
        return;
    }
    let (cluster, app) = product_with(vec![node("gpu-node-1")], |k| {
        k.images.jupyterlab = "registry.example/nowhere/lab:1".into();
    })
    .await;
    let (_, token) = app.user("gina").await;
    let id = app.launch_id(&token, "jupyterlab").await;
    let view = app.wait_for(&token, &id, |v| v["state"] == "ended").await;
    let detail = view["detail"].as_str().unwrap_or_default().to_lowercase();
    assert!(detail.contains("image"), "{view}");
    until(&cluster, "the failed pod is deleted", |o| {
        o.list("pods", Some(&namespace_of("gina"))).is_empty()
    })
    .await;
    app.stop().await;
    cluster.shut_down().await;
}

/// An editor that crashes is restarted by its kubelet, as a container is: the pod counts the
/// restart and the session answers again.
#[tokio::test]
async fn an_editor_that_crashes_is_restarted_and_the_session_carries_on() {
    if !pods_run_here() {
        return;
    }
    let (cluster, app) = product_on(vec![node("gpu-node-1")]).await;
    let (_, token) = app.user("hal").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    let namespace = namespace_of("hal");
    // The editor's own process, found by its pod's name on its command line.
    let killed = std::process::Command::new("pkill")
        .args(["-KILL", "-f", &format!("jupyter-lab.*base_url=/s/{id}/")])
        .status()
        .unwrap();
    assert!(killed.success(), "the editor's process was found");
    until(&cluster, "the kubelet counts the restart", |o| {
        o.list("pods", Some(&namespace)).iter().any(|p| {
            p["status"]["containerStatuses"][0]["restartCount"] == 1
                && p["status"]["containerStatuses"][0]["ready"] == true
        })
    })
    .await;
    let pod = pod_of(&cluster, &namespace);
    assert_eq!(
        pod["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"],
        137
    );
    let status = app.get(&format!("/s/{id}/api/status"), Some(&token)).await;
    status.assert_status(http::StatusCode::OK);
    app.stop().await;
    cluster.shut_down().await;
}

/// A container past its memory limit is killed by its cgroup and reported `OOMKilled`, as a
/// kubelet reports it; the kubelet restarts it.
#[tokio::test]
async fn a_container_past_its_memory_limit_is_oom_killed() {
    if !pods_run_here() {
        return;
    }
    use k8s_openapi::api::core::v1::{Namespace, Pod};
    use kube::api::{Api, PostParams};
    let cluster = SimCluster::start(Options {
        rbac: chart().clone(),
        nodes: vec![node("cpu-node-1")],
        ..Options::default()
    })
    .await
    .unwrap();
    let admin = client(&cluster, ADMIN_TOKEN).await;
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "jobs"}})).unwrap();
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let python = crate::common::tools_dir().join("venv/bin/python3");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "hungry"},
        "spec": {"containers": [{
            "name": "editor",
            "image": KubeConfig::default().images.jupyterlab,
            "command": [python.display().to_string(), "-c", "a = bytearray(256 * 1024 * 1024); print(len(a))"],
            "resources": {"limits": {"memory": "64Mi", "cpu": "1"}},
        }]},
    }))
    .unwrap();
    Api::<Pod>::namespaced(admin, "jobs")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    until(&cluster, "the container is OOMKilled", |o| {
        o.get("pods", "jobs", "hungry").is_some_and(|p| {
            p["status"]["containerStatuses"][0]["lastState"]["terminated"]["reason"] == "OOMKilled"
        })
    })
    .await;
    let pod = cluster
        .api
        .store
        .read(|o| o.get("pods", "jobs", "hungry").cloned())
        .unwrap();
    assert_eq!(
        pod["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"],
        137
    );
    cluster.shut_down().await;
}

/// A server restarted while the cluster and its database drifted apart: a session whose pod was
/// deleted meanwhile ends as lost and is refunded; a pod no session owns (a server that died
/// between creating it and recording it) is deleted; a session whose pod still runs carries on.
#[tokio::test]
async fn after_a_restart_the_reconciler_brings_rows_and_pods_back_in_step() {
    if !pods_run_here() {
        return;
    }
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, DeleteParams, PostParams};
    let (cluster, first) = product_on(vec![node("gpu-node-1")]).await;
    drop(first);
    // A server that leaves its sessions running when it stops (`sessions.stop_on_shutdown`).
    let runtime = KubeRuntime::new(client(&cluster, SERVER_TOKEN).await, kube_config());
    let app = crate::common::TestApp::start_kube(runtime, |c| {
        c.kube = kube_config();
        c.sessions.ready_timeout_seconds = 120;
        c.sessions.stop_on_shutdown = false;
    })
    .await;
    let (ivy, token) = app.user("ivy").await;
    let kept = app.launch_ready(&token, "jupyterlab").await;
    let lost = app.launch_ready(&token, "jupyterlab").await;
    let same_store = app.same_store();
    // Kept until the test ends: the stopped server's database and data directory.
    let _data = app.stop().await;
    let namespace = namespace_of("ivy");
    let admin = client(&cluster, ADMIN_TOKEN).await;
    let pods = Api::<Pod>::namespaced(admin, &namespace);
    // Meanwhile: one session's pod is deleted, and a pod appears that no session owns.
    let lost_pod = server::runtime::kube::names::pod_name(&lost);
    pods.delete(&lost_pod, &DeleteParams::default())
        .await
        .unwrap();
    let mut orphan = pods
        .get(&server::runtime::kube::names::pod_name(&kept))
        .await
        .unwrap();
    orphan.metadata = kube::api::ObjectMeta {
        name: Some("session-00000000000000000000".into()),
        labels: orphan.metadata.labels.map(|mut labels| {
            labels.insert(
                server::runtime::kube::names::SESSION_LABEL.into(),
                "00000000000000000000".into(),
            );
            labels
        }),
        ..Default::default()
    };
    orphan.status = None;
    orphan.spec.as_mut().unwrap().node_name = None;
    pods.create(&PostParams::default(), &orphan).await.unwrap();
    until(&cluster, "the deleted pod is gone", |o| {
        o.get("pods", &namespace, &lost_pod).is_none()
    })
    .await;
    let runtime = KubeRuntime::new(client(&cluster, SERVER_TOKEN).await, kube_config());
    let app = crate::common::TestApp::start_kube(runtime, |c| {
        same_store(c);
        c.kube = kube_config();
        c.idle.reaper_period_ms = 200;
    })
    .await;
    let report = server::service::reconcile::run_once(&app.service)
        .await
        .unwrap();
    assert_eq!(
        report.lost_sessions,
        std::slice::from_ref(&lost),
        "{report:?}"
    );
    assert_eq!(
        report.deleted_pods,
        ["session-00000000000000000000"],
        "{report:?}"
    );
    let view = app.wait_for(&token, &lost, |v| v["state"] == "ended").await;
    assert_eq!(view["end_reason"], "lost");
    let still = app
        .get(&format!("/s/{kept}/api/status"), Some(&token))
        .await;
    still.assert_status(http::StatusCode::OK);
    let (_, held) = app.store.credits(&ivy).await.unwrap();
    assert_eq!(held, 500, "only the running session still holds credits");
    app.stop().await;
    cluster.shut_down().await;
}

/// A user about to launch (dashboard open, launched before) gets an editor started ahead in
/// their own namespace, and their launch takes it: ready at once, under the pod's id. When
/// their dashboard has not been seen for a while, the pod goes.
#[tokio::test]
async fn a_user_about_to_launch_gets_a_pod_ahead_and_the_launch_takes_it() {
    use crate::accounts::{path_of, server_fn};
    if !pods_run_here() {
        return;
    }
    let (cluster, app) = product_with(vec![node("gpu-node-1")], |k| k.warm_pods = 1).await;
    let (gail, token) = app.user("gail").await;
    let namespace = namespace_of("gail");
    let pods_in = |ns: &str| cluster.api.store.read(|o| o.list("pods", Some(ns)).len());
    // What she launched last is what she gets ahead.
    let first = app.launch_ready(&token, "marimo").await;
    app.delete(&format!("/api/v1/sessions/{first}"), Some(&token))
        .await
        .assert_status(http::StatusCode::OK);
    app.wait_for(&token, &first, |v| v["state"] == "ended")
        .await;
    // Nothing ahead while her dashboard is closed.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(app.store.warm_editors().await.unwrap().is_empty());

    let cookie = app.sign_in_cookie("gail").await;
    server_fn(&app, path_of::<app::api::LoadDashboard>(), &cookie, "")
        .await
        .assert_status(http::StatusCode::OK);
    let warm = tokio::time::timeout(Duration::from_secs(90), async {
        loop {
            let warm = app.store.warm_editors().await.unwrap();
            if let Some(w) = warm.into_iter().find(|w| w.ready) {
                return w;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("an editor ready ahead of her launch");
    assert_eq!(warm.user_id.as_deref(), Some(gail.as_str()));
    assert_eq!(warm.editor, app::domain::launch::EditorKind::Marimo);
    let pod = pod_of(&cluster, &namespace);
    assert_eq!(pod["status"]["phase"], "Running", "in her own namespace");

    // Another user's launch does not take it.
    let (_, other) = app.user("hal").await;
    let hal = app.launch_id(&other, "marimo").await;
    assert_ne!(hal, warm.id);

    // Her launch takes it: ready in the same answer, the proxy reaches the pod.
    let id = app.launch_id(&token, "marimo").await;
    assert_eq!(id, warm.id, "the launch took the pod started ahead");
    let view = app
        .get(&format!("/api/v1/sessions/{id}"), Some(&token))
        .await
        .json();
    assert_eq!(view["state"], "ready", "{view}");
    let page = app.get(&format!("/s/{id}/"), Some(&token)).await;
    page.assert_status(http::StatusCode::OK);
    assert!(String::from_utf8_lossy(&page.body).contains("marimo"));
    assert_eq!(pods_in(&namespace), 1, "one pod: the one started ahead");
    app.delete(&format!("/api/v1/sessions/{id}"), Some(&token))
        .await
        .assert_status(http::StatusCode::OK);
    app.wait_for(&token, &id, |v| v["state"] == "ended").await;

    // Once her dashboard is no longer seen, what was started ahead for her goes.
    server_fn(&app, path_of::<app::api::LoadDashboard>(), &cookie, "").await;
    tokio::time::timeout(Duration::from_secs(90), async {
        while !app
            .store
            .warm_editors()
            .await
            .unwrap()
            .iter()
            .any(|w| w.ready && w.id != id)
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("a second editor ahead while her dashboard is open");
    app.sql(
        "UPDATE users SET dashboard_seen_at = dashboard_seen_at - 3600000 WHERE id = $1",
        &gail,
    )
    .await;
    until(&cluster, "the pod ahead is deleted", |o| {
        o.list("pods", Some(&namespace)).is_empty()
    })
    .await;
    assert!(app.store.warm_editors().await.unwrap().is_empty());
    app.stop().await;
    cluster.shut_down().await;
}
