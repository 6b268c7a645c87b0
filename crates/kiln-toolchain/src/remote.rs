//! A cache shared by many machines on an HTTP server, in the shape of Bazel's
//! HTTP remote cache: `GET`/`PUT` of `<url>/cas/<sha256>` (bytes, named by
//! their own hash) and `<url>/ac/<key>` (a small record per action key). Any
//! server that stores what is `PUT` and returns it on `GET` serves it:
//! bazel-remote, nginx with WebDAV `PUT`, S3 gateways.
//!
//! The remote is never trusted for bytes: everything read is checked against
//! the sha256 that names it, and a wrong, truncated or unreadable answer is a
//! miss with a warning. It is never needed either: every request has bounded
//! time-outs, and after the first failure to reach the server kiln asks it
//! nothing more in that run and builds locally. Credentials come from the
//! environment or a netrc file, reach curl on its stdin or by file name, and
//! are never printed; a URL with credentials in it is refused (URLs are printed).
//!
//! HTTP goes through curl, as every kiln download does (fetch.rs): TLS,
//! proxies and netrc without a TLS stack inside kiln.

use std::{
    collections::HashSet,
    fmt, fs,
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Mutex,
    },
    time::Duration,
};

use anyhow::{bail, Context, Result};

use crate::fetch::sha256_file;

/// The server's base URL (`https://cache.example/kiln`); unset: no remote cache.
pub const URL_ENV: &str = "KILN_REMOTE_CACHE";
/// `1`/`true`: read from the remote, never write to it (pull requests).
pub const READ_ONLY_ENV: &str = "KILN_REMOTE_CACHE_READ_ONLY";
/// A netrc-style file with the server's login (default: curl's `~/.netrc`, if any).
pub const NETRC_ENV: &str = "KILN_REMOTE_CACHE_NETRC";
/// A bearer token, sent as `Authorization: Bearer <token>`.
pub const TOKEN_ENV: &str = "KILN_REMOTE_CACHE_TOKEN";
/// Seconds: how long to wait to connect, and how long a transfer may stall.
pub const TIMEOUT_ENV: &str = "KILN_REMOTE_CACHE_TIMEOUT";

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// A transfer slower than this for the whole time-out is dropped (a server
/// that accepts and never answers).
const STALL_BYTES_PER_SECOND: u32 = 1024;
/// The whole request, however fast it trickles: time-out × this.
const MAX_TIME_FACTOR: u32 = 30;

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
    /// A token that could add a line to curl's configuration is refused.
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
}

impl fmt::Debug for Remote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Remote").field("config", &self.config).field("down", &self.down).finish()
    }
}

/// curl exit codes that say the server cannot be reached or does not answer
/// in time: resolve, connect, time-out, TLS, empty reply, send/receive failure.
const UNREACHABLE: &[i32] = &[5, 6, 7, 28, 35, 52, 55, 56, 60];

impl Remote {
    pub fn new(config: Config) -> Remote {
        Remote {
            config,
            down: AtomicBool::new(false),
            no_writes: AtomicBool::new(false),
            stats: Stats::default(),
            warned: Mutex::new(HashSet::new()),
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

    /// Whether this run may write to it.
    pub fn writable(&self) -> bool {
        self.usable() && !self.config.read_only && !self.no_writes.load(Ordering::SeqCst)
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

    fn curl(&self, path: &str) -> Command {
        let t = self.config.timeout.as_secs().max(1);
        let mut cmd = Command::new("curl");
        cmd.args(["--silent", "--show-error", "--globoff", "--proto", "=http,https"]);
        cmd.arg("--connect-timeout").arg(t.to_string());
        cmd.arg("--speed-time").arg(t.to_string()).arg("--speed-limit").arg(STALL_BYTES_PER_SECOND.to_string());
        cmd.arg("--max-time").arg((t * MAX_TIME_FACTOR as u64).to_string());
        cmd.args(["--user-agent", concat!("kiln/", env!("CARGO_PKG_VERSION"))]);
        match &self.config.netrc {
            Some(file) => {
                cmd.arg("--netrc-file").arg(file);
            }
            None => {
                cmd.arg("--netrc-optional");
            }
        }
        // The token reaches curl on stdin, never on its command line (`ps` shows those).
        cmd.args(["--config", "-", "--write-out", "%{http_code}"]);
        cmd.arg("--url").arg(format!("{}/{path}", self.config.url));
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd
    }

    /// Runs `cmd`; the HTTP status, or why there is none. A failure to reach
    /// the server marks it down.
    fn send(&self, mut cmd: Command, path: &str) -> std::result::Result<u16, String> {
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                self.mark_down(&format!("cannot run curl ({e}; apt-get install curl)"));
                return Err("curl cannot run".into());
            }
        };
        {
            let mut stdin = child.stdin.take().expect("piped");
            if let Some(t) = &self.config.token {
                // set_token refused anything that could end this line early.
                let _ = writeln!(stdin, "header = \"Authorization: Bearer {t}\"");
            }
        }
        let out = match child.wait_with_output() {
            Ok(o) => o,
            Err(e) => return Err(format!("curl: {e}")),
        };
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        match out.status.code() {
            Some(0) => {}
            Some(code) if UNREACHABLE.contains(&code) => {
                let why = if code == 28 {
                    format!("no answer within the time-out ({} s; {TIMEOUT_ENV}) for {path}", self.config.timeout.as_secs())
                } else {
                    format!("cannot reach it ({stderr})")
                };
                self.mark_down(&why);
                return Err(why);
            }
            // Without the path: the same failure on a hundred objects is one warning.
            Some(code) => return Err(format!("curl exited with {code}: {stderr}")),
            None => return Err("curl was killed".into()),
        }
        let code = String::from_utf8_lossy(&out.stdout);
        code.trim().parse::<u16>().map_err(|_| format!("curl reported no HTTP status ({code:?})"))
    }

    /// `GET <url>/<path>` into `dest` (replaced). On anything but [`Got::Found`]
    /// `dest` is removed.
    pub fn get(&self, path: &str, dest: &Path) -> Got {
        if !self.usable() {
            return Got::Failed("the remote cache is not used any more in this run".into());
        }
        let mut cmd = self.curl(path);
        cmd.arg("--output").arg(dest);
        let status = self.send(cmd, path);
        let got = match status {
            Ok(200) => {
                let n = fs::metadata(dest).map(|m| m.len()).unwrap_or(0);
                self.stats.bytes_in.fetch_add(n, Ordering::Relaxed);
                return Got::Found;
            }
            Ok(404) => Got::NotFound,
            Ok(code @ (401 | 403)) => {
                let why = format!("it refused a read (HTTP {code}): check {NETRC_ENV} or {TOKEN_ENV}");
                self.mark_down(&why);
                Got::Failed(why)
            }
            Ok(code) => Got::Failed(format!("it answered a GET with HTTP {code}")),
            Err(e) => Got::Failed(e),
        };
        let _ = fs::remove_file(dest);
        got
    }

    /// `GET` of `/cas/<sha256>` into `dest`, kept only if its bytes hash to
    /// `sha256`. A body with other bytes (damaged, truncated) is removed and
    /// counted, and the answer is [`Got::Damaged`], which callers take as a miss.
    pub fn get_cas(&self, sha256: &str, dest: &Path) -> Got {
        let path = format!("cas/{sha256}");
        match self.get(&path, dest) {
            Got::Found => match sha256_file(dest) {
                Ok(actual) if actual == sha256 => Got::Found,
                Ok(actual) => {
                    let n = fs::metadata(dest).map(|m| m.len()).unwrap_or(0);
                    let _ = fs::remove_file(dest);
                    self.record_damaged();
                    Got::Damaged(format!("{path} is damaged ({n} bytes with sha256 {actual}, not the hash it is named by)"))
                }
                Err(e) => {
                    let _ = fs::remove_file(dest);
                    Got::Failed(format!("cannot read what it served: {e:#}"))
                }
            },
            other => other,
        }
    }

    /// `PUT <url>/<path>` with the bytes of `file`. Only in writable mode; a
    /// refused write (401/403) turns writing off for the run, with one warning.
    pub fn put(&self, path: &str, file: &Path) -> Result<(), String> {
        if !self.writable() {
            return Err("the remote cache is not written to in this run".into());
        }
        let mut cmd = self.curl(path);
        cmd.arg("--upload-file").arg(file).args(["--output", "/dev/null"]);
        match self.send(cmd, path) {
            Ok(200..=204) => {
                let n = fs::metadata(file).map(|m| m.len()).unwrap_or(0);
                self.stats.bytes_out.fetch_add(n, Ordering::Relaxed);
                Ok(())
            }
            Ok(code @ (401 | 403 | 405)) => {
                if !self.no_writes.swap(true, Ordering::SeqCst) {
                    self.warn(format!(
                        "the server refused a write (HTTP {code}): reading only from now on; check {NETRC_ENV} or {TOKEN_ENV}, or set {READ_ONLY_ENV}=1"
                    ));
                }
                Err(format!("HTTP {code}"))
            }
            Ok(code) => Err(format!("it answered a PUT with HTTP {code}")),
            Err(e) => Err(e),
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

/// Fetches `/cas/<sha256>` into `dest` for a file whose hash is pinned (a
/// toolchain package); true when `dest` now holds exactly those bytes.
pub fn fetch_pinned(remote: &Remote, sha256: &str, dest: &Path) -> bool {
    let part = dest.with_extension(format!("remote.{}", std::process::id()));
    match remote.get_cas(sha256, &part) {
        Got::Found => match fs::rename(&part, dest) {
            Ok(()) => {
                remote.record_hit();
                true
            }
            Err(_) => {
                let _ = fs::remove_file(&part);
                false
            }
        },
        Got::Damaged(why) | Got::Failed(why) => {
            remote.warn(format!("{why}: ignored, downloading from the mirrors"));
            remote.record_miss();
            false
        }
        Got::NotFound => {
            remote.record_miss();
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn tokens_that_could_add_a_curl_option_are_refused_and_never_shown() {
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
