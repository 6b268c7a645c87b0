//! Downloads of pinned files. Everything is checked against its pinned sha256
//! before it is used; a mismatch stops the build and says which file.

use std::{
    fs, io,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
pub use kiln_http::Limit;
use kiln_pins::Deb;

use crate::{
    cache::Cache,
    http_tier,
    tiers::{Local, Lookup},
};

/// The one file hasher ([`crate::tiers::sha256_file`]).
pub use crate::tiers::sha256_file;
pub use kiln_manifest::hex;

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

/// The client of every pinned download: redirects followed (the bytes are
/// checked against the pin wherever they come from), 20 s to connect, a
/// minute without a byte is a stalled server, and 6 h in all (a 500 MB
/// package at 25 KB/s: the stall bound is what catches a dead transfer).
fn client() -> &'static kiln_http::Client {
    static CLIENT: std::sync::OnceLock<kiln_http::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(|| {
        let mut options = kiln_http::Options::new(concat!("kiln/", env!("CARGO_PKG_VERSION")));
        options.redirects = kiln_http::Redirects::Pinned;
        options.total = std::time::Duration::from_secs(6 * 3600);
        kiln_http::Client::new(options)
    })
}

/// Tries per download when the server times out or stalls, or answers 408,
/// 429, 500, 502, 503 or 504 (what curl's `--retry 3` retried; a refused
/// connection or an unknown host goes on to the next mirror at once): 1 s,
/// 2 s, 4 s apart.
const TRIES: u32 = 4;

/// The most a download of unknown size (a wheel: PyPI pins only its hash) may be.
pub const UNPINNED_SIZE_CAP: u64 = 4 << 30;

/// Downloads `url` to `dest` only if its sha256 is `sha256` and its size
/// fits `limit` (the pin's size when there is one). Nothing is left at
/// `dest`, nor beside it, otherwise. A fault of this machine (a full disk)
/// is a [`LocalFault`]: no other mirror can mend it.
pub fn download_verified(url: &str, sha256: &str, limit: Limit, what: &str, dest: &Path) -> Result<()> {
    let mut attempt = 0;
    let part = loop {
        attempt += 1;
        let transient = match client().get_to_file(url, dest, limit, &kiln_http::Extra::default()) {
            Ok(kiln_http::Got::File(part)) => break part,
            Ok(kiln_http::Got::Status(r)) => {
                let transient = matches!(r.status, 408 | 429 | 500 | 502 | 503 | 504);
                let e = anyhow::anyhow!("cannot download {what}: {url} answered HTTP {}", r.status);
                if !transient || attempt == TRIES {
                    return Err(e);
                }
                e
            }
            Err(e) if e.is_local() => return Err(LocalFault(format!("cannot download {what}: {e}")).into()),
            // Longer than the pin: other bytes than pinned, as a wrong hash is.
            Err(e) if matches!((&e.kind, limit), (kiln_http::Kind::TooLarge { .. }, Limit::Exactly(_))) => {
                bail!(HashMismatch {
                    what: what.to_string(),
                    url: url.to_string(),
                    expected: sha256.to_string(),
                    actual: format!("(not hashed: more than the pinned {} bytes; {e})", limit_bytes(limit)),
                })
            }
            Err(e) => {
                let transient = matches!(e.kind, kiln_http::Kind::TimedOut { .. });
                let e = anyhow::anyhow!("cannot download {what}: {e}");
                if !transient || attempt == TRIES {
                    return Err(e);
                }
                e
            }
        };
        eprintln!("warning: {transient:#}; trying again");
        std::thread::sleep(std::time::Duration::from_secs(1 << (attempt - 1)));
    };
    let actual = hex(&part.sha256());
    if actual != sha256 {
        bail!(HashMismatch { what: what.to_string(), url: url.to_string(), expected: sha256.to_string(), actual });
    }
    part.persist(dest).map_err(|e| match e.is_local() {
        true => anyhow::Error::new(LocalFault(format!("cannot keep {what}: {e}"))),
        false => anyhow::anyhow!("cannot keep {what}: {e}"),
    })
}

fn limit_bytes(limit: Limit) -> u64 {
    match limit {
        Limit::Exactly(n) | Limit::AtMost(n) => n,
    }
}

/// A download that failed on this machine (a full disk, a folder that cannot
/// be written): the message names the folder; trying another mirror is pointless.
#[derive(Debug)]
pub struct LocalFault(pub String);

impl std::fmt::Display for LocalFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LocalFault {}

/// The cached copy of `deb`: the cache's tiers first (this machine's, then a
/// shared remote cache: the same bytes, checked against the same pin), else
/// downloaded from the first mirror that has it and written back to them.
pub fn fetch_deb(cache: &Cache, mirrors: &[String], deb: &Deb) -> Result<PathBuf> {
    let dir = cache.debs();
    fs::create_dir_all(&dir)?;
    let what = format!("{} {} ({})", deb.name, deb.version, deb.file_name());
    let local = Local::new(cache, dir, crate::cache::DEB_SUFFIX);
    let dest = local.blob(&deb.sha256);
    let tiers = http_tier::tiers(cache, local);
    if let Lookup::Hit(path) = tiers.get_blob(&deb.sha256, Some(deb.size), &what, "downloading from the mirrors")? {
        return Ok(path);
    }
    let mut errors = Vec::new();
    for mirror in mirrors {
        let url = format!("{mirror}/{}", deb.path);
        match download_verified(&url, &deb.sha256, Limit::Exactly(deb.size), &what, &dest) {
            Ok(()) => return tiers.put_blob(&deb.sha256, &dest),
            // A wrong hash is not a missing file: never fall through to another mirror silently.
            Err(e) if e.downcast_ref::<HashMismatch>().is_some() => return Err(e),
            // Nor is a full disk: the next mirror would fail the same way, and blame itself.
            Err(e) if e.downcast_ref::<LocalFault>().is_some() => return Err(e),
            Err(e) => errors.push(format!("  {url}: {e:#}")),
        }
    }
    bail!(
        "could not download {what} from any mirror in pins.toml [toolchain].mirrors:\n{}\n  \
         A live Debian mirror keeps only the current version of a package (trixie-backports and forky only \
         their newest upload), and snapshot.debian.org keeps every version. To go on: reach a mirror that \
         still has it (a snapshot.debian.org moment when it was in the archive, in [toolchain].mirrors), or a \
         remote cache that holds sha256 {} (--remote-cache), or re-pin to what the mirrors carry now: \
         `cargo xtask pins update`, then `cargo xtask dist --update-lock` (docs/toolchain.md#when-a-pinned-package-is-gone).",
        errors.join("\n"),
        deb.sha256
    )
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

/// The most an index (a channel file) may be.
pub const INDEX_CAP: u64 = 32 << 20;

/// `url`'s text, an index whose bytes no pin names (a Rust channel file): no
/// redirect, at most [`INDEX_CAP`] bytes, 200 only.
pub fn get_index(url: &str) -> Result<String> {
    static CLIENT: std::sync::OnceLock<kiln_http::Client> = std::sync::OnceLock::new();
    let client = CLIENT.get_or_init(|| kiln_http::Client::new(kiln_http::Options::new(concat!("kiln/", env!("CARGO_PKG_VERSION")))));
    let r = client.get_small(url, INDEX_CAP, &kiln_http::Extra::default())?;
    if r.status != 200 {
        bail!("{url} answered HTTP {}", r.status);
    }
    String::from_utf8(r.body).with_context(|| format!("{url} is not UTF-8 text"))
}
