//! `cargo xtask verify-crate`: a published kiln crate checked by rebuilding
//! it. The crate's provenance record ([`kiln_package::provenance`]) says
//! what made it; this checkout must hold the same pins (else the command
//! says which commit to check out); the crate's set is rebuilt with
//! [`Builder`] (the cache when it has the jobs, pinned downloads otherwise)
//! and the rebuilt `.crate` is compared with the given one byte for byte,
//! then file by file, each difference named with its likely cause.

use std::{
    collections::BTreeMap,
    fs,
    io::Read,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use kiln_manifest::sha256_hex;
use kiln_package::provenance::{self, Claims, Origin};
use kiln_pins::Pins;

use crate::Builder;

/// Files cargo writes into a `.crate` itself, which no record lists.
const CARGO_MADE: &[&str] = &["Cargo.toml", "Cargo.lock", ".cargo_vcs_info.json"];

/// What the check found.
#[derive(Debug)]
pub struct Verdict {
    pub name: String,
    pub version: String,
    /// The rebuilt `.crate` is the same bytes.
    pub reproduced: bool,
    /// Each difference, with its likely cause (empty when reproduced).
    pub differences: Vec<String>,
    /// How many files the record lists and were checked.
    pub files: usize,
}

/// A `.crate`'s files by their path inside the package folder; only regular
/// files, none outside it.
pub fn unpack(bytes: &[u8], what: &str) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    let mut out = BTreeMap::new();
    for entry in archive.entries().with_context(|| format!("{what}: not a gzipped tar archive (a .crate file)"))? {
        let mut entry = entry.with_context(|| format!("{what}: a damaged tar archive"))?;
        let path = entry.path().with_context(|| format!("{what}: an entry with an unreadable path"))?.to_string_lossy().into_owned();
        let Some((_, rel)) = path.split_once('/') else { bail!("{what}: {path} is not inside the package folder") };
        if rel.split('/').any(|c| c == ".." || c.is_empty()) || !entry.header().entry_type().is_file() {
            bail!("{what}: {path} is not a regular file inside the package folder");
        }
        let mut data = Vec::new();
        entry.read_to_end(&mut data).with_context(|| format!("{what}: cannot read {path}"))?;
        out.insert(rel.to_string(), data);
    }
    Ok(out)
}

/// The crate's own record, read and checked against the crate's bytes.
pub fn claims(files: &BTreeMap<String, Vec<u8>>, what: &str) -> Result<(Claims, Vec<String>)> {
    let Some(record) = files.get(provenance::FILE) else {
        bail!(
            "{what} holds no {}: it was not packaged by kiln (or by a kiln before provenance records), so there is nothing to rebuild it from",
            provenance::FILE
        )
    };
    let text = std::str::from_utf8(record).with_context(|| format!("{what}: {} is not UTF-8", provenance::FILE))?;
    let claims = provenance::read(text, &format!("{what}: {}", provenance::FILE))?;
    let mut problems = Vec::new();
    for (path, sha) in &claims.files {
        match files.get(path) {
            None => problems.push(format!("{path}: listed in the record, missing from the crate")),
            Some(b) if &sha256_hex(b) != sha => problems
                .push(format!("{path}: sha256 {} in the crate, the record says {sha}: the crate was changed after kiln packaged it", sha256_hex(b))),
            Some(_) => {}
        }
    }
    for path in files.keys().filter(|p| !claims.files.contains_key(*p) && *p != provenance::FILE && !CARGO_MADE.contains(&p.as_str())) {
        problems.push(format!("{path}: in the crate, not in its record: added after kiln packaged it"));
    }
    Ok((claims, problems))
}

/// This checkout can rebuild what `claims` names: the same toolchain
/// packages and the same pin file.
pub fn same_pins(claims: &Claims, pins: &Pins, what: &str) -> Result<()> {
    let Some(built) = &claims.built else { return Ok(()) };
    let closure = pins.closure()?;
    for i in claims.inputs.iter().filter(|i| i.origin == Origin::Deb) {
        if !closure.debs.iter().any(|d| d.name == i.name && d.version == i.version && d.sha256 == i.sha256) {
            bail!(
                "{what} was built with toolchain package {} {} (sha256 {}), which {} does not pin: check out kiln commit {} and run this again there",
                i.name,
                i.version,
                i.sha256,
                pins.file.display(),
                built.kiln_commit
            );
        }
    }
    let ours = sha256_hex(&fs::read(&pins.file).with_context(|| format!("cannot read {}", pins.file.display()))?);
    if ours != built.pins_sha256 {
        bail!(
            "{what} was built from a pin file with sha256 {}; {} has sha256 {ours}: check out kiln commit {} (whose pins.toml that is) and run this again there",
            built.pins_sha256,
            pins.file.display(),
            built.kiln_commit
        );
    }
    Ok(())
}

/// Rebuilds the crate described by `bytes` into `scratch` (a folder of the
/// caller's; the rebuilt dist goes below it) and compares.
pub fn check(pins: &Pins, kiln: &Path, bytes: &[u8], what: &str, scratch: &Path, say: &(dyn Fn(String) + Sync)) -> Result<Verdict> {
    let files = unpack(bytes, what)?;
    let (claims, problems) = claims(&files, what)?;
    if !problems.is_empty() {
        return Ok(Verdict { name: claims.name, version: claims.version, reproduced: false, differences: problems, files: files.len() });
    }
    same_pins(&claims, pins, what)?;
    let set = claims.built.as_ref().map_or_else(|| pins.main_set().name.clone(), |b| b.set.clone());
    let out: PathBuf = scratch.join("rebuilt");
    say(format!("{what}: rebuilding set `{set}` from {} into {}", pins.file.display(), out.display()));
    let dist = Builder::from_pins(pins).kiln_dir(kiln).base(kiln).only(&[set.as_str()]).out(&out).package(true).build(say)?;
    let outcome = dist.sets.iter().find(|s| s.set == set).with_context(|| format!("the rebuild made no set `{set}`"))?;
    let Some(record) = outcome.crates.iter().find(|r| r.name == claims.name) else {
        bail!(
            "{what}: the rebuild of set `{set}` packaged no crate {} (its crates: {})",
            claims.name,
            outcome.crates.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(", ")
        )
    };
    if record.version != claims.version {
        bail!(
            "{what} is {} {}, the rebuild packaged {} {}: the revision in pins.toml differs",
            claims.name,
            claims.version,
            record.name,
            record.version
        );
    }
    let rebuilt = fs::read(outcome.out.join(&record.file)).with_context(|| format!("cannot read the rebuilt {}", record.file))?;
    let n = claims.files.len();
    if sha256_hex(&rebuilt) == sha256_hex(bytes) {
        return Ok(Verdict { name: claims.name, version: claims.version, reproduced: true, differences: Vec::new(), files: n });
    }
    let again = unpack(&rebuilt, "the rebuilt crate")?;
    let mut differences = Vec::new();
    for path in files.keys().chain(again.keys()).collect::<std::collections::BTreeSet<_>>() {
        match (files.get(path), again.get(path)) {
            (Some(a), Some(b)) if a == b => {}
            (Some(_), Some(_)) => differences.push(format!("{path}: other bytes in the rebuild: {}", cause(path))),
            (Some(_), None) => differences.push(format!("{path}: not in the rebuild: {}", cause(path))),
            (None, _) => differences.push(format!("{path}: only in the rebuild: {}", cause(path))),
        }
    }
    if differences.is_empty() {
        differences.push("every file is the same, the archive is not: another cargo version packaged it".into());
    }
    Ok(Verdict { name: claims.name, version: claims.version, reproduced: false, differences, files: n })
}

/// The likely cause of a file's difference, by what the file is.
fn cause(path: &str) -> &'static str {
    if path == provenance::FILE {
        "what built it differs (another kiln commit, or kiln's crate-writing code; compare the two records)"
    } else if path.starts_with("payload/") {
        "a compiled artifact differs: another toolchain, or a compile that is not deterministic (the records name each job's command and inputs)"
    } else if CARGO_MADE.contains(&path) {
        "cargo's packaging differs (another cargo version)"
    } else {
        "kiln's template or generator differs (another kiln commit)"
    }
}
