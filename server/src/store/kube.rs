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
        w.tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }
}
