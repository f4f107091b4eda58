//! Write transactions begun and ended by hand, safe to drop at any point.
//!
//! A request's future is dropped when its client hangs up. sqlx-sqlite 0.8.6 loses count of a
//! `Transaction` dropped that way (sqlx#3932): its connection goes back to the pool still inside
//! `BEGIN IMMEDIATE` (holding SQLite's write lock), or counted as inside a transaction after
//! SQLite rolled a failed one back itself (a full disk), and every later write waits out the
//! busy timeout and fails. So no sqlx `Transaction` here: `BEGIN` and `COMMIT` are statements
//! on a pooled connection, and a [`WriteTx`] dropped before its commit rolls back on a task of
//! its own, keeping the in-process writer lock until the rollback is done. A connection whose
//! rollback fails is closed, never pooled again.

use super::{DbKind, Result};
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool};
use tokio::sync::OwnedMutexGuard;

/// A pooled connection inside a transaction; derefs to the connection for queries.
pub(super) struct Conn(Option<PoolConnection<Any>>);

impl std::ops::Deref for Conn {
    type Target = AnyConnection;
    fn deref(&self) -> &AnyConnection {
        self.0
            .as_deref()
            .expect("a transaction's connection until it ends")
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        self.0
            .as_deref_mut()
            .expect("a transaction's connection until it ends")
    }
}

/// A write transaction; on SQLite it also holds the writer lock.
pub(super) struct WriteTx {
    pub(super) tx: Conn,
    pub(super) kind: DbKind,
    writer: Option<OwnedMutexGuard<()>>,
    /// The store's time when the transaction began.
    pub(super) now: i64,
    /// Begun and neither committed nor rolled back.
    open: bool,
}

impl WriteTx {
    /// Takes a connection and begins. The guard exists before `BEGIN` is sent, so a drop at any
    /// point from here on rolls back whatever the connection began.
    pub(super) async fn begin(
        pool: &AnyPool,
        kind: DbKind,
        writer: Option<OwnedMutexGuard<()>>,
        now: i64,
    ) -> Result<WriteTx> {
        let conn = pool.acquire().await?;
        let mut w = WriteTx {
            tx: Conn(Some(conn)),
            kind,
            writer,
            now,
            open: true,
        };
        // IMMEDIATE takes SQLite's write lock at BEGIN, where busy_timeout applies. A deferred
        // transaction that has read first fails at once with SQLITE_BUSY when it tries to write
        // while another connection writes, instead of waiting for it.
        let begin = match kind {
            DbKind::Sqlite => "BEGIN IMMEDIATE",
            DbKind::Postgres => "BEGIN",
        };
        sqlx::query(begin).execute(&mut *w.tx).await?;
        Ok(w)
    }

    pub(super) async fn commit(mut self) -> Result<()> {
        sqlx::query("COMMIT").execute(&mut *self.tx).await?;
        self.open = false;
        Ok(())
    }
}

impl Drop for WriteTx {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        let Some(mut conn) = self.tx.0.take() else {
            return;
        };
        let writer = self.writer.take();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to roll back on: the connection must not be used again.
            drop(conn.detach());
            return;
        };
        runtime.spawn(async move {
            // SQLite may have rolled back already (a failed statement): "no transaction is
            // active" is then the answer, and the connection is clean.
            match sqlx::query("ROLLBACK").execute(&mut *conn).await {
                Ok(_) => {}
                Err(e) if e.to_string().contains("no transaction is active") => {}
                Err(e) => {
                    tracing::warn!(error = %e, "rolling back an abandoned write; closing its connection");
                    drop(conn.detach());
                }
            }
            drop(writer);
        });
    }
}
