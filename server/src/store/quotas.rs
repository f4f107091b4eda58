//! Each user's quota overrides and what they use of them.

use super::*;
use app::domain::quota::{Overrides, OverridesChange, Usage};

impl Store {
    pub async fn quota_overrides(&self, user_id: &str) -> Result<Overrides> {
        let mut conn = self.pool.acquire().await?;
        overrides_in(&mut conn, user_id).await
    }

    /// Live sessions and GPU memory the user holds now (disk is measured by the runtime).
    pub async fn usage(&self, user_id: &str) -> Result<Usage> {
        let mut conn = self.pool.acquire().await?;
        usage_in(&mut conn, user_id).await
    }

    pub async fn set_quota(
        &self,
        user_id: &str,
        overrides: &Overrides,
        actor_id: Option<&str>,
    ) -> Result<()> {
        let mut w = self.begin_write().await?;
        write_quota(&mut w, user_id, overrides, actor_id).await?;
        w.commit().await?;
        Ok(())
    }

    /// Changes some of a user's overrides, read and written in one transaction (the user's row
    /// locked on PostgreSQL), so that two changes of different limits at once both hold.
    /// Returns the overrides now.
    pub async fn change_quota(
        &self,
        user_id: &str,
        change: &OverridesChange,
        actor_id: Option<&str>,
    ) -> Result<Overrides> {
        let mut w = self.begin_write().await?;
        self.lock_user(&mut w, user_id).await?;
        let overrides = change.applied_to(overrides_in(&mut w.tx, user_id).await?);
        write_quota(&mut w, user_id, &overrides, actor_id).await?;
        w.commit().await?;
        Ok(overrides)
    }

    // ---- the reaper's lease ----
}

/// Writes a user's overrides, audited.
async fn write_quota(
    w: &mut WriteTx,
    user_id: &str,
    overrides: &Overrides,
    actor_id: Option<&str>,
) -> Result<()> {
    let now = w.now;
    sqlx::query(
        "INSERT INTO user_quotas (user_id, max_sessions, max_gpu_mib, max_minutes, max_disk_mib, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (user_id) DO UPDATE SET max_sessions = excluded.max_sessions, max_gpu_mib = excluded.max_gpu_mib,
         max_minutes = excluded.max_minutes, max_disk_mib = excluded.max_disk_mib, updated_at = excluded.updated_at",
    )
    .bind(user_id)
    .bind(overrides.max_sessions.map(i64::from))
    .bind(overrides.max_gpu_mib.map(|v| v as i64))
    .bind(overrides.max_minutes.map(i64::from))
    .bind(overrides.max_disk_mib.map(|v| v as i64))
    .bind(now)
    .execute(&mut *w.tx)
    .await?;
    insert_audit(
        w,
        actor_id,
        "quota.set",
        &format!("user:{user_id}"),
        &overrides.describe(),
        now,
    )
    .await?;
    Ok(())
}

pub(super) async fn overrides_in(
    conn: &mut sqlx::AnyConnection,
    user_id: &str,
) -> Result<Overrides> {
    let row = sqlx::query(
        "SELECT max_sessions, max_gpu_mib, max_minutes, max_disk_mib FROM user_quotas WHERE user_id = $1",
    )
    .bind(user_id)
    .fetch_optional(&mut *conn)
    .await?;
    row.as_ref().map_or(Ok(Overrides::default()), overrides_of)
}

/// A row's `max_sessions`, `max_gpu_mib`, `max_minutes` and `max_disk_mib`; NULL keeps the default.
pub(super) fn overrides_of(row: &AnyRow) -> Result<Overrides> {
    let get = |key: &str| row.try_get::<Option<i64>, _>(key);
    Ok(Overrides {
        max_sessions: get("max_sessions")?.map(|v| v as u32),
        max_gpu_mib: get("max_gpu_mib")?.map(|v| v as u64),
        max_minutes: get("max_minutes")?.map(|v| v as u32),
        max_disk_mib: get("max_disk_mib")?.map(|v| v as u64),
    })
}
