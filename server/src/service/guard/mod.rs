//! The guardrails at run time: the reaper (timer, idle, crashed editors), the queue's dispatcher,
//! the warm pool, the activity sampler, heartbeats and extensions, recovery after a restart and the
//! instance lease. The rules themselves are pure (`app::domain::{reaper, idle, quota, credits}`);
//! this is where they meet the store and the runtime.
//!
//! The reaper ([`Guard::reap`]) runs on every background tick (`idle.reaper_period_ms`, 5 s by
//! default) on the replica that holds the `reaper` lease (three periods long). The verdict on each
//! live session is `app::domain::reaper::verdict`: a locked account's sessions end first, queued
//! ones included (`admin`, unused credits back); then, for a ready one, its time (`timer`, the
//! whole duration charged), idleness (`idle`), parking (with `idle.park_after_seconds`, a quiet
//! session gives its slot back and a parked one its person or scripts want back takes one again:
//! `service/parking.rs`) and, asked of the runtime only when nothing else ends
//! it, whether its editor lives (`crash`, so within one period). While launches wait for a slice
//! size, that size's sessions are judged idle after `idle.pressure_timeout_seconds` instead
//! (`Lifecycle::idle_policy_now`, which the session page warns by too; off by default, measured in
//! BENCHMARKS.md section 14: what counts as work is unchanged). It then finishes what nothing
//! drives any more (`reaper::overdue`): a session `starting` for longer than twice the readiness
//! timeout plus a minute (a runtime may wait the timeout for a placement, then again for the
//! editor; past that its launch task met a database error, or ran on a replica that died) ends
//! `failed` with every credit back, and a stop not finished after two minutes is driven again. Last
//! it dispatches the queue, telling the rest their new place, and checks the warm pool. Every end
//! goes through `stop_session`, which is idempotent, so a second replica or a second pass does
//! nothing. A pass over 2,000 ready sessions takes 52 ms on SQLite and 17 ms on PostgreSQL
//! (BENCHMARKS.md, section 5).
//!
//! The dispatcher also runs at once when a stop here frees a slot ([`Guard::keep_queue_moving`]),
//! and not at all once shutdown has begun: slots freed by the shutdown's own stops are not handed
//! out, and the queue keeps its place for the next start.
//!
//! The warm pool ([`Guard::keep_warm_pool`]) keeps `pool.warm` editors started per (editor, slice
//! size) on free slots, refills after each launch that took one, replaces ones that die, and backs
//! off a minute after a failed start. Queued launches start cold (their id is fixed already). A
//! warm editor's handle is stored the moment its process exists, before it answers, so a shutdown
//! in the middle of a start still stops it; shutdown waits for every warm editor to stop; a new
//! server forgets the records a dead one left half-started, and stops what they name. A warm launch
//! is ready in 0.009–0.011 s at the median, against 0.72–2.47 s cold (BENCHMARKS.md, section 5).
//! On a cluster editors are started ahead per user instead (`kube.warm_pods`: a pod in the
//! namespace of a user whose dashboard is open, which only their launch takes), beside the
//! chart's placeholder pods; ARCHITECTURE.md has the design record.
//!
//! The sampler ([`Guard::sample_activity`], every `idle.sample_seconds`) asks each ready editor
//! whether it works: a Jupyter kernel busy or starting, GPU work the runtime reports, or the
//! editor's processes using `idle.busy_cpu_percent` of a core or more (`reaper::busy`); any of them
//! moves `last_busy_at`. The GPU readings are also added to the session's sums for the usage page,
//! and every reading (GPU, CPU, RAM, busy) to the session's minute (`session_samples`, the minute's
//! highest; kept `history.retention_days`) for the session page's sparklines and usage per day.
//!
//! After a restart, before serving ([`Guard::recover`]): a `ready` session whose process still
//! lives is re-adopted (the proxy finds it again); a `queued` one keeps its place in line, unless
//! the pool no longer has its size (the configuration changed), which ends it with a refund;
//! anything else ends with a refund (`crash` or `failed`), and a `ready` one whose editor died
//! while no server ran (with the machine, say) is charged only until the reaper lease last ran out
//! (`sessions.charge_until`), not for the downtime. Several servers may share one PostgreSQL
//! database, so every server keeps a lease `instance:<id>` alive (60 s, renewed every 15 s by a
//! task of its own, given up at shutdown) and marks the sessions whose launch it drives
//! (`sessions.driver`): a starting session whose driver still holds its lease is left to it, unless
//! the driver was a process of this machine that is gone (an instance is `<host>~<pid>~<random>`,
//! [`died_here`]), and one not marked yet to the overdue rule; stranded launches end together. Last, the runtime stops every editor that no live
//! session or ready pre-started editor owns (`Runtime::sweep`; on kube the reconciler deletes such
//! pods).

mod leases;
mod queue;
mod reaper;
mod recovery;
mod sampler;
mod warm;

pub(crate) use leases::REAPER_LEASE;
pub use leases::died_here;
pub use leases::keep_instance_lease;
pub(in crate::service) use warm::WarmPool;

use super::{Access, Backups, Datasets};

/// The server's own watch: the reaper, the queue's dispatcher, the warm pool, the sampler,
/// recovery and the instance lease.
#[derive(Clone)]
pub struct Guard {
    pub(in crate::service) access: Access,
    pub(in crate::service) backups: Backups,
    pub(in crate::service) background: tokio::runtime::Handle,
    pub(in crate::service) closing: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
    pub(in crate::service) config: std::sync::Arc<crate::config::Config>,
    pub(in crate::service) datasets: Datasets,
    pub(in crate::service) events: std::sync::Arc<crate::service::events::EventHub>,
    pub(in crate::service) gpus: std::sync::Arc<Vec<app::domain::pool::GpuSpec>>,
    pub(in crate::service) instance: std::sync::Arc<String>,
    pub(in crate::service) kube: Option<std::sync::Arc<crate::runtime::kube::KubeRuntime>>,
    pub(in crate::service) launcher: std::sync::Arc<crate::service::launch::Launcher>,
    pub(in crate::service) lifecycle: std::sync::Arc<crate::service::lifecycle::Lifecycle>,
    pub(in crate::service) metrics: std::sync::Arc<crate::service::metrics::Metrics>,
    pub(in crate::service) pressed: std::sync::Arc<std::sync::RwLock<Vec<(u64, i64)>>>,
    pub(in crate::service) queue_wake: std::sync::Arc<tokio::sync::Notify>,
    pub(in crate::service) runtime: std::sync::Arc<dyn crate::runtime::Runtime>,
    pub(in crate::service) store: crate::store::Store,
    pub(in crate::service) shutdown: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
    pub(in crate::service) upstreams: std::sync::Arc<crate::net::upstream::UpstreamPool>,
    pub(in crate::service) warm: std::sync::Arc<crate::service::guard::WarmPool>,
    pub(in crate::service) warm_wake: std::sync::Arc<tokio::sync::Notify>,
}

impl Guard {
    pub(in crate::service) fn new(
        handles: &crate::service::handles::Handles,
        access: Access,
        backups: Backups,
        datasets: Datasets,
        launcher: std::sync::Arc<crate::service::launch::Launcher>,
        lifecycle: std::sync::Arc<crate::service::lifecycle::Lifecycle>,
        warm: std::sync::Arc<crate::service::guard::WarmPool>,
    ) -> Guard {
        Guard {
            access,
            backups,
            background: handles.background.clone(),
            closing: handles.closing.clone(),
            config: handles.config.clone(),
            datasets,
            events: handles.events.clone(),
            gpus: handles.gpus.clone(),
            instance: handles.instance.clone(),
            kube: handles.kube.clone(),
            launcher,
            lifecycle,
            metrics: handles.metrics.clone(),
            pressed: handles.pressed.clone(),
            queue_wake: handles.queue_wake.clone(),
            runtime: handles.runtime.clone(),
            store: handles.store.clone(),
            shutdown: handles.shutdown.clone(),
            upstreams: handles.upstreams.clone(),
            warm,
            warm_wake: handles.warm_wake.clone(),
        }
    }
}

impl Guard {
    /// Refuses what would outlive the server from now on: launches, warm starts, dispatching
    /// the queue (the first step of a shutdown).
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// The idle policy `record` is judged by now (its person's timeout; shorter while launches
    /// wait for its size).
    pub fn idle_policy_now(
        &self,
        record: &crate::store::SessionRecord,
    ) -> app::domain::idle::Policy {
        self.lifecycle.idle_policy_now(record)
    }

    /// This server among the replicas, as leases and launches name it.
    pub fn instance(&self) -> &str {
        &self.instance
    }
}
