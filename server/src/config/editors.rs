//! `[editors]`: where the editors' programs are.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditorsConfig {
    /// Where `scripts/setup.sh` installed the editors (venv/ and npm/).
    pub tools_dir: PathBuf,
    /// Explicit commands; empty means the one in `tools_dir`.
    pub jupyterlab: String,
    pub marimo: String,
    pub code_server: String,
}
