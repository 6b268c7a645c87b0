//! Reading a written dist folder back as a consumer gets it: every artifact
//! against the manifest, the manifest against `artifacts.lock`, the
//! packaged crates against `crates.json`, and every payload in them against
//! the manifest (inflated, at most its size) and the lock's payloads.

use std::path::Path;

use anyhow::{bail, Context, Result};
use kiln_toolchain::fetch;

use kiln_manifest::short;

use crate::{
    lock::{Lock, Made},
    package,
    set_manifest::SetManifest,
};

/// Checks `dist`: how many artifacts and crates it holds, or every problem found.
pub fn folder(dist: &Path, lock: &Lock) -> Result<(usize, usize)> {
    let mpath = dist.join(kiln_manifest::FILE_NAME);
    let text = std::fs::read_to_string(&mpath).with_context(|| format!("cannot read {}: run `cargo xtask dist` first", mpath.display()))?;
    let written = SetManifest::from_json(&text, &mpath.display().to_string())?;
    let m = &written.manifest;
    let mut problems = Vec::new();
    for a in &m.artifacts {
        let file = match kiln_manifest::regular_file_inside(dist, &a.path) {
            Ok(f) => f,
            Err(e) => {
                problems.push(format!("{}: {e}", a.path));
                continue;
            }
        };
        match fetch::sha256_file(&file) {
            Ok(h) if h == a.sha256 => {}
            Ok(h) => problems.push(format!("{}: sha256 {} but the manifest says {}", a.path, short(&h, 16), short(&a.sha256, 16))),
            Err(e) => problems.push(format!("{}: {e:#}", a.path)),
        }
    }
    let complete = m.artifacts.len() >= lock.artifacts.len();
    problems.extend(lock.check(&written.lock_name(), Made { manifest: Some(&written), complete, ..Default::default() }));
    let mut n = 0;
    let crates = dist.join(package::CRATES_DIR);
    if crates.join(package::CRATES_JSON).is_file() {
        match package::verify_cached(&crates) {
            Ok(records) => {
                n = records.len();
                problems.extend(payloads(dist, &written, &records, lock));
            }
            Err(e) => problems.push(format!("{}: {e:#}", crates.display())),
        }
    }
    if !problems.is_empty() {
        bail!("{} problem(s) in {}:\n  {}", problems.len(), dist.display(), problems.join("\n  "));
    }
    Ok((m.artifacts.len(), n))
}

/// Every payload the crates carry: an artifact's inflates (at most its
/// size) to the manifest's bytes, the main crate's embedded manifest to the
/// folder's `manifest.json` (and that crate's record of the payloads is the
/// manifest's: [`recorded`]), and each file is the one the lock's payloads
/// name, where the lock has them.
fn payloads(dist: &Path, written: &SetManifest, records: &[package::CrateRecord], lock: &Lock) -> Vec<String> {
    let mut problems = Vec::new();
    let mut digests = crate::lock::Digests::new();
    let mpath = dist.join(kiln_manifest::FILE_NAME);
    let manifest = std::fs::read(&mpath);
    let embedded = format!("/{}/{}", kiln_package::record::PAYLOAD_DIR, kiln_package::record::EMBEDDED_MANIFEST);
    for r in records {
        let file = dist.join(&r.file);
        let read = kiln_package::crate_file::read(&file).and_then(|bytes| Ok((kiln_package::record::payloads(r, &bytes)?, bytes)));
        let (carried, bytes) = match read {
            Ok(c) => c,
            Err(e) => {
                problems.push(format!("{}: {e:#}", file.display()));
                continue;
            }
        };
        for (path, data) in carried {
            let artifact = path.split_once(&format!("/{}/", kiln_package::record::PAYLOAD_DIR)).and_then(|(_, rel)| rel.strip_suffix(".zst"));
            if let Some(a) = artifact.and_then(|rel| written.manifest.artifacts.iter().find(|a| a.path == rel)) {
                if let Err(e) = kiln_package::compress::check(&data, a.size, &a.sha256) {
                    problems.push(format!("{path} (in {}): {e:#}, which the manifest gives {}", r.file, a.path));
                }
            } else if path.ends_with(&embedded) {
                let why = match &manifest {
                    Ok(m) => kiln_package::compress::check(&data, m.len() as u64, &kiln_manifest::sha256_hex(m)).err().map(|e| format!("{e:#}")),
                    Err(e) => Some(format!("cannot read {}: {e}", mpath.display())),
                };
                if let Some(why) = why {
                    problems.push(format!("{path} (in {}): {why}: the embedded manifest is not {}", r.file, mpath.display()));
                }
                problems.extend(recorded(r, &bytes, &written.manifest));
            }
            digests.insert(path, kiln_manifest::sha256_hex(&data));
        }
    }
    problems.extend(lock.check(&written.lock_name(), Made { payloads: Some(&digests), ..Default::default() }));
    problems
}

/// Why the main crate's run-time record of its payloads (its `src/generated.rs`),
/// which it checks every payload against, is not the one `manifest` makes
/// (`kiln_package::record::recorded_rs`); `None` when it is.
fn recorded(r: &package::CrateRecord, bytes: &[u8], manifest: &kiln_manifest::Manifest) -> Option<String> {
    use kiln_package::record::{generated_rs, recorded_rs, GENERATED_RS};
    let text = match generated_rs(r, bytes) {
        Ok(Some(text)) => text,
        Ok(None) => {
            return Some(format!(
                "{} (in {}): missing: the crate carries the embedded manifest but not its record of the payloads",
                GENERATED_RS, r.file
            ))
        }
        Err(e) => return Some(format!("{e:#}")),
    };
    let want = recorded_rs(manifest);
    if text.contains(&want) {
        return None;
    }
    let first = want.lines().find(|l| !text.lines().any(|t| t == *l)).unwrap_or("the table's length or order");
    Some(format!(
        "{} (in {}): its record of the payloads is not the manifest's; first differing: {} (package the dist again: `cargo xtask dist`)",
        GENERATED_RS,
        r.file,
        kiln_manifest::shown(first.trim())
    ))
}

/// `cargo xtask verify`: the dist folder `dist` re-hashed against its
/// manifest, and the manifest against the lock of the set it holds
/// (`artifacts.lock`, or `artifacts.<set>.lock`) in `locks`; returns the
/// artifacts and crates checked and the lock's name, with what the lock let go
/// unchecked ([`Lock::unchecked`]) appended: never silence.
pub fn against_its_lock(dist: &Path, locks: &Path) -> Result<(usize, usize, String)> {
    let mpath = dist.join(kiln_manifest::FILE_NAME);
    let text = std::fs::read_to_string(&mpath).with_context(|| format!("cannot read {}: run `cargo xtask dist` first", mpath.display()))?;
    let written = SetManifest::from_json(&text, &mpath.display().to_string())?;
    let lock_name = written.lock_name();
    let lock = Lock::load(&locks.join(&lock_name))?;
    let (artifacts, crates) = folder(dist, &lock)?;
    let lock_name = match lock.unchecked(&lock_name) {
        Some(note) => format!("{lock_name} ({note})"),
        None => lock_name,
    };
    Ok((artifacts, crates, lock_name))
}
