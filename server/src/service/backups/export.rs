//! The export (`GET /api/v1/workspace/export`): the workspace, or a folder or file of it, as a
//! `.tar.gz` made while it is sent ([`crate::runtime::archive`]), within the user's share of
//! time and bandwidth. On a cluster the archive is made in a pod that mounts the workspace
//! (`runtime::kube::export`) and its chunks come through the same pacer.
//!
//! - **One at a time** per user (a second is a 409 until the first ends): an export costs a
//!   CPU core for gzip and the disk's reading.
//! - **Speed** (`backups.export_bytes_per_second`, 50 MiB/s by default): a token bucket
//!   (`app::domain::pace::Bucket`, by the store's clock) paces the chunks as the response asks
//!   for them. Nothing is buffered: a chunk waits in the pacer, tar waits on its full pipe, so a
//!   throttled export holds one chunk (64 KiB) and a sleeping tar. What has gone by any time `t`
//!   after the start is at most one burst (64 KiB) plus the rate × `t`.
//! - **Time** (`backups.export_max_seconds`, an hour by default): past it the download is cut,
//!   ending in an error, so the client sees a broken download (a truncated gzip that does not
//!   unpack), never a short archive that looks whole. HTTP/1.1 has no way to say why after the
//!   headers went (no trailer a browser shows), so the limits are said *before*: in the
//!   response's `X-Export-Limits` header, on the Settings page and in the README; each cut is
//!   logged (`warn`) and audited (`export.cut`, with the bytes sent and the limit) for the
//!   admins a user asks.
//! - The time limit is checked whenever the response asks for more, and at least every
//!   [`RECHECK_MS`] while the pacer or tar waits: a client that stops reading altogether holds
//!   only its own slot and a sleeping tar until its connection goes.
//!
//! `governor` (the well-kept token-bucket crate) was not taken: its clock is its own
//! (`quanta`/`Instant`), so tests could not move it with the server's clock, and the bucket it
//! would replace is 30 lines of arithmetic with its promise unit-tested.

use super::Backups;
use crate::runtime::archive::{ArchiveError, Chunks};
use crate::util::Clock;
use app::domain::pace::Bucket;
use app::domain::scope::Scope;
use app::error::AppError;
use app::model::Viewer;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The most that goes at once: the archive's chunk, and the bucket's burst.
const BURST: u64 = 64 * 1024;

/// The longest the pacer waits before it reads the clock again.
pub const RECHECK_MS: u64 = 250;

/// A user's export slot, given back when the download ends (done or cut off).
pub(super) struct ExportSlot {
    user_id: String,
    exports: Arc<Mutex<HashSet<String>>>,
}

impl Drop for ExportSlot {
    fn drop(&mut self) {
        self.exports.lock().expect("exports").remove(&self.user_id);
    }
}

/// A download on its way: its file name, its limits in words (for a header) and its bytes as
/// they are made.
pub struct WorkspaceExport {
    pub file_name: String,
    pub limits: String,
    pub body: Chunks,
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
        let slot = self.take_export_slot(&viewer.id)?;
        let config = &self.config.backups;
        let within =
            (config.export_max_seconds > 0).then(|| Duration::from_secs(config.export_max_seconds));
        let chunks = self
            .runtime
            .export_workspace(&viewer.name, part.as_deref(), within)
            .await
            .map_err(|e| match e {
                ArchiveError::Refused(why) => AppError::Invalid(why),
                ArchiveError::NotNow(why) => AppError::Conflict(why),
                ArchiveError::Unavailable(why) => AppError::Unavailable(why),
                ArchiveError::Io(e) => {
                    tracing::error!(error = %e, user = %viewer.name, "starting an export");
                    AppError::Internal
                }
            })?;
        let clock = self.store.clock();
        let now = clock.now_ms();
        let pacer = Pacer {
            chunks,
            waiting: None,
            bucket: (config.export_bytes_per_second > 0)
                .then(|| Bucket::new(config.export_bytes_per_second, BURST, now)),
            deadline_ms: (config.export_max_seconds > 0).then(|| {
                now.saturating_add(
                    i64::try_from(config.export_max_seconds * 1000).unwrap_or(i64::MAX),
                )
            }),
            clock,
            sent: 0,
            ended: false,
            on_cut: Some(self.cut_notice(viewer, config.export_max_seconds)),
            _slot: slot,
        };
        Ok(WorkspaceExport {
            file_name: export_name(&viewer.name, part.as_deref(), self.store.now()),
            limits: app::domain::pace::limits_words(
                config.export_bytes_per_second,
                config.export_max_seconds,
            ),
            body: Box::pin(pacer.into_stream()),
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

    /// What is done when `viewer`'s export is cut at its time limit: a log line and an audit
    /// entry, given the bytes sent.
    fn cut_notice(&self, viewer: &Viewer, max_seconds: u64) -> Box<dyn FnOnce(u64) + Send> {
        let store = self.store.clone();
        let (user_id, user) = (viewer.id.clone(), viewer.name.clone());
        Box::new(move |sent| {
            let detail = format!(
                "cut after {sent} bytes: longer than {max_seconds} s (backups.export_max_seconds)"
            );
            tracing::warn!(user = %user, sent, max_seconds, "an export was cut at its time limit");
            tokio::spawn(async move {
                if let Err(e) = store
                    .audit(
                        Some(&user_id),
                        "export.cut",
                        &format!("user:{user}"),
                        &detail,
                    )
                    .await
                {
                    tracing::error!(error = %e, "auditing an export's cut");
                }
            });
        })
    }
}

/// The archive's chunks paced by a bucket and cut at a deadline, both by the store's clock.
struct Pacer {
    chunks: Chunks,
    /// A chunk (or what is left of it) read from tar and not yet let go.
    waiting: Option<Bytes>,
    bucket: Option<Bucket>,
    deadline_ms: Option<i64>,
    clock: Arc<dyn Clock>,
    sent: u64,
    ended: bool,
    on_cut: Option<Box<dyn FnOnce(u64) + Send>>,
    /// Held while the download goes, given back when the body is dropped.
    _slot: ExportSlot,
}

impl Pacer {
    fn into_stream(self) -> impl Stream<Item = std::io::Result<Bytes>> + Send + 'static {
        futures_util::stream::unfold(self, |mut pacer| async move {
            let item = pacer.next().await?;
            Some((item, pacer))
        })
    }

    /// The next piece to send, once the bucket lets it go; an error once the deadline passed.
    async fn next(&mut self) -> Option<std::io::Result<Bytes>> {
        if self.ended {
            return None;
        }
        loop {
            let now = self.clock.now_ms();
            let left = match self.deadline_ms {
                Some(deadline) if now >= deadline => return Some(Err(self.cut())),
                Some(deadline) => u64::try_from(deadline - now).unwrap_or(0),
                None => u64::MAX,
            };
            let nap = Duration::from_millis(left.min(RECHECK_MS));
            let Some(chunk) = self.waiting.as_mut() else {
                // Reading tar's output is cancel-safe: a read cut short by the nap goes on
                // at the next call.
                match tokio::time::timeout(nap, self.chunks.next()).await {
                    Err(_) => continue,
                    Ok(None) => {
                        self.ended = true;
                        return None;
                    }
                    Ok(Some(Err(e))) => {
                        self.ended = true;
                        return Some(Err(e));
                    }
                    Ok(Some(Ok(chunk))) => {
                        self.waiting = Some(chunk).filter(|c| !c.is_empty());
                        continue;
                    }
                }
            };
            let piece = chunk.len().min(BURST as usize);
            match self.bucket.as_mut().map(|b| b.take(piece as u64, now)) {
                None | Some(Ok(())) => {
                    let out = chunk.split_to(piece);
                    if chunk.is_empty() {
                        self.waiting = None;
                    }
                    self.sent += piece as u64;
                    return Some(Ok(out));
                }
                Some(Err(wait_ms)) => {
                    tokio::time::sleep(nap.min(Duration::from_millis(wait_ms))).await;
                }
            }
        }
    }

    fn cut(&mut self) -> std::io::Error {
        self.ended = true;
        if let Some(notice) = self.on_cut.take() {
            notice(self.sent);
        }
        std::io::Error::other("the export took longer than its time limit")
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
