//! A kernel set's sources when they are a crate from crates.io: fetched by
//! cargo (which checks the registry's checksum), checked again against the
//! pinned sha256, and unpacked into the cache. Upstream sources are never
//! copied into the repo.

use std::{fs, path::PathBuf};

use anyhow::{bail, Context, Result};
use kiln_toolchain::{cache::publish_dir, fetch, Cache};
use xshell::{cmd, Shell};

/// Names `.crate` files (`:`-separated) to use instead of fetching them with
/// cargo (the Nix build's fixed-output fetches): a crate's is the one whose
/// file name ends with `<name>-<version>.crate`; other crates are fetched.
pub const CRATE_ENV: &str = "KILN_SOURCE_CRATES";

/// An unpacked, verified source crate.
#[derive(Clone, Debug)]
pub struct SourceCrate {
    pub name: String,
    pub version: String,
    pub sha256: String,
    /// The crate root (holds Cargo.toml and src/).
    pub root: PathBuf,
}

/// Returns the unpacked crate, fetching it with cargo the first time.
pub fn fetch_crate(cache: &Cache, name: &str, version: &str, sha256: &str, say: &dyn Fn(String)) -> Result<SourceCrate> {
    let dest = cache.sources().join(format!("{name}-{version}-{}", &sha256[..16]));
    let done = |root: PathBuf| SourceCrate { name: name.into(), version: version.into(), sha256: sha256.into(), root };
    if dest.join(".kiln-verified").exists() {
        return Ok(done(dest));
    }

    // A `.crate` handed in (by the Nix build, which fetches it itself) is
    // checked exactly like one cargo fetched.
    let handed_in = std::env::var(CRATE_ENV).unwrap_or_default();
    let ours = handed_in.split(':').find(|f| !f.is_empty() && f.ends_with(&format!("{name}-{version}.crate")));
    let crate_file = match ours {
        Some(file) => PathBuf::from(file),
        None => cargo_fetch(cache, name, version, say)?,
    };
    let actual = fetch::sha256_file(&crate_file)?;
    if actual != sha256 {
        bail!(fetch::HashMismatch { what: format!("{name} {version}"), url: crate_file.display().to_string(), expected: sha256.into(), actual });
    }

    let tmp = cache.scratch("source")?;
    let unpacked = (|| -> Result<()> {
        let file = fs::File::open(&crate_file)?;
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
        archive.set_preserve_mtime(false);
        archive.unpack(&tmp).with_context(|| format!("cannot unpack {}", crate_file.display()))?;
        let inner = tmp.join(format!("{name}-{version}"));
        if !inner.join("Cargo.toml").exists() {
            bail!("{} does not hold {name}-{version}/Cargo.toml", crate_file.display());
        }
        fs::write(inner.join(".kiln-verified"), format!("{sha256}\n"))?;
        Ok(())
    })();
    if let Err(e) = unpacked {
        fs::remove_dir_all(&tmp).ok();
        return Err(e);
    }
    publish_dir(&tmp.join(format!("{name}-{version}")), &dest)?;
    fs::remove_dir_all(&tmp).ok();
    Ok(done(dest))
}

/// Has cargo download `name` `version` and returns the `.crate` file.
fn cargo_fetch(cache: &Cache, name: &str, version: &str, say: &dyn Fn(String)) -> Result<PathBuf> {
    let sh = Shell::new()?;
    let dir = cache.root().join("fetch").join(format!("{name}-{version}"));
    fs::create_dir_all(&dir)?;
    // A throwaway package whose only dependency is the pinned crate.
    fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"kiln-fetch\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\
             [lib]\npath = \"lib.rs\"\n[dependencies]\n{name} = \"={version}\"\n[workspace]\n"
        ),
    )?;
    fs::write(dir.join("lib.rs"), "")?;
    let manifest = dir.join("Cargo.toml");
    say(format!("fetching {name} {version} with cargo"));
    if cmd!(sh, "cargo fetch --offline --quiet --manifest-path {manifest}").quiet().ignore_stderr().run().is_err() {
        cmd!(sh, "cargo fetch --quiet --manifest-path {manifest}")
            .quiet()
            .run()
            .with_context(|| format!("cargo could not fetch {name} {version} from crates.io"))?;
    }
    find_in_cargo_cache(name, version)
}

fn find_in_cargo_cache(name: &str, version: &str) -> Result<PathBuf> {
    let home = match std::env::var_os("CARGO_HOME") {
        Some(h) => PathBuf::from(h),
        None => PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?).join(".cargo"),
    };
    let registry = home.join("registry/cache");
    let file = format!("{name}-{version}.crate");
    for entry in fs::read_dir(&registry).with_context(|| format!("cannot read {}", registry.display()))? {
        let candidate = entry?.path().join(&file);
        if candidate.exists() {
            return Ok(candidate);
        }
    }
    bail!("cargo fetched {name} {version} but {file} is not under {}", registry.display())
}

impl SourceCrate {
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }
}
