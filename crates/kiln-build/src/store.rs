//! The artifact cache: one folder per content key holding the output, the
//! sha256 of the output, the recipe that produced it and the compiler's log.
//! Entries appear whole (a rename) or not at all, so an interrupted run or two
//! runs at once never leave a half-written entry; every read checks the
//! output against its recorded sha256, so a damaged entry is never shipped.
//! An output is a file, or a folder (a step that writes several files), whose
//! sha256 is that of its listing ([`output_sha256`]).
//! The entries are kiln-toolchain's tiers ([`kiln_toolchain::tiers`]): this
//! machine's folder, read through to a remote cache when one is configured
//! (a local miss is fetched, checked, and kept; a local build is written back).

use std::{
    fs,
    path::{Path, PathBuf},
};

use crate::job::Job;
use anyhow::{Context, Result};
pub use kiln_toolchain::tiers::{output_sha256, Lookup, BOOKKEEPING, SECONDS_FILE, SHA256_FILE};
use kiln_toolchain::{
    cache::publish_dir,
    http_tier,
    tiers::{Answer, Local, Storage, Tiered},
    Cache,
};

/// Whether `s` is a number of seconds a job can take: finite, not negative,
/// and under a million (11 days). What a cache entry, a remote record or
/// job-costs.toml says outside it is damage, not a time: it would make
/// sums of milliseconds overflow and shard cuts meaningless.
pub fn is_job_seconds(s: f64) -> bool {
    s.is_finite() && (0.0..1e6).contains(&s)
}

#[derive(Clone, Debug)]
pub struct Store {
    local: Local,
    tiers: Tiered,
    cache: Cache,
}

impl Store {
    pub fn new(cache: &Cache) -> Store {
        let local = Local::new(cache, cache.debs(), kiln_toolchain::cache::DEB_SUFFIX);
        Store { local: local.clone(), tiers: http_tier::tiers(cache, local), cache: cache.clone() }
    }

    /// Where the entry of `key` lives: `objects/<first two hex digits>/<key>/`.
    pub fn entry(&self, key: &str) -> PathBuf {
        self.local.entry(key)
    }

    /// The cached output for `key`, checked against the sha256 its entry
    /// recorded when it was made. A damaged entry is moved aside to the
    /// cache's `damaged/` folder (kept, not deleted: it is evidence) and
    /// reported, so that the job is built again.
    /// A miss, or a damaged entry, is looked up in the remote cache if there is one.
    pub fn get(&self, key: &str, output: &str) -> Lookup {
        self.tiers.get_entry(key, output)
    }

    /// The local cache's entry alone.
    pub fn get_local(&self, key: &str, output: &str) -> Lookup {
        match self.local.get_entry(key, output, Path::new("")) {
            Answer::Found(f) => Lookup::Hit(f.path),
            Answer::Miss => Lookup::Miss,
            Answer::Damaged(m) | Answer::Failed(m) => Lookup::Damaged(m),
        }
    }

    /// Moves a finished job folder (`output`, `recipe.txt`, `build.log`) into
    /// the cache, with the output's sha256 recorded, and returns the output's
    /// cached path; written back to the remote cache too, if there is one.
    pub fn put(&self, key: &str, job_dir: &Path, output: &str) -> Result<PathBuf> {
        fs::write(job_dir.join(SHA256_FILE), output_sha256(&job_dir.join(output))?)?;
        self.tiers.put_entry(key, job_dir, output)
    }

    /// Makes the entry of `key` from a file built elsewhere (a `dist --shard`
    /// part) whose sha256 the caller checked: `recipe` is this machine's
    /// recipe for the key, `origin` says where the bytes came from. An entry
    /// that is already here must hold the same bytes.
    pub fn import(&self, key: &str, recipe: &str, output: &str, file: &Path, sha256: &str, origin: &str) -> Result<PathBuf> {
        if Job::key(recipe) != key {
            anyhow::bail!("the recipe given for {key} does not hash to it");
        }
        if let Lookup::Hit(path) = self.get_local(key, output) {
            let here = output_sha256(&path)?;
            if here != sha256 {
                anyhow::bail!(
                    "{origin} has sha256 {sha256}, but this machine's cache entry {} for the same job has {here}: \
                     the same inputs gave other bytes on two machines (is the compiler deterministic?)",
                    self.entry(key).display()
                );
            }
            return Ok(path);
        }
        let dir = self.cache.scratch("import")?;
        let result = (|| -> Result<PathBuf> {
            fs::copy(file, dir.join(output)).with_context(|| format!("cannot copy {}", file.display()))?;
            fs::write(dir.join("recipe.txt"), recipe)?;
            fs::write(dir.join("build.log"), format!("imported from {origin}\n"))?;
            fs::write(dir.join(SHA256_FILE), sha256)?;
            let dest = self.entry(key);
            publish_dir(&dir, &dest)?;
            Ok(dest.join(output))
        })();
        if result.is_err() {
            fs::remove_dir_all(&dir).ok();
        }
        result
    }

    /// The seconds the job of `key` took where it was built, if its entry
    /// recorded them as a number of seconds: a negative, infinite or NaN
    /// record (a damaged or hostile entry, local or fetched from a remote
    /// cache) counts as none, so it never reaches job-costs.toml.
    pub fn seconds(&self, key: &str) -> Option<f64> {
        let s: f64 = fs::read_to_string(self.entry(key).join(SECONDS_FILE)).ok()?.trim().parse().ok()?;
        is_job_seconds(s).then_some(s)
    }
}

/// Makes `dest` hold the bytes of `src`, a file or a folder (hard links when
/// possible: cached outputs are never modified in place).
pub fn link_or_copy(src: &Path, dest: &Path) -> Result<()> {
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent)?;
    }
    if src.is_dir() {
        fs::create_dir_all(dest)?;
        for e in fs::read_dir(src)? {
            let e = e?;
            link_or_copy(&e.path(), &dest.join(e.file_name()))?;
        }
        return Ok(());
    }
    let _ = fs::remove_file(dest);
    if fs::hard_link(src, dest).is_err() {
        fs::copy(src, dest)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_time_is_read_only_when_it_is_a_number_of_seconds() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::new(&Cache::at(root.path().to_path_buf()).unwrap());
        let key = "ab".repeat(32);
        fs::create_dir_all(store.entry(&key)).unwrap();
        for (text, want) in [("12.5\n", Some(12.5)), ("0", Some(0.0)), ("-5", None), ("NaN", None), ("inf", None), ("soon", None), ("1e300", None)] {
            fs::write(store.entry(&key).join(SECONDS_FILE), text).unwrap();
            assert_eq!(store.seconds(&key), want, "{text:?}");
        }
    }
}
