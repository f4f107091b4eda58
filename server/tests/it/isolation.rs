//! One user attacks another from inside her own editor, on the local runtime: code run in her
//! real JupyterLab kernel, or typed into her real marimo's terminal, through the proxy, tries to read another user's workspace, the data
//! directory and the database, to see, read and signal other processes, to reach another
//! editor's socket and the database server's port, and to escape her memory and process limits.
//! With the sandbox (the default) every attempt fails; with `local.isolation = "none"` the same
//! attempts succeed, so the suite can fail.

use crate::common::TestApp;
use futures_util::{SinkExt, StreamExt};
use http::{Method, StatusCode};
use serde_json::{Value, json};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

/// Runs `code` in a new kernel of the session's JupyterLab, through the proxy; what it printed.
pub(crate) async fn run_python(app: &TestApp, token: &str, id: &str, code: &str) -> String {
    let kernel = start_kernel(app.addr, token, id).await;
    execute(app.addr, token, id, &kernel, code).await
}

/// A new kernel of the session's JupyterLab, through the proxy of the server at `addr`; its id.
pub(crate) async fn start_kernel(addr: std::net::SocketAddr, token: &str, id: &str) -> String {
    let kernel = crate::common::call_at(
        addr,
        Method::POST,
        &format!("/s/{id}/api/kernels"),
        Some(token),
        Some(json!({ "name": "python3" })),
    )
    .await;
    kernel.assert_status(StatusCode::CREATED);
    kernel.json()["id"].as_str().unwrap().to_string()
}

/// Runs `code` in `kernel` of the session's JupyterLab, through the proxy of the server at
/// `addr`; what it printed.
pub(crate) async fn execute(
    addr: std::net::SocketAddr,
    token: &str,
    id: &str,
    kernel_id: &str,
    code: &str,
) -> String {
    let mut socket = crate::common::websocket_at(
        addr,
        &format!("/s/{id}/api/kernels/{kernel_id}/channels"),
        token,
    )
    .await
    .expect("kernel websocket");
    // Each message its own id: a kernel drops a message whose signature it has seen before (a
    // replay), so a second connection's identical greeting would go unanswered.
    static SENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = SENT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (hello_id, run_id) = (format!("hello-{call}"), format!("run-{call}"));
    // A request sent before the kernel listens can be lost: ask for its info until it answers.
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let hello = json!({
                "header": { "msg_id": hello_id, "username": "test", "session": "attack", "msg_type": "kernel_info_request", "version": "5.3", "date": "2026-01-01T00:00:00Z" },
                "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [], "content": {}
            });
            socket.send(Message::text(hello.to_string())).await.unwrap();
            let answered = tokio::time::timeout(Duration::from_secs(2), async {
                while let Some(Ok(message)) = socket.next().await {
                    if let Message::Text(text) = message {
                        let msg: Value = serde_json::from_str(&text).unwrap();
                        if msg["header"]["msg_type"] == "kernel_info_reply" {
                            return true;
                        }
                    }
                }
                false
            })
            .await;
            if answered == Ok(true) {
                return;
            }
        }
    })
    .await
    .expect("the kernel answers its info within a minute");
    let request = json!({
        "header": { "msg_id": run_id, "username": "test", "session": "attack", "msg_type": "execute_request", "version": "5.3", "date": "2026-01-01T00:00:00Z" },
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": { "code": code, "silent": false, "store_history": false, "user_expressions": {}, "allow_stdin": false, "stop_on_error": true }
    });
    socket
        .send(Message::text(request.to_string()))
        .await
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(120), async {
        let mut out = String::new();
        while let Some(message) = socket.next().await {
            let Ok(Message::Text(text)) = message else {
                continue;
            };
            let msg: Value = serde_json::from_str(&text).unwrap();
            let kind = msg["header"]["msg_type"].as_str().unwrap_or_default();
            if msg["parent_header"]["msg_id"] != run_id.as_str() {
                continue;
            }
            match kind {
                "stream" => out.push_str(msg["content"]["text"].as_str().unwrap_or_default()),
                "error" => panic!(
                    "the kernel failed: {}: {}",
                    msg["content"]["ename"], msg["content"]["evalue"]
                ),
                // The last word on a request: every output of it came before (an
                // `execute_reply` on the shell channel may overtake its outputs on iopub).
                "status" if msg["content"]["execution_state"] == "idle" => return out,
                _ => {}
            }
        }
        out
    })
    .await
    .expect("the kernel answers within two minutes");
    socket.close(None).await.ok();
    out
}

/// Each attempt, by name: whether it succeeded, and what it got or why it failed (shared with the
/// browser test that types it into a code-server terminal).
const ATTACK: &str = include_str!("attack.py");

/// The attack against `victim`'s session, as a Python script; and the listener that stands in for
/// the database server, kept open while the script runs.
async fn attack_script(app: &TestApp, victim: (&str, &str)) -> (String, std::net::TcpListener) {
    let (victim_name, victim_session) = victim;
    let data_dir = std::fs::canonicalize(app.dir.path()).unwrap();
    let workspaces = data_dir.join("workspaces");
    let victim_dir = workspaces.join(victim_name);
    std::fs::create_dir_all(&victim_dir).unwrap();
    let secret = victim_dir.join("secret.txt");
    std::fs::write(&secret, "the victim's own").unwrap();
    let handle: Value =
        serde_json::from_str(&app.record(victim_session).await.runtime_handle.unwrap()).unwrap();
    // A listener standing in for the database server, on this machine's loopback, on a port
    // below every range ports are handed out from (the kernel's 32768 up, ZeroMQ's 49152 up):
    // else a kernel's own port in the sandbox may have the same number, and answer.
    let database = (20_000..30_000)
        .map(|_| 20_000 + rand::random::<u16>() % 10_000)
        .find_map(|port| std::net::TcpListener::bind(("127.0.0.1", port)).ok())
        .expect("a free port below the ephemeral range");
    let prelude = format!(
        "OTHER_FILE = {:?}\nOTHER_DIR = {:?}\nWORKSPACES = {:?}\nDATABASE = {:?}\nDATA_DIR = {:?}\nSERVER_PID = {}\nOTHER_PID = {}\nOTHER_SOCKET = {:?}\nDB_PORT = {}\n",
        secret.display().to_string(),
        victim_dir.display().to_string(),
        workspaces.display().to_string(),
        data_dir.join("sandbox.db").display().to_string(),
        data_dir.display().to_string(),
        std::process::id(),
        handle["pid"],
        handle["socket"].as_str().unwrap_or_default(),
        database.local_addr().unwrap().port(),
    );
    (format!("{prelude}{ATTACK}"), database)
}

/// The attempts that succeeded, by name.
fn succeeded(results: &Value) -> Vec<&String> {
    results
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, r)| r[0] == true)
        .map(|(name, _)| name)
        .collect()
}

fn results_of(printed: &str) -> Value {
    let line = printed
        .lines()
        .last()
        .unwrap_or_else(|| panic!("the attack printed nothing: {printed}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {printed}"))
}

/// The attack, as run from `attacker`'s kernel against `victim`'s session, and its results.
async fn attack(app: &TestApp, attacker: (&str, &str), victim: (&str, &str)) -> Value {
    let (attacker_token, attacker_session) = attacker;
    let (script, _database) = attack_script(app, victim).await;
    results_of(&run_python(app, attacker_token, attacker_session, &script).await)
}

/// The attack typed into the terminal of `attacker`'s marimo (its pty, a shell in the editor's
/// sandbox), through the proxy; its results, which it writes into her own workspace.
async fn attack_from_marimo_terminal(
    app: &TestApp,
    attacker: (&str, &str, &str),
    victim: (&str, &str),
) -> Value {
    let (attacker_name, attacker_token, attacker_session) = attacker;
    let (script, _database) = attack_script(app, victim).await;
    let home = app.dir.path().join("workspaces").join(attacker_name);
    let (file, out) = (home.join("attack.py"), home.join("attack-out.json"));
    std::fs::write(&file, script).unwrap();
    // Hers to read (the workspace is hers, the file the test's).
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let _ = std::fs::remove_file(&out);
    let mut terminal = app
        .websocket(
            &format!("/s/{attacker_session}/terminal/ws?rows=24&cols=200"),
            attacker_token,
        )
        .await
        .expect("marimo's terminal");
    // Written to a name of its own first, so that a half-written file is never read.
    let command = "python3 \"$HOME/attack.py\" > \"$HOME/attack-out.part\" 2>&1; mv \"$HOME/attack-out.part\" \"$HOME/attack-out.json\"\r";
    terminal.send(Message::text(command)).await.unwrap();
    let printed = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            // Keep reading what the terminal echoes, so that the pty never blocks the shell.
            let _ = tokio::time::timeout(Duration::from_millis(200), terminal.next()).await;
            if let Ok(printed) = std::fs::read_to_string(&out) {
                return printed;
            }
        }
    })
    .await
    .expect("the attack finishes within two minutes");
    terminal.close(None).await.ok();
    results_of(&printed)
}

/// Alice and Bob, each with a JupyterLab: (Alice's token, her session, Bob's token, his).
async fn two_users(app: &TestApp) -> (String, String, String, String) {
    let (_, alice) = app.user("alice").await;
    let (_, bob) = app.user("bob").await;
    let bobs = app.launch_ready(&bob, "jupyterlab").await;
    let alices = app.launch_ready(&alice, "jupyterlab").await;
    (alice, alices, bob, bobs)
}

#[tokio::test]
async fn from_her_own_kernel_a_user_reaches_nothing_that_is_not_hers() {
    let app = TestApp::start(None).await;
    assert!(
        app.runtime.isolation().is_ok(),
        "the local runtime sandboxes by default: {:?}",
        app.runtime.isolation()
    );
    let (alice, alices, _, bobs) = two_users(&app).await;
    let results = attack(&app, (&alice, &alices), ("bob", &bobs)).await;
    let succeeded = succeeded(&results);
    assert!(succeeded.is_empty(), "{succeeded:?} succeeded: {results:#}");
    assert_eq!(results.as_object().unwrap().len(), 10, "{results:#}");
    assert!(
        !app.dir.path().join("workspaces/bob/planted.txt").exists(),
        "nothing was written into another workspace"
    );
    // What is hers to reach she reaches: this server's API, and the outside world.
    let api = run_python(
        &app,
        &alice,
        &alices,
        &format!(
            "import urllib.request\nprint(urllib.request.urlopen('http://{}/api/v1/health', timeout=10).status)",
            app.addr
        ),
    )
    .await;
    assert_eq!(api.trim(), "200", "the product's own API from inside");
    // The outside world, wherever this machine itself reaches it (a package index, here).
    if let Some((host, port)) = reachable_from_here() {
        let reached = run_python(
            &app,
            &alice,
            &alices,
            &format!("import socket\nsocket.create_connection(('{host}', {port}), timeout=10).close()\nprint('reached')"),
        )
        .await;
        assert_eq!(reached.trim(), "reached", "egress to {host}:{port}");
    } else {
        eprintln!("this machine reaches no package index: egress from inside not checked");
    }
    // The attacker's own files are hers, and her editor still works.
    let own = run_python(
        &app,
        &alice,
        &alices,
        "import os\nopen('mine.txt','w').write('ok')\nprint(sorted(os.listdir('.')), os.environ['HOME'])",
    )
    .await;
    assert!(own.contains("mine.txt"), "{own}");
    // Git stops at the workspace: no checkout above it (a data dir inside one) shows.
    let ceiling = run_python(
        &app,
        &alice,
        &alices,
        "import os\nprint(os.path.dirname(os.environ['HOME'].rstrip('/')) == os.environ.get('GIT_CEILING_DIRECTORIES'))",
    )
    .await;
    assert_eq!(ceiling.trim(), "True", "{ceiling}");
    assert_eq!(
        std::fs::read_to_string(app.dir.path().join("workspaces/alice/mine.txt")).unwrap(),
        "ok"
    );
}

/// A host on the internet this machine itself reaches, if any: what the sandbox must reach too.
/// (This machine's own address is no test: inside, pasta gives the sandbox that same address.)
fn reachable_from_here() -> Option<(&'static str, u16)> {
    use std::net::ToSocketAddrs;
    ["pypi.org", "crates.io"].into_iter().find_map(|host| {
        let address = (host, 443).to_socket_addrs().ok()?.next()?;
        std::net::TcpStream::connect_timeout(&address, Duration::from_secs(5)).ok()?;
        Some((host, 443))
    })
}

/// The same attempts from a shell in her marimo's terminal fail as from her kernel.
#[tokio::test]
async fn from_her_marimo_terminal_a_user_reaches_nothing_that_is_not_hers() {
    let app = TestApp::start(None).await;
    let (_, alice) = app.user("alice").await;
    let (_, bob) = app.user("bob").await;
    let bobs = app.launch_ready(&bob, "jupyterlab").await;
    let alices = app.launch_ready(&alice, "marimo").await;
    let results =
        attack_from_marimo_terminal(&app, ("alice", &alice, &alices), ("bob", &bobs)).await;
    let succeeded = succeeded(&results);
    assert!(succeeded.is_empty(), "{succeeded:?} succeeded: {results:#}");
    assert_eq!(results.as_object().unwrap().len(), 10, "{results:#}");
}

/// Tools that key caches by the user's name (`torch.compile`, `getpass.getuser()`) find one:
/// the sandbox's account has a passwd entry, and `USER`, `LOGNAME` and `HOME` say the same.
#[tokio::test]
async fn a_sandboxed_kernel_runs_as_an_account_with_a_name() {
    let app = TestApp::start(None).await;
    let (_, alice) = app.user("alice").await;
    let session = app.launch_ready(&alice, "jupyterlab").await;
    let said = run_python(
        &app,
        &alice,
        &session,
        "import getpass, os, pwd, subprocess\n\
         who = subprocess.run(['whoami'], capture_output=True, text=True).stdout.strip()\n\
         entry = pwd.getpwuid(os.getuid())\n\
         print(getpass.getuser(), who, entry.pw_name, entry.pw_dir, os.environ['HOME'], os.environ['LOGNAME'])",
    )
    .await;
    assert_eq!(
        said.trim(),
        "user user user /home/user /home/user user",
        "the account's name, from every source"
    );
}

/// A server killed between starting an editor and writing it down left it to nobody: the next
/// start finds it by its session's group (made before the editor starts) and ends it.
#[tokio::test]
async fn an_editor_no_session_recorded_is_ended_by_its_group_at_the_next_start() {
    use server::runtime::cgroup::{Layout, Limits, parent_name};
    let app = TestApp::start(None).await;
    let data_dir = std::fs::canonicalize(&app.service.config().data_dir).unwrap();
    let Some(layout) = Layout::detect(&parent_name(&data_dir)) else {
        eprintln!("no writable cgroups here: the sandbox's groups are not checked");
        return;
    };
    let limits = Limits {
        memory_mib: 256,
        cpu_millis: 1000,
        pids: 64,
    };
    let group = layout.create("feedfacefeedfaceface", &limits).unwrap();
    let mut editor = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    for procs in group.procs_files() {
        std::fs::write(procs.to_str().unwrap(), editor.id().to_string()).unwrap();
    }
    assert!(group.is_populated());
    app.service.guard.recover().await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if let Some(status) = editor.try_wait().unwrap() {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the unrecorded editor is ended");
    assert!(!ended.success(), "killed, not finished: {ended}");
    // Removed once its last task has left (on a very busy machine, by the next start's sweep).
    if group.dirs[0].exists() {
        app.service.guard.recover().await.unwrap();
    }
    assert!(!group.dirs[0].exists(), "its group is gone");
}

#[tokio::test]
async fn stopping_a_session_ends_what_its_editor_started_even_a_detached_job() {
    let app = TestApp::start(None).await;
    let (alice, alices, _, _) = two_users(&app).await;
    let marker = format!("301.{}", std::process::id());
    run_python(
        &app,
        &alice,
        &alices,
        &format!("import subprocess\nsubprocess.run(['setsid', '-f', 'sleep', '{marker}'])\nprint('detached')"),
    )
    .await;
    let running = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|p| std::fs::read(p.path().join("cmdline")).ok())
            .any(|cmdline| String::from_utf8_lossy(&cmdline).contains(&marker))
    };
    assert!(running(), "the detached job runs while the session does");
    app.delete(&format!("/api/v1/sessions/{alices}"), Some(&alice))
        .await
        .assert_status(StatusCode::OK);
    app.wait_for(&alice, &alices, |v| v["state"] == "ended")
        .await;
    assert!(!running(), "the detached job outlived its session");
}

#[tokio::test]
async fn no_editor_writes_its_secret_into_its_log() {
    let app = TestApp::start(None).await;
    let (_, token) = app.user("logs").await;
    for editor in ["jupyterlab", "marimo", "code-server"] {
        let id = app.launch_ready(&token, editor).await;
        let secret = app.record(&id).await.editor_token.unwrap();
        let log = std::fs::read_to_string(app.dir.path().join(format!("logs/{id}.log"))).unwrap();
        assert!(!log.contains(&secret), "{editor} logged its secret:\n{log}");
        app.delete(&format!("/api/v1/sessions/{id}"), Some(&token))
            .await
            .assert_status(StatusCode::OK);
    }
}

#[tokio::test]
async fn a_server_that_cannot_sandbox_serves_one_account_and_says_so() {
    let app = TestApp::start_with(None, |c| c.local.bwrap = "/nonexistent/bwrap".into()).await;
    let why = app.runtime.isolation().unwrap_err();
    assert!(why.contains("bubblewrap"), "{why}");
    let (solo, _) = app.user("solo").await;
    let viewer = app
        .store
        .user_by_id(&solo)
        .await
        .unwrap()
        .unwrap()
        .viewer(app::domain::scope::Scopes::ALL);
    let dashboard = app.service.sessions.dashboard(&viewer).await.unwrap();
    assert!(
        dashboard
            .isolation_warning
            .is_some_and(|w| w.contains("not isolated")),
        "the dashboard says so"
    );
    let refused = app
        .service
        .accounts
        .create_user("second", Some("password123"), app::model::Role::User, None)
        .await
        .unwrap_err();
    assert_eq!(refused.status(), 503, "{refused}");
    assert!(refused.to_string().contains("local.isolation"), "{refused}");
    // A database that has several accounts already is refused at start.
    app.store
        .create_user("legacy", None, app::model::Role::User, 0, None)
        .await
        .unwrap();
    let start = app.service.guard.refuse_unisolated_accounts().await;
    assert!(
        start.is_err_and(|e| e.contains("2 accounts")),
        "refused at start"
    );
}

#[tokio::test]
async fn without_the_sandbox_the_same_attempts_succeed() {
    let app = TestApp::start_with(None, |c| {
        c.local.isolation = server::config::local::Isolation::None;
    })
    .await;
    assert!(app.runtime.isolation().is_err());
    let (alice, alices, _, bobs) = two_users(&app).await;
    let results = attack(&app, (&alice, &alices), ("bob", &bobs)).await;
    let succeeding = [
        "read another user's workspace",
        "list the data directory",
        "read the database",
        "see another editor's process",
        "signal another editor",
    ];
    for name in succeeding {
        assert_eq!(results[name][0], true, "{name}: {results:#}");
    }
    // And from a marimo terminal: the terminal test above can fail.
    let (_, carol) = app.user("carol").await;
    let carols = app.launch_ready(&carol, "marimo").await;
    let results =
        attack_from_marimo_terminal(&app, ("carol", &carol, &carols), ("bob", &bobs)).await;
    for name in succeeding {
        assert_eq!(results[name][0], true, "{name}, from marimo: {results:#}");
    }
}

#[tokio::test]
async fn a_kernel_past_its_memory_or_process_limit_is_stopped_and_every_other_editor_answers() {
    let app = TestApp::start_with(None, |c| {
        c.local.memory_mib = 400;
        c.local.pids = 96;
    })
    .await;
    let (alice, alices, bob, bobs) = two_users(&app).await;
    if app
        .runtime
        .isolation()
        .is_ok_and(|d| d.contains("no memory"))
    {
        eprintln!("skipped: this server may not make cgroups (not root?)");
        return;
    }
    // The launch form says what a session gets beside its GPU.
    let pool = app.get("/api/v1/pool", Some(&alice)).await.json();
    assert_eq!(pool[0]["resources"], "400 MB RAM · 2 CPUs", "{pool}");
    let greedy = run_python(
        &app,
        &alice,
        &alices,
        "import subprocess, sys\nr = subprocess.run([sys.executable, '-c', 'x = bytearray(900 * 1024 * 1024)\\nfor i in range(0, len(x), 4096): x[i] = 1\\nprint(\"kept it\")'], capture_output=True)\nprint('exit', r.returncode, r.stdout)",
    )
    .await;
    assert!(
        greedy.contains("exit -9") && !greedy.contains("kept it"),
        "the allocation past the limit was killed: {greedy}"
    );
    // Its user is told, on the session's page (the heartbeat brings it): and the other is not.
    let told = app
        .get(&format!("/api/v1/sessions/{alices}"), Some(&alice))
        .await
        .json();
    let note = told["memory_note"].as_str().unwrap_or_default();
    assert!(note.contains("more than the session's 400 MB"), "{told}");
    let other = app
        .get(&format!("/api/v1/sessions/{bobs}"), Some(&bob))
        .await
        .json();
    assert!(other["memory_note"].is_null(), "{other}");
    let bomb = run_python(
        &app,
        &alice,
        &alices,
        "import subprocess\nr = subprocess.run(['sh', '-c', 'n=0; while [ $n -lt 400 ]; do sleep 5 & n=$((n+1)); done; wait'], capture_output=True, timeout=90)\nprint('forks refused:', b'fork' in r.stderr.lower() or r.returncode != 0)",
    )
    .await;
    assert!(bomb.contains("forks refused: True"), "{bomb}");
    // The other user's editor, and the server, answer as before.
    app.get(&format!("/s/{bobs}/api/status"), Some(&alice))
        .await
        .assert_status(StatusCode::NOT_FOUND);
    app.get(&format!("/s/{bobs}/api/status"), Some(&bob))
        .await
        .assert_status(StatusCode::OK);
    app.get("/api/v1/health", None)
        .await
        .assert_status(StatusCode::OK);
}

#[tokio::test]
async fn each_user_has_an_account_of_their_own_and_a_write_past_the_quota_fails() {
    let app = TestApp::start_with(None, |c| c.quotas.max_disk_mib = 64).await;
    let described = app.runtime.isolation().unwrap_or_default();
    if !described.contains("an account of their own") {
        eprintln!("skipped: editors get accounts of their own only from a server running as root");
        return;
    }
    let (alice, alices, bob, bobs) = two_users(&app).await;
    let fill = "import os, errno\nprint('uid', os.getuid())\ntry:\n    with open(os.path.expanduser('~/big.bin'), 'wb') as f:\n        for _ in range(100):\n            f.write(b'x' * (1024 * 1024))\n            f.flush()\n            os.fsync(f.fileno())\n    print('wrote 100 MB')\nexcept OSError as e:\n    print('refused', errno.errorcode.get(e.errno))\nos.remove(os.path.expanduser('~/big.bin'))";
    let hers = run_python(&app, &alice, &alices, fill).await;
    let his = run_python(&app, &bob, &bobs, "import os\nprint('uid', os.getuid())").await;
    let uid = |printed: &str| -> u32 {
        printed
            .lines()
            .find_map(|l| l.strip_prefix("uid "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no uid in {printed}"))
    };
    let (a, b) = (uid(&hers), uid(&his));
    assert_ne!(a, b, "two users, two accounts");
    for id in [a, b] {
        assert!(
            (61_000..71_000).contains(&id),
            "{id} is of the configured range"
        );
    }
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let workspace = std::fs::metadata(app.dir.path().join("workspaces/alice")).unwrap();
    assert_eq!(workspace.uid(), a, "her workspace is her account's");
    assert_eq!(workspace.permissions().mode() & 0o777, 0o700);
    if described.contains("file system of its own") {
        assert!(hers.contains("refused ENOSPC"), "{hers}");
    } else {
        eprintln!("no loop devices here: the quota is checked at launch only ({described})");
    }
}

/// The processes below `init` (a sandbox's first process), as the host numbers them.
fn tree_of(init: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid = stat[stat.rfind(')')? + 2..]
                .split(' ')
                .nth(1)?
                .parse()
                .ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut tree = vec![init];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(c, _)| *c),
        );
        i += 1;
    }
    tree.split_off(1)
}

/// marimo and code-server are sandboxed as JupyterLab is: each of their processes, looked at
/// from the host, has no privileges, runs as its user's account and sees none of the data
/// directory, another workspace or the server's processes.
#[tokio::test]
async fn marimo_and_code_server_run_in_the_same_sandbox() {
    for program in ["venv/bin/marimo", "npm/node_modules/.bin/code-server"] {
        assert!(
            crate::common::tools_dir().join(program).exists(),
            "{program} is not installed; run scripts/setup.sh"
        );
    }
    let app = TestApp::start(None).await;
    if !app
        .runtime
        .isolation()
        .unwrap_or_default()
        .contains("an account of their own")
    {
        eprintln!("skipped: the whole check takes a server running as root");
        return;
    }
    let (_, alice) = app.user("alice").await;
    let (_, bob) = app.user("bob").await;
    std::fs::create_dir_all(app.dir.path().join("workspaces/bob")).unwrap();
    let data_dir = std::fs::canonicalize(app.dir.path()).unwrap();
    let server_binary = std::fs::read_link("/proc/self/exe").unwrap();
    for (token, editor) in [(&alice, "marimo"), (&bob, "code-server")] {
        let id = app.launch_ready(token, editor).await;
        let handle: Value =
            serde_json::from_str(&app.record(&id).await.runtime_handle.unwrap()).unwrap();
        let init = handle["sandbox"]["init"].as_i64().unwrap() as i32;
        let tree = tree_of(init);
        assert!(
            !tree.is_empty(),
            "{editor} runs below its sandbox's first process"
        );
        let owner = if editor == "marimo" { "alice" } else { "bob" };
        let other = if editor == "marimo" { "bob" } else { "alice" };
        for pid in tree {
            let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
                continue; // gone meanwhile
            };
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.trim().to_string())
                    .unwrap_or_default()
            };
            let name = field("Name:");
            if name == "pasta" || name.starts_with("pasta") {
                continue;
            }
            assert_eq!(field("NoNewPrivs:"), "1", "{editor} {name}: {status}");
            assert_eq!(field("CapEff:"), "0000000000000000", "{editor} {name}");
            let uid: u32 = field("Uid:")
                .split_whitespace()
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert!(
                (61_000..71_000).contains(&uid),
                "{editor} {name} runs as {uid}"
            );
            let root = format!("/proc/{pid}/root");
            let seen = |path: &std::path::Path| {
                std::fs::symlink_metadata(format!("{root}{}", path.display())).is_ok()
            };
            assert!(
                !seen(&data_dir.join("sandbox.db")),
                "{editor} sees the database"
            );
            assert!(
                !seen(&data_dir.join("workspaces").join(other)),
                "{editor} sees {other}'s workspace"
            );
            assert!(
                !seen(&data_dir.join("workspaces").join(owner)),
                "{editor} sees the data directory"
            );
            assert!(
                seen(std::path::Path::new("/home/user")),
                "{editor} has its home"
            );
            let processes: Vec<String> = std::fs::read_dir(format!("{root}/proc"))
                .unwrap()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
                .filter_map(|e| std::fs::read_link(e.path().join("exe")).ok())
                .map(|exe| exe.display().to_string())
                .collect();
            assert!(
                !processes.contains(&server_binary.display().to_string()),
                "{editor} sees the server's process: {processes:?}"
            );
        }
    }
}

#[tokio::test]
async fn what_one_user_left_in_a_pre_started_editor_never_reaches_the_next() {
    let app = TestApp::start_with(None, |c| {
        c.pool.warm = vec![server::config::WarmTarget {
            editor: "jupyterlab".into(),
            slice_mib: 8192,
            count: 1,
        }];
    })
    .await;
    if !app.runtime.prestarts_editors() {
        eprintln!("skipped: sandboxed editors are pre-started only by a server running as root");
        return;
    }
    let warm_ready = || async {
        tokio::time::timeout(Duration::from_secs(120), async {
            loop {
                let warm = app.store.warm_editors().await.unwrap();
                if warm.iter().any(|w| w.ready) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .expect("a pre-started editor within two minutes")
    };
    warm_ready().await;
    let (_, alice) = app.user("alice").await;
    let first = app.launch_id(&alice, "jupyterlab").await;
    let shown = run_python(
        &app,
        &alice,
        &first,
        "import os\nopen('/tmp/left-in-tmp', 'w').write('x')\nopen('left-at-home', 'w').write('x')\nopen(os.path.expanduser('~/mine.txt'), 'w').write('hers')\nprint('uid', os.getuid(), 'sees', os.stat(os.path.expanduser('~/mine.txt')).st_uid)\nprint(sorted(os.listdir('/tmp')))",
    )
    .await;
    assert!(shown.contains("left-in-tmp"), "{shown}");
    // The editor runs as a spare account and sees her files as its own; on disk they are hers.
    use std::os::unix::fs::MetadataExt;
    let workspace = app.dir.path().join("workspaces/alice");
    let on_disk = std::fs::metadata(workspace.join("mine.txt")).unwrap().uid();
    assert_eq!(
        on_disk,
        std::fs::metadata(&workspace).unwrap().uid(),
        "{shown}"
    );
    let (editor, sees) = shown
        .lines()
        .find_map(|l| l.strip_prefix("uid "))
        .and_then(|l| l.split_once(" sees "))
        .unwrap_or_else(|| panic!("{shown}"));
    assert_eq!(editor, sees, "{shown}");
    assert_ne!(editor, on_disk.to_string(), "{shown}");
    app.delete(&format!("/api/v1/sessions/{first}"), Some(&alice))
        .await
        .assert_status(StatusCode::OK);
    app.wait_for(&alice, &first, |v| v["state"] == "ended")
        .await;
    warm_ready().await;
    let (_, bob) = app.user("bob").await;
    let second = app.launch_id(&bob, "jupyterlab").await;
    assert_ne!(first, second, "an editor serves one session");
    let seen = run_python(
        &app,
        &bob,
        &second,
        "import os\nprint(sorted(os.listdir('/tmp')), sorted(os.listdir('.')))",
    )
    .await;
    assert!(
        !seen.contains("left-in-tmp") && !seen.contains("left-at-home"),
        "the next user saw what the first left: {seen}"
    );
}

/// HAMi-core reaches every program of a GPU session's sandbox through the sandbox's own
/// `/etc/ld.so.preload`, mounted where the host has none, with the library at HAMi-core's install
/// path: a program started with `LD_PRELOAD` unset still has it, and with the slice's limit unset
/// too it still reads the slice's limit (the pin, `libslice_pin.so`, answers HAMi-core's
/// `getenv` from the sandbox's read-only settings). No GPU here, so a system library stands in
/// for HAMi-core; `server gpu-check` runs the same probe on a GPU server.
#[test]
fn a_gpu_sandbox_preloads_its_slice_limiter_and_pins_its_limit_for_a_program_that_unset_both() {
    let stand_in = hami_core_stand_in();
    let data = tempfile::tempdir().unwrap();
    let (sandbox, exe) = gpu_sandbox(data.path(), stand_in);
    assert!(
        sandbox.pin.is_some(),
        "libslice_pin.so beside the test binary: cargo build -p slice-pin"
    );
    // What Admin → Settings shows.
    let shown = sandbox.describe();
    assert!(
        shown.contains("HAMi-core preloaded for every program, its limits pinned"),
        "{shown}"
    );
    let unpinned = server::runtime::sandbox::Sandbox {
        pin: None,
        ..sandbox.clone()
    };
    assert!(unpinned.describe().contains("its limits not pinned"));
    let env = vec![
        ("LD_PRELOAD".to_string(), stand_in.display().to_string()),
        (
            "CUDA_DEVICE_MEMORY_LIMIT_0".to_string(),
            "1024m".to_string(),
        ),
    ];
    use server::runtime::gpu_check::{Outcome, probe_in_sandbox, probe_unsandboxed};
    let unset = ["CUDA_DEVICE_MEMORY_LIMIT_0"];
    let card0 = server::runtime::card_devices(0);
    let inside =
        probe_in_sandbox(&sandbox, &card0, &env, &unset, None, exe, 64).expect("the probe ran");
    assert!(inside.preloaded, "{inside:?}");
    assert_eq!(inside.limit_seen.as_deref(), Some("1024m"), "{inside:?}");
    // No driver here: the probe says so rather than guessing.
    assert_eq!(
        inside.outcome,
        Outcome::Failed("libcuda.so.1 is not installed".into())
    );
    // Outside, the same program has neither the library nor a limit it did not set.
    let outside = probe_unsandboxed(exe, &env[1..], 64).expect("the probe ran");
    assert!(!outside.preloaded, "{outside:?}");
    assert_eq!(outside.limit_seen.as_deref(), Some("1024m"));
    let bare = probe_unsandboxed(exe, &[], 64).expect("the probe ran");
    assert_eq!(bare.limit_seen, None, "{bare:?}");
}

/// zlib stands in for HAMi-core where there is no GPU.
fn hami_core_stand_in() -> &'static std::path::Path {
    [
        "/usr/lib/x86_64-linux-gnu/libz.so.1",
        "/lib/x86_64-linux-gnu/libz.so.1",
        "/usr/lib/aarch64-linux-gnu/libz.so.1",
        "/usr/lib64/libz.so.1",
    ]
    .into_iter()
    .map(std::path::Path::new)
    .find(|p| p.is_file())
    .expect("zlib, to stand in for HAMi-core")
}

/// A sandbox as for a GPU session with `hami_core` as HAMi-core, and the server's binary (the probe).
fn gpu_sandbox(
    data: &std::path::Path,
    hami_core: &std::path::Path,
) -> (server::runtime::sandbox::Sandbox, &'static std::path::Path) {
    let mut config = server::config::Config {
        data_dir: data.to_path_buf(),
        ..Default::default()
    };
    config.pool.hami_core_library = hami_core.display().to_string();
    config.local.workspace_disks = false;
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_server"));
    let sandbox = server::runtime::sandbox::Sandbox::prepare(&config, &[exe]).expect("a sandbox");
    (sandbox, exe)
}

/// What a slice's "soft" means, shown: the sandbox's pin closes HAMi-core's off switch
/// (`CUDA_DISABLE_CONTROL` set by a program reads as unset; without the pin it reads as set), but
/// a program that brings its own `LD_PRELOAD` library answering `getenv` is searched before the
/// sandbox's preload list, and HAMi-core then reads that library's limit. The route cannot be
/// closed from outside the process, so such slices are labelled soft, never hard.
#[test]
fn a_programs_own_preload_steps_around_the_pin_so_a_shared_slice_is_soft() {
    let stand_in = hami_core_stand_in();
    let data = tempfile::tempdir().unwrap();
    let (mut sandbox, exe) = gpu_sandbox(data.path(), stand_in);
    assert!(sandbox.pin.is_some(), "cargo build -p slice-pin");
    // The program's own library: answers the slice's limit with a bigger one, as code stepping
    // around the slice on purpose would. Shown in the sandbox as a file of the user's would be.
    let own = tempfile::tempdir().unwrap();
    let source = own.path().join("own.c");
    std::fs::write(
        &source,
        "#include <string.h>\n\
         char *getenv(const char *name) {\n\
           if (name && strcmp(name, \"CUDA_DEVICE_MEMORY_LIMIT_0\") == 0) return \"999999m\";\n\
           return 0;\n\
         }\n",
    )
    .unwrap();
    let library = own.path().join("libown.so");
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .status()
        .expect("a C compiler (cc)");
    assert!(built.success());
    sandbox.tool_dirs.push(own.path().to_path_buf());
    use app::domain::hold::SliceHold;
    use server::runtime::gpu::{Card, Enforcement, slice_env, specs_of};
    use server::runtime::gpu_check::probe_in_sandbox;
    let card = Card {
        uuid: "GPU-0".into(),
        name: "NVIDIA L40S".into(),
        memory_mib: 46068,
        minor: 0,
        mig: Vec::new(),
    };
    let specs = specs_of(std::slice::from_ref(&card), 8192, true);
    assert_eq!(
        specs[0].hold,
        SliceHold::Soft,
        "a shared card's slice is soft"
    );
    let mut env = slice_env(
        &specs[0],
        8192,
        16,
        &Enforcement::HamiCore(stand_in.display().to_string()),
    );
    env.push(("CUDA_DISABLE_CONTROL".into(), "true".into()));
    let card0 = server::runtime::card_devices(0);
    let pinned =
        probe_in_sandbox(&sandbox, &card0, &env, &[], None, exe, 64).expect("the probe ran");
    assert_eq!(pinned.limit_seen.as_deref(), Some("8192m"), "{pinned:?}");
    assert_eq!(pinned.control_switch_seen, None, "{pinned:?}");
    let unpinned = server::runtime::sandbox::Sandbox {
        pin: None,
        ..sandbox.clone()
    };
    let open =
        probe_in_sandbox(&unpinned, &card0, &env, &[], None, exe, 64).expect("the probe ran");
    assert_eq!(
        open.control_switch_seen.as_deref(),
        Some("true"),
        "without the pin the switch reads as set: {open:?}"
    );
    let stepped = probe_in_sandbox(&sandbox, &card0, &env, &[], Some(&library), exe, 64)
        .expect("the probe ran");
    assert!(stepped.preloaded, "HAMi-core still loaded: {stepped:?}");
    assert_eq!(
        stepped.limit_seen.as_deref(),
        Some("999999m"),
        "the program's own getenv answers first: {stepped:?}"
    );
}
