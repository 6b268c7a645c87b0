//! A sparse cargo registry served from a folder over HTTP/1.1 (std::net, a
//! thread per connection): **the tests' fixture** (a crate only
//! dev-dependencies name; no command starts it).
//! It offers what ferro-cargo-registry-server, the registry others maintain
//! that `cargo xtask registry serve` starts ([`kiln_publish::serve`]), does not, and
//! what a registry a team runs (crates.io, Kellnr, Artifactory) does: a token
//! checked on every upload (`403` otherwise), crates.io's size limit with its
//! error text, a version differing only in build metadata from one already
//! there refused, the metadata checked against the `Cargo.toml` in the crate,
//! and dependencies on this registry that do not exist (docs/registry.md).
//! Being kiln's own server, it answers hostile requests 413/400/431 before
//! anything is allocated.
//!
//! The folder holds `index/<cargo's index path>` (one JSON line per version)
//! and `crates/<name>/<name>-<version>.crate`; `config.json` is answered from
//! the bound address, so one folder can be served on any port.

use std::{
    collections::BTreeMap,
    fs,
    io::{BufRead, BufReader, Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    thread::JoinHandle,
    time::Duration,
};

use anyhow::{bail, Context, Result};

use kiln_publish::{
    metadata::{self, NewCrate},
    packaged::{self, Record},
    registry::{index_path, IndexDep, IndexEntry},
    UPLOAD_LIMIT,
};

#[derive(Clone, Debug)]
pub struct Options {
    /// Uploads must carry this token (`Authorization: <token>`); `None`
    /// accepts any.
    pub token: Option<String>,
    /// Largest `.crate` accepted.
    pub max_upload: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options { token: None, max_upload: UPLOAD_LIMIT }
    }
}

struct Shared {
    dir: PathBuf,
    addr: SocketAddr,
    options: Options,
    /// One upload at a time: an index file is read, checked and appended.
    publish: Mutex<()>,
}

/// A running registry; stops accepting connections when dropped.
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Serves `dir` (created if missing) on `bind`, e.g. `127.0.0.1:0` for
    /// any free port.
    pub fn start(dir: &Path, bind: &str, options: Options) -> Result<Server> {
        kiln_publish::serve::OWNER.claim_and_mark(dir, kiln_publish::serve::NAMES)?;
        fs::create_dir_all(dir.join("index")).with_context(|| format!("cannot create {}", dir.display()))?;
        fs::create_dir_all(dir.join("crates"))?;
        let listener = TcpListener::bind(bind).with_context(|| format!("cannot listen on {bind}"))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared { dir: dir.to_path_buf(), addr, options, publish: Mutex::new(()) });
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let shared = shared.clone();
                std::thread::spawn(move || {
                    let linger = stream.try_clone();
                    let _ = connection(stream, &shared);
                    if let Ok(linger) = linger {
                        lingering_close(linger);
                    }
                });
            }
        });
        Ok(Server { addr, stop, thread: Some(thread) })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What `[registries.NAME] index = ...` takes.
    pub fn index_url(&self) -> String {
        format!("sparse+http://{}/index/", self.addr)
    }

    /// Serves until the process ends.
    pub fn wait(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Reply {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
}

fn json_reply(status: u16, value: serde_json::Value) -> Reply {
    Reply { status, content_type: "application/json", body: value.to_string().into_bytes() }
}

/// The web API's error shape, which cargo prints.
fn error(status: u16, detail: impl Into<String>) -> Reply {
    json_reply(status, serde_json::json!({ "errors": [{ "detail": detail.into() }] }))
}

fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        411 => "Length Required",
        413 => "Payload Too Large",
        431 => "Request Header Fields Too Large",
        _ => "Error",
    }
}

fn send(stream: &mut TcpStream, reply: &Reply, close: bool) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: {}\r\n\r\n",
        reply.status,
        reason(reply.status),
        reply.content_type,
        reply.body.len(),
        if close { "close" } else { "keep-alive" }
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(&reply.body)?;
    stream.flush()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The longest request line or header line read, and the most headers.
const MAX_LINE: u64 = 8 << 10;
const MAX_HEADERS: usize = 100;
/// The largest body of a request other than an upload (none has one).
const MAX_OTHER_BODY: u64 = 64 << 10;

/// One line of at most [`MAX_LINE`] bytes into `line`: `Ok(false)` at the
/// end of the stream, `Ok(true)` with the line, an error for a longer one
/// (never buffered whole: whatever a client sends, the server keeps little).
fn read_line_capped(reader: &mut impl BufRead, line: &mut String) -> std::io::Result<bool> {
    line.clear();
    let n = reader.take(MAX_LINE).read_line(line)?;
    if n as u64 == MAX_LINE && !line.ends_with('\n') {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "request line or header too long"));
    }
    Ok(n > 0)
}

/// One connection: requests until the client closes it (cargo keeps
/// connections open across index fetches).
/// Closes a connection so that the client reads what it was answered: a
/// refused request (413, 431) leaves unread bytes, and closing a socket with
/// unread input sends a reset, which can discard the answer before the client
/// reads it. So: no more writes, then what the client still sends is read and
/// dropped, at most 16 MiB and 2 s, before the socket goes.
fn lingering_close(mut stream: TcpStream) {
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    let mut buf = [0u8; 64 * 1024];
    let mut left: usize = 16 << 20;
    while left > 0 && std::time::Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

fn connection(stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        if !read_line_capped(&mut reader, &mut line).or_else(|e| refuse_line(&mut writer, e))? {
            return Ok(());
        }
        if line.trim().is_empty() {
            continue;
        }
        let mut parts = line.split_whitespace();
        let (method, target, version) = (parts.next().unwrap_or(""), parts.next().unwrap_or("/"), parts.next().unwrap_or("HTTP/1.0"));
        let (method, target) = (method.to_string(), target.to_string());
        let mut headers = BTreeMap::new();
        let (mut h, mut lines) = (String::new(), 0);
        loop {
            if !read_line_capped(&mut reader, &mut h).or_else(|e| refuse_line(&mut writer, e))? {
                return Ok(());
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            lines += 1;
            if lines > MAX_HEADERS {
                send(&mut writer, &error(431, format!("more than {MAX_HEADERS} header lines")), true)?;
                return Ok(());
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let close = version == "HTTP/1.0" || headers.get("connection").is_some_and(|c| c.eq_ignore_ascii_case("close"));
        if headers.contains_key("transfer-encoding") {
            send(&mut writer, &error(411, "send a Content-Length"), true)?;
            return Ok(());
        }
        let length: u64 = match headers.get("content-length").map(|l| l.parse::<u64>()) {
            None => 0,
            Some(Ok(n)) => n,
            Some(Err(_)) => {
                send(&mut writer, &error(400, "Content-Length is not a number of bytes"), true)?;
                return Ok(());
            }
        };
        let path = percent_decode(target.split('?').next().unwrap_or("/"));
        // A claimed length is only a claim: checked against the route's limit
        // before anything is allocated for the body (an upload's below).
        let upload = method == "PUT" && path == "/api/v1/crates/new";
        if !upload && length > MAX_OTHER_BODY {
            send(&mut writer, &error(413, format!("a {method} to {path} carries no body of {length} bytes")), true)?;
            return Ok(());
        }

        if upload {
            let expects_continue = headers.get("expect").is_some_and(|e| e.eq_ignore_ascii_case("100-continue"));
            let refusal = match &shared.options.token {
                Some(t) if headers.get("authorization") != Some(t) => Some(error(403, "this registry needs a valid token (Authorization header)")),
                _ if length > shared.options.max_upload + (1 << 20) => Some(error(413, format!("max upload size is: {}", shared.options.max_upload))),
                _ => None,
            };
            if let Some(reply) = refusal {
                // A client waiting for `100 Continue` (curl, for large
                // uploads) never sends the body; one that sends it anyway has
                // it read first, so that it sees the answer rather than a reset.
                if !expects_continue {
                    std::io::copy(&mut (&mut reader).take(length.min(64 << 20)), &mut std::io::sink())?;
                }
                send(&mut writer, &reply, true)?;
                return Ok(());
            }
            if expects_continue {
                writer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
            }
        }
        let mut body = vec![0; length as usize];
        reader.read_exact(&mut body)?;
        let reply = match (method.as_str(), path.as_str()) {
            ("GET", "/index/config.json") => json_reply(
                200,
                serde_json::json!({
                    "dl": format!("http://{}/api/v1/crates", shared.addr),
                    "api": format!("http://{}", shared.addr),
                }),
            ),
            ("GET", p) if p.starts_with("/index/") => file(&shared.dir.join("index"), &p["/index/".len()..], "text/plain"),
            ("GET", p) if p.starts_with("/api/v1/crates/") && p.ends_with("/download") => {
                let rest: Vec<&str> = p["/api/v1/crates/".len()..].split('/').collect();
                match rest.as_slice() {
                    [name, vers, "download"] => file(&shared.dir.join("crates"), &format!("{name}/{name}-{vers}.crate"), "application/gzip"),
                    _ => error(404, "no such crate file"),
                }
            }
            ("PUT", "/api/v1/crates/new") => match publish(shared, &body) {
                Ok(()) => json_reply(200, serde_json::json!({ "warnings": { "invalid_categories": [], "invalid_badges": [], "other": [] } })),
                Err((status, detail)) => error(status, detail),
            },
            ("GET" | "PUT", _) => error(404, format!("nothing at {path}")),
            _ => error(405, format!("{method} is not served here")),
        };
        send(&mut writer, &reply, close)?;
        if close {
            return Ok(());
        }
    }
}

/// Answers a request or header line over [`MAX_LINE`] with 431 and ends the
/// connection; any other read error ends it too.
fn refuse_line(writer: &mut TcpStream, e: std::io::Error) -> std::io::Result<bool> {
    if e.kind() == std::io::ErrorKind::InvalidData {
        send(writer, &error(431, format!("a request or header line over {MAX_LINE} bytes")), true)?;
        return Ok(false);
    }
    Err(e)
}

/// A file under `root`; no `..`, no absolute paths.
fn file(root: &Path, rel: &str, content_type: &'static str) -> Reply {
    let Ok(path) = kiln_manifest::path_inside(root, rel) else {
        return error(404, "no such file");
    };
    match fs::read(path) {
        Ok(body) => Reply { status: 200, content_type, body },
        Err(_) => error(404, "no such file"),
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic()) && chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') && name.len() <= 64
}

/// Checks one upload and adds it: `Err((status, detail))` otherwise.
fn publish(shared: &Shared, body: &[u8]) -> std::result::Result<(), (u16, String)> {
    let bad = |e: anyhow::Error| (400, format!("{e:#}"));
    let (meta, krate) = metadata::decode(body).map_err(bad)?;
    if krate.len() as u64 > shared.options.max_upload {
        return Err((413, format!("max upload size is: {}", shared.options.max_upload)));
    }
    check_metadata(&meta, krate).map_err(bad)?;
    let _guard = shared.publish.lock().unwrap_or_else(|p| p.into_inner());
    let index_file = shared.dir.join("index").join(index_path(&meta.name));
    let existing = read_index(&index_file).map_err(|e| (500, format!("{e:#}")))?;
    let vers = semver::Version::parse(&meta.vers).map_err(|e| (400, format!("version {}: {e}", meta.vers)))?;
    for e in &existing {
        if let Ok(v) = semver::Version::parse(&e.vers) {
            if (v.major, v.minor, v.patch, &v.pre) == (vers.major, vers.minor, vers.patch, &vers.pre) {
                // crates.io's words, with the version that is already there.
                return Err((400, format!("crate version `{}` is already uploaded (as {} {})", meta.vers, e.name, e.vers)));
            }
        }
    }
    // A dependency on this registry must be here already (crates.io checks
    // the same): it is what makes the upload order matter.
    for d in meta.deps.iter().filter(|d| d.registry.is_none()) {
        let have = read_index(&shared.dir.join("index").join(index_path(&d.name))).map_err(|e| (500, format!("{e:#}")))?;
        let req = semver::VersionReq::parse(&d.version_req).map_err(|e| (400, format!("{}: {e}", d.name)))?;
        if !have.iter().any(|e| semver::Version::parse(&e.vers).is_ok_and(|v| req.matches(&v))) {
            return Err((400, format!("no version of `{}` matching `{}` is in this registry (publish it first)", d.name, d.version_req)));
        }
    }
    let entry = index_entry(&meta, krate);
    let dir = shared.dir.join("crates").join(&meta.name);
    let write = || -> Result<()> {
        fs::create_dir_all(&dir)?;
        let dest = dir.join(format!("{}-{}.crate", meta.name, meta.vers));
        let tmp = dest.with_extension("crate.part");
        fs::write(&tmp, krate)?;
        fs::rename(&tmp, &dest)?;
        fs::create_dir_all(index_file.parent().unwrap())?;
        let mut f = fs::OpenOptions::new().create(true).append(true).open(&index_file)?;
        writeln!(f, "{}", serde_json::to_string(&entry)?)?;
        Ok(())
    };
    write().map_err(|e| (500, format!("cannot store the crate: {e:#}")))
}

fn read_index(path: &Path) -> Result<Vec<IndexEntry>> {
    match fs::read_to_string(path) {
        Ok(t) => t.lines().filter(|l| !l.is_empty()).map(|l| Ok(serde_json::from_str(l)?)).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

fn check_metadata(meta: &NewCrate, krate: &[u8]) -> Result<()> {
    if !valid_name(&meta.name) {
        bail!("`{}` is not a valid crate name", meta.name);
    }
    semver::Version::parse(&meta.vers).with_context(|| format!("`{}` is not a version", meta.vers))?;
    let mut missing = Vec::new();
    if meta.description.as_deref().is_none_or(|d| d.trim().is_empty()) {
        missing.push("description");
    }
    if meta.license.is_none() && meta.license_file.is_none() {
        missing.push("license");
    }
    if !missing.is_empty() {
        bail!("missing or empty metadata fields: {}", missing.join(", "));
    }
    for d in &meta.deps {
        semver::VersionReq::parse(&d.version_req).with_context(|| format!("dependency {}: `{}` is not a requirement", d.name, d.version_req))?;
    }
    let record = Record {
        name: meta.name.clone(),
        version: meta.vers.clone(),
        file: String::new(),
        size: 0,
        sha256: String::new(),
        raw_bytes: 0,
        payload_bytes: 0,
    };
    packaged::read_package(&record, krate).context("the .crate does not match the metadata")?;
    Ok(())
}

/// The index line for an upload: cargo's index format, as crates.io writes it.
pub fn index_entry(meta: &NewCrate, krate: &[u8]) -> IndexEntry {
    let deps = meta
        .deps
        .iter()
        .map(|d| IndexDep {
            name: d.explicit_name_in_toml.clone().unwrap_or_else(|| d.name.clone()),
            package: d.explicit_name_in_toml.as_ref().map(|_| d.name.clone()),
            req: d.version_req.clone(),
            features: d.features.clone(),
            optional: d.optional,
            default_features: d.default_features,
            target: d.target.clone(),
            kind: Some(d.kind.clone()),
            registry: d.registry.clone(),
        })
        .collect();
    // Features using `dep:` or `?/` go to `features2` (v2), which cargo
    // older than 1.60 skips instead of misreading.
    let (mut features, mut features2) = (BTreeMap::new(), BTreeMap::new());
    for (k, v) in &meta.features {
        let new_syntax = v.iter().any(|f| f.starts_with("dep:") || f.contains("?/"));
        if new_syntax { &mut features2 } else { &mut features }.insert(k.clone(), v.clone());
    }
    IndexEntry {
        name: meta.name.clone(),
        vers: meta.vers.clone(),
        deps,
        cksum: packaged::sha256_hex(krate),
        v: if features2.is_empty() { 1 } else { 2 },
        features,
        features2,
        yanked: false,
        links: meta.links.clone(),
        rust_version: meta.rust_version.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding_keeps_plus() {
        assert_eq!(percent_decode("/a/0.11.1+kiln.1/download"), "/a/0.11.1+kiln.1/download");
        assert_eq!(percent_decode("/a/0.11.1%2Bkiln.1"), "/a/0.11.1+kiln.1");
        assert_eq!(percent_decode("/a%"), "/a%");
        assert_eq!(percent_decode("/a%2"), "/a%2");
    }

    #[test]
    fn names() {
        assert!(valid_name("kiln-candle-kernels-sm80"));
        assert!(!valid_name("9lives") && !valid_name("a/b") && !valid_name(""));
    }

    /// What the server answers to `request` (sent whole), up to its first line.
    fn ask(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(request).unwrap();
        let mut answer = String::new();
        BufReader::new(s).read_line(&mut answer).unwrap();
        answer
    }

    #[test]
    fn a_claimed_length_is_checked_before_anything_is_allocated() {
        let dir = std::env::temp_dir().join(format!("kiln-registry-limits-{}", std::process::id()));
        fs::remove_dir_all(&dir).ok();
        let server = Server::start(&dir, "127.0.0.1:0", Options::default()).unwrap();
        let addr = server.addr();
        // A terabyte claimed, none sent (before: `vec![0; length]`, and the process died).
        let huge = 1u64 << 40;
        let a = ask(addr, format!("GET /index/config.json HTTP/1.1\r\nContent-Length: {huge}\r\n\r\n").as_bytes());
        assert!(a.starts_with("HTTP/1.1 413 "), "{a}");
        let a = ask(addr, format!("PUT /api/v1/crates/new HTTP/1.1\r\nContent-Length: {huge}\r\nExpect: 100-continue\r\n\r\n").as_bytes());
        assert!(a.starts_with("HTTP/1.1 413 "), "{a}");
        let a = ask(addr, b"GET /index/config.json HTTP/1.1\r\nContent-Length: -1\r\n\r\n");
        assert!(a.starts_with("HTTP/1.1 400 "), "{a}");
        // A header line, or a header count, without end: refused, not buffered.
        let long = format!("GET /index/config.json HTTP/1.1\r\nX-Long: {}\r\n\r\n", "a".repeat(1 << 20));
        assert!(ask(addr, long.as_bytes()).starts_with("HTTP/1.1 431 "));
        let many = format!("GET /index/config.json HTTP/1.1\r\n{}\r\n", "X: y\r\n".repeat(MAX_HEADERS + 1));
        assert!(ask(addr, many.as_bytes()).starts_with("HTTP/1.1 431 "));
        // And it still serves.
        let a = ask(addr, b"GET /index/config.json HTTP/1.1\r\nConnection: close\r\n\r\n");
        assert!(a.starts_with("HTTP/1.1 200 "), "{a}");
        drop(server);
        fs::remove_dir_all(&dir).ok();
    }
}
