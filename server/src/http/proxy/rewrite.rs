//! The third phase: the browser's request made into the editor's (see `headers` for the rules).
//!
//! Our credentials go and the editor's come in; `X-Forwarded-For` and `X-Forwarded-Proto` are
//! ours to say; an upgrade's own `Connection` and `Upgrade` are put back after the hop-by-hop
//! headers went. The body is watched, so that each chunk of an upload moves the deadline for the
//! editor's answer and a deadline that passes mid-upload is known for the client's doing.

use super::Exchange;
use super::headers::*;
use super::secret::{editor_secret, is_navigation};
use axum::body::Body;
use http::header::{self, HeaderValue};
use http::request::Parts;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The body for the editor, and what its answer will be read with.
pub(super) struct Outgoing {
    pub body: Body,
    /// The editor's secret, to be taken out of the page it answers (see `secret`).
    pub secret: Option<String>,
    /// Whether the browser has sent all of its body: a deadline that passes before is an upload
    /// that stopped arriving (the client's doing), not an editor that did not answer. `None`: no
    /// body, nothing to wait for (the common case makes no allocation).
    pub uploaded: Option<Arc<AtomicBool>>,
}

/// The request of `parts` and `body` rewritten for the editor at `uri`, in place (the request
/// is large: moved as little as it can be).
pub(super) fn rewrite(
    cx: &Exchange<'_>,
    parts: &mut Parts,
    body: Body,
    uri: http::Uri,
) -> Outgoing {
    // A page the browser navigates to may quote the editor's secret (JupyterLab's page config
    // does): asked for uncompressed, to be read and scrubbed on its way back.
    let secret = is_navigation(&parts.headers)
        .then(|| editor_secret(&cx.route.credential))
        .flatten();
    if secret.is_some() {
        parts.headers.remove(header::ACCEPT_ENCODING);
    }
    rewrite_headers(cx, &mut parts.headers);
    parts.uri = uri;
    parts.version = http::Version::HTTP_11;
    let (body, uploaded) = watch_upload(cx, body);
    Outgoing {
        body,
        secret,
        uploaded,
    }
}

fn rewrite_headers(cx: &Exchange<'_>, headers: &mut http::HeaderMap) {
    let upgrade_to = headers.get(header::UPGRADE).cloned();
    strip_hop_by_hop(headers);
    strip_our_credentials(headers, cx.caller.by_token);
    add_editor_auth(headers, &cx.route.credential);
    if let Some(ip) = cx.client.forwarded_for {
        headers.insert(X_FORWARDED_FOR, ip.clone());
    }
    // Behind a TLS ingress the page is https, and the editor's redirects and origin checks must
    // know; anything else is plain http (a client that claims https only misleads itself).
    let https = headers
        .get(X_FORWARDED_PROTO)
        .is_some_and(|proto| proto.as_bytes().eq_ignore_ascii_case(b"https"));
    headers.insert(X_FORWARDED_PROTO, if https { HTTPS } else { HTTP });
    if let Some(protocol) = upgrade_to {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, protocol);
    }
}

/// `body`, watched while it arrives (an editor answers once it has read the body: the wait for
/// its answer counts from the last byte of an upload, however long the upload takes).
fn watch_upload(cx: &Exchange<'_>, body: Body) -> (Body, Option<Arc<AtomicBool>>) {
    if http_body::Body::is_end_stream(&body) {
        return (body, None);
    }
    // Every chunk of the upload moves the deadline for the answer.
    let answer = cx.client.answer.clone();
    let answer_timeout = cx.answer_timeout;
    let done = Arc::new(AtomicBool::new(false));
    let uploaded = done.clone();
    let body = crate::http::Watched::body(body, move |polled: &crate::http::Polled, ended| {
        if let std::task::Poll::Ready(Some(Ok(_))) = polled {
            answer.reset(std::time::Instant::now() + answer_timeout);
        }
        if ended {
            done.store(true, Ordering::Release);
        }
    });
    (body, Some(uploaded))
}
