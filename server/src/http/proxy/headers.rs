//! Header rewriting on the way to an editor and back.
//!
//! On the way in: hop-by-hop headers go, with those `Connection` names; our own credentials go (the
//! sign-in cookie (`sandbox_session` or `__Host-sandbox_session`), and our bearer token when the request came with one); the editor's
//! credential comes in, and a cookie of the editor's credential's name that the browser sent
//! (code-server's) is replaced by ours, since editors read the first one.
//!
//! On the way back, `confine_to_session`: editors answer on our origin, so what they send must not
//! act beyond their session. `Clear-Site-Data` and `Service-Worker-Allowed` are dropped (from a
//! WebSocket handshake's 101 too); a `Set-Cookie` for our own cookie's name is dropped (it would
//! sign the browser in as someone else); other cookies lose `Domain` and get a `Path` under
//! `/s/<id>/` (an editor that believes it is at "/", code-server, has its paths moved under it).
//!
//! Names and values are constants made at compile time, and `remove_present` reads the names
//! present once, so an absent header costs a comparison rather than a hash lookup. Measured in
//! instructions a request (BENCHMARKS.md, section 7): hop-by-hop removal went from about 3,030 to
//! 670, constants saved about 1,500 that parsing names per use cost, and the editor's credential,
//! made once per route (`service::routes`), from 770 to 240.

use crate::service::routes::{EditorCredential, Route};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

// Made at compile time: a name or value given as a string is checked at every use.
pub(super) const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
/// What the browser fetches for (`document` for a tab's navigation, `iframe` for a frame's).
pub(super) const SEC_FETCH_DEST: HeaderName = HeaderName::from_static("sec-fetch-dest");
pub(super) const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub(super) const CLEAR_SITE_DATA: HeaderName = HeaderName::from_static("clear-site-data");
pub(super) const SERVICE_WORKER_ALLOWED: HeaderName =
    HeaderName::from_static("service-worker-allowed");
pub(super) const HTTP: HeaderValue = HeaderValue::from_static("http");
pub(super) const HTTPS: HeaderValue = HeaderValue::from_static("https");
pub(super) const SAMEORIGIN: HeaderValue = HeaderValue::from_static("SAMEORIGIN");
pub(super) const FRAME_ANCESTORS_SELF: HeaderValue =
    HeaderValue::from_static("frame-ancestors 'self'");

pub(super) const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Connection options that name no header of their own, or one in [`HOP_BY_HOP`].
pub(super) const PLAIN_CONNECTION_OPTIONS: [&str; 3] = ["close", "keep-alive", "upgrade"];

pub(super) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Headers the `Connection` header lists are hop-by-hop too; it usually lists none.
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|option| {
            !option.is_empty()
                && !PLAIN_CONNECTION_OPTIONS
                    .iter()
                    .any(|plain| option.eq_ignore_ascii_case(plain))
        })
        .filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok())
        .collect();
    remove_present(headers, &HOP_BY_HOP);
    for name in &listed {
        headers.remove(name);
    }
}

/// Removes those of `names` that `headers` holds. On the per-request path: the names present
/// are read once, and a header that is absent (most are) costs a comparison, not a hash lookup.
pub(super) fn remove_present<const N: usize>(headers: &mut HeaderMap, names: &[HeaderName; N]) {
    let mut present = [false; N];
    for name in headers.keys() {
        if let Some(i) = names.iter().position(|n| n == name) {
            present[i] = true;
        }
    }
    for (name, _) in names.iter().zip(present).filter(|(_, present)| *present) {
        headers.remove(name);
    }
}

pub(super) fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| {
                v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
}

/// Our own credentials never reach the editor: our cookie and, when the request carries one
/// (`by_token`), our bearer token are removed.
pub(super) fn strip_our_credentials(headers: &mut HeaderMap, by_token: bool) {
    if headers.contains_key(header::COOKIE) {
        let kept = cookies_but(headers, |name| {
            crate::identity::auth::is_session_cookie(name)
                || name == super::alone::COOKIE
                || name == crate::identity::auth::ENTRY_COOKIE
        })
        .join("; ");
        set_cookie_header(headers, &kept);
    }
    if by_token {
        headers.remove(header::AUTHORIZATION);
    }
}

/// The request's cookies (`name=value` pairs) other than those whose name `dropped` picks.
pub(super) fn cookies_but(headers: &HeaderMap, dropped: impl Fn(&str) -> bool) -> Vec<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|pair| {
            !pair.is_empty() && !dropped(pair.split_once('=').map_or(*pair, |(n, _)| n).trim())
        })
        .collect()
}

/// Replaces the `Cookie` header with `cookies`; none when it is empty.
pub(super) fn set_cookie_header(headers: &mut HeaderMap, cookies: &str) {
    let value = (!cookies.is_empty())
        .then(|| HeaderValue::from_str(cookies).ok())
        .flatten();
    headers.remove(header::COOKIE);
    if let Some(value) = value {
        headers.insert(header::COOKIE, value);
    }
}

/// Editors answer on our origin, so what they send must not act beyond their session: no
/// cookie of ours (it would sign the browser in as someone else), no clearing of the site's
/// data, no service worker for the whole site, and their cookies stay under `/s/<id>/`.
pub(super) fn confine_to_session(headers: &mut HeaderMap, route: &Route) {
    remove_present(headers, &[CLEAR_SITE_DATA, SERVICE_WORKER_ALLOWED]);
    if !headers.contains_key(header::SET_COOKIE) {
        return;
    }
    let prefix = format!("/s/{}/", route.session_id);
    let cookies: Vec<HeaderValue> = headers
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|value| confined_cookie(value.as_bytes(), &prefix, route.strip_prefix))
        .filter_map(|cookie| HeaderValue::from_str(&cookie).ok())
        .collect();
    headers.remove(header::SET_COOKIE);
    for cookie in cookies {
        headers.append(header::SET_COOKIE, cookie);
    }
}

/// `Set-Cookie` as the browser may keep it: None for our own cookie's name (or one we cannot
/// read); without `Domain`; its `Path` under `prefix` (an editor that believes it is at "/"
/// has its paths moved under it).
pub(super) fn confined_cookie(value: &[u8], prefix: &str, strip_prefix: bool) -> Option<String> {
    let value = std::str::from_utf8(value).ok()?;
    let mut parts = value.split(';').map(str::trim);
    let pair = parts.next()?;
    let name = pair.split_once('=').map_or(pair, |(name, _)| name).trim();
    if name.is_empty() || crate::identity::auth::is_session_cookie(name) {
        return None;
    }
    let mut out = vec![pair.to_string()];
    let mut path = None;
    for attribute in parts {
        let key = attribute
            .split_once('=')
            .map_or(attribute, |(k, _)| k)
            .trim();
        if key.eq_ignore_ascii_case("domain") {
            continue;
        }
        if key.eq_ignore_ascii_case("path") {
            path = attribute.split_once('=').map(|(_, v)| v.trim().to_string());
            continue;
        }
        out.push(attribute.to_string());
    }
    let path = match path {
        // Kept for the request's own directory, which is inside the session.
        None => return Some(out.join("; ")),
        Some(path) if path.starts_with(prefix) => path,
        Some(path) if strip_prefix && path.starts_with('/') => {
            format!("{}{path}", prefix.trim_end_matches('/'))
        }
        Some(_) => prefix.to_string(),
    };
    out.push(format!("Path={path}"));
    Some(out.join("; "))
}

pub(super) fn add_editor_auth(headers: &mut HeaderMap, credential: &EditorCredential) {
    match credential {
        EditorCredential::Header(name, value) => {
            headers.insert(name.clone(), value.clone());
        }
        EditorCredential::Cookie(_, pair) if !headers.contains_key(header::COOKIE) => {
            headers.insert(header::COOKIE, pair.clone());
        }
        EditorCredential::Cookie(name, pair) => {
            // A cookie of that name the browser holds would come first, and editors read the
            // first one: it goes.
            let mut cookies = cookies_but(headers, |cookie| cookie == *name);
            cookies.push(pair.to_str().unwrap_or_default());
            let cookies = cookies.join("; ");
            set_cookie_header(headers, &cookies);
        }
        EditorCredential::Unusable => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::editors::UpstreamAuth;
    #[test]
    fn hop_by_hop_and_listed_headers_go() {
        let mut h = HeaderMap::new();
        h.insert("connection", "keep-alive, x-secret".parse().unwrap());
        h.append("connection", "Close".parse().unwrap());
        h.insert("x-secret", "1".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
        h.insert("transfer-encoding", "chunked".parse().unwrap());
        h.insert("te", "trailers".parse().unwrap());
        h.insert("content-type", "text/plain".parse().unwrap());
        h.insert("close-enough", "kept".parse().unwrap());
        strip_hop_by_hop(&mut h);
        let mut left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        left.sort();
        assert_eq!(left, ["close-enough", "content-type"]);
    }
    #[test]
    fn only_the_named_headers_present_are_removed() {
        let mut h = HeaderMap::new();
        h.insert("clear-site-data", "\"*\"".parse().unwrap());
        h.append("set-cookie", "a=1".parse().unwrap());
        remove_present(&mut h, &[CLEAR_SITE_DATA, SERVICE_WORKER_ALLOWED]);
        assert!(!h.contains_key("clear-site-data"));
        assert_eq!(h.len(), 1);
        remove_present(&mut h, &[SERVICE_WORKER_ALLOWED]);
        assert_eq!(h.get("set-cookie").unwrap(), "a=1");
    }
    #[test]
    fn the_editors_secret_is_made_once_and_an_unusable_one_is_not_sent() {
        let cookie = EditorCredential::of(&UpstreamAuth::Cookie("s", "v".into()));
        let mut h = HeaderMap::new();
        add_editor_auth(&mut h, &cookie);
        assert_eq!(h.get("cookie").unwrap(), "s=v");
        let broken = EditorCredential::of(&UpstreamAuth::Header("authorization", "a\nb".into()));
        assert!(matches!(broken, EditorCredential::Unusable));
        let mut h = HeaderMap::new();
        add_editor_auth(&mut h, &broken);
        assert!(h.is_empty());
    }
    #[test]
    fn an_editors_cookies_stay_inside_its_session() {
        let at = "/s/abc/";
        let confined = |cookie: &str, strip| confined_cookie(cookie.as_bytes(), at, strip);
        assert_eq!(confined("sandbox_session=x; Path=/", false), None);
        assert_eq!(confined(" sandbox_session = x", true), None);
        assert_eq!(
            confined("__Host-sandbox_session=x; Path=/; Secure", false),
            None
        );
        assert_eq!(
            confined("a=1; Domain=example.com; Path=/; Secure", false).unwrap(),
            "a=1; Secure; Path=/s/abc/"
        );
        assert_eq!(
            confined("a=1; path=/s/abc/lab", false).unwrap(),
            "a=1; Path=/s/abc/lab"
        );
        // An editor that believes it is at "/" gets its paths under the session's.
        assert_eq!(
            confined("code=1; Path=/stable", true).unwrap(),
            "code=1; Path=/s/abc/stable"
        );
        assert_eq!(
            confined("code=1; Path=/", true).unwrap(),
            "code=1; Path=/s/abc/"
        );
        assert_eq!(
            confined("bare=1; HttpOnly", false).unwrap(),
            "bare=1; HttpOnly"
        );
        assert_eq!(confined("=oops", false), None);
    }
    #[test]
    fn a_cookie_of_the_editors_name_from_the_browser_gives_way_to_ours() {
        let mut h = HeaderMap::new();
        h.insert("cookie", "code-server-session=stale; b=2".parse().unwrap());
        add_editor_auth(
            &mut h,
            &EditorCredential::of(&UpstreamAuth::Cookie("code-server-session", "H".into())),
        );
        assert_eq!(h.get("cookie").unwrap(), "b=2; code-server-session=H");
    }
    #[test]
    fn our_cookie_and_token_never_reach_the_editor() {
        let mut h = HeaderMap::new();
        h.insert(
            "cookie",
            "_xsrf=1; sandbox_session=SECRET; b=2; __Host-sandbox_session=SECRET"
                .parse()
                .unwrap(),
        );
        h.insert("authorization", "Bearer gsb_abc".parse().unwrap());
        strip_our_credentials(&mut h, true);
        assert_eq!(h.get("cookie").unwrap(), "_xsrf=1; b=2");
        assert!(!h.contains_key("authorization"));
        add_editor_auth(
            &mut h,
            &EditorCredential::of(&UpstreamAuth::Cookie("code-server-session", "H".into())),
        );
        assert_eq!(
            h.get("cookie").unwrap(),
            "_xsrf=1; b=2; code-server-session=H"
        );
        add_editor_auth(
            &mut h,
            &EditorCredential::of(&UpstreamAuth::Header("authorization", "token T".into())),
        );
        assert_eq!(h.get("authorization").unwrap(), "token T");
    }
    #[test]
    fn recognizes_upgrades() {
        let mut h = HeaderMap::new();
        h.insert("upgrade", "websocket".parse().unwrap());
        assert!(!is_upgrade(&h));
        h.insert("connection", "keep-alive, Upgrade".parse().unwrap());
        assert!(is_upgrade(&h));
    }
}
