//! Where each editor's program is.

use app::domain::launch::EditorKind;
use std::path::{Path, PathBuf};

/// Where each editor's program is.
#[derive(Clone, Debug)]
pub struct ToolPaths {
    pub jupyterlab: PathBuf,
    pub marimo: PathBuf,
    pub code_server: PathBuf,
}

impl ToolPaths {
    pub fn from_config(config: &crate::config::EditorsConfig) -> ToolPaths {
        let pick = |explicit: &str, default: PathBuf| {
            if explicit.is_empty() {
                default
            } else {
                PathBuf::from(explicit)
            }
        };
        let tools = absolute(&config.tools_dir);
        ToolPaths {
            jupyterlab: pick(&config.jupyterlab, tools.join("venv/bin/jupyter-lab")),
            marimo: pick(&config.marimo, tools.join("venv/bin/marimo")),
            code_server: pick(
                &config.code_server,
                tools.join("npm/node_modules/.bin/code-server"),
            ),
        }
    }

    pub(super) fn program(&self, editor: EditorKind) -> &Path {
        match editor {
            EditorKind::JupyterLab => &self.jupyterlab,
            EditorKind::Marimo => &self.marimo,
            EditorKind::CodeServer => &self.code_server,
        }
    }
}

pub(super) fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    }
}
