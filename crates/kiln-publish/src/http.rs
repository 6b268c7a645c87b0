//! HTTP through curl, the client kiln already uses for every download: TLS
//! for real registries without a TLS stack in kiln, and the same code path
//! against the loopback registry in the tests.

use std::{
    fs,
    io::Write,
    process::{Command, Stdio},
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
    // curl's files live in a folder of this request's own, made exclusively
    // with a random name (mode 0700) and removed on return: no name another
    // user can guess, pre-create or point elsewhere with a symbolic link.
    let scratch = tempfile::Builder::new().prefix("kiln-publish-").tempdir().context("cannot make a temporary folder for the request")?;
    let out = scratch.path().join("response");
    let upload = scratch.path().join("body");
    let mut cmd = Command::new("curl");
    cmd.args(["--silent", "--show-error", "--connect-timeout", "20", "--max-time", "600", "--user-agent", USER_AGENT]);
    // HTTP(S) only, redirects included: never a file:// or other scheme's bytes in a body or an error.
    cmd.args(["--proto", "=http,https", "--proto-redir", "=http,https"]);
    // The token goes in through stdin, never on the command line (where any
    // user's `ps` would show it).
    cmd.args(["--config", "-"]);
    cmd.arg("--output").arg(&out).args(["--write-out", "%{http_code}"]);
    match body {
        Some(b) => {
            fs::File::create_new(&upload).and_then(|mut f| f.write_all(b)).with_context(|| format!("cannot write {}", upload.display()))?;
            cmd.args(["--request", "PUT", "--header", "Content-Type: application/octet-stream", "--data-binary"]);
            cmd.arg(format!("@{}", upload.display()));
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
    // curl writes the file for every answer with a body; an answer without one
    // (204, or a HEAD-like reply) leaves none, which is an empty body. Any other
    // failure to read it is an error, not an empty answer.
    let body = match fs::read(&out) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).with_context(|| format!("{url}: cannot read curl's response file {}", out.display())),
    };
    Ok(Response { status, body })
}
