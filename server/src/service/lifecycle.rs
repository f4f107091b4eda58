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

use crate::store::{SessionRecord, StoreError};
use app::domain::credits;
use app::domain::hold::SliceHold;
use app::domain::pool::format_mib;
use app::domain::session::{EndReason, SessionState};
use app::error::AppError;
use app::model::*;

/// A session's way to its end, shared by the areas: its steps and their live stream, stopping
/// and settling, ownership, and the views of it.
#[derive(Clone)]
pub(in crate::service) struct Lifecycle {
    pub(in crate::service) config: std::sync::Arc<crate::config::Config>,
    pub(in crate::service) events: std::sync::Arc<super::events::EventHub>,
    pub(in crate::service) gpus: std::sync::Arc<Vec<app::domain::pool::GpuSpec>>,
    pub(in crate::service) metrics: std::sync::Arc<super::metrics::Metrics>,
    pub(in crate::service) pressed: std::sync::Arc<std::sync::RwLock<Vec<(u64, i64)>>>,
    pub(in crate::service) queue_wake: std::sync::Arc<tokio::sync::Notify>,
    pub(in crate::service) routes: std::sync::Arc<super::routes::RouteTable>,
    pub(in crate::service) runtime: std::sync::Arc<dyn crate::runtime::Runtime>,
    pub(in crate::service) store: crate::store::Store,
    pub(in crate::service) upstreams: std::sync::Arc<crate::net::upstream::UpstreamPool>,
}

impl Lifecycle {
    pub(in crate::service) fn new(handles: &super::handles::Handles) -> Lifecycle {
        Lifecycle {
            config: handles.config.clone(),
            events: handles.events.clone(),
            gpus: handles.gpus.clone(),
            metrics: handles.metrics.clone(),
            pressed: handles.pressed.clone(),
            queue_wake: handles.queue_wake.clone(),
            routes: handles.routes.clone(),
            runtime: handles.runtime.clone(),
            store: handles.store.clone(),
            upstreams: handles.upstreams.clone(),
        }
    }
}

impl Lifecycle {
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
        self.view_of(record, steps, false).await
    }

    /// `record`'s view, with its `steps`. `new`: a session a launch made a moment ago, which
    /// has no datasets mounted (only a cold start mounts them) and cannot have an admin's
    /// access yet, so neither is read.
    pub(in crate::service) async fn view_of(
        &self,
        record: SessionRecord,
        steps: Vec<Step>,
        new: bool,
    ) -> Result<SessionView, AppError> {
        let id = record.id.as_str();
        let position = if record.state == SessionState::Queued {
            Some(self.store.queue_position(id).await?)
        } else {
            None
        };
        let mut view = self.session_view(&record, steps, position);
        if !new {
            view.datasets = self.store.session_datasets(id).await?;
        }
        if let Some(position) = position {
            let live = self.store.live_sessions().await?;
            let pool = self.store.pool().await?;
            let warm = self.store.warm_editors().await?;
            view.wait_for(self.queue_wait(&(live, pool, warm), &record, position));
        }
        if record.state == SessionState::Ready
            && let Some(handle) = &record.runtime_handle
            && let Some(kills) = self.runtime.memory_kills(handle).await.filter(|k| *k > 0)
        {
            let memory = self.config.local.resources(record.slice_mib).memory_mib;
            view.memory_note = Some(memory_note(memory, kills));
        }
        if record.state.is_live() {
            if !new {
                view.admin_access = self
                    .store
                    .editor_access_now(id)
                    .await?
                    .map(|(admin, until_ms)| AdminAccessNote { admin, until_ms });
            }
        } else {
            view.cost = self
                .store
                .session_costs(&record.user_id, Some(id))
                .await?
                .remove(id)
                .map(|(held, charged)| cost_of(&record, held, charged, self.store.now()));
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
        // A parked editor keeps its page: typing in it brings the GPU back.
        let running = matches!(record.state, SessionState::Ready | SessionState::Parked);
        let url = running.then(|| format!("/s/{}/{}", record.id, record.editor.landing_path()));
        let policy = self.idle_policy_now(record);
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
            parked: record.parked(),
            queue_position,
            queue_eta_ms: None,
            queue_why: None,
            waits_for: (record.state == SessionState::Queued).then(|| {
                if record.burst {
                    format!("a whole {} card", format_mib(record.slice_mib))
                } else {
                    format!("a free {} slice", format_mib(record.slice_mib))
                }
            }),
            idle_at_ms: running.then(|| policy.idle_at(&record.signals(), self.store.now())),
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

    /// What [`Lifecycle::queue_eta`] needs for `sessions`, read only when one of them is queued.
    pub(in crate::service) async fn eta_holders(
        &self,
        sessions: &[SessionRecord],
        pool: &[(crate::store::GpuRecord, Vec<crate::store::SlotRecord>)],
        warm: &[crate::store::WarmRecord],
    ) -> Result<Holders, AppError> {
        if !sessions.iter().any(|s| s.state == SessionState::Queued) {
            return Ok(Default::default());
        }
        let live = self.store.live_sessions().await?;
        Ok((live, pool.to_vec(), warm.to_vec()))
    }

    /// When the queued `record` at `position` should start ([`app::domain::pool::queue_eta`]):
    /// ready pre-started editors of its size free a place now; each running session of its
    /// size when it ends, or at its idle deadline once the reaper is about to reclaim it (by
    /// the policy it is judged by now, pressure included); for a whole card, each card of its
    /// memory when its last session frees.
    pub(in crate::service) fn queue_eta(
        &self,
        holders: &Holders,
        record: &SessionRecord,
        position: u32,
    ) -> Option<i64> {
        self.queue_wait(holders, record, position)
            .map(|wait| wait.at_ms)
    }

    /// [`Lifecycle::queue_eta`] and what frees the places it counted
    /// ([`app::domain::pool::queue_wait`]).
    pub(in crate::service) fn queue_wait(
        &self,
        (live, pool, warm): &Holders,
        record: &SessionRecord,
        position: u32,
    ) -> Option<app::domain::pool::QueueWait> {
        let now = self.store.now();
        let frees = |r: &SessionRecord| {
            let idle = self.idle_policy_now(r).judge(&r.signals(), now);
            app::domain::pool::frees_by(r.ends_at, idle, now)
        };
        let running = live.iter().filter(|r| r.state == SessionState::Ready);
        let (warm_ready, frees): (usize, Vec<_>) = if record.burst {
            let cards = pool
                .iter()
                .filter(|(gpu, _)| gpu.memory_mib == record.slice_mib)
                .filter_map(|(gpu, _)| {
                    running
                        .clone()
                        .filter(|r| r.gpu_id.as_deref() == Some(gpu.id.as_str()))
                        .map(frees)
                        .max()
                        .flatten()
                });
            (0, cards.collect())
        } else {
            let ready = warm
                .iter()
                .filter(|w| w.ready && w.slice_mib == record.slice_mib)
                .count();
            let holders = running
                .filter(|r| !r.burst && r.slice_mib == record.slice_mib)
                .filter_map(frees);
            (ready, holders.collect())
        };
        app::domain::pool::queue_wait(position, now, warm_ready, frees)
    }

    /// The idle policy `record` is judged by now: its slice's with the timeout its person chose
    /// at launch, or, while launches waited for that size at the reaper's last pass, no longer
    /// than the shorter one (`idle.pressure_timeout_seconds`). Whole cards (bursts) are held
    /// briefly anyway and are left as they are; so are sessions scripts call, whose quiet
    /// spells are theirs to have (as with the away rule: `domain::idle::Policy::away_ms`).
    pub fn idle_policy_now(&self, record: &SessionRecord) -> app::domain::idle::Policy {
        let (slice_mib, burst) = (record.slice_mib, record.burst);
        let policy = self
            .config
            .idle_policy(slice_mib)
            .chosen(record.idle_timeout_ms);
        let pressed = !burst
            && record.last_api_at.is_none()
            && self
                .pressed
                .read()
                .is_ok_and(|sizes| sizes.iter().any(|(size, _)| *size == slice_mib));
        if pressed {
            policy.pressed(self.config.idle.pressure_timeout_seconds as i64 * 1000)
        } else {
            policy
        }
    }
}

/// What the queue's ETAs are reckoned from: the live sessions, the pool, its warm editors.
pub(in crate::service) type Holders = (
    Vec<SessionRecord>,
    Vec<(crate::store::GpuRecord, Vec<crate::store::SlotRecord>)>,
    Vec<crate::store::WarmRecord>,
);

/// An ended session's cost as the ledger has it, with the minutes charged by the rule the
/// settlement charged them (its end is the settlement's `now`).
pub(in crate::service) fn cost_of(
    record: &SessionRecord,
    held: i64,
    charged: i64,
    now: i64,
) -> SessionCost {
    let minutes = credits::charged_minutes(
        record.ready_at,
        record.charge_until,
        record.end_reason,
        record.parked(),
        record.ended_at.unwrap_or(now),
    );
    SessionCost::of(held, charged, minutes)
}

/// What a user is told once a process of their session outgrew its memory.
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
