//! Leases (the reaper's, each server's `instance:<id>`) are rows in `leases`, taken with one
//! `INSERT … ON CONFLICT DO UPDATE … WHERE` the lease expired or is the holder's own, the same on
//! SQLite and PostgreSQL.

use super::*;

impl Store {
    /// Takes or renews the lease `name` for `holder` until `ttl_ms` from now; false while
    /// another holder's lease runs. Works the same on SQLite and PostgreSQL.
    pub async fn try_lease(&self, name: &str, holder: &str, ttl_ms: i64) -> Result<bool> {
        let now = self.now();
        let done = sqlx::query(
            "INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, $3)
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
             WHERE leases.holder = excluded.holder OR leases.expires_at < $4",
        )
        .bind(name)
        .bind(holder)
        .bind(now + ttl_ms)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// When the lease `name` runs out, or ran out; None if nobody ever took it.
    pub async fn lease_expires_at(&self, name: &str) -> Result<Option<i64>> {
        let row = sqlx::query("SELECT expires_at FROM leases WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|row| Ok(row.try_get::<i64, _>("expires_at")?))
            .transpose()
    }

    /// Who took the lease `name` last (its lease held or run out); None if nobody ever did.
    pub async fn lease_holder(&self, name: &str) -> Result<Option<String>> {
        let row = sqlx::query("SELECT holder FROM leases WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|row| Ok(row.try_get::<String, _>("holder")?))
            .transpose()
    }

    /// Takes the lease `name` over from `from`, a holder known to be dead, before it runs out;
    /// false when someone else took it meanwhile.
    pub async fn take_lease_from(
        &self,
        name: &str,
        from: &str,
        holder: &str,
        ttl_ms: i64,
    ) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE leases SET holder = $1, expires_at = $2 WHERE name = $3 AND holder = $4",
        )
        .bind(holder)
        .bind(self.now() + ttl_ms)
        .bind(name)
        .bind(from)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Whether someone holds the lease `name` now.
    pub async fn lease_held(&self, name: &str) -> Result<bool> {
        Ok(self
            .lease_expires_at(name)
            .await?
            .is_some_and(|expires| expires >= self.now()))
    }

    /// Gives the lease `name` up, if `holder` has it.
    pub async fn release_lease(&self, name: &str, holder: &str) -> Result<()> {
        sqlx::query("DELETE FROM leases WHERE name = $1 AND holder = $2")
            .bind(name)
            .bind(holder)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Records which server drives a starting session's launch.
    pub async fn set_driver(&self, session_id: &str, instance: &str) -> Result<()> {
        sqlx::query("UPDATE sessions SET driver = $1 WHERE id = $2")
            .bind(instance)
            .bind(session_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
