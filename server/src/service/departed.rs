//! Departed users: an account an admin deleted keeps its storage for
//! `accounts.purge_deleted_after_days` (30 by default), while [`Admin::admin_undelete_user`]
//! may bring it back; then the reaper's pass ([`Guard::purge_departed`]) backs its workspace up
//! a last time where backups are on, and removes its storage
//! through the runtime (the workspace folder and its file system, which frees its editor
//! account; on a cluster the user's namespace with its volume claim) and marks it removed, after
//! which it cannot come back. Audited as `user.undelete` and `user.purge`.

use super::admin::require_admin;
use super::{Admin, Guard};
use crate::store::StoreError;
use app::error::AppError;
use app::model::Viewer;

impl Admin {
    /// Undoes a deletion while the account's storage is still there: unlocked, its workspace
    /// as it was; its tokens (revoked at the deletion) do not come back.
    pub async fn admin_undelete_user(
        &self,
        viewer: &Viewer,
        user_id: &str,
    ) -> Result<(), AppError> {
        require_admin(viewer)?;
        match self.store.undelete_user(user_id, &viewer.id).await {
            Ok(()) => {
                self.auth.forget_user(user_id);
                Ok(())
            }
            Err(StoreError::Conflict) => Err(AppError::Conflict(
                "this account's storage was removed when its grace period ended; it cannot come back"
                    .into(),
            )),
            Err(StoreError::NotFound(_)) => Err(AppError::NotFound),
            Err(e) => Err(e.into()),
        }
    }
}

impl Guard {
    /// Removes the storage of accounts deleted longer ago than the grace period (the reaper's
    /// holder only, from its pass). One that fails is tried again at the next pass.
    pub async fn purge_departed(&self) {
        let grace = self.config.accounts.grace_ms();
        let departed = match self.store.departed_users(self.store.now() - grace).await {
            Ok(departed) => departed,
            Err(e) => {
                tracing::warn!(error = %e, "listing deleted accounts");
                return;
            }
        };
        let backups = &self.backups;
        for user in departed {
            if let Err(why) = backups.last_backup(&user.id, &user.name).await {
                tracing::warn!(user = %user.id, error = %why, "the last backup of a deleted account failed; its storage stays");
                continue;
            }
            if let Err(e) = self.runtime.remove_workspace(&user.name).await {
                tracing::warn!(user = %user.id, error = %e, "removing a deleted account's storage");
                continue;
            }
            let days = self.config.accounts.purge_deleted_after_days;
            let detail = format!("storage removed {days} days after the deletion");
            match self.store.mark_purged(&user.id, &detail).await {
                Ok(()) => {
                    tracing::info!(user = %user.id, "a deleted account's storage was removed")
                }
                Err(e) => tracing::warn!(user = %user.id, error = %e, "marking an account removed"),
            }
        }
    }
}
