//! Starting an editor: a [`Plan`] carried out, with one way back. Each phase that leaves
//! something behind records it in an [`Undo`]; a start that fails, or is dropped half-way,
//! undoes all of it in one place (the editor's processes, its cgroup, a lent account, a shared
//! slot, a pre-started editor's link, its run directory), and one that succeeds keeps it all.
//! The user's workspace and the log stay either way.

use super::LocalRuntime;
use super::handle::{HANDLE_FILE, Handle, SandboxHandle, process_start_time};
use super::plan::{Account, Door, Found, HOME_INSIDE, Home, Places, Plan, shell_words};
use super::ready::log_tail;
use super::workspace::{local_datasets, own_workspace};
use crate::runtime::sandbox::{self, Sandbox};
use crate::runtime::{EditorLaunch, Running, RuntimeError, accounts::Accounts, cgroup, editors};
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Starts the editor `launch` asks for: its places, what only doing finds out, then the plan
/// carried out.
pub(super) async fn start(
    rt: &LocalRuntime,
    launch: &EditorLaunch,
) -> Result<Running, RuntimeError> {
    let program = rt.tools.program(launch.editor);
    if !program.exists() {
        return Err(RuntimeError::Unavailable(format!(
            "{} is not installed",
            launch.editor.label()
        )));
    }
    let began = Instant::now();
    let setting = rt.setting(program);
    let places = Places::new(launch, &setting)?;
    let mut undo = Undo::default();
    let found = prepare(rt, launch, &places, &mut undo).await?;
    let plan = Plan::new(launch, &setting, places, found);
    let running = run(rt.sandbox(), launch, &plan, &mut undo, began).await?;
    undo.keep();
    Ok(running)
}

/// What a start has done so far: undone when it is dropped before [`Undo::keep`].
#[derive(Default)]
struct Undo {
    kept: bool,
    run_dir: Option<PathBuf>,
    /// A pre-started editor's workspace link (and the empty home beside it).
    binding: Option<PathBuf>,
    /// A sandboxed pre-started editor's slot, perhaps mounted.
    slot: Option<PathBuf>,
    lent: Option<(Arc<Accounts>, u32)>,
    group: Option<cgroup::Group>,
    /// The process group the start spawned (the editor's, or its bwrap's).
    leader: Option<i32>,
    /// The sandbox's first process and its start time.
    init: Option<(i32, Option<u64>)>,
}

impl Undo {
    fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        if let Some(pid) = self.leader {
            super::stop::signal_group(pid, libc::SIGKILL);
        }
        if let Some((init, started)) = self.init
            && process_start_time(init) == started
        {
            // SAFETY: the sandbox's first process this start made (same pid, same start).
            unsafe {
                libc::kill(init, libc::SIGKILL);
            }
        }
        if let Some(group) = &self.group {
            group.kill();
            group.remove();
        }
        if let Some((accounts, uid)) = &self.lent {
            accounts.give_back(*uid);
        }
        if let Some(slot) = &self.slot {
            sandbox::release_slot(slot);
        }
        if let Some(link) = &self.binding {
            let _ = std::fs::remove_file(link);
            let _ = std::fs::remove_dir_all(link.with_extension("empty"));
        }
        if let Some(run_dir) = &self.run_dir {
            let _ = std::fs::remove_dir_all(run_dir);
        }
        tracing::debug!(run_dir = ?self.run_dir, "a failed start undone");
    }
}

fn joined(e: tokio::task::JoinError) -> RuntimeError {
    RuntimeError::Io(std::io::Error::other(e))
}

/// Makes the places (the run directory 0700: the editor's socket, runtime files and caches are
/// its alone), and finds out the account, a port, the secret, the devices and the datasets.
async fn prepare(
    rt: &LocalRuntime,
    launch: &EditorLaunch,
    places: &Places,
    undo: &mut Undo,
) -> Result<Found, RuntimeError> {
    match &places.home {
        Home::Link(link) => {
            undo.binding = Some(link.clone());
            rt.unbound_workspace(&launch.session_id)?;
        }
        Home::Slot(slot) => undo.slot = Some(slot.clone()),
        Home::Workspace(_) => {}
    }
    undo.run_dir = Some(places.run_dir.clone());
    let log_dir = places.log.parent().unwrap_or(Path::new("/"));
    for dir in [places.home.path(), &places.run_dir, log_dir] {
        tokio::fs::create_dir_all(dir).await?;
    }
    tokio::fs::set_permissions(&places.run_dir, std::fs::Permissions::from_mode(0o700)).await?;
    let account = account(rt, places, undo).await?;
    if let Home::Slot(slot) = &places.home {
        let slot = slot.clone();
        tokio::task::spawn_blocking(move || sandbox::share_slot(&slot))
            .await
            .map_err(joined)??;
    }
    if let Some(socket) = places.door.socket() {
        // Left by an editor that was killed; the new one could not bind over it.
        let _ = tokio::fs::remove_file(socket).await;
    }
    let port = match places.door {
        Door::Port => std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port(),
        _ => 0,
    };
    // code-server's secret is an argon2 hash (cheap, but not free): off the async threads.
    let editor = launch.editor;
    let secret = tokio::task::spawn_blocking(move || editors::new_secret(editor))
        .await
        .map_err(|e| RuntimeError::Handle(e.to_string()))?;
    let (devices, datasets) = match rt.sandbox() {
        Some(_) => (
            launch.slice_devices().map_err(std::io::Error::other)?,
            local_datasets(launch, places.home.path(), account),
        ),
        None => Default::default(),
    };
    let inherited = editors::INHERITED_ENV
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    Ok(Found {
        account,
        port,
        secret,
        devices,
        datasets,
        inherited,
    })
}

/// The account the editor runs as, its home and run directory made its own: a spare one lent
/// to a pre-started editor, or the workspace owner's.
async fn account(
    rt: &LocalRuntime,
    places: &Places,
    undo: &mut Undo,
) -> Result<Option<u32>, RuntimeError> {
    let disk_mib = match places.account {
        Account::Server => return Ok(None),
        Account::Lend => None,
        Account::Owner { disk_mib } => Some(disk_mib),
    };
    let sandbox = rt.sandbox();
    let Some(accounts) = sandbox.and_then(|s| s.accounts.clone()) else {
        return Ok(None);
    };
    let disks = sandbox.and_then(|s| s.disks.as_ref().ok().cloned());
    let (run, home, workspaces) = (
        places.run_dir.clone(),
        places.home.path().to_path_buf(),
        rt.workspaces_dir(),
    );
    let lender = accounts.clone();
    let (uid, owned) = tokio::task::spawn_blocking(move || {
        let chown = |path: &Path, uid| std::os::unix::fs::chown(path, Some(uid), Some(uid));
        Ok::<_, std::io::Error>(match disk_mib {
            None => {
                let uid = accounts.lend(&workspaces)?;
                (uid, chown(&home, uid).and_then(|_| chown(&run, uid)))
            }
            Some(disk_mib) => {
                let uid = own_workspace(&accounts, disks.as_ref(), &workspaces, &home, disk_mib)?;
                (uid, chown(&run, uid))
            }
        })
    })
    .await
    .map_err(joined)??;
    if disk_mib.is_none() {
        undo.lent = Some((lender, uid));
    }
    owned?;
    Ok(Some(uid))
}

/// Carries out `plan`: the cgroup, the sandbox's files, the process, its sandbox and network;
/// the handle.
async fn run(
    sandbox: Option<&Sandbox>,
    launch: &EditorLaunch,
    plan: &Plan,
    undo: &mut Undo,
    began: Instant,
) -> Result<Running, RuntimeError> {
    let run_dir = &plan.places.run_dir;
    if let Some(limits) = plan.limits
        && let Some(layout) = sandbox.and_then(|s| s.cgroups.clone())
    {
        let name = launch.session_id.clone();
        let group = tokio::task::spawn_blocking(move || layout.create(&name, &limits))
            .await
            .map_err(joined)??;
        undo.group = Some(group);
    }
    if plan.preload_files {
        let pin = sandbox.is_some_and(|s| s.pin.is_some());
        sandbox::write_preload_files(run_dir, pin, &launch.env)?;
    }
    if let Some(account) = plan.account_files {
        sandbox::write_account_files(run_dir, account, Path::new(HOME_INSIDE))?;
    }
    let log = std::fs::File::create(&plan.places.log)?;
    let egress_log = log.try_clone()?;
    let (program, args, info) = command_line(plan, sandbox)?;
    if tracing::enabled!(tracing::Level::DEBUG) {
        // Where to look first when an editor does not start (no secret is on a command line).
        let line: Vec<String> = std::iter::once(&program)
            .chain(&args)
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        tracing::debug!(session = %launch.session_id, command = %shell_words(&line), "starting an editor");
    }
    let prepared = began.elapsed();
    let (pid, info_read) = spawn(plan, &program, &args, info, log, undo).await?;
    let sandbox_handle = match (sandbox, info_read) {
        (Some(sandbox), Some(read)) => {
            Some(enter(sandbox, launch, plan, read, egress_log, undo, began).await?)
        }
        _ => None,
    };
    tracing::info!(session = %launch.session_id, editor = %launch.editor, pid, upstream = %plan.upstream, sandboxed = sandbox_handle.is_some(), prepared_ms = prepared.as_millis() as u64, started_ms = began.elapsed().as_millis() as u64, "editor started");
    let handle = serde_json::to_string(&Handle {
        pid,
        port: plan.port,
        socket: plan.places.door.socket().map(Path::to_path_buf),
        log: plan.places.log.clone(),
        started: process_start_time(pid),
        run_dir: Some(run_dir.clone()),
        binding: match &plan.places.home {
            Home::Link(link) => Some(link.clone()),
            _ => None,
        },
        sandbox: sandbox_handle,
    })
    .map_err(|e| RuntimeError::Handle(e.to_string()))?;
    // Only a safety net for the next start: the editor runs, and the caller gets its handle,
    // even if the copy cannot be written.
    if let Err(e) = tokio::fs::write(run_dir.join(HANDLE_FILE), &handle).await {
        tracing::warn!(session = %launch.session_id, error = %e, "keeping the editor's handle beside it");
    }
    Ok(Running {
        upstream: plan.upstream.clone(),
        secret: plan.secret.clone(),
        handle,
    })
}

/// The program to run and its arguments: in a sandbox bwrap's, made now (they depend on what
/// the host has), with the pipe it tells the sandbox's first process on.
#[allow(clippy::type_complexity)]
fn command_line(
    plan: &Plan,
    sandbox: Option<&Sandbox>,
) -> Result<(OsString, Vec<OsString>, Option<(OwnedFd, OwnedFd)>), RuntimeError> {
    let (Some(sandbox), Some(mounts)) = (sandbox, &plan.sandbox) else {
        return Ok((plan.command[0].clone(), plan.command[1..].to_vec(), None));
    };
    let spec = sandbox::Spec {
        system: &sandbox.system,
        tools: &sandbox.tool_dirs,
        hidden: &sandbox.hidden,
        home: plan.places.home.path(),
        home_inside: &mounts.home_inside,
        run_dir: &plan.places.run_dir,
        run_inside: &mounts.run_inside,
        devices: &mounts.devices,
        preload: sandbox.gpu_preload().filter(|_| mounts.gpu_preload),
        account: mounts.account,
        workdir: &plan.workdir,
        command: &plan.command,
        datasets: &mounts.datasets,
    };
    let mut args = vec![
        OsString::from("--info-fd"),
        sandbox::INFO_FD.to_string().into(),
    ];
    args.extend(sandbox::arguments(&spec, &sandbox.tools));
    let bwrap = sandbox.tools.bwrap.clone().expect("a sandbox has bwrap");
    Ok((bwrap.into(), args, Some(sandbox::info_pipe()?)))
}

/// Spawns the process in a group of its own (and the session's cgroup), writes its standard
/// input, and reaps it when it exits; its pid, and the read end of the sandbox's info pipe.
async fn spawn(
    plan: &Plan,
    program: &OsString,
    args: &[OsString],
    info: Option<(OwnedFd, OwnedFd)>,
    log: std::fs::File,
    undo: &mut Undo,
) -> Result<(i32, Option<OwnedFd>), RuntimeError> {
    let mut command = tokio::process::Command::new(program);
    command
        .env_clear()
        .envs(plan.env.iter().map(|(k, v)| (k, v)))
        .args(args)
        .current_dir(&plan.current_dir)
        .stdin(if plan.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .kill_on_drop(false);
    let procs_files = undo
        .group
        .as_ref()
        .map(|g| g.procs_files())
        .unwrap_or_default();
    let info_write = info.as_ref().map(|(_, write)| {
        use std::os::fd::AsRawFd;
        write.as_raw_fd()
    });
    let umask = plan.umask;
    // SAFETY: between fork and exec this only writes to cgroup files and duplicates a
    // descriptor, through async-signal-safe calls on memory made before the fork.
    unsafe {
        command.pre_exec(move || {
            libc::umask(umask);
            cgroup::join_self(&procs_files)?;
            if let Some(fd) = info_write
                && libc::dup2(fd, sandbox::INFO_FD) < 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let spawned = command.spawn();
    // Our copy of the write end closes, so the read ends when bwrap's does.
    let info_read = info.map(|(read, _)| read);
    let mut child = spawned?;
    let pid = child.id().map(|p| p as i32).unwrap_or(0);
    undo.leader = Some(pid);
    if let (Some(text), Some(mut stdin)) = (&plan.stdin, child.stdin.take()) {
        use tokio::io::AsyncWriteExt;
        // Written, then closed when dropped: the editor reads to the end.
        stdin.write_all(text.as_bytes()).await?;
    }
    // Reap it when it exits, so a dead editor is not left as a zombie that still "exists".
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    Ok((pid, info_read))
}

/// Waits for the sandbox's first process (bwrap tells it on the info pipe) and gives the
/// sandbox its network; what to find and end it by.
async fn enter(
    sandbox: &Sandbox,
    launch: &EditorLaunch,
    plan: &Plan,
    read: OwnedFd,
    log: std::fs::File,
    undo: &mut Undo,
    began: Instant,
) -> Result<SandboxHandle, RuntimeError> {
    let init = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::task::spawn_blocking(move || sandbox::read_child_pid(read)),
    )
    .await
    .ok()
    .and_then(Result::ok)
    .flatten();
    let sandboxed_in = began.elapsed();
    let Some(init) = init else {
        return Err(RuntimeError::Failed {
            message: "the editor's sandbox could not be made".into(),
            log_tail: log_tail(&plan.places.log, 20),
        });
    };
    let init_started = process_start_time(init);
    undo.init = Some((init, init_started));
    let (egress, network) =
        super::network::connect(sandbox, init, undo.group.as_ref(), log, began).await;
    tracing::debug!(session = %launch.session_id, sandbox_ms = sandboxed_in.as_millis() as u64, "sandbox made");
    Ok(SandboxHandle {
        init,
        init_started,
        cgroup: undo.group.clone(),
        egress,
        network,
        slot: match &plan.places.home {
            Home::Slot(slot) => Some(slot.clone()),
            _ => None,
        },
        lent: plan.lent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::procfs::process_alive;

    /// A process group of `sleep`, reaped when it ends (as the runtime reaps its editors).
    fn sleeper() -> i32 {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        std::thread::spawn(move || child.wait());
        pid
    }

    /// A run directory and a pre-started editor's link with its empty home, as `prepare` makes.
    fn made(dir: &Path) -> (PathBuf, PathBuf) {
        let run_dir = dir.join("run/x");
        std::fs::create_dir_all(run_dir.join("cache")).unwrap();
        let link = dir.join("bind/x");
        std::fs::create_dir_all(link.with_extension("empty")).unwrap();
        std::os::unix::fs::symlink(link.with_extension("empty"), &link).unwrap();
        (run_dir, link)
    }

    fn undo_of(pid: i32, run_dir: &Path, link: &Path) -> Undo {
        Undo {
            kept: false,
            run_dir: Some(run_dir.to_path_buf()),
            binding: Some(link.to_path_buf()),
            slot: None,
            lent: None,
            group: None,
            leader: Some(pid),
            init: None,
        }
    }

    #[test]
    fn a_start_dropped_half_way_ends_what_it_spawned_and_removes_what_it_made() {
        let dir = tempfile::tempdir().unwrap();
        let (run_dir, link) = made(dir.path());
        let pid = sleeper();
        drop(undo_of(pid, &run_dir, &link));
        // A signal takes effect when the process next runs: a moment, not seconds.
        for _ in 0..250 {
            if !process_alive(pid) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!process_alive(pid), "the spawned editor is gone");
        assert!(!run_dir.exists(), "its run directory is gone");
        assert!(
            std::fs::symlink_metadata(&link).is_err(),
            "its link is gone"
        );
        assert!(
            !link.with_extension("empty").exists(),
            "its empty home is gone"
        );
    }

    #[test]
    fn a_start_that_succeeded_keeps_everything() {
        let dir = tempfile::tempdir().unwrap();
        let (run_dir, link) = made(dir.path());
        let pid = sleeper();
        undo_of(pid, &run_dir, &link).keep();
        let alive = process_alive(pid);
        super::super::stop::signal_group(pid, libc::SIGKILL);
        assert!(alive, "the editor runs on");
        assert!(run_dir.is_dir() && link.is_dir());
    }

    /// Everything a start made before it failed goes; the log folder and the workspaces stay.
    #[tokio::test]
    async fn a_start_that_fails_half_way_leaves_nothing_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let tools = super::super::ToolPaths {
            jupyterlab: "/bin/true".into(),
            marimo: "/bin/true".into(),
            code_server: "/bin/true".into(),
        };
        let rt = LocalRuntime::new(tools, dir.path());
        let mut launch = EditorLaunch::of_slice(Default::default());
        launch.session_id = "half-way".into();
        launch.base_path = "/s/half-way/".into();
        launch.prestart = true;
        // Its log cannot be made (a folder is in the way): after its places, before its process.
        std::fs::create_dir_all(dir.path().join("logs/half-way.log")).unwrap();
        let failed = start(&rt, &launch).await;
        assert!(matches!(failed, Err(RuntimeError::Io(_))), "{failed:?}");
        assert!(
            !dir.path().join("run/half-way").exists(),
            "the run directory"
        );
        let link = rt.binding_of("half-way");
        assert!(std::fs::symlink_metadata(&link).is_err(), "the link");
        assert!(!link.with_extension("empty").exists(), "the empty home");
        assert!(dir.path().join("logs").is_dir());
    }
}
