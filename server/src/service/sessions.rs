//! Sessions from launch to end: the catalog and prices, the dashboard, launching (a warm editor, a
//! cold slot or the queue), the views of a session, stopping and settling. Recovery after a restart
//! is `service::guard`'s.
//!
//! A launch is validated against the catalog (`domain::launch::validate`: installed editors, slice
//! sizes of the pool, duration limits, approved images; a 400 naming the choices), then runs in a
//! task on the main runtime (`Core::spawn`), so a client that disconnects cannot leave it half
//! done; `Store::launch` decides the place in one transaction (403 `quota_exceeded` or 402 with the
//! numbers). A cold slot's editor starts in the background: `Runtime::start`, `wait_ready`, then
//! `ready`, when the clock starts (`ends_at`). Every step is a row in `session_events` and is
//! published to the live stream (`GET /api/v1/sessions/<id>/events`). The server driving a launch
//! marks it (`sessions.driver`), so that another server starting up leaves it alone. Once shutdown
//! has begun, a launch is refused with 503 ("the server is restarting").
//!
//! `stop_session` takes any session to its end, and is idempotent: `begin_stop` (→ `stopping`, or
//! straight to `ended` when nothing runs), `Runtime::stop`, then `finish` (→ `ended`: the slot
//! freed, the hold released, the minutes used since ready charged, rounded up), and a wake of the
//! queue's dispatcher. A launch that failed costs nothing, even when it failed after a pre-started
//! editor was handed over (`EndReason::charges_time`). The route is dropped before and after, since
//! a proxy request may cache it while the stop runs. At shutdown, with `sessions.stop_on_shutdown`
//! (on by default, as JupyterHub's `cleanup_servers`), every editor is stopped, so none is
//! orphaned, and queued sessions keep their place; with it off, editors keep running and the next
//! start re-adopts them.
//!
//! Another user's session looks exactly like a missing one (`owned_record`).

use super::{Core, Images, Sessions};
use crate::runtime::{EditorLaunch, gpu};
use crate::store::{LaunchPlan, Placement, SessionRecord, StoreError};
use app::domain::credits;
use app::domain::hold::SliceHold;
use app::domain::launch::{self, Catalog, EditorKind, LaunchRequest};
use app::domain::pool::format_mib;
use app::domain::scope::Scope;
use app::domain::session::{EndReason, SessionState};
use app::domain::usage::{self, SessionReadings};
use app::error::AppError;
use app::model::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The slice sizes and the whole-card sizes the pool offers, each sorted.
pub(in crate::service) fn pool_sizes(
    pool: &[(crate::store::GpuRecord, Vec<crate::store::SlotRecord>)],
) -> (Vec<u64>, Vec<u64>) {
    let cards: Vec<(u64, Vec<u64>)> = pool
        .iter()
        .map(|(gpu, slots)| (gpu.memory_mib, slots.iter().map(|s| s.slice_mib).collect()))
        .collect();
    app::domain::pool::offered_sizes(&cards)
}

impl Core {
    /// What every page says when editors are not kept apart (no sandbox on this machine, or
    /// `local.isolation = "none"`).
    pub(in crate::service) fn isolation_warning(&self) -> Option<String> {
        match self.runtime.isolation() {
            Err(_) => Some("Editors on this server are not isolated from each other: code another user runs can read your files.".to_string()),
            Ok(_) => self.runtime.isolation_gaps(),
        }
    }

    /// Where a sandbox is wanted and none can be made, the server serves one account: refuses
    /// to make a second.
    pub(in crate::service) async fn check_one_account_unisolated(&self) -> Result<(), AppError> {
        let wanted = self.config.runtime == crate::config::RuntimeKind::Local
            && self.config.local.isolation == crate::config::local::Isolation::Sandbox;
        if let (true, Err(why)) = (wanted, self.runtime.isolation())
            && self.store.count_users().await? >= 1
        {
            return Err(AppError::Unavailable(format!(
                "this server cannot keep editors apart ({why}), so it serves one account: install bubblewrap (scripts/setup.sh), or set local.isolation = \"none\" to let accounts share it anyway"
            )));
        }
        Ok(())
    }

    pub(in crate::service) fn catalog(
        &self,
        pool: &[(crate::store::GpuRecord, Vec<crate::store::SlotRecord>)],
    ) -> Catalog {
        let (sizes, bursts) = pool_sizes(pool);
        Catalog {
            editors: self.runtime.availability(),
            slice_sizes: sizes,
            burst_sizes: bursts,
            burst_max_minutes: self.config.pool.burst_max_minutes,
            min_minutes: self.config.sessions.min_minutes,
            max_minutes: self.config.sessions.max_minutes,
            images: None,
        }
    }

    /// Milli-credits per hour for `slice_mib` on the card `gpu_id`.
    pub(in crate::service) fn price_on(&self, gpu_id: &str, slice_mib: u64) -> i64 {
        self.prices.on_card(&self.gpus, gpu_id, slice_mib)
    }

    /// The dearest card for this size: what a queued launch holds until it gets one.
    pub(in crate::service) fn price_for_slice(&self, slice_mib: u64) -> i64 {
        self.prices.dearest(&self.gpus, slice_mib)
    }

    pub(in crate::service) async fn place(
        self: &Arc<Self>,
        viewer: &Viewer,
        valid: launch::ValidLaunch,
    ) -> Result<SessionView, AppError> {
        let slice_mib = valid.slice_mib;
        let price_on = |gpu_id: &str| self.price_on(gpu_id, slice_mib);
        let editor = valid.editor;
        let launched = self
            .store
            .launch(LaunchPlan {
                user_id: &viewer.id,
                image: valid.image.as_deref(),
                editor: valid.editor,
                slice_mib,
                burst: valid.burst,
                duration_minutes: valid.duration_minutes,
                limits: self.config.default_limits(),
                disk_mib: self.runtime.workspace_mib(&viewer.name).await,
                price_on: &price_on,
                queue_price: self.price_for_slice(slice_mib),
                // A pre-started editor runs the default image, without datasets.
                use_warm: (self.prestarts() || self.warms_for_users())
                    && valid.image.is_none()
                    && !self.has_datasets(&viewer.id).await,
            })
            .await
            .inspect_err(|_| self.metrics.launched("refused", editor))?;
        let id = launched.record.id.clone();
        let launched_at = launched.record.created_at;
        match launched.placement {
            Placement::Warm(warm) => {
                // Bound before anyone has the address: the page opens on the user's own files.
                // One started for this user has them already.
                let disk_mib = self.disk_quota(&viewer.id).await;
                let bound = match warm.user_id {
                    Some(_) => Ok(()),
                    None => {
                        self.runtime
                            .bind_workspace(&warm.id, &viewer.name, disk_mib)
                            .await
                    }
                };
                if let Err(e) = bound {
                    tracing::warn!(session = %id, error = %e, "binding the workspace");
                    self.stop_session(&id, EndReason::Failed, Some(&e.user_message()))
                        .await;
                }
                for step in launched.steps {
                    self.events.publish(&id, step);
                }
                if let Some(words) = warm
                    .runtime_handle
                    .as_deref()
                    .and_then(|handle| self.runtime.network_of(handle))
                {
                    self.step(&id, &format!("Network: {words}"), 100).await;
                }
                self.metrics.launched("warm", editor);
                self.metrics
                    .became_ready(true, (self.now() - launched_at) as f64 / 1000.0);
                self.kick_warm_pool();
            }
            Placement::Slot { evicted, .. } => {
                for step in launched.steps {
                    self.events.publish(&id, step);
                }
                self.metrics.launched("cold", editor);
                self.stop_warm(evicted);
                self.drive(&id).await;
                let service = Arc::clone(self);
                let session_id = id.clone();
                let user_name = viewer.name.clone();
                self.spawn(async move { service.run_launch(&session_id, &user_name).await });
            }
            Placement::Queued { .. } => {
                for step in launched.steps {
                    self.events.publish(&id, step);
                }
                self.metrics.launched("queued", editor);
            }
        }
        self.view(&id).await
    }

    /// "16 GB RAM · 2 CPUs": what a session of `slice_mib` gets beside its GPU, where limited.
    fn resources_label(&self, slice_mib: u64) -> Option<String> {
        let (memory_mib, cpus) = self.runtime.session_resources(slice_mib)?;
        let cores = if cpus == 1.0 { "CPU" } else { "CPUs" };
        Some(format!("{} RAM · {cpus} {cores}", format_mib(memory_mib)))
    }

    /// The user's workspace quota in MiB (the default where their overrides cannot be read).
    pub(in crate::service) async fn disk_quota(&self, user_id: &str) -> u64 {
        let overrides = self
            .store
            .quota_overrides(user_id)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(user = user_id, error = %e, "reading quota overrides");
                Default::default()
            });
        self.config.default_limits().with(&overrides).max_disk_mib
    }

    /// Marks this server as the one driving `session_id`'s launch. Until it is marked, a server
    /// that starts up leaves the launch to the reaper's overdue rule rather than end it.
    pub(in crate::service) async fn drive(&self, session_id: &str) {
        if let Err(e) = self.store.set_driver(session_id, &self.instance).await {
            tracing::warn!(session = session_id, error = %e, "recording who drives a launch");
        }
    }

    pub(in crate::service) async fn run_launch(&self, session_id: &str, user_name: &str) {
        let Ok(Some(record)) = self.store.session(session_id).await else {
            return;
        };
        // Retired while the launch waited in the queue: retiring is how an admin stops an
        // image, so it does not start now.
        if let Some(reference) = &record.image
            && !self.image_still_approved(record.editor, reference).await
        {
            self.end_without_editor(
                session_id,
                EndReason::Failed,
                &format!(
                    "the image {reference} was retired before this session started; launch again with another"
                ),
            )
            .await;
            return;
        }
        let gpu = record
            .gpu_id
            .as_ref()
            .and_then(|id| self.gpus.iter().find(|g| &g.id == id));
        // A burst holds the whole card; a slice its share of it.
        let (memory_mib, cores_pct) = if record.burst {
            (record.slice_mib, 100)
        } else {
            (record.slice_mib, record.cores_pct.unwrap_or(100))
        };
        let env = gpu
            .map(|g| gpu::slice_env(g, memory_mib, cores_pct, &self.enforcement))
            // A slot on a card we no longer know: hide every card rather than expose them all.
            .unwrap_or_else(|| vec![("CUDA_VISIBLE_DEVICES".to_string(), String::new())]);
        self.bring_workspace_back(session_id, &record.user_id, user_name)
            .await;
        let launch = EditorLaunch {
            session_id: record.id.clone(),
            user_name: user_name.to_string(),
            editor: record.editor,
            base_path: format!("/s/{}/", record.id),
            env,
            slice: crate::runtime::SliceBinding::on(gpu, memory_mib, cores_pct),
            prestart: false,
            image: record.image.clone(),
            disk_mib: self.disk_quota(&record.user_id).await,
            datasets: self.launch_datasets(session_id, &record.user_id).await,
        };
        self.step(
            session_id,
            &format!("Starting {}", record.editor.label()),
            45,
        )
        .await;
        let running = match self.runtime.start(&launch).await {
            Ok(running) => running,
            Err(e) => {
                tracing::warn!(session = session_id, error = %e, "editor failed to start");
                self.end_without_editor(session_id, EndReason::Failed, &e.user_message())
                    .await;
                return;
            }
        };
        if let Err(e) = self
            .store
            .set_runtime(
                session_id,
                &running.upstream,
                &running.secret,
                &running.handle,
            )
            .await
        {
            // Stopped while it started (or the database failed): nothing may keep running.
            tracing::info!(session = session_id, error = %e, "editor started for a session that is no longer starting");
            let _ = self.runtime.stop(&running.handle).await;
            self.end_without_editor(
                session_id,
                EndReason::Failed,
                "the editor could not be recorded",
            )
            .await;
            return;
        }
        if let Some(words) = self.runtime.network_of(&running.handle) {
            self.step(session_id, &format!("Network: {words}"), 50)
                .await;
        }
        self.step(
            session_id,
            &format!("Waiting for {} to answer", record.editor.label()),
            60,
        )
        .await;
        let timeout = Duration::from_secs(self.config.sessions.ready_timeout_seconds);
        if let Err(e) = self.runtime.wait_ready(&launch, &running, timeout).await {
            tracing::warn!(session = session_id, error = %e, "editor not ready");
            self.stop_session(session_id, EndReason::Failed, Some(&e.user_message()))
                .await;
            // Whatever state the session reached meanwhile, this process is ours to end.
            let _ = self.runtime.stop(&running.handle).await;
            return;
        }
        match self
            .store
            .mark_ready(session_id, &format!("{} is ready", record.editor.label()))
            .await
        {
            Ok(step) => {
                self.events.publish(session_id, step);
                self.metrics
                    .became_ready(false, (self.now() - record.created_at) as f64 / 1000.0);
            }
            // Stopped while it started: make sure nothing is left running.
            Err(e) => {
                tracing::info!(session = session_id, error = %e, "launch overtaken by a stop");
                let _ = self.runtime.stop(&running.handle).await;
            }
        }
    }

    pub(in crate::service) async fn step(&self, session_id: &str, message: &str, progress: u8) {
        match self.store.add_step(session_id, message, progress).await {
            Ok(step) => self.events.publish(session_id, step),
            Err(e) => tracing::warn!(session = session_id, error = %e, "recording a step"),
        }
    }

    /// Ends a session that has no editor running (or never had one).
    pub(in crate::service) async fn end_without_editor(
        &self,
        session_id: &str,
        reason: EndReason,
        detail: &str,
    ) {
        self.stop_session(session_id, reason, Some(detail)).await;
    }

    /// Takes a session to its end, whatever state it is in: stops the editor, frees the slot,
    /// settles the credits. Safe to call twice.
    pub(in crate::service) async fn stop_session(
        &self,
        session_id: &str,
        reason: EndReason,
        detail: Option<&str>,
    ) {
        if let Err(e) = self.try_stop_session(session_id, reason, detail).await {
            tracing::warn!(session = session_id, error = %e, "beginning a stop");
        }
    }

    /// [`Self::stop_session`], failing (with nothing changed) when the stop cannot be recorded:
    /// whoever asked is told, rather than shown a session that is still running.
    pub(in crate::service) async fn try_stop_session(
        &self,
        session_id: &str,
        reason: EndReason,
        detail: Option<&str>,
    ) -> Result<(), StoreError> {
        let begun = self.store.begin_stop(session_id, reason, detail).await?;
        if let Some((state, step)) = begun {
            self.metrics.session_ended(reason);
            self.events.publish(session_id, step);
            if state == SessionState::Ended {
                self.routes.remove(session_id);
                return Ok(());
            }
        }
        self.routes.remove(session_id);
        if let Ok(Some(record)) = self.store.session(session_id).await {
            if record.state != SessionState::Stopping {
                return Ok(());
            }
            if let Some(upstream) = &record.upstream {
                self.upstreams.forget(upstream);
            }
            if let Some(handle) = &record.runtime_handle
                && let Err(e) = self.runtime.stop(handle).await
            {
                tracing::warn!(session = session_id, error = %e, "stopping the editor");
            }
            match self.store.finish(session_id).await {
                Ok(Some(step)) => {
                    self.events.publish(session_id, step);
                    // Its slot is free: the head of the line need not wait for the reaper.
                    self.queue_wake.notify_one();
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(session = session_id, error = %e, "finishing"),
            }
        }
        // A proxy request may have cached the route while this stop ran.
        self.routes.remove(session_id);
        Ok(())
    }

    /// A session the viewer may see: their own. Others' look the same as missing ones.
    pub(in crate::service) async fn owned_record(
        &self,
        viewer: &Viewer,
        id: &str,
    ) -> Result<SessionRecord, AppError> {
        match self.store.session(id).await? {
            Some(record) if record.user_id == viewer.id => Ok(record),
            _ => Err(AppError::NotFound),
        }
    }

    pub(in crate::service) async fn view(&self, id: &str) -> Result<SessionView, AppError> {
        let record = self.store.session(id).await?.ok_or(AppError::NotFound)?;
        let steps = self.store.steps(id).await?;
        let position = if record.state == SessionState::Queued {
            Some(self.store.queue_position(id).await?)
        } else {
            None
        };
        let mut view = self.session_view(&record, steps, position);
        view.datasets = self.store.session_datasets(id).await?;
        if let Some(position) = position {
            let live = self.store.live_sessions().await?;
            let pool = self.store.pool().await?;
            view.queue_eta_ms = queue_eta(&live, &pool, &record, position);
        }
        if record.state == SessionState::Ready
            && let Some(handle) = &record.runtime_handle
            && let Some(kills) = self.runtime.memory_kills(handle).await.filter(|k| *k > 0)
        {
            let memory = self.config.local.resources(record.slice_mib).memory_mib;
            view.memory_note = Some(memory_note(memory, kills));
        }
        if record.state.is_live() {
            view.admin_access = self
                .store
                .editor_access_now(id)
                .await?
                .map(|(admin, until_ms)| AdminAccessNote { admin, until_ms });
        } else {
            view.cost = self
                .store
                .session_costs(&record.user_id, Some(id))
                .await?
                .remove(id)
                .map(|(held, charged)| cost_of(&record, held, charged, self.now()));
        }
        Ok(view)
    }

    /// What holds `record` to its slice: its card's hold (the whole card's for a burst).
    fn hold_of(&self, record: &SessionRecord) -> SliceHold {
        let hold = record
            .gpu_id
            .as_ref()
            .and_then(|id| self.gpus.iter().find(|g| &g.id == id))
            .map(|g| g.hold)
            .unwrap_or_default();
        if record.burst {
            hold.of_whole_card()
        } else {
            hold
        }
    }

    pub(in crate::service) fn session_view(
        &self,
        record: &SessionRecord,
        steps: Vec<Step>,
        queue_position: Option<u32>,
    ) -> SessionView {
        let url = (record.state == SessionState::Ready)
            .then(|| format!("/s/{}/{}", record.id, record.editor.landing_path()));
        let policy = self.idle_policy_now(record.slice_mib, record.burst);
        SessionView {
            id: record.id.clone(),
            editor: record.editor,
            slice_mib: record.slice_mib,
            gpu_model: record.gpu_model.clone(),
            slice_hold: self.hold_of(record),
            slot_id: record.slot_id.clone(),
            state: record.state,
            end_reason: record.end_reason,
            detail: record.detail.clone(),
            duration_minutes: record.duration_minutes,
            created_at_ms: record.created_at,
            ends_at_ms: record.ends_at,
            url,
            held: if record.state.is_live() {
                credits::price_for_minutes(record.price_per_hour, record.duration_minutes as i64)
            } else {
                0
            },
            price_per_hour: record.price_per_hour,
            queue_position,
            queue_eta_ms: None,
            waits_for: (record.state == SessionState::Queued).then(|| {
                if record.burst {
                    format!("a whole {} card", format_mib(record.slice_mib))
                } else {
                    format!("a free {} slice", format_mib(record.slice_mib))
                }
            }),
            idle_at_ms: (record.state == SessionState::Ready)
                .then(|| policy.idle_at(&record.signals())),
            warn_ms: policy.warn_ms,
            gpu_used_mib: record.gpu_used_mib,
            steps,
            admin_access: None,
            memory_note: None,
            cost: None,
            ready_at_ms: record.ready_at,
            ended_at_ms: record.ended_at,
            launch_refused: None,
            datasets: Vec::new(),
        }
    }

    /// On shutdown (when configured): stop every editor, so nothing is orphaned.
    /// Queued sessions have no editor yet: they keep their place for the next start.
    pub(in crate::service) async fn stop_all(&self, reason: EndReason, detail: &str) {
        if let Ok(live) = self.store.live_sessions().await {
            for record in live.iter().filter(|r| r.state != SessionState::Queued) {
                self.stop_session(&record.id, reason, Some(detail)).await;
            }
        }
    }
}

impl Sessions {
    /// The session's steps from now on, as they happen here (after [`Self::check_owner`]).
    pub fn follow(&self, session_id: &str) -> tokio::sync::broadcast::Receiver<Step> {
        self.events.subscribe(session_id)
    }

    /// The user's limits, use and whether something blocks launches.
    pub async fn quota(&self, viewer: &Viewer) -> Result<QuotaView, AppError> {
        viewer.scopes.require(Scope::Read)?;
        let limits = self
            .config
            .default_limits()
            .with(&self.store.quota_overrides(&viewer.id).await?);
        let mut usage = self.store.usage(&viewer.id).await?;
        usage.disk_mib = self.runtime.workspace_mib(&viewer.name).await;
        let note = usage
            .disk_mib
            .filter(|disk| *disk > limits.max_disk_mib)
            .map(|disk| {
                format!(
                    "Your workspace uses {} of its {} limit: delete files to launch again.",
                    format_mib(disk),
                    format_mib(limits.max_disk_mib)
                )
            });
        Ok(QuotaView {
            limits,
            usage,
            note,
        })
    }

    pub async fn dashboard(&self, viewer: &Viewer) -> Result<Dashboard, AppError> {
        viewer.scopes.require(Scope::Read)?;
        let (balance, held) = self.store.credits(&viewer.id).await?;
        let pool = self.store.pool().await?;
        let catalog = self.catalog(&pool);
        // Who is about to launch: the cluster pre-starts editors for them.
        if self.warms_for_users() {
            match self.store.saw_dashboard(&viewer.id).await {
                Ok(()) => self.kick_warm_pool(),
                Err(e) => tracing::warn!(error = %e, "noting a dashboard visit"),
            }
        }
        let warm: Vec<_> = self
            .store
            .warm_editors()
            .await?
            .into_iter()
            .filter(|w| w.user_id.as_ref().is_none_or(|u| *u == viewer.id))
            .collect();
        let queue = self.store.queue_positions().await?;
        let all_slots: Vec<_> = pool.iter().flat_map(|(_, slots)| slots.clone()).collect();
        let mut slices: Vec<SliceOption> = catalog
            .slice_sizes
            .iter()
            .map(|&slice_mib| {
                let of_size = all_slots.iter().filter(|s| s.slice_mib == slice_mib);
                let mut warm_by_editor: BTreeMap<EditorKind, u32> = BTreeMap::new();
                for w in warm.iter().filter(|w| w.ready && w.slice_mib == slice_mib) {
                    *warm_by_editor.entry(w.editor).or_default() += 1;
                }
                SliceOption {
                    slice_mib,
                    price_per_hour: self.price_for_slice(slice_mib),
                    free: of_size.clone().filter(|s| s.session_id.is_none()).count() as u32,
                    total: of_size.count() as u32,
                    burst: false,
                    max_minutes: self.config.sessions.max_minutes,
                    warm: warm_by_editor.into_iter().collect(),
                    queued: queue
                        .iter()
                        .filter(|(_, s, b, _)| *s == slice_mib && !b)
                        .count() as u32,
                    resources: self.resources_label(slice_mib),
                    hold: SliceHold::weakest(pool.iter().filter_map(|(gpu, slots)| {
                        slots
                            .iter()
                            .any(|s| s.slice_mib == slice_mib)
                            .then_some(gpu.hold)
                    })),
                }
            })
            .collect();
        for &memory_mib in &catalog.burst_sizes {
            let cards: Vec<_> = pool
                .iter()
                .filter(|(g, _)| g.memory_mib == memory_mib)
                .collect();
            slices.push(SliceOption {
                slice_mib: memory_mib,
                price_per_hour: self.price_for_slice(memory_mib),
                free: cards
                    .iter()
                    .filter(|(_, slots)| slots.iter().all(|s| s.session_id.is_none()))
                    .count() as u32,
                total: cards.len() as u32,
                burst: true,
                max_minutes: self.config.pool.burst_max_minutes,
                warm: Vec::new(),
                queued: queue
                    .iter()
                    .filter(|(_, s, b, _)| *s == memory_mib && *b)
                    .count() as u32,
                resources: self.resources_label(memory_mib),
                hold: SliceHold::weakest(cards.iter().map(|(g, _)| g.hold.of_whole_card())),
            });
        }
        let sessions = self.store.sessions_of(&viewer.id, 20).await?;
        // For the queued ones' ETAs: who holds what now, and until when.
        let (live, eta_pool) = if sessions.iter().any(|s| s.state == SessionState::Queued) {
            (self.store.live_sessions().await?, pool.clone())
        } else {
            (Vec::new(), Vec::new())
        };
        let costs = self.store.session_costs(&viewer.id, None).await?;
        let history = self
            .store
            .recent_ledger(&viewer.id, 30)
            .await?
            .into_iter()
            .map(|entry| LedgerLine {
                kind: entry.kind,
                amount: entry.amount,
                session_id: entry.session_id,
                note: entry.note,
                at_ms: entry.at,
            })
            .collect();
        let positions: BTreeMap<&str, u32> = queue
            .iter()
            .map(|(id, _, _, p)| (id.as_str(), *p))
            .collect();
        Ok(Dashboard {
            images: Images(Arc::clone(&self.0)).launch_images().await?,
            viewer: viewer.clone(),
            credits: CreditsView {
                balance,
                held,
                request: self.store.credit_request(&viewer.id).await?,
            },
            editors: catalog
                .editors
                .into_iter()
                .map(|(kind, status)| EditorOption {
                    kind,
                    label: kind.label().to_string(),
                    unavailable: status.err(),
                })
                .collect(),
            slices,
            durations: DurationLimits {
                min_minutes: self.config.sessions.min_minutes,
                max_minutes: self.config.sessions.max_minutes,
                default_minutes: self.config.sessions.default_minutes,
            },
            gpus: pool
                .into_iter()
                .map(|(gpu, slots)| GpuView {
                    id: gpu.id,
                    model: gpu.model,
                    memory_mib: gpu.memory_mib,
                    hold: gpu.hold,
                    slots: slots
                        .into_iter()
                        .map(|s| SlotView {
                            warm: warm
                                .iter()
                                .find(|w| w.slot_id == s.id && w.ready && s.session_id.is_none())
                                .map(|w| w.editor),
                            id: s.id,
                            slice_mib: s.slice_mib,
                            in_use: s.session_id.is_some(),
                        })
                        .collect(),
                })
                .collect(),
            sessions: sessions
                .iter()
                .map(|s| {
                    let position = positions.get(s.id.as_str()).copied();
                    let mut view = self.session_view(s, Vec::new(), position);
                    if let Some(position) = position {
                        view.queue_eta_ms = queue_eta(&live, &eta_pool, s, position);
                    }
                    if !s.state.is_live() {
                        view.cost = costs
                            .get(&s.id)
                            .map(|(held, charged)| cost_of(s, *held, *charged, self.now()));
                    }
                    view
                })
                .collect(),
            history,
            balance_days: {
                // The balance before the window stands in as one line at its start; an
                // account without one starts at its first grant.
                let since = self.now() - 31 * 86_400_000;
                let (before, mut lines) = self.store.ledger_since(&viewer.id, since).await?;
                if let Some(before) = before {
                    lines.push((since - 1, before));
                }
                credits::balance_by_day(&lines, self.now(), 30)
            },
            usage_days: {
                let since = self.now() - 29 * usage::DAY_MS;
                let (spans, busy) = self
                    .store
                    .usage_spans(Some(&viewer.id), since, self.now())
                    .await?;
                usage::per_day(&spans, &busy, since, self.now())
            },
            quota: self.quota(viewer).await?,
            enforcement: self.enforcement.describe(),
            isolation_warning: self.isolation_warning(),
        })
    }

    /// Validates, then checks the quota, holds credits and takes a warm editor, a slot or a place
    /// in the queue (one transaction); a cold slot's editor starts in the background.
    pub async fn launch(
        &self,
        viewer: &Viewer,
        request: LaunchRequest,
    ) -> Result<SessionView, AppError> {
        viewer.scopes.require(Scope::Sessions)?;
        // Shutting down: an editor started now would outlive the server's stops.
        if *self.closing.borrow() {
            return Err(AppError::Unavailable(
                "the server is restarting; launch again in a minute".into(),
            ));
        }
        let pool = self.store.pool().await?;
        let mut catalog = self.catalog(&pool);
        catalog.images = self.image_choices().await?;
        let valid = launch::validate(&request, &catalog).map_err(AppError::Invalid)?;
        // From here on the work runs in its own task: a client that disconnects mid-request
        // must not leave a session half-launched (credits held, slot taken, nothing running).
        let this = self.clone();
        let viewer = viewer.clone();
        self.spawn(async move { this.place(&viewer, valid).await })
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "launch task");
                AppError::Internal
            })?
    }

    pub async fn session(&self, viewer: &Viewer, id: &str) -> Result<SessionView, AppError> {
        viewer.scopes.require(Scope::Read)?;
        self.owned_record(viewer, id).await?;
        let mut view = self.view(id).await?;
        if view.state == SessionState::Ended {
            // Its page offers the same launch again, unless its person could not make it now.
            let limits = self
                .config
                .default_limits()
                .with(&self.store.quota_overrides(&viewer.id).await?);
            let (balance, _) = self.store.credits(&viewer.id).await?;
            let hold =
                credits::price_for_minutes(view.price_per_hour, view.duration_minutes as i64);
            view.launch_refused =
                app::domain::session::relaunch_refusal(limits.max_sessions, balance, hold);
        }
        Ok(view)
    }

    /// The session's readings of the last hour (one a minute), and the scales to draw them on.
    pub async fn readings(&self, viewer: &Viewer, id: &str) -> Result<SessionReadings, AppError> {
        viewer.scopes.require(Scope::Read)?;
        let record = self.owned_record(viewer, id).await?;
        let limits = self.runtime.session_resources(record.slice_mib);
        let card_mib = match &record.slot_id {
            Some(slot) => self
                .store
                .pool()
                .await?
                .into_iter()
                .find(|(_, slots)| slots.iter().any(|s| &s.id == slot))
                .map(|(gpu, _)| gpu.memory_mib),
            None => None,
        };
        Ok(SessionReadings {
            slice_mib: record.slice_mib,
            card_mib,
            ram_limit_mib: limits.map(|(ram, _)| ram),
            cpu_limit: limits.map(|(_, cores)| cores),
            readings: self
                .store
                .readings_since(id, self.now() - 60 * usage::MINUTE_MS)
                .await?,
        })
    }

    pub async fn sessions(&self, viewer: &Viewer) -> Result<Vec<SessionView>, AppError> {
        viewer.scopes.require(Scope::Read)?;
        let records = self.store.sessions_of(&viewer.id, 100).await?;
        Ok(records
            .iter()
            .map(|r| self.session_view(r, Vec::new(), None))
            .collect())
    }

    pub async fn stop(&self, viewer: &Viewer, id: &str) -> Result<SessionView, AppError> {
        self.stop_by_user(viewer, id, None).await
    }

    /// The editor's own "shut down" (JupyterLab's File menu, marimo's power button), which the
    /// proxy turns into a stop: the session ends and is settled as any stop of the user's.
    pub async fn stop_from_editor(
        &self,
        viewer: &Viewer,
        id: &str,
    ) -> Result<SessionView, AppError> {
        self.stop_by_user(viewer, id, Some("shut down from inside the editor"))
            .await
    }

    async fn stop_by_user(
        &self,
        viewer: &Viewer,
        id: &str,
        detail: Option<&'static str>,
    ) -> Result<SessionView, AppError> {
        viewer.scopes.require(Scope::Sessions)?;
        let record = self.owned_record(viewer, id).await?;
        if record.state.is_live() {
            // Its own task: a client that disconnects must not leave the session half-stopped.
            let this = self.clone();
            let id = id.to_string();
            self.spawn(async move { this.try_stop_session(&id, EndReason::User, detail).await })
                .await
                .map_err(|e| {
                    tracing::error!(error = %e, "stop task");
                    AppError::Internal
                })??;
        }
        self.view(id).await
    }

    /// Checks the viewer owns the session (for the progress stream).
    pub async fn check_owner(&self, viewer: &Viewer, id: &str) -> Result<(), AppError> {
        viewer.scopes.require(Scope::Read)?;
        self.owned_record(viewer, id).await.map(|_| ())
    }

    /// The steps after `after`, from the database.
    pub async fn steps_after(&self, id: &str, after: i64) -> Result<Vec<Step>, AppError> {
        let steps = self.store.steps(id).await?;
        Ok(steps.into_iter().filter(|s| s.seq > after).collect())
    }
}

/// What a user is told once a process of their session outgrew its memory.
/// An ended session's cost as the ledger has it, with the minutes charged by the rule the
/// settlement charged them (its end is the settlement's `now`).
fn cost_of(record: &SessionRecord, held: i64, charged: i64, now: i64) -> SessionCost {
    let minutes = credits::charged_minutes(
        record.ready_at,
        record.charge_until,
        record.end_reason,
        record.ended_at.unwrap_or(now),
    );
    SessionCost::of(held, charged, minutes)
}

fn memory_note(memory_mib: u64, kills: u64) -> String {
    let times = match kills {
        1 => String::new(),
        n => format!(" ({n} times)"),
    };
    format!(
        "A process of this session (a kernel, say) used more than the session's {} of memory and was stopped{times}. Restart it with less data in memory, or launch with a larger slice.",
        format_mib(memory_mib)
    )
}

/// When the queued `record` at `position` should start: the `position`-th end among the running
/// sessions holding its size (for a whole card, each card of its memory frees when its last
/// session ends).
pub(in crate::service) fn queue_eta(
    live: &[SessionRecord],
    pool: &[(crate::store::GpuRecord, Vec<crate::store::SlotRecord>)],
    record: &SessionRecord,
    position: u32,
) -> Option<i64> {
    let running = live.iter().filter(|r| r.state == SessionState::Ready);
    let frees_at: Vec<i64> = if record.burst {
        pool.iter()
            .filter(|(gpu, _)| gpu.memory_mib == record.slice_mib)
            .filter_map(|(gpu, _)| {
                running
                    .clone()
                    .filter(|r| r.gpu_id.as_deref() == Some(gpu.id.as_str()))
                    .map(|r| r.ends_at)
                    .max()
                    .flatten()
            })
            .collect()
    } else {
        running
            .filter(|r| !r.burst && r.slice_mib == record.slice_mib)
            .filter_map(|r| r.ends_at)
            .collect()
    };
    app::domain::pool::queue_eta(position, frees_at)
}
