//! A dataset's source changed in `[kube.dataset_sources]` (an NFS server or path, a CSI driver,
//! handle or attributes) after a user's volume of it was made. Kubernetes fixes a volume's
//! source once made (422 "spec.persistentvolumesource: Forbidden: spec.persistentvolumesource
//! is immutable after creation"), so applying the new source over it is refused: the pair is
//! made again, as an operator would.
//!
//! - Drift ([`drifted`]): the volume's `nfs`/`csi` differ from those the configuration makes.
//! - No live pod of the user mounts the claim ([`in_use`]: a pod not ended and not being
//!   deleted): the claim, then the volume, are deleted and waited on until gone; then the launch
//!   makes both from the new source. Both are ours (labelled, `Retain`): deleting the objects
//!   leaves the data on the storage. The cluster's `kubernetes.io/pvc-protection` finalizer holds
//!   a claim a stopping pod still mounts until the pod is gone, and `pv-protection` a volume
//!   until its claim is, so the waits end when the cluster lets go of the old pair.
//! - A claim found still being deleted (a replacement cut short) is waited on and made again
//!   the same way, rather than applied over and lost from under the new pod.
//! - A live pod mounts it (another session of the same user): the old pair is kept; the new
//!   session shares it and its launch step says the new source applies from the next session
//!   (`Attached::PreviousSource`).

use super::datasets::{DATASET_LABEL, claim_name};
use super::names::{MANAGED_BY, MANAGER, USER_LABEL};
use super::objects::UserPlan;
use super::{KubeError, KubeRuntime};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use std::time::Duration;

/// Whether the volume made before names other storage than the one configured now.
pub fn drifted(current: &PersistentVolume, wanted: &PersistentVolume) -> bool {
    let source = |v: &PersistentVolume| {
        v.spec
            .as_ref()
            .map(|s| (s.nfs.clone(), s.csi.clone()))
            .unwrap_or_default()
    };
    source(current) != source(wanted)
}

/// Whether a live pod of `pods` (not ended, not being deleted) mounts claim `claim`.
pub fn in_use(pods: &[Pod], claim: &str) -> bool {
    pods.iter().any(|pod| {
        let ended = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| matches!(p, "Succeeded" | "Failed"));
        let mounts = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
            .any(|v| {
                v.persistent_volume_claim
                    .as_ref()
                    .is_some_and(|c| c.claim_name == claim)
            });
        mounts && !ended && pod.metadata.deletion_timestamp.is_none()
    })
}

impl KubeRuntime {
    /// The user's volume of `dataset` as the cluster has it (found by its labels: the server
    /// lists volumes, it does not get them).
    pub(super) async fn dataset_volume_now(
        &self,
        plan: &UserPlan<'_>,
        dataset: &str,
        name: &str,
    ) -> Result<Option<PersistentVolume>, KubeError> {
        let selector = format!(
            "{MANAGED_BY}={MANAGER},{USER_LABEL}={},{DATASET_LABEL}={dataset}",
            plan.user
        );
        let volumes = Api::<PersistentVolume>::all(self.client.clone())
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| KubeError::from_kube("dataset's volume", e))?;
        Ok(volumes
            .items
            .into_iter()
            .find(|v| v.metadata.name.as_deref() == Some(name)))
    }

    /// Whether a live pod in the user's namespace mounts the claim of `dataset`.
    pub(super) async fn dataset_in_use(
        &self,
        namespace: &str,
        dataset: &str,
    ) -> Result<bool, KubeError> {
        let pods = Api::<Pod>::namespaced(self.client.clone(), namespace)
            .list(&ListParams::default())
            .await
            .map_err(|e| KubeError::from_kube("pod", e))?;
        Ok(in_use(&pods.items, &claim_name(dataset)))
    }

    /// Whether the user's claim of `dataset` is being deleted (still held by a pod going away,
    /// or left by a replacement that did not finish in time).
    pub(super) async fn claim_leaving(
        &self,
        namespace: &str,
        dataset: &str,
    ) -> Result<bool, KubeError> {
        let claim = Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), namespace)
            .get_opt(&claim_name(dataset))
            .await
            .map_err(|e| KubeError::from_kube("dataset's claim", e))?;
        Ok(claim.is_some_and(|c| c.metadata.deletion_timestamp.is_some()))
    }

    /// Deletes the user's claim of `dataset` and then its volume `volume`, each waited on
    /// until the cluster has let it go; the reason, in words, when it does not in time.
    pub(super) async fn remove_dataset_pair(
        &self,
        plan: &UserPlan<'_>,
        dataset: &str,
        volume: &str,
        wait: Duration,
    ) -> Result<(), String> {
        let said = |e: KubeError| e.user_message();
        let claims = Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), &plan.namespace);
        let claim = claim_name(dataset);
        let deadline = tokio::time::Instant::now() + wait;
        match claims.delete(&claim, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(said(KubeError::from_kube("dataset's claim", e))),
        }
        let late = || {
            format!(
                "its source changed and its previous volume was not released within {} seconds",
                wait.as_secs().max(1)
            )
        };
        loop {
            let there = claims
                .get_opt(&claim)
                .await
                .map_err(|e| said(KubeError::from_kube("dataset's claim", e)))?;
            if there.is_none() {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(late());
            }
            tokio::time::sleep(self.timing.poll).await;
        }
        let volumes = Api::<PersistentVolume>::all(self.client.clone());
        match volumes.delete(volume, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(said(KubeError::from_kube("dataset's volume", e))),
        }
        loop {
            let there = self
                .dataset_volume_now(plan, dataset, volume)
                .await
                .map_err(said)?;
            if there.is_none() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(late());
            }
            tokio::time::sleep(self.timing.poll).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::dataset_sources::{DatasetSource, NfsSource};
    use crate::runtime::kube::KubeConfig;

    fn nfs(path: &str) -> DatasetSource {
        DatasetSource {
            nfs: Some(NfsSource {
                server: "nfs.lab.internal".into(),
                path: path.into(),
            }),
            csi: None,
        }
    }

    #[test]
    fn a_changed_path_is_drift_and_the_same_source_is_not() {
        let config = KubeConfig::default();
        let plan = UserPlan::new(&config, "alice");
        let made = plan.dataset_volume("imagenet", &nfs("/exports/imagenet"));
        assert!(!drifted(
            &made,
            &plan.dataset_volume("imagenet", &nfs("/exports/imagenet"))
        ));
        assert!(drifted(
            &made,
            &plan.dataset_volume("imagenet", &nfs("/exports/v2"))
        ));
        // Labels or status the cluster adds are not the source.
        let mut seen = made.clone();
        seen.metadata.finalizers = Some(vec!["kubernetes.io/pv-protection".into()]);
        assert!(!drifted(&seen, &made));
    }

    #[test]
    fn only_a_live_pod_mounting_the_claim_holds_it() {
        let pod = |phase: &str, deleting: bool, claim: &str| -> Pod {
            let mut pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p"},
                "spec": {"containers": [], "volumes": [
                    {"name": "d", "persistentVolumeClaim": {"claimName": claim, "readOnly": true}}]},
                "status": {"phase": phase},
            }))
            .unwrap();
            if deleting {
                pod.metadata.deletion_timestamp = Some(
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
                );
            }
            pod
        };
        let claim = "dataset-imagenet";
        assert!(in_use(&[pod("Running", false, claim)], claim));
        assert!(in_use(&[pod("Pending", false, claim)], claim));
        assert!(!in_use(&[pod("Running", false, "dataset-other")], claim));
        assert!(!in_use(&[pod("Succeeded", false, claim)], claim));
        assert!(!in_use(&[pod("Running", true, claim)], claim));
        assert!(!in_use(&[], claim));
    }
}
