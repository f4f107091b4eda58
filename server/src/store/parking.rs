//! Parking: a ready session with no work gives its slot back and keeps its editor (frozen by
//! the runtime), and takes the same slot again when it is wanted back.
//!
//! On its own card, not any: the editor's GPU (on MIG, its instance, which the pool lists as a
//! card of its own) was fixed when it started, its device nodes bound into its sandbox. It takes
//! the slot it left if that is free, else another free one of its size there, one without a
//! pre-started editor first.

use super::launch::{evict_in, take_slot_in};
use super::*;

/// What a resume found.
#[derive(Debug)]
pub enum Resumed {
    /// Ready again on its slot; pre-started editors pushed off it must be stopped.
    Ready {
        step: Step,
        evicted: Vec<WarmRecord>,
    },
    /// Another session holds its slot: it stays parked until that one ends.
    Waiting,
    /// It was not parked (resumed meanwhile, or ending).
    NotParked,
}

/// The step a parked session's page shows.
pub const PARKED: &str = "Parked: no work for a while, so its GPU slice went back to the pool. \
    Your kernels and files are kept; it resumes when you type or your scripts call it.";

impl Store {
    /// ready → parked: its slot is free for others, `slot_id` kept to resume on. None when it
    /// was no longer ready (stopped or parked meanwhile).
    pub async fn park(&self, session_id: &str) -> Result<Option<Step>> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        let state = state_in(&mut w, session_id).await?;
        if state != SessionState::Ready {
            return Ok(None);
        }
        let next = transition(state, Event::Park)?;
        set_state(&mut w, session_id, next).await?;
        let_go_in(&mut w, session_id, "parked_at", now).await?;
        let step = insert_event(&mut w, session_id, next.to, PARKED, 100, false, now).await?;
        w.commit().await?;
        Ok(Some(step))
    }

    /// parked → ready on a free slot of its size on its card, the one it left first (a
    /// pre-started editor there is pushed off); else it waits, parked.
    pub async fn resume(&self, session_id: &str) -> Result<Resumed> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        let state = state_in(&mut w, session_id).await?;
        if state != SessionState::Parked {
            return Ok(Resumed::NotParked);
        }
        let slot: Option<String> = sqlx::query("SELECT slot_id FROM sessions WHERE id = $1")
            .bind(session_id)
            .fetch_one(&mut *w.tx)
            .await?
            .try_get("slot_id")?;
        let left = slot.ok_or(bad("a parked session's slot"))?;
        let candidates: Vec<String> = sqlx::query(
            "SELECT sl.id FROM slots sl JOIN slots mine ON mine.id = $1
             WHERE sl.gpu_id = mine.gpu_id AND sl.slice_mib = mine.slice_mib
             AND sl.active = 1 AND sl.session_id IS NULL
             ORDER BY CASE WHEN sl.id = $1 THEN 0 ELSE 1 END,
             CASE WHEN EXISTS (SELECT 1 FROM warm_editors w WHERE w.slot_id = sl.id) THEN 1 ELSE 0 END,
             sl.id",
        )
        .bind(&left)
        .fetch_all(&mut *w.tx)
        .await?
        .iter()
        .map(|row| row.try_get("id"))
        .collect::<std::result::Result<_, _>>()?;
        let mut taken = None;
        for slot in candidates {
            if take_slot_in(&mut w, session_id, &slot, now).await? {
                taken = Some(slot);
                break;
            }
        }
        let Some(slot) = taken else {
            return Ok(Resumed::Waiting);
        };
        let evicted = evict_in(&mut w, "sl.id = $1", &slot).await?;
        let next = transition(state, Event::Resume)?;
        set_state(&mut w, session_id, next).await?;
        // The park's time is kept, not charged (`credits::Parked`).
        sqlx::query(
            "UPDATE sessions SET parked_ms = parked_ms + ($1 - parked_at), parked_at = NULL, \
             slot_id = $2 WHERE id = $3",
        )
        .bind(now)
        .bind(&slot)
        .bind(session_id)
        .execute(&mut *w.tx)
        .await?;
        let step = insert_event(
            &mut w,
            session_id,
            next.to,
            "Resumed on its GPU slice",
            100,
            false,
            now,
        )
        .await?;
        w.commit().await?;
        Ok(Resumed::Ready { step, evicted })
    }
}
