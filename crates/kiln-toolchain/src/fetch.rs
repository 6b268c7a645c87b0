//! Downloads of pinned files. Everything is checked against its pinned sha256
//! before it is used; a mismatch stops the build and says which file.

use std::{
    fs::{self, File},
    io::{self, Read},
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use kiln_pins::Deb;
use sha2::{Digest, Sha256};
use xshell::{cmd, Shell};

use crate::cache::Cache;

pub fn sha256_file(path: &Path) -> Result<String> {
    let mut file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

pub use kiln_manifest::{hex, sha256_hex as sha256_bytes};

/// A downloaded file whose hash is not the pinned one.
#[derive(Debug)]
pub struct HashMismatch {
    pub what: String,
    pub url: String,
    pub expected: String,
    pub actual: String,
}

impl std::fmt::Display for HashMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "sha256 mismatch for {} from {}\n  expected {} (pinned)\n  got      {}\n  \
             The download was discarded. If the pin is right, the mirror served other bytes: try another \
             mirror; if the pin is stale, bump it with `cargo xtask pins update`.",
            self.what, self.url, self.expected, self.actual
        )
    }
}

impl std::error::Error for HashMismatch {}

/// Downloads `url` to `dest` only if its sha256 is `sha256`. Nothing is left
/// at `dest` otherwise.
pub fn download_verified(sh: &Shell, url: &str, sha256: &str, what: &str, dest: &Path) -> Result<()> {
    let part = dest.with_extension(format!("part.{}", std::process::id()));
    let result = (|| -> Result<()> {
        let out = cmd!(sh, "curl --fail --location --silent --show-error --retry 3 --connect-timeout 20 --output {part} {url}")
            .quiet()
            .ignore_status()
            .output()
            .context("cannot run curl (apt-get install curl)")?;
        if !out.status.success() {
            bail!("cannot download {what} from {url}: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        let actual = sha256_file(&part)?;
        if actual != sha256 {
            bail!(HashMismatch { what: what.to_string(), url: url.to_string(), expected: sha256.to_string(), actual });
        }
        fs::rename(&part, dest)?;
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&part);
    }
    result
}

/// The cached copy of `deb`, downloading it from the first mirror that has it.
pub fn fetch_deb(sh: &Shell, cache: &Cache, mirrors: &[String], deb: &Deb) -> Result<PathBuf> {
    let dir = cache.debs();
    fs::create_dir_all(&dir)?;
    let dest = dir.join(crate::cache::deb_file(&deb.sha256));
    let what = format!("{} {} ({})", deb.name, deb.version, deb.file_name());
    // Checked before every use, not only when downloaded: a damaged but
    // well-formed package would otherwise be unpacked into the toolchain.
    if reuse_if_intact(&dest, &deb.sha256, &what)? {
        return Ok(dest);
    }
    // A shared remote cache first: the same bytes, checked against the same pin.
    if let Some(remote) = cache.remote() {
        if crate::remote::fetch_pinned(remote, &deb.sha256, &dest) {
            return Ok(dest);
        }
    }
    let mut errors = Vec::new();
    for mirror in mirrors {
        let url = format!("{mirror}/{}", deb.path);
        match download_verified(sh, &url, &deb.sha256, &what, &dest) {
            Ok(()) => {
                if let Some(remote) = cache.remote().filter(|r| r.writable()) {
                    if remote.put_cas(&deb.sha256, &dest).is_ok() {
                        remote.record_stored();
                    }
                }
                return Ok(dest);
            }
            // A wrong hash is not a missing file: never fall through to another mirror silently.
            Err(e) if e.downcast_ref::<HashMismatch>().is_some() => return Err(e),
            Err(e) => errors.push(format!("  {url}: {e:#}")),
        }
    }
    bail!("could not download {what} from any mirror in pins.toml [toolchain].mirrors:\n{}", errors.join("\n"))
}

/// Whether the cached download `dest` is there with its pinned `sha256`. A
/// damaged one is removed, with a warning naming it, so that it is fetched again.
pub fn reuse_if_intact(dest: &Path, sha256: &str, what: &str) -> Result<bool> {
    if !dest.exists() {
        return Ok(false);
    }
    match sha256_file(dest) {
        Ok(actual) if actual == sha256 => return Ok(true),
        Ok(actual) => {
            eprintln!("warning: the cached {what} at {} has sha256 {actual}, not the pinned {sha256}: removed, downloading it again", dest.display())
        }
        Err(e) => eprintln!("warning: the cached {what} at {} cannot be read ({e:#}): removed, downloading it again", dest.display()),
    }
    fs::remove_file(dest).with_context(|| format!("cannot remove the damaged {}", dest.display()))?;
    Ok(false)
}

/// Re-hashes a file already in the cache (after unexpected damage, say).
pub fn verify_file(path: &Path, sha256: &str, what: &str) -> Result<()> {
    let actual = sha256_file(path)?;
    if actual != sha256 {
        bail!(HashMismatch { what: what.to_string(), url: path.display().to_string(), expected: sha256.into(), actual });
    }
    Ok(())
}

pub(crate) fn is_not_found(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
}
