//! Waiting for a started editor to answer.

use super::handle::Handle;
use crate::runtime::editors;
use crate::runtime::{EditorLaunch, Running, RuntimeError};
use std::path::Path;
use std::time::{Duration, Instant};

/// Probes every 25 ms until a 2xx; fails fast, with the log's last 20 lines, when the process
/// exits or `timeout` passes.
pub(super) async fn wait(
    launch: &EditorLaunch,
    running: &Running,
    timeout: Duration,
) -> Result<(), RuntimeError> {
    let handle: Handle =
        serde_json::from_str(&running.handle).map_err(|e| RuntimeError::Handle(e.to_string()))?;
    let path = editors::readiness_path(launch.editor, &launch.base_path);
    let auth = editors::upstream_auth(launch.editor, &running.secret);
    let started = Instant::now();
    let mut last_status = None;
    loop {
        match probe(&running.upstream, &path, &auth).await {
            Some(status) if (200..300).contains(&status) => {
                tracing::info!(session = %launch.session_id, ready_ms = started.elapsed().as_millis() as u64, "editor answered");
                return Ok(());
            }
            other => last_status = other.or(last_status),
        }
        if !handle.alive() {
            return Err(RuntimeError::Failed {
                message: format!("{} exited before it was ready", launch.editor.label()),
                log_tail: log_tail(&handle.log, 20),
            });
        }
        if started.elapsed() > timeout {
            let answer = last_status
                .map(|s| format!(" (last answer: HTTP {s})"))
                .unwrap_or_default();
            return Err(RuntimeError::Failed {
                message: format!(
                    "{} did not answer within {} s{answer}",
                    launch.editor.label(),
                    timeout.as_secs()
                ),
                log_tail: log_tail(&handle.log, 20),
            });
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn probe(upstream: &str, path: &str, auth: &editors::UpstreamAuth) -> Option<u16> {
    let request = auth.request(path)?;
    let (status, _) = tokio::time::timeout(
        Duration::from_secs(2),
        crate::net::upstream::fetch(upstream, request, 64 * 1024),
    )
    .await
    .ok()?
    .ok()?;
    Some(status.as_u16())
}

/// The last `lines` lines of a log file.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
