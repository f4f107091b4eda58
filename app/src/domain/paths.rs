//! Where the server may send a browser after signing in: only back to this site.

/// Whether `path` stays on this site: "/x" but not "//evil.example" or "/\\evil".
pub fn is_local_path(path: &str) -> bool {
    // Browsers drop tabs and newlines inside URLs and read '\\' as '/', so "/\t/x" means "//x".
    path.starts_with('/')
        && !path.starts_with("//")
        && !path.chars().any(|c| c.is_control() || c == '\\')
}

#[cfg(test)]
mod tests {
    use super::is_local_path;

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
