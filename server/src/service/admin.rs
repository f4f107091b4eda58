//! What admins do: see every user, session and slot, the usage and the audit log; change roles,
//! lock accounts, grant credits, set quotas, stop anyone's session, enter a user's editor. Every
//! function checks the role and the scope `admin` itself ([`require_admin`]), so the pages
//! (`/admin`, `app::ui::admin`) and the REST API (`/api/v1/admin/…`) refuse alike; the page is for
//! display, never the check. A browser's sign-in carries `admin` only for 15 minutes after its
//! person confirmed (`service::accounts`). Every change is audited with the acting admin
//! (`user.create`, `user.password_reset`, `user.delete`, `user.role`, `user.lock`, `user.unlock`, `credits.grant`, `quota.set`, `session.stop`,
//! `session.access`; a CSV file's adds and grants as `user.create` and `credits.grant`, with its line); the audit log shows the actor's and the target user's names, read for the
//! page's ids in one query.
//!
//! Tables: the query string or the server function's arguments become a `Listing` of checked values
//! (`app::domain::listing`: a page within bounds, a sort column from a closed enum, a filter from a
//! closed set, search text bounded and without control characters), which the store
//! (`store/admin.rs`) turns into SQL from fixed fragments and bound values only. The search is
//! `LOWER(column) LIKE $n ESCAPE '\'` with `%`, `_` and `\` escaped and the text lowercased as that
//! database's `LOWER` does: all of Unicode on PostgreSQL, ASCII only on SQLite, so "Émile" finds
//! Émile on both, but on SQLite a differently cased non-ASCII letter does not match. Names sort by
//! `LOWER(name)`, with `COLLATE "C"` on PostgreSQL, whose default collation follows the server's
//! locale. A page's count is a second `COUNT(*)` under the same conditions.
//!
//! Changes: an admin cannot demote or lock themselves, nor the last unlocked admin. The store
//! counts the admins inside the change's transaction, their rows locked on PostgreSQL, so two
//! admins demoting each other at once take turns and one stays; the command line and the provider's
//! groups are exempt, being how an operator recovers. A demotion takes `admin` off the user's
//! tokens, so a later promotion does not revive them; a change of role or lock drops the user's
//! cached sign-ins, so it applies to their next request. Taking credits back stops at zero inside
//! the grant's transaction (the same user lock as launches), so it cannot race a launch into a
//! negative balance. An admin's stop ends the session with the reason `admin`, and the user's page
//! says who stopped it.
//!
//! Entering a user's editor is an explicit, audited choice; being an admin opens nothing at the
//! proxy. [`Admin::admin_open_editor`] (`POST /api/v1/admin/sessions/{id}/access`, "Enter editor"
//! on the Sessions tab) writes a grant for that admin and session (`editor_grants`, migration 0009)
//! that lasts 15 minutes (`EDITOR_ACCESS_MINUTES`), with its `session.access` audit line, against
//! the user, in the same transaction; a session that is not running is refused (409). The proxy
//! honours it ([`Admin::admin_entry`]) only for a caller who is not the owner, is an admin, carries
//! `admin` now and came with a bearer token. Never with the browser's cookie: editors share our
//! origin, so the user's editor page, whose code the user controls (an extension in their workspace
//! will do), would run in the admin's browser with the admin's sign-in and could call the admin API
//! as them. With `proxy.entry_origin` set (another host name of this server) the grant also gives
//! a one-time link there, good for a minute ([`Admin::enter_by_ticket`], migration 0020): it
//! becomes a token of the admin's own, kept in an HttpOnly cookie of that origin for the session's
//! path only, so the user's page runs in an origin where no sign-in of ours lives. The grant
//! lives in the database, so every replica honours it. The admin's WebSocket closes when the grant
//! ends or their credential stops standing for an admin; their traffic never counts as the
//! session's activity; and the owner's view carries `admin_access` (the admin's name, until when)
//! while a grant runs.
//!
//! Usage and cost come from what the product records anyway: the sessions there during the period,
//! their ready time clipped to it (up to now for running ones; weighted by slice size for
//! GiB-hours; `CASE` rather than `GREATEST`/`MAX`, which the two databases spell apart), the
//! ledger's charges in the period, and the running sums the sampler adds to each session at every
//! reading (readings, utilization and memory; migration 0007), so averages need no table of
//! samples. A GPU that is never read shows "not measured" rather than zero. Settings are read-only
//! (`config::settings`): the loaded configuration and what the server found at start (GPUs,
//! enforcement, editors), the database named by its kind and the provider by issuer and client, so
//! no secret reaches the page (a unit test looks for them). Changing them stays a file edit and a
//! restart, where a mistake is refused at start with the key's name.

use super::Accounts;
use crate::identity::auth;
use crate::store::{BulkAdd, BulkGrant, StoreError};
use app::domain::listing::{ListQuery, Listing, Page};
use app::domain::quota::{Limits, Offered, Overrides, OverridesChange};
use app::domain::scope::{Scope, Scopes};
use app::domain::session::{EndReason, SessionState};
use app::domain::usage::{self, UsageDay};
use app::domain::{bulk, credits};
use app::error::AppError;
use app::model::{
    AdminGpu, AdminQueued, AdminSession, AdminUser, AuditLine, BulkUsers, EditorAccess,
    MadePassword, NewAccount, Role, SettingsSection, UsageRow, UserChange, Viewer,
};

/// How long an entry link works: enough to click it, too short to be worth keeping.
const ENTRY_TICKET_MS: i64 = 60_000;

/// What a spent, late or unknown entry link answers.
pub const ENTRY_REFUSED: &str =
    "this entry link is used up or has expired: press Enter editor again on the admin page";

/// An entry ticket redeemed: the token the entry origin keeps, for which session, until when.
pub struct Entered {
    pub session_id: String,
    pub token: String,
    pub until: i64,
}

/// Refuses anyone but an admin whose credential carries `admin`.
pub fn require_admin(viewer: &Viewer) -> Result<(), AppError> {
    if viewer.role != Role::Admin {
        return Err(AppError::Forbidden("this is for admins only".into()));
    }
    if viewer.scopes.allows(Scope::Admin) {
        Ok(())
    } else {
        Err(AppError::Forbidden(format!(
            "admin actions take a recent confirmation: enter your password on the admin page (it lasts {} minutes), or use a token with the scope `admin`",
            crate::identity::auth::ADMIN_CONFIRMATION_MS / 60_000
        )))
    }
}

/// The admin pages' operations: users, credits, quotas, everyone's sessions, the pool.
#[derive(Clone)]
pub struct Admin {
    pub(in crate::service) accounts: Accounts,
    pub(in crate::service) auth: std::sync::Arc<crate::identity::auth::Authenticator>,
    pub(in crate::service) background: tokio::runtime::Handle,
    pub(in crate::service) backup: std::sync::Arc<super::backups::BackupState>,
    pub(in crate::service) config: std::sync::Arc<crate::config::Config>,
    pub(in crate::service) enforcement: crate::runtime::gpu::Enforcement,
    pub(in crate::service) gpus: std::sync::Arc<Vec<app::domain::pool::GpuSpec>>,
    pub(in crate::service) lifecycle: std::sync::Arc<super::lifecycle::Lifecycle>,
    pub(in crate::service) runtime: std::sync::Arc<dyn crate::runtime::Runtime>,
    pub(in crate::service) store: crate::store::Store,
}

impl Admin {
    pub(in crate::service) fn new(
        handles: &super::handles::Handles,
        accounts: Accounts,
        lifecycle: std::sync::Arc<super::lifecycle::Lifecycle>,
    ) -> Admin {
        Admin {
            accounts,
            auth: handles.auth.clone(),
            background: handles.background.clone(),
            backup: handles.backup.clone(),
            config: handles.config.clone(),
            enforcement: handles.enforcement.clone(),
            gpus: handles.gpus.clone(),
            lifecycle,
            runtime: handles.runtime.clone(),
            store: handles.store.clone(),
        }
    }
}

impl Admin {
    pub async fn admin_users(
        &self,
        viewer: &Viewer,
        query: &ListQuery,
    ) -> Result<Page<AdminUser>, AppError> {
        require_admin(viewer)?;
        let defaults = self.config.default_limits();
        let mut page = self
            .store
            .admin_users(&Listing::users(query)?, defaults)
            .await?;
        let grace = self.config.accounts.grace_ms();
        for user in &mut page.items {
            user.is_you = user.id == viewer.id;
            user.storage_removed_at_ms = user.storage_removed_at_ms.map(|deleted| deleted + grace);
        }
        Ok(page)
    }

    pub async fn admin_sessions(
        &self,
        viewer: &Viewer,
        query: &ListQuery,
    ) -> Result<Page<AdminSession>, AppError> {
        require_admin(viewer)?;
        Ok(self
            .store
            .admin_sessions(&Listing::sessions(query)?)
            .await?)
    }

    pub async fn admin_audit(
        &self,
        viewer: &Viewer,
        query: &ListQuery,
    ) -> Result<Page<AuditLine>, AppError> {
        require_admin(viewer)?;
        Ok(self.store.admin_audit(&Listing::audit(query)?).await?)
    }

    pub async fn admin_usage(
        &self,
        viewer: &Viewer,
        query: &ListQuery,
    ) -> Result<Page<UsageRow>, AppError> {
        require_admin(viewer)?;
        Ok(self
            .store
            .admin_usage(&Listing::usage(query)?, self.store.now())
            .await?)
    }

    /// Everyone's usage per day over the tab's period: allocated against busy, launches, waits.
    pub async fn admin_usage_days(
        &self,
        viewer: &Viewer,
        query: &ListQuery,
    ) -> Result<Vec<UsageDay>, AppError> {
        require_admin(viewer)?;
        let now = self.store.now();
        // The period's days, today included: "7d" is today and the six before it.
        let since = usage::day_of(Listing::usage(query)?.filter.since_ms(now)) + usage::DAY_MS;
        let (spans, busy) = self.store.usage_spans(None, since, now).await?;
        Ok(usage::per_day(&spans, &busy, since, now))
    }

    pub async fn admin_session(
        &self,
        viewer: &Viewer,
        session_id: &str,
    ) -> Result<AdminSession, AppError> {
        require_admin(viewer)?;
        self.store
            .admin_session(session_id)
            .await?
            .ok_or(AppError::NotFound)
    }

    /// Lets the admin into a running session's editor for a while, by explicit choice: the
    /// proxy answers them only while the grant lasts, and the entry is audited.
    pub async fn admin_open_editor(
        &self,
        viewer: &Viewer,
        session_id: &str,
    ) -> Result<EditorAccess, AppError> {
        require_admin(viewer)?;
        let session = self
            .store
            .session(session_id)
            .await?
            .ok_or(AppError::NotFound)?;
        if session.state != app::domain::session::SessionState::Ready {
            return Err(AppError::Conflict(format!(
                "this session's editor is not running (the session is {})",
                session.state.as_str()
            )));
        }
        let expires_at_ms =
            self.store.now() + app::domain::scope::EDITOR_ACCESS_MINUTES * 60 * 1000;
        self.store
            .grant_editor_access(session_id, &viewer.id, &session.user_id, expires_at_ms)
            .await?;
        let entry_url = match &self.config.proxy.entry_origin {
            Some(origin) => {
                let ticket = auth::random_secret(24);
                let valid_until = self.store.now() + ENTRY_TICKET_MS;
                self.store
                    .add_entry_ticket(
                        &auth::token_hash(&ticket),
                        &viewer.id,
                        session_id,
                        valid_until,
                    )
                    .await?;
                Some(format!("{}/enter/{ticket}", origin.trim_end_matches('/')))
            }
            None => None,
        };
        Ok(EditorAccess {
            url: format!("/s/{session_id}/"),
            expires_at_ms,
            entry_url,
        })
    }

    /// Redeems an entry ticket on the entry origin: a token of the admin's own (scopes `access`
    /// and `admin`, ending with the grant, in their token list where they may revoke it), which
    /// that origin keeps in a cookie for the session's path only. Refused once used, after a
    /// minute, or when the admin is no longer one or the grant ended.
    pub async fn enter_by_ticket(&self, ticket: &str) -> Result<Entered, AppError> {
        let refused = || AppError::Forbidden(ENTRY_REFUSED.into());
        let (admin_id, session_id) = self
            .store
            .take_entry_ticket(&auth::token_hash(ticket))
            .await?
            .ok_or_else(refused)?;
        let admin = self
            .store
            .user_by_id(&admin_id)
            .await?
            .filter(|u| u.role == Role::Admin && !u.locked)
            .ok_or_else(refused)?;
        let until = self
            .store
            .editor_access_until(&session_id, &admin.id)
            .await?
            .ok_or_else(refused)?;
        let short: String = session_id.chars().take(8).collect();
        let (token, hash) = auth::new_api_token();
        self.store
            .create_token(
                &admin.id,
                &hash,
                &format!("entered session {short}"),
                Scopes::of(&[Scope::Access, Scope::Admin]),
                Some(until),
            )
            .await?;
        Ok(Entered {
            session_id,
            token,
            until,
        })
    }

    /// Until when this caller, not the session's owner, may use its editor: an admin, acting
    /// as one now, with a running grant of their own, and by a bearer token only. A browser
    /// never: editors share our origin, so the user's editor page (its code is theirs to
    /// change) would run in the admin's browser with the admin's cookie.
    pub async fn admin_entry(
        &self,
        caller: &crate::identity::auth::Caller,
        session_id: &str,
        by_token: bool,
    ) -> Option<i64> {
        if !by_token || caller.user.role != Role::Admin || !caller.scopes().allows(Scope::Admin) {
            return None;
        }
        match self
            .store
            .editor_access_until(session_id, &caller.user.id)
            .await
        {
            Ok(until) => until,
            Err(e) => {
                tracing::error!(error = %e, "reading an editor grant");
                None
            }
        }
    }

    pub async fn admin_pool(&self, viewer: &Viewer) -> Result<Vec<AdminGpu>, AppError> {
        require_admin(viewer)?;
        Ok(self.store.admin_pool().await?)
    }

    /// Every launch waiting in the queue, in order of size and place, with who waits and when it
    /// should start.
    pub async fn admin_queue(&self, viewer: &Viewer) -> Result<Vec<AdminQueued>, AppError> {
        require_admin(viewer)?;
        let positions = self.store.queue_positions().await?;
        if positions.is_empty() {
            return Ok(Vec::new());
        }
        let live = self.store.live_sessions().await?;
        let pool = self.store.pool().await?;
        let holders = (live, pool, self.store.warm_editors().await?);
        let live = &holders.0;
        let user_ids: Vec<&str> = live
            .iter()
            .filter(|r| r.state == SessionState::Queued)
            .map(|r| r.user_id.as_str())
            .collect();
        let names = self.store.user_names(&user_ids).await?;
        Ok(positions
            .into_iter()
            .filter_map(|(id, _, _, position)| {
                let record = live.iter().find(|r| r.id == id)?;
                Some(AdminQueued {
                    session_id: id,
                    user_name: names.get(&record.user_id).cloned().unwrap_or_default(),
                    editor: record.editor,
                    slice_mib: record.slice_mib,
                    burst: record.burst,
                    position,
                    queued_at_ms: record.queued_at.unwrap_or(record.created_at),
                    eta_ms: self.lifecycle.queue_eta(&holders, record, position),
                })
            })
            .collect())
    }

    /// The configuration the server runs with, in words: what admins ask about when a launch
    /// is refused or a session ends. Secrets (the provider's client secret, the database's
    /// password) are never part of it.
    pub fn admin_settings(&self, viewer: &Viewer) -> Result<Vec<SettingsSection>, AppError> {
        require_admin(viewer)?;
        Ok(crate::config::settings::settings(
            &self.config,
            &self.gpus,
            &self.enforcement.describe(),
            &self.runtime.availability(),
            // What does not hold here is said beside what does (a warm pool off, say, and why).
            &self
                .runtime
                .isolation()
                .map(|isolation| match self.runtime.isolation_gaps() {
                    Some(gaps) => format!("{isolation}. {gaps}"),
                    None => isolation,
                }),
        )
        .into_iter()
        .chain(super::backups::last_runs_section(
            &self.config,
            &self.backup,
        ))
        .collect())
    }

    /// Changes a user's role or lock. An admin cannot demote or lock themselves, so that some
    /// admin always remains to undo a mistake.
    pub async fn change_user(
        &self,
        viewer: &Viewer,
        user_id: &str,
        change: &UserChange,
    ) -> Result<(), AppError> {
        require_admin(viewer)?;
        if change.role.is_none() && change.locked.is_none() {
            return Err(AppError::Invalid(
                "say what to change: `role` (user or admin) or `locked` (true or false)".into(),
            ));
        }
        let user = self
            .store
            .user_by_id(user_id)
            .await?
            .ok_or(AppError::NotFound)?;
        if user.id == viewer.id && (change.role == Some(Role::User) || change.locked == Some(true))
        {
            return Err(AppError::Forbidden(
                "you cannot take away your own admin role or lock yourself out; ask another admin"
                    .into(),
            ));
        }
        let changed = async {
            if let Some(role) = change.role.filter(|role| *role != user.role) {
                let why = format!("by {}", viewer.name);
                self.store
                    .set_role(&user.id, role, Some(&viewer.id), &why)
                    .await?;
            }
            if let Some(locked) = change.locked.filter(|locked| *locked != user.locked) {
                self.accounts
                    .set_locked(&user.id, locked, Some(&viewer.id))
                    .await?;
            }
            Ok::<_, AppError>(())
        }
        .await;
        // Cached sign-ins carry the old role and lock, whatever part of the change was made.
        self.auth.forget_user(&user.id);
        changed
    }

    /// Another account than the admin's own (`not_yourself` says why not), not deleted.
    async fn another_account(
        &self,
        viewer: &Viewer,
        user_id: &str,
        not_yourself: &str,
    ) -> Result<crate::store::UserRecord, AppError> {
        require_admin(viewer)?;
        if user_id == viewer.id {
            return Err(AppError::Forbidden(not_yourself.into()));
        }
        self.store
            .user_by_id(user_id)
            .await?
            .filter(|user| !user.deleted)
            .ok_or(AppError::NotFound)
    }

    /// Adds a local account with the password the admin gave, or one made here; its person
    /// changes it at their first sign-in. Audited (`user.create`, with the admin).
    pub async fn admin_add_user(
        &self,
        viewer: &Viewer,
        account: NewAccount,
    ) -> Result<MadePassword, AppError> {
        require_admin(viewer)?;
        let password = account
            .password
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| crate::identity::auth::random_secret(9));
        let user = self
            .accounts
            .create_user_with_temporary_password(
                &account.name,
                &password,
                account.role,
                Some(&viewer.id),
            )
            .await?;
        Ok(MadePassword {
            user_id: user.id,
            name: user.name,
            password,
        })
    }

    /// Adds and grants to the accounts a CSV file names (`app::domain::bulk`): the plan, or
    /// every bad line, when `apply` is false; else all of it in one transaction, or nothing,
    /// refused with every bad line named. Audited line by line as single adds and grants are
    /// (`user.create`, `credits.grant`), with the file's line. Each added account gets a
    /// password made here, shown this once, and the starting grant.
    pub async fn bulk_users(
        &self,
        viewer: &Viewer,
        csv: &str,
        apply: bool,
    ) -> Result<BulkUsers, AppError> {
        require_admin(viewer)?;
        let refused = |problems: Vec<bulk::Problem>| {
            if apply {
                Err(AppError::Invalid(bulk::describe(&problems)))
            } else {
                Ok(BulkUsers {
                    problems,
                    ..BulkUsers::default()
                })
            }
        };
        let rows = match bulk::parse(csv) {
            Ok(rows) => rows,
            Err(problems) => return refused(problems),
        };
        let mut existing = std::collections::HashMap::new();
        for row in &rows {
            if let Some(user) = self.store.user_by_name(&row.name).await? {
                let balance = if row.credits < 0 {
                    self.store.credits(&user.id).await?.0
                } else {
                    0
                };
                let account = bulk::Existing {
                    admin: user.role == Role::Admin,
                    deleted: user.deleted,
                    balance,
                };
                existing.insert(row.name.clone(), (user.id, account));
            }
        }
        let planned = match bulk::plan(rows, |name| existing.get(name).map(|(_, a)| *a)) {
            Ok(planned) => planned,
            Err(problems) => return refused(problems),
        };
        if !apply {
            return Ok(BulkUsers {
                planned,
                ..BulkUsers::default()
            });
        }
        let adding: Vec<&bulk::Planned> = planned
            .iter()
            .filter(|p| matches!(p.action, bulk::Action::Add { .. }))
            .collect();
        if !adding.is_empty() {
            self.accounts.check_one_account_unisolated().await?;
        }
        let passwords: Vec<String> = adding
            .iter()
            .map(|_| crate::identity::auth::random_secret(9))
            .collect();
        // Argon2 is slow on purpose: off the async threads, all in one task.
        let to_hash = passwords.clone();
        let hashes = tokio::task::spawn_blocking(move || {
            to_hash
                .iter()
                .map(|p| crate::identity::auth::hash_password(p))
                .collect::<Result<Vec<_>, _>>()
        })
        .await
        .map_err(|_| AppError::Internal)?
        .map_err(|_| AppError::Internal)?;
        let notes: Vec<String> = planned
            .iter()
            .map(|p| match p.note.as_str() {
                "" => format!("granted by {} (CSV file)", viewer.name),
                note => format!("granted by {} (CSV file): {note}", viewer.name),
            })
            .collect();
        let note_of = |line: usize| {
            planned
                .iter()
                .position(|p| p.line == line)
                .map_or("", |i| notes[i].as_str())
        };
        let adds: Vec<BulkAdd<'_>> = adding
            .iter()
            .zip(&hashes)
            .map(|(p, hash)| BulkAdd {
                name: &p.name,
                password_hash: hash,
                role: match p.action {
                    bulk::Action::Add { admin: true } => Role::Admin,
                    _ => Role::User,
                },
                initial_grant: self.config.initial_grant(),
                credits: p.credits,
                note: note_of(p.line),
                line: p.line,
            })
            .collect();
        let grants: Vec<BulkGrant<'_>> = planned
            .iter()
            .filter(|p| p.action == bulk::Action::Grant)
            .filter_map(|p| {
                Some(BulkGrant {
                    user_id: existing.get(&p.name)?.0.as_str(),
                    credits: p.credits,
                    note: note_of(p.line),
                    line: p.line,
                })
            })
            .collect();
        let ids = match self.store.bulk_users(&adds, &grants, &viewer.id).await {
            Ok(ids) => ids,
            Err(StoreError::Duplicate(_)) => {
                return Err(AppError::Conflict(
                    "an account the file adds was made meanwhile; nothing was added or granted: check the file again".into(),
                ));
            }
            Err(StoreError::InsufficientCredits { .. }) => {
                return Err(AppError::Conflict(
                    "a balance the file takes back from was spent meanwhile; nothing was added or granted: check the file again".into(),
                ));
            }
            Err(other) => return Err(other.into()),
        };
        let passwords = adding
            .iter()
            .zip(ids)
            .zip(passwords)
            .map(|((p, user_id), password)| MadePassword {
                user_id,
                name: p.name.clone(),
                password,
            })
            .collect();
        Ok(BulkUsers {
            planned,
            problems: Vec::new(),
            applied: true,
            passwords,
        })
    }

    /// How many people wait for an answer to their ask for credits.
    pub async fn open_credit_requests(&self, viewer: &Viewer) -> Result<u32, AppError> {
        require_admin(viewer)?;
        Ok(self.store.open_credit_requests().await? as u32)
    }

    /// Gives a local account a new password made here, to hand over once; its person changes
    /// it at their next sign-in. Their other sign-ins end, and their tokens stay.
    pub async fn admin_reset_password(
        &self,
        viewer: &Viewer,
        user_id: &str,
    ) -> Result<MadePassword, AppError> {
        let user = self
            .another_account(
                viewer,
                user_id,
                "change your own password on your account page",
            )
            .await?;
        if user.password_hash.is_none() {
            return Err(AppError::Invalid(format!(
                "{} signs in with single sign-on and has no password here",
                user.name
            )));
        }
        let password = crate::identity::auth::random_secret(9);
        let hash =
            crate::identity::auth::hash_password(&password).map_err(|_| AppError::Internal)?;
        self.store
            .set_password(&user.id, &hash, true, Some(&viewer.id))
            .await?;
        self.auth.forget_user(&user.id);
        Ok(MadePassword {
            user_id: user.id,
            name: user.name,
            password,
        })
    }

    /// Deletes an account: it can no longer sign in, its tokens are gone, its live sessions end
    /// (refunded as any stop), and it leaves the users list. Its history (ledger, sessions,
    /// audit) stays, and so does its workspace, for an operator to keep or remove; its name
    /// stays taken so that nobody inherits those files. Never yourself, nor the last admin.
    pub async fn admin_delete_user(&self, viewer: &Viewer, user_id: &str) -> Result<(), AppError> {
        let user = self
            .another_account(
                viewer,
                user_id,
                "you cannot delete your own account; ask another admin",
            )
            .await?;
        self.store.delete_user(&user.id, Some(&viewer.id)).await?;
        self.auth.forget_user(&user.id);
        let live: Vec<String> = self
            .store
            .sessions_of(&user.id, 1000)
            .await?
            .into_iter()
            .filter(|session| session.state.is_live())
            .map(|session| session.id)
            .collect();
        // Their own task: a client that disconnects must not leave them half-stopped.
        let this = self.clone();
        let detail = format!("the account was deleted by the admin {}", viewer.name);
        self.background
            .spawn(async move {
                for id in live {
                    this.lifecycle
                        .try_stop_session(&id, EndReason::Admin, Some(&detail))
                        .await?;
                }
                Ok::<_, AppError>(())
            })
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "stop task");
                AppError::Internal
            })??;
        Ok(())
    }

    /// Sets a user's quota overrides (each `None` back to the configured default); returns the
    /// limits that apply now.
    pub async fn set_user_quota(
        &self,
        viewer: &Viewer,
        user_id: &str,
        overrides: &Overrides,
    ) -> Result<Limits, AppError> {
        require_admin(viewer)?;
        self.replace_quota(Some(viewer), user_id, overrides).await
    }

    /// Replaces a user's overrides; `actor` is None for the command line (the machine's
    /// operator, who needs no account).
    pub async fn replace_quota(
        &self,
        actor: Option<&Viewer>,
        user_id: &str,
        overrides: &Overrides,
    ) -> Result<Limits, AppError> {
        check_overrides(overrides)?;
        self.check_usable(overrides).await?;
        if self.store.user_by_id(user_id).await?.is_none() {
            return Err(AppError::NotFound);
        }
        self.store
            .set_quota(user_id, overrides, actor.map(|a| a.id.as_str()))
            .await?;
        Ok(self.config.default_limits().with(overrides))
    }

    /// Refuses overrides nobody could launch with, naming the smallest slice, the shortest and
    /// the longest session (the rule: `quota::unusable`).
    async fn check_usable(&self, overrides: &Overrides) -> Result<(), AppError> {
        let (sizes, bursts) = super::launch::pool_sizes(&self.store.pool().await?);
        let offered = Offered {
            smallest_slice_mib: sizes.iter().chain(&bursts).copied().min(),
            min_minutes: self.config.sessions.min_minutes,
            max_minutes: self.config.sessions.max_minutes,
        };
        app::domain::quota::unusable(overrides, &offered).map_err(AppError::Invalid)
    }

    /// Changes some of a user's quota overrides, keeping the others; returns the limits that
    /// apply now.
    pub async fn change_user_quota(
        &self,
        viewer: &Viewer,
        user_id: &str,
        change: OverridesChange,
    ) -> Result<Limits, AppError> {
        require_admin(viewer)?;
        // Each limit is checked on its own, so the values named are all there is to check.
        let named = change.applied_to(Overrides::default());
        check_overrides(&named)?;
        self.check_usable(&named).await?;
        if self.store.user_by_id(user_id).await?.is_none() {
            return Err(AppError::NotFound);
        }
        let overrides = if change == OverridesChange::default() {
            // Nothing named, nothing changed: no write, no audit entry.
            self.store.quota_overrides(user_id).await?
        } else {
            self.store
                .change_quota(user_id, &change, Some(&viewer.id))
                .await?
        };
        Ok(self.config.default_limits().with(&overrides))
    }

    /// Grants `amount` credits ("10", "2.5"; negative takes back, down to zero); returns the
    /// new balance in milli-credits.
    pub async fn grant_credits(
        &self,
        actor: Option<&Viewer>,
        user_id: &str,
        amount: &str,
        note: &str,
    ) -> Result<i64, AppError> {
        if let Some(viewer) = actor {
            require_admin(viewer)?;
        }
        let milli = credits::checked_grant(amount).map_err(AppError::Invalid)?;
        let note = credits::checked_note(note).map_err(AppError::Invalid)?;
        if self.store.user_by_id(user_id).await?.is_none() {
            return Err(AppError::NotFound);
        }
        let by = actor.map_or("the command line", |viewer| viewer.name.as_str());
        let note = if note.is_empty() {
            format!("granted by {by}")
        } else {
            format!("granted by {by}: {note}")
        };
        match self
            .store
            .grant(user_id, milli, actor.map(|v| v.id.as_str()), &note)
            .await
        {
            Ok(balance) => Ok(balance),
            Err(StoreError::InsufficientCredits { balance, .. }) => {
                Err(AppError::Invalid(format!(
                    "that takes back more than the balance ({})",
                    credits::with_unit(balance)
                )))
            }
            Err(other) => Err(other.into()),
        }
    }

    /// Declines a user's open ask for credits without granting; audited.
    pub async fn decline_credit_request(
        &self,
        viewer: &Viewer,
        user_id: &str,
    ) -> Result<(), AppError> {
        require_admin(viewer)?;
        let user = self
            .store
            .user_by_id(user_id)
            .await?
            .filter(|user| !user.deleted)
            .ok_or(AppError::NotFound)?;
        if self.store.close_credit_request(user_id, &viewer.id).await? {
            Ok(())
        } else {
            Err(AppError::Conflict(format!(
                "{} has no open ask for credits",
                user.name
            )))
        }
    }

    /// Stops anyone's session, with the reason `admin`.
    pub async fn admin_stop(
        &self,
        viewer: &Viewer,
        session_id: &str,
    ) -> Result<AdminSession, AppError> {
        require_admin(viewer)?;
        let record = self
            .store
            .session(session_id)
            .await?
            .ok_or(AppError::NotFound)?;
        if record.state.is_live() {
            self.store
                .audit(
                    Some(&viewer.id),
                    "session.stop",
                    &format!("user:{}", record.user_id),
                    &format!("session {session_id}"),
                )
                .await?;
            // Its own task: a client that disconnects must not leave the session half-stopped.
            let this = self.clone();
            let id = session_id.to_string();
            let detail = format!("stopped by the admin {}", viewer.name);
            self.background
                .spawn(async move {
                    this.lifecycle
                        .try_stop_session(&id, EndReason::Admin, Some(&detail))
                        .await
                })
                .await
                .map_err(|e| {
                    tracing::error!(error = %e, "stop task");
                    AppError::Internal
                })??;
        }
        self.admin_session(viewer, session_id).await
    }
}

/// The largest amount of GPU memory or disk a limit names: a pebibyte, past any machine, and
/// far inside the database's integers.
const MAX_LIMIT_MIB: u64 = 1 << 30;

/// Overrides within what the database and the rules can hold.
pub fn check_overrides(overrides: &Overrides) -> Result<(), AppError> {
    let too_big = |mib: Option<u64>| mib.is_some_and(|mib| mib > MAX_LIMIT_MIB);
    if too_big(overrides.max_gpu_mib) || too_big(overrides.max_disk_mib) {
        return Err(AppError::Invalid(format!(
            "a memory or disk limit is at most {MAX_LIMIT_MIB} MiB"
        )));
    }
    if overrides.max_minutes == Some(0) {
        return Err(AppError::Invalid(
            "a session's longest duration is at least 1 minute (to stop launches, set max_sessions to 0)"
                .into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use app::domain::scope::Scopes;

    fn viewer(role: Role, scopes: Scopes) -> Viewer {
        Viewer {
            id: "u".into(),
            name: "u".into(),
            role,
            scopes,
            token_expires_at_ms: None,
            must_change_password: false,
        }
    }

    #[test]
    fn overrides_are_bounded() {
        assert!(check_overrides(&Overrides::default()).is_ok());
        let zero_sessions = Overrides {
            max_sessions: Some(0),
            ..Overrides::default()
        };
        assert!(
            check_overrides(&zero_sessions).is_ok(),
            "a way to stop launches"
        );
        let no_minutes = Overrides {
            max_minutes: Some(0),
            ..Overrides::default()
        };
        assert!(check_overrides(&no_minutes).is_err());
        let huge = Overrides {
            max_gpu_mib: Some(u64::MAX),
            ..Overrides::default()
        };
        assert!(check_overrides(&huge).is_err());
    }

    #[test]
    fn only_an_admin_with_the_admin_scope_passes() {
        assert!(require_admin(&viewer(Role::Admin, Scopes::ALL)).is_ok());
        let user = require_admin(&viewer(Role::User, Scopes::ALL)).unwrap_err();
        assert_eq!(user.status(), 403);
        let narrow = require_admin(&viewer(Role::Admin, Scopes::of(&[Scope::Read]))).unwrap_err();
        assert_eq!(narrow.status(), 403);
        assert!(narrow.to_string().contains("`admin`"), "{narrow}");
        assert!(narrow.to_string().contains("password"), "{narrow}");
    }
}
