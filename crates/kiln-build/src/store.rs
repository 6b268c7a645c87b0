//! The artifact cache: one folder per content key holding the output, the
//! sha256 of the output, the recipe that produced it and the compiler's log.
//! Entries appear whole (a rename) or not at all, so an interrupted run or two
//! runs at once never leave a half-written entry; every read checks the
//! output against its recorded sha256, so a damaged entry is never shipped.
//! An output is a file, or a folder (a step that writes several files), whose
//! sha256 is that of its listing ([`output_sha256`]).
//! With a remote cache configured ([`kiln_toolchain::remote`]) a local miss
//! reads through to it and a local build is written back ([`crate::remote`]).

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use kiln_toolchain::{cache::publish_dir, fetch, Cache};

use crate::job::Job;

/// The file in each entry that records its output's sha256.
pub const SHA256_FILE: &str = "output.sha256";
/// The file in each entry that records how many seconds the job took where
/// it was built (what `dist --update-costs` reads).
pub const SECONDS_FILE: &str = "seconds";
/// Whether `s` is a number of seconds a job can take: finite, not negative,
/// and under a million (11 days). What a cache entry, a remote record or
/// job-costs.toml says outside it is damage, not a time: it would make
/// sums of milliseconds overflow and shard cuts meaningless.
pub fn is_job_seconds(s: f64) -> bool {
    s.is_finite() && (0.0..1e6).contains(&s)
}

/// The files of an entry beside its output: the output is the one file not listed here.
pub const BOOKKEEPING: &[&str] = &[SHA256_FILE, SECONDS_FILE, "recipe.txt", "build.log"];

/// What the cache has for a key.
#[derive(Debug)]
pub enum Lookup {
    Hit(PathBuf),
    Miss,
    /// The entry was damaged and has been moved aside; the message says what and where.
    Damaged(String),
}

/// Every key this process found or stored: what the current plan uses
/// (kiln-dist records it for `cargo xtask cache gc`).
static TOUCHED: std::sync::Mutex<std::collections::BTreeSet<String>> = std::sync::Mutex::new(std::collections::BTreeSet::new());

/// The keys [`Store::get`] hit or [`Store::put`] stored in this process.
pub fn touched_keys() -> Vec<String> {
    TOUCHED.lock().unwrap().iter().cloned().collect()
}

#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
    cache: Cache,
}

impl Store {
    pub fn new(cache: &Cache) -> Store {
        Store { dir: cache.objects(), cache: cache.clone() }
    }

    /// Where the entry of `key` lives: `objects/<first two hex digits>/<key>/`.
    pub fn entry(&self, key: &str) -> PathBuf {
        self.dir.join(kiln_manifest::short(key, 2)).join(key)
    }

    /// The cached output for `key`, checked against the sha256 its entry
    /// recorded when it was made. A damaged entry is moved aside to the
    /// cache's `damaged/` folder (kept, not deleted: it is evidence) and
    /// reported, so that the job is built again.
    /// A miss, or a damaged entry, is looked up in the remote cache if there is one.
    pub fn get(&self, key: &str, output: &str) -> Lookup {
        let local = self.get_local(key, output);
        let Some(remote) = self.cache.remote() else {
            return match local {
                Lookup::Damaged(m) => Lookup::Damaged(format!("{m} and building it again")),
                other => other,
            };
        };
        match local {
            Lookup::Hit(p) => Lookup::Hit(p),
            Lookup::Miss => self.fetch_remote(remote, key, output),
            Lookup::Damaged(m) => match self.fetch_remote(remote, key, output) {
                Lookup::Hit(p) => {
                    eprintln!("warning: {m}; fetched it again from the remote cache");
                    Lookup::Hit(p)
                }
                _ => Lookup::Damaged(format!("{m} and building it again")),
            },
        }
    }

    fn fetch_remote(&self, remote: &kiln_toolchain::remote::Remote, key: &str, output: &str) -> Lookup {
        match crate::remote::fetch(remote, &self.cache, key, output, &self.entry(key)) {
            Lookup::Hit(p) => {
                TOUCHED.lock().unwrap().insert(key.to_string());
                Lookup::Hit(p)
            }
            other => other,
        }
    }

    /// The local cache's entry alone.
    pub fn get_local(&self, key: &str, output: &str) -> Lookup {
        let entry = self.entry(key);
        let path = entry.join(output);
        // A link (even a dangling one) is not a miss: it is a damaged entry.
        if fs::symlink_metadata(&path).is_err() {
            return Lookup::Miss;
        }
        let actual = match output_sha256(&path) {
            Ok(h) => h,
            Err(e) => return self.damaged(key, format!("cannot read {output}: {e:#}")),
        };
        let record = entry.join(SHA256_FILE);
        match fs::read_to_string(&record) {
            Ok(recorded) if recorded.trim() == actual => {
                TOUCHED.lock().unwrap().insert(key.to_string());
                Lookup::Hit(path)
            }
            Ok(recorded) => self.damaged(key, format!("{output} has sha256 {actual}, but the entry recorded {}", recorded.trim())),
            // An entry made before hashes were recorded: its hash is recorded
            // now (atomically, beside it) and checked from then on.
            Err(_) => match write_atomic(&record, &actual) {
                Ok(()) => {
                    TOUCHED.lock().unwrap().insert(key.to_string());
                    Lookup::Hit(path)
                }
                Err(e) => self.damaged(key, format!("cannot record the sha256 of {output}: {e}")),
            },
        }
    }

    fn damaged(&self, key: &str, detail: String) -> Lookup {
        let entry = self.entry(key);
        Lookup::Damaged(match self.cache.move_aside(&entry, key) {
            Ok(aside) => format!("cache entry {} is damaged ({detail}); moved it to {}", entry.display(), aside.display()),
            Err(e) => format!("cache entry {} is damaged ({detail}) and could not be moved aside ({e:#})", entry.display()),
        })
    }

    /// Moves a finished job folder (`output`, `recipe.txt`, `build.log`) into
    /// the cache, with the output's sha256 recorded, and returns the output's cached path.
    pub fn put(&self, key: &str, job_dir: &Path, output: &str) -> Result<PathBuf> {
        fs::write(job_dir.join(SHA256_FILE), output_sha256(&job_dir.join(output))?)?;
        let dest = self.entry(key);
        // A damaged entry moved aside leaves nothing here; a rebuilt one replaces none.
        publish_dir(job_dir, &dest)?;
        TOUCHED.lock().unwrap().insert(key.to_string());
        if let Some(remote) = self.cache.remote() {
            crate::remote::push(remote, &self.cache, key, &dest, output);
        }
        Ok(dest.join(output))
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

fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("{}.part", std::process::id()));
    fs::write(&tmp, text)?;
    fs::rename(&tmp, path)
}

/// The sha256 of a file, or of a folder: of its listing, one line per file
/// (`<relative path> <sha256>`, sorted by path; folders are not listed, links
/// are refused, the path itself included).
pub fn output_sha256(path: &Path) -> Result<String> {
    let t = fs::symlink_metadata(path).with_context(|| format!("cannot read {}", path.display()))?.file_type();
    if t.is_file() {
        return fetch::sha256_file(path);
    }
    if !t.is_dir() {
        anyhow::bail!("{} is not a regular file or folder (a link?): an output is never followed elsewhere", path.display());
    }
    let mut files = Vec::new();
    list(path, path, &mut files)?;
    files.sort();
    let mut text = String::new();
    for (rel, file) in files {
        text.push_str(&format!("{rel} {}\n", fetch::sha256_file(&file)?));
    }
    Ok(kiln_manifest::sha256_hex(text.as_bytes()))
}

fn list(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) -> Result<()> {
    for e in fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let e = e?;
        let t = e.file_type()?;
        if t.is_dir() {
            list(root, &e.path(), out)?;
        } else if t.is_file() {
            let rel = e.path().strip_prefix(root).expect("below the root").to_string_lossy().into_owned();
            out.push((rel, e.path()));
        } else {
            anyhow::bail!("{} is neither a file nor a folder", e.path().display());
        }
    }
    Ok(())
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
