//! An admin's way into a user's editor: the time-boxed grant, and the one-time tickets the
//! entry origin redeems.

use super::*;

impl Store {
    /// Lets `admin_id` into the session's editor until `expires_at`, audited against the
    /// session's owner so that it shows beside their name.
    pub async fn grant_editor_access(
        &self,
        session_id: &str,
        admin_id: &str,
        owner_id: &str,
        expires_at: i64,
    ) -> Result<()> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        sqlx::query("DELETE FROM editor_grants WHERE session_id = $1 AND admin_id = $2")
            .bind(session_id)
            .bind(admin_id)
            .execute(&mut *w.tx)
            .await?;
        sqlx::query(
            "INSERT INTO editor_grants (session_id, admin_id, granted_at, expires_at)
             VALUES ($1, $2, $3, $4)",
        )
        .bind(session_id)
        .bind(admin_id)
        .bind(now)
        .bind(expires_at)
        .execute(&mut *w.tx)
        .await?;
        insert_audit(
            &mut w,
            Some(admin_id),
            "session.access",
            &format!("user:{owner_id}"),
            &format!("entered the editor of session {session_id}"),
            now,
        )
        .await?;
        w.commit().await?;
        Ok(())
    }

    /// Until when `admin_id` may enter the session's editor, if a grant is still running.
    pub async fn editor_access_until(
        &self,
        session_id: &str,
        admin_id: &str,
    ) -> Result<Option<i64>> {
        let row = sqlx::query(
            "SELECT expires_at FROM editor_grants
             WHERE session_id = $1 AND admin_id = $2 AND expires_at > $3",
        )
        .bind(session_id)
        .bind(admin_id)
        .bind(self.now())
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| r.try_get("expires_at")).transpose()?)
    }

    /// Keeps a one-time entry ticket (its hash) for `admin_id` into the session's editor, and
    /// forgets the expired ones.
    pub async fn add_entry_ticket(
        &self,
        ticket_hash: &str,
        admin_id: &str,
        session_id: &str,
        expires_at: i64,
    ) -> Result<()> {
        let mut w = self.begin_write().await?;
        sqlx::query("DELETE FROM entry_tickets WHERE expires_at <= $1")
            .bind(self.now())
            .execute(&mut *w.tx)
            .await?;
        sqlx::query(
            "INSERT INTO entry_tickets (ticket_hash, admin_id, session_id, expires_at)
             VALUES ($1, $2, $3, $4)",
        )
        .bind(ticket_hash)
        .bind(admin_id)
        .bind(session_id)
        .bind(expires_at)
        .execute(&mut *w.tx)
        .await?;
        w.commit().await?;
        Ok(())
    }

    /// Takes an entry ticket: `(admin_id, session_id)` once, while it runs; nothing after.
    pub async fn take_entry_ticket(&self, ticket_hash: &str) -> Result<Option<(String, String)>> {
        let mut w = self.begin_write().await?;
        let row = sqlx::query(
            "DELETE FROM entry_tickets WHERE ticket_hash = $1 RETURNING admin_id, session_id, expires_at",
        )
        .bind(ticket_hash)
        .fetch_optional(&mut *w.tx)
        .await?;
        w.commit().await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let expires_at: i64 = row.try_get("expires_at")?;
        if expires_at <= self.now() {
            return Ok(None);
        }
        Ok(Some((row.try_get("admin_id")?, row.try_get("session_id")?)))
    }

    /// The admin let into the session's editor now, if one is (the grant that lasts longest).
    pub async fn editor_access_now(&self, session_id: &str) -> Result<Option<(String, i64)>> {
        let row = sqlx::query(
            "SELECT u.name, g.expires_at FROM editor_grants g JOIN users u ON u.id = g.admin_id
             WHERE g.session_id = $1 AND g.expires_at > $2
             ORDER BY g.expires_at DESC LIMIT 1",
        )
        .bind(session_id)
        .bind(self.now())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| Ok((r.try_get("name")?, r.try_get("expires_at")?)))
            .transpose()
    }
}
