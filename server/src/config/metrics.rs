//! `[metrics]`: who may read `/metrics` besides admins.

use serde::{Deserialize, Serialize};

/// `/metrics`: admins may always read it; a scraper sends `Authorization: Bearer <token>`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// The scraper's bearer token; empty (the default): only admin credentials read it.
    pub token: String,
}
