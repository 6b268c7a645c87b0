//! A registry that answers with something other than HTTP URLs: a loopback
//! server whose `config.json` names `file:///proc/self/environ#` as its
//! upload API once made `publish --execute` print the whole environment (the
//! token and CI's secrets) in its error. Now the config is refused, and the
//! HTTP client itself takes no scheme but http(s).

use std::{
    io::{BufRead, BufReader, Write},
    net::TcpListener,
    thread,
};

use kiln_publish::{http, registry::Registry};

/// Serves `body` as JSON to every request on 127.0.0.1 until dropped with the process.
fn serve(body: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        for stream in listener.incoming().take(8) {
            let mut stream = stream.unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let reply =
                format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    format!("sparse+http://127.0.0.1:{port}/index/")
}

#[test]
fn a_registry_whose_api_is_a_local_file_is_refused_and_nothing_of_the_environment_is_read() {
    let index = serve(r#"{"dl":"http://127.0.0.1:1/dl","api":"file:///proc/self/environ#"}"#);
    let reg = Registry { name: "hostile".into(), index, index_from: "the test".into(), token: None, token_from: None };
    let e = format!("{:#}", reg.config().unwrap_err());
    assert!(e.contains("/index/config.json: `api` is \"file:///proc/self/environ#\", not an http:// or https:// URL"), "{e}");
}

#[test]
fn no_scheme_but_http_is_ever_requested() {
    // The last line of defence below the config check: a request for a
    // file:// URL fails in the client, and no byte of that file reaches the error.
    std::env::set_var("KILN_TEST_SECRET", "do-not-print-me");
    for url in ["file:///proc/self/environ#", "FILE:///proc/self/environ", "dict://127.0.0.1:1/"] {
        let e = format!("{:#}", http::put(url, b"crate", None).unwrap_err());
        assert!(!e.contains("do-not-print-me") && !e.contains("PATH="), "{url}: {e}");
        assert!(e.contains("not an http:// or https:// URL"), "the client names the refused scheme: {url}: {e}");
    }
}

#[test]
fn a_request_writes_nothing_through_links_planted_at_predictable_temp_names() {
    // Before, curl's files were /tmp/kiln-publish-<pid>-<n>-{response,body},
    // written with fs::write (now no file is written at all): a link planted there (by another user of /tmp)
    // had the upload written into whatever it pointed at.
    let index = serve(r#"{"dl":"http://127.0.0.1:1/dl"}"#);
    let victim = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(victim.path(), "the user's file").unwrap();
    let tmp = std::env::temp_dir();
    let mut planted = Vec::new();
    for n in 0..64 {
        for label in ["response", "body"] {
            let link = tmp.join(format!("kiln-publish-{}-{n}-{label}", std::process::id()));
            if std::os::unix::fs::symlink(victim.path(), &link).is_ok() {
                planted.push(link);
            }
        }
    }
    let url = format!("{}api/v1/crates/new", index.trim_start_matches("sparse+"));
    let r = http::put(&url, b"crate bytes", None);
    for link in &planted {
        std::fs::remove_file(link).ok();
    }
    let r = r.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(std::fs::read_to_string(victim.path()).unwrap(), "the user's file", "nothing was written through a planted link");
}

#[test]
fn an_index_line_that_is_not_an_entry_is_named_cut_and_escaped() {
    // A megabyte of garbage with a terminal escape in it: the error names the
    // URL and the line, and shows 200 characters of it, escaped.
    let body: &'static str = Box::leak(format!("\u{1b}]0;owned\u{7}{}\n", "x".repeat(1 << 20)).into_boxed_str());
    let index = serve(body);
    let reg = Registry { name: "hostile".into(), index, index_from: "the test".into(), token: None, token_from: None };
    let config = kiln_publish::registry::Config::parse("u", br#"{"dl":"http://127.0.0.1:1/dl","api":"http://127.0.0.1:1"}"#).unwrap();
    let e = format!("{:#}", reg.entries(&config, "kiln-x").unwrap_err());
    assert!(e.contains("/index/ki/ln/kiln-x: line 1 is not an index entry"), "{}", kiln_manifest::short(&e, 300));
    assert!(e.len() < 2000 && !e.contains('\u{1b}'), "{}", kiln_manifest::short(&e, 300));
}

/// Serves each of `files` (a path's end, its body) on 127.0.0.1; 404 for anything else.
fn serve_files(files: &'static [(&'static str, &'static str)]) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        for stream in listener.incoming().take(16) {
            let mut stream = stream.unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut first = String::new();
            reader.read_line(&mut first).unwrap();
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let path = first.split(' ').nth(1).unwrap_or_default().to_string();
            let reply = match files.iter().find(|(end, _)| path.ends_with(end)) {
                Some((_, body)) => format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()),
                None => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string(),
            };
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    format!("sparse+http://127.0.0.1:{port}/index/")
}

#[test]
fn what_a_registry_index_says_is_printed_escaped() {
    // An index line whose `vers` would clear the screen and retitle the terminal.
    let index = serve_files(&[
        ("/index/config.json", r#"{"dl":"http://127.0.0.1:1/dl"}"#),
        (
            "/index/1/c",
            "{\"name\":\"c\",\"vers\":\"0.1.0\\u001b[2J\\u001b]0;owned\\u0007\",\"deps\":[],\"cksum\":\"00\",\"features\":{},\"yanked\":false}\n",
        ),
    ]);
    let reg = Registry { name: "hostile".into(), index, index_from: "the test".into(), token: None, token_from: None };
    let e = format!("{:#}", reg.download("c", "9.9.9").unwrap_err());
    assert!(e.contains("its index lists: 0.1.0\\u{1b}[2J\\u{1b}]0;owned\\u{7}") && !e.contains('\x1b') && !e.contains('\x07'), "{e}");
}
