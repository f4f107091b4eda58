//! What the server tells Prometheus (`GET /metrics`, OpenMetrics text, by `prometheus-client`).
//!
//! Two kinds of figures. Events this process saw are counted as they happen: launches by how they
//! were placed, launch-to-ready times, sessions ended by reason, proxy requests and open
//! WebSockets, the reaper's last pass. What the database knows (sessions by state, the queue, slots
//! per GPU, credits held, GPU memory and compute per user) is read at each scrape, so every replica
//! reports the same state and a restarted one loses nothing. Label values are bounded: states,
//! editors, reasons and GPUs are fixed sets; users appear only while they hold a live session,
//! which the pool's slot count bounds.

use app::domain::launch::EditorKind;
use app::domain::session::{EndReason, SessionState};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

type FloatGauge = Gauge<f64, AtomicU64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Placed {
    /// `warm` (a pre-started editor), `cold` (started for it), `queued`, or `refused`.
    start: &'static str,
    editor: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Ready {
    start: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Ended {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SessionsBy {
    state: &'static str,
    editor: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SlotsBy {
    gpu: String,
    /// What holds a slice of that card: `hard`, `soft` or `none`.
    hold: &'static str,
    /// `free`, `warm` (a pre-started editor waits there) or `used`.
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ByUser {
    user: String,
}

/// The server's metrics. Counting an event is a few atomic additions: the proxy counts on its
/// hot path.
pub struct Metrics {
    registry: Registry,
    launches: Family<Placed, Counter>,
    ready_seconds: Family<Ready, Histogram>,
    ended: Family<Ended, Counter>,
    proxy_requests: Counter,
    proxy_seconds: Histogram,
    websockets_open: Gauge,
    reaper_last_pass: FloatGauge,
    sessions: Family<SessionsBy, Gauge>,
    slots: Family<SlotsBy, Gauge>,
    queue_length: Gauge,
    queue_oldest_wait: FloatGauge,
    credits_held: FloatGauge,
    credits_charged: FloatGauge,
    user_gpu_memory: Family<ByUser, Gauge>,
    user_gpu_utilization: Family<ByUser, FloatGauge>,
    /// Per user whose workspace was ever backed up: the last good backup, and whether the last
    /// one failed (`[backups]`, see `service::backups`).
    backup_last_success: Family<ByUser, FloatGauge>,
    backup_failed: Family<ByUser, Gauge>,
    /// The same summed up, always there (alerts read them): workspaces whose last backup
    /// failed, and the oldest of the last good backups (0: none).
    backups_failed: Gauge,
    backup_oldest_success: FloatGauge,
    /// One scrape at a time: each clears and refills the database's gauges.
    scraping: tokio::sync::Mutex<()>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("sandbox");
        let launches = Family::<Placed, Counter>::default();
        registry.register(
            "launches",
            "Launches, by how they were placed (warm, cold, queued) or refused",
            launches.clone(),
        );
        let ready_seconds = Family::<Ready, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.05, 2.0, 12))
        });
        registry.register_with_unit(
            "launch_ready",
            "From the launch to an editor that answers",
            Unit::Seconds,
            ready_seconds.clone(),
        );
        let ended = Family::<Ended, Counter>::default();
        registry.register(
            "sessions_ended",
            "Sessions ended, by reason (user, timer, idle, crash, admin, failed, lost)",
            ended.clone(),
        );
        let proxy_requests = Counter::default();
        registry.register(
            "proxy_requests",
            "Requests the proxy passed to editors",
            proxy_requests.clone(),
        );
        let proxy_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 14));
        registry.register_with_unit(
            "proxy_answer",
            "From a proxied request to the editor's answer head",
            Unit::Seconds,
            proxy_seconds.clone(),
        );
        let websockets_open = Gauge::default();
        registry.register(
            "proxy_websockets_open",
            "WebSockets the proxy relays now",
            websockets_open.clone(),
        );
        let reaper_last_pass = FloatGauge::default();
        registry.register(
            "reaper_last_pass_timestamp_seconds",
            "When this process's reaper last went over the live sessions (Unix time)",
            reaper_last_pass.clone(),
        );
        let sessions = Family::<SessionsBy, Gauge>::default();
        registry.register(
            "sessions",
            "Live sessions, by state and editor",
            sessions.clone(),
        );
        let slots = Family::<SlotsBy, Gauge>::default();
        registry.register(
            "slots",
            "GPU slices of the pool, by GPU, what holds a slice (hard, soft, none) and status (free, warm, used)",
            slots.clone(),
        );
        let queue_length = Gauge::default();
        registry.register(
            "queue_length",
            "Launches waiting for a slice",
            queue_length.clone(),
        );
        let queue_oldest_wait = FloatGauge::default();
        registry.register_with_unit(
            "queue_oldest_wait",
            "How long the head of the line has waited",
            Unit::Seconds,
            queue_oldest_wait.clone(),
        );
        let credits_held = FloatGauge::default();
        registry.register(
            "credits_held",
            "Credits held by live sessions",
            credits_held.clone(),
        );
        let credits_charged = FloatGauge::default();
        registry.register(
            "credits_charged",
            "Credits charged for sessions, all time (from the ledger)",
            credits_charged.clone(),
        );
        let user_gpu_memory = Family::<ByUser, Gauge>::default();
        registry.register_with_unit(
            "user_gpu_memory_used",
            "GPU memory in use by each user's live sessions, as last sampled",
            Unit::Bytes,
            user_gpu_memory.clone(),
        );
        let user_gpu_utilization = Family::<ByUser, FloatGauge>::default();
        registry.register_with_unit(
            "user_gpu_utilization",
            "How busy each user's live sessions kept their cards when last sampled, in cards \
             (two sessions at 30 % of a card read 0.6)",
            Unit::Other("cards".into()),
            user_gpu_utilization.clone(),
        );
        let backup_last_success = Family::<ByUser, FloatGauge>::default();
        registry.register(
            "backup_last_success_timestamp_seconds",
            "When each user's workspace was last backed up (Unix time), where backups are on",
            backup_last_success.clone(),
        );
        let backup_failed = Family::<ByUser, Gauge>::default();
        registry.register(
            "backup_last_failed",
            "1 where a user's last workspace backup failed, 0 where it worked",
            backup_failed.clone(),
        );
        let backups_failed = Gauge::default();
        registry.register(
            "backups_failed",
            "Workspaces whose last backup failed (0 where backups are off)",
            backups_failed.clone(),
        );
        let backup_oldest_success = FloatGauge::default();
        registry.register(
            "backup_oldest_success_timestamp_seconds",
            "The oldest among the workspaces' last good backups (Unix time; 0: none, or backups are off)",
            backup_oldest_success.clone(),
        );
        // Every series from the start, at zero: a rate over a series that appears late misses its
        // first events, and a dashboard shows "no data" rather than 0.
        for editor in EditorKind::ALL {
            for start in ["warm", "cold", "queued", "refused"] {
                launches
                    .get_or_create(&Placed {
                        start,
                        editor: editor.as_str(),
                    })
                    .inc_by(0);
            }
        }
        for start in ["warm", "cold"] {
            drop(ready_seconds.get_or_create(&Ready { start }));
        }
        for reason in EndReason::ALL {
            ended
                .get_or_create(&Ended {
                    reason: reason.as_str(),
                })
                .inc_by(0);
        }
        Metrics {
            registry,
            launches,
            ready_seconds,
            ended,
            proxy_requests,
            proxy_seconds,
            websockets_open,
            reaper_last_pass,
            sessions,
            slots,
            queue_length,
            queue_oldest_wait,
            credits_held,
            credits_charged,
            user_gpu_memory,
            user_gpu_utilization,
            backup_last_success,
            backup_failed,
            backups_failed,
            backup_oldest_success,
            scraping: tokio::sync::Mutex::new(()),
        }
    }

    /// A launch placed as `start` (`warm`, `cold`, `queued`) or `refused`.
    pub(in crate::service) fn launched(&self, start: &'static str, editor: EditorKind) {
        self.launches
            .get_or_create(&Placed {
                start,
                editor: editor.as_str(),
            })
            .inc();
    }

    /// An editor answered `seconds` after its launch.
    pub(in crate::service) fn became_ready(&self, warm: bool, seconds: f64) {
        let start = if warm { "warm" } else { "cold" };
        self.ready_seconds
            .get_or_create(&Ready { start })
            .observe(seconds.max(0.0));
    }

    pub(in crate::service) fn session_ended(&self, reason: EndReason) {
        self.ended
            .get_or_create(&Ended {
                reason: reason.as_str(),
            })
            .inc();
    }

    pub(in crate::service) fn reaper_passed(&self, now_ms: i64) {
        self.reaper_last_pass.set(now_ms as f64 / 1000.0);
    }

    /// A proxied request whose answer head came after `seconds`.
    pub fn proxied(&self, seconds: f64) {
        self.proxy_requests.inc();
        self.proxy_seconds.observe(seconds);
    }

    /// A relayed WebSocket, open while the guard lives.
    pub fn websocket_opened(&self) -> WebSocketOpen<'_> {
        self.websockets_open.inc();
        WebSocketOpen(&self.websockets_open)
    }
}

/// Counts one open WebSocket until dropped.
pub struct WebSocketOpen<'a>(&'a Gauge);

impl Drop for WebSocketOpen<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// What the database says, at one scrape.
#[derive(Debug, Default, PartialEq)]
pub(in crate::service) struct Snapshot {
    pub sessions: Vec<(SessionState, EditorKind, i64)>,
    /// (card, its slices' hold, status, count).
    pub slots: Vec<(String, &'static str, &'static str, i64)>,
    pub queue_length: i64,
    pub queue_oldest_wait_s: f64,
    pub credits_held: f64,
    pub credits_charged: f64,
    pub user_gpu_bytes: Vec<(String, i64)>,
    /// Per user, the cards' worth of GPU compute their sessions used (1.0 = one whole card).
    pub user_gpu_cards: Vec<(String, f64)>,
    /// Users whose workspace was ever backed up, where backups are on.
    pub backups: Vec<crate::store::BackupRecord>,
}

/// What `/metrics` reads: the counters and the database's figures.
#[derive(Clone)]
pub(in crate::service) struct Exporter {
    pub(in crate::service) config: std::sync::Arc<crate::config::Config>,
    pub(in crate::service) metrics: std::sync::Arc<super::metrics::Metrics>,
    pub(in crate::service) store: crate::store::Store,
}

impl Exporter {
    pub(in crate::service) fn new(handles: &super::handles::Handles) -> Exporter {
        Exporter {
            config: handles.config.clone(),
            metrics: handles.metrics.clone(),
            store: handles.store.clone(),
        }
    }
}

impl Exporter {
    /// The metrics in the OpenMetrics text format, the database's figures read now.
    pub(in crate::service) async fn metrics_text(
        &self,
    ) -> Result<String, crate::store::StoreError> {
        let snapshot = self.metrics_snapshot().await?;
        let m = &self.metrics;
        let _one = m.scraping.lock().await;
        m.sessions.clear();
        for state in SessionState::ALL.into_iter().filter(|s| s.is_live()) {
            for editor in EditorKind::ALL {
                m.sessions
                    .get_or_create(&SessionsBy {
                        state: state.as_str(),
                        editor: editor.as_str(),
                    })
                    .set(0);
            }
        }
        for (state, editor, count) in snapshot.sessions {
            m.sessions
                .get_or_create(&SessionsBy {
                    state: state.as_str(),
                    editor: editor.as_str(),
                })
                .set(count);
        }
        m.slots.clear();
        for (gpu, hold, status, count) in snapshot.slots {
            m.slots
                .get_or_create(&SlotsBy { gpu, hold, status })
                .set(count);
        }
        m.queue_length.set(snapshot.queue_length);
        m.queue_oldest_wait.set(snapshot.queue_oldest_wait_s);
        m.credits_held.set(snapshot.credits_held);
        m.credits_charged.set(snapshot.credits_charged);
        m.user_gpu_memory.clear();
        for (user, bytes) in snapshot.user_gpu_bytes {
            m.user_gpu_memory.get_or_create(&ByUser { user }).set(bytes);
        }
        m.user_gpu_utilization.clear();
        for (user, cards) in snapshot.user_gpu_cards {
            m.user_gpu_utilization
                .get_or_create(&ByUser { user })
                .set(cards);
        }
        m.backup_last_success.clear();
        m.backup_failed.clear();
        let failed = snapshot.backups.iter().filter(|b| !b.ok).count() as i64;
        let oldest = snapshot
            .backups
            .iter()
            .map(|b| b.succeeded_at.unwrap_or(0))
            .min();
        for b in snapshot.backups {
            let user = ByUser { user: b.user_name };
            if let Some(at) = b.succeeded_at {
                m.backup_last_success
                    .get_or_create(&user)
                    .set(at as f64 / 1000.0);
            }
            m.backup_failed.get_or_create(&user).set(i64::from(!b.ok));
        }
        m.backups_failed.set(failed);
        m.backup_oldest_success
            .set(oldest.map_or(0.0, |at| at as f64 / 1000.0));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &m.registry)
            .map_err(|_| crate::store::StoreError::NotFound("metrics encoding"))?;
        Ok(text)
    }

    async fn metrics_snapshot(&self) -> Result<Snapshot, crate::store::StoreError> {
        let now = self.store.now();
        let live = self.store.live_sessions().await?;
        let pool = self.store.admin_pool().await?;
        let charged = self.store.charged_total().await?;
        let mut figures = snapshot(now, &live, &pool, charged);
        if self.config.backups.enabled {
            figures.backups = self.store.backup_records().await?;
            figures.backups.retain(|b| b.attempted_at.is_some());
        }
        Ok(figures)
    }
}

/// The scrape's figures from the live sessions and the pool: a pure function, tested alone.
pub(in crate::service) fn snapshot(
    now_ms: i64,
    live: &[crate::store::SessionRecord],
    pool: &[app::model::AdminGpu],
    charged_milli: i64,
) -> Snapshot {
    use std::collections::BTreeMap;
    let mut sessions: BTreeMap<(&'static str, EditorKind), (SessionState, i64)> = BTreeMap::new();
    let mut held = 0i64;
    for record in live {
        sessions
            .entry((record.state.as_str(), record.editor))
            .or_insert((record.state, 0))
            .1 += 1;
        held += app::domain::credits::price_for_minutes(
            record.price_per_hour,
            record.duration_minutes as i64,
        );
    }
    let queued: Vec<i64> = live
        .iter()
        .filter(|r| r.state == SessionState::Queued)
        .map(|r| r.created_at)
        .collect();
    let mut slots = Vec::new();
    let mut bytes: BTreeMap<String, i64> = BTreeMap::new();
    let mut cards: BTreeMap<String, f64> = BTreeMap::new();
    for gpu in pool {
        let mut by_status: BTreeMap<&'static str, i64> = [("free", 0), ("warm", 0), ("used", 0)]
            .into_iter()
            .collect();
        for slot in &gpu.slots {
            let status = match (&slot.holder, &slot.user_name) {
                (None, _) => "free",
                (Some(_), None) => "warm",
                (Some(_), Some(user)) => {
                    if let Some(used) = slot.gpu_used_mib {
                        *bytes.entry(user.clone()).or_default() += (used * 1024 * 1024) as i64;
                    }
                    if let Some(busy) = slot.gpu_util_pct {
                        *cards.entry(user.clone()).or_default() += f64::from(busy) / 100.0;
                    }
                    "used"
                }
            };
            *by_status.entry(status).or_default() += 1;
        }
        slots.extend(
            by_status
                .into_iter()
                .map(|(status, count)| (gpu.id.clone(), gpu.hold.word(), status, count)),
        );
    }
    Snapshot {
        sessions: sessions
            .into_iter()
            .map(|((_, editor), (state, n))| (state, editor, n))
            .collect(),
        slots,
        queue_length: queued.len() as i64,
        queue_oldest_wait_s: queued
            .iter()
            .min()
            .map_or(0.0, |oldest| (now_ms - oldest).max(0) as f64 / 1000.0),
        credits_held: held as f64 / app::domain::credits::MILLI as f64,
        credits_charged: charged_milli as f64 / app::domain::credits::MILLI as f64,
        user_gpu_bytes: bytes.into_iter().collect(),
        user_gpu_cards: cards.into_iter().collect(),
        backups: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use app::model::{AdminGpu, AdminSlot};

    fn record(id: &str, state: SessionState, created_at: i64) -> crate::store::SessionRecord {
        crate::store::SessionRecord {
            id: id.into(),
            user_id: "u".into(),
            editor: EditorKind::JupyterLab,
            slice_mib: 8192,
            duration_minutes: 30,
            price_per_hour: 2_000,
            slot_id: None,
            gpu_id: None,
            gpu_model: None,
            cores_pct: None,
            state,
            end_reason: None,
            detail: None,
            upstream: None,
            editor_token: None,
            runtime_handle: None,
            created_at,
            ready_at: None,
            ends_at: None,
            ended_at: None,
            last_activity_at: created_at,
            queued_at: None,
            burst: false,
            last_api_at: None,
            last_heartbeat_at: None,
            page_left_at: None,
            last_input_at: None,
            last_busy_at: None,
            gpu_used_mib: None,
            driver: None,
            image: None,
            charge_until: None,
            idle_timeout_ms: None,
            parked_at: None,
            parked_ms: 0,
        }
    }

    fn slot(id: &str, user: Option<&str>, held: bool, used: Option<(u64, u32)>) -> AdminSlot {
        AdminSlot {
            id: id.into(),
            slice_mib: 8192,
            cores_pct: 16,
            holder: held.then(|| format!("s-{id}")),
            user_name: user.map(str::to_string),
            editor: held.then_some(EditorKind::Marimo),
            state: user.map(|_| SessionState::Ready),
            gpu_used_mib: used.map(|(mib, _)| mib),
            gpu_util_pct: used.map(|(_, pct)| pct),
        }
    }

    fn gpu(id: &str, slots: Vec<AdminSlot>) -> AdminGpu {
        AdminGpu {
            id: id.into(),
            model: "L40S".into(),
            memory_mib: 49_152,
            hold: app::domain::hold::SliceHold::Soft,
            slots,
        }
    }

    #[test]
    fn a_users_sessions_add_up_across_cards_and_warm_editors_count_as_nobodys() {
        let pool = [
            gpu(
                "g0",
                vec![
                    slot("a", Some("alice"), true, Some((1024, 30))),
                    slot("b", None, true, None),
                    slot("c", None, false, None),
                ],
            ),
            gpu(
                "g1",
                vec![
                    slot("d", Some("alice"), true, Some((512, 30))),
                    slot("e", Some("bob"), true, None),
                ],
            ),
        ];
        let taken = snapshot(0, &[], &pool, 0);
        assert_eq!(
            taken.user_gpu_bytes,
            [("alice".to_string(), 1536 * 1024 * 1024)],
            "bob has no reading yet, so no figure rather than a zero"
        );
        assert_eq!(taken.user_gpu_cards.len(), 1);
        assert_eq!(taken.user_gpu_cards[0].0, "alice");
        assert!((taken.user_gpu_cards[0].1 - 0.6).abs() < 1e-9, "{taken:?}");
        assert_eq!(
            taken.slots,
            [
                ("g0".to_string(), "soft", "free", 1),
                ("g0".to_string(), "soft", "used", 1),
                ("g0".to_string(), "soft", "warm", 1),
                ("g1".to_string(), "soft", "free", 0),
                ("g1".to_string(), "soft", "used", 2),
                ("g1".to_string(), "soft", "warm", 0),
            ]
        );
    }

    #[test]
    fn the_queue_waits_from_its_oldest_launch_and_every_live_session_holds_its_price() {
        let live = [
            record("q1", SessionState::Queued, 40_000),
            record("q2", SessionState::Queued, 10_000),
            record("r", SessionState::Ready, 0),
        ];
        let taken = snapshot(70_000, &live, &[], 5_500);
        assert_eq!(taken.queue_length, 2);
        assert_eq!(taken.queue_oldest_wait_s, 60.0);
        // 2 credits an hour for 30 minutes, three times.
        assert_eq!(taken.credits_held, 3.0);
        assert_eq!(taken.credits_charged, 5.5);
        assert_eq!(
            taken.sessions,
            [
                (SessionState::Queued, EditorKind::JupyterLab, 2),
                (SessionState::Ready, EditorKind::JupyterLab, 1),
            ]
        );
    }
}
