//! What an editor says about its own work. Jupyter reports each kernel's execution state, so a
//! long job with no browser attached still counts as activity. marimo and code-server expose no
//! busy state over HTTP (code-server's `/healthz` heartbeat moves with any open tab), so their
//! work counts through CPU and GPU use (the runtime's) and API traffic instead.

use crate::editors::UpstreamAuth;
use app::domain::launch::EditorKind;
use http_body_util::BodyExt;
use std::time::Duration;

pub type ProbeClient = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Empty<bytes::Bytes>,
>;

pub fn probe_client() -> ProbeClient {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(60))
        .build_http()
}

/// Whether the editor is working now; `None` when it cannot tell (or did not answer).
pub async fn editor_busy(
    client: &ProbeClient,
    editor: EditorKind,
    upstream: &str,
    base_path: &str,
    auth: &UpstreamAuth,
) -> Option<bool> {
    if editor != EditorKind::JupyterLab {
        return None;
    }
    let url = format!("http://{upstream}{base_path}api/kernels");
    let request = match auth {
        UpstreamAuth::Header(name, value) => http::Request::get(&url).header(*name, value),
        UpstreamAuth::Cookie(name, value) => {
            http::Request::get(&url).header("cookie", format!("{name}={value}"))
        }
    };
    let request = request.body(http_body_util::Empty::new()).ok()?;
    let response = tokio::time::timeout(Duration::from_secs(3), client.request(request))
        .await
        .ok()?
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    let body = tokio::time::timeout(Duration::from_secs(3), response.into_body().collect())
        .await
        .ok()?
        .ok()?
        .to_bytes();
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
