//! `[sessions]`: how long sessions may last and how they start and stop.

use super::InvalidKey;
use serde::{Deserialize, Serialize};

/// The longest session a server may allow: 30 days.
const MAX_MINUTES: u32 = 43_200;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionsConfig {
    pub min_minutes: u32,
    pub max_minutes: u32,
    pub default_minutes: u32,
    /// How long an editor may take to answer before the launch fails.
    pub ready_timeout_seconds: u64,
    /// Stop editors when the server shuts down (otherwise they are re-adopted on the next start).
    pub stop_on_shutdown: bool,
}

impl SessionsConfig {
    /// Checks what serde cannot; the error names the key.
    pub fn validate(&self) -> Result<(), InvalidKey> {
        if self.max_minutes > MAX_MINUTES {
            return Err(InvalidKey::new(
                "sessions.max_minutes",
                format!("must be at most {MAX_MINUTES} (30 days)"),
            ));
        }
        if self.min_minutes == 0 || self.min_minutes > self.max_minutes {
            return Err(InvalidKey::new(
                "sessions.min_minutes",
                format!(
                    "must be at least 1 and at most sessions.max_minutes ({})",
                    self.max_minutes
                ),
            ));
        }
        if self.default_minutes < self.min_minutes || self.default_minutes > self.max_minutes {
            return Err(InvalidKey::new(
                "sessions.default_minutes",
                format!(
                    "must lie between {} and {}",
                    self.min_minutes, self.max_minutes
                ),
            ));
        }
        if self.ready_timeout_seconds == 0 {
            return Err(InvalidKey::new(
                "sessions.ready_timeout_seconds",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}
