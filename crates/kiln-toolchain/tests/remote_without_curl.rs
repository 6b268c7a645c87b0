//! The remote cache's requests start no program: with a PATH that holds
//! nothing (no curl, as in the builder image), objects and records go up and
//! come back, the token reaches the server, and an answer longer than the
//! record or the object's size is a damaged miss, cut off, with nothing kept.
//! Its own test binary: it empties the process's PATH.

use std::{
    collections::HashMap,
    fs,
    io::{BufRead, BufReader, Read, Write},
    net::TcpListener,
    sync::{Arc, Mutex},
};

use kiln_toolchain::remote::{Config, Got, Remote, TOKEN_ENV};

type Store = Arc<Mutex<HashMap<String, Vec<u8>>>>;

/// A WebDAV-like store on 127.0.0.1: PUT keeps a body, GET returns it (404
/// otherwise); `/cas/long` answers with more bytes than any record names.
/// Records each request's `Authorization`.
fn serve(store: Store, auth: Arc<Mutex<Vec<String>>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/kiln", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut request, mut length) = (String::new(), 0usize);
            reader.read_line(&mut request).unwrap();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
                if lower.starts_with("authorization:") {
                    auth.lock().unwrap().push(line[14..].trim().to_string());
                }
            }
            let mut parts = request.split_whitespace();
            let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("/").to_string());
            let reply = |stream: &mut std::net::TcpStream, status: &str, body: &[u8]| {
                let _ = write!(stream, "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
                let _ = stream.write_all(body);
            };
            if method == "PUT" {
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                store.lock().unwrap().insert(path, body);
                reply(&mut stream, "201 Created", b"");
            } else if path.ends_with("/long") {
                reply(&mut stream, "200 OK", &vec![1u8; 10 << 20]);
            } else {
                match store.lock().unwrap().get(&path).cloned() {
                    Some(b) => reply(&mut stream, "200 OK", &b),
                    None => reply(&mut stream, "404 Not Found", b""),
                }
            }
        }
    });
    url
}

#[test]
fn the_remote_cache_needs_no_program_and_caps_what_it_reads() {
    let empty_path = tempfile::tempdir().unwrap();
    std::env::set_var("PATH", empty_path.path());
    let store: Store = Arc::default();
    let auth = Arc::new(Mutex::new(Vec::new()));
    let url = serve(store.clone(), auth.clone());
    let mut config = Config::new(&url).unwrap();
    config.set_token("kiln-test-token".into(), TOKEN_ENV).unwrap();
    let remote = Remote::new(config);

    let dir = tempfile::tempdir().unwrap();
    let object = dir.path().join("object");
    fs::write(&object, b"compiled bytes").unwrap();
    let sha = kiln_manifest::sha256_hex(b"compiled bytes");
    remote.put_cas(&sha, &object).unwrap();
    assert_eq!(store.lock().unwrap().get(&format!("/kiln/cas/{sha}")).map(Vec::as_slice), Some(&b"compiled bytes"[..]));

    let back = dir.path().join("back");
    assert_eq!(remote.get_cas(&sha, Some(14), &back).map(|sent| sent.sha256), Ok(sha.clone()));
    assert_eq!(fs::read(&back).unwrap(), b"compiled bytes");
    assert!(auth.lock().unwrap().iter().all(|a| a == "Bearer kiln-test-token") && auth.lock().unwrap().len() == 2, "{auth:?}");

    // Bytes beyond the record's size, or a record beyond the records' cap: damaged, cut off, nothing kept.
    let got = remote.get_cas(&sha, Some(10), &back);
    assert!(matches!(&got, Err(Got::Damaged(why)) if why.contains("more than the 10 bytes")), "{got:?}");
    assert!(!back.exists());
    let got = remote.get("cas/long", &back);
    assert!(matches!(&got, Got::Damaged(why) if why.contains("cas/long")), "{got:?}");
    assert!(!back.exists());
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "only the object written here is in the folder");
    assert_eq!(remote.get_cas(&kiln_manifest::sha256_hex(b"absent"), None, &back), Err(Got::NotFound));
    assert!(remote.usable() && remote.summary().contains("2 damaged"), "{}", remote.summary());
}
