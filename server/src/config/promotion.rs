//! `[promotion]`: the production registry files are promoted to.

use super::InvalidKey;
use serde::{Deserialize, Serialize};

/// `[promotion]` in the configuration.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromotionConfig {
    /// The production registry, e.g. `https://registry.example.com`; empty: promotion is off.
    pub registry: String,
    /// Before every repository, e.g. `sandbox/`: artifacts land at
    /// `<prefix><user>/<name>:<tag>`.
    pub repository_prefix: String,
    /// The registry account the server pushes with (HTTP basic); empty: anonymous.
    pub username: String,
    pub password: String,
    /// Whether an admin approves each promotion before it is pushed.
    pub require_approval: bool,
    /// The largest file that may be promoted (MiB).
    pub max_file_mib: u64,
}

impl Default for PromotionConfig {
    fn default() -> Self {
        PromotionConfig {
            registry: String::new(),
            repository_prefix: String::new(),
            username: String::new(),
            password: String::new(),
            require_approval: true,
            max_file_mib: 2048,
        }
    }
}

impl PromotionConfig {
    /// Checks what serde cannot; the error names the full key (`promotion.registry`).
    pub fn validate(&self) -> Result<(), InvalidKey> {
        match self.problem() {
            Some((key, why)) => Err(InvalidKey::new(format!("promotion.{key}"), why)),
            None => Ok(()),
        }
    }

    pub fn enabled(&self) -> bool {
        !self.registry.is_empty()
    }

    /// The first key that is wrong, and why.
    pub fn problem(&self) -> Option<(&'static str, String)> {
        if self.enabled() {
            let Some((scheme, rest)) = self.registry.split_once("://") else {
                return Some(("registry", "must start with http:// or https://".into()));
            };
            let host = rest.trim_end_matches('/');
            if !matches!(scheme, "http" | "https")
                || host.is_empty()
                || host.contains(['/', '?', '#', '@'])
                || host.chars().any(char::is_whitespace)
            {
                // Not echoed: a URL with a user name may hold a password too.
                return Some((
                    "registry",
                    "is not a registry address like https://registry.example.com (no path, no user name: those go in username and password)".into(),
                ));
            }
        }
        if !self.repository_prefix.is_empty() {
            let ok = self
                .repository_prefix
                .strip_suffix('/')
                .is_some_and(app::domain::promotion::is_repository);
            if !ok {
                return Some((
                    "repository_prefix",
                    "must be empty or a repository path ending in `/`, e.g. `sandbox/`".into(),
                ));
            }
        }
        if self.username.is_empty() && !self.password.is_empty() {
            return Some(("username", "a password is set without a user name".into()));
        }
        if self.max_file_mib == 0 || self.max_file_mib > 1024 * 1024 {
            return Some(("max_file_mib", "must be 1 to 1048576".into()));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_name_their_key() {
        let with = |f: &dyn Fn(&mut PromotionConfig)| {
            let mut c = PromotionConfig {
                registry: "https://registry.example.com".into(),
                ..PromotionConfig::default()
            };
            f(&mut c);
            c.problem().map(|(key, _)| key)
        };
        assert_eq!(with(&|_| {}), None);
        assert_eq!(PromotionConfig::default().problem(), None, "off is fine");
        assert_eq!(
            with(&|c| c.registry = "registry.example.com".into()),
            Some("registry")
        );
        assert_eq!(
            with(&|c| c.registry = "https://r.example.com/v2".into()),
            Some("registry")
        );
        assert_eq!(
            with(&|c| c.repository_prefix = "Sandbox/".into()),
            Some("repository_prefix")
        );
        assert_eq!(with(&|c| c.repository_prefix = "sandbox/".into()), None);
        assert_eq!(with(&|c| c.password = "x".into()), Some("username"));
        assert_eq!(with(&|c| c.max_file_mib = 0), Some("max_file_mib"));
    }
}
