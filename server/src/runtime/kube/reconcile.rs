//! Keeps the database and the cluster in step, on any number of replicas: the background tick runs
//! a pass every 15 s when `runtime = "kube"`.
//!
//! [`diff`] is pure: live sessions from the database and our session pods from the cluster (by
//! label) in, actions out:
//! - a pod whose session is ended or unknown is an orphan: delete it (and its Secret);
//! - a ready session whose pod is gone, or has ended (evicted, failed), is lost: end it with reason
//!   `lost` through the service's own stop path, which settles the credits (the hold is refunded,
//!   used minutes charged) and publishes the end;
//! - where HAMi placed a pod (its `hami.io/vgpu-node`, and the card UUIDs of
//!   `hami.io/vgpu-devices-allocated`, `UUID,NVIDIA,MiB,cores:` per device) is recorded in the
//!   session's runtime handle by compare-and-set, so the node and card of every session can be
//!   seen;
//! - where HAMi put a one-card pod on another card than its slot's, the session moves to a free
//!   slot of its size on that card (`Store::move_to_gpu`, one transaction), so the pool shows what
//!   each card really holds. "No free slot" is logged as a disagreement between the books and HAMi;
//!   an unknown card is left alone. The slots in the database stay the accounting unit; declaring
//!   `pool.gpus` by card UUID is what lets them follow HAMi.
//!
//! `service::reconcile::run_once` lists the pods first and reads the database second: a pod created
//! after the list cannot be mistaken for an orphan (its session is older than the pod), and a
//! session whose pod is missing from the list is ended only after a second, direct look at its pod.
//! Every action is idempotent (a delete of what is gone is fine, ending an ended session is a
//! no-op). On PostgreSQL a pass holds a transaction-scoped advisory lock
//! (`pg_try_advisory_xact_lock`): another replica skips the pass, and however the pass ends, the
//! lock goes with the transaction. SQLite means one server process.

use super::{PodHandle, pods};
use app::domain::session::SessionState;
use k8s_openapi::api::core::v1::Pod;
use std::collections::{HashMap, HashSet};

/// One live session as the reconciler sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionView {
    pub id: String,
    pub state: SessionState,
    /// The runtime handle as stored, and parsed.
    pub raw_handle: Option<String>,
    pub handle: Option<PodHandle>,
    /// The card of the slot our allocator gave it.
    pub gpu_id: Option<String>,
}

/// One of our session pods as the reconciler sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    pub namespace: String,
    pub name: String,
    pub session_id: String,
    /// "Failed" or "Succeeded": the pod will not run again.
    pub ended_phase: Option<String>,
    /// Deletion under way already.
    pub deleting: bool,
    pub node: Option<String>,
    pub gpus: Vec<String>,
}

impl PodView {
    pub fn from_pod(pod: &Pod) -> Option<PodView> {
        let session_id = pod
            .metadata
            .labels
            .as_ref()?
            .get(super::names::SESSION_LABEL)?
            .clone();
        let (node, gpus) = pods::placement(pod);
        Some(PodView {
            namespace: pod.metadata.namespace.clone()?,
            name: pod.metadata.name.clone()?,
            session_id,
            ended_phase: pod
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .filter(|p| p == "Failed" || p == "Succeeded"),
            deleting: pod.metadata.deletion_timestamp.is_some(),
            node,
            gpus,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// An orphan: its session is over or unknown.
    DeletePod {
        handle: PodHandle,
        session_id: String,
    },
    /// The session's editor is gone. `confirm`: look at the pod once more before ending it.
    EndLost {
        session_id: String,
        detail: String,
        confirm: Option<PodHandle>,
    },
    /// HAMi's placement differs from what the handle records.
    RecordPlacement {
        session_id: String,
        old: String,
        new: String,
    },
    /// HAMi put the pod on another card than our slot's: move the session's slot there.
    MoveSlot { session_id: String, gpu_id: String },
}

pub const LOST_GONE: &str =
    "The cluster lost the editor's pod; unused credits were refunded. Your workspace is kept.";

pub fn diff(sessions: &[SessionView], pods: &[PodView]) -> Vec<Action> {
    let live: HashSet<&str> = sessions.iter().map(|s| s.id.as_str()).collect();
    let mut actions = Vec::new();
    for pod in pods {
        if !live.contains(pod.session_id.as_str()) && !pod.deleting {
            actions.push(Action::DeletePod {
                handle: PodHandle {
                    namespace: pod.namespace.clone(),
                    pod: pod.name.clone(),
                    secret: super::names::secret_name(&pod.session_id),
                    ..PodHandle::default()
                },
                session_id: pod.session_id.clone(),
            });
        }
    }
    let by_place: HashMap<(&str, &str), &PodView> = pods
        .iter()
        .map(|p| ((p.namespace.as_str(), p.name.as_str()), p))
        .collect();
    for session in sessions {
        let (Some(handle), Some(raw)) = (&session.handle, &session.raw_handle) else {
            // Starting, before the runtime recorded its pod: the launch watches it itself.
            continue;
        };
        if !matches!(session.state, SessionState::Starting | SessionState::Ready) {
            continue;
        }
        let pod = by_place.get(&(handle.namespace.as_str(), handle.pod.as_str()));
        let ready = session.state == SessionState::Ready;
        match pod {
            None if ready => actions.push(Action::EndLost {
                session_id: session.id.clone(),
                detail: LOST_GONE.into(),
                confirm: Some(handle.clone()),
            }),
            Some(pod) if ready && pod.ended_phase.is_some() => actions.push(Action::EndLost {
                session_id: session.id.clone(),
                detail: format!(
                    "The editor's pod ended ({}); unused credits were refunded. Your workspace is kept.",
                    pod.ended_phase.as_deref().unwrap_or_default()
                ),
                confirm: None,
            }),
            Some(pod) => {
                if (pod.node.is_some() || !pod.gpus.is_empty())
                    && (pod.node != handle.node || pod.gpus != handle.gpus)
                {
                    let placed = PodHandle {
                        node: pod.node.clone(),
                        gpus: pod.gpus.clone(),
                        ..handle.clone()
                    };
                    actions.push(Action::RecordPlacement {
                        session_id: session.id.clone(),
                        old: raw.clone(),
                        new: placed.to_json(),
                    });
                }
                if let ([card], Some(ours)) = (pod.gpus.as_slice(), &session.gpu_id)
                    && card != ours
                {
                    actions.push(Action::MoveSlot {
                        session_id: session.id.clone(),
                        gpu_id: card.clone(),
                    });
                }
            }
            None => {}
        }
    }
    actions
}

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Another replica held the lock; nothing was looked at.
    pub skipped: bool,
    pub deleted_pods: Vec<String>,
    pub lost_sessions: Vec<String>,
    pub placements: Vec<String>,
    /// Sessions moved to a slot on the card HAMi chose.
    pub moved_slots: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(ns: &str, pod: &str) -> PodHandle {
        PodHandle {
            namespace: ns.into(),
            pod: pod.into(),
            secret: format!("{pod}-token"),
            ..PodHandle::default()
        }
    }

    fn session(id: &str, state: SessionState, h: Option<PodHandle>) -> SessionView {
        SessionView {
            id: id.into(),
            state,
            raw_handle: h.as_ref().map(PodHandle::to_json),
            handle: h,
            gpu_id: Some("GPU-1".into()),
        }
    }

    fn pod(ns: &str, id: &str) -> PodView {
        PodView {
            namespace: ns.into(),
            name: format!("session-{id}"),
            session_id: id.into(),
            ended_phase: None,
            deleting: false,
            node: None,
            gpus: vec![],
        }
    }

    #[test]
    fn in_step_means_nothing_to_do() {
        let sessions = [
            session("a", SessionState::Ready, Some(handle("gsb-x", "session-a"))),
            session("b", SessionState::Starting, None),
            session(
                "c",
                SessionState::Stopping,
                Some(handle("gsb-x", "session-c")),
            ),
        ];
        let pods = [pod("gsb-x", "a"), pod("gsb-x", "b"), pod("gsb-x", "c")];
        assert_eq!(diff(&sessions, &pods), vec![]);
    }

    #[test]
    fn orphans_are_deleted_unless_going_already() {
        let mut going = pod("gsb-x", "old2");
        going.deleting = true;
        let actions = diff(&[], &[pod("gsb-x", "old"), going]);
        assert_eq!(
            actions,
            vec![Action::DeletePod {
                handle: handle("gsb-x", "session-old"),
                session_id: "old".into()
            }]
        );
    }

    #[test]
    fn a_ready_session_without_its_pod_is_lost_after_a_second_look() {
        let h = handle("gsb-x", "session-a");
        let sessions = [
            session("a", SessionState::Ready, Some(h.clone())),
            // Starting sessions are watched by their launch; stopping ones are on their way.
            session(
                "s",
                SessionState::Starting,
                Some(handle("gsb-x", "session-s")),
            ),
            session(
                "t",
                SessionState::Stopping,
                Some(handle("gsb-x", "session-t")),
            ),
        ];
        assert_eq!(
            diff(&sessions, &[]),
            vec![Action::EndLost {
                session_id: "a".into(),
                detail: LOST_GONE.into(),
                confirm: Some(h),
            }]
        );
    }

    #[test]
    fn an_ended_pod_ends_its_session() {
        let mut evicted = pod("gsb-x", "a");
        evicted.ended_phase = Some("Failed".into());
        let sessions = [session(
            "a",
            SessionState::Ready,
            Some(handle("gsb-x", "session-a")),
        )];
        let actions = diff(&sessions, &[evicted]);
        assert!(
            matches!(&actions[..], [Action::EndLost { session_id, confirm: None, detail }]
                if session_id == "a" && detail.contains("(Failed)")),
            "{actions:?}"
        );
    }

    #[test]
    fn hamis_placement_is_recorded_once() {
        let mut placed = pod("gsb-x", "a");
        placed.node = Some("gpu-node-1".into());
        placed.gpus = vec!["GPU-1".into()];
        let h = handle("gsb-x", "session-a");
        let sessions = [session("a", SessionState::Ready, Some(h.clone()))];
        let actions = diff(&sessions, std::slice::from_ref(&placed));
        let expected = PodHandle {
            node: Some("gpu-node-1".into()),
            gpus: vec!["GPU-1".into()],
            ..h.clone()
        };
        assert_eq!(
            actions,
            vec![Action::RecordPlacement {
                session_id: "a".into(),
                old: h.to_json(),
                new: expected.to_json(),
            }]
        );
        // Once recorded, nothing more to do.
        let sessions = [session("a", SessionState::Ready, Some(expected))];
        assert_eq!(diff(&sessions, &[placed]), vec![]);
    }

    #[test]
    fn a_pod_on_another_card_moves_its_session_there() {
        let mut placed = pod("gsb-x", "a");
        placed.gpus = vec!["GPU-2".into()];
        let h = PodHandle {
            gpus: vec!["GPU-2".into()],
            ..handle("gsb-x", "session-a")
        };
        let sessions = [session("a", SessionState::Ready, Some(h))];
        assert_eq!(
            diff(&sessions, std::slice::from_ref(&placed)),
            vec![Action::MoveSlot {
                session_id: "a".into(),
                gpu_id: "GPU-2".into()
            }]
        );
        // A pod on two cards (a burst) is not one slot's business.
        placed.gpus = vec!["GPU-2".into(), "GPU-3".into()];
        let h = PodHandle {
            gpus: placed.gpus.clone(),
            ..handle("gsb-x", "session-a")
        };
        let sessions = [session("a", SessionState::Ready, Some(h))];
        assert_eq!(diff(&sessions, &[placed]), vec![]);
    }
}
