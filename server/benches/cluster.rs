//! A cold launch on the simulated cluster (`server/sim-cluster`) beside the local runtime, in one
//! run, alternating: the kube runtime's `start` (objects applied, the pod created, scheduled,
//! given its address) and `wait_ready` (the kubelet's editor answering its probe), with the API
//! calls each launch and stop make; the local runtime's `start` and `wait_ready` of the same
//! editor. JupyterLab, no pre-started editors on either side. As root (network namespaces,
//! cgroups), after `scripts/setup.sh --test`; prints medians and 95th percentiles.
//!
//! cargo bench -p server --bench cluster

use app::domain::launch::EditorKind;
use server::runtime::kube::{KubeConfig, KubeRuntime};
use server::runtime::{EditorLaunch, LocalRuntime, Runtime, SliceBinding};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const ROUNDS: usize = 8;

fn tools() -> PathBuf {
    std::env::var_os("SANDBOX_EDITORS__TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tools"))
}

fn launch(user: &str, id: &str) -> EditorLaunch {
    EditorLaunch {
        session_id: id.into(),
        user_name: user.into(),
        editor: EditorKind::JupyterLab,
        base_path: format!("/s/{id}/"),
        env: Vec::new(),
        slice: SliceBinding {
            memory_mib: 8192,
            cores_pct: 16,
            ..SliceBinding::default()
        },
        prestart: false,
        image: None,
        disk_mib: 0,
    }
}

fn pct(values: &mut [Duration], p: f64) -> Duration {
    values.sort();
    values[((values.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

fn chart() -> Vec<serde_json::Value> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::process::Command::new(root.join("scripts/render-chart.sh"))
        .output()
        .expect("scripts/render-chart.sh");
    serde_json::from_slice(&out.stdout).expect("the chart as JSON")
}

fn node() -> sim_cluster::NodeSpec {
    let tools = tools();
    let python = std::process::Command::new(tools.join("venv/bin/python3"))
        .args(["-c", "import sys; print(sys.base_prefix)"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let image = KubeConfig::default().images.jupyterlab;
    let name = image.split('@').next().unwrap();
    let name = name.rsplit_once(':').map_or(name, |(n, _)| n).to_string();
    sim_cluster::NodeSpec {
        kubelet: sim_cluster::kubelet::Config {
            node: "bench-node".into(),
            root: std::env::temp_dir().join(format!("sim-bench-{}", std::process::id())),
            images: vec![sim_cluster::kubelet::Image {
                name,
                dirs: vec![tools.join("venv"), PathBuf::from(python)],
            }],
            subnet: std::net::Ipv4Addr::new(198, 19, 250, 0),
            bridge: "simbench0".into(),
            system: ["/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc"]
                .into_iter()
                .map(PathBuf::from)
                .collect(),
            backoff: Duration::from_millis(500),
        },
        cards: vec![sim_cluster::scheduler::Card {
            uuid: "GPU-bench".into(),
            split: 10,
            memory_mib: 49152,
            cores: 100,
            model: "NVIDIA-L40S".into(),
        }],
    }
}

#[tokio::main]
async fn main() {
    // SAFETY: geteuid only reads this process's effective user id.
    if unsafe { libc::geteuid() } != 0 || !tools().join("venv/bin/jupyter-lab").exists() {
        eprintln!("cluster: needs root and JupyterLab (scripts/setup.sh --test)");
        return;
    }
    let cluster = sim_cluster::SimCluster::start(sim_cluster::Options {
        rbac: chart(),
        service_accounts: vec![("gpu-sandbox".into(), "gpu-sandbox".into(), "bench".into())],
        nodes: vec![node()],
    })
    .await
    .expect("the simulated cluster");
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&cluster.kubeconfig("bench")).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let kube_config = KubeConfig {
        server_namespace: "gpu-sandbox".into(),
        ..KubeConfig::default()
    };
    let kube = KubeRuntime::new(kube::Client::try_from(config).unwrap(), kube_config);
    let data = tempfile::tempdir().unwrap();
    let mut local_config = server::config::Config {
        data_dir: data.path().to_path_buf(),
        ..Default::default()
    };
    local_config.editors.tools_dir = tools();
    local_config.pool.detect_nvidia = false;
    let local = LocalRuntime::from_config(&local_config);
    let timeout = Duration::from_secs(120);
    let (mut placed, mut ready, mut local_ready, mut calls) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let id = format!("bench{round:04}aaaaaaaaaaaa");
        let before = cluster.call_count();
        let began = Instant::now();
        let running = kube.start(&launch("bench", &id)).await.expect("a pod");
        placed.push(began.elapsed());
        kube.wait_ready(&launch("bench", &id), &running, timeout)
            .await
            .expect("ready");
        ready.push(began.elapsed());
        kube.stop(&running.handle).await.expect("stopped");
        calls.push(cluster.call_count() - before);
        let id = format!("local{round:04}aaaaaaaaaaa");
        let began = Instant::now();
        let running = local.start(&launch("bench", &id)).await.expect("an editor");
        local
            .wait_ready(&launch("bench", &id), &running, timeout)
            .await
            .expect("ready");
        local_ready.push(began.elapsed());
        let _ = local.stop(&running.handle).await;
    }
    let per_launch = calls.iter().sum::<u64>() as f64 / calls.len() as f64;
    println!("cold launch, JupyterLab, {ROUNDS} rounds each, alternating");
    println!("| | p50 | p95 |");
    println!("|---|---|---|");
    println!(
        "| cluster: start → pod placed, with its IP | {} | {} |",
        ms(pct(&mut placed, 0.5)),
        ms(pct(&mut placed, 0.95))
    );
    println!(
        "| cluster: start → ready (probe passes) | {} | {} |",
        ms(pct(&mut ready, 0.5)),
        ms(pct(&mut ready, 0.95))
    );
    println!(
        "| local: start → ready | {} | {} |",
        ms(pct(&mut local_ready, 0.5)),
        ms(pct(&mut local_ready, 0.95))
    );
    println!("API calls per launch and stop: {per_launch:.1}");
    let breakdown = cluster.calls.lock().unwrap().clone();
    for (what, n) in breakdown {
        println!("  {what}: {:.1}", n as f64 / ROUNDS as f64);
    }
    cluster.shut_down().await;
}
