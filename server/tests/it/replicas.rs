//! Two replicas of the server, each a process of its own, behind nginx (round robin, as an
//! ingress spreads them) on one PostgreSQL, with `runtime = "kube"` against the simulated
//! cluster: the pages, the API and the proxy answer through either; after `kill -9` of one
//! mid-session, every session stays reachable through the other, the kernel keeps its state,
//! the reaper and the queue move over, and the ledger neither charges twice nor loses a refund.
//! A promotion requested on one replica is pushed by the other, through the folder replicas
//! share (the chart's `promotion.sharedClaim`).

use crate::cli::start_serve_with;
use crate::cluster::{SERVER_NAMESPACE, SERVER_TOKEN, chart, node};
use crate::common::call_at;
use crate::isolation::{execute, start_kernel};
use crate::promotion::{REGISTRY_PASSWORD, REGISTRY_USER, Registry};
use http::{Method, StatusCode};
use serde_json::{Value, json};
use sim_cluster::{Options, SimCluster};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A free port of loopback.
fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// One replica: its own data directory and port, the shared database and cluster.
struct Replica {
    _data: tempfile::TempDir,
    addr: SocketAddr,
    child: Option<std::process::Child>,
}

impl Replica {
    fn start(config: &Path, env: &[(&str, &str)], shared: &Path) -> Replica {
        let data = tempfile::tempdir().unwrap();
        // The promotions' folder is one both replicas mount, as the chart's shared claim is.
        std::os::unix::fs::symlink(shared, data.path().join("promotions")).unwrap();
        let addr = free_addr();
        let listen = addr.to_string();
        let mut all = env.to_vec();
        all.push(("SANDBOX_LISTEN", listen.as_str()));
        let (child, lines, _) = start_serve_with(data.path(), config, &all);
        assert!(
            lines.last().is_some_and(|l| l.contains("serving on")),
            "the replica serves: {lines:?}"
        );
        Replica {
            _data: data,
            addr,
            child: Some(child),
        }
    }

    /// As a crash, or the node under it going away.
    fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, std::process::Child::id)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// nginx in front of the replicas: round robin, the next replica where one refuses the
/// connection, WebSockets carried.
struct Balancer {
    addr: SocketAddr,
    _dir: tempfile::TempDir,
    child: std::process::Child,
}

impl Balancer {
    fn start(replicas: &[SocketAddr]) -> Balancer {
        let dir = tempfile::tempdir().unwrap();
        let addr = free_addr();
        let d = dir.path().display();
        let upstreams: String = replicas
            .iter()
            .map(|r| format!("    server {r} max_fails=1 fail_timeout=30s;\n"))
            .collect();
        let conf = format!(
            "worker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 512; }}\n\
             http {{\n  access_log off;\n\
             client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fcgi;\n\
             uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
             map $http_upgrade $connection_upgrade {{ default upgrade; '' close; }}\n\
             upstream replicas {{\n{upstreams}  }}\n\
             server {{\n    listen {addr};\n    location / {{\n\
               proxy_pass http://replicas;\n      proxy_http_version 1.1;\n\
               proxy_set_header Upgrade $http_upgrade;\n      proxy_set_header Connection $connection_upgrade;\n\
               proxy_set_header Host $http_host;\n      proxy_set_header X-Forwarded-For $remote_addr;\n\
               proxy_next_upstream error timeout;\n      proxy_connect_timeout 2s;\n\
               proxy_read_timeout 300s;\n      proxy_buffering off;\n    }}\n  }}\n}}\n"
        );
        std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
        let child = std::process::Command::new("nginx")
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
            .args(["-g", "daemon off;"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nginx");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "nginx did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Balancer {
            addr,
            _dir: dir,
            child,
        }
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Why this machine cannot run the test, if it cannot.
fn missing() -> Option<&'static str> {
    if !crate::cluster::pods_run_here() {
        return Some("pods cannot run here");
    }
    if !std::env::var("DATABASE_URL").is_ok_and(|u| u.starts_with("postgres")) {
        return Some("DATABASE_URL (postgres://...) is not set");
    }
    if std::process::Command::new("nginx")
        .arg("-v")
        .output()
        .is_err()
    {
        return Some("nginx is not installed");
    }
    None
}

/// A database of the test's own on the server `DATABASE_URL` names.
async fn fresh_database(name: &str) -> String {
    use sqlx::{Connection, Executor};
    let admin_url = std::env::var("DATABASE_URL").unwrap();
    let mut admin = sqlx::PgConnection::connect(&admin_url).await.unwrap();
    let db = format!("{name}_{}", std::process::id());
    admin
        .execute(format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)").as_str())
        .await
        .unwrap();
    admin
        .execute(format!("CREATE DATABASE {db}").as_str())
        .await
        .unwrap();
    let (base, _) = admin_url.rsplit_once('/').unwrap();
    format!("{base}/{db}")
}

/// The `server` command on the shared database, as an operator runs it.
fn operator(database: &str, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write;
    let data = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_server"))
        .args(args)
        .env("SANDBOX_DATA_DIR", data.path())
        .env("SANDBOX_DATABASE_URL", database)
        .env("SANDBOX_LOG", "error")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "server {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A user with a token of all scopes.
fn account(database: &str, name: &str, admin: bool) -> String {
    let mut add = vec!["user", "add", name, "--password-stdin"];
    if admin {
        add.push("--admin");
    }
    operator(database, &add, Some("password123\n"));
    let scopes = if admin {
        "read,sessions,access,tokens,admin"
    } else {
        "read,sessions,access,tokens"
    };
    operator(
        database,
        &["token", "create", "--user", name, "--scopes", scopes],
        None,
    )
}

async fn call(
    addr: SocketAddr,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> Value {
    let answer = call_at(addr, method, path, Some(token), body).await;
    assert!(
        answer.status.is_success(),
        "{path}: {} {}",
        answer.status,
        String::from_utf8_lossy(&answer.body)
    );
    answer.json()
}

async fn wait_state(
    addr: SocketAddr,
    token: &str,
    id: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let answer = call_at(
                addr,
                Method::GET,
                &format!("/api/v1/sessions/{id}"),
                Some(token),
                None,
            )
            .await;
            if answer.status.is_success() {
                let view = answer.json();
                if done(&view) {
                    return view;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("session {id} never got there"))
}

/// The config both replicas read: the cluster, one card of two 8 GB slices, a quick reaper,
/// the registry.
fn write_config(dir: &Path, registry: &Registry) -> PathBuf {
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "runtime = \"kube\"\n\
             [kube]\nserver_namespace = \"{SERVER_NAMESPACE}\"\n\
             [pool]\ndetect_nvidia = false\nwarm = []\n\
             gpus = [{{ name = \"gpu0\", model = \"Sim GPU\", memory_mib = 16384, slice_mib = 8192 }}]\n\
             [idle]\nreaper_period_ms = 300\n\
             [sessions]\nready_timeout_seconds = 120\n\
             [promotion]\nregistry = \"{}\"\nrepository_prefix = \"sandbox/\"\n\
             username = \"{REGISTRY_USER}\"\npassword = \"{REGISTRY_PASSWORD}\"\nrequire_approval = true\n",
            registry.url()
        ),
    )
    .unwrap();
    config
}

/// The ledger's lines for `user`, as the database holds them.
async fn ledger(database: &str, user: &str) -> Vec<(String, Option<String>, i64)> {
    use sqlx::{Connection, Row};
    let mut db = sqlx::PgConnection::connect(database).await.unwrap();
    sqlx::query(
        "SELECT l.kind, l.session_id, l.amount FROM credit_ledger l JOIN users u ON u.id = l.user_id
         WHERE u.name = $1 ORDER BY l.id",
    )
    .bind(user)
    .fetch_all(&mut db)
    .await
    .unwrap()
    .into_iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

async fn lease_holder(database: &str, name: &str) -> Option<String> {
    use sqlx::{Connection, Row};
    let mut db = sqlx::PgConnection::connect(database).await.unwrap();
    sqlx::query("SELECT holder FROM leases WHERE name = $1 AND expires_at > $2")
        .bind(name)
        .bind(server::util::now_ms())
        .fetch_optional(&mut db)
        .await
        .unwrap()
        .map(|r| r.get(0))
}

#[tokio::test]
async fn two_replicas_behind_nginx_survive_a_kill_9_mid_session() {
    if let Some(why) = missing() {
        eprintln!("skipped: {why}");
        return;
    }
    let database = fresh_database("replicas").await;
    let registry = Registry::start().await;
    let cluster = SimCluster::start(Options {
        rbac: chart().clone(),
        service_accounts: vec![(
            SERVER_NAMESPACE.into(),
            "gpu-sandbox".into(),
            SERVER_TOKEN.into(),
        )],
        nodes: vec![node("gpu-node-1")],
    })
    .await
    .expect("the simulated cluster");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, cluster.kubeconfig(SERVER_TOKEN)).unwrap();
    let shared = dir.path().join("promotions");
    std::fs::create_dir(&shared).unwrap();
    let config = write_config(dir.path(), &registry);
    let env = [
        ("SANDBOX_DATABASE_URL", database.as_str()),
        ("KUBECONFIG", kubeconfig.to_str().unwrap()),
        ("SANDBOX_CREDITS__INITIAL_GRANT", "1000"),
    ];
    // The first replica migrates the database; the second finds it done.
    let mut replicas = vec![Replica::start(&config, &env, &shared)];
    replicas.push(Replica::start(&config, &env, &shared));
    let balancer = Balancer::start(&[replicas[0].addr, replicas[1].addr]);
    let lb = balancer.addr;
    let alice = account(&database, "alice", false);
    let admin = account(&database, "root", true);

    // A session through the balancer; its kernel holds a value.
    let launch = json!({ "editor": "jupyterlab", "slice_mib": 8192, "duration_minutes": 60 });
    let id = call(
        lb,
        Method::POST,
        "/api/v1/sessions",
        &alice,
        Some(launch.clone()),
    )
    .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    wait_state(lb, &alice, &id, |v| v["state"] == "ready").await;
    let kernel = start_kernel(lb, &alice, &id).await;
    assert!(
        execute(lb, &alice, &id, &kernel, "x = 41; print('set')")
            .await
            .contains("set")
    );

    // The pages, the API and the proxy answer through either replica.
    for replica in &replicas {
        let page = call_at(replica.addr, Method::GET, "/login", None, None).await;
        page.assert_status(StatusCode::OK);
        let me = call(replica.addr, Method::GET, "/api/v1/me", &alice, None).await;
        assert_eq!(me["name"], "alice");
        let lab = call_at(
            replica.addr,
            Method::GET,
            &format!("/s/{id}/api/status"),
            Some(&alice),
            None,
        )
        .await;
        lab.assert_status(StatusCode::OK);
    }

    // A file promoted through one replica, approved (and so pushed) through the other: the copy
    // the first made is in the folder both share.
    let made = execute(
        lb,
        &alice,
        &id,
        &kernel,
        "open('model.bin', 'wb').write(bytes(i % 253 for i in range(300000))); print('made')",
    )
    .await;
    assert!(made.contains("made"), "{made}");
    let asked = call(
        replicas[0].addr,
        Method::POST,
        &format!("/api/v1/sessions/{id}/promotions"),
        &alice,
        Some(json!({"path": "model.bin", "name": "model", "tag": "v1"})),
    )
    .await;
    let promotion = asked["id"].as_str().unwrap().to_string();
    call(
        replicas[1].addr,
        Method::POST,
        &format!("/api/v1/admin/promotions/{promotion}/approve"),
        &admin,
        None,
    )
    .await;
    let pushed = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let view = call(
                lb,
                Method::GET,
                &format!("/api/v1/promotions/{promotion}"),
                &alice,
                None,
            )
            .await;
            if view["state"] == "pushed" || view["state"] == "failed" {
                return view;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the push ends");
    assert_eq!(pushed["state"], "pushed", "{pushed}");
    let expected: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    assert_eq!(
        pushed["sha256"],
        crate::promotion::sha256_hex(&expected),
        "{pushed}"
    );

    // The second launch fills the card; a third waits in the queue.
    let second = call(
        lb,
        Method::POST,
        "/api/v1/sessions",
        &alice,
        Some(launch.clone()),
    )
    .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    wait_state(lb, &alice, &second, |v| v["state"] == "ready").await;
    let bob = account(&database, "bob", false);
    let queued = call(
        lb,
        Method::POST,
        "/api/v1/sessions",
        &bob,
        Some(launch.clone()),
    )
    .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    wait_state(lb, &bob, &queued, |v| v["state"] == "queued").await;

    // kill -9 of the replica that reaps: the other answers, and takes the reaper over.
    let reaper = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let Some(holder) = lease_holder(&database, "reaper").await {
                return holder;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("a replica holds the reaper lease");
    let victim = replicas
        .iter()
        .position(|r| reaper.contains(&r.pid().to_string()))
        .unwrap_or(0);
    let killed_at = Instant::now();
    replicas[victim].kill();
    let survivor = &replicas[1 - victim];
    let view = call(
        lb,
        Method::GET,
        &format!("/api/v1/sessions/{id}"),
        &alice,
        None,
    )
    .await;
    let first_answer = killed_at.elapsed();
    assert_eq!(view["state"], "ready", "{view}");
    eprintln!("failover: first answer through the balancer {first_answer:?} after kill -9");
    // The kernel kept its value, now through the survivor.
    assert!(
        execute(lb, &alice, &id, &kernel, "print(x + 1)")
            .await
            .contains("42")
    );
    let taken = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match lease_holder(&database, "reaper").await {
                Some(holder) if holder != reaper => return holder,
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    })
    .await
    .expect("the survivor takes the reaper lease");
    assert!(taken.contains(&survivor.pid().to_string()), "{taken}");

    // The queue moves over: a stop through the survivor lets bob's launch start.
    call(
        lb,
        Method::DELETE,
        &format!("/api/v1/sessions/{second}"),
        &alice,
        None,
    )
    .await;
    wait_state(lb, &bob, &queued, |v| v["state"] == "ready").await;

    // Everything ends; nothing is held, each session charged once and refunded once.
    call(
        lb,
        Method::DELETE,
        &format!("/api/v1/sessions/{id}"),
        &alice,
        None,
    )
    .await;
    call(
        lb,
        Method::DELETE,
        &format!("/api/v1/sessions/{queued}"),
        &bob,
        None,
    )
    .await;
    for (token, session) in [(&alice, &id), (&alice, &second), (&bob, &queued)] {
        wait_state(lb, token, session, |v| v["state"] == "ended").await;
    }
    for (user, token) in [("alice", &alice), ("bob", &bob)] {
        let lines = ledger(&database, user).await;
        let mut per_session = std::collections::BTreeMap::<&str, Vec<&str>>::new();
        for (kind, session, _) in &lines {
            if let Some(session) = session {
                per_session.entry(session).or_default().push(kind);
            }
        }
        for (session, kinds) in &per_session {
            let count = |k: &str| kinds.iter().filter(|x| **x == k).count();
            assert!(
                count("hold") >= 1 && count("charge") <= 1 && count("refund") <= 1,
                "{user} {session}: one settlement, never two: {kinds:?}"
            );
            assert!(
                count("charge") + count("refund") >= 1,
                "{user} {session}: settled: {kinds:?}"
            );
        }
        let me = call(lb, Method::GET, "/api/v1/me", token, None).await;
        assert_eq!(me["credits"]["held"], 0, "{user}: {me}");
        let sum: i64 = lines.iter().map(|(_, _, amount)| amount).sum();
        assert_eq!(
            me["credits"]["balance"], sum,
            "{user}: the balance is the ledger's sum"
        );
    }
    drop(balancer);
    drop(replicas);
    cluster.shut_down().await;
}
