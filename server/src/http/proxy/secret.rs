//! The editor's secret kept from the browser: a page the browser navigates to may quote it
//! (JupyterLab's page config does), so such a page is asked for uncompressed and every copy of
//! the secret is taken out on its way back. The browser is signed in to us; the editor's own
//! secret is no business of its.

use super::respond::json_error;
use crate::service::routes::EditorCredential;
use axum::body::Body;
use axum::response::Response;
use http::response::Parts;
use http::{StatusCode, header};

/// The largest editor page read whole to take its secret out; a larger one is refused.
const MAX_SCRUBBED_PAGE: usize = 8 * 1024 * 1024;

/// The secret an editor's credential carries, where it is one a page could quote (a token).
pub(super) fn editor_secret(credential: &EditorCredential) -> Option<String> {
    match credential {
        EditorCredential::Header(_, value) => value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("token "))
            .filter(|secret| secret.len() >= 16)
            .map(str::to_string),
        _ => None,
    }
}

/// A browser's page load (it accepts HTML), not a script's call.
pub(super) fn is_navigation(headers: &http::HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/html"))
}

pub(super) fn is_plain_html(headers: &http::HeaderMap) -> bool {
    let html = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|kind| kind.starts_with("text/html"));
    html && !headers.contains_key(header::CONTENT_ENCODING)
}

/// The editor's page of `parts` and `body`, read whole and with every copy of `secret` taken out.
pub(super) async fn scrubbed(mut parts: Parts, body: Body, secret: String) -> Response {
    let Ok(page) = axum::body::to_bytes(body, MAX_SCRUBBED_PAGE).await else {
        return json_error(
            StatusCode::BAD_GATEWAY,
            "editor_unreachable",
            "the editor's page could not be read",
        );
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(scrub(&page, secret.as_bytes())))
}

/// `page` with every occurrence of `secret` taken out.
fn scrub(page: &[u8], secret: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(page.len());
    let mut rest = page;
    while let Some(at) = rest.windows(secret.len()).position(|w| w == secret) {
        out.extend_from_slice(&rest[..at]);
        rest = &rest[at + secret.len()..];
    }
    out.extend_from_slice(rest);
    out
}

#[cfg(test)]
mod scrub_tests {
    #[test]
    fn every_copy_of_the_secret_goes_and_nothing_else() {
        let page = br#"<script id="jupyter-config-data">{"token": "s3cr3t-s3cr3t-s3cr3t", "x": "s3cr3t-s3cr3t-s3cr3t"}</script>"#;
        let scrubbed = super::scrub(page, b"s3cr3t-s3cr3t-s3cr3t");
        assert_eq!(
            scrubbed,
            br#"<script id="jupyter-config-data">{"token": "", "x": ""}</script>"#
        );
        assert_eq!(super::scrub(b"plain", b"s3cr3t-s3cr3t-s3cr3t"), b"plain");
    }
}
