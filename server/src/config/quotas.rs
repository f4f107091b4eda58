//! `[quotas]`: what each user may hold unless an admin says otherwise.

use super::InvalidKey;
use serde::{Deserialize, Serialize};

/// Per-user limits; admins override them per user (`server quota set`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotasConfig {
    pub max_sessions: u32,
    pub max_gpu_mib: u64,
    /// Longest session a user may ask for (also capped by `sessions.max_minutes`).
    pub max_minutes: u32,
    /// Workspace size above which launches are refused.
    pub max_disk_mib: u64,
}

impl QuotasConfig {
    /// Checks what serde cannot; the error names the key.
    pub fn validate(&self) -> Result<(), InvalidKey> {
        if self.max_sessions == 0 || self.max_gpu_mib == 0 || self.max_minutes == 0 {
            return Err(InvalidKey::new(
                "quotas",
                "max_sessions, max_gpu_mib and max_minutes must be at least 1",
            ));
        }
        Ok(())
    }
}
