//! The database: SQLite (default) or PostgreSQL through sqlx's `Any` driver.
//!
//! Row structs stay here; the rest of the server sees records and wire types.
//! Every write that must not race (credits, slots, state) runs in one transaction;
//! on SQLite writers are serialized in-process, on PostgreSQL the user's row is locked.

mod activity;
mod admin;
mod audit;
mod backups;
mod batch;
mod datasets;
mod departed;
mod editor_access;
mod http_sessions;
mod images;
mod kube;
mod launch;
mod launch_rows;
mod leases;
mod ledger;
mod parking;
mod pool;
mod promotions;
mod quotas;
mod records;
mod sessions;
#[cfg(test)]
mod test_support;
mod tokens;
mod users;
mod warm;
mod write;

use crate::util::{Clock, SystemClock};
pub use crate::util::{new_id, now_ms};
pub use activity::GpuSample;
pub use admin::{BulkAdd, BulkGrant};
pub use backups::{BackupOutcome, BackupRecord};
pub use datasets::{DatasetRecord, DatasetWrite};
pub use departed::Departed;
pub use http_sessions::HttpSessionStore;
pub use kube::{ReconcileLock, SlotMove};
pub use launch::{Dispatched, LaunchPlan, Launched, Placement, queue_message};
pub use ledger::LedgerKind;
pub use parking::Resumed;
pub use promotions::{NewPromotion, WaitingLimit};
pub use records::{
    AuditEntry, GpuRecord, LedgerEntry, SessionRecord, SlotRecord, TokenOwner, TokenRecord,
    UserRecord, WarmRecord,
};
use records::{SESSION_COLUMNS, SESSION_FROM, SLOT_COLUMNS, USER_COLUMNS, bad, scopes_of};
#[cfg(test)]
pub use test_support::NewSession;
pub use warm::WarmCandidate;
use write::WriteTx;
// The helpers each area's writes share, for `use super::*` in the area files.
use launch::{skip_locked, usage_in};
pub(crate) use ledger::credit_request_of;
use ledger::{answer_credit_request, grant_detail};
use quotas::overrides_of;

use app::domain::hold::SliceHold;
use app::domain::launch::EditorKind;
use app::domain::pool::{GpuSpec, SlotSpec};
use app::domain::scope::Scopes;
use app::domain::session::{EndReason, Event, SessionState};
use app::model::{Role, Step};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{Any, AnyPool, Row};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("{0} already exists")]
    Duplicate(&'static str),
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("not enough credits: balance {balance}, needed {needed}")]
    InsufficientCredits { balance: i64, needed: i64 },
    #[error(transparent)]
    Transition(#[from] app::domain::session::InvalidTransition),
    #[error("the session changed meanwhile")]
    Conflict,
    /// The sign-in store could not answer.
    #[error("session store: {0}")]
    Sessions(String),
    /// A quota refuses the launch; the message names the limit and the use.
    #[error("{0}")]
    Quota(String),
    /// An admin's change would leave no unlocked admin.
    #[error("the last admin")]
    LastAdmin,
}

/// How long a query waits for a connection before the database counts as unreachable. Not
/// shorter: a busy machine can take seconds to open a connection, and that is no outage. A
/// database that refuses connections is told at once; readiness waits one second at most.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

impl StoreError {
    /// The database did not answer (down, refusing connections, every connection stuck):
    /// not a fault of the request.
    pub fn is_unreachable(&self) -> bool {
        match self {
            StoreError::Db(
                sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::Io(_)
                | sqlx::Error::Tls(_)
                | sqlx::Error::WorkerCrashed,
            ) => true,
            StoreError::Db(sqlx::Error::Database(e)) => {
                let code = e.code().unwrap_or_default();
                // PostgreSQL's connection exceptions (08…), operator intervention (57…: shut
                // down, restarting), too many connections, and a database closed to them.
                code.starts_with("08")
                    || code.starts_with("57")
                    || code == "53300"
                    || (code == "55000" && e.message().contains("accepting connections"))
            }
            _ => false,
        }
    }

    /// The database's disk is full: SQLite's `SQLITE_FULL` (13), PostgreSQL's `disk_full`
    /// (53100). Nothing of the write was kept; it can succeed once space is freed.
    pub fn is_full(&self) -> bool {
        match self {
            StoreError::Db(sqlx::Error::Database(e)) => {
                let code = e.code().unwrap_or_default();
                code == "13" || code == "53100" || e.message().contains("disk is full")
            }
            _ => false,
        }
    }
}

/// Maps a unique violation to `Duplicate(what)` by constraint name, never by message text.
fn on_unique(err: sqlx::Error, constraint: &str, what: &'static str) -> StoreError {
    if let sqlx::Error::Database(db) = &err {
        let by_name = db.constraint() == Some(constraint);
        // SQLite reports no constraint name; its unique violations name the column instead.
        let sqlite_unique =
            db.kind() == sqlx::error::ErrorKind::UniqueViolation && db.constraint().is_none();
        if by_name || sqlite_unique {
            return StoreError::Duplicate(what);
        }
    }
    StoreError::Db(err)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DbKind {
    Sqlite,
    Postgres,
}

#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    /// Where write transactions run: on SQLite a connection of their own (one writer at a
    /// time), so a writer holding the lock never waits for a reader's connection; on
    /// PostgreSQL the pool itself.
    writes: AnyPool,
    kind: DbKind,
    sqlite_writer: Arc<Mutex<()>>,
    /// The time every row is stamped with.
    clock: Arc<dyn Clock>,
    /// The pool's cards as last read, for launches ([`Store::pool_cards`]).
    cards: Arc<std::sync::Mutex<pool::CardsSeen>>,
    /// Whether the database answered its last look ([`Store::watch_database`]): while it does
    /// not, requests are answered 503 at once instead of each waiting out the pool's
    /// [`ACQUIRE_TIMEOUT`].
    down: Arc<tokio::sync::watch::Sender<bool>>,
    /// For those looks: a connection of their own, outside the pool. Holds the password; never
    /// printed.
    url: Arc<str>,
}

/// How often a server looks whether its database answers, and how long one look may take.
pub const DATABASE_LOOK: Duration = Duration::from_secs(1);
const DATABASE_LOOK_TIMEOUT: Duration = Duration::from_secs(3);

impl Store {
    pub async fn connect(url: &str) -> Result<Store> {
        sqlx::any::install_default_drivers();
        let kind = if url.starts_with("sqlite:") {
            DbKind::Sqlite
        } else {
            DbKind::Postgres
        };
        let options = AnyPoolOptions::new()
            .max_connections(if kind == DbKind::Sqlite { 8 } else { 16 })
            // Past it, a 503 `database_unavailable` rather than a 500.
            .acquire_timeout(ACQUIRE_TIMEOUT);
        let options = if kind == DbKind::Sqlite {
            options.after_connect(|conn, _| {
                Box::pin(async move {
                    use sqlx::Executor;
                    conn.execute("PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 10000; PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL;")
                        .await?;
                    Ok(())
                })
            })
        } else {
            options
        };
        let pool = options.clone().connect(url).await?;
        let writes = match kind {
            DbKind::Sqlite => options.max_connections(1).connect(url).await?,
            DbKind::Postgres => pool.clone(),
        };
        Ok(Store {
            pool,
            writes,
            kind,
            sqlite_writer: Arc::new(Mutex::new(())),
            clock: Arc::new(SystemClock),
            cards: Arc::default(),
            down: Arc::new(tokio::sync::watch::channel(false).0),
            url: url.into(),
        })
    }

    /// The database did not answer the last look: requests needing it get 503 at once.
    pub fn database_down(&self) -> bool {
        *self.down.borrow()
    }

    /// Told when the database stops or starts answering.
    pub fn database_watch(&self) -> tokio::sync::watch::Receiver<bool> {
        self.down.subscribe()
    }

    /// Looks every [`DATABASE_LOOK`] whether PostgreSQL answers, on a connection of its own: a
    /// refused or dropped connection is seen at once, a hung one after a few seconds. (A pool's
    /// acquire retries for its whole timeout before it gives up, which every request of an
    /// outage would otherwise wait out.) SQLite is a file of this machine: nothing to watch.
    pub async fn watch_database(&self) {
        use sqlx::Connection;
        if self.kind == DbKind::Sqlite {
            return;
        }
        let mut connection: Option<sqlx::AnyConnection> = None;
        let mut tick = tokio::time::interval(DATABASE_LOOK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let answered = tokio::time::timeout(DATABASE_LOOK_TIMEOUT, async {
                if connection.is_none() {
                    connection = Some(sqlx::AnyConnection::connect(&self.url).await?);
                }
                match connection.as_mut() {
                    Some(c) => c.ping().await,
                    None => Ok(()),
                }
            })
            .await;
            let down = !matches!(answered, Ok(Ok(())));
            if down {
                connection = None;
            }
            self.down.send_if_modified(|was| {
                let changed = *was != down;
                if changed {
                    if down {
                        tracing::warn!(
                            "the database does not answer: requests get 503 until it does"
                        );
                    } else {
                        tracing::info!("the database answers again");
                    }
                }
                *was = down;
                changed
            });
        }
    }

    /// The same database, its rows stamped by `clock` (tests set the time by hand).
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Store {
        Store { clock, ..self }
    }

    /// The clock the store stamps rows with, for what stamps times beside it.
    pub fn clock(&self) -> Arc<dyn Clock> {
        self.clock.clone()
    }

    /// Now, by the store's clock.
    pub fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    pub fn kind(&self) -> DbKind {
        self.kind
    }

    pub async fn migrate(&self) -> Result<()> {
        match self.kind {
            DbKind::Sqlite => {
                sqlx::migrate!("../migrations/sqlite")
                    .run(&self.pool)
                    .await?
            }
            DbKind::Postgres => {
                sqlx::migrate!("../migrations/postgres")
                    .run(&self.pool)
                    .await?
            }
        }
        Ok(())
    }

    pub async fn close(&self) {
        self.pool.close().await;
        self.writes.close().await;
    }

    async fn begin_write(&self) -> Result<WriteTx> {
        let writer = match self.kind {
            DbKind::Sqlite => Some(self.sqlite_writer.clone().lock_owned().await),
            DbKind::Postgres => None,
        };
        WriteTx::begin(&self.writes, self.kind, writer, self.now()).await
    }

    /// Serializes credit operations of one user on PostgreSQL (SQLite writers are serialized already).
    async fn lock_user(&self, w: &mut WriteTx, user_id: &str) -> Result<()> {
        if self.kind == DbKind::Postgres {
            sqlx::query("SELECT id FROM users WHERE id = $1 FOR UPDATE")
                .bind(user_id)
                .fetch_optional(&mut *w.tx)
                .await?;
        }
        Ok(())
    }

    // ---- users and tokens ----

    pub(crate) fn pool_handle(&self) -> &AnyPool {
        &self.pool
    }
}

/// A launch as its transaction records it.
struct Requested<'a> {
    id: &'a str,
    user_id: &'a str,
    image: Option<&'a str>,
    editor: EditorKind,
    slice_mib: u64,
    duration_minutes: u32,
    price_per_hour: i64,
    hold: i64,
    burst: bool,
}

/// Records a requested session with its first steps, its hold on the user's credits and the
/// audit event: the tests' sessions, moved on by hand (the allocator writes a launch's rows in
/// one go: `launch_rows::insert_launch`).
#[cfg(test)]
async fn insert_requested(w: &mut WriteTx, r: &Requested<'_>, now: i64) -> Result<Vec<Step>> {
    sqlx::query(
        "INSERT INTO sessions (id, user_id, editor, slice_mib, duration_minutes, price_per_hour, state, created_at, last_activity_at, burst, image)
         VALUES ($1, $2, $3, $4, $5, $6, 'requested', $7, $7, $8, $9)",
    )
    .bind(r.id)
    .bind(r.user_id)
    .bind(r.editor.as_str())
    .bind(r.slice_mib as i64)
    .bind(r.duration_minutes as i64)
    .bind(r.price_per_hour)
    .bind(now)
    .bind(r.burst as i64)
    .bind(r.image)
    .execute(&mut *w.tx)
    .await?;
    let requested = insert_event(
        w,
        r.id,
        SessionState::Requested,
        "Launch requested",
        5,
        false,
        now,
    )
    .await?;
    if r.hold > 0 {
        insert_ledger(
            w,
            r.user_id,
            LedgerKind::Hold,
            -r.hold,
            Some(r.id),
            "held for launch",
            now,
        )
        .await?;
    }
    let held = insert_event(
        w,
        r.id,
        SessionState::Requested,
        &format!(
            "Credits held: {} ({} an hour)",
            app::domain::credits::format(r.hold),
            app::domain::credits::format(r.price_per_hour)
        ),
        15,
        false,
        now,
    )
    .await?;
    insert_audit(
        w,
        Some(r.user_id),
        "session.launch",
        &format!("session:{}", r.id),
        r.editor.as_str(),
        now,
    )
    .await?;
    Ok(vec![requested, held])
}

async fn balance_in(w: &mut WriteTx, user_id: &str) -> Result<i64> {
    Ok(
        sqlx::query("SELECT CAST(COALESCE(SUM(amount), 0) AS BIGINT) AS balance FROM credit_ledger WHERE user_id = $1")
            .bind(user_id)
            .fetch_one(&mut *w.tx)
            .await?
            .try_get("balance")?,
    )
}

/// Reads the state; on PostgreSQL it also locks the session's row until the transaction ends,
/// so writers of one session (steps numbered by MAX(seq) + 1, transitions) take turns.
async fn state_in(w: &mut WriteTx, session_id: &str) -> Result<SessionState> {
    let sql = match w.kind {
        DbKind::Sqlite => "SELECT state FROM sessions WHERE id = $1",
        DbKind::Postgres => "SELECT state FROM sessions WHERE id = $1 FOR UPDATE",
    };
    let row = sqlx::query(sql)
        .bind(session_id)
        .fetch_optional(&mut *w.tx)
        .await?
        .ok_or(StoreError::NotFound("session"))?;
    let state: String = row.try_get("state")?;
    SessionState::parse(&state).ok_or(StoreError::NotFound("session state"))
}

/// A move the state machine allows; made only by [`transition`], so that every state the store
/// writes is one [`SessionState::next`] gave.
#[derive(Clone, Copy)]
struct Transition {
    from: SessionState,
    to: SessionState,
}

fn transition(from: SessionState, event: Event) -> Result<Transition> {
    Ok(Transition {
        from,
        to: from.next(event)?,
    })
}

/// Compare-and-set, so two writers cannot both move the same session.
async fn set_state(w: &mut WriteTx, session_id: &str, t: Transition) -> Result<()> {
    let Transition { from, to } = t;
    let done = sqlx::query("UPDATE sessions SET state = $1 WHERE id = $2 AND state = $3")
        .bind(to.as_str())
        .bind(session_id)
        .bind(from.as_str())
        .execute(&mut *w.tx)
        .await?;
    if done.rows_affected() != 1 {
        return Err(StoreError::Conflict);
    }
    let detail = format!("{from} -> {to}");
    insert_audit(
        w,
        None,
        &format!("session.{to}"),
        &format!("session:{session_id}"),
        &detail,
        w.now,
    )
    .await
}

/// A new account's row.
struct UserRow<'a> {
    name: &'a str,
    password_hash: Option<&'a str>,
    oidc_subject: Option<&'a str>,
    role: Role,
    initial_grant: i64,
    /// Set by someone else (an admin, the first run): changed at the first sign-in.
    temporary_password: bool,
}

/// Stamps `column` of the session with `now` and frees its slots: it ended, or it parked.
async fn let_go_in(w: &mut WriteTx, session_id: &str, column: &str, now: i64) -> Result<()> {
    sqlx::query(&format!("UPDATE sessions SET {column} = $1 WHERE id = $2"))
        .bind(now)
        .bind(session_id)
        .execute(&mut *w.tx)
        .await?;
    sqlx::query("UPDATE slots SET session_id = NULL, updated_at = $1 WHERE session_id = $2")
        .bind(now)
        .bind(session_id)
        .execute(&mut *w.tx)
        .await?;
    Ok(())
}

/// Frees the slot and writes the ledger rows of [`app::domain::credits::settlement`].
async fn settle_in(w: &mut WriteTx, session_id: &str, now: i64) -> Result<()> {
    let_go_in(w, session_id, "ended_at", now).await?;
    let row = sqlx::query(
        "SELECT user_id, price_per_hour, ready_at, end_reason, charge_until, parked_ms, parked_at \
         FROM sessions WHERE id = $1",
    )
    .bind(session_id)
    .fetch_one(&mut *w.tx)
    .await?;
    let user_id: String = row.try_get("user_id")?;
    let parked = app::domain::credits::Parked {
        before_ms: row.try_get("parked_ms")?,
        since: row.try_get("parked_at")?,
    };
    let charge_until: Option<i64> = row.try_get("charge_until")?;
    // A park that runs to the end is kept as ended there, as the charge counts it.
    if parked.since.is_some() {
        let until = charge_until.map_or(now, |until| until.min(now));
        sqlx::query("UPDATE sessions SET parked_ms = $1, parked_at = NULL WHERE id = $2")
            .bind(parked.until(until))
            .bind(session_id)
            .execute(&mut *w.tx)
            .await?;
    }
    let hold_row = sqlx::query(
        "SELECT CAST(COALESCE(SUM(-amount), 0) AS BIGINT) AS held FROM credit_ledger WHERE session_id = $1 AND kind = 'hold'",
    )
    .bind(session_id)
    .fetch_one(&mut *w.tx)
    .await?;
    let settled = app::domain::credits::settlement(
        hold_row.try_get("held")?,
        row.try_get("price_per_hour")?,
        row.try_get("ready_at")?,
        charge_until,
        row.try_get::<Option<String>, _>("end_reason")?
            .as_deref()
            .and_then(EndReason::parse),
        parked,
        now,
    );
    if settled.released > 0 {
        insert_ledger(
            w,
            &user_id,
            LedgerKind::Refund,
            settled.released,
            Some(session_id),
            "hold released",
            now,
        )
        .await?;
    }
    if settled.charge > 0 {
        insert_ledger(
            w,
            &user_id,
            LedgerKind::Charge,
            -settled.charge,
            Some(session_id),
            &format!("{} min used", settled.minutes),
            now,
        )
        .await?;
    }
    Ok(())
}

async fn insert_ledger(
    w: &mut WriteTx,
    user_id: &str,
    kind: LedgerKind,
    amount: i64,
    session_id: Option<&str>,
    note: &str,
    at: i64,
) -> Result<()> {
    sqlx::query("INSERT INTO credit_ledger (user_id, kind, amount, session_id, note, at) VALUES ($1, $2, $3, $4, $5, $6)")
        .bind(user_id)
        .bind(kind.as_str())
        .bind(amount)
        .bind(session_id)
        .bind(note)
        .bind(at)
        .execute(&mut *w.tx)
        .await?;
    Ok(())
}

async fn insert_audit(
    w: &mut WriteTx,
    actor_id: Option<&str>,
    action: &str,
    target: &str,
    detail: &str,
    at: i64,
) -> Result<()> {
    sqlx::query("INSERT INTO audit_events (at, actor_id, action, target, detail) VALUES ($1, $2, $3, $4, $5)")
        .bind(at)
        .bind(actor_id)
        .bind(action)
        .bind(target)
        .bind(detail)
        .execute(&mut *w.tx)
        .await?;
    Ok(())
}

async fn insert_event(
    w: &mut WriteTx,
    session_id: &str,
    state: SessionState,
    message: &str,
    progress: u8,
    failed: bool,
    at: i64,
) -> Result<Step> {
    let row = sqlx::query("SELECT CAST(COALESCE(MAX(seq), 0) AS BIGINT) AS seq FROM session_events WHERE session_id = $1")
        .bind(session_id)
        .fetch_one(&mut *w.tx)
        .await?;
    let seq: i64 = row.try_get::<i64, _>("seq")? + 1;
    sqlx::query(
        "INSERT INTO session_events (session_id, seq, state, message, progress, failed, at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(session_id)
    .bind(seq)
    .bind(state.as_str())
    .bind(message)
    .bind(progress as i64)
    .bind(failed as i64)
    .bind(at)
    .execute(&mut *w.tx)
    .await?;
    Ok(Step {
        seq,
        at_ms: at,
        state,
        message: message.to_string(),
        progress,
        failed,
    })
}

fn step_from_row(row: &AnyRow) -> Result<Step> {
    let state: String = row.try_get("state")?;
    Ok(Step {
        seq: row.try_get("seq")?,
        at_ms: row.try_get("at")?,
        state: SessionState::parse(&state).ok_or(StoreError::NotFound("session state"))?,
        message: row.try_get("message")?,
        progress: row.try_get::<i64, _>("progress")?.clamp(0, 100) as u8,
        failed: row.try_get::<i64, _>("failed")? != 0,
    })
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_admin;
#[cfg(test)]
mod tests_backups;
#[cfg(test)]
mod tests_guardrails;
#[cfg(test)]
mod tests_launch_rows;
#[cfg(test)]
mod tests_parking;
#[cfg(test)]
mod tests_promotions;
