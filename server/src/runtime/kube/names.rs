//! Kubernetes names for our users and sessions: DNS-1123 labels, deterministic, and distinct
//! for distinct users.
//!
//! A user name that already is a plain label (lowercase letters, digits, single '-') is used as
//! it is. Any other name (uppercase, unicode, '.', too long) is cleaned and gets `--` and a hash
//! of the original name. Cleaning never leaves "--", and plain names never contain it, so an
//! altered name can never equal a plain one; two altered names collide only if their hashes do.

use sha2::{Digest, Sha256};

/// Labels on everything we create, so the reconciler finds our objects and only ours.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGER: &str = "gpu-sandbox";
pub const USER_LABEL: &str = "gpu-sandbox/user";
pub const SESSION_LABEL: &str = "gpu-sandbox/session";
pub const EDITOR_LABEL: &str = "gpu-sandbox/editor";

/// Per-user objects have fixed names inside the user's namespace.
pub const SERVICE_ACCOUNT: &str = "editor";
pub const WORKSPACE_PVC: &str = "workspace";
pub const QUOTA: &str = "sandbox-quota";
pub const LIMIT_RANGE: &str = "sandbox-limits";
pub const NETWORK_POLICY: &str = "sandbox-isolation";

/// Hex digits of the hash suffix: 40 bits, so a collision needs about a million altered names.
const HASH_HEX: usize = 10;

pub use crate::config::kube::{is_dns_label, is_dns_subdomain};

/// `name` as a DNS-1123 label of at most `max` characters (at least 16), per the module rules.
pub fn label_of(name: &str, max: usize) -> String {
    let max = max.clamp(16, 63);
    let plain = is_dns_label(name) && !name.contains("--") && name.len() <= max;
    if plain {
        return name.to_string();
    }
    let mut cleaned = String::with_capacity(name.len());
    for c in name.chars() {
        let c = if c.is_ascii_alphanumeric() {
            c.to_ascii_lowercase()
        } else {
            '-'
        };
        if c == '-' && (cleaned.is_empty() || cleaned.ends_with('-')) {
            continue;
        }
        cleaned.push(c);
    }
    let body_max = max - 2 - HASH_HEX;
    cleaned.truncate(body_max);
    let body = cleaned.trim_end_matches('-');
    let body = if body.is_empty() { "u" } else { body };
    let hash = hex::encode(Sha256::digest(name.as_bytes()));
    format!("{body}--{}", &hash[..HASH_HEX])
}

/// The user's namespace: the prefix, then the user's label, 63 characters at most.
pub fn namespace_of(prefix: &str, user_name: &str) -> String {
    format!("{prefix}{}", user_label(prefix, user_name))
}

/// The user's label value (also the namespace name without the prefix).
pub fn user_label(prefix: &str, user_name: &str) -> String {
    label_of(user_name, 63 - prefix.len())
}

/// The session's pod.
pub fn pod_name(session_id: &str) -> String {
    format!(
        "session-{}",
        label_of(session_id, 63 - "session--token".len())
    )
}

/// The session's Secret (the editor's token).
pub fn secret_name(session_id: &str) -> String {
    format!("{}-token", pod_name(session_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_stay_as_they_are() {
        assert_eq!(namespace_of("gsb-", "alice"), "gsb-alice");
        assert_eq!(namespace_of("gsb-", "bob-2"), "gsb-bob-2");
        assert_eq!(
            pod_name("0a1b2c3d4e5f60718293"),
            "session-0a1b2c3d4e5f60718293"
        );
        assert_eq!(
            secret_name("0a1b2c3d4e5f60718293"),
            "session-0a1b2c3d4e5f60718293-token"
        );
    }

    #[test]
    fn altered_names_are_valid_and_carry_a_hash() {
        for name in [
            "Alice",
            "Ünïcødé Üser",
            "jane.doe@example.com",
            "日本語",
            "",
            "-",
            "a--b",
            "UPPER_case_with_underscores",
            &"very-long-name-".repeat(10),
        ] {
            let ns = namespace_of("gsb-", name);
            assert!(is_dns_label(&ns), "{name:?} -> {ns:?}");
            assert!(ns.len() <= 63, "{ns}");
            assert!(
                ns.contains("--"),
                "altered names carry the hash marker: {ns}"
            );
            assert_eq!(ns, namespace_of("gsb-", name), "deterministic");
        }
        assert!(
            namespace_of("gsb-", "Jane.Doe@example.com").starts_with("gsb-jane-doe-example-com--")
        );
        assert!(namespace_of("gsb-", "日本語").starts_with("gsb-u--"));
    }

    #[test]
    fn distinct_users_never_share_a_namespace() {
        let names = [
            "alice",
            "Alice",
            "ALICE",
            "alice.",
            "alice_",
            "ålice",
            "alice--0123456789",
            "jane.doe",
            "jane-doe",
            "jane_doe",
            "Jane-Doe",
            "",
            "-",
        ];
        let mut seen = std::collections::HashMap::new();
        for name in names {
            let ns = namespace_of("gsb-", name);
            if let Some(other) = seen.insert(ns.clone(), name) {
                panic!("{name:?} and {other:?} both map to {ns}");
            }
        }
        // Long names that differ only past the cut still differ.
        let a = format!("{}a", "x".repeat(80));
        let b = format!("{}b", "x".repeat(80));
        assert_ne!(namespace_of("gsb-", &a), namespace_of("gsb-", &b));
        assert_eq!(namespace_of("gsb-", &a).len(), 63);
    }

    #[test]
    fn label_checks() {
        assert!(is_dns_label("a"));
        assert!(is_dns_label("0abc-d"));
        assert!(!is_dns_label("-a"));
        assert!(!is_dns_label("a-"));
        assert!(!is_dns_label("A"));
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(is_dns_subdomain("gpu-sandbox.session"));
        assert!(!is_dns_subdomain("a..b"));
    }
}
