//! A cold launch on the simulated cluster (`server/sim-cluster`) beside the local runtime, in one
//! run, alternating: the kube runtime's `start` (objects applied, the pod created, scheduled,
//! given its address) and `wait_ready` (the kubelet's editor answering its probe), with the API
//! calls each launch and stop make; the local runtime's `start` and `wait_ready` of the same
//! editor. JupyterLab, no pre-started editors on either side. Then the product itself (a server
//! process, its proxy and SQLite) on the cluster: request → the editor's first proxied answer,
//! cold and onto a pod started ahead for the user, alternating. As root (network namespaces,
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
        datasets: Vec::new(),
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
    product(&cluster).await;
    cluster.shut_down().await;
}

type Answer = (http::StatusCode, http::HeaderMap, bytes::Bytes);

async fn send(
    addr: std::net::SocketAddr,
    method: http::Method,
    path: &str,
    headers: &[(&str, String)],
    body: String,
) -> Answer {
    use http_body_util::{BodyExt, Full};
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<bytes::Bytes>>();
    let mut request = http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = client
        .request(request.body(Full::new(body.into())).unwrap())
        .await
        .expect("the server answers");
    let (parts, body) = response.into_parts();
    (
        parts.status,
        parts.headers,
        body.collect().await.unwrap().to_bytes(),
    )
}

/// The `server` command on the product's data directory.
fn operator(data: &std::path::Path, args: &[&str], stdin: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_server"))
        .args(args)
        .env("SANDBOX_DATA_DIR", data)
        .env("SANDBOX_LOG", "error")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Request → the editor's first proxied answer, through the product (a server process, its
/// proxy and its database) on the simulated cluster: cold, and onto a pod started ahead for the
/// user (`kube.warm_pods`), alternating.
async fn product(cluster: &sim_cluster::SimCluster) {
    let data = tempfile::tempdir().unwrap();
    let kubeconfig = data.path().join("kubeconfig");
    std::fs::write(&kubeconfig, cluster.kubeconfig("bench")).unwrap();
    let config = data.path().join("config.toml");
    std::fs::write(
        &config,
        "runtime = \"kube\"\n[kube]\nserver_namespace = \"gpu-sandbox\"\nwarm_pods = 1\n\
         [pool]\ndetect_nvidia = false\nwarm = []\n\
         gpus = [{ name = \"GPU-bench\", model = \"NVIDIA-L40S\", memory_mib = 49152, slice_mib = 8192 }]\n\
         [idle]\nreaper_period_ms = 200\n[credits]\ninitial_grant = \"1000\"\n",
    )
    .unwrap();
    operator(
        data.path(),
        &["user", "add", "bench", "--password-stdin"],
        "bench-password\n",
    );
    let token = operator(data.path(), &["token", "create", "--user", "bench"], "");
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut server = std::process::Command::new(env!("CARGO_BIN_EXE_server"))
        .args(["--config", config.to_str().unwrap(), "serve"])
        .env("SANDBOX_DATA_DIR", data.path())
        .env("SANDBOX_LISTEN", addr.to_string())
        .env("SANDBOX_LOG", "error")
        .env("SANDBOX_SECURE_COOKIES", "false")
        .env("KUBECONFIG", &kubeconfig)
        .env("SANDBOX_EDITORS__TOOLS_DIR", tools())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("the server");
    let started = Instant::now();
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the server listens"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let store = server::store::Store::connect(
        &server::config::Config {
            data_dir: data.path().to_path_buf(),
            ..Default::default()
        }
        .database_url(),
    )
    .await
    .unwrap();
    sqlx::any::install_default_drivers();
    let db = sqlx::AnyPool::connect(
        &server::config::Config {
            data_dir: data.path().to_path_buf(),
            ..Default::default()
        }
        .database_url(),
    )
    .await
    .unwrap();
    let bearer = [("authorization", format!("Bearer {token}"))];
    let json = [
        ("authorization", format!("Bearer {token}")),
        ("content-type", "application/json".to_string()),
    ];
    let login = <app::api::Login as leptos::server_fn::ServerFn>::PATH;
    let dashboard = <app::api::LoadDashboard as leptos::server_fn::ServerFn>::PATH;
    let (_, headers, _) = send(
        addr,
        http::Method::POST,
        login,
        &[
            ("content-type", "application/x-www-form-urlencoded".into()),
            ("accept", "application/json".into()),
        ],
        "name=bench&password=bench-password".into(),
    )
    .await;
    let cookie = headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("sandbox_session="))
        .and_then(|v| v.split(';').next())
        .expect("signed in")
        .to_string();
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS * 2 {
        let ahead = round % 2 == 1;
        if !ahead {
            // Nobody about to launch: whatever was started ahead goes first.
            sqlx::query("UPDATE users SET dashboard_seen_at = NULL")
                .execute(&db)
                .await
                .unwrap();
            while !store.warm_editors().await.unwrap().is_empty() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        } else {
            // The dashboard is open: wait until the pod started ahead is ready.
            send(
                addr,
                http::Method::POST,
                dashboard,
                &[
                    ("cookie", cookie.clone()),
                    ("accept", "application/json".into()),
                ],
                String::new(),
            )
            .await;
            let waited = Instant::now();
            while !store.warm_editors().await.unwrap().iter().any(|w| w.ready) {
                assert!(waited.elapsed() < Duration::from_secs(120), "a pod ahead");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let began = Instant::now();
        let (status, _, body) = send(
            addr,
            http::Method::POST,
            "/api/v1/sessions",
            &json,
            r#"{"editor":"jupyterlab","slice_mib":8192,"duration_minutes":30}"#.into(),
        )
        .await;
        assert!(
            status.is_success(),
            "{status}: {}",
            String::from_utf8_lossy(&body)
        );
        let id = serde_json::from_slice::<serde_json::Value>(&body).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        loop {
            let (status, _, _) = send(
                addr,
                http::Method::GET,
                &format!("/s/{id}/api/status"),
                &bearer,
                String::new(),
            )
            .await;
            if status == http::StatusCode::OK {
                break;
            }
            assert!(began.elapsed() < Duration::from_secs(120), "{id} answers");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if ahead { &mut warm } else { &mut cold }.push(began.elapsed());
        send(
            addr,
            http::Method::DELETE,
            &format!("/api/v1/sessions/{id}"),
            &bearer,
            String::new(),
        )
        .await;
        while store
            .live_sessions()
            .await
            .unwrap()
            .iter()
            .any(|s| s.id == id)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    println!("\nthrough the product (request → the editor's first proxied answer), {ROUNDS} each");
    println!("| | p50 | p95 |");
    println!("|---|---|---|");
    println!(
        "| cluster, cold | {} | {} |",
        ms(pct(&mut cold, 0.5)),
        ms(pct(&mut cold, 0.95))
    );
    println!(
        "| cluster, onto a pod started ahead | {} | {} |",
        ms(pct(&mut warm, 0.5)),
        ms(pct(&mut warm, 0.95))
    );
    let _ = server.kill();
    let _ = server.wait();
}
