//! Sign-in with an OpenID Connect provider (Keycloak, Dex, GitHub through Dex, …): the
//! authorization code flow with PKCE, a `state` and a `nonce`. The `oauth2` crate builds the URLs
//! and the code exchange; their HTTP goes through our own client with rustls (`net::outbound`, 10 s
//! per request). The two routes are `http::sign_in`; accounts are `service::accounts`.
//!
//! The discovery document and keys are cached for an hour, and read again at once when a token
//! names a key we lack (the provider rotated its keys). The provider and every endpoint it
//! publishes must be https, or http to this machine: its keys decide who may sign in. The document
//! must name the configured issuer.
//!
//! [`Oidc::start`] makes a [`Pending`] sign-in (state, nonce, PKCE verifier, where to go next, when
//! it started; good for 10 minutes) for the browser's session to keep; with `confirm` it asks the
//! provider for `prompt=login` and `max_age=0`, for a person who must show they are at the
//! keyboard. [`Oidc::finish`] exchanges the code with the verifier and checks the ID token: its
//! signature against the published keys (RS256 or ES256, verified with `ring`; `none` and unknown
//! algorithms are refused), then its issuer, audience (`azp` when there are several), expiry (60 s
//! of clock leeway) and nonce (OpenID Connect Core 3.1.3.7), and for a confirmation an `auth_time`
//! from after the request. Claims the ID token lacks are filled in from userinfo when it is about
//! the same subject. The identity is `<issuer>|<sub>`; the name and groups come from the configured
//! claims (an `email` only when `email_verified`), and with `oidc.admin_groups` the groups decide
//! the role ([`role_of`]).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use oauth2::{
    AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointNotSet, EndpointSet,
    ExtraTokenFields, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope,
    StandardTokenResponse, TokenResponse, TokenUrl,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::RwLock;

pub use crate::config::oidc::{CALLBACK_PATH, OidcConfig, secure_or_local};

pub const LOGIN_PATH: &str = "/auth/oidc/login";

/// What went wrong; shown to the person as one of a few fixed messages (`public`), logged whole.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    /// The provider could not be reached or answered nonsense.
    #[error("the identity provider: {0}")]
    Provider(String),
    /// The ID token or the claims failed a check.
    #[error("the ID token: {0}")]
    Token(String),
    /// The provider sent the person back with an error (they cancelled, say).
    #[error("the provider refused: {0}")]
    Refused(String),
    /// The sign-in started elsewhere, or too long ago.
    #[error("no sign-in of this browser is waiting for this answer")]
    Stale,
    /// The claims lack what names the account.
    #[error("{0}")]
    Claims(String),
    /// The account would be named by an email address the provider has not verified.
    #[error("the identity provider has not verified the email address {0}")]
    UnverifiedEmail(String),
}

/// What the browser must bring back: kept in its (pre-sign-in) session between the two steps.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Pending {
    state: String,
    nonce: String,
    verifier: String,
    /// Where to go after signing in (a local path).
    pub next: Option<String>,
    started_at_ms: i64,
    /// The provider was asked to have the person sign in again, now (see [`Identity::confirmed`]).
    #[serde(default)]
    confirm: bool,
}

/// A person the provider vouched for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// `<issuer>|<sub>`: stable for the person, unlike their name.
    pub subject: String,
    pub name: String,
    pub groups: Vec<String>,
    /// The person signed in at the provider just now, having been asked to (`prompt=login`):
    /// enough to make a lasting credential for an account without a password.
    pub confirmed: bool,
}

/// The provider's endpoints, from its discovery document.
#[derive(Clone, Debug, Deserialize)]
struct Discovery {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    userinfo_endpoint: Option<String>,
    jwks_uri: String,
}

#[derive(Clone, Debug, Deserialize)]
struct Jwk {
    kty: String,
    kid: Option<String>,
    #[serde(rename = "use")]
    usage: Option<String>,
    alg: Option<String>,
    n: Option<String>,
    e: Option<String>,
    crv: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
struct JwkSet {
    keys: Vec<Jwk>,
}

/// The token response's OpenID Connect part.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct IdTokenField {
    id_token: String,
}

impl ExtraTokenFields for IdTokenField {}

type OidcTokenResponse = StandardTokenResponse<IdTokenField, oauth2::basic::BasicTokenType>;
type OidcClient = oauth2::Client<
    oauth2::basic::BasicErrorResponse,
    OidcTokenResponse,
    oauth2::basic::BasicTokenIntrospectionResponse,
    oauth2::StandardRevocableToken,
    oauth2::basic::BasicRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointSet,
>;

type HttpClient = crate::net::outbound::HttpsClient<Full<Bytes>>;

/// How long the provider may take to answer one request.
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a started sign-in waits for the browser to come back.
const PENDING_FOR_MS: i64 = 10 * 60 * 1000;
/// Clock difference tolerated between us and the provider.
const LEEWAY_SECONDS: i64 = 60;
/// The discovery document and keys are read again after this long, or at once when a token
/// names a key we do not have (the provider rotated its keys).
const METADATA_FOR: Duration = Duration::from_secs(3600);

pub struct Oidc {
    pub config: OidcConfig,
    /// Made at first use: the system's trusted roots are read then.
    http: std::sync::OnceLock<Result<HttpClient, String>>,
    metadata: RwLock<Option<Arc<Metadata>>>,
}

struct Metadata {
    discovery: Discovery,
    keys: Vec<Jwk>,
    read_at: std::time::Instant,
}

impl Oidc {
    pub fn new(config: OidcConfig) -> Oidc {
        Oidc {
            config,
            http: std::sync::OnceLock::new(),
            metadata: RwLock::new(None),
        }
    }

    fn http(&self) -> Result<&HttpClient, ProviderUnreachable> {
        self.http
            .get_or_init(crate::net::outbound::https_client)
            .as_ref()
            .map_err(|e| ProviderUnreachable(e.clone()))
    }

    /// Where to send the browser to sign in, and what its session must keep until it returns.
    /// With `confirm`, the provider is asked to have the person sign in again rather than pass
    /// them through on its own session.
    pub async fn start(
        &self,
        next: Option<String>,
        confirm: bool,
    ) -> Result<(String, Pending), OidcError> {
        let metadata = self.metadata(false).await?;
        let client = self.client(&metadata.discovery)?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let nonce = CsrfToken::new_random();
        let mut request = client
            .authorize_url(CsrfToken::new_random)
            .set_pkce_challenge(challenge)
            .add_extra_param("nonce", nonce.secret().clone());
        for scope in &self.config.scopes {
            request = request.add_scope(Scope::new(scope.clone()));
        }
        if confirm {
            request = request
                .add_extra_param("prompt", "login")
                .add_extra_param("max_age", "0");
        }
        let (url, state) = request.url();
        Ok((
            url.to_string(),
            Pending {
                state: state.secret().clone(),
                nonce: nonce.secret().clone(),
                verifier: verifier.secret().clone(),
                next,
                // The wall clock, not the store's: this and the ID token's times below are
                // the provider's and the browser's, who keep real time.
                started_at_ms: crate::util::now_ms(),
                confirm,
            },
        ))
    }

    /// Whether `state` is the answer this pending sign-in waits for (and not too late).
    pub fn answers(pending: &Pending, state: &str) -> bool {
        crate::util::now_ms() - pending.started_at_ms < PENDING_FOR_MS
            && constant_time_eq(state.as_bytes(), pending.state.as_bytes())
    }

    /// Checks the provider's answer against the pending sign-in and returns who it vouched for.
    pub async fn finish(
        &self,
        pending: &Pending,
        state: &str,
        code: &str,
    ) -> Result<Identity, OidcError> {
        if !Oidc::answers(pending, state) {
            return Err(OidcError::Stale);
        }
        let metadata = self.metadata(false).await?;
        let client = self.client(&metadata.discovery)?;
        let http = Sender(self);
        let tokens = client
            .exchange_code(AuthorizationCode::new(code.to_string()))
            .set_pkce_verifier(PkceCodeVerifier::new(pending.verifier.clone()))
            .request_async(&http)
            .await
            .map_err(|e| OidcError::Provider(format!("exchanging the code: {}", describe(&e))))?;
        let id_token = &tokens.extra_fields().id_token;
        let claims = match verify_id_token(id_token, &metadata.keys) {
            Err(KeyMissing) => {
                // Keys rotated since we read them: read them again, once.
                let metadata = self.metadata(true).await?;
                verify_id_token(id_token, &metadata.keys)
                    .map_err(|KeyMissing| OidcError::Token("signed with an unknown key".into()))?
            }
            Ok(claims) => claims,
        }?;
        check_claims(
            &claims,
            &metadata.discovery.issuer,
            &self.config.client_id,
            &pending.nonce,
            crate::util::now_ms() / 1000,
        )?;
        let mut claims = claims;
        if let Some(userinfo) = &metadata.discovery.userinfo_endpoint {
            let info = self
                .userinfo(userinfo, tokens.access_token().secret())
                .await?;
            merge_userinfo(&mut claims, info)?;
        }
        let mut identity = identity(&claims, &metadata.discovery.issuer, &self.config)?;
        identity.confirmed =
            pending.confirm && signed_in_since(&claims, pending.started_at_ms / 1000);
        Ok(identity)
    }

    fn client(&self, discovery: &Discovery) -> Result<OidcClient, OidcError> {
        let bad = |what: &str| OidcError::Provider(format!("its {what} is not a URL"));
        Ok(
            oauth2::Client::new(ClientId::new(self.config.client_id.clone()))
                .set_client_secret(ClientSecret::new(self.config.client_secret.clone()))
                .set_auth_uri(
                    AuthUrl::new(discovery.authorization_endpoint.clone())
                        .map_err(|_| bad("authorization_endpoint"))?,
                )
                .set_token_uri(
                    TokenUrl::new(discovery.token_endpoint.clone())
                        .map_err(|_| bad("token_endpoint"))?,
                )
                .set_redirect_uri(
                    RedirectUrl::new(self.config.redirect_url.clone())
                        .map_err(|_| bad("redirect_url"))?,
                ),
        )
    }

    /// The discovery document and keys, read when missing, old, or `refresh`.
    async fn metadata(&self, refresh: bool) -> Result<Arc<Metadata>, OidcError> {
        if !refresh
            && let Some(metadata) = self.metadata.read().await.as_ref()
            && metadata.read_at.elapsed() < METADATA_FOR
        {
            return Ok(metadata.clone());
        }
        let mut slot = self.metadata.write().await;
        // Another request may have read it while this one waited for the lock.
        if let Some(metadata) = slot.as_ref()
            && metadata.read_at.elapsed() < Duration::from_secs(if refresh { 10 } else { 3600 })
        {
            return Ok(metadata.clone());
        }
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.config.issuer.trim_end_matches('/')
        );
        let discovery: Discovery = self.get_json(&url, None).await?;
        for (what, endpoint) in [
            (
                "authorization_endpoint",
                Some(&discovery.authorization_endpoint),
            ),
            ("token_endpoint", Some(&discovery.token_endpoint)),
            ("jwks_uri", Some(&discovery.jwks_uri)),
            ("userinfo_endpoint", discovery.userinfo_endpoint.as_ref()),
        ] {
            if let Some(endpoint) = endpoint
                && !secure_or_local(endpoint)
            {
                return Err(OidcError::Provider(format!(
                    "its {what} {endpoint:?} is not https"
                )));
            }
        }
        if discovery.issuer != self.config.issuer {
            return Err(OidcError::Provider(format!(
                "its discovery document names the issuer {:?}, not the configured {:?}",
                discovery.issuer, self.config.issuer
            )));
        }
        let keys: JwkSet = self.get_json(&discovery.jwks_uri, None).await?;
        let metadata = Arc::new(Metadata {
            discovery,
            keys: keys.keys,
            read_at: std::time::Instant::now(),
        });
        *slot = Some(metadata.clone());
        Ok(metadata)
    }

    async fn userinfo(
        &self,
        url: &str,
        access_token: &str,
    ) -> Result<Map<String, Value>, OidcError> {
        self.get_json(url, Some(access_token)).await
    }

    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
        bearer: Option<&str>,
    ) -> Result<T, OidcError> {
        let mut request = http::Request::get(url).header(http::header::ACCEPT, "application/json");
        if let Some(token) = bearer {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request
            .body(Vec::new())
            .map_err(|_| OidcError::Provider(format!("{url} is not a URL")))?;
        let response = self
            .send(request)
            .await
            .map_err(|e| OidcError::Provider(e.to_string()))?;
        if !response.status().is_success() {
            return Err(OidcError::Provider(format!(
                "GET {url} answered {}",
                response.status()
            )));
        }
        serde_json::from_slice(response.body())
            .map_err(|e| OidcError::Provider(format!("GET {url}: {e}")))
    }

    async fn send(
        &self,
        request: oauth2::HttpRequest,
    ) -> Result<oauth2::HttpResponse, ProviderUnreachable> {
        let (parts, body) = request.into_parts();
        let request = http::Request::from_parts(parts, Full::new(Bytes::from(body)));
        let http = self.http()?;
        let exchange = async {
            let response = http
                .request(request)
                .await
                .map_err(|e| ProviderUnreachable(e.to_string()))?;
            let (parts, body) = response.into_parts();
            let body = http_body_util::Limited::new(body, 1024 * 1024)
                .collect()
                .await
                .map_err(|e| ProviderUnreachable(e.to_string()))?
                .to_bytes();
            Ok(http::Response::from_parts(parts, body.to_vec()))
        };
        tokio::time::timeout(PROVIDER_TIMEOUT, exchange)
            .await
            .unwrap_or_else(|_| Err(ProviderUnreachable("no answer in time".into())))
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ProviderUnreachable(String);

/// Our HTTP client as `oauth2` asks for one, with a future that may move between threads.
struct Sender<'a>(&'a Oidc);

impl<'c> oauth2::AsyncHttpClient<'c> for Sender<'_> {
    type Error = ProviderUnreachable;
    type Future = std::pin::Pin<
        Box<dyn Future<Output = Result<oauth2::HttpResponse, ProviderUnreachable>> + Send + 'c>,
    >;

    fn call(&'c self, request: oauth2::HttpRequest) -> Self::Future {
        Box::pin(self.0.send(request))
    }
}

fn describe<RE: std::error::Error + 'static>(
    e: &oauth2::RequestTokenError<RE, oauth2::basic::BasicErrorResponse>,
) -> String {
    match e {
        oauth2::RequestTokenError::ServerResponse(answer) => answer.to_string(),
        oauth2::RequestTokenError::Request(e) => e.to_string(),
        oauth2::RequestTokenError::Parse(e, _) => format!("an unreadable answer ({e})"),
        oauth2::RequestTokenError::Other(e) => e.clone(),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    super::auth::same_bytes(a, b)
}

/// The token names a key the set lacks.
#[derive(Debug)]
struct KeyMissing;

/// The ID token's claims, once its signature checks out against one of `keys`.
fn verify_id_token(
    token: &str,
    keys: &[Jwk],
) -> Result<Result<Map<String, Value>, OidcError>, KeyMissing> {
    let bad = |why: &str| Ok(Err(OidcError::Token(why.to_string())));
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return bad("not a signed JWT");
    };
    let Some(header) = decode_json(header) else {
        return bad("an unreadable header");
    };
    let alg = header
        .get("alg")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kid = header.get("kid").and_then(Value::as_str);
    let Ok(signature) = URL_SAFE_NO_PAD.decode(signature) else {
        return bad("an unreadable signature");
    };
    let signed = &token.as_bytes()[..header_and_payload_len(token)];
    let candidates: Vec<&Jwk> = keys
        .iter()
        .filter(|k| k.usage.as_deref().is_none_or(|u| u == "sig"))
        .filter(|k| kid.is_none() || k.kid.as_deref() == kid)
        .filter(|k| k.alg.as_deref().is_none_or(|a| a == alg))
        .collect();
    if candidates.is_empty() {
        return Err(KeyMissing);
    }
    let verified = candidates
        .iter()
        .any(|key| verify_signature(alg, key, signed, &signature).unwrap_or(false));
    if !verified {
        if !matches!(alg, "RS256" | "ES256") {
            return bad(&format!(
                "signed with {alg:?}; RS256 and ES256 are accepted"
            ));
        }
        return bad("its signature does not verify");
    }
    match decode_json(payload) {
        Some(claims) => Ok(Ok(claims)),
        None => bad("unreadable claims"),
    }
}

fn header_and_payload_len(token: &str) -> usize {
    token.rfind('.').unwrap_or(token.len())
}

fn decode_json(part: &str) -> Option<Map<String, Value>> {
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).ok()?).ok()
}

/// Whether `signature` is `key`'s over `signed` with `alg` (an unusable key is `None`).
fn verify_signature(alg: &str, key: &Jwk, signed: &[u8], signature: &[u8]) -> Option<bool> {
    use ring::signature as sig;
    let field = |v: &Option<String>| URL_SAFE_NO_PAD.decode(v.as_deref()?).ok();
    match (alg, key.kty.as_str()) {
        ("RS256", "RSA") => {
            let key = sig::RsaPublicKeyComponents {
                n: field(&key.n)?,
                e: field(&key.e)?,
            };
            Some(
                key.verify(&sig::RSA_PKCS1_2048_8192_SHA256, signed, signature)
                    .is_ok(),
            )
        }
        ("ES256", "EC") if key.crv.as_deref() == Some("P-256") => {
            let mut point = vec![4];
            point.extend(field(&key.x)?);
            point.extend(field(&key.y)?);
            Some(
                sig::UnparsedPublicKey::new(&sig::ECDSA_P256_SHA256_FIXED, point)
                    .verify(signed, signature)
                    .is_ok(),
            )
        }
        _ => None,
    }
}

/// The checks of OpenID Connect Core 3.1.3.7 that are not the signature's.
fn check_claims(
    claims: &Map<String, Value>,
    issuer: &str,
    client_id: &str,
    nonce: &str,
    now_seconds: i64,
) -> Result<(), OidcError> {
    let bad = |why: String| Err(OidcError::Token(why));
    if claims.get("iss").and_then(Value::as_str) != Some(issuer) {
        return bad(format!("issued by {:?}, not {issuer:?}", claims.get("iss")));
    }
    let audiences: Vec<&str> = match claims.get("aud") {
        Some(Value::String(one)) => vec![one],
        Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !audiences.contains(&client_id) {
        return bad(format!("meant for {audiences:?}, not this server"));
    }
    let azp = claims.get("azp").and_then(Value::as_str);
    if (audiences.len() > 1 || azp.is_some()) && azp != Some(client_id) {
        return bad("its authorized party (azp) is not this server".into());
    }
    match claims.get("exp").and_then(Value::as_i64) {
        Some(exp) if exp + LEEWAY_SECONDS > now_seconds => {}
        _ => return bad("expired".into()),
    }
    if claims
        .get("iat")
        .and_then(Value::as_i64)
        .is_some_and(|iat| iat > now_seconds + LEEWAY_SECONDS)
    {
        return bad("issued in the future".into());
    }
    let sent = claims
        .get("nonce")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !constant_time_eq(sent.as_bytes(), nonce.as_bytes()) {
        return bad("its nonce is not this sign-in's".into());
    }
    if claims
        .get("sub")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return bad("no subject".into());
    }
    Ok(())
}

/// Whether the claims say the person signed in at the provider at `since` (seconds) or later.
fn signed_in_since(claims: &Map<String, Value>, since: i64) -> bool {
    claims
        .get("auth_time")
        .and_then(Value::as_i64)
        .is_some_and(|at| at + LEEWAY_SECONDS >= since)
}

/// Adds the userinfo claims the ID token lacks; they must be about the same subject.
fn merge_userinfo(
    claims: &mut Map<String, Value>,
    info: Map<String, Value>,
) -> Result<(), OidcError> {
    if info.get("sub") != claims.get("sub") {
        return Err(OidcError::Token(
            "the userinfo is about another subject".into(),
        ));
    }
    for (name, value) in info {
        claims.entry(name).or_insert(value);
    }
    Ok(())
}

/// Who the claims name: the account's name from `username_claim`, the groups from
/// `groups_claim` (a list, or one string).
fn identity(
    claims: &Map<String, Value>,
    issuer: &str,
    config: &OidcConfig,
) -> Result<Identity, OidcError> {
    let sub = claims
        .get("sub")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = claims
        .get(&config.username_claim)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            OidcError::Claims(format!(
                "the identity provider sent no `{}`, which names your account here",
                config.username_claim
            ))
        })?;
    // An address nobody verified is one anybody could type: a colleague's, before they come.
    if config.username_claim == "email"
        && !config.allow_unverified_email
        && claims.get("email_verified").and_then(Value::as_bool) != Some(true)
    {
        return Err(OidcError::UnverifiedEmail(name.to_string()));
    }
    let groups = match claims.get(&config.groups_claim) {
        Some(Value::Array(groups)) => groups
            .iter()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect(),
        Some(Value::String(group)) => vec![group.clone()],
        _ => {
            if !config.admin_groups.is_empty() {
                // Everyone would be a plain user: most likely the scope that carries groups
                // is missing from `oidc.scopes`.
                tracing::warn!(
                    claim = %config.groups_claim,
                    "the identity provider sent no groups claim, so nobody is an admin by group; is its scope in oidc.scopes?"
                );
            }
            Vec::new()
        }
    };
    Ok(Identity {
        subject: format!("{issuer}|{sub}"),
        name: name.to_string(),
        groups,
        confirmed: false,
    })
}

/// The role the provider's groups give, when the provider decides roles.
pub fn role_of(identity: &Identity, admin_groups: &[String]) -> Option<app::model::Role> {
    if admin_groups.is_empty() {
        return None;
    }
    Some(
        if identity.groups.iter().any(|g| admin_groups.contains(g)) {
            app::model::Role::Admin
        } else {
            app::model::Role::User
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::oidc::{
        default_display_name, default_groups_claim, default_scopes, default_username_claim,
    };
    use ring::rand::SystemRandom;
    use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
    use serde_json::json;

    fn config() -> OidcConfig {
        OidcConfig {
            issuer: "https://id.example".into(),
            client_id: "sandbox".into(),
            client_secret: "s".into(),
            redirect_url: "https://gpu.example/auth/oidc/callback".into(),
            display_name: default_display_name(),
            scopes: default_scopes(),
            username_claim: "preferred_username".into(),
            allow_unverified_email: false,
            groups_claim: default_groups_claim(),
            admin_groups: vec!["gpu-admins".into()],
        }
    }

    /// An ES256 key pair, its JWK, and a signer of tokens with it.
    fn es256(kid: &str) -> (Jwk, impl Fn(&Value) -> String) {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let point = pair.public_key().as_ref();
        let jwk = Jwk {
            kty: "EC".into(),
            kid: Some(kid.into()),
            usage: Some("sig".into()),
            alg: Some("ES256".into()),
            n: None,
            e: None,
            crv: Some("P-256".into()),
            x: Some(URL_SAFE_NO_PAD.encode(&point[1..33])),
            y: Some(URL_SAFE_NO_PAD.encode(&point[33..65])),
        };
        let kid = kid.to_string();
        let sign = move |claims: &Value| {
            let header = json!({ "alg": "ES256", "kid": kid, "typ": "JWT" });
            let signed = format!(
                "{}.{}",
                URL_SAFE_NO_PAD.encode(header.to_string()),
                URL_SAFE_NO_PAD.encode(claims.to_string())
            );
            let signature = pair.sign(&SystemRandom::new(), signed.as_bytes()).unwrap();
            format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
        };
        (jwk, sign)
    }

    #[test]
    fn only_a_token_signed_by_a_published_key_is_read() {
        let (key, sign) = es256("k1");
        let (other_key, sign_other) = es256("k1");
        let claims = json!({ "sub": "u1", "iss": "https://id.example" });
        let token = sign(&claims);
        let read = verify_id_token(&token, std::slice::from_ref(&key))
            .unwrap()
            .unwrap();
        assert_eq!(read["sub"], "u1");
        // Same key id, another key: a forgery.
        let forged = sign_other(&claims);
        assert!(matches!(
            verify_id_token(&forged, std::slice::from_ref(&key)).unwrap(),
            Err(OidcError::Token(why)) if why.contains("does not verify")
        ));
        // Claims changed after signing.
        let mut parts: Vec<&str> = token.split('.').collect();
        let altered = URL_SAFE_NO_PAD.encode(json!({ "sub": "admin" }).to_string());
        parts[1] = &altered;
        assert!(
            verify_id_token(&parts.join("."), std::slice::from_ref(&key))
                .unwrap()
                .is_err()
        );
        // A key id the set lacks: read the keys again.
        let (_, sign_new) = es256("k2");
        assert!(verify_id_token(&sign_new(&claims), &[key, other_key]).is_err());
        // Unsigned tokens are refused.
        let none = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(json!({ "alg": "none" }).to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        assert!(matches!(verify_id_token(&none, &[]), Err(KeyMissing)));
        let (key, _) = es256("k3");
        let none = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(json!({ "alg": "none", "kid": "k3" }).to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let mut any_alg = key.clone();
        any_alg.alg = None;
        assert!(verify_id_token(&none, &[any_alg]).unwrap().is_err());
    }

    #[test]
    fn claims_must_be_for_us_fresh_and_of_this_sign_in() {
        let now = 1_700_000_000;
        let good = json!({
            "iss": "https://id.example", "aud": "sandbox", "sub": "u1",
            "exp": now + 300, "iat": now, "nonce": "n1",
        });
        let check = |claims: &Value| {
            check_claims(
                claims.as_object().unwrap(),
                "https://id.example",
                "sandbox",
                "n1",
                now,
            )
        };
        assert!(check(&good).is_ok());
        let with = |key: &str, value: Value| {
            let mut claims = good.clone();
            claims[key] = value;
            claims
        };
        for (bad, why) in [
            (with("iss", json!("https://evil.example")), "issued by"),
            (with("aud", json!("another-app")), "meant for"),
            (with("aud", json!(["sandbox", "another-app"])), "azp"),
            (with("azp", json!("another-app")), "azp"),
            (with("exp", json!(now - 120)), "expired"),
            (with("iat", json!(now + 3600)), "future"),
            (with("nonce", json!("n2")), "nonce"),
            (with("sub", json!("")), "subject"),
        ] {
            let err = check(&bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
        let several = with("aud", json!(["sandbox", "another-app"]));
        let mut several = several.as_object().unwrap().clone();
        several.insert("azp".into(), json!("sandbox"));
        assert!(check(&Value::Object(several)).is_ok());
        // Within the clock leeway.
        assert!(check(&with("exp", json!(now - 30))).is_ok());
    }

    #[test]
    fn the_name_and_groups_come_from_the_configured_claims() {
        let config = config();
        let claims = json!({ "sub": "u1", "preferred_username": " olga ", "groups": ["staff", "gpu-admins"] });
        let who = identity(claims.as_object().unwrap(), "https://id.example", &config).unwrap();
        assert_eq!(who.subject, "https://id.example|u1");
        assert_eq!(who.name, "olga");
        assert_eq!(
            role_of(&who, &config.admin_groups),
            Some(app::model::Role::Admin)
        );
        let claims = json!({ "sub": "u2", "preferred_username": "omar", "groups": "staff" });
        let who = identity(claims.as_object().unwrap(), "https://id.example", &config).unwrap();
        assert_eq!(who.groups, ["staff"]);
        assert_eq!(
            role_of(&who, &config.admin_groups),
            Some(app::model::Role::User)
        );
        assert_eq!(
            role_of(&who, &[]),
            None,
            "roles stay ours without admin groups"
        );
        let nameless = json!({ "sub": "u3", "email": "x@example" });
        let err = identity(nameless.as_object().unwrap(), "https://id.example", &config)
            .unwrap_err()
            .to_string();
        assert!(err.contains("preferred_username"), "{err}");
    }

    #[test]
    fn an_email_names_an_account_only_once_the_provider_verified_it() {
        let config = OidcConfig {
            username_claim: default_username_claim(),
            ..config()
        };
        assert_eq!(config.username_claim, "email", "the default");
        let with = |verified: Value| {
            let claims =
                json!({ "sub": "u1", "email": "bob@example.test", "email_verified": verified });
            identity(claims.as_object().unwrap(), "https://id.example", &config)
        };
        assert_eq!(with(json!(true)).unwrap().name, "bob@example.test");
        for unverified in [json!(false), json!("true"), Value::Null] {
            let err = with(unverified.clone()).unwrap_err().to_string();
            assert!(err.contains("not verified"), "{unverified}: {err}");
            assert!(matches!(
                with(unverified.clone()),
                Err(OidcError::UnverifiedEmail(_))
            ));
        }
        let trusting = OidcConfig {
            allow_unverified_email: true,
            ..config.clone()
        };
        let claims = json!({ "sub": "u1", "email": "bob@example.test" });
        let who = identity(claims.as_object().unwrap(), "https://id.example", &trusting).unwrap();
        assert_eq!(who.name, "bob@example.test");
    }

    #[test]
    fn a_confirmation_needs_a_sign_in_at_the_provider_since_it_was_asked_for() {
        let asked = 1_700_000_000;
        let at = |t: i64| json!({ "auth_time": t }).as_object().unwrap().clone();
        assert!(signed_in_since(&at(asked + 5), asked));
        assert!(
            signed_in_since(&at(asked - 30), asked),
            "within the clock leeway"
        );
        assert!(!signed_in_since(&at(asked - 3600), asked), "an old sign-in");
        assert!(!signed_in_since(&Map::new(), asked), "no auth_time");
    }

    #[test]
    fn userinfo_fills_in_only_for_the_same_subject() {
        let mut claims = json!({ "sub": "u1", "preferred_username": "olga" })
            .as_object()
            .unwrap()
            .clone();
        let info = json!({ "sub": "u1", "preferred_username": "mallory", "groups": ["g"] });
        merge_userinfo(&mut claims, info.as_object().unwrap().clone()).unwrap();
        assert_eq!(
            claims["preferred_username"], "olga",
            "the ID token's claims win"
        );
        assert_eq!(claims["groups"], json!(["g"]));
        let other = json!({ "sub": "u2" });
        assert!(merge_userinfo(&mut claims, other.as_object().unwrap().clone()).is_err());
    }

    #[test]
    fn configuration_problems_name_their_key() {
        assert!(config().problem().is_none());
        let mut bad = config();
        bad.redirect_url = "https://gpu.example/elsewhere".into();
        assert_eq!(bad.problem().unwrap().0, "redirect_url");
        let mut bad = config();
        bad.scopes = vec!["profile".into()];
        assert_eq!(bad.problem().unwrap().0, "scopes");
        let mut bad = config();
        bad.issuer = "id.example".into();
        assert_eq!(bad.problem().unwrap().0, "issuer");
        bad.issuer = "http://id.example".into();
        assert_eq!(bad.problem().unwrap().0, "issuer", "plain http elsewhere");
        bad.issuer = "http://127.0.0.1:4000".into();
        assert!(bad.problem().is_none(), "plain http on this machine");
        assert!(secure_or_local("http://localhost:8080/x"));
        assert!(!secure_or_local("http://10.0.0.1/x"));
    }
}
