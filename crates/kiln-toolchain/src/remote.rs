//! A cache shared by many machines on an HTTP server, in the shape of Bazel's
//! HTTP remote cache: `GET`/`PUT` of `<url>/cas/<sha256>` (bytes, named by
//! their own hash) and `<url>/ac/<key>` (a small record per action key). Any
//! server that stores what is `PUT` and returns it on `GET` serves it:
//! bazel-remote, nginx with WebDAV `PUT`, S3 gateways.
//!
//! The remote is never trusted for bytes: everything read is checked against
//! the sha256 that names it (by [`crate::tiers::Tiered`], the one read-through
//! of every tier; [`crate::http_tier`] is this remote as a tier), and a wrong,
//! truncated or unreadable answer is a miss with a warning. It is never needed either: every request has bounded
//! time-outs, and after the first failure to reach the server kiln asks it
//! nothing more in that run and builds locally. Credentials come from the
//! environment or a netrc file, go only to the server as one header, and
//! are never printed; a URL with credentials in it is refused (URLs are printed).
//!
//! HTTP goes through kiln-http, as every kiln download does: http(s) only, no
//! redirects, bounded time and size, proxies as curl reads them.

use std::{
    collections::HashSet,
    fmt, fs,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Mutex,
    },
    time::Duration,
};

use anyhow::{bail, Context, Result};

/// The server's base URL (`https://cache.example/kiln`); unset: no remote cache.
pub const URL_ENV: &str = "KILN_REMOTE_CACHE";
/// `1`/`true`: read from the remote, never write to it (pull requests).
pub const READ_ONLY_ENV: &str = "KILN_REMOTE_CACHE_READ_ONLY";
/// A netrc-style file with the server's login (default: `~/.netrc`, if any, as curl's `--netrc-optional`).
pub const NETRC_ENV: &str = "KILN_REMOTE_CACHE_NETRC";
/// A bearer token, sent as `Authorization: Bearer <token>`.
pub const TOKEN_ENV: &str = "KILN_REMOTE_CACHE_TOKEN";
/// Seconds: how long to wait to connect, and how long a transfer may stall.
pub const TIMEOUT_ENV: &str = "KILN_REMOTE_CACHE_TIMEOUT";

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The whole request, however fast it trickles: time-out × this. (The
/// time-out bounds connecting and every wait for a byte: a stalled server.)
const MAX_TIME_FACTOR: u32 = 30;
/// The most an action record (`/ac/<key>`) may be: a recipe and a few hashes.
pub const RECORD_CAP: u64 = 4 << 20;
/// The most kiln reads of a `/cas/` object whose size the server states (a
/// job's output, its record's `size`) or does not: kiln's own limit, never
/// the sender's claim. A record claiming more is damaged before any byte is
/// asked for. (Pinned files, whose size is kiln's own pin, are read at
/// exactly that size: [`Remote::get_pinned`].)
pub const CAS_CAP: u64 = 2 << 30;

/// Where the remote is and how to talk to it.
#[derive(Clone)]
pub struct Config {
    /// The base URL, without a trailing `/`.
    pub url: String,
    pub read_only: bool,
    pub netrc: Option<PathBuf>,
    token: Option<String>,
    pub timeout: Duration,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("url", &self.url)
            .field("read_only", &self.read_only)
            .field("netrc", &self.netrc)
            .field("token", &self.token.as_ref().map(|_| "(set, not shown)"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

fn truthy(v: &str) -> Result<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "" | "0" | "false" | "no" => Ok(false),
        "1" | "true" | "yes" => Ok(true),
        other => bail!("`{other}` is neither true (1, true, yes) nor false (0, false, no, empty)"),
    }
}

impl Config {
    /// A remote at `url` (http or https, no credentials, query or fragment),
    /// read-write, no credentials, the default time-out.
    pub fn new(url: &str) -> Result<Config> {
        let url = url.trim_end_matches('/');
        let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
        let Some(rest) = rest else {
            bail!("remote cache URL `{url}`: give an http:// or https:// URL");
        };
        let host = rest.split('/').next().unwrap_or("");
        if host.is_empty() {
            bail!("remote cache URL `{url}` names no host");
        }
        if host.contains('@') {
            // Not echoed: the part before `@` is a password.
            bail!("the remote cache URL holds credentials (user:password@host): put them in a netrc file ({NETRC_ENV}) or {TOKEN_ENV}, never in the URL, which kiln prints");
        }
        if url.chars().any(|c| c.is_control() || c.is_whitespace()) || url.contains(['?', '#']) {
            bail!("remote cache URL `{}`: no spaces, control characters, query or fragment", url.escape_default());
        }
        Ok(Config { url: url.to_string(), read_only: false, netrc: None, token: None, timeout: DEFAULT_TIMEOUT })
    }

    /// The remote the environment names ([`URL_ENV`] and the variables beside
    /// it), or `None` when [`URL_ENV`] is unset or empty.
    pub fn from_env() -> Result<Option<Config>> {
        let Some(url) = std::env::var(URL_ENV).ok().filter(|u| !u.trim().is_empty()) else { return Ok(None) };
        let mut c = Config::new(&url).context(URL_ENV)?;
        c.apply_env()?;
        Ok(Some(c))
    }

    /// The remote a command line names (`url`: `--remote-cache`; else the
    /// environment's), read-only when `read_only` (`--remote-cache-read-only`)
    /// or the environment says so; `None` when neither names one.
    pub fn resolve(url: Option<&str>, read_only: bool) -> Result<Option<Config>> {
        let mut config = match url {
            Some(url) => {
                let mut c = Config::new(url)?;
                c.apply_env()?;
                Some(c)
            }
            None => Config::from_env()?,
        };
        if read_only {
            match &mut config {
                Some(c) => c.read_only = true,
                None => bail!("--remote-cache-read-only needs a remote cache: --remote-cache URL or {URL_ENV}"),
            }
        }
        Ok(config)
    }

    /// Reads the settings beside the URL from the environment.
    pub fn apply_env(&mut self) -> Result<()> {
        if let Ok(v) = std::env::var(READ_ONLY_ENV) {
            self.read_only |= truthy(&v).context(READ_ONLY_ENV)?;
        }
        if let Some(p) = std::env::var_os(NETRC_ENV).filter(|p| !p.is_empty()) {
            self.netrc = Some(PathBuf::from(p));
        }
        if let Ok(t) = std::env::var(TOKEN_ENV) {
            if !t.is_empty() {
                self.set_token(t, TOKEN_ENV)?;
            }
        }
        if let Ok(v) = std::env::var(TIMEOUT_ENV) {
            let secs: u64 = v
                .trim()
                .parse()
                .ok()
                .filter(|s| (1..=600).contains(s))
                .with_context(|| format!("{TIMEOUT_ENV}=`{v}`: give whole seconds, 1 to 600"))?;
            self.timeout = Duration::from_secs(secs);
        }
        if let Some(netrc) = &self.netrc {
            fs::metadata(netrc).with_context(|| format!("{NETRC_ENV}: cannot read {}", netrc.display()))?;
        }
        Ok(())
    }

    /// Sets the bearer token; `origin` names where it came from, for the error.
    /// A token that could end its header line (or is no HTTP token) is refused.
    pub fn set_token(&mut self, token: String, origin: &str) -> Result<()> {
        if let Some(bad) = token.chars().find(|c| !c.is_ascii_graphic() || *c == '"' || *c == '\\') {
            let what = if bad.is_control() {
                "a control character".to_string()
            } else if bad == ' ' {
                "a space".to_string()
            } else {
                format!("the character `{}`", bad.escape_default())
            };
            bail!("the remote cache token from {origin} holds {what}, which kiln refuses (its value is not shown)");
        }
        self.token = Some(token);
        Ok(())
    }

    /// The `Authorization` the requests carry: the token, else the login the
    /// netrc file ([`NETRC_ENV`], else `~/.netrc` if there is one) has for the host.
    fn auth(&self) -> Option<kiln_http::Secret> {
        if let Some(t) = &self.token {
            return kiln_http::Secret::bearer(t);
        }
        let file = self.netrc.clone().or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".netrc")).filter(|f| f.is_file()))?;
        let (_, host) = kiln_http::check_url(&self.url).ok()?;
        let login = kiln_http::netrc::login_for(&file, &host).ok()??;
        kiln_http::Secret::basic(&login)
    }
}

/// A body the server sent, kept in the file asked for: its sha256 and
/// length as they arrived (compared with what they must be by the caller:
/// [`crate::tiers::check_sent`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Sent {
    pub sha256: String,
    pub len: u64,
}

/// How a `GET` ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Got {
    /// The body is in the file asked for.
    Found,
    NotFound,
    /// The server answered with bytes that are not what the name promises
    /// (other bytes, truncated); counted, and a miss.
    Damaged(String),
    /// Not the answer a cache gives (a 500, a dropped connection); the remote stays in use.
    Failed(String),
}

/// Counters for the summary line.
#[derive(Default)]
struct Stats {
    hits: AtomicU64,
    misses: AtomicU64,
    stored: AtomicU64,
    damaged: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
}

/// A remote cache in use by one run: its settings, whether it is still
/// reachable, and what it served.
pub struct Remote {
    config: Config,
    /// Set at the first time-out or connection failure: no more requests this run.
    down: AtomicBool,
    /// Set when the server refused a write (401/403): reading goes on.
    no_writes: AtomicBool,
    stats: Stats,
    /// Warnings, each printed once.
    warned: Mutex<HashSet<String>>,
    client: kiln_http::Client,
    /// `Bearer <token>`, else the netrc file's login for the host as Basic.
    auth: Option<kiln_http::Secret>,
}

impl fmt::Debug for Remote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Remote").field("config", &self.config).field("down", &self.down).finish()
    }
}

impl Remote {
    pub fn new(config: Config) -> Remote {
        let t = config.timeout;
        let options = kiln_http::Options {
            connect: t,
            stall: t,
            total: t * MAX_TIME_FACTOR,
            redirects: kiln_http::Redirects::None,
            user_agent: concat!("kiln/", env!("CARGO_PKG_VERSION")).into(),
        };
        let auth = config.auth();
        Remote {
            config,
            down: AtomicBool::new(false),
            no_writes: AtomicBool::new(false),
            stats: Stats::default(),
            warned: Mutex::new(HashSet::new()),
            client: kiln_http::Client::new(options),
            auth,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn url(&self) -> &str {
        &self.config.url
    }

    /// False once the server could not be reached in this run.
    pub fn usable(&self) -> bool {
        !self.down.load(Ordering::SeqCst)
    }

    /// Whether this run may write to it: it is reachable and has not refused
    /// a write. (Read-only mode is [`crate::tiers::ReadOnly`], around it.)
    pub fn writable(&self) -> bool {
        self.usable() && !self.no_writes.load(Ordering::SeqCst)
    }

    /// Prints `message` once per run (the same failure on a hundred jobs is one line).
    pub fn warn(&self, message: String) {
        if self.warned.lock().unwrap().insert(message.clone()) {
            eprintln!("warning: remote cache {}: {message}", self.config.url);
        }
    }

    fn mark_down(&self, why: &str) {
        if !self.down.swap(true, Ordering::SeqCst) {
            eprintln!("warning: remote cache {}: {why}; building locally, and asking it nothing more in this run", self.config.url);
        }
    }

    pub fn record_hit(&self) {
        self.stats.hits.fetch_add(1, Ordering::Relaxed);
    }
    pub fn record_miss(&self) {
        self.stats.misses.fetch_add(1, Ordering::Relaxed);
    }
    pub fn record_stored(&self) {
        self.stats.stored.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an object the server answered with other bytes than its name promises.
    pub fn record_damaged(&self) {
        self.stats.damaged.fetch_add(1, Ordering::Relaxed);
    }

    /// `<url>: 12 hits, 3 misses, 3 stored, 0 damaged, 4.1 MB in, 1.2 MB out`.
    pub fn summary(&self) -> String {
        let s = &self.stats;
        let mut line = format!(
            "remote cache {}: {} hits, {} misses, {} stored, {} damaged (ignored), {:.1} MB in, {:.1} MB out",
            self.config.url,
            s.hits.load(Ordering::Relaxed),
            s.misses.load(Ordering::Relaxed),
            s.stored.load(Ordering::Relaxed),
            s.damaged.load(Ordering::Relaxed),
            s.bytes_in.load(Ordering::Relaxed) as f64 / 1e6,
            s.bytes_out.load(Ordering::Relaxed) as f64 / 1e6,
        );
        if self.config.read_only {
            line.push_str(" (read-only)");
        }
        if !self.usable() {
            line.push_str(" (unreachable: not used after the first failure)");
        }
        line
    }

    fn url_of(&self, path: &str) -> String {
        format!("{}/{path}", self.config.url)
    }

    /// Sorts a request's failure: one that says the server cannot be reached
    /// or does not answer in time marks it down for the run.
    fn failed(&self, path: &str, e: kiln_http::Error) -> String {
        if let kiln_http::Kind::TimedOut { .. } = e.kind {
            let why = format!("no answer within the time-out ({} s; {TIMEOUT_ENV}) for {path}", self.config.timeout.as_secs());
            self.mark_down(&why);
            return why;
        }
        if e.is_unreachable() {
            let why = format!("cannot reach it ({e})");
            self.mark_down(&why);
            return why;
        }
        // Without the URL: the same failure on a hundred objects is one warning.
        e.cause()
    }

    /// `GET <url>/<path>` into `dest` (replaced), within `limit`. On
    /// anything but a body `dest` is removed and nothing else is left behind.
    fn fetch(&self, path: &str, limit: kiln_http::Limit, dest: &Path) -> Result<Sent, Got> {
        let _ = fs::remove_file(dest);
        if !self.usable() {
            return Err(Got::Failed("the remote cache is not used any more in this run".into()));
        }
        let url = self.url_of(path);
        let extra = kiln_http::Extra { auth: self.auth.as_ref(), headers: &[] };
        match self.client.get_to_file(&url, dest, limit, &extra) {
            Ok(kiln_http::Got::File(part)) => {
                let sent = Sent { sha256: kiln_manifest::hex(&part.sha256()), len: part.len() };
                match part.persist(dest) {
                    Ok(()) => {
                        self.stats.bytes_in.fetch_add(sent.len, Ordering::Relaxed);
                        Ok(sent)
                    }
                    Err(e) => Err(Got::Failed(e.to_string())),
                }
            }
            Ok(kiln_http::Got::Status(r)) => Err(match r.status {
                404 => Got::NotFound,
                code @ (401 | 403) => {
                    let why = format!("it refused a read (HTTP {code}): check {NETRC_ENV} or {TOKEN_ENV}");
                    self.mark_down(&why);
                    Got::Failed(why)
                }
                code => Got::Failed(format!("it answered a GET with HTTP {code}")),
            }),
            Err(e) if matches!(e.kind, kiln_http::Kind::TooLarge { .. } | kiln_http::Kind::Truncated { .. }) => {
                self.record_damaged();
                Err(Got::Damaged(format!("{path} is damaged ({e})")))
            }
            Err(e) => Err(Got::Failed(self.failed(path, e))),
        }
    }

    /// `GET <url>/<path>` of a small record (at most [`RECORD_CAP`] bytes) into
    /// `dest` (replaced). On anything but [`Got::Found`] `dest` is removed.
    pub fn get(&self, path: &str, dest: &Path) -> Got {
        match self.fetch(path, kiln_http::Limit::AtMost(RECORD_CAP), dest) {
            Ok(_) => Got::Found,
            Err(got) => got,
        }
    }

    /// `GET` of `/cas/<sha256>` into `dest`, of `size` bytes when a record
    /// says so (never more than [`CAS_CAP`], whatever it claims). A body
    /// longer or shorter is never kept and is counted, and the answer is
    /// [`Got::Damaged`], which callers take as a miss. The bytes' sha256 is
    /// returned, not compared: [`crate::tiers::Tiered`] does that.
    pub fn get_cas(&self, sha256: &str, size: Option<u64>, dest: &Path) -> Result<Sent, Got> {
        if let Some(n) = size.filter(|n| *n > CAS_CAP) {
            let _ = fs::remove_file(dest);
            self.record_damaged();
            return Err(Got::Damaged(format!(
                "cas/{sha256} is claimed to be {n} bytes, more than the {CAS_CAP} kiln reads of a remote object; not asked for"
            )));
        }
        self.get_pinned(sha256, size, dest)
    }

    /// `GET` of `/cas/<sha256>` into `dest` for a file whose size is kiln's
    /// own pin (a toolchain package): read at exactly that size, no cap but
    /// it; as [`Remote::get_cas`] otherwise.
    pub fn get_pinned(&self, sha256: &str, size: Option<u64>, dest: &Path) -> Result<Sent, Got> {
        let limit = size.map_or(kiln_http::Limit::AtMost(CAS_CAP), kiln_http::Limit::Exactly);
        self.fetch(&format!("cas/{sha256}"), limit, dest)
    }

    /// `PUT <url>/<path>` with the bytes of `file`. Only in writable mode; a
    /// refused write (401/403) turns writing off for the run, with one warning.
    pub fn put(&self, path: &str, file: &Path) -> Result<(), String> {
        if !self.writable() {
            return Err("the remote cache is not written to in this run".into());
        }
        let extra = kiln_http::Extra { auth: self.auth.as_ref(), headers: &[] };
        match self.client.put(&self.url_of(path), kiln_http::Body::File(file), &extra) {
            Ok(r) if (200..=204).contains(&r.status) => {
                let n = fs::metadata(file).map(|m| m.len()).unwrap_or(0);
                self.stats.bytes_out.fetch_add(n, Ordering::Relaxed);
                Ok(())
            }
            Ok(r) if matches!(r.status, 401 | 403 | 405) => {
                let code = r.status;
                if !self.no_writes.swap(true, Ordering::SeqCst) {
                    self.warn(format!(
                        "the server refused a write (HTTP {code}): reading only from now on; check {NETRC_ENV} or {TOKEN_ENV}, or set {READ_ONLY_ENV}=1"
                    ));
                }
                Err(format!("HTTP {code}"))
            }
            Ok(r) => Err(format!("it answered a PUT with HTTP {}", r.status)),
            Err(e) => Err(self.failed(path, e)),
        }
    }

    /// `PUT` of `file`, whose sha256 is `sha256`, at `/cas/<sha256>`. Always
    /// written, never "already there": kiln writes back only what it just had
    /// to make itself, so the server's copy was missing or not to be trusted,
    /// and a damaged object that was never read is replaced all the same.
    pub fn put_cas(&self, sha256: &str, file: &Path) -> Result<(), String> {
        self.put(&format!("cas/{sha256}"), file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claimed_size_over_kilns_cap_is_damaged_before_any_request() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let remote = Remote::new(Config::new(&format!("http://127.0.0.1:{port}/kiln")).unwrap());
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("out");
        let sha = "ab".repeat(32);
        // A record that claims 4 GiB: before, 4 GiB were streamed to disk before the hash check.
        match remote.get_cas(&sha, Some(4 << 30), &dest) {
            Err(Got::Damaged(why)) => assert!(why.contains("claimed to be 4294967296 bytes, more than the 2147483648 kiln reads"), "{why}"),
            other => panic!("not refused: {other:?}"),
        }
        assert!(listener.accept().is_err(), "the server was asked");
        assert!(!dest.exists());
    }

    #[test]
    fn urls_with_credentials_or_odd_characters_are_refused_without_echoing_secrets() {
        assert_eq!(Config::new("http://127.0.0.1:8080/kiln/").unwrap().url, "http://127.0.0.1:8080/kiln");
        let e = Config::new("https://user:hunter2@cache.example/kiln").unwrap_err().to_string();
        assert!(e.contains("credentials") && !e.contains("hunter2"), "{e}");
        assert!(Config::new("ftp://cache.example").is_err());
        assert!(Config::new("http:///nohost").is_err());
        assert!(Config::new("http://cache.example/a b").is_err());
        assert!(Config::new("http://cache.example/?q=1").is_err());
    }

    #[test]
    fn tokens_that_could_add_a_header_are_refused_and_never_shown() {
        let mut c = Config::new("http://127.0.0.1:1").unwrap();
        for bad in ["abc\noutput = /etc/passwd", "a\"b", "a\\b", "a b", "tab\there"] {
            let e = c.set_token(bad.to_string(), TOKEN_ENV).unwrap_err().to_string();
            assert!(e.contains(TOKEN_ENV) && !e.contains(bad), "{e}");
        }
        c.set_token("ghp_AbC-123._~+/=".to_string(), TOKEN_ENV).unwrap();
        assert!(!format!("{c:?}").contains("ghp_"), "Debug shows the token");
    }

    #[test]
    fn read_only_flags_parse_strictly() {
        assert!(truthy("1").unwrap() && truthy("TRUE").unwrap() && !truthy("0").unwrap() && !truthy("").unwrap());
        assert!(truthy("maybe").is_err());
    }
}
