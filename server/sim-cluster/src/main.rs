//! `sim-cluster`: the simulated cluster as a program, for running the product against it by hand
//! (`scripts/sim-cluster.sh` starts it). It serves on loopback, writes a kubeconfig for the
//! server's service account (the chart's RBAC applies) and prints its path, and runs until
//! interrupted, when it stops every pod and removes its networks.
//!
//! Arguments: `--chart FILE` (the chart as `scripts/render-chart.sh` prints it), `--kubeconfig
//! FILE`, `--root DIR` (the nodes' folders), `--image REF` (repeated: images that stand for the
//! editors installed here), `--dir DIR` (repeated: the folders that hold them), `--nodes N`.

use sim_cluster::kubelet::{Config, Image};
use sim_cluster::scheduler::Card;
use sim_cluster::{NodeSpec, Options, SimCluster};
use std::path::PathBuf;
use std::time::Duration;

/// The chart's service account, as `scripts/render-chart.sh` renders it.
const SERVER: (&str, &str) = ("gpu-sandbox", "gpu-sandbox");

struct Args {
    chart: PathBuf,
    kubeconfig: PathBuf,
    root: PathBuf,
    images: Vec<String>,
    dirs: Vec<PathBuf>,
    nodes: u8,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        chart: PathBuf::new(),
        kubeconfig: PathBuf::from("sim-cluster.kubeconfig"),
        root: std::env::temp_dir().join("sim-cluster"),
        images: Vec::new(),
        dirs: Vec::new(),
        nodes: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} takes a value"));
        match flag.as_str() {
            "--chart" => args.chart = value()?.into(),
            "--kubeconfig" => args.kubeconfig = value()?.into(),
            "--root" => args.root = value()?.into(),
            "--image" => args.images.push(value()?),
            "--dir" => args.dirs.push(value()?.into()),
            "--nodes" => {
                args.nodes = value()?
                    .parse()
                    .map_err(|_| "--nodes takes a number of nodes, 1 to 4")?
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.chart.as_os_str().is_empty() {
        return Err("--chart FILE is required (scripts/render-chart.sh > FILE)".into());
    }
    if !(1..=4).contains(&args.nodes) {
        return Err("--nodes takes a number of nodes, 1 to 4".into());
    }
    Ok(args)
}

/// The image reference's name, before its tag or digest.
fn name_of(reference: &str) -> String {
    let base = reference.split('@').next().unwrap_or(reference);
    match base.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => name.to_string(),
        _ => base.to_string(),
    }
}

#[tokio::main]
async fn main() {
    let args = match parse() {
        Ok(args) => args,
        Err(why) => {
            eprintln!("sim-cluster: {why}");
            std::process::exit(2);
        }
    };
    let chart: Vec<serde_json::Value> = match std::fs::read(&args.chart)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(chart) => chart,
        Err(why) => {
            eprintln!("sim-cluster: {}: {why}", args.chart.display());
            std::process::exit(2);
        }
    };
    let token = format!("sim-{}", sim_cluster::clock::uid());
    let nodes = (0..args.nodes)
        .map(|n| NodeSpec {
            kubelet: Config {
                node: format!("gpu-node-{}", n + 1),
                root: args.root.join(format!("node-{}", n + 1)),
                images: args
                    .images
                    .iter()
                    .map(|r| Image {
                        name: name_of(r),
                        dirs: args.dirs.clone(),
                    })
                    .collect(),
                subnet: std::net::Ipv4Addr::new(198, 19, n, 0),
                bridge: format!("simbr{n}"),
                system: ["/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc"]
                    .into_iter()
                    .map(PathBuf::from)
                    .collect(),
                backoff: Duration::from_secs(2),
            },
            cards: vec![Card {
                uuid: format!("GPU-sim-{}", n + 1),
                split: 10,
                memory_mib: 49152,
                cores: 100,
                model: "NVIDIA-L40S".into(),
            }],
        })
        .collect();
    let cluster = match SimCluster::start(Options {
        rbac: chart,
        service_accounts: vec![(SERVER.0.into(), SERVER.1.into(), token.clone())],
        nodes,
    })
    .await
    {
        Ok(cluster) => cluster,
        Err(why) => {
            eprintln!("sim-cluster: {why} (run as root: network namespaces and cgroups)");
            std::process::exit(1);
        }
    };
    if let Err(why) = std::fs::write(&args.kubeconfig, cluster.kubeconfig(&token)) {
        eprintln!("sim-cluster: {}: {why}", args.kubeconfig.display());
        std::process::exit(1);
    }
    println!("{}", args.kubeconfig.display());
    eprintln!(
        "sim-cluster: API server at http://{}, {} node(s); Ctrl-C stops it",
        cluster.addr, args.nodes
    );
    let _ = tokio::signal::ctrl_c().await;
    cluster.shut_down().await;
}
