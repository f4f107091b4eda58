//! Guardrail figures: allocator launches per second under 500 concurrent requests (50 warm slots,
//! and 50 cold ones), the reaper's pass over 2,000 ready sessions, and with 100 live sessions of
//! 100 users a `/metrics` scrape (time and CPU per scrape, its size), a pass of the sampler that
//! keeps their per-minute readings, and the process's RSS after both. SQLite always; PostgreSQL
//! too when DATABASE_URL names one (as in the test command). Prints medians of 3 rounds.
//!
//! cargo bench -p server --bench guardrails

use app::domain::launch::EditorKind;
use app::domain::pool::{GpuSpec, plan_slots};
use app::domain::quota::Limits;
use app::model::Role;
use server::runtime::{EditorLaunch, Running, Runtime, RuntimeError};
use server::store::{LaunchPlan, Store};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SLICE: u64 = 8192;
const ROOMY: Limits = Limits {
    max_sessions: 100_000,
    max_gpu_mib: u64::MAX / 4,
    max_minutes: 480,
    max_disk_mib: 10_240,
};

fn price(_: &str) -> i64 {
    1_000
}

/// An hour of JupyterLab on an 8 GB slice.
fn plan(user_id: &str, use_warm: bool) -> LaunchPlan<'_> {
    LaunchPlan {
        user_id,
        image: None,
        editor: EditorKind::JupyterLab,
        slice_mib: SLICE,
        burst: false,
        duration_minutes: 60,
        limits: ROOMY,
        disk_mib: None,
        price_on: &price,
        queue_price: 1_000,
        use_warm,
    }
}

/// Editors that are always alive: the reaper's own cost, not a runtime's.
struct AlwaysAlive;

#[async_trait::async_trait]
impl Runtime for AlwaysAlive {
    fn availability(&self) -> Vec<(EditorKind, Result<(), String>)> {
        EditorKind::ALL.into_iter().map(|e| (e, Ok(()))).collect()
    }
    async fn start(&self, _: &EditorLaunch) -> Result<Running, RuntimeError> {
        Err(RuntimeError::Unavailable("bench".into()))
    }
    async fn wait_ready(
        &self,
        _: &EditorLaunch,
        _: &Running,
        _: Duration,
    ) -> Result<(), RuntimeError> {
        Ok(())
    }
    async fn stop(&self, _: &str) -> Result<(), RuntimeError> {
        Ok(())
    }
    async fn is_alive(&self, _: &str) -> bool {
        true
    }
}

async fn fresh_store(kind: &str) -> Option<(Store, String)> {
    sqlx::any::install_default_drivers();
    match kind {
        "sqlite" => {
            let dir =
                std::env::temp_dir().join(format!("guardrails-bench-{}", server::store::new_id()));
            std::fs::create_dir_all(&dir).ok()?;
            let url = format!("sqlite://{}/b.db?mode=rwc", dir.display());
            let store = Store::connect(&url).await.ok()?;
            store.migrate().await.ok()?;
            Some((store, dir.display().to_string()))
        }
        _ => {
            use sqlx::Executor;
            let admin = std::env::var("DATABASE_URL")
                .ok()
                .filter(|u| u.starts_with("postgres"))?;
            let db = format!("bench_{}", server::store::new_id());
            let pool = sqlx::AnyPool::connect(&admin).await.ok()?;
            pool.execute(format!("CREATE DATABASE {db}").as_str())
                .await
                .ok()?;
            let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
            let store = Store::connect(&format!("{base}/{db}")).await.ok()?;
            store.migrate().await.ok()?;
            Some((store, db))
        }
    }
}

async fn pool_of(store: &Store, cards: usize) -> Vec<GpuSpec> {
    let gpus: Vec<GpuSpec> = (0..cards)
        .map(|i| GpuSpec {
            id: format!("card{i}"),
            model: "Virtual 80G".into(),
            memory_mib: 81920,
            slice_mib: SLICE,
            hold: app::domain::hold::SliceHold::None,
            device_minor: None,
            mig: None,
        })
        .collect();
    let slots: Vec<_> = gpus
        .iter()
        .enumerate()
        .flat_map(|(i, g)| plan_slots(i, g))
        .collect();
    store.sync_pool(&gpus, &slots).await.unwrap();
    gpus
}

/// 500 concurrent launches against 50 slots (warm or cold): launches per second.
async fn allocator(kind: &str, warm: bool) -> Option<f64> {
    let (store, _) = fresh_store(kind).await?;
    pool_of(&store, 5).await;
    if warm {
        for i in 0..50 {
            let w = store
                .add_warm(EditorKind::JupyterLab, SLICE, None)
                .await
                .unwrap()
                .unwrap();
            store
                .warm_ready(&w.id, &format!("127.0.0.1:{}", 20000 + i), "s", "{}")
                .await
                .unwrap();
        }
    }
    let user = store
        .create_user("bench", None, Role::User, 1_000_000_000, None)
        .await
        .unwrap();
    let started = Instant::now();
    let tasks: Vec<_> = (0..500)
        .map(|_| {
            let store = store.clone();
            let user_id = user.id.clone();
            tokio::spawn(async move { store.launch(plan(&user_id, warm)).await.is_ok() })
        })
        .collect();
    let mut ok = 0;
    for t in tasks {
        ok += t.await.unwrap() as usize;
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(ok, 500);
    store.close().await;
    Some(500.0 / elapsed)
}

/// One reaper pass over 2,000 ready sessions, in milliseconds.
async fn reaper(kind: &str) -> Option<Vec<f64>> {
    let (store, _) = fresh_store(kind).await?;
    let gpus = pool_of(&store, 200).await;
    let user = store
        .create_user("bench", None, Role::User, 1_000_000_000, None)
        .await
        .unwrap();
    for _ in 0..2000 {
        let launched = store.launch(plan(&user.id, false)).await.unwrap();
        store
            .mark_ready(&launched.record.id, "ready")
            .await
            .unwrap();
    }
    let mut config = server::config::Config::default();
    config.pool.warm.clear();
    let service = Arc::new(server::service::Service::new(
        config,
        store.clone(),
        Arc::new(AlwaysAlive),
        gpus,
        server::gpu::Enforcement::None,
    ));
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        service.guard.reap().await;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let live = store.live_sessions().await.unwrap().len();
    assert_eq!(live, 2000, "nothing was due to end");
    store.close().await;
    Some(times)
}

/// CPU time this process has used (user and system), in milliseconds.
fn cpu_ms() -> f64 {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage only writes the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
    ms(usage.ru_utime) + ms(usage.ru_stime)
}

/// What watching 100 ready sessions of 100 users costs: a scrape of `/metrics` (median wall and
/// CPU ms, the text's bytes), a pass of the sampler that keeps their minutes (median wall and CPU
/// ms), and this process's resident memory after both (MiB).
struct Watching {
    scrape_wall: f64,
    scrape_cpu: f64,
    scrape_bytes: usize,
    sample_wall: f64,
    sample_cpu: f64,
    rss_mib: f64,
}

/// This process's resident memory, MiB.
fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("VmRSS:")?
                    .trim()
                    .strip_suffix("kB")?
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

async fn watching(kind: &str) -> Option<Watching> {
    let (store, _) = fresh_store(kind).await?;
    let gpus = pool_of(&store, 20).await;
    for i in 0..100 {
        let user = store
            .create_user(&format!("user{i}"), None, Role::User, 1_000_000_000, None)
            .await
            .unwrap();
        let launched = store.launch(plan(&user.id, false)).await.unwrap();
        store
            .mark_ready(&launched.record.id, "ready")
            .await
            .unwrap();
        store
            .record_sample(
                &launched.record.id,
                None,
                Some(server::store::GpuSample {
                    memory_used_mib: 1024 + i,
                    utilization_pct: 40,
                }),
            )
            .await
            .unwrap();
    }
    let mut config = server::config::Config::default();
    config.pool.warm.clear();
    config.metrics.token = "bench".into();
    let service = server::service::Service::new(
        config,
        store.clone(),
        Arc::new(AlwaysAlive),
        gpus,
        server::gpu::Enforcement::None,
    );
    let scrape = || service.metrics_text(server::service::MetricsCaller::Token("bench"));
    let size = scrape().await.unwrap().len();
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    for _ in 0..50 {
        let (t, c) = (Instant::now(), cpu_ms());
        let text = scrape().await.unwrap();
        wall.push(t.elapsed().as_secs_f64() * 1000.0);
        cpu.push(cpu_ms() - c);
        assert!(text.contains("sandbox_user_gpu_memory_used_bytes{user=\"user99\"}"));
    }
    let (mut sample_wall, mut sample_cpu) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        let (t, c) = (Instant::now(), cpu_ms());
        service.guard.sample_activity().await;
        sample_wall.push(t.elapsed().as_secs_f64() * 1000.0);
        sample_cpu.push(cpu_ms() - c);
    }
    let rss = rss_mib();
    store.close().await;
    Some(Watching {
        scrape_wall: median(wall),
        scrape_cpu: median(cpu),
        scrape_bytes: size,
        sample_wall: median(sample_wall),
        sample_cpu: median(sample_cpu),
        rss_mib: rss,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    println!(
        "guardrails bench ({} CPUs)",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    for kind in ["sqlite", "postgres"] {
        let mut warm = Vec::new();
        let mut cold = Vec::new();
        for _ in 0..3 {
            match (allocator(kind, true).await, allocator(kind, false).await) {
                (Some(w), Some(c)) => {
                    warm.push(w);
                    cold.push(c);
                }
                _ => break,
            }
        }
        if warm.is_empty() {
            println!("{kind}: skipped (set DATABASE_URL=postgres://… for PostgreSQL)");
            continue;
        }
        println!(
            "{kind}: 500 concurrent launches, 50 warm slots: {:.0} launches/s; 50 cold slots: {:.0} launches/s (median of {})",
            median(warm),
            median(cold.clone()),
            cold.len()
        );
        if let Some(w) = watching(kind).await {
            println!(
                "{kind}: /metrics with 100 live sessions of 100 users: {:.2} ms, CPU {:.2} ms a scrape (median of 50), {} bytes",
                w.scrape_wall, w.scrape_cpu, w.scrape_bytes
            );
            println!(
                "{kind}: the sampler's pass over them (readings kept a minute each): {:.2} ms, CPU {:.2} ms (median of 20); RSS {:.1} MiB",
                w.sample_wall, w.sample_cpu, w.rss_mib
            );
        }
        if let Some(times) = reaper(kind).await {
            println!(
                "{kind}: reaper pass over 2,000 ready sessions: median {:.1} ms, min {:.1} ms (5 passes)",
                median(times.clone()),
                times.iter().cloned().fold(f64::MAX, f64::min)
            );
        }
    }
}
