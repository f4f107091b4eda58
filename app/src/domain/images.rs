//! Approved images: the editor images admins allow at launch (the kube runtime runs them), on
//! top of the configured default per editor. Pure rules: what a reference and a label may be.

use serde::{Deserialize, Serialize};

/// The longest image reference accepted (registries cap names at 255; a tag and digest follow).
pub const MAX_REFERENCE_CHARS: usize = 400;
pub const MAX_LABEL_CHARS: usize = 80;

/// An image an admin adds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewImage {
    /// `jupyterlab`, `marimo` or `code-server`: the editor the image runs.
    pub editor: String,
    /// e.g. `registry.example.com/team/pytorch-notebook:2025-10-20`, better with `@sha256:…`.
    pub reference: String,
    /// What users see, e.g. "PyTorch 2.5, CUDA 12.4".
    pub label: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageState {
    /// Offered at launch.
    Approved,
    /// No longer offered; sessions running it keep it.
    Retired,
}

impl ImageState {
    pub fn as_str(self) -> &'static str {
        match self {
            ImageState::Approved => "approved",
            ImageState::Retired => "retired",
        }
    }

    pub fn parse(text: &str) -> Option<ImageState> {
        match text {
            "approved" => Some(ImageState::Approved),
            "retired" => Some(ImageState::Retired),
            _ => None,
        }
    }
}

/// An image reference by the distribution spec's grammar: `[host[:port]/]path[:tag][@digest]`,
/// the path in lowercase components. Returns it trimmed.
pub fn check_reference(text: &str) -> Result<String, String> {
    let reference = text.trim();
    let refuse = |why: &str| {
        Err(format!(
            "`{reference}` is not an image reference: {why}; write it as registry.example.com/team/image:tag, best with @sha256:…"
        ))
    };
    if reference.is_empty() {
        return Err("give the image reference, e.g. registry.example.com/team/image:tag".into());
    }
    if reference.chars().count() > MAX_REFERENCE_CHARS {
        return Err(format!(
            "the image reference is longer than {MAX_REFERENCE_CHARS} characters"
        ));
    }
    let (rest, digest) = match reference.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (reference, None),
    };
    if let Some(digest) = digest {
        let hex = digest.strip_prefix("sha256:").unwrap_or_default();
        if hex.len() != 64
            || !hex
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        {
            return refuse("a digest is `sha256:` and 64 lowercase hex digits");
        }
    }
    // A tag is after the last `:` that follows the last `/` (a host's port comes before it).
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    if let Some(tag) = tag
        && !super::promotion::is_tag(tag)
    {
        return refuse("a tag is up to 128 letters, digits, `_`, `.` or `-`");
    }
    let mut parts: Vec<&str> = name.split('/').collect();
    // The first part is a registry host when it looks like one (a dot, a port, or localhost).
    if parts.len() > 1 && (parts[0].contains(['.', ':']) || parts[0] == "localhost") {
        let host = parts.remove(0);
        let (hostname, port) = match host.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host, None),
        };
        let host_ok = !hostname.is_empty()
            && hostname.split('.').all(|l| {
                !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            })
            && port.is_none_or(|p| {
                !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
            });
        if !host_ok {
            return refuse("the registry host is malformed");
        }
    }
    if !super::promotion::is_repository(&parts.join("/")) {
        return refuse(
            "the image's path is lowercase letters and digits, separated by `.`, `_`, `-` or `/`",
        );
    }
    Ok(reference.to_string())
}

/// Whether a reference names its content for good (a digest) rather than a tag that can move.
pub fn is_pinned(reference: &str) -> bool {
    reference.contains("@sha256:")
}

pub fn check_label(text: &str) -> Result<String, String> {
    let label = text.trim();
    if label.is_empty() {
        return Err(
            "give the image a label users will recognize, e.g. \"PyTorch 2.5, CUDA 12.4\"".into(),
        );
    }
    if label.chars().count() > MAX_LABEL_CHARS || label.chars().any(char::is_control) {
        return Err(format!(
            "the label must be at most {MAX_LABEL_CHARS} characters on one line"
        ));
    }
    Ok(label.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_follow_the_distribution_grammar() {
        let digest = format!("sha256:{}", "a".repeat(64));
        for good in [
            "quay.io/jupyter/pytorch-notebook:2025-10-20".to_string(),
            "jupyter/base-notebook".to_string(),
            "localhost:5000/team/img:v1".to_string(),
            "registry.example.com:443/a/b/c".to_string(),
            format!("ghcr.io/marimo-team/marimo:latest@{digest}"),
            format!("ghcr.io/marimo-team/marimo@{digest}"),
            "  codercom/code-server:4.100.3  ".to_string(),
        ] {
            assert_eq!(
                check_reference(&good),
                Ok(good.trim().to_string()),
                "{good}"
            );
        }
        for bad in [
            "",
            "Quay.io/Jupyter/Img",
            "quay.io/jupyter/img:-tag",
            "quay.io/jupyter/img@sha256:abc",
            "quay.io//img",
            "quay.io:port/img",
            "img name",
            "-img",
        ] {
            assert!(check_reference(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(
            check_reference(&"a".repeat(401))
                .unwrap_err()
                .contains("longer")
        );
    }

    #[test]
    fn only_a_digest_pins_an_image() {
        assert!(is_pinned(&format!("img@sha256:{}", "0".repeat(64))));
        assert!(!is_pinned("img:latest"));
    }

    #[test]
    fn labels_are_one_short_line() {
        assert_eq!(check_label("  PyTorch 2.5 "), Ok("PyTorch 2.5".into()));
        assert!(check_label("").is_err());
        assert!(check_label("a\nb").is_err());
        assert!(check_label(&"x".repeat(81)).is_err());
        assert_eq!(ImageState::parse("retired"), Some(ImageState::Retired));
    }
}
