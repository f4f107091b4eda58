//! What an account's name and password must be.

/// The longest name, in characters.
pub const MAX_NAME_CHARS: usize = 64;

/// The shortest password, in characters.
pub const MIN_PASSWORD_CHARS: usize = 8;

/// Characters that show nothing (zero-width, direction overrides): two names that look the same
/// must be the same name.
fn is_invisible(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2064}' | '\u{FEFF}')
}

/// A user name as given, trimmed, if it is one: 1 to 64 characters, without '/', control or
/// invisible characters. The error is the sentence to show.
pub fn checked_user_name(name: &str) -> Result<&str, String> {
    let name = name.trim();
    if name.is_empty()
        || name.chars().count() > MAX_NAME_CHARS
        || name
            .chars()
            .any(|c| c.is_control() || c == '/' || is_invisible(c))
    {
        return Err(format!(
            "a user name must be 1 to {MAX_NAME_CHARS} characters, without '/', control or invisible characters"
        ));
    }
    Ok(name)
}

/// The name a sign-in looks up: trimmed, and cut at [`MAX_NAME_CHARS`] (a longer one is nobody,
/// and is not kept whole, in the throttle or the audit log).
pub fn sign_in_name(name: &str) -> &str {
    let name = name.trim();
    name.char_indices()
        .nth(MAX_NAME_CHARS)
        .map_or(name, |(end, _)| &name[..end])
}

/// Whether `password` may be an account's password.
pub fn check_password(password: &str) -> Result<(), String> {
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(format!(
            "a password must have at least {MIN_PASSWORD_CHARS} characters"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_trimmed_and_kept_when_it_is_one() {
        assert_eq!(checked_user_name("  alice "), Ok("alice"));
        assert_eq!(checked_user_name("Jürgen Ø"), Ok("Jürgen Ø"));
        assert!(checked_user_name(&"é".repeat(64)).is_ok());
    }

    #[test]
    fn names_that_hide_or_break_something_are_refused() {
        for bad in [
            "",
            "   ",
            "a/b",
            "line\nbreak",
            "zero\u{200B}width",
            "right\u{202E}left",
            "bom\u{FEFF}",
            &"x".repeat(65),
        ] {
            let refused = checked_user_name(bad).unwrap_err();
            assert!(refused.contains("1 to 64 characters"), "{bad:?}: {refused}");
        }
    }

    #[test]
    fn a_sign_in_name_is_cut_at_the_longest_name() {
        assert_eq!(sign_in_name("  bob  "), "bob");
        let long = "ä".repeat(70);
        assert_eq!(sign_in_name(&long).chars().count(), 64);
    }

    #[test]
    fn a_password_has_at_least_eight_characters() {
        assert!(check_password("1234567").is_err());
        assert!(check_password("12345678").is_ok());
        assert!(check_password("ääääääää").is_ok(), "characters, not bytes");
    }
}
