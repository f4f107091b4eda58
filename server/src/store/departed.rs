//! Accounts an admin deleted: kept with their storage for a grace period, during which the
//! deletion may be undone, then marked removed once their storage is gone.

use super::{Result, Store, StoreError, insert_audit};
use sqlx::Row;

/// A deleted account whose storage is due to go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Departed {
    pub id: String,
    pub name: String,
    pub deleted_at: i64,
}

impl Store {
    /// Deleted accounts, deleted at or before `deleted_before`, whose storage is still there.
    pub async fn departed_users(&self, deleted_before: i64) -> Result<Vec<Departed>> {
        let rows = sqlx::query(
            "SELECT id, name, deleted_at FROM users
             WHERE deleted_at IS NOT NULL AND deleted_at <= $1 AND purged_at IS NULL
             ORDER BY deleted_at",
        )
        .bind(deleted_before)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(Departed {
                    id: r.try_get("id")?,
                    name: r.try_get("name")?,
                    deleted_at: r.try_get("deleted_at")?,
                })
            })
            .collect()
    }

    /// Records that a deleted account's storage was removed (`detail` says what went); from
    /// then on its deletion cannot be undone. Audited as `user.purge`, by no one.
    pub async fn mark_purged(&self, user_id: &str, detail: &str) -> Result<()> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE users SET purged_at = $1 WHERE id = $2 AND deleted_at IS NOT NULL AND purged_at IS NULL",
        )
        .bind(now)
        .bind(user_id)
        .execute(&mut *w.tx)
        .await?;
        if done.rows_affected() == 1 {
            insert_audit(
                &mut w,
                None,
                "user.purge",
                &format!("user:{user_id}"),
                detail,
                now,
            )
            .await?;
        }
        w.commit().await?;
        Ok(())
    }

    /// Brings a deleted account back, unlocked, while its storage is still there (its tokens
    /// went with the deletion). Audited as `user.undelete`. `Conflict` once the storage is
    /// gone; `NotFound` for an account that is not deleted.
    pub async fn undelete_user(&self, user_id: &str, actor_id: &str) -> Result<()> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        let row = sqlx::query("SELECT deleted_at, purged_at FROM users WHERE id = $1")
            .bind(user_id)
            .fetch_optional(&mut *w.tx)
            .await?
            .ok_or(StoreError::NotFound("deleted user"))?;
        let deleted_at: Option<i64> = row.try_get("deleted_at")?;
        let purged_at: Option<i64> = row.try_get("purged_at")?;
        match (deleted_at, purged_at) {
            (None, _) => return Err(StoreError::NotFound("deleted user")),
            (Some(_), Some(_)) => return Err(StoreError::Conflict),
            (Some(_), None) => {}
        }
        sqlx::query(
            "UPDATE users SET deleted_at = NULL, locked = 0 WHERE id = $1 AND purged_at IS NULL",
        )
        .bind(user_id)
        .execute(&mut *w.tx)
        .await?;
        insert_audit(
            &mut w,
            Some(actor_id),
            "user.undelete",
            &format!("user:{user_id}"),
            "",
            now,
        )
        .await?;
        w.commit().await?;
        Ok(())
    }
}
