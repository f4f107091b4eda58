//! The reaper's pass: each live session's verdict, the overdue launches and stops, then the
//! queue and the warm pool.

use super::{Guard, leases::REAPER_LEASE};
use app::domain::reaper::{self, Watch};
use app::domain::session::{EndReason, SessionState};

/// Why an idle session ended sooner than its timeout.
const PRESSED: &str = "ended sooner for being idle while launches waited for a slice of its size";

impl Guard {
    /// One reaper pass. Only the lease holder reaps, so two replicas never both end one session;
    /// every step is idempotent anyway (ending an ended session does nothing).
    pub async fn reap(&self) {
        let ttl = (self.config.idle.reaper_period_ms * 3) as i64;
        match self
            .store
            .try_lease(REAPER_LEASE, &self.instance, ttl)
            .await
        {
            Ok(true) => {}
            Ok(false) if self.take_reaper_from_the_dead(ttl).await => {}
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(error = %e, "taking the reaper lease");
                return;
            }
        }
        let live = match self.store.live_sessions().await {
            Ok(live) => live,
            Err(e) => {
                tracing::warn!(error = %e, "reaper: listing sessions");
                return;
            }
        };
        self.metrics.reaper_passed(self.store.now());
        // A locked account keeps nothing: its sessions end, queued ones included.
        let locked = self.store.locked_user_ids().await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "reaper: listing locked accounts");
            Default::default()
        });
        let now = self.store.now();
        // Sizes launches wait for: their idle sessions end sooner.
        let mut waiting: Vec<u64> = live
            .iter()
            .filter(|r| r.state == SessionState::Queued && !r.burst)
            .map(|r| r.slice_mib)
            .collect();
        waiting.sort_unstable();
        waiting.dedup();
        let pressed_since: Vec<(u64, i64)> = match self.pressed.write() {
            Ok(mut pressed) => {
                let since: Vec<(u64, i64)> = waiting
                    .iter()
                    .map(|size| {
                        let before = pressed.iter().find(|(s, _)| s == size).map(|(_, at)| *at);
                        (*size, before.unwrap_or(now))
                    })
                    .collect();
                *pressed = since.clone();
                since
            }
            Err(_) => Vec::new(),
        };
        for record in &live {
            let mut watch = Watch {
                state: record.state,
                locked: locked.contains(&record.user_id),
                ends_at: record.ends_at,
                signals: record.signals(),
                has_editor: record.runtime_handle.is_some(),
                alive: None,
                can_park: self.runtime.parks_editors() && !record.burst,
                parked_at: record.parked_at,
            };
            let policy = self.lifecycle.idle_policy_now(record);
            let sooner = policy
                != self
                    .config
                    .idle_policy(record.slice_mib)
                    .chosen(record.idle_timeout_ms);
            let mut judged = reaper::verdict(&watch, &policy, now);
            // Pressure that begins while a session is already quiet ends it only once its
            // person has had the warning.
            let since = pressed_since
                .iter()
                .find(|(size, _)| *size == record.slice_mib)
                .map(|(_, at)| *at);
            if let (
                true,
                Some(since),
                reaper::Verdict::End {
                    reason: EndReason::Idle,
                    ..
                },
            ) = (sooner, since, judged)
                && !app::domain::idle::warned_since(since, policy.warn_ms, now)
            {
                judged = reaper::Verdict::Keep;
            }
            if let (reaper::Verdict::AskAlive, Some(handle)) = (judged, &record.runtime_handle) {
                watch.alive = Some(self.runtime.is_alive(handle).await);
                judged = reaper::verdict(&watch, &policy, now);
            }
            match judged {
                reaper::Verdict::Park => {
                    self.lifecycle.park(record).await;
                    continue;
                }
                reaper::Verdict::Resume => {
                    let (_, evicted) = self.lifecycle.resume(record).await;
                    self.warm.stop_warm(evicted);
                    continue;
                }
                _ => {}
            }
            if let reaper::Verdict::End {
                mut reason,
                mut detail,
            } = judged
            {
                if let (EndReason::Crash, Some(handle)) = (reason, &record.runtime_handle)
                    && self.runtime.was_lost(handle).await
                {
                    reason = EndReason::Lost;
                    detail = Some(crate::runtime::kube::reconcile::LOST_GONE);
                }
                tracing::info!(session = %record.id, %reason, locked = watch.locked, "reaper ends a session");
                // A crash report carries the editor's last lines, so its owner can tell why.
                let last_words = match (reason, &record.runtime_handle) {
                    (EndReason::Crash, Some(handle)) => self.runtime.last_words(handle).await,
                    _ => String::new(),
                };
                if reason == EndReason::Idle && sooner {
                    detail = Some(PRESSED);
                }
                let detail = detail.map(|d| crate::runtime::with_last_words(d, &last_words));
                self.lifecycle
                    .stop_session(&record.id, reason, detail.as_deref())
                    .await;
            }
        }
        self.finish_overdue(&live, now).await;
        self.dispatch_queue().await;
        self.warm.check_warm_pool().await;
        self.purge_departed().await;
    }

    /// Launches and stops that nothing drives any more (their task met a database error, or ran
    /// on a replica that died) would hold their slot and credits for ever: failed launches end
    /// with a refund, unfinished stops are driven again.
    pub(in crate::service) async fn finish_overdue(
        &self,
        live: &[crate::store::SessionRecord],
        now: i64,
    ) {
        let ready_timeout_ms = (self.config.sessions.ready_timeout_seconds * 1000) as i64;
        for record in live
            .iter()
            .filter(|r| matches!(r.state, SessionState::Starting | SessionState::Stopping))
        {
            let since = match self.store.steps(&record.id).await {
                Ok(steps) => steps
                    .iter()
                    .filter(|step| step.state == record.state)
                    .map(|step| step.at_ms)
                    .min()
                    .unwrap_or(record.created_at),
                Err(e) => {
                    tracing::warn!(session = %record.id, error = %e, "reaper: reading steps");
                    continue;
                }
            };
            let Some(action) = reaper::overdue(
                record.state,
                since,
                record.end_reason,
                ready_timeout_ms,
                now,
            ) else {
                continue;
            };
            // Read again: the launch may have become ready since the list was read.
            match self.store.session(&record.id).await {
                Ok(Some(now)) if now.state == record.state => {}
                _ => continue,
            }
            tracing::warn!(session = %record.id, state = %record.state, "reaper finishes an overdue session");
            match action {
                reaper::Overdue::FailLaunch => {
                    self.lifecycle
                        .stop_session(&record.id, EndReason::Failed, Some(reaper::START_OVERDUE))
                        .await
                }
                reaper::Overdue::DriveStop(reason) => {
                    self.lifecycle
                        .stop_session(&record.id, reason, record.detail.as_deref())
                        .await
                }
            }
        }
    }
}
