//! A session's record from its launch to its end: the editor's address, steps, readiness,
//! stopping and settling, and the lists the pages read.

use super::*;
use app::domain::credits;
use app::domain::quota::{self};

impl Store {
    /// Records where the editor runs, so the proxy can reach it and a restart can find it.
    pub async fn set_runtime(
        &self,
        session_id: &str,
        upstream: &str,
        token: &str,
        handle: &str,
    ) -> Result<()> {
        let mut w = self.begin_write().await?;
        // Only while starting: a session stopped meanwhile must not be handed an editor.
        let done = sqlx::query(
            "UPDATE sessions SET upstream = $1, editor_token = $2, runtime_handle = $3 WHERE id = $4 AND state = 'starting'",
        )
        .bind(upstream)
        .bind(token)
        .bind(handle)
        .bind(session_id)
        .execute(&mut *w.tx)
        .await?;
        if done.rows_affected() != 1 {
            return Err(StoreError::Conflict);
        }
        w.commit().await?;
        Ok(())
    }

    /// A progress step that does not change the state.
    pub async fn add_step(&self, session_id: &str, message: &str, progress: u8) -> Result<Step> {
        let mut w = self.begin_write().await?;
        let state = state_in(&mut w, session_id).await?;
        let step = insert_event(
            &mut w,
            session_id,
            state,
            message,
            progress,
            false,
            self.now(),
        )
        .await?;
        w.commit().await?;
        Ok(step)
    }

    /// starting → ready; the session's clock starts now.
    pub async fn mark_ready(&self, session_id: &str, message: &str) -> Result<Step> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        let state = state_in(&mut w, session_id).await?;
        let next = transition(state, Event::EditorReady)?;
        set_state(&mut w, session_id, next).await?;
        sqlx::query(
            "UPDATE sessions SET ready_at = $1, ends_at = $1 + duration_minutes * 60000, last_activity_at = $1 WHERE id = $2",
        )
        .bind(now)
        .bind(session_id)
        .execute(&mut *w.tx)
        .await?;
        let step = insert_event(&mut w, session_id, next.to, message, 100, false, now).await?;
        w.commit().await?;
        Ok(step)
    }

    /// Moves a live session towards its end: to stopping (an editor runs) or straight to ended.
    /// Returns None when it was already stopping or ended (stopping twice is harmless).
    pub async fn begin_stop(
        &self,
        session_id: &str,
        reason: EndReason,
        detail: Option<&str>,
    ) -> Result<Option<(SessionState, Step)>> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        let state = state_in(&mut w, session_id).await?;
        if matches!(state, SessionState::Stopping | SessionState::Ended) {
            return Ok(None);
        }
        let next = transition(state, Event::Stop(reason))?;
        set_state(&mut w, session_id, next).await?;
        sqlx::query("UPDATE sessions SET end_reason = $1, detail = $2 WHERE id = $3")
            .bind(reason.as_str())
            .bind(detail)
            .bind(session_id)
            .execute(&mut *w.tx)
            .await?;
        let message = match next.to {
            SessionState::Stopping => format!("Stopping: {}", reason.describe()),
            _ => format!("Ended: {}", reason.describe()),
        };
        let failed = reason.is_failure();
        let step = insert_event(
            &mut w,
            session_id,
            next.to,
            detail.unwrap_or(&message),
            100,
            failed,
            now,
        )
        .await?;
        if next.to == SessionState::Ended {
            settle_in(&mut w, session_id, now).await?;
        }
        w.commit().await?;
        Ok(Some((next.to, step)))
    }

    /// stopping → ended: frees the slot and settles the credits (charge used minutes, refund the rest).
    pub async fn finish(&self, session_id: &str) -> Result<Option<Step>> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        let state = state_in(&mut w, session_id).await?;
        if state == SessionState::Ended {
            return Ok(None);
        }
        let next = transition(state, Event::Finish)?;
        set_state(&mut w, session_id, next).await?;
        let step = insert_event(
            &mut w,
            session_id,
            next.to,
            "Stopped; the slot is free again",
            100,
            false,
            now,
        )
        .await?;
        settle_in(&mut w, session_id, now).await?;
        w.commit().await?;
        Ok(Some(step))
    }

    pub async fn session(&self, id: &str) -> Result<Option<SessionRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {SESSION_COLUMNS} {SESSION_FROM} WHERE s.id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| SessionRecord::from_row(&r)).transpose()
    }

    pub async fn sessions_of(&self, user_id: &str, limit: i64) -> Result<Vec<SessionRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions s LEFT JOIN slots sl ON sl.id = s.slot_id LEFT JOIN gpus g ON g.id = sl.gpu_id
             WHERE s.user_id = $1 ORDER BY s.created_at DESC LIMIT $2"
        ))
        .bind(user_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(SessionRecord::from_row).collect()
    }

    /// Sessions not yet ended, oldest first.
    pub async fn live_sessions(&self) -> Result<Vec<SessionRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions s LEFT JOIN slots sl ON sl.id = s.slot_id LEFT JOIN gpus g ON g.id = sl.gpu_id
             WHERE s.state <> 'ended' ORDER BY s.created_at"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(SessionRecord::from_row).collect()
    }

    pub async fn steps(&self, session_id: &str) -> Result<Vec<Step>> {
        let rows = sqlx::query(
            "SELECT seq, state, message, progress, failed, at FROM session_events WHERE session_id = $1 ORDER BY seq",
        )
        .bind(session_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(step_from_row).collect()
    }

    pub async fn touch(&self, session_id: &str, at: i64) -> Result<()> {
        sqlx::query(
            "UPDATE sessions SET last_activity_at = $1 WHERE id = $2 AND last_activity_at < $1",
        )
        .bind(at)
        .bind(session_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    // ---- audit ----

    /// Records the idle timeout a person chose at launch (see `Launcher::place`).
    pub async fn set_idle_timeout(&self, session_id: &str, timeout_ms: i64) -> Result<()> {
        sqlx::query("UPDATE sessions SET idle_timeout_ms = $1 WHERE id = $2")
            .bind(timeout_ms)
            .bind(session_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

impl Store {
    /// Holds `minutes` more at the session's price and moves its end; refused past `max_total` minutes.
    /// Holds `minutes` more for a session [`quota::extension`] lets grow, decided inside the
    /// transaction on what the database holds now.
    pub async fn extend(
        &self,
        session_id: &str,
        minutes: u32,
        limits: &quota::ExtensionLimits,
    ) -> Result<Step> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        let state = state_in(&mut w, session_id).await?;
        let row = sqlx::query(
            "SELECT user_id, price_per_hour, duration_minutes, ends_at, burst FROM sessions WHERE id = $1",
        )
        .bind(session_id)
        .fetch_one(&mut *w.tx)
        .await?;
        let session = quota::Extended {
            running: state.runs_editor(),
            burst: row.try_get::<i64, _>("burst")? != 0,
            ends_at: row.try_get("ends_at")?,
            duration_minutes: row.try_get::<i64, _>("duration_minutes")? as u32,
        };
        quota::extension(limits, &session, minutes, now).map_err(|refused| match refused {
            quota::ExtensionRefused::NotRunning | quota::ExtensionRefused::TimeUp => {
                StoreError::Conflict
            }
            other => StoreError::Quota(other.to_string()),
        })?;
        let user_id: String = row.try_get("user_id")?;
        let per_hour: i64 = row.try_get("price_per_hour")?;
        self.lock_user(&mut w, &user_id).await?;
        let hold = credits::price_for_minutes(per_hour, minutes as i64);
        let balance = balance_in(&mut w, &user_id).await?;
        if balance < hold {
            return Err(StoreError::InsufficientCredits {
                balance,
                needed: hold,
            });
        }
        if hold > 0 {
            insert_ledger(
                &mut w,
                &user_id,
                LedgerKind::Hold,
                -hold,
                Some(session_id),
                &format!("held for {minutes} more minutes"),
                now,
            )
            .await?;
        }
        sqlx::query(
            "UPDATE sessions SET duration_minutes = duration_minutes + $1, ends_at = ends_at + $2 WHERE id = $3",
        )
        .bind(minutes as i64)
        .bind(minutes as i64 * 60_000)
        .bind(session_id)
        .execute(&mut *w.tx)
        .await?;
        let step = insert_event(
            &mut w,
            session_id,
            state,
            &format!(
                "Extended by {minutes} minutes ({} credits held)",
                credits::format(hold)
            ),
            100,
            false,
            now,
        )
        .await?;
        insert_audit(
            &mut w,
            Some(&user_id),
            "session.extend",
            &format!("session:{session_id}"),
            &format!("{minutes} min"),
            now,
        )
        .await?;
        w.commit().await?;
        Ok(step)
    }

    // ---- quotas ----
}
