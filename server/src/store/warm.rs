//! Editors pre-started for one user (a cluster's pods, in the user's own namespace): who is about
//! to launch (their dashboard asks for its data), what they launched last, and which such editors
//! are no longer wanted. Its rows are made and read below; the claim is `launch.rs`'s.

use super::records::WARM_COLUMNS;
use super::*;

/// A user to pre-start an editor for, with what they launched last.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WarmCandidate {
    pub user_id: String,
    pub user_name: String,
    pub editor: EditorKind,
    pub slice_mib: u64,
}

/// How often a user's dashboard visits are written: one row update a minute at most.
const SEEN_EVERY_MS: i64 = 60_000;

impl Store {
    /// The user's dashboard asked for its data.
    pub async fn saw_dashboard(&self, user_id: &str) -> Result<()> {
        let now = self.now();
        sqlx::query(
            "UPDATE users SET dashboard_seen_at = $1
             WHERE id = $2 AND (dashboard_seen_at IS NULL OR dashboard_seen_at < $3)",
        )
        .bind(now)
        .bind(user_id)
        .bind(now - SEEN_EVERY_MS)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Up to `limit` users to pre-start an editor for, the most recently seen first: their
    /// dashboard was open since `seen_since`, they are not locked, have nothing live and no
    /// pre-started editor yet, and launched the default image since `launched_since` (that
    /// launch's editor and size are what they get).
    pub async fn warm_candidates(
        &self,
        seen_since: i64,
        launched_since: i64,
        limit: usize,
    ) -> Result<Vec<WarmCandidate>> {
        let rows = sqlx::query(
            "SELECT u.id, u.name, s.editor, s.slice_mib FROM users u
             JOIN sessions s ON s.id = (SELECT l.id FROM sessions l WHERE l.user_id = u.id
                 ORDER BY l.created_at DESC, l.id DESC LIMIT 1)
             WHERE u.dashboard_seen_at >= $1 AND u.locked = 0
               AND s.image IS NULL AND s.burst = 0 AND s.created_at >= $2
               AND NOT EXISTS (SELECT 1 FROM sessions o WHERE o.user_id = u.id AND o.state <> 'ended')
               AND NOT EXISTS (SELECT 1 FROM warm_editors w WHERE w.user_id = u.id)
             ORDER BY u.dashboard_seen_at DESC, u.id LIMIT $3",
        )
        .bind(seen_since)
        .bind(launched_since)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let editor: String = row.try_get("editor")?;
                Ok(WarmCandidate {
                    user_id: row.try_get("id")?,
                    user_name: row.try_get("name")?,
                    editor: EditorKind::parse(&editor).ok_or(bad("editor"))?,
                    slice_mib: row.try_get::<i64, _>("slice_mib")? as u64,
                })
            })
            .collect()
    }

    /// Forgets the pre-started editors of users who no longer want one (dashboard closed since
    /// `seen_since`, locked, or with a session of their own now) and returns them, to be stopped.
    pub async fn retire_user_warm(&self, seen_since: i64) -> Result<Vec<WarmRecord>> {
        let mut w = self.begin_write().await?;
        let rows = sqlx::query(&format!(
            "SELECT {WARM_COLUMNS} FROM warm_editors w JOIN slots sl ON sl.id = w.slot_id
             JOIN users u ON u.id = w.user_id
             WHERE u.locked <> 0 OR u.dashboard_seen_at IS NULL OR u.dashboard_seen_at < $1
                OR EXISTS (SELECT 1 FROM sessions s WHERE s.user_id = u.id AND s.state <> 'ended')"
        ))
        .bind(seen_since)
        .fetch_all(&mut *w.tx)
        .await?;
        let retired: Vec<WarmRecord> = rows
            .iter()
            .map(WarmRecord::from_row)
            .collect::<Result<_>>()?;
        for warm in &retired {
            sqlx::query("DELETE FROM warm_editors WHERE id = $1")
                .bind(&warm.id)
                .execute(&mut *w.tx)
                .await?;
        }
        w.commit().await?;
        Ok(retired)
    }
}

impl Store {
    /// Reserves a free slot (one no session holds and no editor warms) for a new pre-started
    /// editor: anyone's, or `for_user`'s only.
    ///
    /// It looks first, with a read: a launch that takes a pre-started editor wakes the keeper,
    /// which then finds no free slot (the launch holds it), and in a burst of launches a write
    /// transaction begun only to find that queued each launch's write behind it. The write
    /// looks again, since a launch may take the slot in between.
    pub async fn add_warm(
        &self,
        editor: EditorKind,
        slice_mib: u64,
        for_user: Option<&str>,
    ) -> Result<Option<WarmRecord>> {
        if !self.free_slot(Some(slice_mib)).await? {
            return Ok(None);
        }
        let mut w = self.begin_write().await?;
        let sql = format!(
            "SELECT sl.id FROM slots sl WHERE sl.session_id IS NULL AND sl.active = 1 AND sl.slice_mib = $1
             AND NOT EXISTS (SELECT 1 FROM warm_editors w WHERE w.slot_id = sl.id) ORDER BY sl.id LIMIT 1{}",
            skip_locked(w.kind, "sl")
        );
        let Some(row) = sqlx::query(&sql)
            .bind(slice_mib as i64)
            .fetch_optional(&mut *w.tx)
            .await?
        else {
            return Ok(None);
        };
        let slot_id: String = row.try_get("id")?;
        let id = new_id();
        sqlx::query(
            "INSERT INTO warm_editors (id, slot_id, editor, state, created_at, user_id) VALUES ($1, $2, $3, 'starting', $4, $5)",
        )
        .bind(&id)
        .bind(&slot_id)
        .bind(editor.as_str())
        .bind(self.now())
        .bind(for_user)
        .execute(&mut *w.tx)
        .await
        .map_err(|e| on_unique(e, "warm_editors_slot_key", "warm editor"))?;
        w.commit().await?;
        Ok(Some(WarmRecord {
            id,
            slot_id,
            editor,
            slice_mib,
            ready: false,
            upstream: None,
            editor_token: None,
            runtime_handle: None,
            user_id: for_user.map(str::to_string),
        }))
    }

    /// Whether a slot is free for a pre-started editor (no session holds it, no editor warms
    /// it), of `slice_mib` or of any size: a read, without the writer lock.
    pub async fn free_slot(&self, slice_mib: Option<u64>) -> Result<bool> {
        const FREE: &str =
            "SELECT 1 AS one FROM slots sl WHERE sl.session_id IS NULL AND sl.active = 1
             AND NOT EXISTS (SELECT 1 FROM warm_editors w WHERE w.slot_id = sl.id)";
        let found = match slice_mib {
            Some(mib) => {
                sqlx::query(&format!("{FREE} AND sl.slice_mib = $1 LIMIT 1"))
                    .bind(mib as i64)
                    .fetch_optional(&self.pool)
                    .await?
            }
            None => {
                sqlx::query(&format!("{FREE} LIMIT 1"))
                    .fetch_optional(&self.pool)
                    .await?
            }
        };
        Ok(found.is_some())
    }

    /// The editor's process exists: its handle is kept at once, so a shutdown in the middle of
    /// its start still stops it. False when the record is gone or ready already.
    pub async fn warm_started(&self, id: &str, handle: &str) -> Result<bool> {
        let mut w = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE warm_editors SET runtime_handle = $1 WHERE id = $2 AND state = 'starting'",
        )
        .bind(handle)
        .bind(id)
        .execute(&mut *w.tx)
        .await?;
        w.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    /// The editor answers: it may be handed out. False when a launch pushed it off its slot meanwhile.
    pub async fn warm_ready(
        &self,
        id: &str,
        upstream: &str,
        token: &str,
        handle: &str,
    ) -> Result<bool> {
        let mut w = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE warm_editors SET state = 'ready', upstream = $1, editor_token = $2, runtime_handle = $3
             WHERE id = $4 AND state = 'starting'",
        )
        .bind(upstream)
        .bind(token)
        .bind(handle)
        .bind(id)
        .execute(&mut *w.tx)
        .await?;
        w.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    /// Forgets a pre-started editor (its start failed, or it died); true when it was still there.
    pub async fn remove_warm(&self, id: &str) -> Result<bool> {
        let mut w = self.begin_write().await?;
        let done = sqlx::query("DELETE FROM warm_editors WHERE id = $1")
            .bind(id)
            .execute(&mut *w.tx)
            .await?;
        w.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn warm_editors(&self) -> Result<Vec<WarmRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {WARM_COLUMNS} FROM warm_editors w JOIN slots sl ON sl.id = w.slot_id ORDER BY w.created_at"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(WarmRecord::from_row).collect()
    }

    // ---- activity ----
}
