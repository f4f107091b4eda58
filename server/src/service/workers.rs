//! The server's own work, beside the requests: one tick loop, the instance lease, the warm-pool
//! keeper, the queue's dispatcher and the database's watch; and the order in which they wind
//! down at shutdown.
//!
//! The tick runs every `idle.reaper_period_ms` (5 s by default), the first a period after start,
//! since start-up recovered the sessions itself. In order: the proxy's activity is written, so the
//! reaper judges on what the proxy saw up to now; the sampler starts every `idle.sample_seconds`;
//! the reaper passes; stale routes are dropped; with `runtime = "kube"` the reconciler passes every
//! 15 s; promotions waiting to be pushed are looked for at once and then each minute; every 10 s
//! progress channels nobody listens to and idle editor connections that ended are dropped; every
//! hour expired sign-ins are deleted.
//!
//! Shutdown ([`Workers::wind_down`], before the connections drain): the guard closes (launches are
//! refused with 503, no warm editor starts, the queue is not dispatched), and the warm-pool keeper
//! is awaited, so no editor starts afterwards or is left half-started without a record; activity is
//! written; with `sessions.stop_on_shutdown` every live session but the queued ones is stopped
//! (`admin`, unused credits refunded); the warm editors are stopped and waited for (with
//! `stop_on_shutdown`, the workspaces' file systems then unmounted); the instance
//! lease is given up, so the next server need not wait for it to run out; and last the shutdown
//! signal, so open progress streams show the end before they close. The listener then gives
//! requests in flight 10 s to finish.

use super::{Guard, Promotions, Service};
use crate::config::RuntimeKind;
use crate::store;
use std::sync::Mutex;
use std::time::Duration;
use tokio::task::JoinHandle;

/// The background tasks of one running server.
pub struct Workers {
    guard: Guard,
    background: JoinHandle<()>,
    lease: JoinHandle<()>,
    queue: JoinHandle<()>,
    /// Looks whether the database answers (`Store::watch_database`).
    database: JoinHandle<()>,
    /// Taken and waited for at shutdown.
    warm_pool: Mutex<Option<JoinHandle<()>>>,
}

impl Workers {
    pub fn start(service: &Service) -> Workers {
        let guard = service.guard.clone();
        Workers {
            background: tokio::spawn(background(guard.clone(), service.promotions.clone())),
            lease: tokio::spawn(super::guard::keep_instance_lease(guard.clone())),
            warm_pool: Mutex::new(Some(tokio::spawn(guard.clone().keep_warm_pool()))),
            queue: tokio::spawn(guard.clone().keep_queue_moving()),
            database: tokio::spawn({
                let store = guard.store.clone();
                async move { store.watch_database().await }
            }),
            guard,
        }
    }

    /// The shutdown order, before open connections drain.
    pub async fn wind_down(&self) {
        let stopping = &self.guard;
        // The keeper first, and waited for: no editor starts after this, and none is left
        // half-started without a record of it.
        stopping.close();
        let keeper = self.warm_pool.lock().expect("warm pool keeper").take();
        if let Some(keeper) = keeper {
            let _ = keeper.await;
        }
        stopping.access.flush_activity().await;
        if stopping.config.sessions.stop_on_shutdown {
            stopping
                .lifecycle
                .stop_all(
                    app::domain::session::EndReason::Admin,
                    "the server shut down; unused credits were refunded",
                )
                .await;
        }
        stopping.stop_warm_pool().await;
        if stopping.config.sessions.stop_on_shutdown {
            // Every editor is stopped: nothing of theirs stays mounted either.
            stopping.runtime.release_storage().await;
        }
        stopping.release_instance().await;
        // After the stops, so open progress streams show the end before they close.
        stopping.shutdown.send_replace(true);
    }

    /// Once the connections have drained.
    pub fn abort(&self) {
        self.background.abort();
        self.lease.abort();
        self.queue.abort();
        self.database.abort();
    }
}

async fn background(service: Guard, promotions: Promotions) {
    let sessions = store::HttpSessionStore::new(service.store.clone());
    let period = Duration::from_millis(service.config.idle.reaper_period_ms);
    // The first pass comes a period after start (start-up has recovered the sessions itself).
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let sample_every = Duration::from_secs(service.config.idle.sample_seconds);
    let mut sampled = tokio::time::Instant::now();
    let mut swept = tokio::time::Instant::now();
    let mut sign_ins_swept = tokio::time::Instant::now();
    let mut reconciled = tokio::time::Instant::now();
    // Pushes left waiting by a restart go out at once; then a look each minute.
    let mut promoted: Option<tokio::time::Instant> = None;
    loop {
        tick.tick().await;
        // Activity first, so the reaper judges on what the proxy saw up to now.
        service.access.flush_activity().await;
        if sampled.elapsed() >= sample_every {
            sampled = tokio::time::Instant::now();
            let sampler = service.clone();
            tokio::spawn(async move { sampler.sample_activity().await });
        }
        service.reap().await;
        service.access.forget_stale_routes().await;
        if service.config.runtime == RuntimeKind::Kube
            && reconciled.elapsed() >= Duration::from_secs(15)
        {
            reconciled = tokio::time::Instant::now();
            super::reconcile::tick(&service).await;
        }
        if promoted.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
            promoted = Some(tokio::time::Instant::now());
            let pusher = promotions.clone();
            tokio::spawn(async move { pusher.resume_promotions().await });
        }
        service.backups.tick();
        if swept.elapsed() >= Duration::from_secs(10) {
            swept = tokio::time::Instant::now();
            service.events.sweep();
            service.upstreams.sweep();
        }
        if sign_ins_swept.elapsed() >= Duration::from_secs(3600) {
            sign_ins_swept = tokio::time::Instant::now();
            if let Err(e) = sessions.delete_expired().await {
                tracing::warn!(error = %e, "removing expired sign-ins");
            }
        }
    }
}
