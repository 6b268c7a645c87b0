//! The artifact cache: one folder per content key holding the output, the
//! recipe that produced it and the compiler's log. Entries appear whole (a
//! rename) or not at all, so an interrupted run or two runs at once never
//! leave a half-written entry.

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::Result;
use kiln_toolchain::{cache::publish_dir, Cache};

#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    pub fn new(cache: &Cache) -> Store {
        Store { dir: cache.objects() }
    }

    fn entry(&self, key: &str) -> PathBuf {
        self.dir.join(&key[..2]).join(key)
    }

    /// The cached output for `key`, if any.
    pub fn get(&self, key: &str, output: &str) -> Option<PathBuf> {
        let path = self.entry(key).join(output);
        path.is_file().then_some(path)
    }

    /// Moves a finished job folder (`output`, `recipe.txt`, `build.log`) into
    /// the cache and returns the output's cached path.
    pub fn put(&self, key: &str, job_dir: &Path, output: &str) -> Result<PathBuf> {
        let dest = self.entry(key);
        publish_dir(job_dir, &dest)?;
        Ok(dest.join(output))
    }

    /// The compiler log kept beside a cached output.
    pub fn log(&self, key: &str) -> PathBuf {
        self.entry(key).join("build.log")
    }
}

/// Makes `dest` hold the bytes of `src` (a hard link when possible: cached
/// artifacts are never modified in place).
pub fn link_or_copy(src: &Path, dest: &Path) -> Result<()> {
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent)?;
    }
    let _ = fs::remove_file(dest);
    if fs::hard_link(src, dest).is_err() {
        fs::copy(src, dest)?;
    }
    Ok(())
}
