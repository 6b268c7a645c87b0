//! Reading a written dist folder back as a consumer gets it: every artifact
//! against the manifest, the manifest against `artifacts.lock`, and the
//! packaged crates against `crates.json`.

use std::path::Path;

use anyhow::{bail, Context, Result};
use kiln_toolchain::fetch;

use kiln_manifest::short;

use crate::{lock::Lock, package, set_manifest::SetManifest};

/// Checks `dist`: how many artifacts and crates it holds, or every problem found.
pub fn folder(dist: &Path, lock: &Lock) -> Result<(usize, usize)> {
    let mpath = dist.join(kiln_manifest::FILE_NAME);
    let text = std::fs::read_to_string(&mpath).with_context(|| format!("cannot read {}: run `cargo xtask dist` first", mpath.display()))?;
    let written = SetManifest::from_json(&text, &mpath.display().to_string())?;
    let m = &written.manifest;
    let mut problems = Vec::new();
    for a in &m.artifacts {
        match fetch::sha256_file(&dist.join(&a.path)) {
            Ok(h) if h == a.sha256 => {}
            Ok(h) => problems.push(format!("{}: sha256 {} but the manifest says {}", a.path, short(&h, 16), short(&a.sha256, 16))),
            Err(e) => problems.push(format!("{}: {e:#}", a.path)),
        }
    }
    let complete = m.artifacts.len() >= lock.artifacts.len();
    problems.extend(lock.differences(&written, complete));
    let mut n = 0;
    let crates = dist.join(package::CRATES_DIR);
    if crates.join(package::CRATES_JSON).is_file() {
        match package::verify_cached(&crates) {
            Ok(records) => n = records.len(),
            Err(e) => problems.push(format!("{}: {e:#}", crates.display())),
        }
    }
    if !problems.is_empty() {
        bail!("{} problem(s) in {}:\n  {}", problems.len(), dist.display(), problems.join("\n  "));
    }
    Ok((m.artifacts.len(), n))
}

/// `cargo xtask verify`: the dist folder `dist` re-hashed against its
/// manifest, and the manifest against the lock of the set it holds
/// (`artifacts.lock`, or `artifacts.<set>.lock`) in `locks`; returns the
/// artifacts and crates checked and the lock's name.
pub fn against_its_lock(dist: &Path, locks: &Path) -> Result<(usize, usize, String)> {
    let mpath = dist.join(kiln_manifest::FILE_NAME);
    let text = std::fs::read_to_string(&mpath).with_context(|| format!("cannot read {}: run `cargo xtask dist` first", mpath.display()))?;
    let written = SetManifest::from_json(&text, &mpath.display().to_string())?;
    let lock_name = written.lock_name();
    let lock = Lock::load(&locks.join(&lock_name))?;
    let (artifacts, crates) = folder(dist, &lock)?;
    Ok((artifacts, crates, lock_name))
}
