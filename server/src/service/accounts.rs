//! Accounts and sign-in: local passwords, single sign-on, sign-in sessions, API tokens and the
//! confirmations that making a token or entering the admin pages takes.
//!
//! API tokens (`gsb_…`) are kept as SHA-256 hashes with a label, their scopes and an optional
//! expiry (1 to 365 days). Their owner makes, lists and revokes them (`/api/v1/tokens`, the tokens
//! page, or `server token create|list|revoke`); a revoked token is refused at once, and editor
//! connections opened with it close (`forget_user` tells them). What a new token may carry is
//! `app::domain::scope::grant`'s rule: at most its maker's scopes, expiring no later than the
//! maker's own token, and `admin` only on an admin's, when asked for.
//!
//! Confirmations exist because editors are served from our origin: a script in an editor's page can
//! send requests with the browser's cookie, and same-origin requests carry nothing (no header, no
//! referrer) that such a script cannot send too.
//! - Making a token with a browser's sign-in rather than a token takes the password as well
//!   ([`Accounts::confirm_token_maker`], for the REST API and the tokens page alike). An account
//!   without a password (single sign-on) confirms at the provider instead:
//!   `/auth/oidc/login?confirm=true` asks it for `prompt=login` and `max_age=0`, the ID token's
//!   `auth_time` must be from after the request, and the browser's session then keeps the
//!   confirmation, good for five minutes.
//! - A browser's sign-in never carries the scope `admin` by itself: it gets it for 15 minutes
//!   (`auth::ADMIN_CONFIRMATION_MS`) after the person confirmed, by their password on the admin
//!   page ([`Accounts::confirm_admin`], kept in the sign-in session) or by that fresh sign-in at
//!   the provider. The cached sign-in is dropped at confirmation, and the window is checked on each
//!   use, not when cached. Making a token with the password counts as a confirmation for that
//!   request, so an admin can make an `admin` token. A new sign-in drops the session's
//!   confirmations.
//! - Wrong passwords at either count against the same per-name limit as sign-ins (a script in an
//!   editor's page could otherwise guess at full speed) and are audited (`confirm.failed`).
//!
//! What this does not stop: a script in an editor's page of an admin who confirmed acts as that
//! admin for the rest of the window. Serving editors from an origin of their own is the fix, and is
//! not built.
//!
//! Single sign-on accounts are found by `<issuer>|<sub>` (`users.oidc_subject`), never by name: a
//! first sign-in makes the account when the name is free and is refused when a local account has it
//! (two first sign-ins at once both find the account one of them made). An admin lets an identity
//! into an existing account with `server user link NAME 'ISSUER|SUBJECT'`. With `oidc.admin_groups`
//! the role follows the provider's groups at every sign-in (audited, cached sign-ins forgotten).
//! Every sign-in cycles the session's id.

use crate::identity::auth::{self, USER_KEY};
use crate::store::{StoreError, TokenRecord, UserRecord};
use app::domain::accounts;
use app::domain::encode;
use app::domain::scope::{self, Grant, Grantor, Scope, Scopes};
use app::error::AppError;
use app::model::*;
use std::sync::Arc;

/// Sign-in, accounts, API tokens and the confirmations they take.
#[derive(Clone)]
pub struct Accounts {
    pub(in crate::service) auth: Arc<crate::identity::auth::Authenticator>,
    pub(in crate::service) config: Arc<crate::config::Config>,
    pub(in crate::service) oidc: Option<Arc<crate::identity::oidc::Oidc>>,
    pub(in crate::service) runtime: Arc<dyn crate::runtime::Runtime>,
    pub(in crate::service) sign_ins: Arc<crate::identity::auth::SignInThrottle>,
    pub(in crate::service) store: crate::store::Store,
}

impl Accounts {
    pub(in crate::service) fn new(handles: &super::handles::Handles) -> Accounts {
        Accounts {
            auth: handles.auth.clone(),
            config: handles.config.clone(),
            oidc: handles.oidc.clone(),
            runtime: handles.runtime.clone(),
            sign_ins: handles.sign_ins.clone(),
            store: handles.store.clone(),
        }
    }
}

impl Accounts {
    /// Where a sandbox is wanted and none can be made, the server serves one account: refuses
    /// to make a second.
    pub(in crate::service) async fn check_one_account_unisolated(&self) -> Result<(), AppError> {
        let wanted = self.config.runtime == crate::config::RuntimeKind::Local
            && self.config.local.isolation == crate::config::local::Isolation::Sandbox;
        if let (true, Err(why)) = (wanted, self.runtime.isolation())
            && self.store.count_users().await? >= 1
        {
            return Err(AppError::Unavailable(format!(
                "this server cannot keep editors apart ({why}), so it serves one account: install bubblewrap (scripts/setup.sh), or set local.isolation = \"none\" to let accounts share it anyway"
            )));
        }
        Ok(())
    }

    /// The first admin, on an empty database: returns the generated password to show once.
    pub async fn ensure_admin(&self) -> Result<Option<String>, StoreError> {
        if self.store.count_users().await? > 0 {
            return Ok(None);
        }
        let password = auth::random_secret(9);
        let hash =
            auth::hash_password(&password).map_err(|_| StoreError::NotFound("password hasher"))?;
        // The printed password is in a terminal's scrollback and a file: its person replaces it
        // at the first sign-in.
        match self
            .store
            .create_user_with_temporary_password(
                "admin",
                &hash,
                Role::Admin,
                self.config.initial_grant(),
                None,
            )
            .await
        {
            Ok(_) => Ok(Some(password)),
            // Another replica created it first.
            Err(StoreError::Duplicate(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub async fn create_user(
        &self,
        name: &str,
        password: Option<&str>,
        role: Role,
        actor: Option<&str>,
    ) -> Result<UserRecord, AppError> {
        let name = accounts::checked_user_name(name).map_err(AppError::Invalid)?;
        self.check_one_account_unisolated().await?;
        if let Some(password) = password {
            accounts::check_password(password).map_err(AppError::Invalid)?;
        }
        let hash = match password {
            Some(p) => Some(auth::hash_password(p).map_err(|_| AppError::Internal)?),
            None => None,
        };
        Ok(self
            .store
            .create_user(
                name,
                hash.as_deref(),
                role,
                self.config.initial_grant(),
                actor,
            )
            .await?)
    }

    /// An account whose password someone else chose (an admin): shown to them once, and
    /// replaced by its person at their first sign-in.
    pub async fn create_user_with_temporary_password(
        &self,
        name: &str,
        password: &str,
        role: Role,
        actor: Option<&str>,
    ) -> Result<UserRecord, AppError> {
        let name = accounts::checked_user_name(name).map_err(AppError::Invalid)?;
        self.check_one_account_unisolated().await?;
        accounts::check_password(password).map_err(AppError::Invalid)?;
        let hash = auth::hash_password(password).map_err(|_| AppError::Internal)?;
        match self
            .store
            .create_user_with_temporary_password(
                name,
                &hash,
                role,
                self.config.initial_grant(),
                actor,
            )
            .await
        {
            Err(StoreError::Duplicate(_)) => Err(AppError::Conflict(format!(
                "there is already an account named {name} (a deleted account keeps its name)"
            ))),
            made => Ok(made?),
        }
    }

    /// The person's own new password, given the current one (throttled like a sign-in). It ends
    /// a must-change; cached sign-ins are dropped, so the change applies to the next request.
    pub async fn change_password(
        &self,
        viewer: &Viewer,
        current: &str,
        new: &str,
    ) -> Result<(), AppError> {
        let user = self
            .store
            .user_by_id(&viewer.id)
            .await?
            .ok_or(AppError::Unauthenticated)?;
        if user.password_hash.is_none() {
            return Err(AppError::Invalid(
                "this account signs in with single sign-on: change the password at your identity provider".into(),
            ));
        }
        accounts::check_password(new).map_err(AppError::Invalid)?;
        if new == current {
            return Err(AppError::Invalid(
                "the new password must differ from the current one".into(),
            ));
        }
        self.confirm_person(viewer, false, Some(current), None, "change your password")
            .await
            .map_err(|refused| match refused {
                AppError::Forbidden(_) => {
                    AppError::Forbidden("The current password is not right.".into())
                }
                other => other,
            })?;
        let hash = auth::hash_password(new).map_err(|_| AppError::Internal)?;
        self.store
            .set_password(&viewer.id, &hash, false, Some(&viewer.id))
            .await?;
        self.auth.forget_user(&viewer.id);
        Ok(())
    }

    /// Sets a local account's password from the command line (the operator's recovery): the
    /// person's own from now on, nothing to change at the next sign-in.
    pub async fn set_password(&self, name: &str, password: &str) -> Result<(), AppError> {
        accounts::check_password(password).map_err(AppError::Invalid)?;
        let user = self
            .store
            .user_by_name(name)
            .await?
            .filter(|user| !user.deleted)
            .ok_or(AppError::NotFound)?;
        let hash = auth::hash_password(password).map_err(|_| AppError::Internal)?;
        self.store
            .set_password(&user.id, &hash, false, None)
            .await?;
        self.auth.forget_user(&user.id);
        Ok(())
    }

    /// Locks or unlocks an account; a locked one loses access at once (cookies and tokens).
    pub async fn set_locked(
        &self,
        user_id: &str,
        locked: bool,
        actor_id: Option<&str>,
    ) -> Result<(), AppError> {
        self.store.set_locked(user_id, locked, actor_id).await?;
        self.auth.forget_user(user_id);
        Ok(())
    }

    /// Sign-in through a tower-sessions session: cycles its id, as after any privilege change.
    pub async fn login(
        &self,
        session: &tower_sessions::Session,
        name: &str,
        password: &str,
    ) -> Result<Viewer, AppError> {
        self.sign_in_with_password(session, None, name, password, None)
            .await
    }

    /// Signs in through the browser's sign-in session, whose old id (`cookie`) is forgotten:
    /// it is gone from the store, and gone from the cache too.
    pub async fn sign_in_with_password(
        &self,
        session: &tower_sessions::Session,
        cookie: Option<&str>,
        name: &str,
        password: &str,
        client: Option<std::net::IpAddr>,
    ) -> Result<Viewer, AppError> {
        let viewer = self
            .check_password_sign_in(session, name, password, client)
            .await?;
        if let Some(cookie) = cookie {
            self.auth.forget_cookie(cookie);
        }
        Ok(viewer)
    }

    async fn check_password_sign_in(
        &self,
        session: &tower_sessions::Session,
        name: &str,
        password: &str,
        client: Option<std::net::IpAddr>,
    ) -> Result<Viewer, AppError> {
        let failed = || {
            AppError::SignInFailed("Wrong user name or password, or the account is locked.".into())
        };
        let name = accounts::sign_in_name(name);
        if let Err(wait) = self
            .sign_ins
            .attempt(name, client, std::time::Instant::now())
        {
            return Err(AppError::RateLimited(format!(
                "Too many failed sign-ins from here. Try again in {} seconds.",
                wait.as_secs().max(1)
            )));
        }
        let user = self.store.user_by_name(name).await?;
        let hash = user.as_ref().and_then(|u| u.password_hash.clone());
        let ok = auth::check_password(password.to_string(), hash).await;
        let user = match user {
            Some(user) if ok && !user.locked => user,
            _ => {
                // A name nobody has is recorded as unknown, and shown plainly: a name with a
                // newline or a direction override must not read as another entry.
                let target = match (&user, accounts::checked_user_name(name)) {
                    (Some(user), _) => format!("user:{}", user.name),
                    (None, Ok(name)) => format!("unknown:{}", encode::shown_up_to(name, 64)),
                    (None, Err(_)) => format!("unknown:{}", encode::shown(name)),
                };
                let _ = self.store.audit(None, "login.failed", &target, "").await;
                return Err(failed());
            }
        };
        self.sign_ins.succeeded(name, client);
        self.begin_session(session, &user, "password").await
    }

    /// Signs in the person an OpenID Connect provider vouched for: the account linked to their
    /// identity, made at their first sign-in (when its name is free), with the role their groups
    /// give where the provider decides roles.
    pub async fn oidc_sign_in(
        &self,
        session: &tower_sessions::Session,
        identity: &crate::identity::oidc::Identity,
    ) -> Result<Viewer, AppError> {
        let oidc = self.oidc.as_ref().ok_or(AppError::NotFound)?;
        let role = crate::identity::oidc::role_of(identity, &oidc.config.admin_groups);
        let taken = || {
            AppError::Conflict(format!(
                "The name {} belongs to another account here. Ask an admin.",
                identity.name
            ))
        };
        let user = match self.store.user_by_oidc_subject(&identity.subject).await? {
            Some(user) => user,
            None => {
                let name =
                    accounts::checked_user_name(&identity.name).map_err(AppError::Invalid)?;
                self.check_one_account_unisolated().await?;
                // Never by name: a provider's user named like a local account (the first
                // admin, say) must not become it. The name's uniqueness refuses that.
                match self
                    .store
                    .create_oidc_user(
                        name,
                        &identity.subject,
                        role.unwrap_or(Role::User),
                        self.config.initial_grant(),
                    )
                    .await
                {
                    Ok(user) => user,
                    // The name is another account's, unless this person's other sign-in
                    // (two tabs, two replicas) made this one a moment ago.
                    Err(StoreError::Duplicate(_)) => self
                        .store
                        .user_by_oidc_subject(&identity.subject)
                        .await?
                        .ok_or_else(taken)?,
                    Err(e) => return Err(e.into()),
                }
            }
        };
        if user.locked {
            return Err(AppError::SignInFailed("This account is locked.".into()));
        }
        let user = match role {
            Some(role) if role != user.role => {
                self.store
                    .set_role(&user.id, role, None, "groups from the identity provider")
                    .await?;
                self.auth.forget_user(&user.id);
                UserRecord { role, ..user }
            }
            _ => user,
        };
        self.begin_session(session, &user, "oidc").await
    }

    /// Lets the single sign-on identity `subject` (`<issuer>|<sub>`) sign in to the account
    /// `user_id`, in place of any it had.
    pub async fn link_identity(&self, user_id: &str, subject: &str) -> Result<(), AppError> {
        let well_formed = subject
            .split_once('|')
            .is_some_and(|(issuer, sub)| issuer.contains("://") && !sub.is_empty());
        if !well_formed {
            return Err(AppError::Invalid(
                "an identity is `<issuer>|<subject>`, as the server's log names it".into(),
            ));
        }
        match self.store.link_oidc(user_id, subject).await {
            Err(StoreError::Duplicate(_)) => Err(AppError::Conflict(
                "another account already signs in with that identity".into(),
            )),
            done => Ok(done?),
        }
    }

    /// A new sign-in for `user` in `session`, under a new id, audited.
    async fn begin_session(
        &self,
        session: &tower_sessions::Session,
        user: &UserRecord,
        how: &str,
    ) -> Result<Viewer, AppError> {
        session.cycle_id().await.map_err(|e| {
            tracing::error!(error = %e, "cycling the session id");
            AppError::Internal
        })?;
        // A single sign-on's round trip gave the session a short life; a sign-in has the usual.
        session.set_expiry(Some(tower_sessions::Expiry::OnInactivity(
            time::Duration::days(auth::SIGN_IN_IDLE_DAYS),
        )));
        session.insert(USER_KEY, &user.id).await.map_err(|e| {
            tracing::error!(error = %e, "writing the session");
            AppError::Internal
        })?;
        session
            .insert(auth::SIGNED_IN_KEY, self.store.now())
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "writing the session");
                AppError::Internal
            })?;
        // A confirmation was someone's, at some time: a new sign-in starts without one (a
        // single sign-on that confirmed writes its own afterwards).
        for key in [auth::ADMIN_CONFIRMED_KEY, auth::SSO_CONFIRMED_KEY] {
            session.remove_value(key).await.map_err(|e| {
                tracing::error!(error = %e, "writing the session");
                AppError::Internal
            })?;
        }
        self.store
            .audit(Some(&user.id), "login", &format!("user:{}", user.name), how)
            .await?;
        Ok(Viewer {
            must_change_password: user.must_change_password,
            ..user.viewer(Scopes::ALL)
        })
    }

    pub async fn logout(
        &self,
        session: &tower_sessions::Session,
        cookie: Option<&str>,
    ) -> Result<(), AppError> {
        // The record first: a lookup after this finds nobody, and one already under way sees
        // the forget below and does not cache what it found.
        session.flush().await.map_err(|e| {
            tracing::error!(error = %e, "ending the session");
            AppError::Internal
        })?;
        if let Some(cookie) = cookie {
            self.auth.forget_cookie(cookie);
        }
        Ok(())
    }

    // ---- API tokens ----

    /// A new API token for the viewer; its secret is shown this once and kept only as a hash.
    pub async fn create_token(
        &self,
        viewer: &Viewer,
        label: &str,
        scopes: Option<Scopes>,
        days: Option<u32>,
    ) -> Result<NewToken, AppError> {
        viewer.scopes.require(Scope::Tokens)?;
        let grantor = Grantor {
            is_admin: viewer.role == Role::Admin,
            scopes: viewer.scopes,
            expires_at: viewer.token_expires_at_ms,
        };
        let Grant {
            scopes,
            label,
            expires_at,
        } = scope::grant(&grantor, scopes, label, days, self.store.now())?;
        let (token, hash) = auth::new_api_token();
        let id = self
            .store
            .create_token(&viewer.id, &hash, &label, scopes, expires_at)
            .await?;
        Ok(NewToken {
            id,
            label,
            scopes,
            token,
            expires_at,
        })
    }

    /// What a browser's sign-in must show to make a token: see [`Confirmation`].
    /// `confirmed_at` is when this browser last confirmed at the identity provider.
    pub async fn confirmation(
        &self,
        viewer: &Viewer,
        by_token: bool,
        confirmed_at: Option<i64>,
    ) -> Result<Confirmation, AppError> {
        Ok(self
            .confirmation_and_hash(viewer, by_token, confirmed_at)
            .await?
            .0)
    }

    /// The confirmation, and the account's password hash to check it against.
    async fn confirmation_and_hash(
        &self,
        viewer: &Viewer,
        by_token: bool,
        confirmed_at: Option<i64>,
    ) -> Result<(Confirmation, Option<String>), AppError> {
        if by_token {
            return Ok((Confirmation::None, None));
        }
        let user = self
            .store
            .user_by_id(&viewer.id)
            .await?
            .ok_or(AppError::Unauthenticated)?;
        let confirmation = match (&user.password_hash, &self.oidc) {
            (None, Some(oidc)) => Confirmation::SingleSignOn {
                provider: oidc.config.display_name.clone(),
                fresh: confirmed_at.is_some_and(|at| self.store.now() - at < SSO_CONFIRMATION_MS),
            },
            _ => Confirmation::Password,
        };
        Ok((confirmation, user.password_hash))
    }

    /// Refuses unless the request shows what [`Self::confirmation`] asks for.
    pub async fn confirm_token_maker(
        &self,
        viewer: &Viewer,
        by_token: bool,
        password: Option<&str>,
        confirmed_at: Option<i64>,
    ) -> Result<(), AppError> {
        self.confirm_person(viewer, by_token, password, confirmed_at, "make a token")
            .await
    }

    /// Refuses unless the request shows what [`Self::confirmation`] asks for, before it may `act`.
    pub async fn confirm_person(
        &self,
        viewer: &Viewer,
        by_token: bool,
        password: Option<&str>,
        confirmed_at: Option<i64>,
        act: &str,
    ) -> Result<(), AppError> {
        let (confirmation, hash) = self
            .confirmation_and_hash(viewer, by_token, confirmed_at)
            .await?;
        match confirmation {
            Confirmation::None | Confirmation::SingleSignOn { fresh: true, .. } => Ok(()),
            Confirmation::SingleSignOn { provider, .. } => Err(AppError::Forbidden(format!(
                "confirm who you are with {provider} first (it asks you to sign in again), then {act} within {} minutes",
                SSO_CONFIRMATION_MS / 60_000
            ))),
            Confirmation::Password => {
                let Some(password) = password.filter(|p| !p.is_empty()) else {
                    return Err(AppError::Forbidden(format!(
                        "send your password (`password`) to {act} from a browser's sign-in"
                    )));
                };
                // The sign-in's limit on guesses holds here too: a script in an editor's page
                // sends the cookie, and could otherwise guess the password at full speed.
                if let Err(wait) =
                    self.sign_ins
                        .attempt(&viewer.name, None, std::time::Instant::now())
                {
                    return Err(AppError::RateLimited(format!(
                        "Too many wrong passwords. Try again in {} seconds.",
                        wait.as_secs().max(1)
                    )));
                }
                if auth::check_password(password.to_string(), hash).await {
                    self.sign_ins.succeeded(&viewer.name, None);
                    Ok(())
                } else {
                    let _ = self
                        .store
                        .audit(
                            Some(&viewer.id),
                            "confirm.failed",
                            &format!("user:{}", viewer.id),
                            act,
                        )
                        .await;
                    Err(AppError::Forbidden("That is not your password.".into()))
                }
            }
        }
    }

    /// The viewer's tokens, each with what it may do: `admin` only while the viewer is an admin.
    pub async fn tokens(&self, viewer: &Viewer) -> Result<Vec<TokenRecord>, AppError> {
        viewer.scopes.require(Scope::Tokens)?;
        let mut tokens = self.store.tokens_of(&viewer.id).await?;
        if viewer.role != Role::Admin {
            for token in &mut tokens {
                token.scopes = token.scopes.without(Scope::Admin);
            }
        }
        Ok(tokens)
    }

    /// Ends one of the viewer's tokens at once: requests with it are refused from now on, and
    /// editor connections opened with it close.
    pub async fn revoke_token(&self, viewer: &Viewer, id: &str) -> Result<(), AppError> {
        viewer.scopes.require(Scope::Tokens)?;
        if !self.store.revoke_token(&viewer.id, id).await? {
            return Err(AppError::NotFound);
        }
        self.auth.forget_user(&viewer.id);
        Ok(())
    }
}

/// What a door knows of a request's credential: the one place both doors take it from.
pub struct RequestAuth<'a> {
    pub viewer: Viewer,
    /// The request carried one of our API tokens (else a browser's sign-in cookie).
    pub by_token: bool,
    /// When this browser last confirmed who it is at the identity provider.
    pub sso_confirmed_at: Option<i64>,
    /// The browser's sign-in session, when the request has one.
    pub session: Option<&'a tower_sessions::Session>,
    /// The sign-in cookie's value, when the request sent one.
    pub cookie: Option<&'a str>,
}

impl Accounts {
    /// The sign-in cookie's value, when the request sent one (by its name under this
    /// configuration).
    pub fn session_cookie<'a>(&self, headers: &'a http::HeaderMap) -> Option<&'a str> {
        auth::session_cookie(headers, self.auth.cookie_name)
    }

    /// A request's credential, kept to look at again while a WebSocket it opened lasts.
    pub fn credential(&self, headers: &http::HeaderMap) -> Option<auth::Credential> {
        auth::Credential::of(headers, self.auth.cookie_name)
    }

    /// Who a request's credential (a sign-in cookie or a bearer token) stands for.
    pub async fn caller(
        &self,
        headers: &http::HeaderMap,
    ) -> Result<Option<Arc<auth::Caller>>, AppError> {
        Ok(self.auth.caller(headers).await?)
    }

    /// A request's credential on the entry origin, kept as [`Self::credential`] is.
    pub fn entry_credential(&self, headers: &http::HeaderMap) -> Option<auth::Credential> {
        auth::Credential::of_entry(headers)
    }

    /// Who a request on the entry origin stands for: a token (bearer, or the entry cookie's),
    /// never a sign-in cookie.
    pub async fn entry_caller(
        &self,
        headers: &http::HeaderMap,
    ) -> Result<Option<Arc<auth::Caller>>, AppError> {
        Ok(self.auth.entry_caller(headers).await?)
    }

    /// Who `credential` stands for now (an open WebSocket's, looked at again).
    pub async fn caller_of(
        &self,
        credential: &auth::Credential,
    ) -> Result<Option<Arc<auth::Caller>>, AppError> {
        Ok(self.auth.caller_of(credential).await?)
    }

    /// Drops what this replica remembers of `user_id`'s sign-ins and tokens (after a change
    /// made past the service, to the database itself).
    pub fn forget_user(&self, user_id: &str) {
        self.auth.forget_user(user_id);
    }

    /// The credentials this replica forgets from now on (revoked, locked, signed out).
    pub fn forgotten(&self) -> tokio::sync::broadcast::Receiver<auth::Forgotten> {
        self.auth.forgotten()
    }

    /// The OpenID Connect provider's name for "Sign in with …", when one is configured.
    pub fn single_sign_on(&self) -> Option<String> {
        self.oidc.as_ref().map(|o| o.config.display_name.clone())
    }

    /// The configured OpenID Connect provider, for the sign-in door's code flow.
    pub fn oidc(&self) -> Option<&crate::identity::oidc::Oidc> {
        self.oidc.as_deref()
    }

    /// The account called `name`.
    pub async fn user_named(&self, name: &str) -> Result<Option<UserRecord>, AppError> {
        Ok(self.store.user_by_name(name).await?)
    }

    /// The caller's credits, for a credential that may read them (`GET /me`).
    pub async fn credits_of(&self, viewer: &Viewer) -> Result<Option<CreditsView>, AppError> {
        if !viewer.scopes.allows(Scope::Read) {
            return Ok(None);
        }
        let (balance, held) = self.store.credits(&viewer.id).await?;
        let request = self.store.credit_request(&viewer.id).await?;
        Ok(Some(CreditsView {
            balance,
            held,
            request,
        }))
    }

    /// Asks the admins for credits, with a note saying what for; replaces an earlier ask. A
    /// grant answers it. Audited (`credits.ask`).
    pub async fn ask_for_credits(
        &self,
        viewer: &Viewer,
        amount: &str,
        note: &str,
    ) -> Result<CreditRequest, AppError> {
        viewer.scopes.require(Scope::Sessions)?;
        let amount = app::domain::credits::checked_ask(amount).map_err(AppError::Invalid)?;
        let note = app::domain::credits::checked_note(note).map_err(AppError::Invalid)?;
        self.store.ask_credits(&viewer.id, amount, note).await?;
        self.store
            .credit_request(&viewer.id)
            .await?
            .ok_or(AppError::Internal)
    }

    /// Withdraws the caller's open ask for credits, if there is one.
    pub async fn withdraw_credit_request(&self, viewer: &Viewer) -> Result<(), AppError> {
        viewer.scopes.require(Scope::Sessions)?;
        self.store
            .close_credit_request(&viewer.id, &viewer.id)
            .await?;
        Ok(())
    }

    /// The viewer's tokens and what making one takes.
    pub async fn tokens_page(&self, auth: &RequestAuth<'_>) -> Result<TokensPage, AppError> {
        let confirmation = self
            .confirmation(&auth.viewer, auth.by_token, auth.sso_confirmed_at)
            .await?;
        Ok(TokensPage {
            tokens: self.tokens(&auth.viewer).await?,
            viewer: auth.viewer.clone(),
            confirmation,
        })
    }

    /// Makes a token for the request's caller, once the request shows what
    /// [`Self::confirmation`] asks for (a browser's sign-in: the password, or a fresh sign-in at
    /// the provider; a token: nothing). A sign-in that proved itself just now may, when an
    /// admin's, give the new token `admin`; a token only ever grants what it has.
    pub async fn make_token(
        &self,
        auth: &RequestAuth<'_>,
        label: &str,
        scopes: Option<Scopes>,
        days: Option<u32>,
        password: Option<&str>,
    ) -> Result<NewToken, AppError> {
        self.confirm_token_maker(&auth.viewer, auth.by_token, password, auth.sso_confirmed_at)
            .await?;
        let viewer = if auth.by_token {
            auth.viewer.clone()
        } else {
            confirmed(auth.viewer.clone())
        };
        self.create_token(&viewer, label, scopes, days).await
    }

    /// Whether the admin pages may be used in this request, and what confirming takes.
    pub async fn admin_access(&self, auth: &RequestAuth<'_>) -> Result<AdminAccess, AppError> {
        if auth.viewer.role != Role::Admin {
            return Err(AppError::Forbidden("this is for admins only".into()));
        }
        let confirmation = self
            .confirmation(&auth.viewer, auth.by_token, auth.sso_confirmed_at)
            .await?;
        Ok(AdminAccess {
            confirmed: auth.viewer.scopes.allows(Scope::Admin),
            confirmation,
        })
    }

    /// An admin's browser sign-in proves itself with the password, and may act as an admin for
    /// a while ([`auth::ADMIN_CONFIRMATION_MS`]).
    pub async fn confirm_admin(
        &self,
        auth: &RequestAuth<'_>,
        password: &str,
    ) -> Result<(), AppError> {
        if auth.viewer.role != Role::Admin {
            return Err(AppError::Forbidden("this is for admins only".into()));
        }
        if auth.by_token {
            return Err(AppError::Invalid(
                "a token has the scope `admin` or not: there is nothing to confirm".into(),
            ));
        }
        // An account without a password confirms at its provider, whose sign-in opens the pages.
        if let Confirmation::SingleSignOn { provider, .. } = self
            .confirmation(&auth.viewer, false, auth.sso_confirmed_at)
            .await?
        {
            return Err(AppError::Invalid(format!(
                "your account confirms with {provider}: sign in again there"
            )));
        }
        self.confirm_person(
            &auth.viewer,
            false,
            Some(password),
            auth.sso_confirmed_at,
            "use the admin pages",
        )
        .await?;
        let session = auth.session.ok_or(AppError::Internal)?;
        session
            .insert(auth::ADMIN_CONFIRMED_KEY, self.store.now())
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "recording an admin's confirmation");
                AppError::Internal
            })?;
        // The cached sign-in was resolved without it.
        if let Some(cookie) = auth.cookie {
            self.auth.forget_cookie(cookie);
        }
        Ok(())
    }

    /// Keeps, in the browser's sign-in, that its person just confirmed who they are at the
    /// identity provider (tokens may be made for a while).
    pub async fn keep_sso_confirmation(&self, session: &tower_sessions::Session) {
        if let Err(e) = session
            .insert(auth::SSO_CONFIRMED_KEY, self.store.now())
            .await
        {
            tracing::error!(error = %e, "keeping a confirmation");
        }
    }
}

/// How long a confirmation at the identity provider lets a browser's sign-in make tokens.
const SSO_CONFIRMATION_MS: i64 = 5 * 60 * 1000;

pub use app::model::NewToken;

/// A viewer who just proved who they are: an admin may act as one in this request.
pub fn confirmed(viewer: Viewer) -> Viewer {
    if viewer.role == Role::Admin {
        Viewer {
            scopes: viewer.scopes.with(Scope::Admin),
            ..viewer
        }
    } else {
        viewer
    }
}
