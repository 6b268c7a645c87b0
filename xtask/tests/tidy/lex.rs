//! Just enough of Rust's lexical structure for the tidy checks: comments and
//! `#[cfg(test)]` items blanked out, string literals listed with their lines.

/// A source file as the checks see it.
pub struct Source {
    /// The text with comments and `#[cfg(test)]` items replaced by spaces
    /// (newlines kept, so byte offsets and lines stay those of the file).
    pub code: String,
    /// Every string literal outside comments and test items: (line, contents).
    pub strings: Vec<(usize, String)>,
}

/// `text` lexed: see [`Source`].
pub fn lex(text: &str) -> Source {
    let (code, bare, spans) = blank_comments(text);
    let tests = test_items(&bare);
    let in_tests = |at: usize| tests.iter().any(|&(a, b)| (a..b).contains(&at));
    let mut out = code.into_bytes();
    for &(a, b) in &tests {
        for c in &mut out[a..b] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    }
    let line = |at: usize| text[..at].bytes().filter(|&b| b == b'\n').count() + 1;
    let strings = spans.into_iter().filter(|(a, _)| !in_tests(*a)).map(|(a, b)| (line(a), text[a..b].to_string())).collect();
    // Only ASCII spaces replaced whole characters' bytes: still UTF-8.
    Source { code: String::from_utf8(out).expect("blanking keeps UTF-8"), strings }
}

/// (text with comments blanked, the same with string contents blanked too,
/// the byte ranges of string contents).
fn blank_comments(text: &str) -> (String, String, Vec<(usize, usize)>) {
    let b = text.as_bytes();
    let mut code = b.to_vec();
    let mut bare = b.to_vec();
    let mut spans = Vec::new();
    let blank = |v: &mut Vec<u8>, a: usize, z: usize| v[a..z].iter_mut().filter(|c| **c != b'\n').for_each(|c| *c = b' ');
    let ident = |i: usize| i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            let end = text[i..].find('\n').map_or(b.len(), |n| i + n);
            blank(&mut code, i, end);
            blank(&mut bare, i, end);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let end = block_comment_end(b, i);
            blank(&mut code, i, end);
            blank(&mut bare, i, end);
            i = end;
        } else if let Some((open, close, after)) = raw_string(b, i).filter(|_| !ident(i) || (i > 0 && b[i - 1] == b'b' && !ident(i - 1))) {
            spans.push((open, close));
            blank(&mut bare, open, close);
            i = after;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            spans.push((i + 1, j.min(b.len())));
            blank(&mut bare, i + 1, j.min(b.len()));
            i = j + 1;
        } else if b[i] == b'\'' {
            match char_literal_end(text, i) {
                Some(end) => {
                    blank(&mut bare, i, end);
                    i = end;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    (String::from_utf8(code).expect("UTF-8"), String::from_utf8(bare).expect("UTF-8"), spans)
}

fn block_comment_end(b: &[u8], start: usize) -> usize {
    let (mut depth, mut i) = (0usize, start);
    while i < b.len() {
        if b[i..].starts_with(b"/*") {
            depth += 1;
            i += 2;
        } else if b[i..].starts_with(b"*/") {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    b.len()
}

/// `r"..."`, `r#"..."#` at `i`: the range of its contents, and where it ends.
fn raw_string(b: &[u8], i: usize) -> Option<(usize, usize, usize)> {
    if b[i] != b'r' {
        return None;
    }
    let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
    let open = i + 1 + hashes;
    if b.get(open) != Some(&b'"') {
        return None;
    }
    let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
    let end = b[open + 1..].windows(close.len()).position(|w| w == close.as_slice()).map_or(b.len(), |p| open + 1 + p);
    Some((open + 1, end, (end + close.len()).min(b.len())))
}

/// Where the char literal at `i` ends, or `None` for a lifetime (`'a`).
fn char_literal_end(text: &str, i: usize) -> Option<usize> {
    let rest = &text[i + 1..];
    if let Some(esc) = rest.strip_prefix('\\') {
        // The escaped character, then the closing quote.
        let c = esc.chars().next()?;
        return esc[c.len_utf8()..].find('\'').map(|n| i + 2 + c.len_utf8() + n + 1);
    }
    let c = rest.chars().next()?;
    rest[c.len_utf8()..].starts_with('\'').then(|| i + 1 + c.len_utf8() + 1)
}

/// The byte ranges of `#[cfg(test)]` items (a module or function with a
/// body) in `bare` (comments and strings already blanked).
fn test_items(bare: &str) -> Vec<(usize, usize)> {
    let b = bare.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(n) = bare[from..].find("#[cfg(test)]") {
        let start = from + n;
        let Some(open) = bare[start..].find(['{', ';']).map(|k| start + k) else { break };
        if b[open] == b';' {
            from = open;
            continue;
        }
        let mut depth = 0usize;
        let mut end = b.len();
        for (k, &c) in b.iter().enumerate().skip(open) {
            depth = match c {
                b'{' => depth + 1,
                b'}' => depth - 1,
                _ => depth,
            };
            if depth == 0 {
                end = k + 1;
                break;
            }
        }
        out.push((start, end));
        from = end;
    }
    out
}

#[test]
fn lexing_blanks_comments_and_test_items_and_lists_strings() {
    let text = "fn a() -> &'static str { \"x // y\" } // \"no\"\n/* \"no\" /* nested */ */ const C: char = '\"';\n\
                const R: &str = r#\"raw \" here\"#;\n#[cfg(test)]\nmod tests { fn t() { let s = \"hidden\"; } }\nconst D: &str = \"d\";\n";
    let s = lex(text);
    let strings: Vec<&str> = s.strings.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(strings, ["x // y", "raw \" here", "d"]);
    assert_eq!(s.strings.iter().map(|(l, _)| *l).collect::<Vec<_>>(), [1, 3, 6]);
    assert!(!s.code.contains("no") && !s.code.contains("nested") && !s.code.contains("hidden"), "{}", s.code);
    assert!(s.code.contains("const D") && s.code.contains("'static"), "{}", s.code);
    assert_eq!(s.code.len(), text.len());
}
