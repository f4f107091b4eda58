//! What becomes of the accounts an admin deleted.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountsConfig {
    /// Days a deleted account keeps its workspace (and, on a cluster, its namespace and volume),
    /// while an admin may undo the deletion; then they are removed and its editor account freed.
    pub purge_deleted_after_days: u32,
}

impl Default for AccountsConfig {
    fn default() -> AccountsConfig {
        AccountsConfig {
            purge_deleted_after_days: 30,
        }
    }
}

impl AccountsConfig {
    /// The grace period, in milliseconds.
    pub fn grace_ms(&self) -> i64 {
        i64::from(self.purge_deleted_after_days) * 24 * 3600 * 1000
    }
}
