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

use super::procfs::process_alive;
use super::sandbox::ACCOUNT_NAME;
use super::{EditorLaunch, Running, Runtime, RuntimeError};
use crate::runtime::editors;
use app::domain::launch::EditorKind;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Where each editor's program is.
#[derive(Clone, Debug)]
pub struct ToolPaths {
    pub jupyterlab: PathBuf,
    pub marimo: PathBuf,
    pub code_server: PathBuf,
}

impl ToolPaths {
    pub fn from_config(config: &crate::config::EditorsConfig) -> ToolPaths {
        let pick = |explicit: &str, default: PathBuf| {
            if explicit.is_empty() {
                default
            } else {
                PathBuf::from(explicit)
            }
        };
        let tools = absolute(&config.tools_dir);
        ToolPaths {
            jupyterlab: pick(&config.jupyterlab, tools.join("venv/bin/jupyter-lab")),
            marimo: pick(&config.marimo, tools.join("venv/bin/marimo")),
            code_server: pick(
                &config.code_server,
                tools.join("npm/node_modules/.bin/code-server"),
            ),
        }
    }

    fn program(&self, editor: EditorKind) -> &Path {
        match editor {
            EditorKind::JupyterLab => &self.jupyterlab,
            EditorKind::Marimo => &self.marimo,
            EditorKind::CodeServer => &self.code_server,
        }
    }
}

fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    }
}

#[derive(Serialize, Deserialize)]
struct Handle {
    pid: i32,
    /// 0 for an editor on a Unix socket.
    port: u16,
    /// The editor's Unix socket, if it has one.
    #[serde(default)]
    socket: Option<PathBuf>,
    log: PathBuf,
    /// The process's start time (clock ticks since boot), so a reused pid is not mistaken for it.
    #[serde(default)]
    started: Option<u64>,
    /// Where the handle is also kept, beside the editor's socket and runtime files.
    #[serde(default)]
    run_dir: Option<PathBuf>,
    /// A pre-started editor's workspace link (see [`LocalRuntime::binding_of`]).
    #[serde(default)]
    binding: Option<PathBuf>,
    /// The editor's sandbox, when it runs in one.
    #[serde(default)]
    sandbox: Option<SandboxHandle>,
}

/// What a sandboxed editor leaves to find and end it by.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct SandboxHandle {
    /// The sandbox's first process (PID 1 inside): when it ends, everything inside ends.
    init: i32,
    init_started: Option<u64>,
    /// The session's cgroup, where the server may make them.
    #[serde(default)]
    cgroup: Option<super::cgroup::Group>,
    /// The `pasta` process that gives the sandbox its network.
    #[serde(default)]
    egress: Option<(i32, Option<u64>)>,
    /// What the editor reaches on the network, in words, or why nothing.
    #[serde(default)]
    network: Option<String>,
    /// A pre-started editor's home, a mount point the workspace is mounted on.
    #[serde(default)]
    slot: Option<PathBuf>,
    /// The spare account a pre-started editor runs as, given back when it stops.
    #[serde(default)]
    lent: Option<u32>,
}

impl SandboxHandle {
    fn init_alive(&self) -> bool {
        process_alive(self.init)
            && (self.init_started.is_none() || process_start_time(self.init) == self.init_started)
    }
}

/// A stopped editor's run directory, on its way out.
const GONE: &str = "gone";

/// The handle's copy in the editor's run directory: what a server that died before it could
/// record the editor leaves for the next one to find.
const HANDLE_FILE: &str = "handle.json";

impl Handle {
    /// Removes what the editor leaves once it is gone: its run directory (socket, runtime files,
    /// caches and the handle's copy; an editor that was killed cannot remove its socket) and a
    /// pre-started editor's workspace link with the empty home it had before a user took it.
    /// The log stays for whoever looks into what happened.
    async fn tidy(&self) {
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
            let _ = tokio::task::spawn_blocking(move || super::sandbox::release_slot(&slot)).await;
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
    fn alive(&self) -> bool {
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

pub struct LocalRuntime {
    tools: ToolPaths,
    data_dir: PathBuf,
    /// Opened on the first sample; None where there is no NVIDIA driver.
    nvml: std::sync::OnceLock<Option<std::sync::Arc<crate::runtime::gpu::NvmlSampler>>>,
    /// Each editor's CPU ticks at the previous [`Runtime::cpu_load`], and when.
    cpu_seen: std::sync::Mutex<std::collections::HashMap<String, (Instant, u64)>>,
    /// The sandbox every editor runs in, or why there is none.
    sandbox: Result<super::sandbox::Sandbox, String>,
}

/// Where a sandboxed editor's home is, inside.
const HOME_INSIDE: &str = "/home/user";

/// Where a sandboxed editor's run directory is, inside: nothing of the data directory's path
/// shows.
const RUN_INSIDE: &str = "/run/editor";

/// The port marimo listens on inside its own network namespace, behind its socket's relay.
const MARIMO_PORT: u16 = 2718;

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
        if socket_path(EditorKind::JupyterLab, &sample, false).is_none() {
            tracing::warn!(data_dir = %data_dir.display(), "the data directory's path is too long for Unix sockets; editors listen on ports of 127.0.0.1 instead");
        }
        LocalRuntime {
            tools,
            data_dir,
            nvml: std::sync::OnceLock::new(),
            cpu_seen: Default::default(),
            sandbox: Err("not asked for".into()),
        }
    }

    fn sandbox(&self) -> Option<&super::sandbox::Sandbox> {
        self.sandbox.as_ref().ok()
    }

    fn workspaces_dir(&self) -> PathBuf {
        self.data_dir.join("workspaces")
    }

    fn workspace_of(&self, user_name: &str) -> PathBuf {
        self.workspaces_dir().join(safe_name(user_name))
    }

    /// A pre-started editor's workspace: a link that points at an empty directory until a user
    /// takes the editor over. Editors keep the path, not its target, so files appear on rebinding.
    fn binding_of(&self, launch_id: &str) -> PathBuf {
        self.data_dir.join("bind").join(safe_name(launch_id))
    }

    /// A sandboxed pre-started editor's home: a folder of its own, made a mount point that the
    /// user's workspace is mounted on when a launch takes the editor.
    fn slot_of(&self, launch_id: &str) -> PathBuf {
        self.data_dir.join("slots").join(safe_name(launch_id))
    }

    fn unbound_workspace(&self, launch_id: &str) -> std::io::Result<PathBuf> {
        let link = self.binding_of(launch_id);
        let empty = link.with_extension("empty");
        std::fs::create_dir_all(&empty)?;
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&empty, &link)?;
        Ok(link)
    }

    async fn probe(upstream: &str, path: &str, auth: &editors::UpstreamAuth) -> Option<u16> {
        let request = auth.request(path)?;
        let (status, _) = tokio::time::timeout(
            Duration::from_secs(2),
            crate::net::upstream::fetch(upstream, request, 64 * 1024),
        )
        .await
        .ok()?
        .ok()?;
        Some(status.as_u16())
    }
}

/// Copies into `to` what `from` holds and `to` lacks, directories merged, nothing overwritten;
/// links are left out. A missing `from` copies nothing.
fn copy_missing(from: &Path, to: &Path, owner: Option<u32>) -> std::io::Result<()> {
    let own = |path: &Path| match owner {
        Some(uid) => std::os::unix::fs::lchown(path, Some(uid), Some(uid)),
        None => Ok(()),
    };
    let entries = match std::fs::read_dir(from) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            match std::fs::create_dir(&target) {
                Ok(()) => own(&target)?,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
            if target.is_dir() {
                copy_missing(&entry.path(), &target, owner)?;
            }
        } else if kind.is_file() && std::fs::symlink_metadata(&target).is_err() {
            std::fs::copy(entry.path(), &target)?;
            own(&target)?;
        }
    }
    Ok(())
}

/// A directory name for any user name: lowercase ASCII letters, digits, '-' and '_' kept, the rest hex-escaped.
pub fn safe_name(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
            out.push(c.to_ascii_lowercase());
            if c.is_ascii_uppercase() {
                out.push('^');
            }
        } else {
            out.push_str(&format!("~{:x}", c as u32));
        }
    }
    if out.is_empty() { "~".into() } else { out }
}

/// Where the editor listens, if on a Unix socket. A socket's path has room for 107 bytes
/// (`sun_path` holds 108 with the final NUL); a deeper data directory gets a port instead.
/// In a sandbox every editor answers on a socket (marimo through a relay).
fn socket_path(editor: EditorKind, run_dir: &Path, sandboxed: bool) -> Option<PathBuf> {
    let socket = run_dir.join("editor.sock");
    ((sandboxed || editors::listens_on_unix_socket(editor)) && socket.as_os_str().len() <= 107)
        .then_some(socket)
}

/// Where a user's own packages go (`pip install` in a terminal or a notebook), in their home.
const USER_PACKAGES: &str = ".local/lib/python-packages";

/// The account of the user whose workspace is `workspace`, with the workspace made a file
/// system of `disk_mib` where this machine can (a folder, checked at launch, where it cannot).
fn own_workspace(
    accounts: &super::accounts::Accounts,
    disks: Option<&super::disk::Disks>,
    workspaces: &Path,
    workspace: &Path,
    disk_mib: u64,
) -> std::io::Result<u32> {
    let uid = accounts.of_workspace(workspaces, workspace)?;
    let Some(disks) = disks.filter(|_| disk_mib > 0) else {
        return Ok(uid);
    };
    if let Err(e) = disks.ensure(workspace, disk_mib, uid) {
        tracing::warn!(workspace = %workspace.display(), error = %e, "the workspace stays a folder: its quota is checked at launch only");
    }
    // A file system made earlier has its own owner: the account is whoever owns it now.
    accounts.of_workspace(workspaces, workspace)
}

/// The launch's datasets that are host folders, each with its mount point made in the workspace.
fn local_datasets(
    launch: &EditorLaunch,
    workspace: &Path,
    owner: Option<u32>,
) -> Vec<(PathBuf, String)> {
    let folders: Vec<(PathBuf, String)> = launch
        .datasets
        .iter()
        .filter_map(|d| match &d.place {
            app::domain::datasets::Place::Path(path) => Some((PathBuf::from(path), d.name.clone())),
            app::domain::datasets::Place::Claim(_) => None,
        })
        .collect();
    if folders.is_empty() {
        return folders;
    }
    let names: Vec<String> = folders.iter().map(|(_, n)| n.clone()).collect();
    let ready = dataset_mount_points(workspace, &names, owner);
    folders
        .into_iter()
        .filter(|(_, name)| ready.contains(name))
        .collect()
}

/// Makes `<workspace>/datasets/<name>` for each name, owned by `owner`, as mount points for the
/// datasets' read-only binds; never following a link the user made there (the server is root
/// here). The names whose mount point is there: a `datasets` that is not a folder leaves all out.
fn dataset_mount_points(workspace: &Path, names: &[String], owner: Option<u32>) -> Vec<String> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let open_dir = |at: Option<i32>, name: &Path| -> std::io::Result<OwnedFd> {
        let c = std::ffi::CString::new(name.as_os_str().as_encoded_bytes())
            .map_err(std::io::Error::other)?;
        let flags = libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_RDONLY;
        // SAFETY: open(at) of a valid C string; the descriptor is owned at once.
        let fd = unsafe { libc::openat(at.unwrap_or(libc::AT_FDCWD), c.as_ptr(), flags) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd was just opened and is ours.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    };
    let make = |at: &OwnedFd, name: &str| -> std::io::Result<OwnedFd> {
        let c = std::ffi::CString::new(name).map_err(std::io::Error::other)?;
        // SAFETY: mkdirat in a directory we hold open, with a valid C string.
        if unsafe { libc::mkdirat(at.as_raw_fd(), c.as_ptr(), 0o755) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                return Err(e);
            }
        }
        let dir = open_dir(Some(at.as_raw_fd()), Path::new(name))?;
        if let Some(uid) = owner {
            std::os::unix::fs::fchown(&dir, Some(uid), Some(uid))?;
        }
        Ok(dir)
    };
    let base = match open_dir(None, workspace)
        .and_then(|w| make(&w, app::domain::datasets::MOUNT_DIR))
    {
        Ok(base) => base,
        Err(e) => {
            tracing::warn!(workspace = %workspace.display(), error = %e, "no datasets: ~/datasets is not a folder");
            return Vec::new();
        }
    };
    names
        .iter()
        .filter(|name| match make(&base, name) {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(dataset = %name, error = %e, "a dataset's mount point");
                false
            }
        })
        .cloned()
        .collect()
}

/// `words` as one line for `sh -c`, each single-quoted.
fn shell_words(words: &[String]) -> String {
    words
        .iter()
        .map(|w| format!("'{}'", w.replace('\'', "'\\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Gives the sandbox whose first process is `init` the outside world (`pasta`); the pasta
/// process's pid and start time, to end it with the editor. It runs in the session's cgroup
/// (`procs_files`), so that ending the session's group ends it too, however the editor ended.
fn start_egress(
    pasta: &Path,
    init: i32,
    forward: Option<u16>,
    root: bool,
    log: &std::fs::File,
    procs_files: Vec<std::ffi::CString>,
) -> Option<(i32, Option<u64>)> {
    use std::os::unix::process::CommandExt;
    let args = super::sandbox::egress_arguments(init as u32, forward, root);
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
        command.pre_exec(move || super::cgroup::join_self(&procs_files));
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
fn settle(init: i32) {
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

fn free_port() -> std::io::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// Field 22 of /proc/<pid>/stat: when the process started, in clock ticks since boot.
fn process_start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses; fields after it are plain.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// Every process below `leader`, with its start time (so a reused pid is not mistaken for it).
fn descendants(leader: u32) -> Vec<(u32, u64)> {
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

/// The editors' leaders by pid, from their handles.
fn leaders_of(handles: &[String]) -> std::collections::HashMap<u32, String> {
    handles
        .iter()
        .filter_map(|raw| {
            let handle: Handle = serde_json::from_str(raw).ok()?;
            // A pid that now belongs to another process must not lend it its work.
            (handle.pid > 0 && handle.alive()).then(|| (handle.pid as u32, raw.clone()))
        })
        .collect()
}

fn signal_group(pid: i32, signal: i32) {
    if pid > 0 {
        // SAFETY: killpg only sends a signal to the group the editor leads.
        unsafe {
            libc::killpg(pid, signal);
        }
    }
}

/// The last `lines` lines of a log file.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Ends the editor's process group and what left it, then what it leaves on disk.
async fn stop_editor(handle: &Handle) {
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
        let program = self.tools.program(launch.editor);
        if !program.exists() {
            return Err(RuntimeError::Unavailable(format!(
                "{} is not installed",
                launch.editor.label()
            )));
        }
        let began = Instant::now();
        let sandbox = self.sandbox();
        let prestart_slot = launch.prestart && sandbox.is_some();
        let workspace = if prestart_slot {
            self.slot_of(&launch.session_id)
        } else if launch.prestart {
            self.unbound_workspace(&launch.session_id)?
        } else {
            self.workspace_of(&launch.user_name)
        };
        let run_dir = self.data_dir.join("run").join(&launch.session_id);
        let log_dir = self.data_dir.join("logs");
        for dir in [&workspace, &run_dir, &log_dir] {
            tokio::fs::create_dir_all(dir).await?;
        }
        // The editor's socket, runtime files and caches are the editor's alone.
        tokio::fs::set_permissions(&run_dir, std::fs::Permissions::from_mode(0o700)).await?;
        let accounts = sandbox.and_then(|s| s.accounts.clone());
        let disks = sandbox.and_then(|s| s.disks.as_ref().ok().cloned());
        let account = match accounts {
            Some(accounts) => {
                let (run, home, workspaces) =
                    (run_dir.clone(), workspace.clone(), self.workspaces_dir());
                let (prestart, disk_mib) = (prestart_slot, launch.disk_mib);
                let uid = tokio::task::spawn_blocking(move || {
                    let uid = if prestart {
                        let uid = accounts.lend(&workspaces)?;
                        std::os::unix::fs::chown(&home, Some(uid), Some(uid))?;
                        uid
                    } else {
                        own_workspace(&accounts, disks.as_ref(), &workspaces, &home, disk_mib)?
                    };
                    std::os::unix::fs::chown(&run, Some(uid), Some(uid))?;
                    Ok::<_, std::io::Error>(uid)
                })
                .await
                .map_err(|e| RuntimeError::Io(std::io::Error::other(e)))??;
                Some((uid, uid))
            }
            None => None,
        };
        if prestart_slot {
            let slot = workspace.clone();
            tokio::task::spawn_blocking(move || super::sandbox::share_slot(&slot))
                .await
                .map_err(|e| RuntimeError::Io(std::io::Error::other(e)))??;
        }
        let home = if sandbox.is_some() {
            PathBuf::from(HOME_INSIDE)
        } else {
            workspace.clone()
        };
        let log_path = log_dir.join(format!("{}.log", launch.session_id));
        let log = std::fs::File::create(&log_path)?;
        let run_inside = if sandbox.is_some() {
            PathBuf::from(RUN_INSIDE)
        } else {
            run_dir.clone()
        };
        let socket = socket_path(launch.editor, &run_dir, sandbox.is_some());
        if sandbox.is_some() && socket.is_none() {
            return Err(RuntimeError::Unavailable(
                "the data directory's path is too long for an editor's socket".into(),
            ));
        }
        let socket_inside = run_inside.join("editor.sock");
        let (port, upstream, listen) = match (&socket, sandbox) {
            // In its own network namespace marimo's port is its own: the relay's socket is the
            // way in, and no other account can bind the port first.
            (Some(socket), Some(_)) if !editors::listens_on_unix_socket(launch.editor) => {
                let _ = tokio::fs::remove_file(socket).await;
                let upstream = format!("{}{}", crate::net::upstream::UNIX_PREFIX, socket.display());
                let listen = editors::Listen::Tcp {
                    host: "127.0.0.1",
                    port: MARIMO_PORT,
                };
                (0, upstream, listen)
            }
            (Some(socket), _) => {
                // Left by an editor that was killed; the new one could not bind over it.
                let _ = tokio::fs::remove_file(socket).await;
                let upstream = format!("{}{}", crate::net::upstream::UNIX_PREFIX, socket.display());
                let inside = if sandbox.is_some() {
                    &socket_inside
                } else {
                    socket
                };
                (0, upstream, editors::Listen::Unix(inside))
            }
            (None, _) => {
                let port = free_port()?;
                let listen = editors::Listen::Tcp {
                    host: "127.0.0.1",
                    port,
                };
                (port, format!("127.0.0.1:{port}"), listen)
            }
        };
        // code-server's secret is an argon2 hash (cheap, but not free): off the async threads.
        let editor = launch.editor;
        let secret = tokio::task::spawn_blocking(move || editors::new_secret(editor))
            .await
            .map_err(|e| RuntimeError::Handle(e.to_string()))?;
        let args = editors::arguments(
            launch.editor,
            listen,
            &launch.base_path,
            &home.to_string_lossy(),
            "-",
        );
        let stdin_secret = editors::secret_stdin(launch.editor, &secret);
        // A pre-started editor's home is mounted over later (or a link swapped), and a
        // process's working directory would stay what was there before: its run directory lasts.
        let workdir = if launch.prestart {
            run_inside.clone()
        } else {
            home.clone()
        };
        let mut editor_command: Vec<std::ffi::OsString> = vec![program.as_os_str().into()];
        editor_command.extend(args.iter().map(Into::into));
        // Where code-server keeps the user's settings and extensions (its default under
        // `XDG_DATA_HOME`, set below): set up there, from inside, before it starts.
        let data_home = home.join(".local/share");
        if launch.editor == EditorKind::CodeServer {
            editor_command =
                editors::with_settings_seed(&data_home.join("code-server"), editor_command);
        }
        let group = match sandbox.and_then(|s| s.cgroups.as_ref()) {
            Some(layout) => {
                let resources = sandbox.map(|s| s.local.resources(launch.slice.memory_mib));
                let limits = resources.map(|r| super::cgroup::Limits {
                    memory_mib: r.memory_mib,
                    cpu_millis: (r.cpus * 1000.0).round() as u64,
                    pids: r.pids,
                });
                let (layout, name) = (layout.clone(), launch.session_id.clone());
                let made = tokio::task::spawn_blocking(move || match limits {
                    Some(limits) => layout.create(&name, &limits).map(Some),
                    None => Ok(None),
                })
                .await
                .map_err(|e| RuntimeError::Io(std::io::Error::other(e)))?;
                made?
            }
            None => None,
        };
        let (program_to_run, full_args, info) = match sandbox {
            Some(sandbox) => {
                if !editors::listens_on_unix_socket(launch.editor)
                    && let Some(socat) = &sandbox.tools.socat
                {
                    let relay = super::sandbox::relay_command(socat, &socket_inside, MARIMO_PORT);
                    let relay: Vec<String> = relay
                        .iter()
                        .map(|a| a.to_string_lossy().into_owned())
                        .collect();
                    let script = format!("{} </dev/null & exec \"$0\" \"$@\"", shell_words(&relay));
                    let mut wrapped: Vec<std::ffi::OsString> =
                        vec!["/bin/sh".into(), "-c".into(), script.into()];
                    wrapped.extend(editor_command);
                    editor_command = wrapped;
                }
                let devices = launch.slice_devices().map_err(std::io::Error::other)?;
                if sandbox.preload.is_some() && !devices.is_empty() {
                    super::sandbox::write_preload_files(
                        &run_dir,
                        sandbox.pin.is_some(),
                        &launch.env,
                    )?;
                }
                if let Some(account) = account {
                    super::sandbox::write_account_files(&run_dir, account, Path::new(HOME_INSIDE))?;
                }
                let datasets = local_datasets(launch, &workspace, account.map(|(uid, _)| uid));
                let spec = super::sandbox::Spec {
                    system: &sandbox.system,
                    tools: &sandbox.tool_dirs,
                    hidden: &sandbox.hidden,
                    home: &workspace,
                    home_inside: Path::new(HOME_INSIDE),
                    run_dir: &run_dir,
                    run_inside: &run_inside,
                    devices: &devices,
                    preload: sandbox.gpu_preload().filter(|_| !devices.is_empty()),
                    account,
                    workdir: &workdir,
                    command: &editor_command,
                    datasets: &datasets,
                };
                let mut args = vec![
                    std::ffi::OsString::from("--info-fd"),
                    super::sandbox::INFO_FD.to_string().into(),
                ];
                args.extend(super::sandbox::arguments(&spec, &sandbox.tools));
                let bwrap = sandbox.tools.bwrap.clone().expect("a sandbox has bwrap");
                (bwrap, args, Some(super::sandbox::info_pipe()?))
            }
            None => (
                PathBuf::from(&editor_command[0]),
                editor_command[1..].to_vec(),
                None,
            ),
        };
        if tracing::enabled!(tracing::Level::DEBUG) {
            // Where to look first when an editor does not start (no secret is on a command line).
            let line: Vec<String> = std::iter::once(program_to_run.to_string_lossy().into_owned())
                .chain(full_args.iter().map(|a| a.to_string_lossy().into_owned()))
                .collect();
            tracing::debug!(session = %launch.session_id, command = %shell_words(&line), "starting an editor");
        }
        let egress_log = log.try_clone()?;
        let mut command = tokio::process::Command::new(&program_to_run);
        command
            .env_clear()
            .envs(
                editors::INHERITED_ENV
                    .iter()
                    .filter_map(|k| std::env::var(k).ok().map(|v| (*k, v))),
            )
            .args(&full_args)
            .current_dir(if sandbox.is_some() {
                &run_dir
            } else {
                &workdir
            })
            .env("HOME", &home)
            .envs(
                account
                    .filter(|_| sandbox.is_some())
                    .map(|_| [("USER", ACCOUNT_NAME), ("LOGNAME", ACCOUNT_NAME)])
                    .into_iter()
                    .flatten(),
            )
            .env("JUPYTER_RUNTIME_DIR", run_inside.join("jupyter"))
            .env("XDG_CACHE_HOME", run_inside.join("cache"))
            .env("XDG_DATA_HOME", &data_home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            // A user's `pip install` goes into their own workspace, not the editors' tooling.
            .env("PIP_TARGET", home.join(USER_PACKAGES))
            .env("PYTHONPATH", home.join(USER_PACKAGES))
            .env("PYTHONUNBUFFERED", "1")
            // Git never looks above the workspace: a data dir inside a checkout would otherwise
            // show the editor that checkout (code-server's "open the parent repository?").
            .env(
                "GIT_CEILING_DIRECTORIES",
                home.parent().unwrap_or(std::path::Path::new("/")),
            )
            .envs(
                launch
                    .env
                    .iter()
                    .filter(|(k, _)| {
                        sandbox.is_none()
                            || !super::gpu::UNSANDBOXED_PRELOAD_ENV.contains(&k.as_str())
                    })
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            )
            .envs(editors::secret_env(launch.editor, &secret))
            .stdin(if stdin_secret.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .kill_on_drop(false);
        let procs_files = group.as_ref().map(|g| g.procs_files()).unwrap_or_default();
        let prepared = began.elapsed();
        let info_write = info.as_ref().map(|(_, write)| {
            use std::os::fd::AsRawFd;
            write.as_raw_fd()
        });
        // The server's own umask (077) would make the folders bwrap creates inside (`/root`
        // above a tool folder, say) unreadable to the editor's account; what the editor writes
        // stays in its home, which is its alone.
        let umask = if sandbox.is_some() { 0o022 } else { 0o077 };
        // SAFETY: between fork and exec this only writes to cgroup files and duplicates a
        // descriptor, through async-signal-safe calls on memory made before the fork.
        unsafe {
            command.pre_exec(move || {
                libc::umask(umask);
                super::cgroup::join_self(&procs_files)?;
                if let Some(fd) = info_write
                    && libc::dup2(fd, super::sandbox::INFO_FD) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let spawned = command.spawn();
        let (info_read, info_write) = match info {
            Some((read, write)) => (Some(read), Some(write)),
            None => (None, None),
        };
        drop(info_write);
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                if let Some(group) = &group {
                    group.remove();
                }
                return Err(e.into());
            }
        };
        let pid = child.id().map(|p| p as i32).unwrap_or(0);
        if let (Some(secret), Some(mut stdin)) = (stdin_secret, child.stdin.take()) {
            use tokio::io::AsyncWriteExt;
            // Written, then closed when dropped: the editor reads to the end.
            stdin.write_all(secret.as_bytes()).await?;
        }
        // Reap it when it exits, so a dead editor is not left as a zombie that still "exists".
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        let sandbox_handle = match (sandbox, info_read) {
            (Some(sandbox), Some(read)) => {
                let init = tokio::time::timeout(
                    Duration::from_secs(10),
                    tokio::task::spawn_blocking(move || super::sandbox::read_child_pid(read)),
                )
                .await
                .ok()
                .and_then(Result::ok)
                .flatten();
                let sandboxed_in = began.elapsed();
                let Some(init) = init else {
                    if let Some(group) = &group {
                        group.kill();
                        group.remove();
                    }
                    return Err(RuntimeError::Failed {
                        message: "the editor's sandbox could not be made".into(),
                        log_tail: log_tail(&log_path, 20),
                    });
                };
                let (egress, network) = match (sandbox.local.network, &sandbox.tools.pasta) {
                    (crate::config::local::Network::Egress, Some(pasta)) => {
                        let (pasta, forward, root) =
                            (pasta.clone(), sandbox.forward, sandbox.tools.root);
                        let nft = sandbox.tools.nft.clone();
                        let edge = super::egress::Edge {
                            allow: sandbox.edge.allow(),
                            deny: sandbox.edge.deny(),
                            own: super::egress::own_addresses(),
                            resolvers: super::egress::host_resolvers(),
                        };
                        let words = sandbox.edge.describe();
                        let procs_files =
                            group.as_ref().map(|g| g.procs_files()).unwrap_or_default();
                        tokio::task::spawn_blocking(move || {
                            settle(init);
                            tracing::debug!(
                                settled_ms = began.elapsed().as_millis() as u64,
                                "sandbox settled"
                            );
                            let edged = nft
                                .ok_or_else(|| "nftables (nft) is not installed".to_string())
                                .and_then(|nft| {
                                    super::egress::install(&nft, init, root, &edge.ruleset())
                                });
                            match edged {
                                Ok(()) => {
                                    let pasta = start_egress(
                                        &pasta,
                                        init,
                                        forward,
                                        root,
                                        &egress_log,
                                        procs_files,
                                    );
                                    let words = match pasta {
                                        Some(_) => words,
                                        None => "none: pasta did not start".to_string(),
                                    };
                                    (pasta, Some(words))
                                }
                                Err(why) => {
                                    tracing::warn!(error = %why, "the sandbox's network rules; the editor has no network");
                                    let words = format!(
                                        "none: the network rules could not be set ({why})"
                                    );
                                    use std::io::Write;
                                    let _ = writeln!(&egress_log, "network: {words}");
                                    (None, Some(words))
                                }
                            }
                        })
                        .await
                        .unwrap_or((None, None))
                    }
                    _ => (None, Some(sandbox.network_words())),
                };
                tracing::debug!(session = %launch.session_id, sandbox_ms = sandboxed_in.as_millis() as u64, "sandbox made");
                Some(SandboxHandle {
                    init,
                    init_started: process_start_time(init),
                    cgroup: group,
                    egress,
                    network,
                    slot: prestart_slot.then(|| workspace.clone()),
                    lent: account.map(|(uid, _)| uid).filter(|_| prestart_slot),
                })
            }
            _ => None,
        };
        tracing::info!(session = %launch.session_id, editor = %launch.editor, pid, %upstream, sandboxed = sandbox_handle.is_some(), prepared_ms = prepared.as_millis() as u64, started_ms = began.elapsed().as_millis() as u64, "editor started");
        let handle = serde_json::to_string(&Handle {
            pid,
            port,
            socket,
            log: log_path,
            started: process_start_time(pid),
            run_dir: Some(run_dir.clone()),
            binding: (launch.prestart && !prestart_slot)
                .then(|| self.binding_of(&launch.session_id)),
            sandbox: sandbox_handle,
        })
        .map_err(|e| RuntimeError::Handle(e.to_string()))?;
        // Only a safety net for the next start: the editor runs, and the caller gets its handle,
        // even if the copy cannot be written.
        if let Err(e) = tokio::fs::write(run_dir.join(HANDLE_FILE), &handle).await {
            tracing::warn!(session = %launch.session_id, error = %e, "keeping the editor's handle beside it");
        }
        Ok(Running {
            upstream,
            secret,
            handle,
        })
    }

    async fn wait_ready(
        &self,
        launch: &EditorLaunch,
        running: &Running,
        timeout: Duration,
    ) -> Result<(), RuntimeError> {
        let handle: Handle = serde_json::from_str(&running.handle)
            .map_err(|e| RuntimeError::Handle(e.to_string()))?;
        let path = editors::readiness_path(launch.editor, &launch.base_path);
        let auth = editors::upstream_auth(launch.editor, &running.secret);
        let started = Instant::now();
        let mut last_status = None;
        loop {
            match Self::probe(&running.upstream, &path, &auth).await {
                Some(status) if (200..300).contains(&status) => {
                    tracing::info!(session = %launch.session_id, ready_ms = started.elapsed().as_millis() as u64, "editor answered");
                    return Ok(());
                }
                other => last_status = other.or(last_status),
            }
            if !handle.alive() {
                return Err(RuntimeError::Failed {
                    message: format!("{} exited before it was ready", launch.editor.label()),
                    log_tail: log_tail(&handle.log, 20),
                });
            }
            if started.elapsed() > timeout {
                let answer = last_status
                    .map(|s| format!(" (last answer: HTTP {s})"))
                    .unwrap_or_default();
                return Err(RuntimeError::Failed {
                    message: format!(
                        "{} did not answer within {} s{answer}",
                        launch.editor.label(),
                        timeout.as_secs()
                    ),
                    log_tail: log_tail(&handle.log, 20),
                });
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
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
        let workspace = self.workspace_of(user_name);
        tokio::fs::create_dir_all(&workspace).await?;
        if let Some(sandbox) = self.sandbox() {
            let slot = self.slot_of(launch_id);
            let accounts = sandbox.accounts.clone();
            let disks = sandbox.disks.as_ref().ok().cloned();
            let workspaces = self.workspaces_dir();
            return tokio::task::spawn_blocking(move || {
                use std::os::unix::fs::MetadataExt;
                let spare = std::fs::metadata(&slot)?.uid();
                let owner = match &accounts {
                    Some(accounts) => Some(own_workspace(
                        accounts,
                        disks.as_ref(),
                        &workspaces,
                        &workspace,
                        disk_mib,
                    )?),
                    None => None,
                };
                // What the editor made in its empty home at start (Jupyter's notebook secret,
                // say) is found under the same paths afterwards, unless the user has their own.
                copy_missing(&slot, &workspace, owner)?;
                match owner {
                    // The user's files, shown to the editor's spare account as its own.
                    Some(owner) => super::idmap::mount_as(&workspace, &slot, owner, spare),
                    None => super::sandbox::mount_into(&workspace, &slot),
                }
            })
            .await
            .map_err(|e| RuntimeError::Io(std::io::Error::other(e)))?
            .map_err(RuntimeError::Io);
        }
        let link = self.binding_of(launch_id);
        // What the editor made in its empty home at start (Jupyter's notebook secret, say) is
        // found under the same paths after the swap, unless the user has their own.
        let made = link.with_extension("empty");
        let into = workspace.clone();
        tokio::task::spawn_blocking(move || copy_missing(&made, &into, None))
            .await
            .map_err(|e| RuntimeError::Io(std::io::Error::other(e)))??;
        let staged = link.with_extension("next");
        let _ = tokio::fs::remove_file(&staged).await;
        tokio::fs::symlink(&workspace, &staged).await?;
        // rename(2) swaps the link in one step: the editor never sees it missing.
        tokio::fs::rename(&staged, &link).await?;
        let _ = tokio::fs::remove_dir_all(link.with_extension("empty")).await;
        Ok(())
    }

    fn workspace_dir(&self, user_name: &str) -> Option<PathBuf> {
        Some(self.workspace_of(user_name))
    }

    async fn remove_workspace(&self, user_name: &str) -> Result<(), RuntimeError> {
        let workspace = self.workspace_of(user_name);
        let disks = self.sandbox().and_then(|s| s.disks.as_ref().ok()).cloned();
        tokio::task::spawn_blocking(move || {
            if let Some(disks) = disks {
                disks.remove(&workspace)?;
            }
            // Not following links: a link in the workspace removes the link, not its target.
            match std::fs::remove_dir_all(&workspace) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            }
        })
        .await
        .map_err(|e| RuntimeError::Unavailable(format!("removing a workspace: {e}")))?
        .map_err(RuntimeError::Io)
    }

    async fn workspace_mib(&self, user_name: &str) -> Option<u64> {
        let workspace = self.workspace_of(user_name);
        tokio::task::spawn_blocking(move || directory_bytes(&workspace))
            .await
            .ok()
            .map(|bytes| bytes.div_ceil(1024 * 1024))
    }

    async fn stop(&self, handle: &str) -> Result<(), RuntimeError> {
        let handle: Handle =
            serde_json::from_str(handle).map_err(|e| RuntimeError::Handle(e.to_string()))?;
        stop_editor(&handle).await;
        let lent = handle.sandbox.as_ref().and_then(|s| s.lent);
        if let (Some(uid), Some(accounts)) =
            (lent, self.sandbox().and_then(|s| s.accounts.as_ref()))
        {
            accounts.give_back(uid);
        }
        Ok(())
    }

    async fn sweep(&self, owned: &std::collections::HashSet<String>) -> usize {
        let mut stopped = 0;
        // No run folder yet: no handle to look at, but there may still be groups (below).
        let mut entries = tokio::fs::read_dir(self.data_dir.join("run")).await.ok();
        while let Some(Ok(Some(entry))) = match entries.as_mut() {
            Some(entries) => Some(entries.next_entry().await),
            None => None,
        } {
            let launch_id = entry.file_name().to_string_lossy().into_owned();
            if entry.path().extension().is_some_and(|e| e == GONE) {
                // Left by a server that stopped before it had deleted them.
                let _ = tokio::fs::remove_dir_all(entry.path()).await;
                continue;
            }
            if owned.contains(&launch_id) {
                continue;
            }
            let file = entry.path().join(HANDLE_FILE);
            let Ok(raw) = tokio::fs::read_to_string(&file).await else {
                continue;
            };
            match serde_json::from_str::<Handle>(&raw) {
                // Without its start time a pid alone could name another process by now.
                Ok(handle) if handle.started.is_some() => {
                    let alive = handle.alive();
                    if alive {
                        tracing::warn!(launch = %launch_id, pid = handle.pid, "stopping an editor that no session owns");
                    }
                    // Also when its leader is gone: what is left of its group goes too.
                    stop_editor(&handle).await;
                    stopped += usize::from(alive);
                }
                _ => {
                    let _ = tokio::fs::remove_file(&file).await;
                }
            }
        }
        // Sessions' groups and slots no handle named (a server that died mid-start).
        if let Some(sandbox) = self.sandbox() {
            if let Some(layout) = &sandbox.cgroups {
                for name in layout.groups() {
                    if owned.contains(&name) {
                        continue;
                    }
                    let group = layout.group(&name);
                    if group.is_populated() {
                        tracing::warn!(launch = %name, "ending a sandbox that no session owns");
                        group.kill();
                        stopped += 1;
                        // A killed task leaves its group as it exits: a moment later.
                        for _ in 0..100 {
                            if !group.is_populated() {
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                    group.remove();
                }
            }
            if let Ok(mut slots) = tokio::fs::read_dir(self.data_dir.join("slots")).await {
                while let Ok(Some(slot)) = slots.next_entry().await {
                    let name = slot.file_name().to_string_lossy().into_owned();
                    if !owned.iter().any(|id| safe_name(id) == name) {
                        let path = slot.path();
                        let _ = tokio::task::spawn_blocking(move || {
                            super::sandbox::release_slot(&path)
                        })
                        .await;
                    }
                }
            }
        }
        stopped
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
        tokio::task::spawn_blocking(move || log_tail(&handle.log, 20))
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
        let sampler = match self.nvml.get() {
            Some(sampler) => sampler.clone(),
            None => {
                // Loading the driver can take seconds: off the async threads.
                let opened = tokio::task::spawn_blocking(|| {
                    crate::runtime::gpu::NvmlSampler::open().map(std::sync::Arc::new)
                })
                .await
                .unwrap_or(None);
                self.nvml.get_or_init(|| opened).clone()
            }
        };
        let Some(sampler) = sampler else {
            return Default::default();
        };
        let leaders = leaders_of(handles);
        tokio::task::spawn_blocking(move || {
            let (memory, samples) = sampler.sample();
            let parents: std::collections::HashMap<u32, u32> =
                crate::runtime::procfs::read_processes()
                    .into_iter()
                    .map(|p| (p.pid, p.ppid))
                    .collect();
            let now_us = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_micros() as u64)
                .unwrap_or(0);
            crate::runtime::gpu::usage_by_editor(
                &leaders,
                |pid| parents.get(&pid).copied(),
                &memory,
                &samples,
                now_us,
            )
        })
        .await
        .unwrap_or_default()
    }

    async fn cpu_load(&self, handles: &[String]) -> std::collections::HashMap<String, f64> {
        use super::procfs;
        let leaders = leaders_of(handles);
        let ticks = tokio::task::spawn_blocking(move || {
            procfs::ticks_by_editor(&leaders, &procfs::read_processes())
        })
        .await
        .unwrap_or_default();
        let now = Instant::now();
        let per_second = procfs::ticks_per_second();
        let mut seen = self.cpu_seen.lock().unwrap_or_else(|e| e.into_inner());
        let mut load = std::collections::HashMap::new();
        for (handle, now_ticks) in &ticks {
            if let Some((then, then_ticks)) = seen.get(handle) {
                let seconds = now.duration_since(*then).as_secs_f64();
                load.insert(
                    handle.clone(),
                    procfs::cores_between(*then_ticks, *now_ticks, per_second, seconds),
                );
            }
        }
        // Editors that ended are forgotten.
        *seen = ticks.into_iter().map(|(h, t)| (h, (now, t))).collect();
        load
    }

    async fn memory_used(&self, handles: &[String]) -> std::collections::HashMap<String, u64> {
        use super::procfs;
        let handles = handles.to_vec();
        tokio::task::spawn_blocking(move || {
            let mut used = std::collections::HashMap::new();
            // A sandboxed editor's cgroup knows exactly; the others are summed from /proc.
            let mut uncounted = Vec::new();
            for raw in handles {
                let group = serde_json::from_str::<Handle>(&raw)
                    .ok()
                    .and_then(|h| h.sandbox?.cgroup);
                match group.and_then(|g| g.working_set_bytes()) {
                    Some(bytes) => {
                        used.insert(raw, bytes / (1024 * 1024));
                    }
                    None => uncounted.push(raw),
                }
            }
            if !uncounted.is_empty() {
                let page = procfs::page_bytes();
                let pages =
                    procfs::rss_pages_by_editor(&leaders_of(&uncounted), &procfs::read_processes());
                used.extend(
                    pages
                        .into_iter()
                        .map(|(handle, pages)| (handle, pages * page / (1024 * 1024))),
                );
            }
            used
        })
        .await
        .unwrap_or_default()
    }
}

/// Bytes in the files under `dir` (links not followed); a missing directory is empty.
fn directory_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            match entry.metadata() {
                Ok(meta) if meta.is_dir() => pending.push(entry.path()),
                Ok(meta) if meta.is_file() => total += meta.len(),
                _ => {}
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_user_has_wins_and_what_they_lack_is_copied() {
        let from = tempfile::tempdir().unwrap();
        let to = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(from.path().join(".local/share/jupyter")).unwrap();
        std::fs::write(
            from.path().join(".local/share/jupyter/notebook_secret"),
            "new",
        )
        .unwrap();
        std::fs::write(from.path().join("settings.json"), "editor's").unwrap();
        std::fs::create_dir_all(to.path().join(".local/share")).unwrap();
        std::fs::write(to.path().join("settings.json"), "user's").unwrap();
        std::os::unix::fs::symlink("/etc", from.path().join("link")).unwrap();

        copy_missing(from.path(), to.path(), None).unwrap();
        let read = |p: &str| std::fs::read_to_string(to.path().join(p)).unwrap();
        assert_eq!(read(".local/share/jupyter/notebook_secret"), "new");
        assert_eq!(read("settings.json"), "user's");
        assert!(std::fs::symlink_metadata(to.path().join("link")).is_err());
        copy_missing(&from.path().join("gone"), to.path(), None).unwrap();
    }

    /// A handle for a process this test started, as `start` would record it.
    fn handle_of(pid: u32) -> String {
        serde_json::to_string(&Handle {
            pid: pid as i32,
            port: 0,
            socket: None,
            log: PathBuf::from("/dev/null"),
            started: process_start_time(pid as i32),
            run_dir: None,
            binding: None,
            sandbox: None,
        })
        .unwrap()
    }

    /// Process groups this test started, killed however the test ends.
    struct Groups(Vec<u32>);

    impl Drop for Groups {
        fn drop(&mut self) {
            for pid in &self.0 {
                signal_group(*pid as i32, libc::SIGKILL);
            }
        }
    }

    /// Starts `script` in a process group of its own, reaped when it ends (as the runtime
    /// reaps its editors); its pid.
    fn spawn_group(script: &str) -> u32 {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sh")
            .args(["-c", script])
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id();
        std::thread::spawn(move || child.wait());
        pid
    }

    fn runtime_in(dir: &Path) -> LocalRuntime {
        let missing = PathBuf::from("/nonexistent");
        let tools = ToolPaths {
            jupyterlab: missing.clone(),
            marimo: missing.clone(),
            code_server: missing,
        };
        LocalRuntime::new(tools, dir)
    }

    #[tokio::test]
    async fn cpu_load_counts_an_editors_whole_process_tree() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = runtime_in(dir.path());
        // A "kernel" spinning in a child process of its own, and an editor that only sleeps.
        let busy = spawn_group("timeout 120 sh -c 'while :; do :; done' & sleep 150");
        let idle = spawn_group("sleep 150");
        let _groups = Groups(vec![busy, idle]);
        let handles = vec![handle_of(busy), handle_of(idle)];
        let ticks = || {
            crate::runtime::procfs::ticks_by_editor(
                &leaders_of(&handles),
                &crate::runtime::procfs::read_processes(),
            )
        };
        let before = ticks();
        assert!(
            runtime.cpu_load(&handles).await.is_empty(),
            "the first call is the baseline"
        );
        // However busy the machine, the spinner gets a few tenths of a second of CPU in time;
        // the leader itself only waits, so what the tree used is its child's.
        let enough = crate::runtime::procfs::ticks_per_second() * 3 / 10;
        let deadline = Instant::now() + Duration::from_secs(100);
        while ticks()[&handles[0]] < before[&handles[0]] + enough {
            assert!(Instant::now() < deadline, "the spinner never ran");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let load = runtime.cpu_load(&handles).await;
        assert!(
            load[&handles[0]] > 0.0,
            "the spinning child counts: {load:?}"
        );
        assert_eq!(load[&handles[1]], 0.0, "a sleeping editor: {load:?}");
    }

    #[tokio::test]
    async fn stop_ends_processes_that_left_the_editors_group() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = runtime_in(dir.path());
        // Like a Jupyter kernel: a child in a session of its own, which a signal to the editor's
        // group does not reach.
        let editor_pid = spawn_group("setsid sleep 60 & wait");
        let _groups = Groups(vec![editor_pid]);
        // Found once it has left the editor's group (right after the fork it is still in it).
        let kernel = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let outside = descendants(editor_pid)
                    .into_iter()
                    .map(|(pid, _)| pid)
                    .find(|pid| {
                        // SAFETY: getpgid only reads a process's group id.
                        let group = unsafe { libc::getpgid(*pid as i32) };
                        group > 0 && group != editor_pid as i32
                    });
                if let Some(pid) = outside {
                    return pid;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the kernel started in a session of its own");
        runtime.stop(&handle_of(editor_pid)).await.unwrap();
        // A signal takes effect when the process next runs: a moment, not seconds.
        let running = || {
            let stat = std::fs::read_to_string(format!("/proc/{kernel}/stat")).unwrap_or_default();
            stat.rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next())
                .is_some_and(|state| state != "Z" && state != "X")
        };
        for _ in 0..100 {
            if !running() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the kernel {kernel} outlived its editor");
    }

    #[tokio::test]
    async fn the_sweep_stops_only_editors_that_nothing_owns() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = runtime_in(dir.path());
        let owned = spawn_group("sleep 60");
        let orphan = spawn_group("sleep 60");
        let _groups = Groups(vec![owned, orphan]);
        let gone = spawn_group("true");
        // Written where `start` writes them, as a server that died right after would leave them.
        let place = |launch: &str, pid: u32| {
            let run_dir = dir.path().join("run").join(launch);
            std::fs::create_dir_all(&run_dir).unwrap();
            let mut handle: Handle = serde_json::from_str(&handle_of(pid)).unwrap();
            handle.run_dir = Some(run_dir.clone());
            std::fs::write(
                run_dir.join(HANDLE_FILE),
                serde_json::to_string(&handle).unwrap(),
            )
            .unwrap();
            run_dir.join(HANDLE_FILE)
        };
        let owned_file = place("owned", owned);
        let orphan_file = place("orphan", orphan);
        while process_alive(gone as i32) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let gone_file = place("gone", gone);

        let keep = std::collections::HashSet::from(["owned".to_string()]);
        assert_eq!(runtime.sweep(&keep).await, 1, "only the orphan is stopped");
        assert!(!process_alive(orphan as i32), "the orphan is gone");
        assert!(process_alive(owned as i32), "an owned editor is left alone");
        assert!(owned_file.exists());
        assert!(
            !orphan_file.exists() && !gone_file.exists(),
            "handles of gone editors go"
        );
        assert_eq!(runtime.sweep(&keep).await, 0, "nothing is left to stop");
    }

    /// A stopped editor leaves its log and the user's workspace, and nothing else: not its run
    /// directory, nor, pre-started, its workspace link and the empty home it began in.
    #[tokio::test]
    async fn stopping_leaves_the_workspace_and_the_log_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = runtime_in(dir.path());
        for (launch, taken) in [("taken", true), ("never-taken", false)] {
            let pid = spawn_group("sleep 60");
            let _group = Groups(vec![pid]);
            let link = runtime.unbound_workspace(launch).unwrap();
            std::fs::write(link.join("made-at-start"), "secret").unwrap();
            let run_dir = dir.path().join("run").join(launch);
            std::fs::create_dir_all(run_dir.join("cache")).unwrap();
            std::fs::write(run_dir.join("editor.sock"), "").unwrap();
            let log = dir.path().join(format!("{launch}.log"));
            std::fs::write(&log, "started").unwrap();
            let mut handle: Handle = serde_json::from_str(&handle_of(pid)).unwrap();
            handle.run_dir = Some(run_dir.clone());
            handle.binding = Some(link.clone());
            handle.log = log.clone();
            if taken {
                runtime.bind_workspace(launch, "alice", 0).await.unwrap();
            }
            runtime
                .stop(&serde_json::to_string(&handle).unwrap())
                .await
                .unwrap();
            assert!(!process_alive(pid as i32), "{launch}: the editor is gone");
            assert!(!run_dir.exists(), "{launch}: its run directory is gone");
            // ... and soon off the disk too.
            let gone = run_dir.with_extension(GONE);
            for _ in 0..100 {
                if !gone.exists() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert!(!gone.exists(), "{launch}: deleted");
            assert!(
                std::fs::symlink_metadata(&link).is_err(),
                "{launch}: the workspace link is gone"
            );
            assert!(!link.with_extension("empty").exists(), "{launch}");
            assert!(log.exists(), "{launch}: the log stays");
        }
        let workspace = runtime.workspace_of("alice");
        assert_eq!(
            std::fs::read_to_string(workspace.join("made-at-start")).unwrap(),
            "secret",
            "the user's workspace keeps what was copied in, though its link went"
        );
    }

    #[test]
    fn safe_names_are_distinct_and_plain() {
        assert_eq!(safe_name("alice"), "alice");
        assert_ne!(safe_name("Alice"), safe_name("alice"));
        assert_eq!(safe_name("../etc"), "~2e~2e~2fetc");
        assert!(!safe_name("ünï/cødé").contains('/'));
        assert_eq!(safe_name(""), "~");
    }

    /// The handle of an unsandboxed editor that is only a process.
    fn plain_handle(pid: i32, started: Option<u64>) -> Handle {
        Handle {
            pid,
            port: 1,
            socket: None,
            log: PathBuf::new(),
            started,
            run_dir: None,
            binding: None,
            sandbox: None,
        }
    }

    #[test]
    fn a_reused_pid_is_not_our_editor() {
        let me = std::process::id() as i32;
        let started = process_start_time(me);
        assert!(started.is_some());
        let ours = plain_handle(me, started);
        assert!(ours.alive());
        let other = Handle {
            started: started.map(|s| s + 1),
            ..ours
        };
        assert!(!other.alive(), "same pid, different start time");
    }

    #[test]
    fn an_editor_that_exited_unreaped_is_not_alive() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        let started = process_start_time(pid);
        // However busy the machine, `true` ends: wait for it, with a ceiling only against a hang.
        let deadline = Instant::now() + Duration::from_secs(120);
        while !crate::runtime::procfs::exited(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let handle = plain_handle(pid, started);
        // Its pid still answers signal 0, as a zombie's does.
        // SAFETY: signal 0 to our own unreaped child sends nothing.
        assert_eq!(unsafe { libc::kill(pid, 0) }, 0);
        assert!(!handle.alive(), "an unreaped editor counts as gone");
        child.wait().unwrap();
    }

    #[test]
    fn editors_listen_on_a_socket_where_its_path_fits() {
        let run = Path::new("/var/lib/sandbox/run/abc");
        assert_eq!(
            socket_path(EditorKind::JupyterLab, run, false),
            Some(run.join("editor.sock"))
        );
        assert!(socket_path(EditorKind::CodeServer, run, false).is_some());
        assert_eq!(
            socket_path(EditorKind::Marimo, run, false),
            None,
            "marimo has no socket option"
        );
        assert_eq!(
            socket_path(EditorKind::Marimo, run, true),
            Some(run.join("editor.sock")),
            "in a sandbox, through its relay"
        );
        let deep = Path::new("/").join("d".repeat(95));
        assert_eq!(deep.join("editor.sock").as_os_str().len(), 108);
        assert_eq!(socket_path(EditorKind::JupyterLab, &deep, false), None);
        let fits = Path::new("/").join("d".repeat(94));
        assert!(socket_path(EditorKind::JupyterLab, &fits, false).is_some());
    }

    #[test]
    fn log_tail_keeps_the_last_lines() {
        let path = std::env::temp_dir().join(format!("tail-{}.log", std::process::id()));
        std::fs::write(&path, "a\nb\nc\nd\n").unwrap();
        assert_eq!(log_tail(&path, 2), "c\nd");
        assert_eq!(log_tail(&path, 10), "a\nb\nc\nd");
        assert_eq!(log_tail(&path.with_extension("none"), 3), "");
    }
}
