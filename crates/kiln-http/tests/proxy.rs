//! Proxies and TLS roots from the environment, as curl reads them: a
//! loopback proxy records the request line it is sent. One test in its own binary: it sets
//! the process's environment before the client reads it.

mod common;

use std::io::{BufRead, BufReader, Read, Write};

use common::{options, reply, serve};
use kiln_http::{Client, Extra, Kind};

#[test]
fn proxy_and_tls_variables_are_honoured_and_no_proxy_bypasses_them() {
    let tunnelled: common::Seen = Default::default();
    let log = tunnelled.clone();
    let (proxy, proxy_seen) = serve(move |head, s| {
        if head.starts_with("CONNECT kiln-proxy-test.invalid:80 ") {
            // The tunnel opened, the proxy then plays the server behind it.
            let _ = s.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
            let mut reader = BufReader::new(s.try_clone().unwrap());
            let mut inner = String::new();
            while reader.read_line(&mut inner).is_ok_and(|n| n > 2) {}
            log.lock().unwrap().push(inner);
            reply(s, "200 OK", "", b"via the proxy");
        } else {
            // Anything else (the HTTPS tunnel) refused: the client must still have asked for it.
            reply(s, "403 Forbidden", "", b"");
        }
    });
    let (direct, direct_seen) = serve(|_, s| reply(s, "200 OK", "", b"direct"));
    std::env::set_var("http_proxy", &proxy);
    std::env::set_var("HTTPS_PROXY", proxy.trim_start_matches("http://"));
    std::env::set_var("NO_PROXY", "localhost,.bypass.example,127.0.0.1");
    let client = Client::new(options());

    // http: through http_proxy, in a CONNECT tunnel (ureq's way for every target).
    let r = client.get_small("http://kiln-proxy-test.invalid/pkg.deb", 100, &Extra::default()).unwrap();
    assert_eq!(r.body, b"via the proxy");
    let seen = proxy_seen.lock().unwrap().clone();
    assert!(seen[0].starts_with("CONNECT kiln-proxy-test.invalid:80 HTTP/1.1\r\n"), "{seen:?}");
    let inner = tunnelled.lock().unwrap().clone();
    assert!(inner[0].starts_with("GET /pkg.deb HTTP/1.1\r\n"), "{inner:?}");

    // https: a CONNECT tunnel through HTTPS_PROXY (scheme-less, as curl takes it).
    let e = client.get_small("https://kiln-proxy-test.invalid/index", 100, &Extra::default()).unwrap_err();
    let seen = proxy_seen.lock().unwrap().clone();
    assert!(seen.iter().any(|h| h.starts_with("CONNECT kiln-proxy-test.invalid:443 ")), "{seen:?}");
    assert!(e.to_string().starts_with("https://kiln-proxy-test.invalid/index"), "{e}");

    // NO_PROXY: straight to the server.
    let r = client.get_small(&format!("{direct}/x"), 100, &Extra::default()).unwrap();
    assert_eq!(r.body, b"direct");
    assert_eq!(direct_seen.lock().unwrap().len(), 1);
    assert_eq!(proxy_seen.lock().unwrap().len(), 2, "the NO_PROXY host did not go through the proxy");

    // ALL_PROXY, a SOCKS5 proxy resolving the name itself (socks5h), as curl takes it.
    let socks_seen = socks5h();
    std::env::set_var("ALL_PROXY", format!("socks5h://127.0.0.1:{}", socks_seen.1));
    std::env::remove_var("http_proxy");
    let client = Client::new(options());
    let r = client.get_small("http://kiln-socks-test.invalid/file", 100, &Extra::default()).unwrap();
    assert_eq!(r.body, b"via socks");
    assert_eq!(socks_seen.0.lock().unwrap().clone(), ["kiln-socks-test.invalid:80 GET /file HTTP/1.1"]);

    // A proxy of a scheme kiln does not speak: an error of each request, the variable named, its value not shown.
    std::env::set_var("ALL_PROXY", "gopher://user:pw-secret@127.0.0.1:1080");
    let client = Client::new(options());
    let e = client.get_small("http://kiln-proxy-test.invalid/x", 10, &Extra::default()).unwrap_err();
    assert!(matches!(e.kind, Kind::Proxy(_)) && e.to_string().contains("ALL_PROXY") && !e.to_string().contains("pw-secret"), "{e}");

    // TLS roots named by the environment (curl's CURL_CA_BUNDLE, then SSL_CERT_FILE): one that is no
    // bundle is an error naming the variable, never a quiet fallback to other roots.
    std::env::remove_var("ALL_PROXY");
    let bundle = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(bundle.path(), "not a certificate").unwrap();
    std::env::set_var("CURL_CA_BUNDLE", bundle.path());
    let e = Client::new(options()).get_small("https://kiln-proxy-test.invalid/x", 10, &Extra::default()).unwrap_err();
    assert!(e.to_string().contains("CURL_CA_BUNDLE names") && e.to_string().contains("no PEM certificate"), "{e}");
    std::env::remove_var("CURL_CA_BUNDLE");
    std::env::set_var("SSL_CERT_FILE", "/nonexistent/kiln-test-bundle.pem");
    let e = Client::new(options()).get_small("https://kiln-proxy-test.invalid/x", 10, &Extra::default()).unwrap_err();
    assert!(e.to_string().contains("SSL_CERT_FILE names /nonexistent/kiln-test-bundle.pem, which cannot be read"), "{e}");
}

/// A SOCKS5 proxy (no authentication) on 127.0.0.1 that records the target
/// and the request line it carries, then answers as the server: its log and port.
fn socks5h() -> (common::Seen, u16) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: common::Seen = Default::default();
    let log = seen.clone();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let mut greeting = [0u8; 3];
            s.read_exact(&mut greeting).unwrap();
            assert_eq!(greeting, [5, 1, 0], "no authentication offered");
            s.write_all(&[5, 0]).unwrap();
            let mut head = [0u8; 5];
            s.read_exact(&mut head).unwrap();
            assert_eq!(&head[..4], &[5, 1, 0, 3], "CONNECT to a name (socks5h)");
            let mut name = vec![0u8; head[4] as usize + 2];
            s.read_exact(&mut name).unwrap();
            let port = u16::from_be_bytes([name[name.len() - 2], name[name.len() - 1]]);
            let host = String::from_utf8_lossy(&name[..name.len() - 2]).into_owned();
            s.write_all(&[5, 0, 0, 1, 0, 0, 0, 0, 0, 0]).unwrap();
            let mut reader = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let mut rest = String::new();
            while reader.read_line(&mut rest).is_ok_and(|n| n > 2) {
                rest.clear();
            }
            log.lock().unwrap().push(format!("{host}:{port} {}", line.trim_end()));
            reply(&mut s, "200 OK", "", b"via socks");
        }
    });
    (seen, port)
}
