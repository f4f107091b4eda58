//! Test set-up: sessions made without the allocator, for tests of what comes after a launch.

use super::*;

/// What [`Store::create_session`] records (test set-up).
#[cfg(test)]
pub struct NewSession<'a> {
    pub user_id: &'a str,
    /// The chosen image's reference; None for the configured default.
    pub image: Option<&'a str>,
    pub editor: EditorKind,
    pub slice_mib: u64,
    pub duration_minutes: u32,
    pub price_per_hour: i64,
    pub hold: i64,
}

impl Store {
    /// Test set-up for the later life of a session (settling, stopping, transitions): holds
    /// credits and records the request, as [`Store::launch`] does without choosing a slot. The
    /// product launches only through [`Store::launch`].
    #[cfg(test)]
    pub async fn create_session(&self, new: NewSession<'_>) -> Result<(SessionRecord, Vec<Step>)> {
        let now = self.now();
        let id = new_id();
        let mut w = self.begin_write().await?;
        self.lock_user(&mut w, new.user_id).await?;
        let balance = balance_in(&mut w, new.user_id).await?;
        if balance < new.hold {
            return Err(StoreError::InsufficientCredits {
                balance,
                needed: new.hold,
            });
        }
        let steps = insert_requested(
            &mut w,
            &Requested {
                id: &id,
                user_id: new.user_id,
                image: new.image,
                editor: new.editor,
                slice_mib: new.slice_mib,
                duration_minutes: new.duration_minutes,
                price_per_hour: new.price_per_hour,
                hold: new.hold,
                burst: false,
            },
            now,
        )
        .await?;
        w.commit().await?;
        let record = self
            .session(&id)
            .await?
            .ok_or(StoreError::NotFound("session"))?;
        Ok((record, steps))
    }

    /// Test set-up: puts a session from [`Store::create_session`] on the first of `candidates`
    /// still free, atomically; the session moves to starting.
    #[cfg(test)]
    pub async fn assign_slot(
        &self,
        session_id: &str,
        candidates: &[String],
    ) -> Result<Option<(String, Step)>> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        let state = state_in(&mut w, session_id).await?;
        let next = transition(state, Event::AssignSlot)?;
        for slot_id in candidates {
            if launch::take_slot_in(&mut w, session_id, slot_id, now).await? {
                set_state(&mut w, session_id, next).await?;
                sqlx::query("UPDATE sessions SET slot_id = $1 WHERE id = $2")
                    .bind(slot_id)
                    .bind(session_id)
                    .execute(&mut *w.tx)
                    .await?;
                let step = insert_event(
                    &mut w,
                    session_id,
                    next.to,
                    &format!("Slot {slot_id} assigned"),
                    30,
                    false,
                    now,
                )
                .await?;
                w.commit().await?;
                return Ok(Some((slot_id.clone(), step)));
            }
        }
        Ok(None)
    }
}
