//! A workspace follows its user: a launch on a server that has no workspace for its user, where
//! the shared backup repository holds one, restores the newest snapshot as the workspace before
//! the editor starts, and says so in the launch's steps. Restored into a folder beside the
//! workspaces and renamed into place, so a failed restore leaves no half workspace; the launch
//! then makes the folder its user's (the editor account takes the tree).

use super::launch::Launcher;
use crate::runtime::restic::{Repository, Restic};

impl Launcher {
    /// Before a launch: the user's workspace from the repository, where this server has none.
    pub(in crate::service) async fn bring_workspace_back(
        &self,
        session_id: &str,
        user_id: &str,
        user_name: &str,
    ) {
        let backups = &self.config.backups;
        let Some(workspace) = self.runtime.workspace_dir(user_name) else {
            return;
        };
        if !backups.enabled || workspace.exists() || !Restic::installed() {
            return;
        }
        let data_dir = &self.config.data_dir;
        let repo = Restic::new(
            &backups.repository_in(data_dir),
            &backups.password_file_in(data_dir),
            &data_dir.join("cache").join("restic"),
        );
        let newest = async {
            repo.open(false).await?;
            let _shared = self.backup.repository.read().await;
            let snapshots = repo.snapshots(user_id).await?;
            Ok::<_, crate::runtime::restic::RepositoryError>(
                snapshots.into_iter().max_by_key(|s| s.time_ms),
            )
        }
        .await;
        let snapshot = match newest {
            Ok(Some(snapshot)) => snapshot,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(session = session_id, error = %e, "looking for a workspace to restore");
                return;
            }
        };
        let taken = app::domain::dates::minute(snapshot.time_ms);
        self.lifecycle
            .step(
                session_id,
                &format!(
                    "Your workspace is not on this server: restoring its backup of {taken} UTC"
                ),
                40,
            )
            .await;
        let staging = workspace.with_file_name(format!(
            ".restoring-{}",
            workspace.file_name().unwrap_or_default().to_string_lossy()
        ));
        let _ = std::fs::remove_dir_all(&staging);
        let restored = async {
            std::fs::create_dir_all(&staging)?;
            let _shared = self.backup.repository.read().await;
            repo.restore(&snapshot.id, None, &staging)
                .await
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            std::fs::rename(&staging, &workspace)
        }
        .await;
        let said = match restored {
            Ok(()) => format!("Restored your workspace from its backup of {taken} UTC"),
            Err(e) => {
                tracing::warn!(session = session_id, error = %e, "restoring a workspace");
                let _ = std::fs::remove_dir_all(&staging);
                "Your workspace could not be restored from its backup; starting with an empty one (the backup is untouched)".into()
            }
        };
        self.lifecycle.step(session_id, &said, 42).await;
    }
}
