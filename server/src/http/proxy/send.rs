//! The fourth phase: the request sent to the editor, under the deadline for its answer.
//!
//! An editor that has not answered (status and headers) within `proxy.answer_timeout_seconds` of
//! the request's last byte gets the browser a 504 `editor_timeout`, so a hung editor cannot hold
//! the browser's connections to our pages; an upload that stopped arriving for as long is the
//! client's doing, and gets 408 `request_timeout`. An editor that cannot be reached drops its
//! route, so a session another replica stopped is read again.

use super::Exchange;
use super::respond::json_error;
use axum::body::Body;
use axum::response::Response;
use http::StatusCode;
use http::header::{self, HeaderValue};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The editor's answer to `request`, or ours when it gave none in time or could not be reached.
pub(super) async fn send(
    cx: &Exchange<'_>,
    request: http::Request<Body>,
    uploaded: Option<Arc<AtomicBool>>,
) -> Result<Response, Response> {
    let route = &cx.route;
    let started = std::time::Instant::now();
    let sending = async {
        if cx.upgrade {
            Box::pin(crate::net::upstream::upgrade(&route.upstream, request))
                .await
                .map(|r| r.map(Body::new))
        } else {
            let upstreams = cx.state.service.access.upstreams();
            upstreams.send(&route.upstream, request).await
        }
    };
    // A hung editor must not hold the browser's connections to us (and so our own pages).
    let within = crate::net::deadline::within(cx.client.answer, cx.answer_timeout, sending);
    let Some(sent) = within.await else {
        return Err(late(cx, uploaded));
    };
    match sent {
        Ok(response) => {
            let metrics = cx.state.service.metrics();
            metrics.proxied(started.elapsed().as_secs_f64());
            Ok(response)
        }
        Err(e) => {
            tracing::warn!(session = %route.session_id, error = %e, "editor unreachable");
            // The session may have ended elsewhere: the next request reads it again.
            cx.state.service.access.forget_route(&route.session_id);
            Err(json_error(
                StatusCode::BAD_GATEWAY,
                "editor_unreachable",
                "the editor is not answering; it may have stopped",
            ))
        }
    }
}

/// Our answer when the deadline passed: the client's stalled upload, or the editor's silence.
#[cold]
fn late(cx: &Exchange<'_>, uploaded: Option<Arc<AtomicBool>>) -> Response {
    let session = &cx.route.session_id;
    if uploaded.is_some_and(|done| !done.load(Ordering::Acquire)) {
        tracing::info!(%session, "an upload through the proxy stalled");
        let mut stalled = json_error(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "the upload stopped arriving; send it again",
        );
        stalled
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return stalled;
    }
    tracing::warn!(%session, "the editor did not answer in time");
    json_error(
        StatusCode::GATEWAY_TIMEOUT,
        "editor_timeout",
        "the editor did not answer in time; it may be busy or stuck",
    )
}
