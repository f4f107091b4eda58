//! `[history]`: how long sessions' readings are kept.

use super::InvalidKey;
use serde::{Deserialize, Serialize};

/// Sessions' readings (GPU, CPU, RAM, busy), one a minute, for the sparklines and usage per day.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HistoryConfig {
    /// Readings older than this many days are forgotten (the admin usage reaches back 90).
    pub retention_days: u32,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig { retention_days: 90 }
    }
}

impl HistoryConfig {
    /// Checks what serde cannot; the error names the key.
    pub fn validate(&self) -> Result<(), InvalidKey> {
        if !(1..=3650).contains(&self.retention_days) {
            return Err(InvalidKey::new(
                "history.retention_days",
                format!("{} is not between 1 and 3650 days", self.retention_days),
            ));
        }
        Ok(())
    }
}
