//! The database: SQLite (default) or PostgreSQL through sqlx's `Any` driver.
//!
//! Row structs stay here; the rest of the server sees records and wire types.
//! Every write that must not race (credits, slots, state) runs in one transaction;
//! on SQLite writers are serialized in-process, on PostgreSQL the user's row is locked.

mod admin;
mod backups;
mod datasets;
mod departed;
mod guardrails;
mod http_sessions;
mod images;
mod kube;
mod promotions;
mod records;
mod warm;
mod write;

use crate::util::{Clock, SystemClock};
pub use crate::util::{new_id, now_ms};
pub use admin::{BulkAdd, BulkGrant};
pub use backups::{BackupOutcome, BackupRecord};
pub use datasets::{DatasetRecord, DatasetWrite};
pub use departed::Departed;
pub use guardrails::{Dispatched, GpuSample, LaunchPlan, Launched, Placement, queue_message};
pub use http_sessions::HttpSessionStore;
pub use kube::{ReconcileLock, SlotMove};
pub use promotions::{NewPromotion, WaitingLimit};
pub use records::{
    AuditEntry, GpuRecord, LedgerEntry, SessionRecord, SlotRecord, TokenOwner, TokenRecord,
    UserRecord, WarmRecord,
};
use records::{SESSION_COLUMNS, SLOT_COLUMNS, USER_COLUMNS, bad, scopes_of};
pub use warm::WarmCandidate;
use write::WriteTx;

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
    kind: DbKind,
    sqlite_writer: Arc<Mutex<()>>,
    /// The time every row is stamped with.
    clock: Arc<dyn Clock>,
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
        let pool = options.connect(url).await?;
        Ok(Store {
            pool,
            kind,
            sqlite_writer: Arc::new(Mutex::new(())),
            clock: Arc::new(SystemClock),
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
    }

    async fn begin_write(&self) -> Result<WriteTx> {
        let writer = match self.kind {
            DbKind::Sqlite => Some(self.sqlite_writer.clone().lock_owned().await),
            DbKind::Postgres => None,
        };
        WriteTx::begin(&self.pool, self.kind, writer, self.now()).await
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

    /// Creates a user with their starting grant, audited, in one transaction.
    pub async fn create_user(
        &self,
        name: &str,
        password_hash: Option<&str>,
        role: Role,
        initial_grant: i64,
        actor_id: Option<&str>,
    ) -> Result<UserRecord> {
        self.insert_user(
            UserRow {
                name,
                password_hash,
                oidc_subject: None,
                role,
                initial_grant,
                temporary_password: false,
            },
            actor_id,
        )
        .await
    }

    /// Creates a user whose password an admin chose or the server made: they change it at
    /// their first sign-in.
    pub async fn create_user_with_temporary_password(
        &self,
        name: &str,
        password_hash: &str,
        role: Role,
        initial_grant: i64,
        actor_id: Option<&str>,
    ) -> Result<UserRecord> {
        self.insert_user(
            UserRow {
                name,
                password_hash: Some(password_hash),
                oidc_subject: None,
                role,
                initial_grant,
                temporary_password: true,
            },
            actor_id,
        )
        .await
    }

    /// Sets a local account's password, audited: `temporary` when an admin set it (changed at
    /// the next sign-in), else the person's own. A deleted account is not found.
    pub async fn set_password(
        &self,
        user_id: &str,
        password_hash: &str,
        temporary: bool,
        actor_id: Option<&str>,
    ) -> Result<()> {
        let mut w = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE users SET password_hash = $1, must_change_password = $2 WHERE id = $3 AND deleted_at IS NULL",
        )
        .bind(password_hash)
        .bind(temporary as i64)
        .bind(user_id)
        .execute(&mut *w.tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("user"));
        }
        let (action, detail) = if temporary {
            ("user.password_reset", "to change at the next sign-in")
        } else {
            ("user.password", "")
        };
        insert_audit(
            &mut w,
            actor_id,
            action,
            &format!("user:{user_id}"),
            detail,
            self.now(),
        )
        .await?;
        w.commit().await?;
        Ok(())
    }

    /// Deletes an account, audited: locked, unlisted, its tokens gone; its row stays for the
    /// ledger, sessions and audit lines that name it, and its name stays taken, so that a new
    /// account of that name never inherits its workspace. Never the last unlocked admin.
    pub async fn delete_user(&self, user_id: &str, actor_id: Option<&str>) -> Result<()> {
        let mut w = self.begin_write().await?;
        if actor_id.is_some() {
            self.keep_an_admin(&mut w, user_id).await?;
        }
        let done = sqlx::query(
            "UPDATE users SET locked = 1, deleted_at = $1 WHERE id = $2 AND deleted_at IS NULL",
        )
        .bind(self.now())
        .bind(user_id)
        .execute(&mut *w.tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("user"));
        }
        sqlx::query("DELETE FROM api_tokens WHERE user_id = $1")
            .bind(user_id)
            .execute(&mut *w.tx)
            .await?;
        insert_audit(
            &mut w,
            actor_id,
            "user.delete",
            &format!("user:{user_id}"),
            "",
            self.now(),
        )
        .await?;
        w.commit().await?;
        Ok(())
    }

    /// Creates the account of an OpenID Connect identity (`<issuer>|<subject>`), without a
    /// password, with the starting grant.
    pub async fn create_oidc_user(
        &self,
        name: &str,
        oidc_subject: &str,
        role: Role,
        initial_grant: i64,
    ) -> Result<UserRecord> {
        self.insert_user(
            UserRow {
                name,
                password_hash: None,
                oidc_subject: Some(oidc_subject),
                role,
                initial_grant,
                temporary_password: false,
            },
            None,
        )
        .await
    }

    pub async fn user_by_oidc_subject(&self, oidc_subject: &str) -> Result<Option<UserRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {USER_COLUMNS} FROM users WHERE oidc_subject = $1"
        ))
        .bind(oidc_subject)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| UserRecord::from_row(&r)).transpose()
    }

    /// Links the single sign-on identity `oidc_subject` to the user, audited.
    pub async fn link_oidc(&self, user_id: &str, oidc_subject: &str) -> Result<()> {
        let mut w = self.begin_write().await?;
        let done = sqlx::query("UPDATE users SET oidc_subject = $1 WHERE id = $2")
            .bind(oidc_subject)
            .bind(user_id)
            .execute(&mut *w.tx)
            .await
            .map_err(|e| on_unique(e, "users_oidc_subject_key", "a user of this identity"))?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("user"));
        }
        insert_audit(
            &mut w,
            None,
            "user.link",
            &format!("user:{user_id}"),
            oidc_subject,
            self.now(),
        )
        .await?;
        w.commit().await?;
        Ok(())
    }

    /// Changes a user's role, audited with `why`. An admin's change (`actor_id`) never demotes
    /// the last unlocked admin; a demoted user's tokens lose `admin`.
    pub async fn set_role(
        &self,
        user_id: &str,
        role: Role,
        actor_id: Option<&str>,
        why: &str,
    ) -> Result<()> {
        let mut w = self.begin_write().await?;
        if role == Role::User {
            if actor_id.is_some() {
                self.keep_an_admin(&mut w, user_id).await?;
            }
            self.strip_admin_scope(&mut w, user_id).await?;
        }
        let done = sqlx::query("UPDATE users SET role = $1 WHERE id = $2 AND deleted_at IS NULL")
            .bind(role.as_str())
            .bind(user_id)
            .execute(&mut *w.tx)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("user"));
        }
        insert_audit(
            &mut w,
            actor_id,
            "user.role",
            &format!("user:{user_id}"),
            &format!("{}: {why}", role.as_str()),
            self.now(),
        )
        .await?;
        w.commit().await?;
        Ok(())
    }

    async fn insert_user(&self, user: UserRow<'_>, actor_id: Option<&str>) -> Result<UserRecord> {
        let UserRow {
            name,
            password_hash,
            oidc_subject,
            role,
            initial_grant,
            temporary_password,
        } = user;
        let now = self.now();
        let id = new_id();
        let mut w = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO users (id, name, password_hash, oidc_subject, role, locked, must_change_password, created_at) VALUES ($1, $2, $3, $4, $5, 0, $6, $7)",
        )
        .bind(&id)
        .bind(name)
        .bind(password_hash)
        .bind(oidc_subject)
        .bind(role.as_str())
        .bind(temporary_password as i64)
        .bind(now)
        .execute(&mut *w.tx)
        .await
        .map_err(|e| match on_unique(e, "users_name_key", "a user with this name") {
            StoreError::Db(e) => on_unique(e, "users_oidc_subject_key", "a user of this identity"),
            named => named,
        })?;
        if initial_grant != 0 {
            insert_ledger(
                &mut w,
                &id,
                LedgerKind::Grant,
                initial_grant,
                None,
                "starting grant",
                now,
            )
            .await?;
        }
        let detail = match oidc_subject {
            Some(_) => format!("{} (OpenID Connect)", role.as_str()),
            None => role.as_str().to_string(),
        };
        insert_audit(
            &mut w,
            actor_id,
            "user.create",
            &format!("user:{name}"),
            &detail,
            now,
        )
        .await?;
        w.commit().await?;
        Ok(UserRecord {
            id,
            name: name.to_string(),
            password_hash: password_hash.map(str::to_string),
            role,
            locked: false,
            must_change_password: temporary_password,
            deleted: false,
        })
    }

    pub async fn user_by_name(&self, name: &str) -> Result<Option<UserRecord>> {
        let row = sqlx::query(&format!("SELECT {USER_COLUMNS} FROM users WHERE name = $1"))
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| UserRecord::from_row(&r)).transpose()
    }

    pub async fn user_by_id(&self, id: &str) -> Result<Option<UserRecord>> {
        let row = sqlx::query(&format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| UserRecord::from_row(&r)).transpose()
    }

    pub async fn count_users(&self) -> Result<i64> {
        Ok(sqlx::query("SELECT COUNT(*) AS n FROM users")
            .fetch_one(&self.pool)
            .await?
            .try_get("n")?)
    }

    /// Charges a ready session's time only up to `at` when it is settled: nothing ran after it.
    pub async fn charge_until(&self, session_id: &str, at: i64) -> Result<()> {
        let mut w = self.begin_write().await?;
        sqlx::query("UPDATE sessions SET charge_until = $1 WHERE id = $2 AND state = 'ready'")
            .bind(at)
            .bind(session_id)
            .execute(&mut *w.tx)
            .await?;
        w.commit().await?;
        Ok(())
    }

    /// Ready sessions and their editors' addresses.
    pub async fn ready_upstreams(&self) -> Result<std::collections::HashMap<String, String>> {
        let rows = sqlx::query(
            "SELECT id, upstream FROM sessions WHERE state = 'ready' AND upstream IS NOT NULL",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("id")?, r.try_get("upstream")?)))
            .collect()
    }

    pub async fn locked_user_ids(&self) -> Result<std::collections::HashSet<String>> {
        let rows = sqlx::query("SELECT id FROM users WHERE locked = 1")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(|r| Ok(r.try_get("id")?)).collect()
    }

    pub async fn set_locked(
        &self,
        user_id: &str,
        locked: bool,
        actor_id: Option<&str>,
    ) -> Result<()> {
        let mut w = self.begin_write().await?;
        if locked && actor_id.is_some() {
            self.keep_an_admin(&mut w, user_id).await?;
        }
        let done = sqlx::query("UPDATE users SET locked = $1 WHERE id = $2 AND deleted_at IS NULL")
            .bind(locked as i64)
            .bind(user_id)
            .execute(&mut *w.tx)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("user"));
        }
        let action = if locked { "user.lock" } else { "user.unlock" };
        insert_audit(
            &mut w,
            actor_id,
            action,
            &format!("user:{user_id}"),
            "",
            self.now(),
        )
        .await?;
        w.commit().await?;
        Ok(())
    }

    /// Refuses when `user_id` is the only unlocked admin. On PostgreSQL the admins' rows stay
    /// locked until the transaction ends, so two admins demoting each other at once take turns
    /// and the second sees the first's change (SQLite's writers take turns already).
    async fn keep_an_admin(&self, w: &mut WriteTx, user_id: &str) -> Result<()> {
        let target = sqlx::query("SELECT role, locked FROM users WHERE id = $1")
            .bind(user_id)
            .fetch_optional(&mut *w.tx)
            .await?;
        let Some(target) = target else {
            return Err(StoreError::NotFound("user"));
        };
        let role: String = target.try_get("role")?;
        if role != Role::Admin.as_str() || target.try_get::<i64, _>("locked")? != 0 {
            return Ok(());
        }
        // In one order, so that guards running at once wait rather than deadlock; NO KEY, so that
        // rows referring to the admins (ledger, sessions) can still be written meanwhile.
        let lock = match w.kind {
            DbKind::Postgres => " ORDER BY id FOR NO KEY UPDATE",
            DbKind::Sqlite => "",
        };
        let admins = sqlx::query(&format!(
            "SELECT id FROM users WHERE role = 'admin' AND locked = 0{lock}"
        ))
        .fetch_all(&mut *w.tx)
        .await?;
        let ids: Vec<String> = admins
            .iter()
            .map(|r| r.try_get("id"))
            .collect::<Result<_, _>>()?;
        if ids.iter().any(|id| id == user_id) && ids.len() == 1 {
            return Err(StoreError::LastAdmin);
        }
        Ok(())
    }

    /// Takes `admin` off the user's tokens, so that a later promotion does not revive old ones.
    async fn strip_admin_scope(&self, w: &mut WriteTx, user_id: &str) -> Result<()> {
        let tokens = sqlx::query("SELECT id, scopes FROM api_tokens WHERE user_id = $1")
            .bind(user_id)
            .fetch_all(&mut *w.tx)
            .await?;
        for token in &tokens {
            let scopes = scopes_of(token)?;
            if scopes.allows(app::domain::scope::Scope::Admin) {
                let id: String = token.try_get("id")?;
                sqlx::query("UPDATE api_tokens SET scopes = $1 WHERE id = $2")
                    .bind(scopes.without(app::domain::scope::Scope::Admin).to_string())
                    .bind(id)
                    .execute(&mut *w.tx)
                    .await?;
            }
        }
        Ok(())
    }

    /// Keeps a new token's hash; returns the token's id.
    pub async fn create_token(
        &self,
        user_id: &str,
        token_hash: &str,
        label: &str,
        scopes: Scopes,
        expires_at: Option<i64>,
    ) -> Result<String> {
        let now = self.now();
        let id = new_id();
        let mut w = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO api_tokens (id, user_id, token_hash, label, scopes, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&id)
        .bind(user_id)
        .bind(token_hash)
        .bind(label)
        .bind(scopes.to_string())
        .bind(now)
        .bind(expires_at)
        .execute(&mut *w.tx)
        .await?;
        insert_audit(
            &mut w,
            Some(user_id),
            "token.create",
            &format!("user:{user_id}"),
            &format!("{label} ({scopes})"),
            now,
        )
        .await?;
        w.commit().await?;
        Ok(id)
    }

    /// A user's tokens, newest first (their hashes stay here).
    pub async fn tokens_of(&self, user_id: &str) -> Result<Vec<TokenRecord>> {
        let rows = sqlx::query(
            "SELECT id, label, scopes, created_at, expires_at FROM api_tokens WHERE user_id = $1 ORDER BY created_at DESC, id",
        )
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(TokenRecord {
                    id: r.try_get("id")?,
                    label: r.try_get("label")?,
                    scopes: scopes_of(r)?,
                    created_at: r.try_get("created_at")?,
                    expires_at: r.try_get("expires_at")?,
                })
            })
            .collect()
    }

    /// Deletes the user's token `token_id`; false when the user has no such token.
    pub async fn revoke_token(&self, user_id: &str, token_id: &str) -> Result<bool> {
        let mut w = self.begin_write().await?;
        let done = sqlx::query("DELETE FROM api_tokens WHERE id = $1 AND user_id = $2")
            .bind(token_id)
            .bind(user_id)
            .execute(&mut *w.tx)
            .await?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        insert_audit(
            &mut w,
            Some(user_id),
            "token.revoke",
            &format!("token:{token_id}"),
            "",
            self.now(),
        )
        .await?;
        w.commit().await?;
        Ok(true)
    }

    /// The user of an unexpired token, what the token may do and when it expires.
    pub async fn user_by_token_hash(&self, token_hash: &str) -> Result<Option<TokenOwner>> {
        let columns = USER_COLUMNS.replace("id,", "u.id,");
        let row = sqlx::query(&format!(
            "SELECT {columns}, t.scopes, t.expires_at FROM api_tokens t JOIN users u ON u.id = t.user_id
             WHERE t.token_hash = $1 AND (t.expires_at IS NULL OR t.expires_at > $2)"
        ))
        .bind(token_hash)
        .bind(self.now())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            Ok(TokenOwner {
                user: UserRecord::from_row(&r)?,
                scopes: scopes_of(&r)?,
                expires_at: r.try_get("expires_at")?,
            })
        })
        .transpose()
    }

    // ---- credits ----

    pub async fn grant(
        &self,
        user_id: &str,
        amount: i64,
        actor_id: Option<&str>,
        note: &str,
    ) -> Result<i64> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        self.lock_user(&mut w, user_id).await?;
        // Taking credits back stops at zero: the balance is what launches spend.
        if amount < 0 {
            let balance = balance_in(&mut w, user_id).await?;
            if balance + amount < 0 {
                return Err(StoreError::InsufficientCredits {
                    balance,
                    needed: -amount,
                });
            }
        }
        let kind = if amount >= 0 {
            LedgerKind::Grant
        } else {
            LedgerKind::Adjust
        };
        insert_ledger(&mut w, user_id, kind, amount, None, note, now).await?;
        if amount > 0 {
            // A grant answers what the user asked for, whatever its amount.
            answer_credit_request(&mut w, user_id).await?;
        }
        insert_audit(
            &mut w,
            actor_id,
            "credits.grant",
            &format!("user:{user_id}"),
            &grant_detail(amount, note),
            now,
        )
        .await?;
        let balance = balance_in(&mut w, user_id).await?;
        w.commit().await?;
        Ok(balance)
    }

    /// What each of the user's sessions held and was charged (milli-credits, both positive), by
    /// session; only `session_id`'s when given.
    pub async fn session_costs(
        &self,
        user_id: &str,
        session_id: Option<&str>,
    ) -> Result<std::collections::HashMap<String, (i64, i64)>> {
        let one = if session_id.is_some() {
            " AND session_id = $2"
        } else {
            ""
        };
        let sql = format!(
            "SELECT session_id, kind, CAST(SUM(-amount) AS BIGINT) AS total FROM credit_ledger
             WHERE user_id = $1 AND session_id IS NOT NULL AND kind IN ('hold', 'charge'){one}
             GROUP BY session_id, kind"
        );
        let mut query = sqlx::query(&sql).bind(user_id);
        if let Some(session_id) = session_id {
            query = query.bind(session_id);
        }
        let rows = query.fetch_all(&self.pool).await?;
        let mut costs = std::collections::HashMap::<String, (i64, i64)>::new();
        for row in &rows {
            let id: String = row.try_get("session_id")?;
            let kind: String = row.try_get("kind")?;
            let total: i64 = row.try_get("total")?;
            let entry = costs.entry(id).or_default();
            match kind.as_str() {
                "hold" => entry.0 += total,
                _ => entry.1 += total,
            }
        }
        Ok(costs)
    }

    /// (balance, held): the ledger sum, and what live sessions hold of it.
    /// Records the user's ask for `amount` milli-credits, replacing an earlier one; audited.
    pub async fn ask_credits(&self, user_id: &str, amount: i64, note: &str) -> Result<()> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        sqlx::query(
            "UPDATE users SET credit_request_amount = $1, credit_request_note = $2, credit_request_at = $3 WHERE id = $4",
        )
        .bind(amount)
        .bind(note)
        .bind(now)
        .bind(user_id)
        .execute(&mut *w.tx)
        .await?;
        insert_audit(
            &mut w,
            Some(user_id),
            "credits.ask",
            &format!("user:{user_id}"),
            &grant_detail(amount, note),
            now,
        )
        .await?;
        w.commit().await?;
        Ok(())
    }

    /// Closes the user's open ask without a grant: withdrawn by them (`actor_id` is theirs) or
    /// declined by an admin; audited as which. Whether there was one to close.
    pub async fn close_credit_request(&self, user_id: &str, actor_id: &str) -> Result<bool> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        let open = sqlx::query(
            "SELECT credit_request_amount FROM users WHERE id = $1 AND credit_request_amount IS NOT NULL",
        )
        .bind(user_id)
        .fetch_optional(&mut *w.tx)
        .await?;
        let Some(open) = open else {
            return Ok(false);
        };
        let amount: i64 = open.try_get("credit_request_amount")?;
        answer_credit_request(&mut w, user_id).await?;
        let action = if actor_id == user_id {
            "credits.ask_withdrawn"
        } else {
            "credits.ask_declined"
        };
        insert_audit(
            &mut w,
            Some(actor_id),
            action,
            &format!("user:{user_id}"),
            &grant_detail(amount, ""),
            now,
        )
        .await?;
        w.commit().await?;
        Ok(true)
    }

    /// The user's open ask for credits.
    pub async fn credit_request(&self, user_id: &str) -> Result<Option<app::model::CreditRequest>> {
        let row = sqlx::query(
            "SELECT credit_request_amount, credit_request_note, credit_request_at FROM users WHERE id = $1",
        )
        .bind(user_id)
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(row) => credit_request_of(&row),
            None => Ok(None),
        }
    }

    /// Milli-credits charged for sessions, all time, everyone.
    pub async fn charged_total(&self) -> Result<i64> {
        let row = sqlx::query(
            "SELECT CAST(COALESCE(SUM(-amount), 0) AS BIGINT) AS charged FROM credit_ledger WHERE kind = 'charge'",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(row.try_get("charged")?)
    }

    pub async fn credits(&self, user_id: &str) -> Result<(i64, i64)> {
        let row = sqlx::query(
            "SELECT CAST(COALESCE(SUM(amount), 0) AS BIGINT) AS balance FROM credit_ledger WHERE user_id = $1",
        )
        .bind(user_id)
        .fetch_one(&self.pool)
        .await?;
        let balance: i64 = row.try_get("balance")?;
        let row = sqlx::query(
            "SELECT CAST(COALESCE(SUM(-l.amount), 0) AS BIGINT) AS held FROM credit_ledger l
             JOIN sessions s ON s.id = l.session_id
             WHERE l.user_id = $1 AND l.kind = 'hold' AND s.state <> 'ended'",
        )
        .bind(user_id)
        .fetch_one(&self.pool)
        .await?;
        Ok((balance, row.try_get("held")?))
    }

    /// The user's newest `limit` ledger lines, newest first.
    pub async fn recent_ledger(&self, user_id: &str, limit: i64) -> Result<Vec<LedgerEntry>> {
        let rows = sqlx::query(
            "SELECT kind, amount, session_id, note, at FROM credit_ledger WHERE user_id = $1 ORDER BY id DESC LIMIT $2",
        )
        .bind(user_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(LedgerEntry::from_row).collect()
    }

    /// The user's ledger from `since_ms` on, `(at, amount)`, and the balance before it (None
    /// when nothing came before: a new account): a balance line over recent days without
    /// reading the whole history.
    pub async fn ledger_since(
        &self,
        user_id: &str,
        since_ms: i64,
    ) -> Result<(Option<i64>, Vec<(i64, i64)>)> {
        let before = sqlx::query(
            "SELECT CAST(COALESCE(SUM(amount), 0) AS BIGINT) AS balance, CAST(COUNT(*) AS BIGINT) AS lines FROM credit_ledger WHERE user_id = $1 AND at < $2",
        )
        .bind(user_id)
        .bind(since_ms)
        .fetch_one(&self.pool)
        .await?;
        let before = (before.try_get::<i64, _>("lines")? > 0)
            .then(|| before.try_get("balance"))
            .transpose()?;
        let rows = sqlx::query(
            "SELECT at, amount FROM credit_ledger WHERE user_id = $1 AND at >= $2 ORDER BY id",
        )
        .bind(user_id)
        .bind(since_ms)
        .fetch_all(&self.pool)
        .await?;
        let lines = rows
            .iter()
            .map(|r| Ok((r.try_get("at")?, r.try_get("amount")?)))
            .collect::<Result<_>>()?;
        Ok((before, lines))
    }

    pub async fn ledger(&self, user_id: &str) -> Result<Vec<LedgerEntry>> {
        let rows = sqlx::query(
            "SELECT kind, amount, session_id, note, at FROM credit_ledger WHERE user_id = $1 ORDER BY id",
        )
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(LedgerEntry::from_row).collect()
    }

    // ---- pool ----

    /// Makes the slots table match the configured pool; slots no longer configured are
    /// deactivated (kept while a session still holds them).
    pub async fn sync_pool(&self, gpus: &[GpuSpec], slots: &[SlotSpec]) -> Result<()> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        sqlx::query("UPDATE gpus SET active = 0")
            .execute(&mut *w.tx)
            .await?;
        sqlx::query("UPDATE slots SET active = 0")
            .execute(&mut *w.tx)
            .await?;
        for (ordinal, gpu) in gpus.iter().enumerate() {
            sqlx::query(
                "INSERT INTO gpus (id, model, memory_mib, enforced, hold, ordinal, active)
                 VALUES ($1, $2, $3, $4, $5, $6, 1)
                 ON CONFLICT (id) DO UPDATE
                 SET model = $2, memory_mib = $3, enforced = $4, hold = $5, ordinal = $6, active = 1",
            )
            .bind(&gpu.id)
            .bind(&gpu.model)
            .bind(gpu.memory_mib as i64)
            .bind((gpu.hold != SliceHold::None) as i64)
            .bind(gpu.hold.word())
            .bind(ordinal as i64)
            .execute(&mut *w.tx)
            .await?;
        }
        for slot in slots {
            sqlx::query(
                "INSERT INTO slots (id, gpu_id, slice_mib, cores_pct, session_id, active, updated_at)
                 VALUES ($1, $2, $3, $4, NULL, 1, $5)
                 ON CONFLICT (id) DO UPDATE SET gpu_id = $2, slice_mib = $3, cores_pct = $4, active = 1",
            )
            .bind(&slot.id)
            .bind(&slot.gpu_id)
            .bind(slot.slice_mib as i64)
            .bind(slot.cores_pct as i64)
            .bind(now)
            .execute(&mut *w.tx)
            .await?;
        }
        w.commit().await?;
        Ok(())
    }

    pub async fn pool(&self) -> Result<Vec<(GpuRecord, Vec<SlotRecord>)>> {
        let gpus = sqlx::query(
            "SELECT id, model, memory_mib, hold FROM gpus WHERE active = 1 ORDER BY ordinal",
        )
        .fetch_all(&self.pool)
        .await?;
        let slots = sqlx::query(&format!(
            "SELECT {SLOT_COLUMNS} FROM slots WHERE active = 1 ORDER BY id"
        ))
        .fetch_all(&self.pool)
        .await?;
        let slots: Vec<SlotRecord> = slots
            .iter()
            .map(SlotRecord::from_row)
            .collect::<Result<_>>()?;
        gpus.iter()
            .map(|g| {
                let gpu = GpuRecord::from_row(g)?;
                let mine = slots
                    .iter()
                    .filter(|s| s.gpu_id == gpu.id)
                    .cloned()
                    .collect();
                Ok((gpu, mine))
            })
            .collect()
    }

    pub async fn slot(&self, id: &str) -> Result<Option<SlotRecord>> {
        let row = sqlx::query(&format!("SELECT {SLOT_COLUMNS} FROM slots WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| SlotRecord::from_row(&r)).transpose()
    }

    // ---- sessions ----

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
            if guardrails::take_slot_in(&mut w, session_id, slot_id, now).await? {
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
        let row = sqlx::query(&format!("SELECT {SESSION_COLUMNS} FROM sessions s LEFT JOIN slots sl ON sl.id = s.slot_id LEFT JOIN gpus g ON g.id = sl.gpu_id WHERE s.id = $1"))
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

    pub async fn audit(
        &self,
        actor_id: Option<&str>,
        action: &str,
        target: &str,
        detail: &str,
    ) -> Result<()> {
        let mut w = self.begin_write().await?;
        insert_audit(&mut w, actor_id, action, target, detail, self.now()).await?;
        w.commit().await?;
        Ok(())
    }

    pub async fn audit_log(&self, limit: i64) -> Result<Vec<AuditEntry>> {
        let rows = sqlx::query("SELECT at, actor_id, action, target, detail FROM audit_events ORDER BY id DESC LIMIT $1")
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(AuditEntry::from_row).collect()
    }

    pub(crate) fn pool_handle(&self) -> &AnyPool {
        &self.pool
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LedgerKind {
    Grant,
    Hold,
    Charge,
    Refund,
    Adjust,
}

impl LedgerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Grant => "grant",
            Self::Hold => "hold",
            Self::Charge => "charge",
            Self::Refund => "refund",
            Self::Adjust => "adjust",
        }
    }
}

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
/// audit event, inside the launch's transaction.
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

/// Frees the slot and writes the ledger rows of [`app::domain::credits::settlement`].
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

/// A grant's audit line: the amount as the pages write it, and its note.
/// The open ask for credits in a row of `users`, if there is one.
pub(crate) fn credit_request_of(
    row: &sqlx::any::AnyRow,
) -> Result<Option<app::model::CreditRequest>> {
    let amount: Option<i64> = row.try_get("credit_request_amount")?;
    Ok(match amount {
        Some(amount) => Some(app::model::CreditRequest {
            amount,
            note: row
                .try_get::<Option<String>, _>("credit_request_note")?
                .unwrap_or_default(),
            at_ms: row
                .try_get::<Option<i64>, _>("credit_request_at")?
                .unwrap_or_default(),
        }),
        None => None,
    })
}

async fn answer_credit_request(w: &mut WriteTx, user_id: &str) -> Result<()> {
    sqlx::query(
        "UPDATE users SET credit_request_amount = NULL, credit_request_note = NULL, credit_request_at = NULL WHERE id = $1",
    )
    .bind(user_id)
    .execute(&mut *w.tx)
    .await?;
    Ok(())
}

fn grant_detail(amount: i64, note: &str) -> String {
    let sign = if amount > 0 { "+" } else { "" };
    let amount = app::domain::credits::with_unit(amount);
    match note.trim() {
        "" => format!("{sign}{amount}"),
        note => format!("{sign}{amount}: {note}"),
    }
}

async fn settle_in(w: &mut WriteTx, session_id: &str, now: i64) -> Result<()> {
    sqlx::query("UPDATE sessions SET ended_at = $1 WHERE id = $2")
        .bind(now)
        .bind(session_id)
        .execute(&mut *w.tx)
        .await?;
    sqlx::query("UPDATE slots SET session_id = NULL, updated_at = $1 WHERE session_id = $2")
        .bind(now)
        .bind(session_id)
        .execute(&mut *w.tx)
        .await?;
    let row = sqlx::query(
        "SELECT user_id, price_per_hour, ready_at, end_reason, charge_until FROM sessions WHERE id = $1",
    )
    .bind(session_id)
    .fetch_one(&mut *w.tx)
    .await?;
    let user_id: String = row.try_get("user_id")?;
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
        row.try_get("charge_until")?,
        row.try_get::<Option<String>, _>("end_reason")?
            .as_deref()
            .and_then(EndReason::parse),
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
mod tests_promotions;
