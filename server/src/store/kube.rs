//! What the kube runtime's reconciler needs of the database.

use super::{DbKind, Result, Store};
use sqlx::{Any, Row, Transaction};

/// Any number, the same on every replica: the advisory lock of the reconciler's pass.
const RECONCILE_LOCK_KEY: i64 = 0x6773_622d_7265_636f; // "gsb-reco"

/// Held for one reconciler pass. On PostgreSQL a transaction holding a transaction-scoped
/// advisory lock: however the pass ends (even by a panic or a dropped future), the
/// transaction's end releases it, so no pooled connection keeps the lock.
pub struct ReconcileLock {
    tx: Option<Transaction<'static, Any>>,
}

impl ReconcileLock {
    pub async fn release(self) {
        if let Some(tx) = self.tx {
            let _ = tx.rollback().await;
        }
    }
}

impl Store {
    /// The reconciler's lock, or None when another replica holds it. SQLite: one process, no lock.
    pub async fn try_reconcile_lock(&self) -> Result<Option<ReconcileLock>> {
        if self.kind == DbKind::Sqlite {
            return Ok(Some(ReconcileLock { tx: None }));
        }
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query("SELECT pg_try_advisory_xact_lock($1) AS locked")
            .bind(RECONCILE_LOCK_KEY)
            .fetch_one(&mut *tx)
            .await?;
        let locked: bool = row.try_get("locked")?;
        Ok(locked.then_some(ReconcileLock { tx: Some(tx) }))
    }

    /// Replaces a live session's runtime handle if it still is `old` (compare and set, so a
    /// replica with an older view cannot overwrite a newer one). True when it changed.
    pub async fn replace_runtime_handle(
        &self,
        session_id: &str,
        old: &str,
        new: &str,
    ) -> Result<bool> {
        let mut w = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE sessions SET runtime_handle = $1 WHERE id = $2 AND runtime_handle = $3 AND state <> 'ended'",
        )
        .bind(new)
        .bind(session_id)
        .bind(old)
        .execute(&mut *w.tx)
        .await?;
        w.commit().await?;
        Ok(done.rows_affected() == 1)
    }
}

/// What [`Store::move_to_gpu`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotMove {
    Moved {
        from: String,
        to: String,
    },
    /// The session's slot is on that card already.
    Already,
    /// The card is not in our pool (GPUs declared under names other than their UUIDs).
    UnknownGpu,
    /// Our books show that card full: the pool and HAMi disagree.
    NoFreeSlot,
    /// Not one slot (a whole-card burst holds several, and is placed by card anyway).
    NotOneSlot,
    /// The session is no longer live.
    Ended,
}

impl Store {
    /// HAMi put the session's pod on `gpu_id`, not on the card of the slot we gave it: move the
    /// session to a free slot of its size on that card, so the pool shows what each card holds.
    pub async fn move_to_gpu(&self, session_id: &str, gpu_id: &str) -> Result<SlotMove> {
        let mut w = self.begin_write().await?;
        // The session's row first (locked on PostgreSQL): an end running meanwhile frees the
        // session's slots after this commits, the new one included, or has already ended it.
        if !super::state_in(&mut w, session_id).await?.is_live() {
            return Ok(SlotMove::Ended);
        }
        let held = sqlx::query("SELECT id, gpu_id, slice_mib FROM slots WHERE session_id = $1")
            .bind(session_id)
            .fetch_all(&mut *w.tx)
            .await?;
        let [slot] = held.as_slice() else {
            return Ok(SlotMove::NotOneSlot);
        };
        let from: String = slot.try_get("id")?;
        let from_gpu: String = slot.try_get("gpu_id")?;
        let slice_mib: i64 = slot.try_get("slice_mib")?;
        if from_gpu == gpu_id {
            return Ok(SlotMove::Already);
        }
        let known = sqlx::query("SELECT id FROM gpus WHERE id = $1")
            .bind(gpu_id)
            .fetch_optional(&mut *w.tx)
            .await?;
        if known.is_none() {
            return Ok(SlotMove::UnknownGpu);
        }
        let free = sqlx::query(
            "SELECT id FROM slots WHERE gpu_id = $1 AND slice_mib = $2 AND session_id IS NULL AND active = 1
             AND id NOT IN (SELECT slot_id FROM warm_editors) ORDER BY id",
        )
        .bind(gpu_id)
        .bind(slice_mib)
        .fetch_all(&mut *w.tx)
        .await?;
        let now = self.now();
        for row in free {
            let to: String = row.try_get("id")?;
            let taken = sqlx::query(
                "UPDATE slots SET session_id = $1, updated_at = $2 WHERE id = $3 AND session_id IS NULL AND active = 1",
            )
            .bind(session_id)
            .bind(now)
            .bind(&to)
            .execute(&mut *w.tx)
            .await?;
            if taken.rows_affected() != 1 {
                continue;
            }
            sqlx::query("UPDATE slots SET session_id = NULL, updated_at = $1 WHERE id = $2")
                .bind(now)
                .bind(&from)
                .execute(&mut *w.tx)
                .await?;
            sqlx::query("UPDATE sessions SET slot_id = $1 WHERE id = $2")
                .bind(&to)
                .bind(session_id)
                .execute(&mut *w.tx)
                .await?;
            w.commit().await?;
            return Ok(SlotMove::Moved { from, to });
        }
        Ok(SlotMove::NoFreeSlot)
    }
}
