//! What the network rules add to a launch: loading the default `[network]` rules (with this
//! machine's own addresses and resolvers) into a fresh network namespace, as a cold launch does
//! before pasta joins, against the same launch step without them (making the namespace and its
//! first process alone). A warm launch adds nothing: its rules were loaded when it was pre-started.
//! As root, with nftables; prints the medians and 95th percentiles of 40 rounds, alternating.
//!
//! cargo bench -p server --bench edge

use server::config::network::NetworkConfig;
use server::runtime::egress;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A process in a network namespace of its own, as a sandbox's first process is; the time it
/// took to be there.
fn namespace() -> (std::process::Child, Duration) {
    let began = Instant::now();
    let child = Command::new("unshare")
        .args(["--net", "--", "sleep", "30"])
        .stdout(Stdio::null())
        .spawn()
        .expect("unshare");
    // Until the child has its namespace: its `net` link differs from ours.
    let ours = std::fs::read_link("/proc/self/ns/net").unwrap();
    while std::fs::read_link(format!("/proc/{}/ns/net", child.id())).ok() == Some(ours.clone()) {
        std::thread::yield_now();
    }
    (child, began.elapsed())
}

fn pct(values: &mut [Duration], p: f64) -> Duration {
    values.sort();
    values[((values.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    // SAFETY: geteuid only reads this process's effective user id.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("edge: needs root (it makes network namespaces and loads rules into them)");
        return;
    }
    let Some(nft) = egress::find_nft() else {
        eprintln!("edge: needs nftables (apt-get install nftables)");
        return;
    };
    let network = NetworkConfig::default();
    let rounds = 40;
    let (mut without, mut with, mut rules_alone) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds * 2 {
        let (mut child, made) = namespace();
        if round % 2 == 0 {
            without.push(made);
        } else {
            // What the launch computes and loads: the edge of this moment, then the rules.
            let began = Instant::now();
            let edge = egress::Edge {
                allow: network.allow(),
                deny: network.deny(),
                own: egress::own_addresses(),
                resolvers: egress::host_resolvers(),
            };
            egress::install(&nft, child.id() as i32, true, &edge.ruleset()).expect("rules load");
            let loaded = began.elapsed();
            rules_alone.push(loaded);
            with.push(made + loaded);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let (w50, w95) = (pct(&mut without, 0.5), pct(&mut without, 0.95));
    let (r50, r95) = (pct(&mut with, 0.5), pct(&mut with, 0.95));
    let (a50, a95) = (pct(&mut rules_alone, 0.5), pct(&mut rules_alone, 0.95));
    println!("edge: {rounds} rounds each, alternating (load {})", load());
    println!(
        "  namespace without rules   p50 {:6.2} ms  p95 {:6.2} ms",
        ms(w50),
        ms(w95)
    );
    println!(
        "  namespace with rules      p50 {:6.2} ms  p95 {:6.2} ms",
        ms(r50),
        ms(r95)
    );
    println!(
        "  added by the rules        p50 {:6.2} ms  p95 {:6.2} ms  (goal: at most 10 ms)",
        ms(a50),
        ms(a95)
    );
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().next().unwrap_or("?").to_string())
        .unwrap_or_default()
}
