//! Percent-encoding (RFC 3986), for values put into a URL: one encoder, two alphabets.
//!
//! Every byte outside the alphabet is written `%XX` in upper-case hex, UTF-8 byte by byte.
//! ASCII letters and digits are always kept; an alphabet names the marks kept besides them.

/// The bytes an encoding leaves as they are, besides ASCII letters and digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alphabet {
    marks: &'static [u8],
}

impl Alphabet {
    fn keeps(self, byte: u8) -> bool {
        byte.is_ascii_alphanumeric() || self.marks.contains(&byte)
    }
}

/// RFC 3986's unreserved characters (letters, digits, `-`, `_`, `.`, `~`): a query value that
/// must read back exactly as it was (the admin tables' links, a Prometheus query).
pub const UNRESERVED: Alphabet = Alphabet { marks: b"-_.~" };

/// The unreserved characters and `/`: a path carried as a query value, still readable
/// (`/login?next=/s/abc/lab%3Fx%3D1`, from the sign-in page and the proxy).
pub const PATH: Alphabet = Alphabet { marks: b"-_.~/" };

/// `text` with every byte outside `alphabet` written as `%XX`.
pub fn percent_encode(text: &str, alphabet: Alphabet) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if alphabet.keeps(b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xF)]));
        }
    }
    out
}

/// A user's input as a message quotes it back: at most `SHOWN_CHARS` characters (then `…`),
/// control and bidirectional characters escaped, so an answer never echoes a long input or
/// reads as something it is not.
pub fn shown(input: &str) -> String {
    shown_up_to(input, SHOWN_CHARS)
}

/// [`shown`], keeping up to `chars` characters: for a parser's sentence that quotes an input.
pub fn shown_up_to(input: &str, chars: usize) -> String {
    let mut out = String::new();
    for (i, c) in input.chars().enumerate() {
        if i == chars {
            out.push('…');
            break;
        }
        let invisible = matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}');
        if c.is_control() || invisible {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// How much of an input [`shown`] keeps.
pub const SHOWN_CHARS: usize = 40;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_is_shown_short_and_plain() {
        assert_eq!(shown("emacs"), "emacs");
        let long = "x".repeat(70_000);
        assert_eq!(shown(&long).chars().count(), SHOWN_CHARS + 1);
        assert!(shown(&long).ends_with('…'));
        assert_eq!(shown("a\nb\u{202e}c"), "a\\u{a}b\\u{202e}c");
    }

    #[test]
    fn letters_digits_and_the_unreserved_marks_are_kept() {
        let kept = "AZaz09-_.~";
        assert_eq!(percent_encode(kept, UNRESERVED), kept);
        assert_eq!(percent_encode(kept, PATH), kept);
    }

    #[test]
    fn only_the_path_alphabet_keeps_slashes() {
        assert_eq!(percent_encode("/s/abc", UNRESERVED), "%2Fs%2Fabc");
        assert_eq!(percent_encode("/s/abc", PATH), "/s/abc");
    }

    #[test]
    fn every_other_byte_is_upper_case_hex_byte_by_byte() {
        assert_eq!(percent_encode("a&b c", UNRESERVED), "a%26b%20c");
        assert_eq!(percent_encode("é", UNRESERVED), "%C3%A9");
        assert_eq!(percent_encode("\n\u{7f}", PATH), "%0A%7F");
        assert_eq!(percent_encode("", PATH), "");
        // Every ASCII byte: kept exactly when the alphabet says so, else its two hex digits.
        for b in 0u8..128 {
            let text = char::from(b).to_string();
            for alphabet in [UNRESERVED, PATH] {
                let expected = if alphabet.keeps(b) {
                    text.clone()
                } else {
                    format!("%{b:02X}")
                };
                assert_eq!(percent_encode(&text, alphabet), expected, "{b}");
            }
        }
    }

    #[test]
    fn the_next_path_survives_the_round_trip() {
        assert_eq!(
            percent_encode("/s/abc/lab?x=1&y=2", PATH),
            "/s/abc/lab%3Fx%3D1%26y%3D2"
        );
    }

    #[test]
    fn a_prometheus_selector_is_one_query_value() {
        assert_eq!(
            percent_encode(r#"{__name__=~"hami_vgpu_memory_used_bytes|"#, UNRESERVED),
            "%7B__name__%3D~%22hami_vgpu_memory_used_bytes%7C"
        );
    }
}
