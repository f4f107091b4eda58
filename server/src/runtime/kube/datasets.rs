//! Shared datasets on a cluster: per user namespace and dataset, a read-only PersistentVolume
//! and PersistentVolumeClaim pre-bound to each other, made from the dataset's source in
//! `[kube.dataset_sources]` (an NFS export or a CSI volume, `config/dataset_sources.rs`).
//!
//! Why a pair per namespace: a pod mounts claims of its own namespace only, and a volume is bound
//! by one claim at a time, so one shared volume cannot serve every user's namespace. Each pair
//! names the same storage; the volume is `ReadOnlyMany`, its source `readOnly`, its reclaim
//! policy `Retain` (deleting the claim or the volume never touches the data), and the claim is
//! mounted read-only too (the pod's volume and its mount: `objects.rs`).
//!
//! Names are deterministic: the claim is `dataset-<name>` in the user's namespace; the volume
//! (cluster-scoped) is `<namespace>.<name>`: a '.' is in neither a namespace nor a dataset's
//! name, so two users' or two datasets' volumes never share one. Both carry the user's label and
//! `gpu-sandbox/dataset`, so a departed user's volumes are found and deleted with their
//! namespace (`remove_dataset_volumes`).
//!
//! A source changed in the configuration since a volume was made is a volume made again, or
//! kept for a session that mounts it (`dataset_drift.rs`).
//!
//! Written before the pod by server-side apply, like the other per-user objects; then the claim
//! is waited on until `Bound`. A source missing from the configuration, a refusal, a claim the
//! cluster will not bind (its `VolumeMismatch` or `FailedBinding` event) or one still unbound at
//! the deadline is a reason the launch says in a step, and the editor starts without that
//! dataset (`service/datasets.rs`), as a host folder gone from one server is.

use super::names::{MANAGED_BY, MANAGER, USER_LABEL};
use super::objects::{DATASET_CLAIM_SIZE, UserPlan};
use super::{KubeError, KubeRuntime, dataset_drift};
use crate::config::dataset_sources::DatasetSource;
pub use app::domain::datasets::Attached;
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, Event, NFSVolumeSource, Namespace, ObjectReference,
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeSpec,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams};
use std::collections::BTreeMap;
use std::time::Duration;

/// The dataset's name on its volume and claim.
pub const DATASET_LABEL: &str = "gpu-sandbox/dataset";
/// Many pods may mount it, none may write.
pub const ACCESS_MODE: &str = "ReadOnlyMany";
/// The longest wait for a claim to bind: a pre-bound pair binds on the volume controller's next
/// pass, seconds on a healthy cluster.
const BIND_WAIT: Duration = Duration::from_secs(30);

/// The claim of dataset `name` in a user's namespace.
pub fn claim_name(dataset: &str) -> String {
    format!("dataset-{dataset}")
}

/// The volume of dataset `name` for the user of `namespace`.
pub fn volume_name(namespace: &str, dataset: &str) -> String {
    format!("{namespace}.{dataset}")
}

impl UserPlan<'_> {
    fn dataset_labels(&self, dataset: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (MANAGED_BY.to_string(), MANAGER.to_string()),
            (USER_LABEL.to_string(), self.user.clone()),
            (DATASET_LABEL.to_string(), dataset.to_string()),
        ])
    }

    /// The read-only volume of `dataset` for this user, pre-bound to their claim.
    pub fn dataset_volume(&self, dataset: &str, source: &DatasetSource) -> PersistentVolume {
        let (nfs, csi) = match (&source.nfs, &source.csi) {
            (Some(nfs), _) => (
                Some(NFSVolumeSource {
                    server: nfs.server.clone(),
                    path: nfs.path.clone(),
                    read_only: Some(true),
                }),
                None,
            ),
            (None, Some(csi)) => (
                None,
                Some(CSIPersistentVolumeSource {
                    driver: csi.driver.clone(),
                    volume_handle: csi.volume_handle.clone(),
                    read_only: Some(true),
                    fs_type: (!csi.fs_type.is_empty()).then(|| csi.fs_type.clone()),
                    volume_attributes: (!csi.volume_attributes.is_empty())
                        .then(|| csi.volume_attributes.clone()),
                    ..CSIPersistentVolumeSource::default()
                }),
            ),
            (None, None) => (None, None),
        };
        PersistentVolume {
            metadata: ObjectMeta {
                name: Some(volume_name(&self.namespace, dataset)),
                labels: Some(self.dataset_labels(dataset)),
                ..ObjectMeta::default()
            },
            spec: Some(PersistentVolumeSpec {
                capacity: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(DATASET_CLAIM_SIZE.into()),
                )])),
                access_modes: Some(vec![ACCESS_MODE.into()]),
                persistent_volume_reclaim_policy: Some("Retain".into()),
                // No class: nothing provisions it, and only a claim asking for none binds it.
                storage_class_name: Some(String::new()),
                volume_mode: Some("Filesystem".into()),
                claim_ref: Some(ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("PersistentVolumeClaim".into()),
                    namespace: Some(self.namespace.clone()),
                    name: Some(claim_name(dataset)),
                    ..ObjectReference::default()
                }),
                nfs,
                csi,
                ..PersistentVolumeSpec::default()
            }),
            ..PersistentVolume::default()
        }
    }

    /// The user's claim on their volume of `dataset`.
    pub fn dataset_claim(&self, dataset: &str) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(claim_name(dataset)),
                namespace: Some(self.namespace.clone()),
                labels: Some(self.dataset_labels(dataset)),
                ..ObjectMeta::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec![ACCESS_MODE.into()]),
                storage_class_name: Some(String::new()),
                volume_mode: Some("Filesystem".into()),
                volume_name: Some(volume_name(&self.namespace, dataset)),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".to_string(),
                        Quantity(DATASET_CLAIM_SIZE.into()),
                    )])),
                    ..VolumeResourceRequirements::default()
                }),
                ..PersistentVolumeClaimSpec::default()
            }),
            ..PersistentVolumeClaim::default()
        }
    }
}

/// One dataset a launch asks for: its name and the source its registration names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    pub name: String,
    pub source: String,
}

impl KubeRuntime {
    /// Makes (or finds) the volume and claim of each dataset in `user_name`'s namespace and
    /// waits for each claim to bind: per dataset, ready or the reason it is not, in words for
    /// the launch's steps.
    pub async fn attach_datasets(
        &self,
        user_name: &str,
        wanted: &[Wanted],
    ) -> Vec<(String, Result<Attached, String>)> {
        let plan = UserPlan::new(&self.config, user_name);
        let namespace = self
            .apply(
                &Api::<Namespace>::all(self.client.clone()),
                &plan.namespace(),
                "namespace",
            )
            .await;
        let mut out = Vec::with_capacity(wanted.len());
        for want in wanted {
            let attached = match &namespace {
                Err(e) => Err(e.user_message()),
                Ok(()) => self.attach(&plan, want).await,
            };
            if let Err(why) = &attached {
                tracing::warn!(user = user_name, dataset = %want.name, %why, "a dataset not attached");
            }
            out.push((want.name.clone(), attached));
        }
        out
    }

    async fn attach(&self, plan: &UserPlan<'_>, want: &Wanted) -> Result<Attached, String> {
        let Some(source) = self.config.dataset_sources.get(&want.source) else {
            return Err(format!(
                "its source `{}` is not in the server's configuration (kube.dataset_sources)",
                app::domain::encode::shown(&want.source)
            ));
        };
        let said = |e: KubeError| e.user_message();
        let volume = plan.dataset_volume(&want.name, source);
        let volume_name = volume.metadata.name.clone().unwrap_or_default();
        let wait = self.timing.start_timeout.min(BIND_WAIT);
        // A source changed since the volume was made: made again, unless a session mounts it
        // (`dataset_drift.rs`).
        let mut attached = Attached::Ready;
        let made = self
            .dataset_volume_now(plan, &want.name, &volume_name)
            .await
            .map_err(said)?;
        let drifted = made.is_some_and(|made| dataset_drift::drifted(&made, &volume));
        // A claim still being deleted (a replacement cut short) would go from under the pod.
        let leaving = self
            .claim_leaving(&plan.namespace, &want.name)
            .await
            .map_err(said)?;
        if drifted
            && !leaving
            && self
                .dataset_in_use(&plan.namespace, &want.name)
                .await
                .map_err(said)?
        {
            attached = Attached::PreviousSource;
        } else if drifted || leaving {
            tracing::info!(namespace = %plan.namespace, dataset = %want.name, drifted, "a dataset's volume and claim are made again");
            self.remove_dataset_pair(plan, &want.name, &volume_name, wait)
                .await?;
        }
        if attached == Attached::Ready {
            self.apply(
                &Api::<PersistentVolume>::all(self.client.clone()),
                &volume,
                "dataset's volume",
            )
            .await
            .map_err(said)?;
        }
        self.apply(
            &Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), &plan.namespace),
            &plan.dataset_claim(&want.name),
            "dataset's claim",
        )
        .await
        .map_err(said)?;
        self.until_bound(&plan.namespace, &claim_name(&want.name))
            .await?;
        Ok(attached)
    }

    /// Waits until the claim is `Bound`; the cluster's reason when it says it will not bind.
    async fn until_bound(&self, namespace: &str, claim: &str) -> Result<(), String> {
        let claims = Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), namespace);
        let events = Api::<Event>::namespaced(self.client.clone(), namespace);
        let wait = self.timing.start_timeout.min(BIND_WAIT);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let phase = claims
                .get_opt(claim)
                .await
                .map_err(|e| KubeError::from_kube("dataset's claim", e).user_message())?
                .and_then(|c| c.status)
                .and_then(|s| s.phase);
            if phase.as_deref() == Some("Bound") {
                return Ok(());
            }
            // The volume controller's verdict on a claim it will not bind.
            if let Ok(list) = events.list(&ListParams::default()).await
                && let Some(refused) = list.items.iter().rev().find(|e| {
                    e.involved_object.kind.as_deref() == Some("PersistentVolumeClaim")
                        && e.involved_object.name.as_deref() == Some(claim)
                        && matches!(
                            e.reason.as_deref(),
                            Some("VolumeMismatch" | "FailedBinding")
                        )
                })
            {
                return Err(format!(
                    "its claim does not bind: {}",
                    refused.message.clone().unwrap_or_default()
                ));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "its claim did not bind within {} seconds",
                    wait.as_secs().max(1)
                ));
            }
            tokio::time::sleep(self.timing.poll).await;
        }
    }

    /// Deletes every dataset volume of `user_name` (their claims go with their namespace). The
    /// volumes' `Retain` policy leaves the data where it is.
    pub(super) async fn remove_dataset_volumes(&self, user_name: &str) -> Result<(), KubeError> {
        let plan = UserPlan::new(&self.config, user_name);
        let api = Api::<PersistentVolume>::all(self.client.clone());
        let selector = format!("{MANAGED_BY}={MANAGER},{USER_LABEL}={}", plan.user);
        let volumes = api
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| KubeError::from_kube("dataset's volume", e))?;
        for volume in volumes.items {
            // Only those bound to this server's namespace of the user (another server with
            // another prefix may share the cluster and the label).
            let ours = volume
                .spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .and_then(|r| r.namespace.as_deref())
                == Some(plan.namespace.as_str());
            let Some(name) = volume.metadata.name.filter(|_| ours) else {
                continue;
            };
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => return Err(KubeError::from_kube("dataset's volume", e)),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::dataset_sources::{CsiSource, NfsSource};
    use crate::runtime::kube::KubeConfig;

    fn nfs() -> DatasetSource {
        DatasetSource {
            nfs: Some(NfsSource {
                server: "nfs.lab.internal".into(),
                path: "/exports/imagenet".into(),
            }),
            csi: None,
        }
    }

    #[test]
    fn a_dataset_is_a_read_only_volume_and_claim_bound_to_each_other() {
        let config = KubeConfig::default();
        let plan = UserPlan::new(&config, "Alice");
        let volume = plan.dataset_volume("imagenet", &nfs());
        let claim = plan.dataset_claim("imagenet");
        super::super::objects::tests::golden("dataset_volume_nfs", &volume);
        super::super::objects::tests::golden("dataset_claim", &claim);
        let spec = volume.spec.as_ref().unwrap();
        let claim_spec = claim.spec.as_ref().unwrap();
        assert_eq!(claim_spec.volume_name, volume.metadata.name);
        let by = spec.claim_ref.as_ref().unwrap();
        assert_eq!(by.name, claim.metadata.name);
        assert_eq!(by.namespace, claim.metadata.namespace);
        assert_eq!(
            spec.persistent_volume_reclaim_policy.as_deref(),
            Some("Retain")
        );
        assert_eq!(spec.nfs.as_ref().unwrap().read_only, Some(true));
        assert_eq!(spec.access_modes, claim_spec.access_modes);
        assert_eq!(spec.storage_class_name, claim_spec.storage_class_name);
    }

    #[test]
    fn a_csi_volume_keeps_its_driver_handle_and_attributes() {
        let config = KubeConfig::default();
        let plan = UserPlan::new(&config, "Alice");
        let source = DatasetSource {
            nfs: None,
            csi: Some(CsiSource {
                driver: "smb.csi.k8s.io".into(),
                volume_handle: "corpus".into(),
                fs_type: String::new(),
                volume_attributes: BTreeMap::from([("source".into(), "//fs/corpus".into())]),
            }),
        };
        super::super::objects::tests::golden(
            "dataset_volume_csi",
            plan.dataset_volume("corpus", &source),
        );
    }

    #[test]
    fn names_are_deterministic_and_never_shared() {
        assert_eq!(claim_name("imagenet"), "dataset-imagenet");
        // Neither a namespace nor a dataset name holds a '.', so the split is unambiguous.
        assert_ne!(volume_name("gsb-a-b", "c"), volume_name("gsb-a", "b-c"));
        assert_eq!(volume_name("gsb-alice", "imagenet"), "gsb-alice.imagenet");
        let config = KubeConfig::default();
        let (a, b) = (UserPlan::new(&config, "a"), UserPlan::new(&config, "b"));
        assert_ne!(
            a.dataset_volume("x", &nfs()).metadata.name,
            b.dataset_volume("x", &nfs()).metadata.name
        );
    }
}
