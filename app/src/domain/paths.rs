//! Where the server may send a browser after signing in: only back to this site.

/// Whether `path` stays on this site: "/x" but not "//evil.example" or "/\\evil".
pub fn is_local_path(path: &str) -> bool {
    // Browsers drop tabs and newlines inside URLs and read '\\' as '/', so "/\t/x" means "//x".
    path.starts_with('/')
        && !path.starts_with("//")
        && !path.chars().any(|c| c.is_control() || c == '\\')
}

/// Where the session page's frame opens: `requested` (a path below the session's editor, as the
/// proxy sends a tab that navigated into the editor by itself, e.g. marimo's new notebook) when it
/// stays below it, else the editor's landing page.
pub fn editor_frame(session_id: &str, landing: &str, requested: Option<&str>) -> String {
    let below = requested.filter(|path| {
        let route = path.split(['?', '#']).next().unwrap_or_default();
        !path.starts_with('/')
            && !path.chars().any(|c| c.is_control() || c == '\\')
            && !route.split('/').any(|segment| {
                // Browsers read "%2e" in a segment as ".".
                let dots = segment.replace("%2e", ".").replace("%2E", ".");
                dots == "." || dots == ".."
            })
    });
    format!("/s/{session_id}/{}", below.unwrap_or(landing))
}

/// The session page that a tab navigating into the editor at `tail` (its path below
/// `/s/<id>`, with the query) is sent to, so that it carries the toolbar and counts as activity.
pub fn session_page_for(session_id: &str, tail: &str) -> String {
    match tail.trim_start_matches('/') {
        "" => format!("/sessions/{session_id}"),
        path => format!(
            "/sessions/{session_id}?path={}",
            super::encode::percent_encode(path, super::encode::PATH)
        ),
    }
}

/// The sign-in page, coming back to `here` (one of our paths) afterwards; plain for the dashboard.
pub fn sign_in_then(here: &str) -> String {
    if is_local_path(here) && here != "/" && !here.starts_with("/login") {
        format!(
            "/login?next={}",
            super::encode::percent_encode(here, super::encode::PATH)
        )
    } else {
        "/login".to_string()
    }
}

/// The account page, where a person whose password an admin set chooses their own, then goes on
/// to `next` (one of our paths) or the dashboard.
pub fn after_password_change(next: Option<&str>) -> String {
    match next.filter(|n| is_local_path(n) && *n != "/") {
        Some(next) => format!(
            "/account?next={}",
            super::encode::percent_encode(next, super::encode::PATH)
        ),
        None => "/account?next=/".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::{
        after_password_change, editor_frame, is_local_path, session_page_for, sign_in_then,
    };

    #[test]
    fn the_frame_opens_below_its_own_editor_only() {
        assert_eq!(editor_frame("abc", "lab", None), "/s/abc/lab");
        assert_eq!(
            editor_frame("abc", "", Some("?file=new_notebook.py")),
            "/s/abc/?file=new_notebook.py"
        );
        assert_eq!(
            editor_frame("abc", "lab", Some("lab/tree/a%20b.ipynb?x=1")),
            "/s/abc/lab/tree/a%20b.ipynb?x=1"
        );
        for out in [
            "/s/other/",
            "//evil.example",
            "../other/lab",
            "lab/../../x",
            "lab/%2e%2e/x",
            "lab/.%2E/x",
            "a\\b",
            "a\nb",
        ] {
            assert_eq!(
                editor_frame("abc", "lab", Some(out)),
                "/s/abc/lab",
                "{out:?}"
            );
        }
    }

    #[test]
    fn a_tab_in_the_editor_goes_to_its_session_page_and_back_there() {
        assert_eq!(session_page_for("abc", ""), "/sessions/abc");
        assert_eq!(session_page_for("abc", "/"), "/sessions/abc");
        let page = session_page_for("abc", "/?file=new.py");
        assert_eq!(page, "/sessions/abc?path=%3Ffile%3Dnew.py");
        // The session page's `path`, decoded, opens the same place in its frame.
        assert_eq!(
            editor_frame("abc", "", Some("?file=new.py")),
            "/s/abc/?file=new.py"
        );
    }

    #[test]
    fn sign_in_comes_back_to_the_page_asked_for() {
        assert_eq!(sign_in_then("/"), "/login");
        assert_eq!(sign_in_then("/tokens"), "/login?next=/tokens");
        assert_eq!(
            sign_in_then("/admin?tab=audit&q=x y"),
            "/login?next=/admin%3Ftab%3Daudit%26q%3Dx%20y"
        );
        assert_eq!(sign_in_then("/login?next=/x"), "/login");
        assert_eq!(sign_in_then("//evil.example"), "/login");
    }

    #[test]
    fn a_password_to_change_goes_by_the_account_page_and_on() {
        assert_eq!(after_password_change(None), "/account?next=/");
        assert_eq!(after_password_change(Some("/")), "/account?next=/");
        assert_eq!(
            after_password_change(Some("/s/abc/lab?x=1")),
            "/account?next=/s/abc/lab%3Fx%3D1"
        );
        assert_eq!(
            after_password_change(Some("//evil.example/")),
            "/account?next=/"
        );
    }

    #[test]
    fn only_local_paths_are_followed_after_sign_in() {
        assert!(is_local_path("/s/abc/lab"));
        assert!(is_local_path("/"));
        assert!(!is_local_path("//evil.example/"));
        assert!(!is_local_path("/\\evil.example"));
        assert!(!is_local_path("https://evil.example/"));
        assert!(!is_local_path(""));
        assert!(!is_local_path("/\t/evil.example"));
        assert!(!is_local_path("/\n/evil.example"));
    }
}
