//! Ending an editor: SIGTERM to its group, then after 5 s SIGKILL to the group and to every
//! process that was below it when the stop began (Jupyter starts kernels in sessions of their
//! own); a sandboxed one by its cgroup or its sandbox's first process.

use super::handle::{Handle, SandboxHandle, process_start_time};
use crate::runtime::procfs::process_alive;
use std::time::{Duration, Instant};

/// Every process below `leader`, with its start time (so a reused pid is not mistaken for it).
pub(super) fn descendants(leader: u32) -> Vec<(u32, u64)> {
    let processes = crate::runtime::procfs::read_processes();
    let leaders = std::collections::HashMap::from([(leader, String::new())]);
    let parents: std::collections::HashMap<u32, u32> =
        processes.iter().map(|p| (p.pid, p.ppid)).collect();
    let mut owners =
        crate::runtime::procfs::Owners::new(&leaders, |pid| parents.get(&pid).copied());
    processes
        .iter()
        .filter(|p| p.pid != leader && owners.of(p.pid).is_some())
        .filter_map(|p| Some((p.pid, process_start_time(p.pid as i32)?)))
        .collect()
}

pub(super) fn signal_group(pid: i32, signal: i32) {
    if pid > 0 {
        // SAFETY: killpg only sends a signal to the group the editor leads.
        unsafe {
            libc::killpg(pid, signal);
        }
    }
}

/// Ends the editor's process group and what left it, then what it leaves on disk.
pub(super) async fn stop_editor(handle: &Handle) {
    end_processes(handle).await;
    handle.tidy().await;
}

/// Ends a sandboxed editor: SIGTERM to what runs inside (the editor and its kernels), five
/// seconds to finish, then everything of its session at once (its cgroup, or the sandbox's first
/// process, whose end ends every process in its namespace), and its network.
async fn end_sandbox(handle: &Handle, sandbox: &SandboxHandle) {
    if sandbox.init_alive() {
        let init = sandbox.init as u32;
        let inside = tokio::task::spawn_blocking(move || descendants(init))
            .await
            .unwrap_or_default();
        for (pid, started) in &inside {
            if process_start_time(*pid as i32) == Some(*started) {
                // SAFETY: a signal to a process of this editor's own sandbox (same pid, same start).
                unsafe {
                    libc::kill(*pid as i32, libc::SIGTERM);
                }
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while sandbox.init_alive() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    match &sandbox.cgroup {
        Some(group) => {
            group.kill();
            let deadline = Instant::now() + Duration::from_secs(2);
            while group.is_populated() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        None if sandbox.init_alive() => {
            // SAFETY: the sandbox's first process, checked by its start time above.
            unsafe {
                libc::kill(sandbox.init, libc::SIGKILL);
            }
        }
        None => {}
    }
    if let Some((pid, started)) = sandbox.egress
        && process_alive(pid)
        && (started.is_none() || process_start_time(pid) == started)
    {
        // SAFETY: the pasta process this editor's start made (same pid, same start).
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
    signal_group(handle.pid, libc::SIGKILL);
    tracing::info!(pid = handle.pid, "sandboxed editor stopped");
}

async fn end_processes(handle: &Handle) {
    if let Some(sandbox) = &handle.sandbox {
        return end_sandbox(handle, sandbox).await;
    }
    if process_alive(handle.pid) && !handle.alive() {
        // The pid now belongs to another process: ours is long gone, leave this one alone.
        return;
    }
    if !process_alive(handle.pid) {
        // The leader is gone, but its group (kernels, language servers) may not be.
        signal_group(handle.pid, libc::SIGKILL);
        return;
    }
    // Kernels run in sessions of their own: note the whole tree now, while it hangs together,
    // to end what the editor leaves behind.
    let leader = handle.pid as u32;
    let tree = tokio::task::spawn_blocking(move || descendants(leader))
        .await
        .unwrap_or_default();
    signal_group(handle.pid, libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(5);
    while process_alive(handle.pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Whatever is left of the group and the tree (kernels, language servers) goes too.
    signal_group(handle.pid, libc::SIGKILL);
    for (pid, started) in tree {
        if process_start_time(pid as i32) == Some(started) {
            // SAFETY: a signal to a process of this editor's tree (same pid, same start).
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while process_alive(handle.pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tracing::info!(pid = handle.pid, "editor stopped");
}
