//! Who is asking: sign-in cookies (tower-sessions) and bearer tokens resolved to a [`Caller`],
//! passwords with argon2, and the request checks every door shares.
//!
//! Sign-ins are tower-sessions records in the main database (`http_sessions`), cookie
//! `sandbox_session`: HttpOnly, SameSite=Lax; when `secure_cookies` is set, Secure and named
//! `__Host-sandbox_session` (the layer is built in `http`). The id is cycled at sign-in. A sign-in ends after [`SIGN_IN_IDLE_DAYS`] (7)
//! unused and after [`SIGN_IN_MAX_DAYS`] (14) however busy, so a single sign-on account that the
//! provider has removed, or moved out of the admin group, does not live on here: its next sign-in
//! asks the provider again.
//!
//! The [`Authenticator`] resolves a bearer token (`gsb_…`, kept as a SHA-256 hash) or the cookie to
//! a `Caller`: the user and the scopes. A sign-in has all but `admin`, which it gets for
//! [`ADMIN_CONFIRMATION_MS`] after its person confirmed who they are (see `service::accounts`).
//! Resolved callers are cached for 5 s, so the proxy's hot path makes no query; a logout, a lock, a
//! change of role or a revoked token clears this replica's cache at once and tells the open
//! WebSockets standing on it ([`Forgotten`]); other replicas see it when their entry runs out.
//! Locked users resolve to nobody.
//!
//! Password guessing: a name that failed five times within a minute is refused (429 `rate_limited`)
//! until its minute ends, before any password is checked ([`SignInThrottle`], per process). Names
//! that exist and names that do not are counted alike, and an attempt counts as failed from its
//! start, so guesses sent all at once count too. At most two argon2 checks per core run at once
//! ([`check_password`]), so a flood of sign-ins waits its turn instead of taking the machine.
//!
//! Cross-site requests: the editors trust what the proxy forwards (their own token, which we add,
//! makes Jupyter skip its XSRF and origin checks), and SameSite=Lax alone would let a sibling site
//! sign a browser in as someone else, or launch and stop in its name. [`from_foreign_origin`]
//! decides by Fetch Metadata (`Sec-Fetch-Site` other than `same-origin`/`none`), or, from browsers
//! without it, by `Origin` against `Host` (or `X-Forwarded-Host`); scripts send neither and pass. A
//! layer of the router refuses every state-changing request it flags, and the proxy those and
//! WebSocket opens, with 403 `cross_site`.
//!
//! [`drop_unreadable_cookies`] runs before anything reads a request's cookies: one cookie that is
//! not plain text, which any same-origin script can set, would make the whole header unreadable and
//! sign the browser out.

use crate::store::{HttpSessionStore, Store, StoreError, UserRecord};
use crate::util::FastMap;
use app::domain::scope::{Scope, Scopes};
use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use http::HeaderMap;
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tower_sessions::SessionStore;

pub const SESSION_COOKIE: &str = "sandbox_session";
/// The cookie's name when cookies are Secure: a browser keeps a `__Host-` cookie only if it was
/// set over HTTPS by this host, for path `/`, so a sibling subdomain or a plain-HTTP answer cannot
/// plant a sign-in of its choosing (session fixation).
pub const SECURE_SESSION_COOKIE: &str = "__Host-sandbox_session";

/// The sign-in cookie's name under `secure_cookies`.
pub fn session_cookie_name(secure: bool) -> &'static str {
    if secure {
        SECURE_SESSION_COOKIE
    } else {
        SESSION_COOKIE
    }
}

/// Whether a cookie of this name is our sign-in (under either setting): never an editor's to
/// read or set.
pub fn is_session_cookie(name: &str) -> bool {
    name == SESSION_COOKIE || name == SECURE_SESSION_COOKIE
}
pub const USER_KEY: &str = "user_id";
/// When this browser last confirmed who it is at the identity provider (ms), in its session.
pub const SSO_CONFIRMED_KEY: &str = "sso_confirmed_at";
/// When this browser last confirmed who it is at the identity provider, if it did.
pub async fn sso_confirmed_at(session: &tower_sessions::Session) -> Option<i64> {
    session.get::<i64>(SSO_CONFIRMED_KEY).await.ok().flatten()
}

/// When this browser's admin last confirmed with their password that they are at it (ms).
pub const ADMIN_CONFIRMED_KEY: &str = "admin_confirmed_at";
/// How long a confirmation (password, or a fresh sign-in at the provider) lets a browser's
/// sign-in act as an admin. Editors are served from our origin, so a script in an editor's page
/// can send requests with the browser's cookie; admin powers are in reach of the cookie only
/// for this long after the person proved they are at the keyboard.
pub const ADMIN_CONFIRMATION_MS: i64 = app::domain::scope::ADMIN_CONFIRMATION_MINUTES * 60 * 1000;

/// How long a sign-in lasts without use.
pub const SIGN_IN_IDLE_DAYS: i64 = 7;
/// The session key a page or API request writes, at most hourly, so that using a sign-in moves
/// its end (tower-sessions saves, and so extends, a session only when it changed).
pub const SEEN_KEY: &str = "seen_at";
const SEEN_EVERY_MS: i64 = 3600 * 1000;

/// Whether a sign-in that ends at `expires_at` was last extended more than an hour before `now`
/// (ms): its use now should be written down.
pub fn sign_in_wants_extending(expires_at: i64, now: i64) -> bool {
    expires_at - now < SIGN_IN_IDLE_DAYS * 24 * 3600 * 1000 - SEEN_EVERY_MS
}
/// How long a sign-in lasts however much it is used (JupyterHub's cookie lasts 14 days too):
/// then the person signs in again, so a single sign-on account the provider has since removed
/// or moved out of the admin group does not live on here.
pub const SIGN_IN_MAX_DAYS: i64 = 14;
/// When this browser signed in (ms), in its session.
pub const SIGNED_IN_KEY: &str = "signed_in_at";

/// Whether a sign-in made at `signed_in_at` is past [`SIGN_IN_MAX_DAYS`] at `now` (ms).
/// Sign-ins from before the time was kept carry none; their idle limit still ends them.
pub fn sign_in_expired(signed_in_at: Option<i64>, now: i64) -> bool {
    signed_in_at.is_some_and(|at| now - at >= SIGN_IN_MAX_DAYS * 24 * 3600 * 1000)
}
const TOKEN_PREFIX: &str = "gsb_";
/// How long a resolved cookie or token is trusted without asking the database again.
/// Keeps the proxy's hot path free of queries; logout on this replica clears it at once.
const CACHE_TTL: Duration = Duration::from_secs(5);
const CACHE_CAPACITY: usize = 10_000;

pub fn hash_password(password: &str) -> Result<String, argon2::password_hash::Error> {
    let salt = SaltString::generate(&mut rand::rngs::OsRng);
    Ok(Argon2::default()
        .hash_password(password.as_bytes(), &salt)?
        .to_string())
}

fn verify_password(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash)
        .map(|parsed| {
            Argon2::default()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok()
        })
        .unwrap_or(false)
}

/// Checks a password off the async threads; an unknown user costs the same as a known one.
/// At most two checks per core run at once (each takes 19 MiB and a core for tens of
/// milliseconds): a flood of sign-ins waits its turn instead of taking the machine.
pub async fn check_password(password: String, hash: Option<String>) -> bool {
    static DUMMY: OnceLock<String> = OnceLock::new();
    static CHECKING: OnceLock<tokio::sync::Semaphore> = OnceLock::new();
    let checking = CHECKING.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        tokio::sync::Semaphore::new(2 * cores)
    });
    let Ok(turn) = checking.acquire().await else {
        return false;
    };
    tokio::task::spawn_blocking(move || {
        // Held by the check itself: a caller that gives up does not free its turn early.
        let _turn = turn;
        let dummy = DUMMY.get_or_init(|| hash_password("not a real password").unwrap_or_default());
        match hash {
            Some(hash) => verify_password(&password, &hash),
            None => {
                verify_password(&password, dummy);
                false
            }
        }
    })
    .await
    .unwrap_or(false)
}

/// Failed sign-ins, counted three ways so that nobody can keep another out and no client can
/// guess at speed: per (name, client address), [`SignInThrottle::PER_PAIR`] failures within
/// [`SignInThrottle::WINDOW`] refuse that client that name until the window ends; per client,
/// [`SignInThrottle::PER_CLIENT`] across names refuse it every name (one password tried on many
/// names); per name, [`SignInThrottle::PER_NAME`] within [`SignInThrottle::NAME_WINDOW`] refuse
/// the name to every client that has failed it, while a client that has not still signs in. Each
/// refusal comes before any password is checked; names that exist and names that do not are
/// counted alike, so a refusal says nothing about which exist. Per server process.
#[derive(Default)]
pub struct SignInThrottle {
    counts: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    pairs: FastMap<(String, IpAddr), Window>,
    clients: FastMap<IpAddr, Window>,
    names: FastMap<String, Window>,
}

#[derive(Clone, Copy)]
struct Window {
    failures: u32,
    since: Instant,
}

impl Window {
    /// This key's count at `now`: a new one once `length` has passed.
    fn at(slot: &mut Window, now: Instant, length: Duration) -> &mut Window {
        if now >= slot.since + length {
            *slot = Window {
                failures: 0,
                since: now,
            };
        }
        slot
    }
}

/// The address of a caller the server cannot name (a test, the command line).
const NO_ADDRESS: IpAddr = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);

impl SignInThrottle {
    pub const PER_PAIR: u32 = 5;
    pub const PER_CLIENT: u32 = 30;
    pub const WINDOW: Duration = Duration::from_secs(60);
    pub const PER_NAME: u32 = 100;
    pub const NAME_WINDOW: Duration = Duration::from_secs(15 * 60);
    /// Keys kept before old windows are swept out.
    const SWEEP_AT: usize = 10_000;

    /// An attempt to sign in as `name` from `client`: refused with how long to wait, or
    /// counted as a failure until [`SignInThrottle::succeeded`] says otherwise (so attempts
    /// sent all at once count too). One lock for all, so no two slip through on one count.
    pub fn attempt(
        &self,
        name: &str,
        client: Option<IpAddr>,
        now: Instant,
    ) -> Result<(), Duration> {
        let client = client.unwrap_or(NO_ADDRESS);
        let mut counts = self.counts.lock().expect("sign-in throttle");
        let Counts {
            pairs,
            clients,
            names,
        } = &mut *counts;
        if pairs.len() + clients.len() + names.len() >= Self::SWEEP_AT {
            pairs.retain(|_, w| now < w.since + Self::WINDOW);
            clients.retain(|_, w| now < w.since + Self::WINDOW);
            names.retain(|_, w| now < w.since + Self::NAME_WINDOW);
        }
        let fresh = Window {
            failures: 0,
            since: now,
        };
        let pair = pairs.entry((name.to_string(), client)).or_insert(fresh);
        let pair = Window::at(pair, now, Self::WINDOW);
        let by_client = Window::at(clients.entry(client).or_insert(fresh), now, Self::WINDOW);
        let by_name = Window::at(
            names.entry(name.to_string()).or_insert(fresh),
            now,
            Self::NAME_WINDOW,
        );
        if pair.failures >= Self::PER_PAIR {
            return Err(pair.since + Self::WINDOW - now);
        }
        if by_client.failures >= Self::PER_CLIENT {
            return Err(by_client.since + Self::WINDOW - now);
        }
        if by_name.failures >= Self::PER_NAME && pair.failures > 0 {
            return Err(by_name.since + Self::NAME_WINDOW - now);
        }
        pair.failures += 1;
        by_client.failures += 1;
        by_name.failures += 1;
        Ok(())
    }

    /// `name` signed in from `client`: this attempt was no failure, and the pair starts over.
    pub fn succeeded(&self, name: &str, client: Option<IpAddr>) {
        let client = client.unwrap_or(NO_ADDRESS);
        let mut counts = self.counts.lock().expect("sign-in throttle");
        counts.pairs.remove(&(name.to_string(), client));
        if let Some(w) = counts.clients.get_mut(&client) {
            w.failures = w.failures.saturating_sub(1);
        }
        if let Some(w) = counts.names.get_mut(name) {
            w.failures = w.failures.saturating_sub(1);
        }
    }
}

pub fn random_secret(bytes: usize) -> String {
    use rand::RngCore;
    let mut buf = vec![0u8; bytes];
    rand::rngs::OsRng.fill_bytes(&mut buf);
    hex::encode(buf)
}

/// A new API token and the hash we keep of it.
pub fn new_api_token() -> (String, String) {
    let token = format!("{TOKEN_PREFIX}{}", random_secret(24));
    let hash = token_hash(&token);
    (token, hash)
}

pub fn token_hash(token: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(token.as_bytes()))
}

/// Drops from the `Cookie` header the cookies that are not plain text (a script may set one
/// with any byte), which would otherwise make the whole header unreadable: to us, the browser
/// would be signed out. Costs a scan of the header when all is well.
pub fn drop_unreadable_cookies(headers: &mut HeaderMap) {
    if headers
        .get_all(http::header::COOKIE)
        .iter()
        .all(|v| v.to_str().is_ok())
    {
        return;
    }
    let kept: Vec<String> = headers
        .get_all(http::header::COOKIE)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b';'))
        .filter_map(|pair| std::str::from_utf8(pair).ok())
        .map(str::trim)
        .filter(|pair| !pair.is_empty() && pair.bytes().all(|b| b.is_ascii_graphic() || b == b' '))
        .map(str::to_string)
        .collect();
    headers.remove(http::header::COOKIE);
    if let Ok(value) = http::HeaderValue::from_str(&kept.join("; "))
        && !kept.is_empty()
    {
        headers.insert(http::header::COOKIE, value);
    }
}

/// The value of the session cookie called `name` in a request, if any.
pub fn session_cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(cookie, _)| *cookie == name)
        .map(|(_, value)| value)
}

/// The bearer token in a request, if it is one of ours.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && token.starts_with(TOKEN_PREFIX)).then_some(token)
}

/// Whether a browser sent this request from another origin: by its Fetch Metadata, or else by
/// `Origin` against the host it was sent to. Non-browser clients send neither and pass; their
/// credentials (tokens) are not something another site can make a browser send.
pub fn from_foreign_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        return !matches!(site.as_bytes(), b"same-origin" | b"none");
    }
    let Some(origin) = headers.get(http::header::ORIGIN) else {
        return false;
    };
    // "null" (sandboxed frames, some redirects) has no authority and is foreign.
    let Some((_, authority)) = origin.to_str().unwrap_or("").split_once("://") else {
        return true;
    };
    let sent_to = |name: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|host| host.trim().eq_ignore_ascii_case(authority))
    };
    // Behind a reverse proxy that rewrites Host, the browser's host arrives as X-Forwarded-Host.
    !(sent_to("host") || sent_to("x-forwarded-host"))
}

/// Who a request's credential stands for, and what the credential may do.
#[derive(Clone, PartialEq, Eq)]
pub struct Caller {
    pub user: UserRecord,
    /// Everything but `admin` for a browser's sign-in; what was granted for an API token.
    pub scopes: Scopes,
    /// When the API token expires, if it does.
    pub token_expires_at: Option<i64>,
    /// Until when a browser's sign-in may also act as an admin (see [`ADMIN_CONFIRMATION_MS`]).
    pub admin_until: Option<i64>,
    /// The request carried one of our API tokens (else a browser's sign-in).
    pub by_token: bool,
    /// When the browser's sign-in ends unless it is used again (ms).
    pub sign_in_expires_at: Option<i64>,
}

impl Caller {
    /// What the credential may do: an admin's confirmation, while it lasts, adds `admin`. The
    /// caller is taken as of the store's clock when it is resolved ([`Authenticator`]), so a
    /// confirmation that ran out is gone by then.
    pub fn scopes(&self) -> Scopes {
        match self.admin_until {
            Some(_) => self.scopes.with(Scope::Admin),
            None => self.scopes,
        }
    }

    pub fn viewer(&self) -> app::model::Viewer {
        app::model::Viewer {
            token_expires_at_ms: self.token_expires_at,
            // A token's maker chose their own password to make it; a sign-in's may be an admin's.
            must_change_password: self.user.must_change_password && !self.by_token,
            ..self.user.viewer(self.scopes())
        }
    }
}

/// Resolves requests to users, with a short cache for the proxy's sake.
pub struct Authenticator {
    store: Store,
    sessions: HttpSessionStore,
    /// The sign-in cookie's name ([`session_cookie_name`]).
    pub cookie_name: &'static str,
    cache: Mutex<FastMap<String, (Arc<Caller>, Instant)>>,
    /// Counts forgets (logout, a locked user), so that a lookup that was already under way
    /// when one happened does not put back what was just forgotten.
    forgets: std::sync::atomic::AtomicU64,
    /// What was forgotten, for the open WebSockets that stand on it to check again at once.
    forgotten: tokio::sync::broadcast::Sender<Forgotten>,
}

/// A user or a sign-in this server just forgot (see [`Authenticator::forget_user`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Forgotten {
    User(String),
    Cookie(String),
}

/// A request's credential, kept by a connection that outlives the request (a WebSocket) to be
/// checked again later.
#[derive(Clone)]
pub struct Credential {
    key: String,
    is_token: bool,
}

impl Credential {
    /// Whether forgetting `what` may change whom this credential, used by `user_id`, stands for.
    pub fn touched_by(&self, what: &Forgotten, user_id: &str) -> bool {
        match what {
            Forgotten::User(id) => id == user_id,
            Forgotten::Cookie(cookie) => !self.is_token && *cookie == self.key,
        }
    }

    pub fn of(headers: &HeaderMap, cookie_name: &str) -> Option<Credential> {
        let (key, is_token) = credential_key(headers, cookie_name)?;
        Some(Credential {
            key: key.to_string(),
            is_token,
        })
    }

    /// A request's credential on the entry origin (see [`ENTRY_COOKIE`]).
    pub fn of_entry(headers: &HeaderMap) -> Option<Credential> {
        let (key, is_token) = entry_key(headers)?;
        Some(Credential {
            key: key.to_string(),
            is_token,
        })
    }
}

/// The cookie in which the entry origin (`proxy.entry_origin`) keeps an admin's entry token
/// (`service::admin`): set only there, for one session's path; never read on our own origin.
pub const ENTRY_COOKIE: &str = "sandbox_enter";

/// On the entry origin: the bearer token, or else the entry cookie's token. Our sign-in cookie
/// counts for nothing there.
fn entry_key(headers: &HeaderMap) -> Option<(&str, bool)> {
    bearer_token(headers)
        .or_else(|| {
            session_cookie(headers, ENTRY_COOKIE).filter(|token| token.starts_with(TOKEN_PREFIX))
        })
        .map(|token| (token, true))
}

/// The bearer token, or else our session cookie: (its value, whether it is a token).
fn credential_key<'a>(headers: &'a HeaderMap, cookie_name: &str) -> Option<(&'a str, bool)> {
    match bearer_token(headers) {
        Some(token) => Some((token, true)),
        None => session_cookie(headers, cookie_name).map(|cookie| (cookie, false)),
    }
}

impl Authenticator {
    pub fn new(store: Store, sessions: HttpSessionStore, secure_cookies: bool) -> Authenticator {
        Authenticator {
            store,
            sessions,
            cookie_name: session_cookie_name(secure_cookies),
            cache: Mutex::new(FastMap::default()),
            forgets: std::sync::atomic::AtomicU64::new(0),
            forgotten: tokio::sync::broadcast::Sender::new(64),
        }
    }

    /// The caller behind a request's bearer token or session cookie; locked users count as
    /// nobody.
    pub async fn caller(&self, headers: &HeaderMap) -> Result<Option<Arc<Caller>>, StoreError> {
        match credential_key(headers, self.cookie_name) {
            Some((key, is_token)) => self.resolve(key, is_token).await,
            None => Ok(None),
        }
    }

    /// The caller on the entry origin: by a bearer token or the entry cookie's, never a sign-in.
    pub async fn entry_caller(
        &self,
        headers: &HeaderMap,
    ) -> Result<Option<Arc<Caller>>, StoreError> {
        match entry_key(headers) {
            Some((key, is_token)) => self.resolve(key, is_token).await,
            None => Ok(None),
        }
    }

    /// Whom a kept credential stands for now: nobody once it was revoked or its user locked.
    pub async fn caller_of(
        &self,
        credential: &Credential,
    ) -> Result<Option<Arc<Caller>>, StoreError> {
        self.resolve(&credential.key, credential.is_token).await
    }

    /// What this replica forgets from now on (see [`Self::forget_user`]).
    pub fn forgotten(&self) -> tokio::sync::broadcast::Receiver<Forgotten> {
        self.forgotten.subscribe()
    }

    async fn resolve(&self, key: &str, is_token: bool) -> Result<Option<Arc<Caller>>, StoreError> {
        // Keyed by the credential itself: tokens start with "gsb_", session ids never do.
        let caller = match self.cached(key) {
            Some(hit) => Some(hit),
            // Boxed: the database's future is large, and every proxied request's own future
            // would otherwise be as large.
            None => Box::pin(self.look_up(key, is_token)).await?,
        };
        Ok(caller.map(|caller| self.as_of_now(caller)))
    }

    /// The caller as of the store's clock (the one the rules and the tests' clock read): an
    /// admin's confirmation that has run out adds nothing any more.
    fn as_of_now(&self, caller: Arc<Caller>) -> Arc<Caller> {
        match caller.admin_until {
            Some(until) if until <= self.store.now() => Arc::new(Caller {
                admin_until: None,
                ..(*caller).clone()
            }),
            _ => caller,
        }
    }

    async fn look_up(&self, key: &str, is_token: bool) -> Result<Option<Arc<Caller>>, StoreError> {
        let forgets = self.forgets.load(std::sync::atomic::Ordering::Acquire);
        let caller = if is_token {
            self.store
                .user_by_token_hash(&token_hash(key))
                .await?
                .map(|owner| Caller {
                    user: owner.user,
                    scopes: owner.scopes,
                    token_expires_at: owner.expires_at,
                    admin_until: None,
                    by_token: true,
                    sign_in_expires_at: None,
                })
        } else {
            self.user_of_cookie(key)
                .await?
                .map(|(user, confirmed_at, expires_at)| Caller {
                    user,
                    scopes: Scopes::ALL.without(Scope::Admin),
                    token_expires_at: None,
                    admin_until: confirmed_at.map(|at| at + ADMIN_CONFIRMATION_MS),
                    by_token: false,
                    sign_in_expires_at: Some(expires_at),
                })
        };
        let user = caller.filter(|c| !c.user.locked).map(Arc::new);
        // Only known users are cached: unknown cookies and tokens cost a lookup each, but
        // cannot grow the cache.
        if let Some(found) = &user {
            let mut cache = self.cache.lock().expect("auth cache");
            if self.forgets.load(std::sync::atomic::Ordering::Acquire) != forgets {
                return Ok(user);
            }
            if cache.len() >= CACHE_CAPACITY {
                cache.retain(|_, (_, at)| at.elapsed() < CACHE_TTL);
                if cache.len() >= CACHE_CAPACITY {
                    cache.clear();
                }
            }
            cache.insert(key.to_string(), (found.clone(), Instant::now()));
        }
        Ok(user)
    }

    fn cached(&self, key: &str) -> Option<Arc<Caller>> {
        let now = self.store.now();
        let cache = self.cache.lock().expect("auth cache");
        cache
            .get(key)
            .filter(|(_, at)| at.elapsed() < CACHE_TTL)
            // A token that expired meanwhile expired: not a moment of it from the cache.
            .filter(|(caller, _)| caller.token_expires_at.is_none_or(|end| end > now))
            .map(|(user, _)| user.clone())
    }

    /// The cookie's user, when the person last confirmed who they are in it, and when the
    /// sign-in ends unless used (ms).
    async fn user_of_cookie(
        &self,
        cookie: &str,
    ) -> Result<Option<(UserRecord, Option<i64>, i64)>, StoreError> {
        let Ok(id) = tower_sessions::session::Id::from_str(cookie) else {
            return Ok(None);
        };
        // An error is an error, not nobody: an open WebSocket must not be closed for it.
        let record = match self.sessions.load(&id).await {
            Ok(Some(record)) => record,
            Ok(None) => return Ok(None),
            Err(e) => return Err(StoreError::Sessions(e.to_string())),
        };
        let signed_in_at = record.data.get(SIGNED_IN_KEY).and_then(|v| v.as_i64());
        if sign_in_expired(signed_in_at, self.store.now()) {
            return Ok(None);
        }
        let confirmed_at = [ADMIN_CONFIRMED_KEY, SSO_CONFIRMED_KEY]
            .iter()
            .filter_map(|key| record.data.get(*key).and_then(|v| v.as_i64()))
            .max();
        let expires_at = record.expiry_date.unix_timestamp() * 1000;
        match record.data.get(USER_KEY).and_then(|v| v.as_str()) {
            Some(user_id) => Ok(self
                .store
                .user_by_id(user_id)
                .await?
                .map(|user| (user, confirmed_at, expires_at))),
            None => Ok(None),
        }
    }

    /// Forgets everything cached for a user (locked, role changed), on this replica at once.
    pub fn forget_user(&self, user_id: &str) {
        let mut cache = self.cache.lock().expect("auth cache");
        cache.retain(|_, (caller, _)| caller.user.id != user_id);
        self.forgets
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let _ = self.forgotten.send(Forgotten::User(user_id.to_string()));
    }

    /// Forgets a cookie at once (logout, or its id cycled at sign-in), rather than when the
    /// cache entry expires. The cache is keyed by the cookie's value itself.
    pub fn forget_cookie(&self, cookie: &str) {
        let mut cache = self.cache.lock().expect("auth cache");
        cache.remove(cookie);
        self.forgets
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let _ = self.forgotten.send(Forgotten::Cookie(cookie.to_string()));
    }
}

/// Whether two byte strings are equal, in a time that does not depend on where they differ.
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// [`same_bytes`] for a presented secret and the configured one; their digests are compared,
/// so that not even the length leaks.
pub fn same_secret(presented: &str, configured: &str) -> bool {
    use sha2::Digest;
    same_bytes(
        &sha2::Sha256::digest(presented.as_bytes()),
        &sha2::Sha256::digest(configured.as_bytes()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_used_sign_in_is_extended_at_most_hourly() {
        let (hour, day) = (3600 * 1000, 24 * 3600 * 1000);
        let now = 100 * day;
        // Just saved: seven days ahead.
        assert!(!sign_in_wants_extending(now + 7 * day, now));
        assert!(!sign_in_wants_extending(now + 7 * day - hour + 1, now));
        // Saved more than an hour ago, or days ago.
        assert!(sign_in_wants_extending(now + 7 * day - hour - 1, now));
        assert!(sign_in_wants_extending(now + day, now));
    }

    #[test]
    fn a_sign_in_lives_fourteen_days_at_most() {
        let day = 24 * 3600 * 1000;
        let now = 100 * day;
        assert!(!sign_in_expired(Some(now - 13 * day), now));
        assert!(sign_in_expired(Some(now - 14 * day), now));
        assert!(
            !sign_in_expired(None, now),
            "kept from before: its idle limit ends it"
        );
    }

    #[test]
    fn a_client_waits_after_five_failures_of_a_name_and_another_client_does_not() {
        let throttle = SignInThrottle::default();
        let (a, b) = (
            Some("10.0.0.1".parse().unwrap()),
            Some("10.0.0.2".parse().unwrap()),
        );
        let start = Instant::now();
        for i in 0..SignInThrottle::PER_PAIR {
            let at = start + Duration::from_secs(u64::from(i));
            assert_eq!(throttle.attempt("pat", a, at), Ok(()), "attempt {i}");
        }
        let later = start + Duration::from_secs(20);
        assert_eq!(
            throttle.attempt("pat", a, later),
            Err(Duration::from_secs(40))
        );
        assert_eq!(
            throttle.attempt("pat", b, later),
            Ok(()),
            "the owner, elsewhere, signs in"
        );
        throttle.succeeded("pat", b);
        assert_eq!(
            throttle.attempt("quin", a, later),
            Ok(()),
            "other names are free"
        );
        // The window over, a new count begins.
        let next = start + SignInThrottle::WINDOW;
        for _ in 0..SignInThrottle::PER_PAIR {
            assert_eq!(throttle.attempt("pat", a, next), Ok(()));
        }
        assert!(throttle.attempt("pat", a, next).is_err());
        throttle.succeeded("pat", a);
        assert_eq!(
            throttle.attempt("pat", a, next),
            Ok(()),
            "signing in clears it"
        );
    }

    #[test]
    fn one_client_trying_many_names_is_stopped() {
        let throttle = SignInThrottle::default();
        let a = Some("10.0.0.1".parse().unwrap());
        let now = Instant::now();
        for i in 0..SignInThrottle::PER_CLIENT {
            assert_eq!(throttle.attempt(&format!("user{i}"), a, now), Ok(()));
        }
        assert!(throttle.attempt("one-more", a, now).is_err());
        assert_eq!(
            throttle.attempt("one-more", Some("10.0.0.9".parse().unwrap()), now),
            Ok(())
        );
    }

    #[test]
    fn a_name_failed_from_everywhere_is_refused_to_those_that_failed_it_only() {
        let throttle = SignInThrottle::default();
        let now = Instant::now();
        for i in 0..SignInThrottle::PER_NAME {
            let client = Some(std::net::IpAddr::from([
                10,
                1,
                (i / 256) as u8,
                (i % 256) as u8,
            ]));
            assert_eq!(throttle.attempt("root", client, now), Ok(()));
        }
        let failed_before = Some(std::net::IpAddr::from([10, 1, 0, 0]));
        assert_eq!(
            throttle.attempt("root", failed_before, now),
            Err(SignInThrottle::NAME_WINDOW)
        );
        let new_client = Some("10.9.9.9".parse().unwrap());
        assert_eq!(
            throttle.attempt("root", new_client, now),
            Ok(()),
            "a client that has not failed"
        );
    }

    #[test]
    fn passwords_verify_only_themselves() {
        let hash = hash_password("correct horse").unwrap();
        assert!(verify_password("correct horse", &hash));
        assert!(!verify_password("wrong horse", &hash));
        assert!(!verify_password("correct horse", "not a hash"));
    }

    #[test]
    fn only_browser_requests_from_elsewhere_are_foreign() {
        let with = |pairs: &[(&'static str, &'static str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.append(*name, value.parse().unwrap());
            }
            from_foreign_origin(&headers)
        };
        // Scripts and old browsers' navigations.
        assert!(!with(&[("host", "gpu.example:3000")]));
        // Fetch Metadata decides when a browser sends it.
        assert!(!with(&[("sec-fetch-site", "same-origin")]));
        assert!(!with(&[("sec-fetch-site", "none")]));
        assert!(with(&[("sec-fetch-site", "cross-site")]));
        assert!(with(&[("sec-fetch-site", "same-site")]));
        assert!(with(&[
            ("sec-fetch-site", "cross-site"),
            ("host", "gpu.example"),
            ("origin", "https://gpu.example"),
        ]));
        // Otherwise Origin against Host (or the host a front proxy forwarded).
        assert!(!with(&[
            ("host", "gpu.example:3000"),
            ("origin", "http://GPU.example:3000")
        ]));
        assert!(with(&[
            ("host", "gpu.example:3000"),
            ("origin", "http://evil.example")
        ]));
        assert!(with(&[("host", "gpu.example"), ("origin", "null")]));
        assert!(with(&[("origin", "https://gpu.example")]));
        assert!(!with(&[
            ("host", "sandbox:3000"),
            ("x-forwarded-host", "gpu.example"),
            ("origin", "https://gpu.example"),
        ]));
    }

    #[test]
    fn finds_our_cookie_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "cookie",
            "_xsrf=abc; sandbox_session=XYZ; other=1".parse().unwrap(),
        );
        assert_eq!(session_cookie(&headers, SESSION_COOKIE), Some("XYZ"));
        assert_eq!(session_cookie(&headers, SECURE_SESSION_COOKIE), None);
        headers.insert("cookie", "sandbox_sessionx=1".parse().unwrap());
        assert_eq!(session_cookie(&headers, SESSION_COOKIE), None);
        headers.insert(
            "cookie",
            "sandbox_session=PLAIN; __Host-sandbox_session=HOST"
                .parse()
                .unwrap(),
        );
        assert_eq!(
            session_cookie(&headers, SECURE_SESSION_COOKIE),
            Some("HOST")
        );
    }

    #[test]
    fn only_our_bearer_tokens_count() {
        let (token, hash) = new_api_token();
        assert!(token.starts_with("gsb_"));
        assert_eq!(token_hash(&token), hash);
        let mut headers = HeaderMap::new();
        headers.insert("authorization", format!("Bearer {token}").parse().unwrap());
        assert_eq!(bearer_token(&headers), Some(token.as_str()));
        headers.insert("authorization", "token abc".parse().unwrap());
        assert_eq!(bearer_token(&headers), None);
        headers.insert("authorization", "Bearer someone-elses".parse().unwrap());
        assert_eq!(bearer_token(&headers), None);
        headers.insert("authorization", "Bearer  gsb_spaced".parse().unwrap());
        assert_eq!(bearer_token(&headers), Some("gsb_spaced"));
    }
}
