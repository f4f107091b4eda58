//! Who is asking: session cookies (tower-sessions) and bearer tokens, passwords with argon2.

use crate::store::{HttpSessionStore, Store, StoreError, UserRecord};
use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use http::HeaderMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tower_sessions::SessionStore;

pub const SESSION_COOKIE: &str = "sandbox_session";
pub const USER_KEY: &str = "user_id";
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
pub async fn check_password(password: String, hash: Option<String>) -> bool {
    static DUMMY: OnceLock<String> = OnceLock::new();
    tokio::task::spawn_blocking(move || {
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

/// The session cookie's value in a request, if any.
pub fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value)
}

/// The bearer token in a request, if it is one of ours.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && token.starts_with(TOKEN_PREFIX)).then_some(token)
}

/// A fast hasher for the in-memory tables on the proxy's path (keys are not attacker-chosen
/// in a way that matters: only known credentials and session ids are stored).
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Resolves requests to users, with a short cache for the proxy's sake.
pub struct Authenticator {
    store: Store,
    sessions: HttpSessionStore,
    cache: Mutex<FastMap<String, (Arc<UserRecord>, Instant)>>,
    /// Counts forgets (logout, a locked user), so that a lookup that was already under way
    /// when one happened does not put back what was just forgotten.
    forgets: std::sync::atomic::AtomicU64,
}

impl Authenticator {
    pub fn new(store: Store, sessions: HttpSessionStore) -> Authenticator {
        Authenticator {
            store,
            sessions,
            cache: Mutex::new(FastMap::default()),
            forgets: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The user behind a request's bearer token or session cookie; locked users count as nobody.
    pub async fn user(&self, headers: &HeaderMap) -> Result<Option<Arc<UserRecord>>, StoreError> {
        // Keyed by the credential itself: tokens start with "gsb_", session ids never do.
        let (key, is_token) = match (bearer_token(headers), session_cookie(headers)) {
            (Some(token), _) => (token, true),
            (None, Some(cookie)) => (cookie, false),
            (None, None) => return Ok(None),
        };
        if let Some(hit) = self.cached(key) {
            return Ok(Some(hit));
        }
        let forgets = self.forgets.load(std::sync::atomic::Ordering::Acquire);
        let user = if is_token {
            self.store.user_by_token_hash(&token_hash(key)).await?
        } else {
            self.user_of_cookie(key).await?
        };
        let user = user.filter(|u| !u.locked).map(Arc::new);
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

    fn cached(&self, key: &str) -> Option<Arc<UserRecord>> {
        let cache = self.cache.lock().expect("auth cache");
        cache
            .get(key)
            .filter(|(_, at)| at.elapsed() < CACHE_TTL)
            .map(|(user, _)| user.clone())
    }

    async fn user_of_cookie(&self, cookie: &str) -> Result<Option<UserRecord>, StoreError> {
        let Ok(id) = tower_sessions::session::Id::from_str(cookie) else {
            return Ok(None);
        };
        let record = match self.sessions.load(&id).await {
            Ok(Some(record)) => record,
            Ok(None) => return Ok(None),
            Err(e) => {
                tracing::warn!(error = %e, "session store");
                return Ok(None);
            }
        };
        match record.data.get(USER_KEY).and_then(|v| v.as_str()) {
            Some(user_id) => self.store.user_by_id(user_id).await,
            None => Ok(None),
        }
    }

    /// Forgets everything cached for a user (locked, role changed), on this replica at once.
    pub fn forget_user(&self, user_id: &str) {
        let mut cache = self.cache.lock().expect("auth cache");
        cache.retain(|_, (user, _)| user.id != user_id);
        self.forgets
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// Forgets a cookie at once (logout, or its id cycled at sign-in), rather than when the
    /// cache entry expires. The cache is keyed by the cookie's value itself.
    pub fn forget_cookie(&self, cookie: &str) {
        let mut cache = self.cache.lock().expect("auth cache");
        cache.remove(cookie);
        self.forgets
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_verify_only_themselves() {
        let hash = hash_password("correct horse").unwrap();
        assert!(verify_password("correct horse", &hash));
        assert!(!verify_password("wrong horse", &hash));
        assert!(!verify_password("correct horse", "not a hash"));
    }

    #[test]
    fn finds_our_cookie_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "cookie",
            "_xsrf=abc; sandbox_session=XYZ; other=1".parse().unwrap(),
        );
        assert_eq!(session_cookie(&headers), Some("XYZ"));
        headers.insert("cookie", "sandbox_sessionx=1".parse().unwrap());
        assert_eq!(session_cookie(&headers), None);
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
