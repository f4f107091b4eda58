//! The backups area where the runtime backs workspaces up itself (a cluster's VolumeSnapshots,
//! `runtime::kube::backups`): the same operations, checks, records and audit lines as with
//! restic, the snapshots asked of the runtime by user name instead of a repository.

use super::{Owner, status_of};
use crate::runtime::restic::RepositoryError;
use crate::runtime::snapshots::WorkspaceSnapshots;
use crate::service::Backups;
use crate::store::BackupOutcome;
use app::domain::backups as rules;
use app::error::AppError;
use app::model::{BackupStatus, BackupsView, RestoreDone, SnapshotView, Viewer};

impl Backups {
    pub(super) async fn cluster_view(
        &self,
        snapshots: &dyn WorkspaceSnapshots,
        owner: &Owner,
    ) -> Result<BackupsView, AppError> {
        let config = &self.config.backups;
        let last = self
            .store
            .backup_record(&owner.id)
            .await?
            .filter(|r| r.attempted_at.is_some())
            .map(status_of);
        let snapshots = if config.enabled {
            let mut list = snapshots
                .snapshots(&owner.name)
                .await
                .map_err(|e| self.shown(e, owner, "listing snapshots"))?;
            rules::newest_first(&mut list, |s| (s.time_ms, s.id.as_str()));
            list.into_iter()
                .map(|s| SnapshotView {
                    short_id: s.id.chars().take(8).collect(),
                    id: s.id,
                    taken_at_ms: s.time_ms,
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(BackupsView {
            enabled: config.enabled,
            schedule: config.schedule().words(),
            kept: config.retention().words(),
            last,
            snapshots,
        })
    }

    fn cluster_enabled(&self) -> Result<(), AppError> {
        if self.config.backups.enabled {
            Ok(())
        } else {
            Err(AppError::Unavailable(
                "backups are off on this server (an admin turns them on with [backups] enabled = true)"
                    .into(),
            ))
        }
    }

    pub(super) async fn cluster_back_up_for(
        &self,
        snapshots: &dyn WorkspaceSnapshots,
        viewer: &Viewer,
        owner: &Owner,
    ) -> Result<BackupStatus, AppError> {
        self.cluster_enabled()?;
        let has = snapshots
            .has_workspace(&owner.name)
            .await
            .map_err(|e| self.shown(e, owner, "backing up"))?;
        if !has {
            return Err(AppError::Invalid(
                "there is nothing to back up yet: the workspace is made at the first launch".into(),
            ));
        }
        let slot = self.take_run_slot(owner)?;
        let result = self.cluster_back_up(snapshots, owner).await;
        drop(slot);
        let _ = self
            .store
            .audit(
                Some(&viewer.id),
                "backup.run",
                &format!("user:{}", owner.name),
                match &result {
                    Ok(_) => "ok".into(),
                    Err(e) => format!("failed: {e}"),
                }
                .as_str(),
            )
            .await;
        match result {
            Ok(()) => Ok(self
                .store
                .backup_record(&owner.id)
                .await?
                .map(status_of)
                .ok_or(AppError::NotFound)?),
            Err(e) => Err(self.shown(e, owner, "backing up")),
        }
    }

    /// One snapshot of `owner`'s workspace, recorded, then the retention applied.
    pub(super) async fn cluster_back_up(
        &self,
        snapshots: &dyn WorkspaceSnapshots,
        owner: &Owner,
    ) -> Result<(), RepositoryError> {
        let at = self.store.now();
        let ran = snapshots.back_up(&owner.name, at).await;
        let failure = ran.as_ref().err().map(ToString::to_string);
        let recorded = match (&ran, failure.as_deref()) {
            (Ok(done), _) => BackupOutcome::Ok {
                snapshot_id: &done.snapshot_id,
                files: done.files,
                bytes: done.bytes,
            },
            (Err(_), why) => BackupOutcome::Failed(why.unwrap_or_default()),
        };
        if let Err(e) = self.store.record_backup(&owner.id, at, recorded).await {
            tracing::error!(error = %e, user = %owner.name, "recording a backup");
        }
        if let Ok(Some(record)) = self.store.backup_record(&owner.id).await {
            self.remember(status_of(record));
        }
        let done = ran?;
        tracing::info!(user = %owner.name, snapshot = %done.snapshot_id, "workspace snapshot taken");
        if let Err(e) = snapshots
            .forget(&owner.name, self.config.backups.retention())
            .await
        {
            // The snapshot is taken; the retention is applied again after the next one.
            tracing::warn!(error = %e, user = %owner.name, "applying the backup retention");
        }
        Ok(())
    }

    pub(super) async fn cluster_restore_for(
        &self,
        snapshots: &dyn WorkspaceSnapshots,
        viewer: &Viewer,
        owner: &Owner,
        id: &str,
        path: Option<&str>,
    ) -> Result<RestoreDone, AppError> {
        if !rules::is_snapshot_id(id) {
            return Err(AppError::Invalid(
                "a snapshot id is 8 to 64 hexadecimal digits, as the list of snapshots shows it"
                    .into(),
            ));
        }
        let part = rules::workspace_part(path).map_err(AppError::Invalid)?;
        self.cluster_enabled()?;
        let slot = self.take_run_slot(owner)?;
        let result = async {
            // Only the owner's own snapshots: another's id answers like a missing one.
            let Some(snapshot) = snapshots
                .snapshots(&owner.name)
                .await?
                .into_iter()
                .find(|s| rules::names_snapshot(id, &s.id))
            else {
                return Ok(None);
            };
            let folder = snapshots
                .restore(&owner.name, &snapshot, part.as_deref())
                .await?;
            Ok(Some((snapshot.id, folder)))
        }
        .await;
        drop(slot);
        self.restored(viewer, owner, part, result).await
    }

    /// The schedule's pass: every workspace there is, one after another.
    pub(super) async fn cluster_back_up_everyone(&self, snapshots: &dyn WorkspaceSnapshots) {
        let records = match self.store.backup_records().await {
            Ok(records) => records,
            Err(e) => {
                tracing::warn!(error = %e, "listing the workspaces to back up");
                return;
            }
        };
        for record in records {
            let owner = Owner {
                id: record.user_id,
                name: record.user_name,
            };
            if !matches!(snapshots.has_workspace(&owner.name).await, Ok(true)) {
                continue;
            }
            let Ok(_slot) = self.take_run_slot(&owner) else {
                continue;
            };
            if let Err(e) = self.cluster_back_up(snapshots, &owner).await {
                tracing::warn!(error = %e, user = %owner.name, "a scheduled backup failed");
            }
        }
    }

    /// A departed user's last snapshot before their namespace goes; none where they have no
    /// workspace.
    pub(super) async fn cluster_last_backup(
        &self,
        snapshots: &dyn WorkspaceSnapshots,
        owner: &Owner,
    ) -> Result<(), String> {
        if !snapshots
            .has_workspace(&owner.name)
            .await
            .map_err(|e| e.to_string())?
        {
            return Ok(());
        }
        let _slot = self.take_run_slot(owner).map_err(|e| e.to_string())?;
        self.cluster_back_up(snapshots, owner)
            .await
            .map_err(|e| e.to_string())
    }
}
