//! What the server keeps of a running editor (its handle), to find it again, tell whether it
//! still runs, and clear away what it leaves.

use crate::runtime::procfs::process_alive;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Serialize, Deserialize)]
pub(super) struct Handle {
    pub(super) pid: i32,
    /// 0 for an editor on a Unix socket.
    pub(super) port: u16,
    /// The editor's Unix socket, if it has one.
    #[serde(default)]
    pub(super) socket: Option<PathBuf>,
    pub(super) log: PathBuf,
    /// The process's start time (clock ticks since boot), so a reused pid is not mistaken for it.
    #[serde(default)]
    pub(super) started: Option<u64>,
    /// Where the handle is also kept, beside the editor's socket and runtime files.
    #[serde(default)]
    pub(super) run_dir: Option<PathBuf>,
    /// A pre-started editor's workspace link (see [`super::LocalRuntime::binding_of`]).
    #[serde(default)]
    pub(super) binding: Option<PathBuf>,
    /// The editor's sandbox, when it runs in one.
    #[serde(default)]
    pub(super) sandbox: Option<SandboxHandle>,
}

/// What a sandboxed editor leaves to find and end it by.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct SandboxHandle {
    /// The sandbox's first process (PID 1 inside): when it ends, everything inside ends.
    pub(super) init: i32,
    pub(super) init_started: Option<u64>,
    /// The session's cgroup, where the server may make them.
    #[serde(default)]
    pub(super) cgroup: Option<crate::runtime::cgroup::Group>,
    /// The `pasta` process that gives the sandbox its network.
    #[serde(default)]
    pub(super) egress: Option<(i32, Option<u64>)>,
    /// What the editor reaches on the network, in words, or why nothing.
    #[serde(default)]
    pub(super) network: Option<String>,
    /// A pre-started editor's home, a mount point the workspace is mounted on.
    #[serde(default)]
    pub(super) slot: Option<PathBuf>,
    /// The spare account a pre-started editor runs as, given back when it stops.
    #[serde(default)]
    pub(super) lent: Option<u32>,
}

impl SandboxHandle {
    pub(super) fn init_alive(&self) -> bool {
        process_alive(self.init)
            && (self.init_started.is_none() || process_start_time(self.init) == self.init_started)
    }
}

/// A stopped editor's run directory, on its way out.
pub(super) const GONE: &str = "gone";

/// The handle's copy in the editor's run directory: what a server that died before it could
/// record the editor leaves for the next one to find.
pub(super) const HANDLE_FILE: &str = "handle.json";

impl Handle {
    /// Removes what the editor leaves once it is gone: its run directory (socket, runtime files,
    /// caches and the handle's copy; an editor that was killed cannot remove its socket) and a
    /// pre-started editor's workspace link with the empty home it had before a user took it.
    /// The log stays for whoever looks into what happened.
    pub(super) async fn tidy(&self) {
        if let Some(run_dir) = &self.run_dir {
            // Its caches may be gigabytes (pip, Hugging Face): moved aside at once, deleted
            // after, so the stop (and the slot, and the refund) does not wait for the disk.
            let gone = run_dir.with_extension(GONE);
            if tokio::fs::rename(run_dir, &gone).await.is_ok() {
                tokio::task::spawn_blocking(move || std::fs::remove_dir_all(gone));
            } else {
                let _ = tokio::fs::remove_dir_all(run_dir).await;
            }
        } else if let Some(socket) = &self.socket {
            let _ = tokio::fs::remove_file(socket).await;
        }
        if let Some(slot) = self.sandbox.as_ref().and_then(|s| s.slot.clone()) {
            let _ =
                tokio::task::spawn_blocking(move || crate::runtime::sandbox::release_slot(&slot))
                    .await;
        }
        if let Some(group) = self.sandbox.as_ref().and_then(|s| s.cgroup.clone()) {
            group.remove();
        }
        if let Some(link) = &self.binding {
            // remove_file on a link removes the link, never what it points at.
            let _ = tokio::fs::remove_file(link).await;
            let _ = tokio::fs::remove_file(link.with_extension("next")).await;
            let _ = tokio::fs::remove_dir_all(link.with_extension("empty")).await;
        }
    }

    /// Our editor still runs: the pid exists and is the same process we started; in a sandbox,
    /// something of its session still runs (a dead editor's leftover, which nobody reaps, is
    /// not counted: an exited process leaves its cgroup).
    pub(super) fn alive(&self) -> bool {
        if let Some(sandbox) = &self.sandbox {
            return match &sandbox.cgroup {
                Some(group) => group.is_populated() && sandbox.init_alive(),
                None => sandbox.init_alive(),
            };
        }
        process_alive(self.pid)
            && (self.started.is_none() || process_start_time(self.pid) == self.started)
    }
}

/// Field 22 of /proc/<pid>/stat: when the process started, in clock ticks since boot.
pub(super) fn process_start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses; fields after it are plain.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}
