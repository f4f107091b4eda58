//! What an editor says about its own work. Jupyter reports each kernel's execution state, so a
//! long job with no browser attached still counts as activity. marimo and code-server expose no
//! busy state over HTTP (code-server's `/healthz` heartbeat moves with any open tab), so their
//! work counts through CPU and GPU use (the runtime's) and API traffic instead.

use crate::runtime::editors::UpstreamAuth;
use app::domain::launch::EditorKind;
use std::time::Duration;

/// Whether the editor is working now; `None` when it cannot tell (or did not answer).
pub async fn editor_busy(
    editor: EditorKind,
    upstream: &str,
    base_path: &str,
    auth: &UpstreamAuth,
) -> Option<bool> {
    if editor != EditorKind::JupyterLab {
        return None;
    }
    let request = auth.request(&format!("{base_path}api/kernels"))?;
    let (status, body) = tokio::time::timeout(
        Duration::from_secs(3),
        crate::net::upstream::fetch(upstream, request, 1 << 20),
    )
    .await
    .ok()?
    .ok()?;
    if !status.is_success() {
        return None;
    }
    jupyter_kernels_busy(&body)
}

/// Reads Jupyter's `GET /api/kernels`: busy when any kernel executes (or is starting).
pub fn jupyter_kernels_busy(body: &[u8]) -> Option<bool> {
    #[derive(serde::Deserialize)]
    struct Kernel {
        execution_state: Option<String>,
    }
    let kernels: Vec<Kernel> = serde_json::from_slice(body).ok()?;
    Some(kernels.iter().any(|k| {
        matches!(
            k.execution_state.as_deref(),
            Some("busy") | Some("starting")
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_kernel_is_work_an_idle_one_is_not() {
        let busy = br#"[{"id":"a","name":"python3","last_activity":"2026-11-30T09:00:00Z","execution_state":"idle","connections":0},
                        {"id":"b","name":"python3","last_activity":"2026-11-30T09:00:00Z","execution_state":"busy","connections":0}]"#;
        assert_eq!(jupyter_kernels_busy(busy), Some(true));
        let idle = br#"[{"id":"a","execution_state":"idle","connections":1}]"#;
        assert_eq!(jupyter_kernels_busy(idle), Some(false));
        assert_eq!(jupyter_kernels_busy(b"[]"), Some(false));
        assert_eq!(jupyter_kernels_busy(b"<html>"), None);
    }
}
