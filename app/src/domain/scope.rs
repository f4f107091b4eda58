//! What an API token may do. A browser's sign-in may do everything its user may; a token may be
//! narrowed to some of it, so that a script that only reads, or only reaches a notebook, carries no
//! power to launch, stop or mint more tokens.
//!
//! The scopes are `read`, `sessions` (which implies `read`), `access` (the proxy, WebSockets
//! included), `tokens` and `admin`, stored beside the token's hash. A new token gets all but
//! `admin` unless narrowed, and `admin` only when an admin asks for it ([`grant`]). A token makes
//! tokens of at most its own scopes, expiring no later than itself (1 to [`MAX_TOKEN_DAYS`] days,
//! or never), so a leaked short-lived token cannot become a lasting one. The server resolves each
//! credential to its user and scopes, and every service function requires its scope, so the REST
//! API and the server functions refuse alike; the proxy requires `access` before it looks up the
//! route.
//!
//! A browser's sign-in carries `admin` only for [`ADMIN_CONFIRMATION_MINUTES`] after its person
//! confirmed who they are, and an admin's entry into a user's editor lasts
//! [`EDITOR_ACCESS_MINUTES`]: editors share our origin (the server's `service::accounts` says why).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// How long a browser's sign-in may act as an admin after the person confirmed who they are
/// (editors share our origin: see `server::auth`).
pub const ADMIN_CONFIRMATION_MINUTES: i64 = 15;

/// How long an admin's explicit entry into a user's editor lasts before it must be asked for
/// (and audited) again.
pub const EDITOR_ACCESS_MINUTES: i64 = 15;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Read the account, its sessions (and their progress), the quota and the pool.
    Read,
    /// Launch, extend, stop and keep alive the account's sessions.
    Sessions,
    /// Reach the account's editors through the proxy (`/s/<id>/…`), WebSockets included.
    Access,
    /// List, make and revoke the account's tokens.
    Tokens,
    /// The admin pages and API: every user, session and slot, credits, the audit log. Of use
    /// only to an admin's token; tokens made before it existed lack it.
    Admin,
}

impl Scope {
    pub const EVERY: [Scope; 5] = [
        Scope::Read,
        Scope::Sessions,
        Scope::Access,
        Scope::Tokens,
        Scope::Admin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Sessions => "sessions",
            Scope::Access => "access",
            Scope::Tokens => "tokens",
            Scope::Admin => "admin",
        }
    }

    pub fn parse(name: &str) -> Option<Scope> {
        Scope::EVERY.into_iter().find(|s| s.as_str() == name)
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A set of scopes. Written as their names separated by spaces (as OAuth writes scopes), and
/// as a list of names in JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scopes(u8);

impl Scopes {
    pub const ALL: Scopes = Scopes(0b1_1111);
    pub const NONE: Scopes = Scopes(0);

    pub fn of(scopes: &[Scope]) -> Scopes {
        Scopes::implied(scopes.iter().fold(0, |bits, s| bits | s.bit()))
    }

    /// What launches and stops sessions also reads them: each such action answers with the
    /// session it changed.
    fn implied(bits: u8) -> Scopes {
        if bits & Scope::Sessions.bit() != 0 {
            Scopes(bits | Scope::Read.bit())
        } else {
            Scopes(bits)
        }
    }

    pub fn allows(self, scope: Scope) -> bool {
        self.0 & scope.bit() != 0
    }

    pub fn with(self, scope: Scope) -> Scopes {
        Scopes::implied(self.0 | scope.bit())
    }

    pub fn without(self, scope: Scope) -> Scopes {
        Scopes(self.0 & !scope.bit())
    }

    /// Whether every scope of `self` is also in `other`.
    pub fn within(self, other: Scopes) -> bool {
        self.0 & !other.0 == 0
    }

    pub fn iter(self) -> impl Iterator<Item = Scope> {
        Scope::EVERY.into_iter().filter(move |s| self.allows(*s))
    }

    /// Names separated by spaces or commas; at least one, each known. The error names what is
    /// wrong and what is known.
    pub fn parse(text: &str) -> Result<Scopes, String> {
        let mut bits = 0;
        for name in text
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|n| !n.is_empty())
        {
            bits |= Scope::parse(name)
                .ok_or_else(|| format!("unknown scope `{name}`; the scopes are {}", Scopes::ALL))?
                .bit();
        }
        if bits == 0 {
            return Err(format!("name at least one scope of {}", Scopes::ALL));
        }
        Ok(Scopes::implied(bits))
    }

    /// [`MissingScope`] naming the scope when this set lacks it.
    pub fn require(self, scope: Scope) -> Result<(), MissingScope> {
        if self.allows(scope) {
            Ok(())
        } else {
            Err(MissingScope {
                missing: scope,
                has: self,
            })
        }
    }
}

/// A token asked to do what its scopes do not allow. The doors show it as `Forbidden` (in
/// `crate::error`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("this token lacks the scope `{}` (it has: {has})", missing.as_str())]
pub struct MissingScope {
    pub missing: Scope,
    pub has: Scopes,
}

impl fmt::Display for Scopes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for scope in self.iter() {
            if !first {
                f.write_str(" ")?;
            }
            f.write_str(scope.as_str())?;
            first = false;
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

impl Serialize for Scopes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter().map(Scope::as_str))
    }
}

impl<'de> Deserialize<'de> for Scopes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Scopes, D::Error> {
        let names = Vec::<String>::deserialize(deserializer)?;
        Scopes::parse(&names.join(" ")).map_err(serde::de::Error::custom)
    }
}

/// The longest a token may last when it expires at all.
pub const MAX_TOKEN_DAYS: u32 = 365;

/// The longest label a token may have.
pub const MAX_LABEL_CHARS: usize = 64;

/// Who makes a token: what their credential may do, and until when it works.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grantor {
    pub is_admin: bool,
    /// A sign-in's scopes (every one) or a token's own.
    pub scopes: Scopes,
    /// When the grantor's own token expires; `None` for a sign-in or a token that never does.
    pub expires_at: Option<i64>,
}

/// A token that may be made: what it may do, its label as kept, when it expires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub scopes: Scopes,
    pub label: String,
    pub expires_at: Option<i64>,
}

/// Why a token may not be made. `Forbidden` at the doors for the scopes, `Invalid` for the rest.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GrantRefused {
    #[error("only an admin can give a token the scope `admin`")]
    AdminScope,
    #[error("a token can grant only scopes it has itself ({0})")]
    BeyondOwn(Scopes),
    #[error(
        "a token's label must be 1 to {MAX_LABEL_CHARS} characters, without control characters"
    )]
    Label,
    #[error(
        "a token lasts 1 to {MAX_TOKEN_DAYS} days (leave the days out for one that does not expire)"
    )]
    Days,
}

impl GrantRefused {
    /// Whether the refusal is about what the grantor may give (rather than what was typed).
    pub fn is_forbidden(&self) -> bool {
        matches!(self, Self::AdminScope | Self::BeyondOwn(_))
    }
}

/// The token `grantor` may make at `now` with the `scopes` asked for (all of its own but
/// `admin` when none are named), a `label` and a lifetime of `days` (none: it does not expire).
/// A token makes tokens of at most its own scopes, and none that outlives it; `admin` is of use
/// to an admin only, so nobody else's tokens carry it.
pub fn grant(
    grantor: &Grantor,
    scopes: Option<Scopes>,
    label: &str,
    days: Option<u32>,
    now: i64,
) -> Result<Grant, GrantRefused> {
    if !grantor.is_admin && scopes.is_some_and(|s| s.allows(Scope::Admin)) {
        return Err(GrantRefused::AdminScope);
    }
    let scopes = scopes.unwrap_or(grantor.scopes.without(Scope::Admin));
    if !scopes.within(grantor.scopes) {
        return Err(GrantRefused::BeyondOwn(grantor.scopes));
    }
    let label = label.trim();
    if label.is_empty()
        || label.chars().count() > MAX_LABEL_CHARS
        || label.chars().any(char::is_control)
    {
        return Err(GrantRefused::Label);
    }
    if days.is_some_and(|d| !(1..=MAX_TOKEN_DAYS).contains(&d)) {
        return Err(GrantRefused::Days);
    }
    let asked = days.map(|d| now + i64::from(d) * 86_400_000);
    let expires_at = match (asked, grantor.expires_at) {
        (Some(asked), Some(limit)) => Some(asked.min(limit)),
        (asked, limit) => asked.or(limit),
    };
    Ok(Grant {
        scopes,
        label: label.to_string(),
        expires_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_read_as_names_and_refuse_unknown_ones() {
        let scopes = Scopes::parse("read, access").unwrap();
        assert!(scopes.allows(Scope::Read) && scopes.allows(Scope::Access));
        assert!(!scopes.allows(Scope::Sessions) && !scopes.allows(Scope::Tokens));
        assert_eq!(scopes.to_string(), "read access");
        assert_eq!(Scopes::parse(&Scopes::ALL.to_string()), Ok(Scopes::ALL));
        let unknown = Scopes::parse("read root").unwrap_err();
        assert!(unknown.contains("`root`"), "{unknown}");
        assert!(Scopes::parse(" , ").is_err(), "at least one");
        assert_eq!(Scopes::NONE.to_string(), "none");
    }

    #[test]
    fn what_changes_sessions_also_reads_them() {
        let sessions = Scopes::parse("sessions").unwrap();
        assert!(sessions.allows(Scope::Read));
        assert_eq!(sessions.to_string(), "read sessions");
        assert_eq!(Scopes::of(&[Scope::Sessions]), sessions);
        assert!(!Scopes::parse("tokens").unwrap().allows(Scope::Read));
    }

    #[test]
    fn a_set_is_within_another_only_when_it_adds_nothing() {
        let read = Scopes::of(&[Scope::Read]);
        let read_access = Scopes::of(&[Scope::Read, Scope::Access]);
        assert!(read.within(read_access));
        assert!(!read_access.within(read));
        assert!(read_access.within(Scopes::ALL));
        assert!(!Scopes::ALL.within(read_access));
    }

    #[test]
    fn missing_a_scope_is_forbidden_and_says_which() {
        let read = Scopes::of(&[Scope::Read]);
        assert!(read.require(Scope::Read).is_ok());
        let refused = read.require(Scope::Sessions).unwrap_err();
        assert_eq!(refused.missing, Scope::Sessions);
        assert!(refused.to_string().contains("`sessions`"), "{refused}");
    }

    #[test]
    fn json_is_a_list_of_names() {
        let scopes = Scopes::of(&[Scope::Access, Scope::Tokens]);
        let json = serde_json::to_string(&scopes).unwrap();
        assert_eq!(json, r#"["access","tokens"]"#);
        assert_eq!(serde_json::from_str::<Scopes>(&json).unwrap(), scopes);
        assert!(serde_json::from_str::<Scopes>(r#"["root"]"#).is_err());
        assert!(serde_json::from_str::<Scopes>("[]").is_err());
    }

    const NOW: i64 = 1_800_000_000_000;
    const DAY: i64 = 86_400_000;

    fn sign_in(is_admin: bool) -> Grantor {
        Grantor {
            is_admin,
            scopes: Scopes::ALL,
            expires_at: None,
        }
    }

    #[test]
    fn a_sign_in_grants_everything_but_admin_unless_asked() {
        let made = grant(&sign_in(true), None, "  ci  ", Some(30), NOW).unwrap();
        assert_eq!(made.scopes, Scopes::ALL.without(Scope::Admin));
        assert_eq!(made.label, "ci");
        assert_eq!(made.expires_at, Some(NOW + 30 * DAY));
        let admin = grant(&sign_in(true), Some(Scopes::ALL), "ops", None, NOW).unwrap();
        assert!(admin.scopes.allows(Scope::Admin));
        assert_eq!(admin.expires_at, None);
    }

    #[test]
    fn only_an_admin_gives_the_admin_scope() {
        let refused = grant(&sign_in(false), Some(Scopes::ALL), "x", None, NOW).unwrap_err();
        assert_eq!(refused, GrantRefused::AdminScope);
        assert!(refused.is_forbidden());
    }

    #[test]
    fn a_token_grants_at_most_its_own_scopes_and_never_outlives_itself() {
        let token = Grantor {
            is_admin: false,
            scopes: Scopes::of(&[Scope::Read, Scope::Tokens]),
            expires_at: Some(NOW + 7 * DAY),
        };
        let refused = grant(&token, Some(Scopes::of(&[Scope::Sessions])), "x", None, NOW);
        assert!(matches!(refused, Err(GrantRefused::BeyondOwn(_))));
        let made = grant(&token, Some(Scopes::of(&[Scope::Read])), "x", Some(30), NOW).unwrap();
        assert_eq!(made.expires_at, Some(NOW + 7 * DAY), "capped by its maker");
        let forever = grant(&token, None, "x", None, NOW).unwrap();
        assert_eq!(forever.expires_at, Some(NOW + 7 * DAY));
    }

    #[test]
    fn labels_and_lifetimes_are_bounded() {
        for label in ["", "   ", "tab\there", &"x".repeat(65)] {
            assert_eq!(
                grant(&sign_in(false), None, label, None, NOW),
                Err(GrantRefused::Label),
                "{label:?}"
            );
        }
        assert!(grant(&sign_in(false), None, &"é".repeat(64), None, NOW).is_ok());
        for days in [0, 366] {
            let refused = grant(&sign_in(false), None, "x", Some(days), NOW).unwrap_err();
            assert_eq!(refused, GrantRefused::Days);
            assert!(!refused.is_forbidden());
        }
    }
}
