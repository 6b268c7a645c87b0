//! HTTP through curl, the client kiln already uses for every download: TLS
//! for real registries without a TLS stack in kiln, and the same code path
//! against the loopback registry in the tests.

use std::{
    fs,
    io::Write,
    path::PathBuf,
    process::{Command, Stdio},
    sync::atomic::{AtomicU64, Ordering},
};

use anyhow::{bail, Context, Result};

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

const USER_AGENT: &str = concat!("kiln-publish/", env!("CARGO_PKG_VERSION"), " (https://github.com/kiln-gpu/kiln)");

/// A file in the temp dir, removed when dropped.
struct Temp(PathBuf);

impl Temp {
    fn new(label: &str) -> Temp {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        Temp(std::env::temp_dir().join(format!("kiln-publish-{}-{n}-{label}", std::process::id())))
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

pub fn get(url: &str, token: Option<&str>) -> Result<Response> {
    request(url, None, token)
}

/// `PUT` with an `application/octet-stream` body.
pub fn put(url: &str, body: &[u8], token: Option<&str>) -> Result<Response> {
    request(url, Some(body), token)
}

fn request(url: &str, body: Option<&[u8]>, token: Option<&str>) -> Result<Response> {
    // Callers check where the token came from; this is the last line of defence, before curl runs.
    if let Some(t) = token {
        crate::registry::check_token(t, "the caller")?;
    }
    let out = Temp::new("response");
    let upload = Temp::new("body");
    let mut cmd = Command::new("curl");
    cmd.args(["--silent", "--show-error", "--connect-timeout", "20", "--max-time", "600", "--user-agent", USER_AGENT]);
    // HTTP(S) only, redirects included: never a file:// or other scheme's bytes in a body or an error.
    cmd.args(["--proto", "=http,https", "--proto-redir", "=http,https"]);
    // The token goes in through stdin, never on the command line (where any
    // user's `ps` would show it).
    cmd.args(["--config", "-"]);
    cmd.arg("--output").arg(&out.0).args(["--write-out", "%{http_code}"]);
    match body {
        Some(b) => {
            fs::write(&upload.0, b).with_context(|| format!("cannot write {}", upload.0.display()))?;
            cmd.args(["--request", "PUT", "--header", "Content-Type: application/octet-stream", "--data-binary"]);
            cmd.arg(format!("@{}", upload.0.display()));
        }
        None => {
            cmd.arg("--location");
        }
    }
    cmd.arg("--url").arg(url);
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().context("cannot run curl (apt-get install curl)")?;
    {
        let mut stdin = child.stdin.take().expect("piped");
        if let Some(t) = token {
            let escaped = t.replace('\\', "\\\\").replace('"', "\\\"");
            writeln!(stdin, "header = \"Authorization: {escaped}\"")?;
        }
    }
    let output = child.wait_with_output()?;
    if !output.status.success() {
        bail!("{url}: {}", String::from_utf8_lossy(&output.stderr).trim());
    }
    let code = String::from_utf8_lossy(&output.stdout);
    let status: u16 = code.trim().parse().with_context(|| format!("{url}: curl reported status {code:?}"))?;
    let body = fs::read(&out.0).unwrap_or_default();
    Ok(Response { status, body })
}
