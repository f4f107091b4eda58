//! `[oidc]`: the OpenID Connect provider to sign in with.

use super::InvalidKey;
use serde::{Deserialize, Serialize};

/// Where the provider sends the browser back, under this server's public URL.
pub const CALLBACK_PATH: &str = "/auth/oidc/callback";

/// `[oidc]` in the configuration; absent: local accounts only.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcConfig {
    /// The provider's issuer URL, exactly as its discovery document names it.
    pub issuer: String,
    pub client_id: String,
    pub client_secret: String,
    /// Where the provider sends the browser back: this server's public URL followed by
    /// `/auth/oidc/callback`, as registered with the provider.
    pub redirect_url: String,
    /// Shown on the sign-in page: "Sign in with <display_name>".
    #[serde(default = "default_display_name")]
    pub display_name: String,
    #[serde(default = "default_scopes")]
    pub scopes: Vec<String>,
    /// The claim that names the account at its first sign-in. It must be one people cannot set
    /// to a colleague's name at the provider: `email` (the default) counts only when the
    /// provider says `email_verified`; `preferred_username` is safe only where the provider
    /// manages it (many let people edit it). Accounts are found by the provider's subject, so
    /// a later change of the claim renames nothing.
    #[serde(default = "default_username_claim")]
    pub username_claim: String,
    /// Accepts an `email` claim the provider has not marked `email_verified` (providers that
    /// never send that claim, e.g. Microsoft Entra ID, for addresses it manages itself).
    #[serde(default)]
    pub allow_unverified_email: bool,
    /// The claim that lists the person's groups.
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// Members of any of these groups are admins, everyone else a user, decided at every
    /// sign-in. Empty: the provider does not decide roles (admins grant them here).
    #[serde(default)]
    pub admin_groups: Vec<String>,
}

pub(crate) fn default_display_name() -> String {
    "single sign-on".into()
}

pub(crate) fn default_scopes() -> Vec<String> {
    ["openid", "profile", "email"].map(String::from).into()
}

pub(crate) fn default_username_claim() -> String {
    "email".into()
}

pub(crate) fn default_groups_claim() -> String {
    "groups".into()
}

impl OidcConfig {
    /// Checks what serde cannot; the error names the full key (`oidc.issuer`).
    pub fn validate(&self) -> Result<(), InvalidKey> {
        match self.problem() {
            Some((key, why)) => Err(InvalidKey::new(format!("oidc.{key}"), why)),
            None => Ok(()),
        }
    }

    /// The first problem with it: (key under `oidc.`, what is wrong).
    pub fn problem(&self) -> Option<(&'static str, String)> {
        let is_url = |u: &str| {
            u.parse::<http::Uri>().is_ok_and(|uri| {
                matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some()
            })
        };
        if !is_url(&self.issuer) {
            return Some(("issuer", "must be an http(s) URL".into()));
        }
        if !secure_or_local(&self.issuer) {
            return Some((
                "issuer",
                "must be https (plain http only on this machine: 127.0.0.1, ::1, localhost)".into(),
            ));
        }
        if self.client_id.trim().is_empty() {
            return Some(("client_id", "must not be empty".into()));
        }
        if !is_url(&self.redirect_url) || !self.redirect_url.ends_with(CALLBACK_PATH) {
            return Some((
                "redirect_url",
                format!("must be this server's public URL followed by {CALLBACK_PATH}"),
            ));
        }
        if !self.scopes.iter().any(|s| s == "openid") {
            return Some(("scopes", "must include \"openid\"".into()));
        }
        if self.username_claim.trim().is_empty() {
            return Some(("username_claim", "must not be empty".into()));
        }
        None
    }
}

/// Whether `url` is https, or http to this machine: the provider's keys decide who may sign in,
/// so they never travel where they could be swapped.
pub fn secure_or_local(url: &str) -> bool {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return false;
    };
    match uri.scheme_str() {
        Some("https") => true,
        Some("http") => matches!(
            uri.host(),
            Some("127.0.0.1" | "localhost" | "[::1]" | "::1")
        ),
        _ => false,
    }
}
