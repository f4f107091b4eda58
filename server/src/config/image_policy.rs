//! `[image_policy]`: what an added image's scans must show.

use super::InvalidKey;
use app::domain::scan::{ScanPolicy, Severity};
use serde::{Deserialize, Serialize};

/// The scan policy ([`app::domain::scan::ScanPolicy`]) for the images admins add; each
/// editor's configured default (`kube.images`) is the platform's own and is not held to it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ImagePolicyConfig {
    /// An image without a posted report may not be approved or launched.
    pub require_scan: bool,
    /// A report older than this many days no longer counts (0: any age).
    pub max_age_days: u32,
    /// Findings at this severity or worse with a fix available block the image: `critical`,
    /// `high`, `medium`, `low`, `unknown`, or `none`.
    pub block_fixable_at: String,
}

impl Default for ImagePolicyConfig {
    fn default() -> Self {
        let policy = ScanPolicy::default();
        ImagePolicyConfig {
            require_scan: policy.require_scan,
            max_age_days: policy.max_age_days,
            block_fixable_at: policy
                .block_fixable_at
                .map_or("none", |s| s.as_str())
                .to_string(),
        }
    }
}

impl ImagePolicyConfig {
    /// The policy; a `block_fixable_at` that names no severity was refused at start-up.
    pub fn policy(&self) -> ScanPolicy {
        ScanPolicy {
            require_scan: self.require_scan,
            max_age_days: self.max_age_days,
            block_fixable_at: Severity::parse(&self.block_fixable_at),
        }
    }

    /// Checks what serde cannot; the error names the key.
    pub fn validate(&self) -> Result<(), InvalidKey> {
        let fixable = self.block_fixable_at.trim();
        if fixable != "none" && Severity::parse(fixable).is_none() {
            return Err(InvalidKey::new(
                "image_policy.block_fixable_at",
                format!("`{fixable}` is not one of critical, high, medium, low, unknown or none"),
            ));
        }
        if self.max_age_days > 3650 {
            return Err(InvalidKey::new(
                "image_policy.max_age_days",
                "must be at most 3650 days (0: reports of any age count)",
            ));
        }
        Ok(())
    }
}
