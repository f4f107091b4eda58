//! One's own sessions: the dashboard, launching, the session page and its readings, heartbeats,
//! extending and stopping. The launch itself is `launch.rs`'s, a session's end and views
//! `lifecycle.rs`'s, recovery after a restart [`super::guard`]'s.

use super::Images;
use super::lifecycle::cost_of;
use app::domain::credits;
use app::domain::hold::SliceHold;
use app::domain::launch::{self, EditorKind, LaunchRequest};
use app::domain::pool::format_mib;
use app::domain::presence::Beat;
use app::domain::quota::{self, Extended, ExtensionLimits, ExtensionRefused};
use app::domain::scope::Scope;
use app::domain::session::{EndReason, SessionState};
use app::domain::usage::{self, SessionReadings};
use app::error::AppError;
use app::model::*;
use std::collections::BTreeMap;

/// Launching, seeing, extending and stopping one's sessions; the dashboard.
#[derive(Clone)]
pub struct Sessions {
    pub(in crate::service) background: tokio::runtime::Handle,
    pub(in crate::service) closing: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
    pub(in crate::service) config: std::sync::Arc<crate::config::Config>,
    pub(in crate::service) enforcement: crate::runtime::gpu::Enforcement,
    pub(in crate::service) events: std::sync::Arc<super::events::EventHub>,
    pub(in crate::service) images: Images,
    pub(in crate::service) launcher: std::sync::Arc<super::launch::Launcher>,
    pub(in crate::service) lifecycle: std::sync::Arc<super::lifecycle::Lifecycle>,
    pub(in crate::service) runtime: std::sync::Arc<dyn crate::runtime::Runtime>,
    pub(in crate::service) store: crate::store::Store,
    pub(in crate::service) warm: std::sync::Arc<super::guard::WarmPool>,
}

impl Sessions {
    pub(in crate::service) fn new(
        handles: &super::handles::Handles,
        images: Images,
        launcher: std::sync::Arc<super::launch::Launcher>,
        lifecycle: std::sync::Arc<super::lifecycle::Lifecycle>,
        warm: std::sync::Arc<super::guard::WarmPool>,
    ) -> Sessions {
        Sessions {
            background: handles.background.clone(),
            closing: handles.closing.clone(),
            config: handles.config.clone(),
            enforcement: handles.enforcement.clone(),
            events: handles.events.clone(),
            images,
            launcher,
            lifecycle,
            runtime: handles.runtime.clone(),
            store: handles.store.clone(),
            warm,
        }
    }
}

impl Sessions {
    /// A heartbeat from a page of the session's owner: visible, or (`beat.left`) just gone.
    pub async fn heartbeat(&self, viewer: &Viewer, id: &str, beat: Beat) -> Result<(), AppError> {
        viewer.scopes.require(Scope::Sessions)?;
        let record = self.lifecycle.owned_record(viewer, id).await?;
        if !record.state.is_live() {
            return Err(AppError::Conflict("this session has ended".into()));
        }
        self.store.heartbeat(id, self.store.now(), beat).await?;
        // Its person is back: the GPU too, at once where its slot is free (else the reaper
        // retries each pass).
        if beat.input && record.state == SessionState::Parked {
            let (_, evicted) = self.lifecycle.resume(&record).await;
            self.warm.stop_warm(evicted);
        }
        Ok(())
    }

    /// A request for `id` found no running editor: if it is `owner_id`'s parked session, says
    /// whether it runs again. A script's call (`by_script`) counts as API traffic and takes the
    /// slot back; a browser's does not, since an open tab polls by itself (a beat with input
    /// wakes it instead). None: not a parked session of theirs.
    pub async fn wake_parked(&self, owner_id: &str, id: &str, by_script: bool) -> Option<bool> {
        let record = self.store.session(id).await.ok()??;
        if record.user_id != owner_id || record.state != SessionState::Parked {
            return None;
        }
        if !by_script {
            return Some(false);
        }
        if let Err(e) = self.store.touch_traffic(id, self.store.now(), true).await {
            tracing::warn!(session = id, error = %e, "recording a script's call");
        }
        let (resumed, evicted) = self.lifecycle.resume(&record).await;
        self.warm.stop_warm(evicted);
        Some(resumed == super::parking::Resume::Ready)
    }

    /// Holds credits for `minutes` more and moves the end.
    pub async fn extend(
        &self,
        viewer: &Viewer,
        id: &str,
        minutes: u32,
    ) -> Result<SessionView, AppError> {
        viewer.scopes.require(Scope::Sessions)?;
        let record = self.lifecycle.owned_record(viewer, id).await?;
        let user = self
            .config
            .default_limits()
            .with(&self.store.quota_overrides(&viewer.id).await?);
        let limits = ExtensionLimits {
            user_max_minutes: user.max_minutes,
            server_max_minutes: self.config.sessions.max_minutes,
            burst_max_minutes: self.config.pool.burst_max_minutes,
        };
        let session = Extended {
            running: record.state.runs_editor(),
            burst: record.burst,
            ends_at: record.ends_at,
            duration_minutes: record.duration_minutes,
        };
        // Checked here for the person's words, and again in the store's transaction.
        quota::extension(&limits, &session, minutes, self.store.now()).map_err(|refused| {
            match refused {
                ExtensionRefused::Minutes { .. } => AppError::Invalid(refused.to_string()),
                ExtensionRefused::NotRunning | ExtensionRefused::TimeUp => {
                    AppError::Conflict(refused.to_string())
                }
                ExtensionRefused::TooLong { .. } => AppError::QuotaExceeded(refused.to_string()),
            }
        })?;
        let step = self.store.extend(id, minutes, &limits).await?;
        // Asking for more time is a person at the keyboard.
        self.store
            .heartbeat(id, self.store.now(), Beat::INPUT)
            .await?;
        self.events.publish(id, step);
        self.session(viewer, id).await
    }

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
        let catalog = self.launcher.catalog(&pool);
        // Who is about to launch: the cluster pre-starts editors for them.
        if self.warm.warms_for_users() {
            match self.store.saw_dashboard(&viewer.id).await {
                Ok(()) => self.warm.kick_warm_pool(),
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
                    price_per_hour: self.launcher.price_for_slice(slice_mib),
                    free: of_size.clone().filter(|s| s.session_id.is_none()).count() as u32,
                    total: of_size.count() as u32,
                    burst: false,
                    max_minutes: self.config.sessions.max_minutes,
                    warm: warm_by_editor.into_iter().collect(),
                    queued: queue
                        .iter()
                        .filter(|(_, s, b, _)| *s == slice_mib && !b)
                        .count() as u32,
                    resources: self.launcher.resources_label(slice_mib),
                    idle_choice: self.config.idle.choice(slice_mib),
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
                price_per_hour: self.launcher.price_for_slice(memory_mib),
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
                resources: self.launcher.resources_label(memory_mib),
                idle_choice: self.config.idle.choice(memory_mib),
                hold: SliceHold::weakest(cards.iter().map(|(g, _)| g.hold.of_whole_card())),
            });
        }
        let sessions = self.store.sessions_of(&viewer.id, 20).await?;
        // For the queued ones' ETAs: who holds what now, until when, and what waits warm
        // (read only when one of them waits: the live sessions are everyone's, and each one's
        // idle deadline is judged).
        let eta = self.lifecycle.eta_holders(&sessions, &pool, &warm).await?;
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
            images: self.images.launch_images().await?,
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
                    let mut view = self.lifecycle.session_view(s, Vec::new(), position);
                    if let Some(position) = position {
                        view.wait_for(self.lifecycle.queue_wait(&eta, s, position));
                    }
                    if !s.state.is_live() {
                        view.cost = costs
                            .get(&s.id)
                            .map(|(held, charged)| cost_of(s, *held, *charged, self.store.now()));
                    }
                    view
                })
                .collect(),
            history,
            balance_days: {
                // The balance before the window stands in as one line at its start; an
                // account without one starts at its first grant.
                let since = self.store.now() - 31 * 86_400_000;
                let (before, mut lines) = self.store.ledger_since(&viewer.id, since).await?;
                if let Some(before) = before {
                    lines.push((since - 1, before));
                }
                credits::balance_by_day(&lines, self.store.now(), 30)
            },
            usage_days: {
                let since = self.store.now() - 29 * usage::DAY_MS;
                let (spans, busy) = self
                    .store
                    .usage_spans(Some(&viewer.id), since, self.store.now())
                    .await?;
                usage::per_day(&spans, &busy, since, self.store.now())
            },
            quota: self.quota(viewer).await?,
            enforcement: self.enforcement.describe(),
            isolation_warning: self.launcher.isolation_warning(),
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
        let mut catalog = self.launcher.catalog_of(&self.store.pool_cards().await?);
        catalog.images = self.images.image_choices().await?;
        let valid = launch::validate(&request, &catalog).map_err(AppError::Invalid)?;
        // From here on the work runs in its own task: a client that disconnects mid-request
        // must not leave a session half-launched (credits held, slot taken, nothing running).
        let this = self.launcher.clone();
        let viewer = viewer.clone();
        self.background
            .spawn(async move { this.place(&viewer, valid).await })
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "launch task");
                AppError::Internal
            })?
    }

    pub async fn session(&self, viewer: &Viewer, id: &str) -> Result<SessionView, AppError> {
        viewer.scopes.require(Scope::Read)?;
        self.lifecycle.owned_record(viewer, id).await?;
        let mut view = self.lifecycle.view(id).await?;
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
        let record = self.lifecycle.owned_record(viewer, id).await?;
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
                .readings_since(id, self.store.now() - 60 * usage::MINUTE_MS)
                .await?,
        })
    }

    pub async fn sessions(&self, viewer: &Viewer) -> Result<Vec<SessionView>, AppError> {
        viewer.scopes.require(Scope::Read)?;
        let records = self.store.sessions_of(&viewer.id, 100).await?;
        Ok(records
            .iter()
            .map(|r| self.lifecycle.session_view(r, Vec::new(), None))
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
        let record = self.lifecycle.owned_record(viewer, id).await?;
        if record.state.is_live() {
            // Its own task: a client that disconnects must not leave the session half-stopped.
            let this = self.lifecycle.clone();
            let id = id.to_string();
            self.background
                .spawn(async move { this.try_stop_session(&id, EndReason::User, detail).await })
                .await
                .map_err(|e| {
                    tracing::error!(error = %e, "stop task");
                    AppError::Internal
                })??;
        }
        self.lifecycle.view(id).await
    }

    /// Checks the viewer owns the session (for the progress stream).
    pub async fn check_owner(&self, viewer: &Viewer, id: &str) -> Result<(), AppError> {
        viewer.scopes.require(Scope::Read)?;
        self.lifecycle.owned_record(viewer, id).await.map(|_| ())
    }

    /// The steps after `after`, from the database.
    pub async fn steps_after(&self, id: &str, after: i64) -> Result<Vec<Step>, AppError> {
        let steps = self.store.steps(id).await?;
        Ok(steps.into_iter().filter(|s| s.seq > after).collect())
    }
}
