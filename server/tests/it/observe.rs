//! What operators read: `/metrics` (who may scrape it, and that it follows launches and ends),
//! the probes; and the readings the pictures draw (a session's minutes, usage per day).

use crate::common::{FAKE_RAM_MIB, FakeRuntime, TestApp};
use http::{Method, StatusCode};

/// `/metrics` as the scraper with the configured token reads it.
async fn scraped(app: &TestApp) -> String {
    let answer = app.get("/metrics", Some("scrape-secret")).await;
    answer.assert_status(StatusCode::OK);
    String::from_utf8_lossy(&answer.body).to_string()
}

/// The value of the sample `name{labels}` in an OpenMetrics text, if present.
pub fn sample(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name_and_labels)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

#[tokio::test]
async fn metrics_follow_launches_and_ends_for_admins_and_the_scrapers_token() {
    let app = TestApp::start_with(Some(FakeRuntime::new()), |config| {
        config.metrics.token = "scrape-secret".into();
        config.pool.warm = Vec::new();
    })
    .await;
    let (_, alice) = app.user("alice").await;
    let root_token = app.admin_token("root").await;

    // Who may read it: the scraper's token or an admin; nobody else.
    app.get("/metrics", None)
        .await
        .assert_status(StatusCode::UNAUTHORIZED);
    app.get("/metrics", Some("wrong-secret"))
        .await
        .assert_status(StatusCode::UNAUTHORIZED);
    app.get("/metrics", Some(&alice))
        .await
        .assert_status(StatusCode::FORBIDDEN);
    let before = app.get("/metrics", Some(&root_token)).await;
    before.assert_status(StatusCode::OK);
    assert!(
        before.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text"),
    );
    let text = String::from_utf8_lossy(&before.body).to_string();
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
    assert_eq!(sample(&text, "sandbox_queue_length"), Some(0.0));
    assert!(
        text.contains("sandbox_slots{gpu=\"virtual-0\",hold=\"none\",status=\"free\"} 6"),
        "six free 8 GB slices of the default card: {text}"
    );

    // A launch: a live session by state and editor, a cold start counted and timed, credits held.
    let id = app.launch_ready(&alice, "jupyterlab").await;
    let during = scraped(&app).await;
    assert_eq!(
        sample(
            &during,
            "sandbox_sessions{state=\"ready\",editor=\"jupyterlab\"}"
        ),
        Some(1.0),
        "{during}"
    );
    assert_eq!(
        sample(
            &during,
            "sandbox_launches_total{start=\"cold\",editor=\"jupyterlab\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &during,
            "sandbox_launch_ready_seconds_count{start=\"cold\"}"
        ),
        Some(1.0)
    );
    assert!(sample(&during, "sandbox_credits_held").unwrap() > 0.0);
    assert_eq!(
        sample(
            &during,
            "sandbox_slots{gpu=\"virtual-0\",hold=\"none\",status=\"used\"}"
        ),
        Some(1.0)
    );

    // Its end, by reason; the live count goes back to nothing.
    app.call(
        Method::DELETE,
        &format!("/api/v1/sessions/{id}"),
        Some(&alice),
        None,
    )
    .await
    .assert_status(StatusCode::OK);
    app.wait_for(&alice, &id, |v| v["state"] == "ended").await;
    let after = scraped(&app).await;
    assert_eq!(
        sample(&after, "sandbox_sessions_ended_total{reason=\"user\"}"),
        Some(1.0),
        "{after}"
    );
    assert_eq!(
        sample(
            &after,
            "sandbox_sessions{state=\"ready\",editor=\"jupyterlab\"}"
        ),
        Some(0.0),
        "an ended session is no longer live"
    );
    // A refusal is counted too.
    app.call(
        Method::POST,
        "/api/v1/sessions",
        Some(&alice),
        Some(serde_json::json!({ "editor": "marimo", "slice_mib": 49152, "duration_minutes": 30 })),
    )
    .await;
    let refused = scraped(&app).await;
    assert_eq!(
        sample(
            &refused,
            "sandbox_launches_total{start=\"refused\",editor=\"marimo\"}"
        ),
        Some(1.0),
        "{refused}"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_sessions_minutes_are_kept_for_its_owner_and_count_in_the_usage_per_day() {
    let runtime = FakeRuntime::new();
    // A job on one and a half cores: busy by the sampler's measure.
    runtime
        .cpu_centi_cores
        .store(150, std::sync::atomic::Ordering::Relaxed);
    let app = TestApp::start_with(Some(runtime), |config| {
        config.idle.sample_seconds = 1;
        config.pool.warm = Vec::new();
    })
    .await;
    let (_, alice) = app.user("alice").await;
    let (_, bob) = app.user("bob").await;
    let root = app.admin_token("root").await;
    let id = app.launch_ready(&alice, "jupyterlab").await;
    let path = format!("/api/v1/sessions/{id}/readings");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let read = loop {
        let answer = app.get(&path, Some(&alice)).await;
        answer.assert_status(StatusCode::OK);
        let read = answer.json();
        if read["readings"].as_array().is_some_and(|r| !r.is_empty()) {
            break read;
        }
        assert!(tokio::time::Instant::now() < deadline, "no reading: {read}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(read["slice_mib"], 8192);
    assert_eq!(read["card_mib"], 49152, "the slice's card");
    let minute = &read["readings"][0];
    assert_eq!(minute["cpu_milli"], 1500, "{read}");
    assert_eq!(minute["ram_mib"], FAKE_RAM_MIB, "{read}");
    assert_eq!(minute["busy"], true, "{read}");
    assert!(minute["gpu_mib"].is_null(), "no GPU to read here: {read}");
    assert_eq!(
        minute["at_ms"].as_i64().unwrap() % 60_000,
        0,
        "one row a minute"
    );
    // Hers alone: to anyone else the session does not exist.
    app.get(&path, Some(&bob))
        .await
        .assert_status(StatusCode::NOT_FOUND);
    app.get(&path, None)
        .await
        .assert_status(StatusCode::UNAUTHORIZED);

    // Everyone's week, for admins only: today held her slice and was busy in it.
    app.get("/api/v1/admin/usage/days?filter=7d", Some(&alice))
        .await
        .assert_status(StatusCode::FORBIDDEN);
    let answer = app
        .get("/api/v1/admin/usage/days?filter=7d", Some(&root))
        .await;
    answer.assert_status(StatusCode::OK);
    let days = answer.json();
    let days = days.as_array().unwrap();
    assert_eq!(days.len(), 7, "{days:?}");
    let today = days.last().unwrap();
    assert_eq!(today["launches"], 1, "{today}");
    assert!(today["allocated_mib_ms"].as_i64().unwrap() > 0, "{today}");
    assert!(today["busy_mib_ms"].as_i64().unwrap() > 0, "{today}");
    assert!(
        today["busy_mib_ms"].as_i64() <= today["allocated_mib_ms"].as_i64(),
        "{today}"
    );
    app.get("/api/v1/admin/usage/days?filter=forever", Some(&root))
        .await
        .assert_status(StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn without_a_token_configured_only_admins_scrape() {
    let app = TestApp::start(Some(FakeRuntime::new())).await;
    // An empty configured token never matches an empty or any presented one.
    app.get("/metrics", Some(""))
        .await
        .assert_status(StatusCode::UNAUTHORIZED);
    app.get("/livez", None).await.assert_status(StatusCode::OK);
    app.get("/readyz", None).await.assert_status(StatusCode::OK);
    app.stop().await;
}

/// The metric families `/metrics` declares (`# TYPE <name> <kind>`).
fn declared_families(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Every `sandbox_…` name in `text`, as a query writes it (with `_total`, `_bucket` and such).
fn metric_names_in(text: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    let bytes = text.as_bytes();
    let mut at = 0;
    while let Some(found) = text[at..].find("sandbox_") {
        let start = at + found;
        let before_ok =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        if before_ok {
            names.insert(text[start..end].to_string());
        }
        at = end;
    }
    names
}

fn repo_file(path: &str) -> String {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

#[tokio::test]
async fn the_dashboard_and_the_alerts_name_only_metrics_the_server_exports() {
    let app = TestApp::start_with(Some(FakeRuntime::new()), |config| {
        config.metrics.token = "scrape-secret".into();
    })
    .await;
    // A live session with a GPU reading, so that every family has a sample.
    let (_, alice) = app.user("alice").await;
    let id = app.launch_ready(&alice, "marimo").await;
    app.store
        .record_sample(
            &id,
            None,
            Some(server::store::GpuSample {
                memory_used_mib: 1024,
                utilization_pct: 50,
            }),
        )
        .await
        .unwrap();
    let text = scraped(&app).await;
    assert!(
        text.contains("sandbox_user_gpu_memory_used_bytes{user=\"alice\"} 1073741824"),
        "{text}"
    );
    assert!(
        text.contains("sandbox_user_gpu_utilization_cards{user=\"alice\"} 0.5"),
        "{text}"
    );
    // The pool map's slice says the same.
    let root = app.admin_token("root").await;
    let pool = app.get("/api/v1/admin/pool", Some(&root)).await.json();
    let held: Vec<&serde_json::Value> = pool[0]["slots"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["user_name"] == "alice")
        .collect();
    assert_eq!(held.len(), 1, "{pool}");
    assert_eq!(held[0]["gpu_used_mib"], 1024);
    assert_eq!(held[0]["gpu_util_pct"], 50);
    let families = declared_families(&text);
    assert!(families.len() >= 14, "{families:?}");
    let dashboard = repo_file("deploy/monitoring/grafana-dashboard.json");
    let parsed: serde_json::Value =
        serde_json::from_str(&dashboard).expect("the dashboard is JSON");
    assert!(parsed["panels"].as_array().is_some_and(|p| !p.is_empty()));
    let alerts = repo_file("deploy/monitoring/alerts.yml");
    for (file, text) in [("the dashboard", &dashboard), ("the alerts", &alerts)] {
        let used = metric_names_in(text);
        assert!(!used.is_empty(), "{file} names no metric");
        for name in used {
            let family = ["_total", "_bucket", "_count", "_sum", "_created"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .filter(|base| families.contains(*base))
                .unwrap_or(&name);
            assert!(
                families.contains(family),
                "{file} uses {name}, which /metrics does not declare: {families:?}"
            );
        }
    }
    // Prometheus' own checker accepts the rules.
    let checked = std::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../deploy/monitoring/alerts.yml"),
        )
        .output()
        .unwrap_or_else(|e| {
            panic!("promtool: {e}; scripts/setup.sh --test installs Debian's prometheus")
        });
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    app.stop().await;
}

/// A plain HTTP GET to 127.0.0.1:`port`; the body when the answer is 200.
async fn http_get(port: u16, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.ok()?;
    let answer = String::from_utf8_lossy(&answer).to_string();
    let (head, body) = answer.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

#[tokio::test]
async fn a_real_prometheus_scrapes_the_server_and_answers_for_the_session() {
    let app = TestApp::start_with(Some(FakeRuntime::new()), |config| {
        config.metrics.token = "scrape-secret".into();
        config.pool.warm = Vec::new();
    })
    .await;
    let (_, alice) = app.user("alice").await;
    let id = app.launch_ready(&alice, "jupyterlab").await;

    let dir = tempfile::tempdir().unwrap();
    let web_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(dir.path().join("token"), "scrape-secret").unwrap();
    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: gpu-sandbox\n    metrics_path: /metrics\n    authorization:\n      credentials_file: {}\n    static_configs:\n      - targets: ['{}']\n",
            dir.path().join("token").display(),
            app.addr
        ),
    )
    .unwrap();
    let binary = std::env::var("SANDBOX_TEST_PROMETHEUS").unwrap_or("prometheus".into());
    let mut prometheus = tokio::process::Command::new(&binary)
        .arg(format!(
            "--config.file={}",
            dir.path().join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{web_port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| {
            panic!("{binary}: {e}; scripts/setup.sh --test installs Debian's prometheus")
        });

    // The scrape is up, and PromQL finds the ready session by its editor.
    let query =
        "/api/v1/query?query=sandbox_sessions%7Bstate%3D%22ready%22%2Ceditor%3D%22jupyterlab%22%7D";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let answer = loop {
        if let Some(body) = http_get(web_port, query).await {
            let parsed: serde_json::Value = serde_json::from_str(&body).unwrap();
            if parsed["data"]["result"]
                .as_array()
                .is_some_and(|r| !r.is_empty())
            {
                break parsed;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Prometheus found no ready session within a minute (exited: {:?})",
            prometheus.try_wait()
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    };
    let result = &answer["data"]["result"][0];
    assert_eq!(result["metric"]["job"], "gpu-sandbox");
    assert_eq!(result["value"][1], "1", "{answer}");
    let up = http_get(
        web_port,
        "/api/v1/query?query=up%7Bjob%3D%22gpu-sandbox%22%7D",
    )
    .await
    .expect("up answers");
    assert!(up.contains("\"value\":[") && up.contains(",\"1\"]"), "{up}");

    let _ = prometheus.kill().await;
    let _ = id;
    app.stop().await;
}
