//! Editors as local processes: one process group each, listening on a Unix socket in the session's
//! run directory (marimo, which has none, on a free port of 127.0.0.1), logs in the data directory,
//! a workspace directory per user kept across sessions.
//!
//! Start: the run directory `data/run/<id>/` is mode 0700 and the socket 0600, so no other local
//! account can connect (a data directory too deep for a socket's 107 bytes gets ports instead). The
//! editor gets its base URL `/s/<id>/`, a random secret (`runtime::editors`), `HOME` = the user's
//! workspace under `data/workspaces/`, the slice's GPU environment and its log in
//! `data/logs/<id>.log`. `wait_ready` probes every 25 ms until a 2xx, and fails fast, with the
//! log's last 20 lines, when the process exits or the timeout passes. Stop: SIGTERM to the group,
//! then after 5 s SIGKILL to the group and to every process that was below the editor when the stop
//! began, since Jupyter starts kernels in sessions of their own.
//!
//! A pre-started editor starts on an empty home behind a workspace link. `bind_workspace` copies
//! into the user's workspace what the editor made there and the user lacks (Jupyter's notebook
//! secret, say), then swaps the link for one to the user's workspace with `rename(2)`, which
//! JupyterLab, marimo and code-server all follow (tested with each in
//! `server/tests/it/editors.rs`). Its working directory is its run directory, since a process's
//! working directory would stay the deleted empty one.
//!
//! Restarts: an editor outlives the server that started it (a process group of its own; a
//! sandbox, its pasta and its workspace mount are not tied to the server process), so a restart
//! or a crash costs nobody their kernels. The handle (pid, the process's start time from
//! `/proc/<pid>/stat`, socket, log; a sandbox's first process, cgroup and pasta) is stored by the
//! service and also written to `data/run/<id>/handle.json`, so an editor started by a server that
//! died before recording it is still found: `sweep` stops every editor whose handle no live
//! session or ready pre-started editor owns, at the next start (orphans live at most until then).
//! A re-adopted editor must be the same process: the same pid with the same start time. A stopped
//! editor's run directory is renamed at once and deleted in the background, since its caches may
//! be large, and a pre-started editor's link and empty home go with it; the log stays. CPU use is
//! summed over each editor's whole process tree (`runtime::procfs`), GPU use comes from NVML
//! (`runtime::gpu`).
//!
//! Isolation: by default every editor runs in a sandbox of its own (`runtime::sandbox`), as
//! root under an account of its user's (`runtime::accounts`; a pre-started editor under a
//! spare one, its user's workspace shown to it through an idmapped mount, `runtime::idmap`),
//! in a cgroup of its session, with its workspace a file system sized by its quota
//! (`runtime::disk`). Without a sandbox editors run as the server's own account and can read
//! what it can: where none can be made the server serves one account only, and with
//! `local.isolation = "none"` an administrator accepts that for all; every page then says so. Editors are served
//! from the same origin as the dashboard (as JupyterHub's default): a user's own editor can act
//! as that user in their browser; per-session origins would remove that.

pub mod checkpoint;
mod handle;
mod network;
mod plan;
mod ready;
mod recovery;
mod spawn;
mod stop;
mod tools;
mod usage;
mod workspace;

pub use tools::ToolPaths;

use super::{EditorLaunch, Running, Runtime, RuntimeError};
use app::domain::launch::EditorKind;
use handle::Handle;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tools::absolute;

pub struct LocalRuntime {
    tools: ToolPaths,
    data_dir: PathBuf,
    /// Opened on the first sample; None where there is no NVIDIA driver.
    nvml: std::sync::OnceLock<Option<std::sync::Arc<crate::runtime::gpu::NvmlSampler>>>,
    /// Each editor's CPU ticks at the previous [`Runtime::cpu_load`], and when.
    cpu_seen: std::sync::Mutex<std::collections::HashMap<String, (Instant, u64)>>,
    /// The sandbox every editor runs in, or why there is none.
    sandbox: Result<super::sandbox::Sandbox, String>,
    /// `pool.cuda_checkpoint`, looked for when an editor holding GPU memory first parks.
    cuda_checkpoint: (
        String,
        std::sync::OnceLock<Option<checkpoint::CudaCheckpoint>>,
    ),
    /// The processes whose GPU memory this server set aside, per editor it parked (none for
    /// most): a resume brings back these, and asks the tool about every process only for an
    /// editor an earlier server parked.
    set_aside: std::sync::Mutex<std::collections::HashMap<String, Vec<u32>>>,
}

impl LocalRuntime {
    /// The runtime `config` asks for: a sandbox per editor unless `local.isolation = "none"`,
    /// or where this machine cannot make one (then it says why, and serves one user at most).
    pub fn from_config(config: &crate::config::Config) -> LocalRuntime {
        let tools = ToolPaths::from_config(&config.editors);
        let sandbox = match config.local.isolation {
            crate::config::local::Isolation::None => Err("local.isolation is \"none\"".to_string()),
            crate::config::local::Isolation::Sandbox => {
                let programs: Vec<&Path> = EditorKind::ALL
                    .iter()
                    .map(|e| tools.program(*e))
                    .filter(|p| p.exists())
                    .collect();
                super::sandbox::Sandbox::prepare(config, &programs)
            }
        };
        match &sandbox {
            Ok(sandbox) => {
                if let Ok(disks) = &sandbox.disks {
                    disks.mount_all(&absolute(&config.data_dir).join("workspaces"));
                }
                tracing::info!(isolation = %sandbox.describe(), "editors run in sandboxes");
                if let Some(gaps) = sandbox.gaps() {
                    tracing::warn!(%gaps, "what the sandboxes do not hold here");
                }
            }
            Err(why) => tracing::warn!(%why, "editors are not isolated from each other"),
        }
        LocalRuntime {
            sandbox,
            cuda_checkpoint: (config.pool.cuda_checkpoint.clone(), Default::default()),
            ..LocalRuntime::new(tools, &config.data_dir)
        }
    }

    /// Editors as the server's own processes, without a sandbox.
    pub fn new(tools: ToolPaths, data_dir: &Path) -> LocalRuntime {
        for editor in EditorKind::ALL {
            let program = tools.program(editor);
            if !program.exists() {
                tracing::warn!(%editor, program = %program.display(), "editor not installed; shown as unavailable");
            }
        }
        let data_dir = absolute(data_dir);
        let sample = data_dir.join("run").join("0".repeat(20));
        if plan::socket_path(EditorKind::JupyterLab, &sample, false).is_none() {
            tracing::warn!(data_dir = %data_dir.display(), "the data directory's path is too long for Unix sockets; editors listen on ports of 127.0.0.1 instead");
        }
        LocalRuntime {
            tools,
            data_dir,
            nvml: std::sync::OnceLock::new(),
            cpu_seen: Default::default(),
            sandbox: Err("not asked for".into()),
            cuda_checkpoint: Default::default(),
            set_aside: Default::default(),
        }
    }

    /// What this server set aside of `handle`'s editor, forgotten as it is told; None where it
    /// did not park it.
    fn take_set_aside(&self, handle: &str) -> Option<Vec<u32>> {
        let mut set_aside = self.set_aside.lock().unwrap_or_else(|e| e.into_inner());
        set_aside.remove(handle)
    }

    /// NVIDIA's `cuda-checkpoint`, where it is configured and runs.
    async fn cuda_checkpoint(&self) -> Option<checkpoint::CudaCheckpoint> {
        let (configured, found) = &self.cuda_checkpoint;
        if let Some(found) = found.get() {
            return found.clone();
        }
        let configured = configured.clone();
        let tool =
            tokio::task::spawn_blocking(move || checkpoint::CudaCheckpoint::find(&configured))
                .await
                .unwrap_or(None);
        found.get_or_init(|| tool).clone()
    }

    fn sandbox(&self) -> Option<&super::sandbox::Sandbox> {
        self.sandbox.as_ref().ok()
    }

    /// What a start's plan reads of this runtime, for an editor of `program`.
    fn setting<'a>(&'a self, program: &'a Path) -> plan::Setting<'a> {
        plan::Setting {
            program,
            data_dir: &self.data_dir,
            sandbox: self.sandbox().map(|s| plan::SandboxSetting {
                accounts: s.accounts.is_some(),
                cgroups: s.cgroups.as_ref().map(|_| &s.local),
                socat: s.tools.socat.as_deref(),
                preload: s.preload.is_some(),
            }),
        }
    }
}

#[async_trait::async_trait]
impl Runtime for LocalRuntime {
    fn availability(&self) -> Vec<(EditorKind, Result<(), String>)> {
        EditorKind::ALL
            .into_iter()
            .map(|editor| {
                let program = self.tools.program(editor);
                let status = if program.exists() {
                    Ok(())
                } else {
                    Err("not installed on this server (an administrator can install it with scripts/setup.sh)".to_string())
                };
                (editor, status)
            })
            .collect()
    }

    async fn start(&self, launch: &EditorLaunch) -> Result<Running, RuntimeError> {
        spawn::start(self, launch).await
    }

    async fn wait_ready(
        &self,
        launch: &EditorLaunch,
        running: &Running,
        timeout: Duration,
    ) -> Result<(), RuntimeError> {
        ready::wait(launch, running, timeout).await
    }

    async fn release_storage(&self) {
        let Some(disks) = self.sandbox().and_then(|s| s.disks.as_ref().ok()).cloned() else {
            return;
        };
        let workspaces = self.workspaces_dir();
        let unmounted = tokio::task::spawn_blocking(move || disks.unmount_all(&workspaces)).await;
        tracing::info!(
            workspaces = unmounted.unwrap_or(0),
            "workspace file systems unmounted"
        );
    }

    fn isolation_gaps(&self) -> Option<String> {
        self.sandbox().and_then(super::sandbox::Sandbox::gaps)
    }

    fn network_of(&self, handle: &str) -> Option<String> {
        let handle: Handle = serde_json::from_str(handle).ok()?;
        handle.sandbox?.network
    }

    fn isolation(&self) -> Result<String, String> {
        match &self.sandbox {
            Ok(sandbox) => Ok(sandbox.describe()),
            Err(why) => Err(format!(
                "editors run as the server's own account and can read each other's files ({why})"
            )),
        }
    }

    fn mounts_datasets(&self) -> bool {
        // A read-only bind in the sandbox; without one there is nowhere to make it.
        self.sandbox().is_some()
    }

    fn prestarts_editors(&self) -> bool {
        // A sandboxed editor gets its user's workspace by a mount, which takes root.
        self.sandbox().is_none_or(|s| s.tools.root)
    }

    async fn bind_workspace(
        &self,
        launch_id: &str,
        user_name: &str,
        disk_mib: u64,
    ) -> Result<(), RuntimeError> {
        workspace::bind(self, launch_id, user_name, disk_mib).await
    }

    fn workspace_dir(&self, user_name: &str) -> Option<PathBuf> {
        Some(self.workspace_of(user_name))
    }

    async fn remove_workspace(&self, user_name: &str) -> Result<(), RuntimeError> {
        workspace::remove(self, user_name).await
    }

    async fn workspace_mib(&self, user_name: &str) -> Option<u64> {
        workspace::mib(self, user_name).await
    }

    async fn stop(&self, handle: &str) -> Result<(), RuntimeError> {
        let raw = handle;
        let handle: Handle =
            serde_json::from_str(handle).map_err(|e| RuntimeError::Handle(e.to_string()))?;
        // A parked editor is frozen: thawed first, so that it stops as gracefully as any.
        if let Some(group) = handle.sandbox.as_ref().and_then(|s| s.cgroup.clone()) {
            let _ = tokio::task::spawn_blocking(move || group.is_frozen() && group.thaw()).await;
        }
        stop::stop_editor(&handle).await;
        self.take_set_aside(raw);
        let lent = handle.sandbox.as_ref().and_then(|s| s.lent);
        if let (Some(uid), Some(accounts)) =
            (lent, self.sandbox().and_then(|s| s.accounts.as_ref()))
        {
            accounts.give_back(uid);
        }
        Ok(())
    }

    fn parks_editors(&self) -> bool {
        self.sandbox().is_some_and(|s| s.cgroups.is_some())
    }

    async fn park(&self, handle: &str) -> Result<(), RuntimeError> {
        let group = frozen_group(handle)?;
        // Set aside while its processes still run: the tool works through each one's driver.
        let holding = usage::gpu_memory_pids(self, group.pids()).await;
        let tool = match holding.is_empty() {
            true => None,
            false => Some(self.cuda_checkpoint().await.ok_or_else(|| {
                RuntimeError::Unavailable(
                    "it holds GPU memory, and this server has no cuda-checkpoint to set it aside"
                        .into(),
                )
            })?),
        };
        if let Some(tool) = tool.clone() {
            let pids = holding.clone();
            tokio::task::spawn_blocking(move || checkpoint::set_aside(&tool, &pids))
                .await
                .unwrap_or_else(|e| Err(e.to_string()))
                .map_err(|why| {
                    RuntimeError::Unavailable(format!("its GPU memory was not set aside: {why}"))
                })?;
        }
        let freezing = group.clone();
        if !tokio::task::spawn_blocking(move || freezing.freeze())
            .await
            .unwrap_or(false)
        {
            undo_park(group, tool, holding).await;
            return Err(RuntimeError::Unavailable(
                "its processes did not freeze".into(),
            ));
        }
        // Asked once frozen, so that nothing can take GPU memory after the answer: memory it
        // holds would stay taken with its slot given to someone else.
        let usage = self.gpu_usage(&[handle.to_string()]).await;
        if usage.get(handle).is_some_and(|u| u.memory_used_mib > 0) {
            undo_park(group, tool, holding).await;
            return Err(RuntimeError::Unavailable(
                "it still holds GPU memory once frozen".into(),
            ));
        }
        let mut set_aside = self.set_aside.lock().unwrap_or_else(|e| e.into_inner());
        set_aside.insert(handle.to_string(), holding);
        Ok(())
    }

    async fn resume(&self, handle: &str) -> Result<(), RuntimeError> {
        let group = frozen_group(handle)?;
        let thawing = group.clone();
        if !tokio::task::spawn_blocking(move || thawing.thaw())
            .await
            .unwrap_or(false)
        {
            return Err(RuntimeError::Unavailable(
                "its processes did not thaw".into(),
            ));
        }
        // What this server set aside comes back; of an editor parked by the server before a
        // restart, whatever of its group the tool says is set aside.
        let in_group: Vec<u32> = group.pids().into_iter().map(|p| p as u32).collect();
        let pids = match self.take_set_aside(handle) {
            Some(pids) if pids.is_empty() => return Ok(()),
            // Still its own: a pid another process took since is not touched.
            Some(pids) => pids.into_iter().filter(|p| in_group.contains(p)).collect(),
            None => in_group,
        };
        let Some(tool) = self.cuda_checkpoint().await else {
            return Ok(());
        };
        tokio::task::spawn_blocking(move || checkpoint::bring_back(&tool, &pids))
            .await
            .unwrap_or_else(|e| Err(e.to_string()))
            .map_err(|why| {
                RuntimeError::Unavailable(format!("its GPU memory did not come back: {why}"))
            })
    }

    async fn sweep(&self, owned: &std::collections::HashSet<String>) -> usize {
        recovery::sweep(self, owned).await
    }

    async fn is_alive(&self, handle: &str) -> bool {
        serde_json::from_str::<Handle>(handle)
            .map(|h| h.alive())
            .unwrap_or(false)
    }

    async fn last_words(&self, handle: &str) -> String {
        let Ok(handle) = serde_json::from_str::<Handle>(handle) else {
            return String::new();
        };
        tokio::task::spawn_blocking(move || ready::log_tail(&handle.log, 20))
            .await
            .unwrap_or_default()
    }

    fn session_resources(&self, slice_mib: u64) -> Option<(u64, f64)> {
        let sandbox = self.sandbox().filter(|s| s.cgroups.is_some())?;
        let resources = sandbox.local.resources(slice_mib);
        Some((resources.memory_mib, resources.cpus))
    }

    async fn memory_kills(&self, handle: &str) -> Option<u64> {
        let handle = serde_json::from_str::<Handle>(handle).ok()?;
        let group = handle.sandbox?.cgroup?;
        tokio::task::spawn_blocking(move || group.oom_kills())
            .await
            .ok()
    }

    async fn gpu_usage(
        &self,
        handles: &[String],
    ) -> std::collections::HashMap<String, super::GpuUsage> {
        usage::gpu(self, handles).await
    }

    async fn cpu_load(&self, handles: &[String]) -> std::collections::HashMap<String, f64> {
        usage::cpu(self, handles).await
    }

    async fn memory_used(&self, handles: &[String]) -> std::collections::HashMap<String, u64> {
        usage::memory(handles).await
    }
}

/// A park that failed half way: the editor runs again, with its GPU memory back.
async fn undo_park(
    group: crate::runtime::cgroup::Group,
    tool: Option<checkpoint::CudaCheckpoint>,
    holding: Vec<u32>,
) {
    let _ = tokio::task::spawn_blocking(move || {
        group.thaw();
        if let Some(tool) = tool
            && let Err(why) = checkpoint::bring_back(&tool, &holding)
        {
            tracing::error!(%why, "a parked editor's GPU memory did not come back");
        }
    })
    .await;
}

/// The control group of the editor `handle` names, which parking freezes.
fn frozen_group(handle: &str) -> Result<crate::runtime::cgroup::Group, RuntimeError> {
    let handle: Handle =
        serde_json::from_str(handle).map_err(|e| RuntimeError::Handle(e.to_string()))?;
    handle
        .sandbox
        .and_then(|s| s.cgroup)
        .ok_or_else(|| RuntimeError::Unavailable("the editor has no control group".into()))
}

#[cfg(test)]
mod tests;
