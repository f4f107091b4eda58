//! Reading a pod: how far it got, why it failed, where HAMi put it. Pure, so every reason a
//! launch can fail is unit-tested on the pod status the cluster reports.

use k8s_openapi::api::core::v1::Pod;

/// HAMi writes the node it chose and the devices it gave each container on the pod.
pub const HAMI_NODE: &str = "hami.io/vgpu-node";
pub const HAMI_DEVICES: &str = "hami.io/vgpu-devices-allocated";

/// Where a session pod stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Not placed yet, or placed and starting; the text says what it waits for.
    Waiting(String),
    /// The scheduler found no node: its message ("0/3 nodes are available: 3 Insufficient
    /// nvidia.com/gpumem."). `preempting` when it nominated a node and evicts lower-priority
    /// pods (warm placeholders) to make room, so waiting is worth it.
    Unschedulable { message: String, preempting: bool },
    /// It has an address; the editor is not ready yet.
    Placed(String),
    /// The readiness probe passes.
    Ready(String),
    /// It will not get there by itself: the reason for the user, and whether its log helps.
    Failed { message: String, crashed: bool },
}

/// Waiting reasons of a container that only change by a change of the pod (image, config).
const IMAGE_FAILURES: [&str; 3] = ["ErrImagePull", "ImagePullBackOff", "InvalidImageName"];
const CONFIG_FAILURES: [&str; 2] = ["CreateContainerConfigError", "CreateContainerError"];

pub fn assess(pod: &Pod) -> Progress {
    let status = pod.status.clone().unwrap_or_default();
    let phase = status.phase.as_deref().unwrap_or("Pending");
    if matches!(phase, "Failed" | "Succeeded") {
        let why = [status.reason.as_deref(), status.message.as_deref()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(": ");
        let why = if why.is_empty() {
            phase.to_string()
        } else {
            why
        };
        return Progress::Failed {
            message: format!("the editor's pod ended ({why})"),
            crashed: phase == "Failed",
        };
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return Progress::Failed {
            message: "the editor's pod is being deleted".into(),
            crashed: false,
        };
    }
    for c in status.container_statuses.iter().flatten() {
        let Some(waiting) = c.state.as_ref().and_then(|s| s.waiting.as_ref()) else {
            continue;
        };
        let reason = waiting.reason.as_deref().unwrap_or("");
        let detail = waiting.message.as_deref().unwrap_or(reason);
        if IMAGE_FAILURES.contains(&reason) {
            return Progress::Failed {
                message: format!("image pull failed: {detail}"),
                crashed: false,
            };
        }
        if CONFIG_FAILURES.contains(&reason) {
            return Progress::Failed {
                message: format!("the editor's container could not be created: {detail}"),
                crashed: false,
            };
        }
        if reason == "CrashLoopBackOff" {
            return Progress::Failed {
                message: "the editor keeps crashing (CrashLoopBackOff)".into(),
                crashed: true,
            };
        }
    }
    let condition = |kind: &str| status.conditions.iter().flatten().find(|c| c.type_ == kind);
    if let Some(scheduled) = condition("PodScheduled")
        && scheduled.status == "False"
        && scheduled.reason.as_deref() == Some("Unschedulable")
    {
        return Progress::Unschedulable {
            message: scheduled
                .message
                .clone()
                .unwrap_or_else(|| "no node can run it".into()),
            preempting: status
                .nominated_node_name
                .as_deref()
                .is_some_and(|n| !n.is_empty()),
        };
    }
    let ip = status.pod_ip.clone().filter(|ip| !ip.is_empty());
    match (ip, condition("Ready")) {
        (Some(ip), Some(ready)) if ready.status == "True" => Progress::Ready(ip),
        (Some(ip), _) => Progress::Placed(ip),
        (None, _) => Progress::Waiting(
            status
                .container_statuses
                .iter()
                .flatten()
                .find_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
                .unwrap_or_else(|| phase.to_string()),
        ),
    }
}

/// Where HAMi placed the pod: its node and the UUIDs of the cards it gave (all containers).
/// The devices annotation reads `UUID,TYPE,MEM,CORES:` per device, `;` between containers.
pub fn placement(pod: &Pod) -> (Option<String>, Vec<String>) {
    let annotations = pod.metadata.annotations.as_ref();
    let node = annotations
        .and_then(|a| a.get(HAMI_NODE))
        .filter(|n| !n.is_empty())
        .cloned();
    let mut gpus: Vec<String> = annotations
        .and_then(|a| a.get(HAMI_DEVICES))
        .map(|value| {
            value
                .split([';', ':'])
                .filter_map(|device| device.split(',').next())
                .map(str::trim)
                .filter(|uuid| !uuid.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    gpus.sort();
    gpus.dedup();
    (node, gpus)
}

/// An address and port as `host:port`, bracketing IPv6.
pub fn upstream(ip: &str, port: u16) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "session-x", "namespace": "gsb-alice"},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_pending_pod_waits() {
        assert_eq!(
            assess(&pod(serde_json::json!({"phase": "Pending"}))),
            Progress::Waiting("Pending".into())
        );
    }

    #[test]
    fn the_schedulers_reason_is_kept() {
        let message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpumem.";
        let status = serde_json::json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        ]});
        assert_eq!(
            assess(&pod(status.clone())),
            Progress::Unschedulable {
                message: message.into(),
                preempting: false
            }
        );
        let mut nominated = status;
        nominated["nominatedNodeName"] = "gpu-node-1".into();
        assert!(matches!(
            assess(&pod(nominated)),
            Progress::Unschedulable {
                preempting: true,
                ..
            }
        ));
    }

    #[test]
    fn image_and_crash_failures_are_final() {
        let waiting = |reason: &str, message: &str| {
            serde_json::json!({"phase": "Pending", "podIP": "10.1.2.3", "containerStatuses": [
                {"name": "editor", "image": "x", "imageID": "", "ready": false, "restartCount": 3,
                 "state": {"waiting": {"reason": reason, "message": message}}}
            ]})
        };
        let pulled = assess(&pod(waiting(
            "ErrImagePull",
            "rpc error: pull access denied for quay.io/nope",
        )));
        assert_eq!(
            pulled,
            Progress::Failed {
                message: "image pull failed: rpc error: pull access denied for quay.io/nope".into(),
                crashed: false
            }
        );
        assert!(matches!(
            assess(&pod(waiting("ImagePullBackOff", "Back-off pulling image"))),
            Progress::Failed { message, .. } if message.starts_with("image pull failed")
        ));
        assert!(matches!(
            assess(&pod(waiting("CrashLoopBackOff", "back-off 10s"))),
            Progress::Failed { crashed: true, .. }
        ));
        assert!(matches!(
            assess(&pod(waiting("ContainerCreating", ""))),
            Progress::Placed(ip) if ip == "10.1.2.3"
        ));
    }

    #[test]
    fn ready_needs_the_condition_and_an_address() {
        let ready = serde_json::json!({"phase": "Running", "podIP": "10.1.2.3",
            "conditions": [{"type": "Ready", "status": "True"}]});
        assert_eq!(assess(&pod(ready)), Progress::Ready("10.1.2.3".into()));
        let not_yet = serde_json::json!({"phase": "Running", "podIP": "10.1.2.3",
            "conditions": [{"type": "Ready", "status": "False"}]});
        assert_eq!(assess(&pod(not_yet)), Progress::Placed("10.1.2.3".into()));
        let evicted = serde_json::json!({"phase": "Failed", "reason": "Evicted",
            "message": "The node was low on resource: memory."});
        assert_eq!(
            assess(&pod(evicted)),
            Progress::Failed {
                message: "the editor's pod ended (Evicted: The node was low on resource: memory.)"
                    .into(),
                crashed: true
            }
        );
    }

    #[test]
    fn hami_placement_is_read_from_its_annotations() {
        let mut p = pod(serde_json::json!({}));
        p.metadata.annotations = Some(
            [
                (HAMI_NODE.to_string(), "gpu-node-1".to_string()),
                (
                    HAMI_DEVICES.to_string(),
                    "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,NVIDIA,8192,25:;".to_string(),
                ),
            ]
            .into(),
        );
        assert_eq!(
            placement(&p),
            (
                Some("gpu-node-1".into()),
                vec!["GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448".to_string()]
            )
        );
        p.metadata.annotations = Some(
            [(
                HAMI_DEVICES.to_string(),
                "GPU-b,NVIDIA,1000,10:GPU-a,NVIDIA,1000,10:;GPU-b,NVIDIA,10,0:;".to_string(),
            )]
            .into(),
        );
        assert_eq!(placement(&p), (None, vec!["GPU-a".into(), "GPU-b".into()]));
        assert_eq!(placement(&pod(serde_json::json!({}))), (None, vec![]));
    }

    #[test]
    fn ipv6_addresses_are_bracketed() {
        assert_eq!(upstream("10.1.2.3", 8888), "10.1.2.3:8888");
        assert_eq!(upstream("fd00::5", 8888), "[fd00::5]:8888");
    }
}
