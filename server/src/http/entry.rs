//! The entry origin (`proxy.entry_origin`): another host name of this server where an admin's
//! browser opens a user's editor. It serves only `/enter/<ticket>`, which trades a one-time link
//! from "Enter editor" for a cookie of this origin scoped to that session's path
//! ([`crate::service::admin`]), and `/s/<id>/…` through the proxy, where only that cookie or a
//! bearer token counts. Nothing else answers here, so the user's page, running in this origin,
//! finds none of our pages, our API or a sign-in of ours to use.

use crate::http::AppState;
use crate::identity::auth::ENTRY_COOKIE;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{Request, StatusCode, header};

/// Whether `request` was sent to the entry origin's host.
pub fn is_for(entry_host: &str, request: &Request<Body>) -> bool {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()));
    host.is_some_and(|host| host.trim().eq_ignore_ascii_case(entry_host))
}

/// `/enter/<ticket>`: the cookie, then the editor. Anything else but `/s/` is not here.
pub async fn handle(state: &AppState, request: Request<Body>) -> Response {
    let Some(ticket) = request.uri().path().strip_prefix("/enter/") else {
        return plain(
            StatusCode::NOT_FOUND,
            "This address only opens editors an admin entered; the product is at its own address.",
        );
    };
    if request.method() != http::Method::GET || ticket.is_empty() || ticket.contains('/') {
        return plain(StatusCode::NOT_FOUND, "no such entry link");
    }
    let entered = match state.service.admin.enter_by_ticket(ticket).await {
        Ok(entered) => entered,
        Err(e) => {
            let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::FORBIDDEN);
            return plain(status, &e.to_string());
        }
    };
    let config = state.service.config();
    let secure = config
        .proxy
        .entry_origin
        .as_deref()
        .is_some_and(|origin| origin.starts_with("https://"));
    let max_age = ((entered.until - state.service.now()) / 1000).max(0);
    let path = format!("/s/{}/", entered.session_id);
    // HttpOnly: the user's page in this origin cannot read it; the path keeps it to this session.
    let cookie = format!(
        "{ENTRY_COOKIE}={}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Lax{}",
        entered.token,
        if secure { "; Secure" } else { "" }
    );
    (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, path),
            (header::SET_COOKIE, cookie),
            (header::CACHE_CONTROL, "no-store".to_string()),
            (header::REFERRER_POLICY, "no-referrer".to_string()),
        ],
    )
        .into_response()
}

fn plain(status: StatusCode, message: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to(host: &str) -> Request<Body> {
        Request::builder()
            .uri("/s/x/")
            .header(header::HOST, host)
            .body(Body::empty())
            .unwrap()
    }

    #[test]
    fn the_entry_host_is_told_by_its_name_and_port() {
        assert!(is_for("localhost:3000", &to("LocalHost:3000")));
        assert!(!is_for("localhost:3000", &to("127.0.0.1:3000")));
        assert!(!is_for("localhost:3000", &to("localhost:3001")));
        assert!(!is_for("enter.example.com", &to("example.com")));
    }
}
