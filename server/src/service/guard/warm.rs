//! The warm pool: editors started ahead of launches, per (editor, slice size) on free slots,
//! or per user on a cluster.

use super::{Guard, REAPER_LEASE};
use crate::runtime::{EditorLaunch, RuntimeError, SliceBinding};
use crate::store::WarmRecord;
use app::domain::launch::EditorKind;
use std::sync::Arc;
use std::time::Duration;

/// How long the warm-pool keeper waits after a launch's kick before it looks for free slots.
/// Short beside an editor's start; long enough for a burst of launches to land first.
const KICK_SETTLE: Duration = Duration::from_millis(100);

/// Waits after a failed warm start before trying that editor again.
const WARM_RETRY: Duration = Duration::from_secs(60);
/// A user whose dashboard asked nothing for this long has left: their pre-started editor goes.
/// The open dashboard asks every 15 s and is noted once a minute.
const WARM_USER_GONE: Duration = Duration::from_secs(3 * 60);
/// Only users who launched this recently get an editor ahead of their launch.
const WARM_USER_RECENT: Duration = Duration::from_secs(14 * 24 * 3600);

/// The editors started ahead of launches: which exist, starting and stopping them.
#[derive(Clone)]
pub(in crate::service) struct WarmPool {
    pub(in crate::service) background: tokio::runtime::Handle,
    pub(in crate::service) closing: Arc<tokio::sync::watch::Sender<bool>>,
    pub(in crate::service) config: Arc<crate::config::Config>,
    pub(in crate::service) enforcement: crate::runtime::gpu::Enforcement,
    pub(in crate::service) gpus: Arc<Vec<app::domain::pool::GpuSpec>>,
    pub(in crate::service) kube: Option<Arc<crate::runtime::kube::KubeRuntime>>,
    pub(in crate::service) lifecycle: Arc<crate::service::lifecycle::Lifecycle>,
    pub(in crate::service) runtime: Arc<dyn crate::runtime::Runtime>,
    pub(in crate::service) store: crate::store::Store,
    pub(in crate::service) warm_wake: Arc<tokio::sync::Notify>,
}

impl WarmPool {
    pub(in crate::service) fn new(
        handles: &crate::service::handles::Handles,
        lifecycle: Arc<crate::service::lifecycle::Lifecycle>,
    ) -> WarmPool {
        WarmPool {
            background: handles.background.clone(),
            closing: handles.closing.clone(),
            config: handles.config.clone(),
            enforcement: handles.enforcement.clone(),
            gpus: handles.gpus.clone(),
            kube: handles.kube.clone(),
            lifecycle,
            runtime: handles.runtime.clone(),
            store: handles.store.clone(),
            warm_wake: handles.warm_wake.clone(),
        }
    }
}

impl WarmPool {
    /// Whether launches may take pre-started editors: configured, and the runtime can bind a
    /// workspace to one afterwards.
    pub(in crate::service) fn prestarts(&self) -> bool {
        !self.config.pool.warm.is_empty() && self.runtime.prestarts_editors()
    }

    /// Whether editors are started ahead for users about to launch (a cluster's pods, each in
    /// its user's namespace: [`Guard::warm_for_users`]).
    pub(in crate::service) fn warms_for_users(&self) -> bool {
        self.kube.is_some() && self.config.kube.warm_pods > 0
    }

    /// Wakes the warm-pool keeper (after a launch took an editor).
    pub(in crate::service) fn kick_warm_pool(&self) {
        self.warm_wake.notify_one();
    }

    /// Stops editors pushed off their slots; in the background, since nobody waits for them.
    pub(in crate::service) fn stop_warm(&self, evicted: Vec<WarmRecord>) {
        for warm in evicted {
            if let Some(handle) = warm.runtime_handle {
                let runtime = self.runtime.clone();
                self.background.spawn(async move {
                    if let Err(e) = runtime.stop(&handle).await {
                        tracing::warn!(warm = %warm.id, error = %e, "stopping a pre-started editor");
                    }
                });
            }
        }
    }

    /// Forgets pre-started editors that died, then tops the pool up.
    pub(in crate::service) async fn check_warm_pool(self: &Arc<Self>) {
        if !self.prestarts() {
            return;
        }
        if let Ok(warm) = self.store.warm_editors().await {
            for w in warm.iter().filter(|w| w.ready) {
                if let Some(handle) = &w.runtime_handle
                    && !self.runtime.is_alive(handle).await
                    && self.store.remove_warm(&w.id).await.unwrap_or(false)
                {
                    tracing::warn!(warm = %w.id, "a pre-started editor died; replacing it");
                }
            }
        }
        self.kick_warm_pool();
    }

    /// Starts one pre-started editor and hands it to the pool; false when it failed to start.
    pub(in crate::service) async fn start_warm(&self, record: WarmRecord) -> bool {
        let slot = self.store.slot(&record.slot_id).await.ok().flatten();
        let gpu = slot
            .as_ref()
            .and_then(|s| self.gpus.iter().find(|g| g.id == s.gpu_id));
        let cores_pct = slot.as_ref().map(|s| s.cores_pct).unwrap_or(100);
        let env = gpu
            .map(|g| {
                crate::runtime::gpu::slice_env(g, record.slice_mib, cores_pct, &self.enforcement)
            })
            .unwrap_or_else(|| vec![("CUDA_VISIBLE_DEVICES".to_string(), String::new())]);
        // One started for a user is theirs from the start (their namespace and workspace).
        let user = match &record.user_id {
            Some(id) => match self.store.user_by_id(id).await {
                Ok(Some(user)) => Some(user),
                _ => {
                    let _ = self.store.remove_warm(&record.id).await;
                    return true;
                }
            },
            None => None,
        };
        let disk_mib = match &user {
            Some(user) => self.lifecycle.disk_quota(&user.id).await,
            None => 0,
        };
        let launch = EditorLaunch {
            session_id: record.id.clone(),
            user_name: user.as_ref().map(|u| u.name.clone()).unwrap_or_default(),
            editor: record.editor,
            base_path: format!("/s/{}/", record.id),
            env,
            slice: SliceBinding::on(gpu, record.slice_mib, cores_pct),
            prestart: user.is_none(),
            image: None,
            disk_mib,
            datasets: Vec::new(),
        };
        let timeout = Duration::from_secs(self.config.sessions.ready_timeout_seconds);
        let running = match self.runtime.start(&launch).await {
            Ok(running) => running,
            Err(e) => return self.warm_failed(&record, e).await,
        };
        // Kept at once, so that a shutdown in the middle of the start still stops it.
        match self.store.warm_started(&record.id, &running.handle).await {
            Ok(true) => {}
            // A launch pushed it off its slot already (and stops what the record named).
            Ok(false) => {
                let _ = self.runtime.stop(&running.handle).await;
                return true;
            }
            Err(e) => {
                let _ = self.runtime.stop(&running.handle).await;
                return self
                    .warm_failed(&record, RuntimeError::Handle(e.to_string()))
                    .await;
            }
        }
        let mut closing = self.closing.subscribe();
        let answered = tokio::select! {
            answered = self.runtime.wait_ready(&launch, &running, timeout) => answered,
            _ = closing.wait_for(|closing| *closing) => {
                Err(RuntimeError::Unavailable("the server is shutting down".into()))
            }
        };
        if let Err(e) = answered {
            let _ = self.runtime.stop(&running.handle).await;
            return self.warm_failed(&record, e).await;
        }
        let ready = self
            .store
            .warm_ready(
                &record.id,
                &running.upstream,
                &running.secret,
                &running.handle,
            )
            .await
            .unwrap_or(false);
        if ready {
            tracing::info!(warm = %record.id, editor = %record.editor, slot = %record.slot_id, "pre-started editor ready");
        } else {
            // A cold launch took the slot while this one started.
            let _ = self.runtime.stop(&running.handle).await;
        }
        true
    }

    /// Forgets a start that did not work out. Not a failure of the editor when the record was
    /// gone already (a launch pushed it off its slot, which stopped it) or the server is closing.
    pub(in crate::service) async fn warm_failed(
        &self,
        record: &WarmRecord,
        error: RuntimeError,
    ) -> bool {
        let removed = self.store.remove_warm(&record.id).await.unwrap_or(true);
        if !removed || *self.closing.borrow() {
            return true;
        }
        tracing::warn!(warm = %record.id, editor = %record.editor, %error, "pre-starting an editor failed");
        false
    }
}

impl Guard {
    /// Keeps `pool.warm` editors started per (editor, slice size) on free slots. Runs for the
    /// server's life; wakes on a launch that took one, and on every reaper pass.
    pub async fn keep_warm_pool(self) {
        if !self.warm.prestarts() && !self.warm.warms_for_users() {
            return;
        }
        // Records still starting belong to a server process that died mid-start: forget them
        // and stop whatever they had started.
        for stale in self.store.warm_editors().await.unwrap_or_default() {
            if !stale.ready && self.store.remove_warm(&stale.id).await.unwrap_or(false) {
                tracing::info!(warm = %stale.id, "forgetting a pre-started editor a previous server left half-started");
                if let Some(handle) = &stale.runtime_handle {
                    let _ = self.runtime.stop(handle).await;
                }
            }
        }
        let mut failed_at: std::collections::HashMap<(EditorKind, u64), tokio::time::Instant> =
            Default::default();
        let mut closing = self.closing.subscribe();
        loop {
            if *closing.borrow_and_update() {
                return;
            }
            // Every launch that takes a pre-started editor wakes the keeper, and in a burst of
            // them no slot is free: then this look is all a pass reads.
            if !self.warm.warms_for_users() && !self.store.free_slot(None).await.unwrap_or(true) {
                self.next_pass(&mut closing).await;
                continue;
            }
            let warm = self.store.warm_editors().await.unwrap_or_default();
            let mut starts = Vec::new();
            if self.warm.warms_for_users() {
                starts.extend(self.warm_for_users(&warm).await);
            }
            for target in self
                .config
                .pool
                .warm
                .iter()
                .filter(|_| self.warm.prestarts())
            {
                let Some(editor) = EditorKind::parse(&target.editor) else {
                    continue;
                };
                let key = (editor, target.slice_mib);
                if failed_at
                    .get(&key)
                    .is_some_and(|at| at.elapsed() < WARM_RETRY)
                {
                    continue;
                }
                let installed = self
                    .runtime
                    .availability()
                    .into_iter()
                    .any(|(e, ok)| e == editor && ok.is_ok());
                if !installed {
                    continue;
                }
                let have = warm
                    .iter()
                    .filter(|w| w.editor == editor && w.slice_mib == target.slice_mib)
                    .count() as u32;
                for _ in have..target.count {
                    match self.store.add_warm(editor, target.slice_mib, None).await {
                        Ok(Some(record)) => starts.push((key, record)),
                        Ok(None) => break,
                        Err(e) => {
                            tracing::warn!(error = %e, "reserving a warm slot");
                            break;
                        }
                    }
                }
            }
            let this = &self.warm;
            let results = futures_util::future::join_all(
                starts
                    .into_iter()
                    .map(|(key, record)| async move { (key, this.start_warm(record).await) }),
            )
            .await;
            for (key, ok) in results {
                if !ok {
                    failed_at.insert(key, tokio::time::Instant::now());
                }
            }
            self.next_pass(&mut closing).await;
        }
    }

    /// Waits for the keeper's next pass: a launch's kick, 30 s at most, or the server closing.
    /// After a kick it lets [`KICK_SETTLE`] pass first: every launch of a burst kicks, and the
    /// pass then looks once for them all, after they have run, not once for each beside them.
    async fn next_pass(&self, closing: &mut tokio::sync::watch::Receiver<bool>) {
        tokio::select! {
            kicked = tokio::time::timeout(Duration::from_secs(30), self.warm_wake.notified()) => {
                if kicked.is_ok() {
                    tokio::select! {
                        () = tokio::time::sleep(KICK_SETTLE) => {}
                        _ = closing.changed() => {}
                    }
                    // The kicks that came meanwhile are this pass's.
                    let _ = futures_util::FutureExt::now_or_never(self.warm_wake.notified());
                }
            }
            _ = closing.changed() => {}
        }
    }

    /// Editors ahead of a launch for users about to launch, on the reaper's replica only (one
    /// keeper for the cluster): retires those whose user left (dashboard unseen for
    /// [`WARM_USER_GONE`]), was locked or launched, and reserves slots for the newest visitors
    /// up to `kube.warm_pods`; returns the reservations to start.
    async fn warm_for_users(&self, warm: &[WarmRecord]) -> Vec<((EditorKind, u64), WarmRecord)> {
        if !matches!(
            self.store.lease_holder(REAPER_LEASE).await,
            Ok(Some(holder)) if holder == *self.instance
        ) {
            return Vec::new();
        }
        let now = self.store.now();
        let seen_since = now - WARM_USER_GONE.as_millis() as i64;
        match self.store.retire_user_warm(seen_since).await {
            Ok(retired) => self.warm.stop_warm(retired),
            Err(e) => tracing::warn!(error = %e, "retiring pre-started editors"),
        }
        let have = warm.iter().filter(|w| w.user_id.is_some()).count();
        let room = (self.config.kube.warm_pods as usize).saturating_sub(have);
        if room == 0 {
            return Vec::new();
        }
        let launched_since = now - WARM_USER_RECENT.as_millis() as i64;
        let candidates = match self
            .store
            .warm_candidates(seen_since, launched_since, room)
            .await
        {
            Ok(candidates) => candidates,
            Err(e) => {
                tracing::warn!(error = %e, "choosing users to pre-start editors for");
                return Vec::new();
            }
        };
        let mut starts = Vec::new();
        for user in candidates {
            // Their launch starts its own editor with the datasets it decides: one pre-started
            // now would never be taken.
            if self.datasets.has_datasets(&user.user_id).await {
                continue;
            }
            match self
                .store
                .add_warm(user.editor, user.slice_mib, Some(&user.user_id))
                .await
            {
                Ok(Some(record)) => {
                    tracing::info!(user = %user.user_name, editor = %user.editor, "pre-starting an editor for a user about to launch");
                    starts.push(((user.editor, user.slice_mib), record));
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "reserving a slot for a pre-started editor");
                    break;
                }
            }
        }
        starts
    }

    /// Stops every pre-started editor and returns once they are gone: at shutdown, tasks
    /// spawned now would die with the process and leave the editors running.
    pub async fn stop_warm_pool(&self) {
        let mut stops = Vec::new();
        // Users' pods stay: they are the cluster's, and the next keeper retires them.
        for warm in self.store.warm_editors().await.unwrap_or_default() {
            if warm.user_id.is_none()
                && self.store.remove_warm(&warm.id).await.unwrap_or(false)
                && let Some(handle) = warm.runtime_handle
            {
                stops.push(async move {
                    if let Err(e) = self.runtime.stop(&handle).await {
                        tracing::warn!(warm = %warm.id, error = %e, "stopping a pre-started editor");
                    }
                });
            }
        }
        futures_util::future::join_all(stops).await;
    }

    // ---- activity ----
}
