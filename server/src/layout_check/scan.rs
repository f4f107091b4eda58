//! Rust source read as tokens, for the layout test's function gate: comments, strings and
//! character literals blanked out, then each function's length found by matching braces. No
//! parser: enough for the code here, and its test says what it sees.

/// `text` with its comments, strings and character literals blanked out (line breaks kept),
/// so that braces and keywords can be read by position.
fn blank_out(text: &str) -> Vec<char> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = chars.clone();
    let blank = |out: &mut Vec<char>, from: usize, to: usize| {
        for c in &mut out[from..to.min(chars.len())] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < chars.len() {
        let next = chars.get(i + 1).copied();
        match chars[i] {
            '/' if next == Some('/') => {
                let end = chars[i..]
                    .iter()
                    .position(|&c| c == '\n')
                    .map_or(chars.len(), |n| i + n);
                blank(&mut out, i, end);
                i = end;
            }
            '/' if next == Some('*') => {
                let (mut depth, mut j) = (1, i + 2);
                while j < chars.len() && depth > 0 {
                    if chars[j] == '/' && chars.get(j + 1) == Some(&'*') {
                        depth += 1;
                        j += 1;
                    } else if chars[j] == '*' && chars.get(j + 1) == Some(&'/') {
                        depth -= 1;
                        j += 1;
                    }
                    j += 1;
                }
                blank(&mut out, i, j);
                i = j;
            }
            '"' => {
                let mut j = i + 1;
                while j < chars.len() && chars[j] != '"' {
                    j += if chars[j] == '\\' { 2 } else { 1 };
                }
                blank(&mut out, i + 1, j);
                i = j + 1;
            }
            // A raw string: `r"…"`, `r#"…"#` (after `b` or `c` too), not a name ending in r.
            'r' if !chars[..i]
                .iter()
                .rev()
                .take_while(|&&c| ident(c))
                .any(|&c| c != 'b' && c != 'c')
                && chars[i + 1..]
                    .iter()
                    .find(|&&c| c != '#')
                    .is_some_and(|&c| c == '"') =>
            {
                let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
                let body = i + 2 + hashes;
                let mut j = body;
                while j < chars.len()
                    && !(chars[j] == '"'
                        && chars[j + 1..]
                            .iter()
                            .take(hashes)
                            .filter(|&&c| c == '#')
                            .count()
                            == hashes)
                {
                    j += 1;
                }
                blank(&mut out, body, j);
                i = j + 1 + hashes;
            }
            // `'x'` and `'\n'` are characters; `'a` alone is a lifetime.
            '\'' if next == Some('\\') => {
                let end = chars[i + 3..]
                    .iter()
                    .position(|&c| c == '\'')
                    .map_or(chars.len(), |n| i + 3 + n);
                blank(&mut out, i + 1, end);
                i = end + 1;
            }
            '\'' if chars.get(i + 2) == Some(&'\'') => {
                blank(&mut out, i + 1, i + 2);
                i += 3;
            }
            _ => i += 1,
        }
    }
    out
}

/// A word or a punctuation mark of blanked source, with its line (from 1).
#[derive(Debug, PartialEq)]
enum Token {
    Word(String, usize),
    Mark(char, usize),
}

impl Token {
    fn line(&self) -> usize {
        match self {
            Token::Word(_, line) | Token::Mark(_, line) => *line,
        }
    }
    fn is(&self, word: &str) -> bool {
        matches!(self, Token::Word(w, _) if w == word)
    }
    fn is_mark(&self, mark: char) -> bool {
        matches!(self, Token::Mark(m, _) if *m == mark)
    }
}

fn tokens(text: &str) -> Vec<Token> {
    let chars = blank_out(text);
    let mut found = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            found.push(Token::Word(chars[start..i].iter().collect(), line));
        } else {
            found.push(Token::Mark(c, line));
            i += 1;
        }
    }
    found
}

/// Where the signature or header starting at `from` ends: the index of the first `{` or `;`
/// outside parentheses and square brackets.
fn signature_end(tokens: &[Token], from: usize) -> usize {
    let mut depth = 0usize;
    for (i, token) in tokens.iter().enumerate().skip(from) {
        match token {
            Token::Mark('(' | '[', _) => depth += 1,
            Token::Mark(')' | ']', _) => depth = depth.saturating_sub(1),
            Token::Mark('{' | ';', _) if depth == 0 => return i,
            _ => {}
        }
    }
    tokens.len()
}

/// The index just past the item starting at `from`: past its first `;` outside brackets, or
/// past the `}` closing its first `{` outside parentheses and square brackets.
fn item_end(tokens: &[Token], from: usize) -> usize {
    let mut depth = 0usize;
    let mut braces = 0usize;
    for (i, token) in tokens.iter().enumerate().skip(from) {
        let Token::Mark(mark, _) = token else {
            continue;
        };
        match mark {
            '(' | '[' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            '{' => braces += 1,
            '}' => {
                braces = braces.saturating_sub(1);
                if braces == 0 && depth == 0 {
                    return i + 1;
                }
            }
            ';' if depth == 0 && braces == 0 => return i + 1,
            _ => {}
        }
    }
    tokens.len()
}

/// The type an `impl` header (the tokens between `impl` and `{`) is for: `Foo` in
/// `impl<T> Trait for Foo<T> where …`.
fn impl_type(header: &[Token]) -> String {
    let mut angle = 0i32;
    let mut name = String::new();
    let mut after = 0;
    // Past the impl's own generics.
    if header.first().is_some_and(|t| t.is_mark('<')) {
        for (i, token) in header.iter().enumerate() {
            match token {
                Token::Mark('<', _) => angle += 1,
                Token::Mark('>', _) if !(i > 0 && header[i - 1].is_mark('-')) => angle -= 1,
                _ => {}
            }
            if angle == 0 {
                after = i + 1;
                break;
            }
        }
    }
    let header = &header[after..];
    let start = header
        .iter()
        .rposition(|t| t.is("for"))
        .map_or(0, |i| i + 1);
    angle = 0;
    for (i, token) in header.iter().enumerate().skip(start) {
        match token {
            Token::Word(w, _) if w == "where" && angle == 0 => break,
            Token::Word(w, _) if angle == 0 => name = w.clone(),
            Token::Mark('<', _) => angle += 1,
            Token::Mark('>', _) if !(i > 0 && header[i - 1].is_mark('-')) => angle -= 1,
            _ => {}
        }
    }
    name
}

/// Every function with a body in `tokens[from..to]`: its name (`Type::name` in an impl or a
/// trait) and its lines, from `fn` to the closing brace; items under `#[cfg(test)]` left out.
fn functions_in(
    tokens: &[Token],
    from: usize,
    to: usize,
    scope: &str,
    out: &mut Vec<(String, usize)>,
) {
    let mut i = from;
    while i < to {
        let token = &tokens[i];
        // `#[cfg(test)]`: the item after it is left out.
        if token.is_mark('#') && tokens.get(i + 1).is_some_and(|t| t.is_mark('[')) {
            let close = (i..to).find(|&j| tokens[j].is_mark(']')).unwrap_or(to);
            let words: Vec<&Token> = tokens[i + 2..close].iter().collect();
            let is_test = words.len() == 4
                && words[0].is("cfg")
                && words[1].is_mark('(')
                && words[2].is("test")
                && words[3].is_mark(')');
            i = if is_test {
                item_end(tokens, close + 1)
            } else {
                close + 1
            };
            continue;
        }
        if token.is("fn") && matches!(tokens.get(i + 1), Some(Token::Word(..))) {
            let Token::Word(name, _) = &tokens[i + 1] else {
                unreachable!()
            };
            let open = signature_end(tokens, i);
            if open < to && tokens[open].is_mark('{') {
                let end = item_end(tokens, open);
                let lines = tokens[end - 1].line() - token.line() + 1;
                let name = if scope.is_empty() {
                    name.clone()
                } else {
                    format!("{scope}::{name}")
                };
                out.push((name.clone(), lines));
                functions_in(tokens, open + 1, end - 1, &name, out);
                i = end;
            } else {
                i = open + 1;
            }
            continue;
        }
        if (token.is("impl") || token.is("trait")) && i + 1 < to {
            let open = signature_end(tokens, i + 1);
            if open < to && tokens[open].is_mark('{') {
                let inner = if token.is("impl") {
                    impl_type(&tokens[i + 1..open])
                } else {
                    match &tokens[i + 1] {
                        Token::Word(name, _) => name.clone(),
                        _ => String::new(),
                    }
                };
                let end = item_end(tokens, open);
                functions_in(tokens, open + 1, end - 1, &inner, out);
                i = end;
                continue;
            }
        }
        i += 1;
    }
}

/// The functions of a source file with their lengths.
pub(super) fn functions(text: &str) -> Vec<(String, usize)> {
    let tokens = tokens(text);
    let mut out = Vec::new();
    functions_in(&tokens, 0, tokens.len(), "", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_sees_functions_through_comments_strings_and_tests() {
        let source = r##"// fn not_a_function() {
/* a block comment with fn inside /* nested */ fn still_not() { */
const BRACES: &str = "}}} fn in_a_string() {";
const RAW: &str = r#"{ "fn": "}" }"#;
pub struct Holder<'a>(&'a str);

impl<'a, T: Fn() -> u8> std::fmt::Display for Holder<'a> where T: Clone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let open = '{';
        let quote = '\'';
        write!(f, "{open}{quote}")
    }
}

trait Speak {
    fn name(&self) -> String;
    fn speak(&self) -> String {
        self.name()
    }
}

fn outer(callback: fn(u8) -> u8) -> u8 {
    fn inner() -> u8 {
        1
    }
    callback(inner())
}

#[cfg(test)]
mod tests {
    fn a_test_helper() {}
}

#[cfg(test)]
fn a_test_function() {}
"##;
        assert_eq!(
            functions(source),
            [
                ("Holder::fmt".to_string(), 5),
                ("Speak::speak".to_string(), 3),
                ("outer".to_string(), 6),
                ("outer::inner".to_string(), 3),
            ]
        );
    }
}
