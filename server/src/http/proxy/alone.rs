//! "Editor alone": the editor in a browser tab of its own, without our page around it, so that
//! its keyboard shortcuts are its own (VS Code's Ctrl+W, Ctrl+T and Ctrl+N go to the browser
//! when the editor sits in a frame). The session page's toolbar links to
//! `/s/<id>/?gsb-alone=<place>`; the proxy answers the owner with a cookie scoped to `/s/<id>/`
//! and a redirect to that place below the editor. While the cookie lasts, a tab that navigates
//! into the editor stays there instead of being sent to the session page that frames it. The
//! session stays active through the editor's traffic, which the proxy counts as in the frame.

use http::HeaderMap;

/// The query parameter of the toolbar's link; its value is the place (a local path below the
/// editor, percent-encoded).
pub const PARAM: &str = "gsb-alone";
/// Set for `/s/<id>/` only, so it says "alone" for that session's editor and nothing else.
pub const COOKIE: &str = "sandbox_alone";

/// Where an "Editor alone" request for `session_id` goes, when `tail` (the path below
/// `/s/<id>`) and `query` make one: the place it names below the editor, `/s/<id>/` if none.
pub fn requested(session_id: &str, tail: &str, query: Option<&str>) -> Option<String> {
    if tail != "/" {
        return None;
    }
    let value = query?.strip_prefix(PARAM)?;
    let value = match value.strip_prefix('=') {
        Some(value) => value,
        None if value.is_empty() => "",
        None => return None,
    };
    let place = percent_encoding::percent_decode_str(value)
        .decode_utf8()
        .ok()?;
    let place = if place.is_empty() { "/" } else { &place };
    app::domain::paths::is_local_path(place).then(|| format!("/s/{session_id}{place}"))
}

/// The cookie that keeps this session's editor alone in its tabs (12 hours, this path only).
pub fn cookie(session_id: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE}=1; Path=/s/{session_id}/; Max-Age=43200; HttpOnly; SameSite=Lax{secure}")
}

/// Whether the browser asked for the editor alone (the cookie, sent for this session only).
pub fn chosen(headers: &HeaderMap) -> bool {
    super::headers::cookies_but(headers, |name| name != COOKIE)
        .iter()
        .any(|pair| *pair == format!("{COOKIE}=1"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_names_a_place_below_the_editor_or_its_root() {
        assert_eq!(
            requested("abc", "/", Some("gsb-alone=%2Flab%3Ffile%3Dx")).as_deref(),
            Some("/s/abc/lab?file=x")
        );
        assert_eq!(
            requested("abc", "/", Some("gsb-alone=")).as_deref(),
            Some("/s/abc/")
        );
        assert_eq!(
            requested("abc", "/", Some("gsb-alone")).as_deref(),
            Some("/s/abc/")
        );
    }

    #[test]
    fn anything_else_is_no_request_and_no_place_leaves_the_editor() {
        assert_eq!(requested("abc", "/lab", Some("gsb-alone=%2F")), None);
        assert_eq!(requested("abc", "/", Some("gsb-alonex=%2F")), None);
        assert_eq!(requested("abc", "/", Some("file=x")), None);
        assert_eq!(requested("abc", "/", None), None);
        // Off our origin, or out of the editor by a second slash or a backslash.
        assert_eq!(
            requested("abc", "/", Some("gsb-alone=https%3A%2F%2Fevil")),
            None
        );
        assert_eq!(requested("abc", "/", Some("gsb-alone=%2F%2Fevil")), None);
        assert_eq!(requested("abc", "/", Some("gsb-alone=%2F%5Cevil")), None);
        assert_eq!(requested("abc", "/", Some("gsb-alone=%FF")), None);
    }

    #[test]
    fn the_cookie_is_for_this_sessions_editor_only() {
        let set = cookie("abc", true);
        assert!(set.contains("Path=/s/abc/;"), "{set}");
        assert!(set.ends_with("; Secure"));
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::COOKIE,
            "a=b; sandbox_alone=1".parse().unwrap(),
        );
        assert!(chosen(&headers));
        headers.insert(http::header::COOKIE, "sandbox_alone=0".parse().unwrap());
        assert!(!chosen(&headers));
    }
}
