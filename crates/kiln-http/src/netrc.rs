//! A netrc file's login for a host, read the way curl reads it: tokens
//! separated by white space, `"quoted"` with `\` escapes or not; `machine
//! NAME` then `login`/`password` (and `account`, ignored); `default` for any
//! other host; `macdef NAME` skipped to the next empty line. The first
//! `machine` entry naming the host wins, else `default`.

use std::{fs, io, path::Path};

/// A login and password from a netrc file. Debug shows neither.
#[derive(Clone, PartialEq, Eq)]
pub struct Login {
    pub login: String,
    pub password: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Login(not shown)")
    }
}

/// The login `file` gives for `host` (no port), if any.
pub fn login_for(file: &Path, host: &str) -> io::Result<Option<Login>> {
    let text = fs::read_to_string(file)?;
    Ok(parse(&text, host))
}

/// The login `text` (a netrc file) gives for `host`.
pub fn parse(text: &str, host: &str) -> Option<Login> {
    let tokens = tokens(text);
    let mut i = 0;
    // (is this entry for the host, login, password)
    let mut current: Option<(bool, Option<String>, Option<String>)> = None;
    let mut default: Option<Login> = None;
    let finish = |entry: Option<(bool, Option<String>, Option<String>)>, default: &mut Option<Login>, is_default: bool| -> Option<Login> {
        let (matches, login, password) = entry?;
        let l = Login { login: login.unwrap_or_default(), password: password.unwrap_or_default() };
        if matches {
            return Some(l);
        }
        if is_default && default.is_none() {
            *default = Some(l);
        }
        None
    };
    let mut entry_is_default = false;
    while i < tokens.len() {
        let t = tokens[i].as_str();
        let value = tokens.get(i + 1).cloned();
        match t {
            "machine" | "default" => {
                if let Some(l) = finish(current.take(), &mut default, entry_is_default) {
                    return Some(l);
                }
                entry_is_default = t == "default";
                let matches = t == "machine" && value.as_deref().is_some_and(|m| m.eq_ignore_ascii_case(host));
                current = Some((matches, None, None));
                i += if t == "machine" { 2 } else { 1 };
            }
            "login" | "password" | "account" => {
                if let (Some(entry), Some(v)) = (current.as_mut(), value) {
                    match t {
                        "login" => entry.1 = Some(v),
                        "password" => entry.2 = Some(v),
                        _ => {}
                    }
                }
                i += 2;
            }
            "macdef" => {
                // Handled by the tokenizer (the macro's body is not tokens); its name follows.
                i += 2;
            }
            _ => i += 1,
        }
    }
    finish(current, &mut default, entry_is_default).or(default)
}

/// The file's tokens, quotes undone, macro bodies left out.
fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_macro = false;
    for line in text.lines() {
        if in_macro {
            if line.trim().is_empty() {
                in_macro = false;
            }
            continue;
        }
        let mut chars = line.chars().peekable();
        loop {
            while chars.peek().is_some_and(|c| c.is_whitespace()) {
                chars.next();
            }
            let Some(&first) = chars.peek() else { break };
            let mut token = String::new();
            if first == '#' && out.last().is_none_or(|l: &String| l != "password" && l != "login") {
                break; // a comment to the end of the line
            }
            if first == '"' {
                chars.next();
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => match chars.next() {
                            Some('n') => token.push('\n'),
                            Some('r') => token.push('\r'),
                            Some('t') => token.push('\t'),
                            Some(other) => token.push(other),
                            None => {}
                        },
                        c => token.push(c),
                    }
                }
            } else {
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() {
                        break;
                    }
                    token.push(c);
                    chars.next();
                }
            }
            out.push(token);
        }
        // `macdef NAME` on this line: the following lines up to an empty one are its body.
        if out.len() >= 2 && out[out.len() - 2] == "macdef" && line.split_whitespace().next() == Some("macdef") {
            in_macro = true;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(login: &str, password: &str) -> Option<Login> {
        Some(Login { login: login.into(), password: password.into() })
    }

    #[test]
    fn machines_default_quotes_and_macros() {
        let text = "# a comment\nmachine other.example login o password op\n\
                    macdef init\ncd /\nmachine cache.example login evil password evil\n\n\
                    machine Cache.Example\n  login \"kiln user\" password \"p\\\"w#d\"\n\
                    default login anon password guest\n";
        assert_eq!(parse(text, "cache.example"), l("kiln user", "p\"w#d"));
        assert_eq!(parse(text, "other.example"), l("o", "op"));
        assert_eq!(parse(text, "unknown.example"), l("anon", "guest"));
        assert_eq!(parse("machine a login x password y", "b"), None);
        // One line, no newline, password with a hash.
        assert_eq!(parse("machine h login u password p#1", "h"), l("u", "p#1"));
        // `default` first does not hide a later machine.
        assert_eq!(parse("default login d password d\nmachine h login u password p", "h"), l("u", "p"));
        assert!(!format!("{:?}", l("u", "secret")).contains("secret"));
    }
}
