//! Workspace backups on a cluster: VolumeSnapshots of each user's workspace claim, of the class
//! `kube.snapshot_class` ([`crate::runtime::snapshots::WorkspaceSnapshots`]).
//!
//! Why snapshots rather than restic in a Job: the CSI driver copies the volume itself
//! (incremental where the storage is: Ceph RBD, EBS, GCE PD, ZFS, Longhorn), the server needs no
//! repository, password or restic in the cluster, and a snapshot is crash-consistent at the
//! volume: a notebook saved by rename is the old or the new file, never half of each. A running
//! session is not paused.
//!
//! - **Back up**: a `VolumeSnapshot` named by the service's clock, then a wait until the
//!   snapshot controller says `readyToUse`; an error it reports (an unknown class, a claim it
//!   cannot snapshot) fails the run with its words, and the failed object is deleted.
//! - **List**: the namespace's snapshots labelled as our backups that are ready; a snapshot's id
//!   is its uid's hex digits.
//! - **Restore**: a claim provisioned from the snapshot (`dataSource`), and a short pod (the
//!   JupyterLab image's `sh` and `tar`, restricted, as the editor's user) with the workspace and
//!   that claim, which copies the part asked for into the first `restored-<date>` folder it can
//!   make (never one that is there); then the pod and the claim are deleted. Where a session of
//!   the user runs, the pod goes to its node (the workspace is ReadWriteOnce).
//! - **Retention**: `app::domain::backups::forgotten` (restic's rule) picks the snapshots to
//!   delete; deleting one is the class's `deletionPolicy` (Delete frees its storage).

use super::volume_snapshot::{self as vs, VolumeSnapshot};
use super::{KubeError, KubeRuntime, names, objects::UserPlan};
use crate::runtime::restic::{BackedUp, RepositoryError, Snapshot};
use crate::runtime::snapshots::WorkspaceSnapshots;
use app::domain::backups::{self as rules, Retention};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};
use std::time::Duration;
use tokio::time::Instant;

/// How long a snapshot may take to be ready, and a restore's copy to finish.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(10 * 60);
const RESTORE_WAIT: Duration = Duration::from_secs(60 * 60);
/// Folder names a restore tries (`restored-<date>`, `…-2`, …) before it gives up.
const FOLDER_ATTEMPTS: u32 = 20;

fn failed(error: KubeError) -> RepositoryError {
    tracing::warn!(error = %error, "workspace snapshot");
    RepositoryError::Failed(error.user_message())
}

fn api_error(what: &str) -> impl Fn(kube::Error) -> RepositoryError + '_ {
    move |e| failed(KubeError::from_kube(what, e))
}

impl KubeRuntime {
    fn plan_of(&self, user_name: &str) -> UserPlan<'_> {
        UserPlan::new(&self.config, user_name).with_network(&self.network)
    }

    fn volume_snapshots(&self, namespace: &str) -> Api<VolumeSnapshot> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn post_params(&self) -> PostParams {
        PostParams {
            field_manager: Some(self.config.field_manager.clone()),
            ..PostParams::default()
        }
    }

    /// Our backups of the user's workspace, ready or not.
    async fn backups_of(&self, namespace: &str) -> Result<Vec<VolumeSnapshot>, RepositoryError> {
        self.volume_snapshots(namespace)
            .list(&ListParams::default().labels(&vs::backups_selector()))
            .await
            .map(|list| list.items)
            .map_err(api_error("volume snapshot"))
    }

    /// Waits until the snapshot is ready; its error, or the wait's end, fails it.
    async fn snapshot_ready(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<VolumeSnapshot, RepositoryError> {
        let api = self.volume_snapshots(namespace);
        let deadline = Instant::now() + SNAPSHOT_WAIT;
        loop {
            let snapshot = api
                .get_opt(name)
                .await
                .map_err(api_error("volume snapshot"))?
                .ok_or_else(|| {
                    RepositoryError::Failed("the snapshot was deleted before it was ready".into())
                })?;
            if snapshot.ready() {
                return Ok(snapshot);
            }
            if let Some(error) = snapshot.error() {
                let _ = api.delete(name, &DeleteParams::default()).await;
                return Err(RepositoryError::Failed(format!(
                    "the cluster could not snapshot the workspace: {error}"
                )));
            }
            if Instant::now() >= deadline {
                return Err(RepositoryError::Failed(format!(
                    "the snapshot was not ready within {} minutes (is the cluster's snapshot controller running?)",
                    SNAPSHOT_WAIT.as_secs() / 60
                )));
            }
            tokio::time::sleep(self.timing.poll).await;
        }
    }

    /// The node where a session of the user holds the workspace, if one runs.
    async fn workspace_node(&self, namespace: &str) -> Option<String> {
        let pods = self
            .pods(namespace)
            .list(&ListParams::default().labels(names::SESSION_LABEL))
            .await
            .ok()?;
        pods.items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .find_map(|p| p.spec?.node_name)
    }

    /// Runs the restore pod to its end: its exit code and last log line.
    async fn run_restore_pod(&self, namespace: &str, pod: &Pod) -> Result<String, RepositoryError> {
        let pods = self.pods(namespace);
        let name = pod.metadata.name.clone().unwrap_or_default();
        match pods.create(&self.post_params(), pod).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let _ = pods.delete(&name, &DeleteParams::default()).await;
                return Err(RepositoryError::Locked);
            }
            Err(e) => return Err(api_error("restore pod")(e)),
        }
        let deadline = Instant::now() + RESTORE_WAIT;
        let code = loop {
            let current = pods
                .get_opt(&name)
                .await
                .map_err(api_error("restore pod"))?
                .ok_or_else(|| RepositoryError::Failed("the restore pod was deleted".into()))?;
            let status = current.status.unwrap_or_default();
            if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
                break status
                    .container_statuses
                    .unwrap_or_default()
                    .into_iter()
                    .find_map(|c| c.state?.terminated.map(|t| t.exit_code))
                    .unwrap_or(1);
            }
            if Instant::now() >= deadline {
                return Err(RepositoryError::Failed(
                    "the restore did not finish within an hour".into(),
                ));
            }
            tokio::time::sleep(self.timing.poll).await;
        };
        let log = pods
            .logs(
                &name,
                &LogParams {
                    container: Some("restore".into()),
                    tail_lines: Some(5),
                    ..LogParams::default()
                },
            )
            .await
            .unwrap_or_default();
        let last = log.lines().last().unwrap_or_default().to_string();
        match code {
            0 => last
                .strip_prefix(vs::RESTORED_INTO)
                .map(str::to_string)
                .ok_or_else(|| RepositoryError::Failed("the restore said nothing".into())),
            vs::NOT_IN_SNAPSHOT => Err(RepositoryError::NotInSnapshot(String::new())),
            _ => Err(RepositoryError::Failed(format!(
                "the restore pod failed: {last}"
            ))),
        }
    }

    async fn delete_quietly<K>(&self, api: &Api<K>, name: &str)
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => tracing::warn!(name, error = %e, "cleaning up after a restore"),
        }
    }

    /// Waits, at most the start timeout, until `name` is gone from `api`. A deleted object keeps
    /// its name while finalizers hold it (a restore's claim until its pod has gone:
    /// pvc-protection), and the next restore of the same snapshot reuses that name.
    async fn until_gone<K>(&self, api: &Api<K>, name: &str) -> bool
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let deadline = Instant::now() + self.timing.start_timeout;
        loop {
            match api.get_opt(name).await {
                Ok(None) => return true,
                Ok(Some(_)) if Instant::now() < deadline => {}
                Ok(Some(_)) | Err(_) => return false,
            }
            tokio::time::sleep(self.timing.poll).await;
        }
    }

    /// The restore's claim: made, or one a restore before left being deleted waited out first.
    async fn make_restore_claim(
        &self,
        claims: &Api<PersistentVolumeClaim>,
        claim: &PersistentVolumeClaim,
    ) -> Result<(), RepositoryError> {
        let name = claim.metadata.name.clone().unwrap_or_default();
        match claims.create(&self.post_params(), claim).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(e) => return Err(api_error("restored volume")(e)),
        }
        let there = claims
            .get_opt(&name)
            .await
            .map_err(api_error("restored volume"))?;
        // Not being deleted: another restore of this snapshot has it now, and shares it.
        if there.is_none_or(|c| c.metadata.deletion_timestamp.is_none()) {
            return Ok(());
        }
        if !self.until_gone(claims, &name).await {
            return Err(RepositoryError::Locked);
        }
        claims
            .create(&self.post_params(), claim)
            .await
            .map(|_| ())
            .map_err(api_error("restored volume"))
    }
}

#[async_trait::async_trait]
impl WorkspaceSnapshots for KubeRuntime {
    fn words(&self) -> String {
        format!(
            "VolumeSnapshots of each workspace claim (class {})",
            self.config.snapshot_class
        )
    }

    async fn has_workspace(&self, user_name: &str) -> Result<bool, RepositoryError> {
        let plan = self.plan_of(user_name);
        Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), &plan.namespace)
            .get_opt(names::WORKSPACE_PVC)
            .await
            .map(|claim| claim.is_some())
            .map_err(api_error("workspace volume"))
    }

    async fn snapshots(&self, user_name: &str) -> Result<Vec<Snapshot>, RepositoryError> {
        let plan = self.plan_of(user_name);
        Ok(self
            .backups_of(&plan.namespace)
            .await?
            .into_iter()
            .filter(VolumeSnapshot::ready)
            .filter_map(|s| {
                Some(Snapshot {
                    id: s.id()?,
                    time_ms: s.taken_at_ms()?,
                })
            })
            .collect())
    }

    async fn back_up(&self, user_name: &str, at_ms: i64) -> Result<BackedUp, RepositoryError> {
        let plan = self.plan_of(user_name);
        let snapshot = vs::workspace_snapshot(&plan, &self.config.snapshot_class, at_ms);
        let name = vs::snapshot_name(at_ms);
        match self
            .volume_snapshots(&plan.namespace)
            .create(&self.post_params(), &snapshot)
            .await
        {
            // Taken this second already: that one is this backup.
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(e) => return Err(api_error("volume snapshot")(e)),
        }
        let ready = self.snapshot_ready(&plan.namespace, &name).await?;
        let bytes = ready
            .status
            .as_ref()
            .and_then(|s| s.restore_size.as_ref())
            .and_then(|q| super::objects::storage_bytes(&q.0))
            .unwrap_or(0);
        Ok(BackedUp {
            snapshot_id: ready.id().unwrap_or_default(),
            files: 0,
            bytes: u64::try_from(bytes).unwrap_or(u64::MAX),
            bytes_added: 0,
        })
    }

    async fn restore(
        &self,
        user_name: &str,
        snapshot: &Snapshot,
        part: Option<&str>,
    ) -> Result<String, RepositoryError> {
        let plan = self.plan_of(user_name);
        let namespace = plan.namespace.clone();
        let object = self
            .backups_of(&namespace)
            .await?
            .into_iter()
            .find(|s| s.id().as_deref() == Some(snapshot.id.as_str()) && s.ready())
            .ok_or_else(|| RepositoryError::Failed("that snapshot is gone".into()))?;
        let size = object
            .status
            .as_ref()
            .and_then(|s| s.restore_size.as_ref())
            .map(|q| q.0.clone())
            .unwrap_or_else(|| plan.workspace_size());
        let claims = Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), &namespace);
        let claim = vs::restored_claim(
            &plan,
            object.metadata.name.as_deref().unwrap_or_default(),
            &snapshot.id,
            &size,
        );
        let name = vs::restore_name(&snapshot.id);
        self.make_restore_claim(&claims, &claim).await?;
        let folders: Vec<String> = (1..=FOLDER_ATTEMPTS)
            .map(|n| rules::restored_folder(snapshot.time_ms, n))
            .collect();
        let node = self.workspace_node(&namespace).await;
        let pod = vs::restore_pod(&plan, &snapshot.id, part, &folders, node.as_deref());
        let result = self.run_restore_pod(&namespace, &pod).await;
        let pods = self.pods(&namespace);
        self.delete_quietly(&pods, &name).await;
        self.delete_quietly(&claims, &name).await;
        // Gone before the answer, so a restore right after starts clean.
        if !(self.until_gone(&pods, &name).await && self.until_gone(&claims, &name).await) {
            tracing::warn!(%namespace, restore = %name, "a restore's pod or claim is slow to go");
        }
        match result {
            Err(RepositoryError::NotInSnapshot(_)) => Err(RepositoryError::NotInSnapshot(
                part.unwrap_or_default().to_string(),
            )),
            other => other,
        }
    }

    async fn forget(&self, user_name: &str, keep: Retention) -> Result<(), RepositoryError> {
        let plan = self.plan_of(user_name);
        let all: Vec<VolumeSnapshot> = self
            .backups_of(&plan.namespace)
            .await?
            .into_iter()
            .filter(|s| s.taken_at_ms().is_some())
            .collect();
        let times: Vec<i64> = all.iter().filter_map(VolumeSnapshot::taken_at_ms).collect();
        let api = self.volume_snapshots(&plan.namespace);
        for index in rules::forgotten(&times, keep) {
            let name = all[index].metadata.name.clone().unwrap_or_default();
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {
                    tracing::info!(namespace = %plan.namespace, snapshot = %name, "snapshot past the retention deleted")
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => return Err(api_error("volume snapshot")(e)),
            }
        }
        Ok(())
    }
}
