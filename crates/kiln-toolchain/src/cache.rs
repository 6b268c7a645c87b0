//! Where kiln keeps what it downloads and builds: outside the repository, so
//! that clones share it and `git clean` never throws away hours of compiling.

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};

/// The environment variable that moves the cache.
pub const ENV: &str = "KILN_CACHE_DIR";

/// The cache root: `$KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln`, else `~/.cache/kiln`.
#[derive(Clone, Debug)]
pub struct Cache {
    root: PathBuf,
}

impl Cache {
    pub fn from_env() -> Result<Cache> {
        let root = match std::env::var_os(ENV) {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => match std::env::var_os("XDG_CACHE_HOME") {
                Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("kiln"),
                _ => PathBuf::from(std::env::var_os("HOME").context("neither KILN_CACHE_DIR nor HOME is set")?).join(".cache/kiln"),
            },
        };
        Cache::at(root)
    }

    pub fn at(root: PathBuf) -> Result<Cache> {
        fs::create_dir_all(&root).with_context(|| format!("cannot create the kiln cache at {}", root.display()))?;
        // Absolute, so that sandbox bind mounts and messages never depend on the cwd.
        let root = root.canonicalize()?;
        Ok(Cache { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    /// Downloaded packages, named by their sha256.
    pub fn debs(&self) -> PathBuf {
        self.root.join("debs")
    }
    /// Unpacked toolchains, one folder per toolchain identity.
    pub fn toolchains(&self) -> PathBuf {
        self.root.join("toolchains")
    }
    /// Unpacked kernel source crates.
    pub fn sources(&self) -> PathBuf {
        self.root.join("sources")
    }
    /// Compiled artifacts, by cache key.
    pub fn objects(&self) -> PathBuf {
        self.root.join("objects")
    }
    /// Scratch space; everything here is disposable.
    pub fn tmp(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// A fresh, empty scratch folder that no other process is using.
    pub fn scratch(&self, label: &str) -> Result<PathBuf> {
        let tmp = self.tmp();
        fs::create_dir_all(&tmp)?;
        for n in 0u32.. {
            let dir = tmp.join(format!("{label}.{}.{n}", std::process::id()));
            match fs::create_dir(&dir) {
                Ok(()) => return Ok(dir),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).with_context(|| format!("cannot create {}", dir.display())),
            }
        }
        unreachable!()
    }
}

/// Moves a finished `tmp` into place at `dest` unless another process got
/// there first (then `tmp` is discarded). Readers see a whole entry or none.
pub fn publish_dir(tmp: &Path, dest: &Path) -> Result<()> {
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent)?;
    }
    match fs::rename(tmp, dest) {
        Ok(()) => Ok(()),
        Err(_) if dest.exists() => {
            fs::remove_dir_all(tmp).ok();
            Ok(())
        }
        Err(e) => Err(e).with_context(|| format!("cannot move {} to {}", tmp.display(), dest.display())),
    }
}
