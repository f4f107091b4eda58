//! Workspaces a runtime backs up itself, where the server cannot read them as files: on a
//! cluster, VolumeSnapshots of each user's workspace claim ([`super::kube::backups`]). The
//! service runs the same operations on it as on restic (list, back up now, restore into
//! `restored-<date>/`, retention), with restic's types and errors, so a user and an admin see
//! one thing whichever runtime holds the workspace.

use super::restic::{BackedUp, RepositoryError, Snapshot};
use app::domain::backups::Retention;

#[async_trait::async_trait]
pub trait WorkspaceSnapshots: Send + Sync {
    /// How the workspaces are backed up, for the Settings page ("VolumeSnapshots of class …").
    fn words(&self) -> String;
    /// Whether `user_name` has a workspace to back up (one made at a first launch).
    async fn has_workspace(&self, user_name: &str) -> Result<bool, RepositoryError>;
    /// `user_name`'s snapshots, in any order; ids are hex digits (`is_snapshot_id`).
    async fn snapshots(&self, user_name: &str) -> Result<Vec<Snapshot>, RepositoryError>;
    /// Takes a snapshot of the workspace as it is at `at_ms` (the service's clock) and waits
    /// until it can be restored from; a failure says why in words.
    async fn back_up(&self, user_name: &str, at_ms: i64) -> Result<BackedUp, RepositoryError>;
    /// Restores `part` (None: everything) of `snapshot` into a new folder
    /// `restored-<date>` of the workspace, never over a file there; the folder's name.
    async fn restore(
        &self,
        user_name: &str,
        snapshot: &Snapshot,
        part: Option<&str>,
    ) -> Result<String, RepositoryError>;
    /// Deletes `user_name`'s snapshots beyond the policy (`app::domain::backups::forgotten`).
    async fn forget(&self, user_name: &str, keep: Retention) -> Result<(), RepositoryError>;
}
