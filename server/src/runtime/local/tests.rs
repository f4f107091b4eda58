use super::handle::{GONE, HANDLE_FILE, Handle, process_start_time};
use super::plan::{safe_name, socket_path};
use super::ready::log_tail;
use super::stop::{descendants, signal_group};
use super::usage::leaders_of;
use super::workspace::copy_missing;
use super::*;
use crate::runtime::procfs::process_alive;

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
