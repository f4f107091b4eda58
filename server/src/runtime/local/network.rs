//! The network of a sandboxed editor: `pasta` started once its sandbox has settled, behind the
//! nftables rules of `runtime::egress`.

use super::handle::process_start_time;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Gives the sandbox whose first process is `init` the outside world (`pasta`); the pasta
/// process's pid and start time, to end it with the editor. It runs in the session's cgroup
/// (`procs_files`), so that ending the session's group ends it too, however the editor ended.
pub(super) fn start_egress(
    pasta: &Path,
    init: i32,
    forward: Option<u16>,
    root: bool,
    log: &std::fs::File,
    procs_files: Vec<std::ffi::CString>,
) -> Option<(i32, Option<u64>)> {
    use std::os::unix::process::CommandExt;
    let args = crate::runtime::sandbox::egress_arguments(init as u32, forward, root);
    let log = log.try_clone().map_or(Stdio::null(), Stdio::from);
    let mut command = std::process::Command::new(pasta);
    command
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        // A group of its own, like the editor's: a Ctrl-C to the server's terminal (or any
        // signal to its group) must not take a surviving sandbox's network with it.
        .process_group(0);
    // SAFETY: between fork and exec this only writes to cgroup files, through
    // async-signal-safe calls on memory made before the fork.
    unsafe {
        command.pre_exec(move || crate::runtime::cgroup::join_self(&procs_files));
    }
    match command.spawn() {
        Ok(mut child) => {
            let pid = child.id() as i32;
            std::thread::spawn(move || child.wait());
            Some((pid, process_start_time(pid)))
        }
        Err(e) => {
            tracing::warn!(error = %e, "starting pasta; the editor has no network");
            None
        }
    }
}

/// Waits (a few seconds at most) until the sandbox's first process has dropped its
/// capabilities: until then the kernel refuses a less privileged process (pasta, which drops
/// its own before it joins) a look at its namespaces.
pub(super) fn settle(init: i32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let status = std::fs::read_to_string(format!("/proc/{init}/status")).unwrap_or_default();
        let effective = status
            .lines()
            .find_map(|line| line.strip_prefix("CapEff:"))
            .map(|caps| caps.trim().trim_start_matches('0').is_empty());
        if effective != Some(false) {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The network of the sandbox whose first process is `init`, by the sandbox's configuration:
/// with egress, its rules and then `pasta` (in the session's cgroup, its output in the
/// editor's log); the pasta process and what the editor reaches, in words.
pub(super) async fn connect(
    sandbox: &crate::runtime::sandbox::Sandbox,
    init: i32,
    group: Option<&crate::runtime::cgroup::Group>,
    log: std::fs::File,
    began: Instant,
) -> (Option<(i32, Option<u64>)>, Option<String>) {
    let (crate::config::local::Network::Egress, Some(pasta)) =
        (sandbox.local.network, &sandbox.tools.pasta)
    else {
        return (None, Some(sandbox.network_words()));
    };
    let (pasta, forward, root) = (pasta.clone(), sandbox.forward, sandbox.tools.root);
    let nft = sandbox.tools.nft.clone();
    let edge = crate::runtime::egress::Edge {
        allow: sandbox.edge.allow(),
        deny: sandbox.edge.deny(),
        own: crate::runtime::egress::own_addresses(),
        resolvers: crate::runtime::egress::host_resolvers(),
    };
    let words = sandbox.edge.describe();
    let procs_files = group.map(|g| g.procs_files()).unwrap_or_default();
    tokio::task::spawn_blocking(move || {
        settle(init);
        tracing::debug!(
            settled_ms = began.elapsed().as_millis() as u64,
            "sandbox settled"
        );
        let edged = nft
            .ok_or_else(|| "nftables (nft) is not installed".to_string())
            .and_then(|nft| crate::runtime::egress::install(&nft, init, root, &edge.ruleset()));
        match edged {
            Ok(()) => {
                let pasta = start_egress(&pasta, init, forward, root, &log, procs_files);
                let words = match pasta {
                    Some(_) => words,
                    None => "none: pasta did not start".to_string(),
                };
                (pasta, Some(words))
            }
            Err(why) => {
                tracing::warn!(error = %why, "the sandbox's network rules; the editor has no network");
                let words = format!("none: the network rules could not be set ({why})");
                use std::io::Write;
                let _ = writeln!(&log, "network: {words}");
                (None, Some(words))
            }
        }
    })
    .await
    .unwrap_or((None, None))
}
