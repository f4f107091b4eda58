//! What the store hands out. Built from rows here; the rest of the server never sees a row.

use super::{Result, StoreError};
use app::domain::hold::SliceHold;
use app::domain::launch::EditorKind;
use app::domain::scope::Scopes;
use app::domain::session::{EndReason, SessionState};
use app::model::Role;
use sqlx::Row;
use sqlx::any::AnyRow;

pub(super) const USER_COLUMNS: &str =
    "id, name, password_hash, role, locked, must_change_password, deleted_at";
pub(super) const SLOT_COLUMNS: &str = "id, gpu_id, slice_mib, cores_pct, session_id";
pub(super) const SESSION_COLUMNS: &str = "s.id, s.user_id, s.editor, s.slice_mib, s.duration_minutes, s.price_per_hour, \
    s.slot_id, s.state, s.end_reason, s.detail, s.upstream, s.editor_token, s.runtime_handle, s.created_at, s.ready_at, \
    s.ends_at, s.ended_at, s.last_activity_at, s.queued_at, s.burst, s.last_api_at, s.last_heartbeat_at, s.page_left_at, \
    s.last_input_at, s.last_busy_at, s.gpu_used_mib, s.driver, s.image, s.charge_until, s.idle_timeout_ms, s.parked_at, s.parked_ms, g.model AS gpu_model, g.id AS gpu_id, sl.cores_pct AS cores_pct";

/// The tables a [`SESSION_COLUMNS`] read names.
pub(super) const SESSION_FROM: &str =
    "FROM sessions s LEFT JOIN slots sl ON sl.id = s.slot_id LEFT JOIN gpus g ON g.id = sl.gpu_id";

pub(super) fn bad(what: &'static str) -> StoreError {
    StoreError::NotFound(what)
}

/// A token row's scopes. One the store cannot read gives nothing rather than everything.
pub(super) fn scopes_of(row: &AnyRow) -> Result<Scopes> {
    let text: String = row.try_get("scopes")?;
    Scopes::parse(&text).map_err(|_| bad("token scopes"))
}

pub use app::model::TokenRecord;

/// Whom a token stands for, and what it may do until when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenOwner {
    pub user: UserRecord,
    pub scopes: Scopes,
    pub expires_at: Option<i64>,
}

#[derive(Clone, PartialEq, Eq)]
pub struct UserRecord {
    pub id: String,
    pub name: String,
    pub password_hash: Option<String>,
    pub role: Role,
    pub locked: bool,
    /// The password was set by an admin or printed at the first run: the person changes it
    /// before anything else.
    pub must_change_password: bool,
    /// Deleted by an admin: kept for the history that names it, locked.
    pub deleted: bool,
}

impl std::fmt::Debug for UserRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserRecord")
            .field("id", &self.id)
            .field("name", &self.name)
            .field(
                "password_hash",
                &self.password_hash.as_ref().map(|_| "<redacted>"),
            )
            .field("role", &self.role)
            .field("locked", &self.locked)
            .field("must_change_password", &self.must_change_password)
            .field("deleted", &self.deleted)
            .finish()
    }
}

impl UserRecord {
    pub(super) fn from_row(row: &AnyRow) -> Result<Self> {
        let role: String = row.try_get("role")?;
        Ok(UserRecord {
            id: row.try_get("id")?,
            name: row.try_get("name")?,
            password_hash: row.try_get("password_hash")?,
            role: Role::parse(&role).ok_or(bad("role"))?,
            locked: row.try_get::<i64, _>("locked")? != 0,
            must_change_password: row.try_get::<i64, _>("must_change_password")? != 0,
            deleted: row.try_get::<Option<i64>, _>("deleted_at")?.is_some(),
        })
    }

    /// The user as a viewer whose credential allows `scopes`; `admin` only for an admin (a
    /// token made before a demotion keeps it written, to no effect).
    pub fn viewer(&self, scopes: Scopes) -> app::model::Viewer {
        app::model::Viewer {
            id: self.id.clone(),
            name: self.name.clone(),
            role: self.role,
            scopes: if self.role == Role::Admin {
                scopes
            } else {
                scopes.without(app::domain::scope::Scope::Admin)
            },
            token_expires_at_ms: None,
            must_change_password: false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuRecord {
    pub id: String,
    pub model: String,
    pub memory_mib: u64,
    pub hold: SliceHold,
}

impl GpuRecord {
    pub(super) fn from_row(row: &AnyRow) -> Result<Self> {
        Ok(GpuRecord {
            id: row.try_get("id")?,
            model: row.try_get("model")?,
            memory_mib: row.try_get::<i64, _>("memory_mib")? as u64,
            hold: SliceHold::from_word(&row.try_get::<String, _>("hold")?).unwrap_or_default(),
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotRecord {
    pub id: String,
    pub gpu_id: String,
    pub slice_mib: u64,
    pub cores_pct: u32,
    pub session_id: Option<String>,
}

impl SlotRecord {
    pub(super) fn from_row(row: &AnyRow) -> Result<Self> {
        Ok(SlotRecord {
            id: row.try_get("id")?,
            gpu_id: row.try_get("gpu_id")?,
            slice_mib: row.try_get::<i64, _>("slice_mib")? as u64,
            cores_pct: row.try_get::<i64, _>("cores_pct")? as u32,
            session_id: row.try_get("session_id")?,
        })
    }
}

#[derive(Clone, PartialEq)]
pub struct SessionRecord {
    pub id: String,
    pub user_id: String,
    pub editor: EditorKind,
    pub slice_mib: u64,
    pub duration_minutes: u32,
    pub price_per_hour: i64,
    pub slot_id: Option<String>,
    pub gpu_id: Option<String>,
    pub gpu_model: Option<String>,
    pub cores_pct: Option<u32>,
    pub state: SessionState,
    pub end_reason: Option<EndReason>,
    pub detail: Option<String>,
    /// host:port of the editor, for the proxy.
    pub upstream: Option<String>,
    /// The secret the proxy presents to the editor.
    pub editor_token: Option<String>,
    /// The runtime's own note of what it started (pid, pod name).
    pub runtime_handle: Option<String>,
    pub created_at: i64,
    pub ready_at: Option<i64>,
    pub ends_at: Option<i64>,
    pub ended_at: Option<i64>,
    pub last_activity_at: i64,
    pub queued_at: Option<i64>,
    /// Holds a whole card.
    pub burst: bool,
    pub last_api_at: Option<i64>,
    pub last_heartbeat_at: Option<i64>,
    /// When a page of the session last said it went out of sight.
    pub page_left_at: Option<i64>,
    pub last_input_at: Option<i64>,
    pub last_busy_at: Option<i64>,
    pub gpu_used_mib: Option<u64>,
    /// The server whose task drives this session's launch (see the service's recovery at start-up).
    pub driver: Option<String>,
    /// The image chosen at launch (its reference); None for the configured default.
    pub image: Option<String>,
    /// Set when nobody watched it to its end: it is charged until then (`credits::settlement`).
    pub charge_until: Option<i64>,
    /// The idle timeout its person chose at launch; None: its size's.
    pub idle_timeout_ms: Option<i64>,
    /// When it was parked (its slot given back, its editor frozen), while it is.
    pub parked_at: Option<i64>,
    /// How long it was parked before that: time not charged.
    pub parked_ms: i64,
}

impl SessionRecord {
    /// Its time parked, which is not charged.
    pub fn parked(&self) -> app::domain::credits::Parked {
        app::domain::credits::Parked {
            before_ms: self.parked_ms,
            since: self.parked_at,
        }
    }

    /// What the idle policy looks at.
    pub fn signals(&self) -> app::domain::idle::Signals {
        app::domain::idle::Signals {
            ready_at: self.ready_at.unwrap_or(self.created_at),
            traffic: Some(self.last_activity_at),
            api_traffic: self.last_api_at,
            heartbeat: self.last_heartbeat_at,
            page_left: self.page_left_at,
            input: self.last_input_at,
            busy: self.last_busy_at,
        }
    }
}

impl std::fmt::Debug for SessionRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionRecord")
            .field("id", &self.id)
            .field("user_id", &self.user_id)
            .field("editor", &self.editor)
            .field("state", &self.state)
            .field("slot_id", &self.slot_id)
            .field("upstream", &self.upstream)
            .field(
                "editor_token",
                &self.editor_token.as_ref().map(|_| "<redacted>"),
            )
            .finish_non_exhaustive()
    }
}

impl SessionRecord {
    pub(super) fn from_row(row: &AnyRow) -> Result<Self> {
        let editor: String = row.try_get("editor")?;
        let state: String = row.try_get("state")?;
        let reason: Option<String> = row.try_get("end_reason")?;
        Ok(SessionRecord {
            id: row.try_get("id")?,
            user_id: row.try_get("user_id")?,
            editor: EditorKind::parse(&editor).ok_or(bad("editor"))?,
            slice_mib: row.try_get::<i64, _>("slice_mib")? as u64,
            duration_minutes: row.try_get::<i64, _>("duration_minutes")? as u32,
            price_per_hour: row.try_get("price_per_hour")?,
            slot_id: row.try_get("slot_id")?,
            gpu_id: row.try_get("gpu_id")?,
            gpu_model: row.try_get("gpu_model")?,
            cores_pct: row
                .try_get::<Option<i64>, _>("cores_pct")?
                .map(|c| c as u32),
            state: SessionState::parse(&state).ok_or(bad("session state"))?,
            end_reason: reason.as_deref().and_then(EndReason::parse),
            detail: row.try_get("detail")?,
            upstream: row.try_get("upstream")?,
            editor_token: row.try_get("editor_token")?,
            runtime_handle: row.try_get("runtime_handle")?,
            created_at: row.try_get("created_at")?,
            ready_at: row.try_get("ready_at")?,
            ends_at: row.try_get("ends_at")?,
            ended_at: row.try_get("ended_at")?,
            last_activity_at: row.try_get("last_activity_at")?,
            queued_at: row.try_get("queued_at")?,
            burst: row.try_get::<i64, _>("burst")? != 0,
            last_api_at: row.try_get("last_api_at")?,
            last_heartbeat_at: row.try_get("last_heartbeat_at")?,
            page_left_at: row.try_get("page_left_at")?,
            last_input_at: row.try_get("last_input_at")?,
            last_busy_at: row.try_get("last_busy_at")?,
            gpu_used_mib: row
                .try_get::<Option<i64>, _>("gpu_used_mib")?
                .map(|m| m as u64),
            driver: row.try_get("driver")?,
            image: row.try_get("image")?,
            charge_until: row.try_get("charge_until")?,
            idle_timeout_ms: row.try_get("idle_timeout_ms")?,
            parked_at: row.try_get("parked_at")?,
            parked_ms: row.try_get("parked_ms")?,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerEntry {
    pub kind: String,
    pub amount: i64,
    pub session_id: Option<String>,
    pub note: String,
    pub at: i64,
}

impl LedgerEntry {
    pub(super) fn from_row(row: &AnyRow) -> Result<Self> {
        Ok(LedgerEntry {
            kind: row.try_get("kind")?,
            amount: row.try_get("amount")?,
            session_id: row.try_get("session_id")?,
            note: row.try_get("note")?,
            at: row.try_get("at")?,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    pub at: i64,
    pub actor_id: Option<String>,
    pub action: String,
    pub target: String,
    pub detail: String,
}

impl AuditEntry {
    pub(super) fn from_row(row: &AnyRow) -> Result<Self> {
        Ok(AuditEntry {
            at: row.try_get("at")?,
            actor_id: row.try_get("actor_id")?,
            action: row.try_get("action")?,
            target: row.try_get("target")?,
            detail: row.try_get("detail")?,
        })
    }
}

/// An editor started ahead of demand on a slot.
#[derive(Clone)]
pub struct WarmRecord {
    /// Also the id of the session that takes it over: the editor serves under `/s/<id>/`.
    pub id: String,
    pub slot_id: String,
    pub editor: EditorKind,
    pub slice_mib: u64,
    pub ready: bool,
    pub upstream: Option<String>,
    pub editor_token: Option<String>,
    pub runtime_handle: Option<String>,
    /// The one user whose launch may take it (a cluster's pod in their namespace); None: anyone's.
    pub user_id: Option<String>,
}

impl std::fmt::Debug for WarmRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmRecord")
            .field("id", &self.id)
            .field("slot_id", &self.slot_id)
            .field("editor", &self.editor)
            .field("ready", &self.ready)
            .finish_non_exhaustive()
    }
}

pub(super) const WARM_COLUMNS: &str = "w.id, w.slot_id, w.editor, w.state, w.upstream, w.editor_token, w.runtime_handle, w.user_id, sl.slice_mib";

impl WarmRecord {
    pub(super) fn from_row(row: &AnyRow) -> Result<Self> {
        let editor: String = row.try_get("editor")?;
        let state: String = row.try_get("state")?;
        Ok(WarmRecord {
            id: row.try_get("id")?,
            slot_id: row.try_get("slot_id")?,
            editor: EditorKind::parse(&editor).ok_or(bad("editor"))?,
            slice_mib: row.try_get::<i64, _>("slice_mib")? as u64,
            ready: state == "ready",
            upstream: row.try_get("upstream")?,
            editor_token: row.try_get("editor_token")?,
            runtime_handle: row.try_get("runtime_handle")?,
            user_id: row.try_get("user_id")?,
        })
    }
}
