//! The effectful half of the kube reconciler: one pass lists the pods, reads the database, takes
//! the pure [`diff`]'s actions. The contract (order of reads, idempotency, locking) is in
//! [`crate::runtime::kube::reconcile`].

use super::{Guard, Service};
pub use crate::runtime::kube::reconcile::Report;
use crate::runtime::kube::reconcile::{Action, PodView, SessionView, diff};
use crate::runtime::kube::{KubeRuntime, PodHandle};
use crate::store::SlotMove;
use app::domain::session::EndReason;

/// One pass: list, diff, act. A no-op for runtimes other than kube.
pub async fn run_once(service: &Service) -> Result<Report, String> {
    once(&service.guard).await
}

async fn once(service: &Guard) -> Result<Report, String> {
    let Some(kube) = &service.kube else {
        return Ok(Report::default());
    };
    let Some(lock) = service
        .store
        .try_reconcile_lock()
        .await
        .map_err(|e| format!("reconciler lock: {e}"))?
    else {
        return Ok(Report {
            skipped: true,
            ..Report::default()
        });
    };
    let report = pass(service, kube).await;
    lock.release().await;
    report
}

async fn pass(service: &Guard, kube: &KubeRuntime) -> Result<Report, String> {
    // Pods first, the database second: see the module documentation.
    let pods: Vec<PodView> = kube
        .list_session_pods()
        .await
        .map_err(|e| e.to_string())?
        .iter()
        .filter_map(PodView::from_pod)
        .collect();
    let mut sessions: Vec<SessionView> = service
        .store
        .live_sessions()
        .await
        .map_err(|e| format!("live sessions: {e}"))?
        .into_iter()
        .map(|record| SessionView {
            handle: record
                .runtime_handle
                .as_deref()
                .and_then(|h| PodHandle::parse(h).ok()),
            raw_handle: record.runtime_handle,
            id: record.id,
            state: record.state,
            gpu_id: record.gpu_id,
        })
        .collect();
    // A user's pre-started editor is a pod of a session to be: not an orphan.
    let warm = service
        .store
        .warm_editors()
        .await
        .map_err(|e| format!("warm editors: {e}"))?;
    sessions.extend(
        warm.into_iter()
            .filter(|w| w.user_id.is_some())
            .map(|w| SessionView {
                id: w.id,
                state: app::domain::session::SessionState::Starting,
                raw_handle: None,
                handle: None,
                gpu_id: None,
            }),
    );
    let mut report = Report::default();
    for action in diff(&sessions, &pods) {
        match action {
            Action::DeletePod { handle, session_id } => {
                match kube.delete_session_objects(&handle).await {
                    Ok(()) => {
                        tracing::info!(session = %session_id, namespace = %handle.namespace, pod = %handle.pod, "deleted an orphaned editor pod");
                        report.deleted_pods.push(handle.pod);
                    }
                    Err(e) => {
                        tracing::warn!(pod = %handle.pod, error = %e, "deleting an orphaned editor pod")
                    }
                }
            }
            Action::EndLost {
                session_id,
                detail,
                confirm,
            } => {
                if let Some(handle) = confirm {
                    match kube.pod_exists(&handle).await {
                        Ok(false) => {}
                        Ok(true) => continue,
                        Err(e) => {
                            tracing::warn!(pod = %handle.pod, error = %e, "checking a missing editor pod");
                            continue;
                        }
                    }
                }
                tracing::warn!(session = %session_id, "the cluster lost the editor; ending the session");
                service
                    .lifecycle
                    .stop_session(&session_id, EndReason::Lost, Some(&detail))
                    .await;
                report.lost_sessions.push(session_id);
            }
            Action::RecordPlacement {
                session_id,
                old,
                new,
            } => match service
                .store
                .replace_runtime_handle(&session_id, &old, &new)
                .await
            {
                Ok(true) => report.placements.push(session_id),
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(session = %session_id, error = %e, "recording a placement")
                }
            },
            Action::MoveSlot { session_id, gpu_id } => {
                // A card the pool does not know (GPUs declared under other names): nothing to
                // follow, and no write to make on every pass.
                if !service.gpus.iter().any(|g| g.id == gpu_id) {
                    continue;
                }
                match service.store.move_to_gpu(&session_id, &gpu_id).await {
                    Ok(SlotMove::Moved { from, to }) => {
                        tracing::info!(session = %session_id, %from, %to, "moved a session's slot to the card HAMi chose");
                        report.moved_slots.push(session_id);
                    }
                    Ok(SlotMove::NoFreeSlot) => {
                        tracing::warn!(session = %session_id, gpu = %gpu_id, "HAMi placed a session on a card our pool shows full");
                    }
                    Ok(
                        SlotMove::UnknownGpu
                        | SlotMove::Already
                        | SlotMove::NotOneSlot
                        | SlotMove::Ended,
                    ) => {}
                    Err(e) => {
                        tracing::warn!(session = %session_id, error = %e, "moving a slot")
                    }
                }
            }
        }
    }
    Ok(report)
}

/// The background tick's call: one pass, logged.
pub(super) async fn tick(service: &Guard) {
    match once(service).await {
        Ok(report) if report != Report::default() && !report.skipped => {
            tracing::info!(?report, "reconciled the cluster")
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "reconciling the cluster"),
    }
}
