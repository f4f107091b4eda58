//! Parking: a ready session with no work for `idle.park_after_seconds` gives its GPU slice back
//! and keeps everything else; it resumes on the same slot when its person types (a beat with
//! input) or its scripts call it, at once when the slot is free, else as soon as the session
//! holding it ends (the reaper retries every pass). Nothing is lost, so nobody is warned first;
//! the end rules (the timer, the idle timeout) apply to a parked session as to a running one.
//!
//! The order keeps the GPU single-owner: parking freezes the editor (`Runtime::park`) before the
//! store gives the slot away, and resuming takes the slot back in the store before the editor
//! thaws (`Runtime::resume`). A runtime that cannot park (a pod, an editor holding GPU memory it
//! cannot checkpoint) refuses, and the session stays as it is.

use super::lifecycle::Lifecycle;
use crate::store::{Resumed, SessionRecord, WarmRecord};
use app::domain::session::EndReason;

/// What a resume did.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::service) enum Resume {
    /// Running again.
    Ready,
    /// Its slot is held by another session: it waits, parked.
    Waiting,
    /// It was not parked.
    NotParked,
}

/// Why a parked editor that would not thaw ended.
const NO_THAW: &str = "the editor could not be resumed after it was parked";

impl Lifecycle {
    /// Parks `record`, a ready session with no work. False when the runtime refused or the
    /// session moved on meanwhile (then its editor is thawed again).
    pub(in crate::service) async fn park(&self, record: &SessionRecord) -> bool {
        let Some(handle) = &record.runtime_handle else {
            return false;
        };
        if let Err(e) = self.runtime.park(handle).await {
            tracing::debug!(session = %record.id, error = %e, "not parked");
            return false;
        }
        match self.store.park(&record.id).await {
            Ok(Some(step)) => {
                self.routes.remove(&record.id);
                if let Some(upstream) = &record.upstream {
                    self.upstreams.forget(upstream);
                }
                tracing::info!(session = %record.id, "parked: its slot is free");
                self.events.publish(&record.id, step);
                self.queue_wake.notify_one();
                true
            }
            outcome => {
                if let Err(e) = outcome {
                    tracing::warn!(session = %record.id, error = %e, "parking");
                }
                if let Err(e) = self.runtime.resume(handle).await {
                    tracing::warn!(session = %record.id, error = %e, "thawing an editor not parked");
                }
                false
            }
        }
    }

    /// Takes a parked session's slot back and thaws its editor; pre-started editors pushed off
    /// the slot are returned, to be stopped by the warm pool.
    pub(in crate::service) async fn resume(
        &self,
        record: &SessionRecord,
    ) -> (Resume, Vec<WarmRecord>) {
        let (step, evicted) = match self.store.resume(&record.id).await {
            Ok(Resumed::Ready { step, evicted }) => (step, evicted),
            Ok(Resumed::Waiting) => return (Resume::Waiting, Vec::new()),
            Ok(Resumed::NotParked) => return (Resume::NotParked, Vec::new()),
            Err(e) => {
                tracing::warn!(session = %record.id, error = %e, "resuming");
                return (Resume::Waiting, Vec::new());
            }
        };
        if let Some(handle) = &record.runtime_handle
            && let Err(e) = self.runtime.resume(handle).await
        {
            tracing::warn!(session = %record.id, error = %e, "thawing a parked editor");
            self.stop_session(&record.id, EndReason::Crash, Some(NO_THAW))
                .await;
            return (Resume::NotParked, evicted);
        }
        tracing::info!(session = %record.id, "resumed on its slot");
        self.events.publish(&record.id, step);
        (Resume::Ready, evicted)
    }
}
