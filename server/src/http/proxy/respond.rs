//! Answers of the proxy's own: JSON errors, and whether the caller is a browser asking for a page.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::header::{self, HeaderMap};

pub(super) fn json_error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(serde_json::json!({ "error": code, "message": message })),
    )
        .into_response()
}

/// A state-changing request a browser sent from another site (see [`crate::identity::auth::from_foreign_origin`]).
pub(crate) fn cross_site_refused() -> Response {
    json_error(
        StatusCode::FORBIDDEN,
        "cross_site",
        "requests from other sites are refused; open the sandbox's own page",
    )
}

/// What the caller sees when our side failed; the cause is logged where it happened.
pub(super) fn internal_error() -> Response {
    json_error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "something went wrong on our side",
    )
}

pub(super) fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"))
}
