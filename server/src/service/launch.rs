//! A launch is validated against the catalog (`domain::launch::validate`: installed editors, slice
//! sizes of the pool, duration limits, approved images; a 400 naming the choices), then runs in a
//! task on the main runtime (`Handles::background`), so a client that disconnects cannot leave it half
//! done; `Store::launch` decides the place in one transaction (403 `quota_exceeded` or 402 with the
//! numbers). A cold slot's editor starts in the background: `Runtime::start`, `wait_ready`, then
//! `ready`, when the clock starts (`ends_at`). Every step is a row in `session_events` and is
//! published to the live stream (`GET /api/v1/sessions/<id>/events`). The server driving a launch
//! marks it (`sessions.driver`), so that another server starting up leaves it alone. Once shutdown
//! has begun, a launch is refused with 503 ("the server is restarting").

use super::{Datasets, Images};
use crate::runtime::{EditorLaunch, gpu};
use crate::store::{LaunchPlan, Placement};
use app::domain::launch::{self, Catalog};
use app::domain::pool::format_mib;
use app::domain::session::EndReason;
use app::error::AppError;
use app::model::*;
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

/// Launching: the catalog and prices, placing a launch (a warm editor, a cold slot or the queue)
/// and starting a cold slot's editor.
#[derive(Clone)]
pub(in crate::service) struct Launcher {
    pub(in crate::service) background: tokio::runtime::Handle,
    pub(in crate::service) backup: Arc<super::backups::BackupState>,
    pub(in crate::service) config: Arc<crate::config::Config>,
    pub(in crate::service) datasets: Datasets,
    pub(in crate::service) enforcement: crate::runtime::gpu::Enforcement,
    pub(in crate::service) events: Arc<super::events::EventHub>,
    pub(in crate::service) gpus: Arc<Vec<app::domain::pool::GpuSpec>>,
    pub(in crate::service) images: Images,
    pub(in crate::service) instance: Arc<String>,
    pub(in crate::service) lifecycle: Arc<super::lifecycle::Lifecycle>,
    pub(in crate::service) metrics: Arc<super::metrics::Metrics>,
    pub(in crate::service) prices: Arc<app::domain::pricing::PriceList>,
    pub(in crate::service) runtime: Arc<dyn crate::runtime::Runtime>,
    pub(in crate::service) store: crate::store::Store,
    pub(in crate::service) warm: Arc<super::guard::WarmPool>,
}

impl Launcher {
    pub(in crate::service) fn new(
        handles: &super::handles::Handles,
        datasets: Datasets,
        images: Images,
        lifecycle: Arc<super::lifecycle::Lifecycle>,
        warm: Arc<super::guard::WarmPool>,
    ) -> Launcher {
        Launcher {
            background: handles.background.clone(),
            backup: handles.backup.clone(),
            config: handles.config.clone(),
            datasets,
            enforcement: handles.enforcement.clone(),
            events: handles.events.clone(),
            gpus: handles.gpus.clone(),
            images,
            instance: handles.instance.clone(),
            lifecycle,
            metrics: handles.metrics.clone(),
            prices: handles.prices.clone(),
            runtime: handles.runtime.clone(),
            store: handles.store.clone(),
            warm,
        }
    }
}

impl Launcher {
    /// What every page says when editors are not kept apart (no sandbox on this machine, or
    /// `local.isolation = "none"`).
    pub(in crate::service) fn isolation_warning(&self) -> Option<String> {
        match self.runtime.isolation() {
            Err(_) => Some("Editors on this server are not isolated from each other: code another user runs can read your files.".to_string()),
            Ok(_) => self.runtime.isolation_gaps(),
        }
    }

    pub(in crate::service) fn catalog(
        &self,
        pool: &[(crate::store::GpuRecord, Vec<crate::store::SlotRecord>)],
    ) -> Catalog {
        let cards: Vec<(u64, Vec<u64>)> = pool
            .iter()
            .map(|(gpu, slots)| (gpu.memory_mib, slots.iter().map(|s| s.slice_mib).collect()))
            .collect();
        self.catalog_of(&cards)
    }

    /// The catalog of a pool given as its cards: each card's memory and its slots' sizes
    /// ([`crate::store::Store::pool_cards`], read again every few seconds).
    pub(in crate::service) fn catalog_of(&self, cards: &[(u64, Vec<u64>)]) -> Catalog {
        let (sizes, bursts) = app::domain::pool::offered_sizes(cards);
        Catalog {
            editors: self.runtime.availability(),
            slice_sizes: sizes.clone(),
            burst_sizes: bursts.clone(),
            burst_max_minutes: self.config.pool.burst_max_minutes,
            min_minutes: self.config.sessions.min_minutes,
            max_minutes: self.config.sessions.max_minutes,
            images: None,
            idle_choices: sizes
                .iter()
                .chain(&bursts)
                .map(|mib| (*mib, self.config.idle.choice(*mib)))
                .collect(),
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
                // A pre-started editor runs the default image (and no datasets: the store
                // looks).
                use_warm: (self.warm.prestarts() || self.warm.warms_for_users())
                    && valid.image.is_none(),
            })
            .await
            .inspect_err(|_| self.metrics.launched("refused", editor))?;
        let id = launched.record.id.clone();
        let launched_at = launched.record.created_at;
        // Its person's idle timeout, before anyone has the address. A write of its own: the
        // reaper cannot end a session this new by the size's default meanwhile.
        if let Some(timeout_ms) = valid.idle_timeout_ms {
            self.store.set_idle_timeout(&id, timeout_ms).await?;
        }
        match launched.placement {
            Placement::Warm(warm) => {
                // Bound before anyone has the address: the page opens on the user's own files.
                // One started for this user has them already. The quota is the one the
                // launch's transaction checked against.
                let disk_mib = launched.limits.max_disk_mib;
                let bound = match warm.user_id {
                    Some(_) => Ok(()),
                    None => {
                        self.runtime
                            .bind_workspace(&warm.id, &viewer.name, disk_mib)
                            .await
                    }
                };
                // Whether the launch's own rows are all there is to show (no failure, no step
                // added after them).
                let mut plain = bound.is_ok();
                if let Err(e) = bound {
                    tracing::warn!(session = %id, error = %e, "binding the workspace");
                    self.lifecycle
                        .stop_session(&id, EndReason::Failed, Some(&e.user_message()))
                        .await;
                }
                for step in &launched.steps {
                    self.events.publish(&id, step.clone());
                }
                if let Some(words) = warm
                    .runtime_handle
                    .as_deref()
                    .and_then(|handle| self.runtime.network_of(handle))
                {
                    plain = false;
                    self.lifecycle
                        .step(&id, &format!("Network: {words}"), 100)
                        .await;
                }
                self.metrics.launched("warm", editor);
                self.metrics
                    .became_ready(true, (self.store.now() - launched_at) as f64 / 1000.0);
                self.warm.kick_warm_pool();
                if plain {
                    return self.ready_view(launched.record, launched.steps).await;
                }
            }
            Placement::Slot { evicted, .. } => {
                for step in launched.steps {
                    self.events.publish(&id, step);
                }
                self.metrics.launched("cold", editor);
                self.warm.stop_warm(evicted);
                self.drive(&id).await;
                let service = Arc::clone(self);
                let session_id = id.clone();
                let user_name = viewer.name.clone();
                self.background
                    .spawn(async move { service.run_launch(&session_id, &user_name).await });
            }
            Placement::Queued { .. } => {
                for step in launched.steps {
                    self.events.publish(&id, step);
                }
                self.metrics.launched("queued", editor);
            }
        }
        self.lifecycle.view(&id).await
    }

    /// The view of a session a warm launch made ready, from the rows its transaction wrote,
    /// with its route for the proxy put in place: the first request through the proxy then
    /// reads nothing. The session is read once after the route goes in, as the proxy's own
    /// lookup does, so that a stop that ran meanwhile leaves no route behind; that read is
    /// also the view's (with any idle timeout chosen). Anything else falls back to
    /// [`super::lifecycle::Lifecycle::view`].
    async fn ready_view(
        &self,
        written: crate::store::SessionRecord,
        steps: Vec<Step>,
    ) -> Result<SessionView, AppError> {
        let id = written.id.clone();
        let routes = &self.lifecycle.routes;
        let Some(route) = super::routes::Route::of_ready(&written, self.store.clock()) else {
            return self.lifecycle.view(&id).await;
        };
        routes.insert(Arc::new(route));
        let now = self.store.session(&id).await;
        match now {
            Ok(Some(record))
                if record.state == written.state && record.upstream == written.upstream =>
            {
                self.lifecycle.view_of(record, steps, true).await
            }
            _ => {
                routes.remove(&id);
                self.lifecycle.view(&id).await
            }
        }
    }

    /// "16 GB RAM · 2 CPUs": what a session of `slice_mib` gets beside its GPU, where limited.
    pub(in crate::service) fn resources_label(&self, slice_mib: u64) -> Option<String> {
        let (memory_mib, cpus) = self.runtime.session_resources(slice_mib)?;
        let cores = if cpus == 1.0 { "CPU" } else { "CPUs" };
        Some(format!("{} RAM · {cpus} {cores}", format_mib(memory_mib)))
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
            && !self
                .images
                .image_still_approved(record.editor, reference)
                .await
        {
            self.lifecycle.end_without_editor(
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
            disk_mib: self.lifecycle.disk_quota(&record.user_id).await,
            datasets: self
                .datasets
                .launch_datasets(session_id, &record.user_id)
                .await,
        };
        self.lifecycle
            .step(
                session_id,
                &format!("Starting {}", record.editor.label()),
                45,
            )
            .await;
        let running = match self.runtime.start(&launch).await {
            Ok(running) => running,
            Err(e) => {
                tracing::warn!(session = session_id, error = %e, "editor failed to start");
                self.lifecycle
                    .end_without_editor(session_id, EndReason::Failed, &e.user_message())
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
            self.lifecycle
                .end_without_editor(
                    session_id,
                    EndReason::Failed,
                    "the editor could not be recorded",
                )
                .await;
            return;
        }
        if let Some(words) = self.runtime.network_of(&running.handle) {
            self.lifecycle
                .step(session_id, &format!("Network: {words}"), 50)
                .await;
        }
        self.lifecycle
            .step(
                session_id,
                &format!("Waiting for {} to answer", record.editor.label()),
                60,
            )
            .await;
        let timeout = Duration::from_secs(self.config.sessions.ready_timeout_seconds);
        if let Err(e) = self.runtime.wait_ready(&launch, &running, timeout).await {
            tracing::warn!(session = session_id, error = %e, "editor not ready");
            self.lifecycle
                .stop_session(session_id, EndReason::Failed, Some(&e.user_message()))
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
                self.metrics.became_ready(
                    false,
                    (self.store.now() - record.created_at) as f64 / 1000.0,
                );
            }
            // Stopped while it started: make sure nothing is left running.
            Err(e) => {
                tracing::info!(session = session_id, error = %e, "launch overtaken by a stop");
                let _ = self.runtime.stop(&running.handle).await;
            }
        }
    }
}
