//! A user's workspace taken home and kept safe: exports (`GET /api/v1/workspace/export`).
//!
//! - **Export** streams the workspace, or a folder or file of it, as a `.tar.gz` made while it
//!   is sent ([`crate::runtime::archive`]: tar at the lowest priority, killed if the client
//!   hangs up). One export per user at a time (a second is a 409 until the first ends): an
//!   export costs the server a CPU core for gzip and the disk's reading, so one user cannot
//!   start many. The path is checked by `app::domain::backups::workspace_part` (400 with the
//!   reason) and opened so that no link leads out of the workspace.
//! - Who may: the owner, with the scope `read`.

use super::Backups;
use crate::runtime::archive::{self, ArchiveError};
use app::domain::scope::Scope;
use app::error::AppError;
use app::model::Viewer;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// What the backups area keeps between requests.
#[derive(Default)]
pub struct BackupState {
    /// Users with an export under way.
    exports: Arc<Mutex<HashSet<String>>>,
}

/// A user's export slot, given back when the download ends (done or cut off).
struct ExportSlot {
    user_id: String,
    exports: Arc<Mutex<HashSet<String>>>,
}

impl Drop for ExportSlot {
    fn drop(&mut self) {
        self.exports.lock().expect("exports").remove(&self.user_id);
    }
}

/// A download on its way: its file name and its bytes as they are made.
pub struct WorkspaceExport {
    pub file_name: String,
    pub body: std::pin::Pin<
        Box<dyn futures_util::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static>,
    >,
}

impl Backups {
    /// Starts an export of `path` (None: everything) of the caller's workspace.
    pub async fn export(
        &self,
        viewer: &Viewer,
        path: Option<&str>,
    ) -> Result<WorkspaceExport, AppError> {
        viewer.scopes.require(Scope::Read)?;
        let part = app::domain::backups::workspace_part(path).map_err(AppError::Invalid)?;
        let workspace = self.runtime.workspace_dir(&viewer.name).ok_or_else(|| {
            AppError::Unavailable(
                "exports read workspaces on this machine; this server's runtime keeps them elsewhere"
                    .into(),
            )
        })?;
        let slot = self.take_export_slot(&viewer.id)?;
        let opened = {
            let part = part.clone();
            tokio::task::spawn_blocking(move || archive::open(&workspace, part.as_deref()))
                .await
                .map_err(|_| AppError::Internal)?
        };
        let archive = opened.and_then(archive::start).map_err(|e| match e {
            ArchiveError::Refused(why) => AppError::Invalid(why),
            ArchiveError::Io(e) => {
                tracing::error!(error = %e, user = %viewer.name, "starting an export");
                AppError::Internal
            }
        })?;
        let stream = archive.into_stream();
        // The slot goes with the stream: it is given back when the download ends, however.
        let body = futures_util::StreamExt::map(stream, move |chunk| {
            let _held = &slot;
            chunk
        });
        Ok(WorkspaceExport {
            file_name: export_name(&viewer.name, part.as_deref(), self.now()),
            body: Box::pin(body),
        })
    }

    fn take_export_slot(&self, user_id: &str) -> Result<ExportSlot, AppError> {
        let exports = self.backup.exports.clone();
        if !exports.lock().expect("exports").insert(user_id.to_string()) {
            return Err(AppError::Conflict(
                "an export of your workspace is under way already; wait for it to finish".into(),
            ));
        }
        Ok(ExportSlot {
            user_id: user_id.to_string(),
            exports,
        })
    }
}

/// `workspace-alice-2026-12-05.tar.gz`, `notebooks-2026-12-05.tar.gz`: letters, digits, `.`,
/// `-` and `_` only, so it needs no quoting in a header.
fn export_name(user: &str, part: Option<&str>, now_ms: i64) -> String {
    let stem = match part.and_then(|p| p.rsplit('/').next()) {
        Some(name) => name.to_string(),
        None => format!("workspace-{user}"),
    };
    let safe: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(80)
        .collect();
    format!("{safe}-{}.tar.gz", app::domain::dates::day(now_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_export_is_named_after_what_it_holds_and_its_day() {
        let at = 1_796_459_400_000;
        assert_eq!(
            export_name("alice", None, at),
            "workspace-alice-2026-12-05.tar.gz"
        );
        assert_eq!(
            export_name("alice", Some("notebooks/run 1"), at),
            "run_1-2026-12-05.tar.gz"
        );
        assert_eq!(
            export_name("a\"b", Some("x\r\ny"), at),
            "x__y-2026-12-05.tar.gz"
        );
    }
}
