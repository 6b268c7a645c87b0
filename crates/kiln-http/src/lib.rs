//! kiln's one HTTP client (ureq, rustls; docs/http.md says why): every
//! download, upload and remote-cache request goes through [`Client`].
//!
//! - `http://` and `https://` only; a URL with `user:password@` is refused.
//! - No redirects, but where the caller checks the bytes against a pin
//!   ([`Redirects::Pinned`]): then at most [`MAX_REDIRECTS`], http(s) only,
//!   never from https down to http, credentials never sent on.
//! - Bounded time: to connect, per read or write (a stalled server), and in all.
//! - Bounded size: the caller says what it expects ([`Limit`]); a body longer
//!   is cut off there, one shorter is an error, neither is kept.
//! - Bodies stream into a file created exclusively (random name) in the
//!   destination's folder, hashed on the way; the caller renames it into
//!   place once it has checked it ([`Part::persist`]), else it is removed.
//! - Errors name the URL and the cause ([`Error`]); a full disk names the
//!   folder. Credentials ([`Secret`]) are never in a message or `Debug`.
//! - Proxies as curl reads them: `http_proxy` for http, `HTTPS_PROXY` for
//!   https, `ALL_PROXY` for both, `NO_PROXY` (upper or lower case, but
//!   `HTTP_PROXY`, as curl). TLS roots: `CURL_CA_BUNDLE`, `SSL_CERT_FILE`, else the system's
//!   bundle, else the Mozilla roots built in.

mod error;
pub mod netrc;
mod proxy;

use std::{
    fs::File,
    io::{Read, Write},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

pub use error::{Error, Kind};
use sha2::{Digest, Sha256};
use ureq::Agent;

/// How many redirects [`Redirects::Pinned`] follows.
pub const MAX_REDIRECTS: usize = 5;
/// How much of an error answer's body is kept (to show the server's words).
pub const ERROR_BODY_CAP: u64 = 16 * 1024;

/// Whether redirects are followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Redirects {
    /// A 3xx is an error naming where it pointed.
    None,
    /// Followed (http(s) only, never https to http, at most [`MAX_REDIRECTS`]):
    /// only for bytes the caller checks against a pinned sha256, wherever they come from.
    Pinned,
}

/// Time bounds of every request of a [`Client`].
#[derive(Clone, Debug)]
pub struct Options {
    /// To resolve and connect (and a proxy's handshake).
    pub connect: Duration,
    /// The longest wait for any byte to arrive or leave: a server that
    /// accepts and never answers, or stops mid-body, fails after this.
    pub stall: Duration,
    /// The whole request, however fast it trickles.
    pub total: Duration,
    pub redirects: Redirects,
    pub user_agent: String,
}

impl Options {
    pub fn new(user_agent: &str) -> Options {
        Options {
            connect: Duration::from_secs(20),
            stall: Duration::from_secs(60),
            total: Duration::from_secs(3600),
            redirects: Redirects::None,
            user_agent: user_agent.to_string(),
        }
    }
}

/// How many bytes the caller expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// Exactly this many (a pin's or a record's size).
    Exactly(u64),
    /// At most this many (an index, a record, a file whose size is not pinned).
    AtMost(u64),
}

impl Limit {
    fn cap(self) -> u64 {
        match self {
            Limit::Exactly(n) | Limit::AtMost(n) => n,
        }
    }
}

/// An `Authorization` header's value. Never shown.
#[derive(Clone)]
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(not shown)")
    }
}

impl Secret {
    /// `value` as the header is (a cargo registry's token); `None` when it holds
    /// a control character, which could end the header.
    pub fn raw(value: &str) -> Option<Secret> {
        (!value.chars().any(|c| c.is_control())).then(|| Secret(value.to_string()))
    }
    /// `Bearer <token>`.
    pub fn bearer(token: &str) -> Option<Secret> {
        Secret::raw(&format!("Bearer {token}"))
    }
    /// HTTP Basic of a login and password (a netrc file's).
    pub fn basic(login: &netrc::Login) -> Option<Secret> {
        use base64::Engine;
        let pair = format!("{}:{}", login.login, login.password);
        Secret::raw(&format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair)))
    }
}

/// A request's extras: its credentials and headers.
#[derive(Clone, Debug, Default)]
pub struct Extra<'a> {
    pub auth: Option<&'a Secret>,
    pub headers: &'a [(&'a str, &'a str)],
}

/// An answer read whole (small: [`Client::get_small`], [`Client::put`]).
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Response {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// How a [`Client::get_to_file`] ended.
#[derive(Debug)]
pub enum Got {
    /// 200 and the whole body, in a file of its own beside the destination.
    File(Part),
    /// Any other status; the start of its body, which a server sent.
    Status(Response),
}

/// A downloaded body in an exclusively created file in the destination's
/// folder: removed when dropped, unless [`Part::persist`]ed.
#[derive(Debug)]
pub struct Part {
    file: tempfile::NamedTempFile,
    sha256: [u8; 32],
    len: u64,
    url: String,
}

impl Part {
    /// The body's sha256, computed as it arrived.
    pub fn sha256(&self) -> [u8; 32] {
        self.sha256
    }
    pub fn len(&self) -> u64 {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn path(&self) -> &Path {
        self.file.path()
    }
    /// Renames the body to `dest` (replacing it), once the caller checked it.
    pub fn persist(self, dest: &Path) -> Result<(), Error> {
        let url = self.url;
        self.file.persist(dest).map(|_| ()).map_err(|e| error::file_error(&url, dest, e.error))
    }
}

/// One client, its agents made once: direct, and through each proxy the
/// environment names.
pub struct Client {
    options: Options,
    agents: proxy::Agents,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("options", &self.options).finish()
    }
}

/// Removes `user:password@` from a URL (for messages about a refused one).
pub(crate) fn without_userinfo(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            format!("{scheme}://(credentials not shown)@{host}{path}")
        }
        None => "(a URL)".into(),
    }
}

/// `url`'s scheme (lowercase) and host (no port), once it is one kiln sends.
pub fn check_url(url: &str) -> Result<(String, String), Error> {
    let Some((scheme, rest)) = url.split_once("://") else { return Err(Error::new(url, Kind::Scheme)) };
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(Error::new(url, Kind::Scheme));
    }
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    if authority.contains('@') {
        return Err(Error { url: without_userinfo(url), kind: Kind::Credentials });
    }
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(Error::new(url, Kind::BadUrl("spaces or control characters in the URL".into())));
    }
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or("").to_string()
    } else {
        authority.split(':').next().unwrap_or("").to_string()
    };
    if host.is_empty() {
        return Err(Error::new(url, Kind::BadUrl("no host".into())));
    }
    Ok((scheme, host.to_ascii_lowercase()))
}

/// `scheme://host:port` of a checked URL, lowercased.
fn origin(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    format!("{scheme}://{authority}").to_ascii_lowercase()
}

/// Where a redirect from `current` to `location` goes, or why it may not.
fn next_hop(current: &str, location: &str) -> Result<String, &'static str> {
    let next = resolve_location(current, location);
    let from_https = current.get(..8).is_some_and(|s| s.eq_ignore_ascii_case("https://"));
    match check_url(&next) {
        Ok((scheme, _)) if from_https && scheme == "http" => Err("which would go from https down to http"),
        Ok(_) => Ok(next),
        Err(_) => Err("which is not an http(s) URL kiln fetches"),
    }
}

/// Where a redirect's `Location` points, from `base`.
fn resolve_location(base: &str, location: &str) -> String {
    if location.contains("://") {
        return location.to_string();
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("http", base));
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    if let Some(l) = location.strip_prefix("//") {
        format!("{scheme}://{l}")
    } else if location.starts_with('/') {
        format!("{scheme}://{authority}{location}")
    } else {
        let path = &rest[authority.len()..];
        let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
        let dir = if dir.is_empty() { "/" } else { dir };
        format!("{scheme}://{authority}{dir}{location}")
    }
}

impl Client {
    /// A client reading its proxies and TLS roots from the environment.
    /// A variable kiln cannot use (an unreadable `SSL_CERT_FILE`, a proxy
    /// of another scheme) is an error of each request it would apply to.
    pub fn new(options: Options) -> Client {
        let agents = proxy::Agents::from_env(&options);
        Client { options, agents }
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    fn agent(&self, url: &str, scheme: &str, host: &str) -> Result<&Agent, Error> {
        self.agents.for_url(url, scheme, host)
    }

    /// Sends a GET, following redirects as the options allow; the answer's
    /// head (the body not read yet) and the URL it came from.
    fn get(&self, url: &str, extra: &Extra) -> Result<(ureq::http::Response<ureq::Body>, String), Error> {
        let mut current = url.to_string();
        check_url(url)?;
        let first = origin(url);
        let mut last_status = 0;
        for _ in 0..=MAX_REDIRECTS {
            let (scheme, host) = check_url(&current)?;
            let mut req = self.agent(&current, &scheme, &host)?.get(&current);
            // Credentials only ever go to the origin (scheme, host and port) they were given for.
            if let Some(auth) = extra.auth.filter(|_| origin(&current) == first) {
                req = req.header("Authorization", auth.0.as_str());
            }
            for (k, v) in extra.headers {
                req = req.header(*k, *v);
            }
            let response = req.call().map_err(|e| error::from_ureq(&current, e, &self.options))?;
            let status = response.status().as_u16();
            if !(300..400).contains(&status) || status == 304 {
                return Ok((response, current));
            }
            last_status = status;
            let location = response.headers().get("location").and_then(|l| l.to_str().ok()).unwrap_or("").to_string();
            let refuse = |why| Err(Error::new(&current, Kind::Redirect { status, location: location.clone(), why }));
            if location.is_empty() {
                return refuse("with no Location");
            }
            if self.options.redirects == Redirects::None {
                return refuse("and kiln follows no redirect here (ask for the final URL)");
            }
            match next_hop(&current, &location) {
                Ok(next) => current = next,
                Err(why) => return refuse(why),
            }
        }
        Err(Error::new(url, Kind::Redirect { status: last_status, location: current, why: "after too many redirects" }))
    }

    /// `GET url` whole into memory, at most `cap` bytes (an index, a record).
    pub fn get_small(&self, url: &str, cap: u64, extra: &Extra) -> Result<Response, Error> {
        let (response, from) = self.get(url, extra)?;
        let status = response.status().as_u16();
        let cap = if status == 200 { cap } else { ERROR_BODY_CAP };
        let mut body = Vec::new();
        read_body(&self.options, &from, response, Limit::AtMost(cap), status != 200, &mut |chunk| {
            body.extend_from_slice(chunk);
            Ok(())
        })?;
        Ok(Response { status, body })
    }

    /// `GET url` streamed into a new file in `dest`'s folder (created
    /// exclusively, random name), checked against `limit` and hashed as it
    /// arrives. On 200: [`Got::File`], which the caller checks and
    /// [`Part::persist`]s to `dest`. Nothing is left behind on any error.
    pub fn get_to_file(&self, url: &str, dest: &Path, limit: Limit, extra: &Extra) -> Result<Got, Error> {
        check_url(url)?;
        let folder = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
        let (response, from) = self.get(url, extra)?;
        let status = response.status().as_u16();
        if status != 200 {
            let mut body = Vec::new();
            read_body(&self.options, &from, response, Limit::AtMost(ERROR_BODY_CAP), true, &mut |c| {
                body.extend_from_slice(c);
                Ok(())
            })?;
            return Ok(Got::Status(Response { status, body }));
        }
        let mut file = tempfile::Builder::new().prefix(".kiln-download-").tempfile_in(&folder).map_err(|e| error::file_error(&from, &folder, e))?;
        let mut hasher = Sha256::new();
        let path: PathBuf = file.path().to_path_buf();
        let len = read_body(&self.options, &from, response, limit, false, &mut |chunk| {
            hasher.update(chunk);
            file.write_all(chunk).map_err(|e| error::file_error(&from, &path, e))
        })?;
        file.flush().map_err(|e| error::file_error(&from, &path, e))?;
        Ok(Got::File(Part { file, sha256: hasher.finalize().into(), len, url: from }))
    }

    /// `PUT url` with `body`; the answer's status and (small) body. Never redirected.
    pub fn put(&self, url: &str, body: Body, extra: &Extra) -> Result<Response, Error> {
        let (scheme, host) = check_url(url)?;
        let mut req = self.agent(url, &scheme, &host)?.put(url);
        if let Some(auth) = extra.auth {
            req = req.header("Authorization", auth.0.as_str());
        }
        for (k, v) in extra.headers {
            req = req.header(*k, *v);
        }
        let sent = match body {
            Body::Bytes(b) => req.send(b),
            Body::File(path) => {
                let file = File::open(path).map_err(|e| Error::new(url, Kind::File { path: path.to_path_buf(), error: e }))?;
                req.send(file)
            }
        };
        let response = sent.map_err(|e| error::from_ureq(url, e, &self.options))?;
        let status = response.status().as_u16();
        if (300..400).contains(&status) {
            let location = response.headers().get("location").and_then(|l| l.to_str().ok()).unwrap_or("").to_string();
            return Err(Error::new(url, Kind::Redirect { status, location, why: "and kiln never redirects an upload" }));
        }
        let mut out = Vec::new();
        read_body(&self.options, url, response, Limit::AtMost(ERROR_BODY_CAP * 64), true, &mut |c| {
            out.extend_from_slice(c);
            Ok(())
        })?;
        Ok(Response { status, body: out })
    }
}

/// What a PUT sends.
#[derive(Clone, Copy, Debug)]
pub enum Body<'a> {
    Bytes(&'a [u8]),
    File(&'a Path),
}

/// Reads `response`'s body into `sink` within `limit`; its length. With
/// `truncate`, a longer body is cut at the limit quietly (an error's text);
/// else it is [`Kind::TooLarge`].
fn read_body(
    options: &Options,
    url: &str,
    response: ureq::http::Response<ureq::Body>,
    limit: Limit,
    truncate: bool,
    sink: &mut dyn FnMut(&[u8]) -> Result<(), Error>,
) -> Result<u64, Error> {
    let cap = limit.cap();
    let declared = response.headers().get("content-length").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
    if !truncate && declared.is_some_and(|n| n > cap) {
        return Err(Error::new(url, Kind::TooLarge { limit: cap }));
    }
    let mut reader = response.into_body().into_reader();
    let mut buf = vec![0u8; 64 * 1024];
    let mut got: u64 = 0;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                // ureq's errors come wrapped in io::Error.
                let inner = e.into_inner().and_then(|i| i.downcast::<ureq::Error>().ok());
                return Err(match inner {
                    Some(u) => error::from_ureq(url, *u, options),
                    None => Error::new(url, Kind::Protocol("the connection broke mid-answer".into())),
                });
            }
        };
        let room = cap - got;
        if n as u64 > room {
            if truncate {
                sink(&buf[..room as usize])?;
                return Ok(cap);
            }
            return Err(Error::new(url, Kind::TooLarge { limit: cap }));
        }
        sink(&buf[..n])?;
        got += n as u64;
    }
    if let Limit::Exactly(expected) = limit {
        if got != expected && !truncate {
            return Err(Error::new(url, Kind::Truncated { got, expected }));
        }
    }
    Ok(got)
}

pub(crate) fn agent(options: &Options, proxy: Option<ureq::Proxy>, roots: Arc<ureq::tls::RootCerts>) -> Agent {
    let tls = ureq::tls::TlsConfig::builder().root_certs((*roots).clone()).build();
    let config = Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .user_agent(options.user_agent.as_str())
        .proxy(proxy)
        .tls_config(tls)
        .timeout_resolve(Some(options.connect))
        .timeout_connect(Some(options.connect))
        .timeout_per_read(Some(options.stall))
        .timeout_per_write(Some(options.stall))
        .timeout_global(Some(options.total))
        .build();
    Agent::new_with_config(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_resolve_and_never_go_down_to_http_or_elsewhere() {
        let base = "https://mirror.example/debian/pool/a.deb";
        assert_eq!(next_hop(base, "/other/b.deb").unwrap(), "https://mirror.example/other/b.deb");
        assert_eq!(next_hop(base, "b.deb").unwrap(), "https://mirror.example/debian/pool/b.deb");
        assert_eq!(next_hop(base, "//cdn.example/x").unwrap(), "https://cdn.example/x");
        assert_eq!(next_hop(base, "https://cdn.example/x").unwrap(), "https://cdn.example/x");
        assert_eq!(next_hop("http://mirror.example/a", "https://cdn.example/x").unwrap(), "https://cdn.example/x");
        assert_eq!(next_hop(base, "http://cdn.example/x"), Err("which would go from https down to http"));
        assert_eq!(next_hop("HTTPS://mirror.example/a", "HTTP://cdn.example/x"), Err("which would go from https down to http"));
        for bad in ["file:///etc/passwd", "ftp://cdn.example/x", "https://u:p@cdn.example/x"] {
            assert_eq!(next_hop(base, bad), Err("which is not an http(s) URL kiln fetches"), "{bad}");
        }
        assert_eq!(origin("HTTP://Host.Example:8080/x"), "http://host.example:8080");
    }
}
