//! A restart of the server, as a platform engineer upgrades it or as it crashes, on the default
//! one-server runtime with the sandbox on (the server is a process of its own here, so that it
//! can be killed): a session's kernel holds a variable; after `kill -9` and a new server on the
//! same data directory the session is ready again, the same kernel answers with the variable's
//! value through the proxy and the credits are untouched; the same after a graceful stop with
//! `sessions.stop_on_shutdown = false`; a session ended while no server ran is swept at the next
//! start; and a graceful stop with `stop_on_shutdown = true` leaves nothing behind: no process,
//! no network helper, no workspace mount, no cgroup.

use crate::cli::{server as command, start_serve_with, terminate};
use crate::common::call_at;
use crate::isolation::{execute, start_kernel};
use http::Method;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One server process at a time on one data directory and one port.
struct Server {
    data: tempfile::TempDir,
    config: PathBuf,
    addr: SocketAddr,
    child: Option<std::process::Child>,
}

impl Server {
    fn new() -> Server {
        let data = tempfile::tempdir().unwrap();
        let config = data.path().join("config.toml");
        // No pre-started editors: each launch starts its own, and nothing else runs beside it.
        std::fs::write(&config, "[pool]\nwarm = []\n").unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Server {
            data,
            config,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            child: None,
        }
    }

    fn start(&mut self, stop_on_shutdown: bool) {
        let listen = self.addr.to_string();
        let stop = stop_on_shutdown.to_string();
        let (child, lines, _) = start_serve_with(
            self.data.path(),
            &self.config,
            &[
                ("SANDBOX_LISTEN", listen.as_str()),
                ("SANDBOX_SESSIONS__STOP_ON_SHUTDOWN", stop.as_str()),
            ],
        );
        assert!(
            lines.last().is_some_and(|l| l.contains("serving on")),
            "the server serves: {lines:?}"
        );
        self.child = Some(child);
    }

    /// As a crash, or an operator's `kill -9`.
    fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// SIGTERM, and a clean exit.
    fn stop(&mut self) {
        terminate(self.child.take().expect("running"));
    }

    async fn call(&self, method: Method, path: &str, token: &str, body: Option<Value>) -> Value {
        let answer = call_at(self.addr, method, path, Some(token), body).await;
        assert!(answer.status.is_success(), "{path}: {}", answer.status);
        answer.json()
    }

    async fn launch_ready(&self, token: &str) -> String {
        let body = json!({ "editor": "jupyterlab", "slice_mib": 8192, "duration_minutes": 60 });
        let id = self
            .call(Method::POST, "/api/v1/sessions", token, Some(body))
            .await["id"]
            .as_str()
            .unwrap()
            .to_string();
        self.wait_ready(token, &id).await;
        id
    }

    async fn wait_ready(&self, token: &str, id: &str) -> Value {
        tokio::time::timeout(Duration::from_secs(120), async {
            loop {
                let view = self
                    .call(Method::GET, &format!("/api/v1/sessions/{id}"), token, None)
                    .await;
                if view["state"] == "ready" || view["state"] == "ended" {
                    return view;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .expect("the session settles within two minutes")
    }

    /// The runtime's handle of a session's editor, as it keeps it beside the editor.
    fn handle(&self, id: &str) -> Value {
        let file = self.data.path().join("run").join(id).join("handle.json");
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap()
    }
}

impl Drop for Server {
    /// Editors outlive their server by design: a test that failed midway ends them here.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        crate::common::end_editors_under(self.data.path());
        let root = std::fs::canonicalize(self.data.path()).unwrap_or_default();
        for point in server::runtime::sandbox::mount_points_under(&root) {
            let _ = std::process::Command::new("umount")
                .args(["-l"])
                .arg(point)
                .status();
        }
    }
}

fn alive(pid: &Value) -> bool {
    let pid = pid.as_i64().expect("a pid") as i32;
    // SAFETY: signal 0 only asks whether the process exists.
    pid > 0 && unsafe { libc::kill(pid, 0) } == 0 && !zombie(pid)
}

fn zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let after = &stat[stat.rfind(')')? + 1..];
            after.split_whitespace().next().map(|state| state == "Z")
        })
        .unwrap_or(true)
}

/// Mount points of this machine under `dir`.
fn mounts_under(dir: &Path) -> Vec<String> {
    let dir = std::fs::canonicalize(dir).unwrap();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|line| line.split(' ').nth(4).map(str::to_string))
        .filter(|point| Path::new(point).starts_with(&dir))
        .collect()
}

async fn credits(server: &Server, token: &str) -> Value {
    server.call(Method::GET, "/api/v1/me", token, None).await["credits"].clone()
}

async fn wait_gone(pid: &Value, what: &str) {
    let gone = tokio::time::timeout(Duration::from_secs(60), async {
        while alive(pid) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "{what} ({pid}) ended");
}

#[tokio::test]
async fn editors_outlive_a_killed_or_restarted_server_and_the_next_one_adopts_them() {
    // SAFETY: geteuid only reads this process's effective user id.
    if unsafe { libc::geteuid() } != 0
        || !crate::common::tools_dir()
            .join("venv/bin/jupyter-lab")
            .exists()
    {
        eprintln!("not root, or no JupyterLab: restarts with the sandbox are not checked here");
        return;
    }
    let mut server = Server::new();
    let (code, _, err) = command(
        server.data.path(),
        &["user", "add", "alice", "--password-stdin"],
        Some("a-long-password\n"),
    );
    assert_eq!(code, 0, "{err}");
    let (code, token, err) = command(
        server.data.path(),
        &["token", "create", "--user", "alice"],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let token = token.trim().to_string();

    server.start(false);
    let id = server.launch_ready(&token).await;
    let handle = server.handle(&id);
    let sandbox = &handle["sandbox"];
    assert!(alive(&sandbox["init"]), "a sandboxed editor: {handle}");
    let kernel = start_kernel(server.addr, &token, &id).await;
    let set = execute(server.addr, &token, &id, &kernel, "x = 6 * 7\nprint('set')").await;
    assert_eq!(set.trim(), "set");
    let before = credits(&server, &token).await;

    // A crash: the editor, its sandbox and its network live on; the next server adopts them.
    server.kill();
    assert!(alive(&sandbox["init"]), "the sandbox outlived the server");
    assert!(alive(&sandbox["egress"][0]), "so did its network helper");
    server.start(false);
    assert_eq!(server.wait_ready(&token, &id).await["state"], "ready");
    let x = execute(server.addr, &token, &id, &kernel, "print(x)").await;
    assert_eq!(x.trim(), "42", "the same kernel, its variable kept");
    assert_eq!(credits(&server, &token).await, before, "credits untouched");

    // An upgrade: a graceful stop that leaves editors running.
    server.stop();
    assert!(
        alive(&sandbox["init"]),
        "kept running across a graceful stop"
    );
    server.start(false);
    let x = execute(server.addr, &token, &id, &kernel, "print(x)").await;
    assert_eq!(x.trim(), "42");

    // A session ended while no server ran (another replica, an operator): swept at the start.
    let other = server.launch_ready(&token).await;
    let other_sandbox = server.handle(&other)["sandbox"].clone();
    server.kill();
    {
        use sqlx::Connection;
        let db = server.data.path().join("sandbox.db");
        let mut connection = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
            .await
            .unwrap();
        sqlx::query("UPDATE sessions SET state = 'ended', end_reason = 'admin' WHERE id = $1")
            .bind(&other)
            .execute(&mut connection)
            .await
            .unwrap();
    }
    server.start(false);
    wait_gone(&other_sandbox["init"], "the ended session's sandbox").await;
    wait_gone(&other_sandbox["egress"][0], "its network helper").await;
    let x = execute(server.addr, &token, &id, &kernel, "print(x)").await;
    assert_eq!(x.trim(), "42", "the live one untouched by the sweep");

    // With stop_on_shutdown (the default) a graceful stop leaves nothing behind.
    server.stop();
    server.start(true);
    assert!(!mounts_under(&server.data.path().join("workspaces")).is_empty());
    server.stop();
    assert!(!alive(&sandbox["init"]), "the editor stopped");
    assert!(!alive(&sandbox["egress"][0]), "its network helper stopped");
    assert_eq!(
        mounts_under(server.data.path()),
        Vec::<String>::new(),
        "nothing mounted"
    );
    let groups = sandbox["cgroup"]["dirs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let left: Vec<&Value> = groups
        .iter()
        .filter(|dir| dir.as_str().is_some_and(|d| Path::new(d).exists()))
        .collect();
    assert!(left.is_empty(), "its cgroup is gone: {left:?}");
}
