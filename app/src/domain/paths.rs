//! Where the server may send a browser after signing in: only back to this site.

/// Whether `path` stays on this site: "/x" but not "//evil.example" or "/\\evil".
pub fn is_local_path(path: &str) -> bool {
    // Browsers drop tabs and newlines inside URLs and read '\\' as '/', so "/\t/x" means "//x".
    path.starts_with('/')
        && !path.starts_with("//")
        && !path.chars().any(|c| c.is_control() || c == '\\')
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
    use super::{after_password_change, is_local_path, sign_in_then};

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
