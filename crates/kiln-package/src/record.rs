//! `crates/crates.json` in the dist folder: one record per packaged `.crate`.
//! Written by kiln-dist after packaging, read by kiln-publish (and the tests);
//! this is the one definition of it. Also what the packaged crates carry as
//! payloads ([`payloads`]), which the lock records and `verify` re-reads.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    path::Path,
};

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// The packaged crates' folder, relative to the dist folder.
pub const CRATES_DIR: &str = "crates";
/// The records' file name inside [`CRATES_DIR`].
pub const CRATES_JSON: &str = "crates.json";
/// The generated workspace the `.crate` files were packaged from, inside [`CRATES_DIR`].
pub const SOURCES_DIR: &str = "src";

/// One packaged crate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrateRecord {
    pub name: String,
    pub version: String,
    /// The `.crate` file, relative to the dist folder.
    pub file: String,
    pub size: u64,
    pub sha256: String,
    /// Artifact bytes carried, before and after zstd (0 for crates without payloads).
    #[serde(default)]
    pub raw_bytes: u64,
    #[serde(default)]
    pub payload_bytes: u64,
}

/// The folder of a crate's compressed payloads, inside its package.
pub const PAYLOAD_DIR: &str = "payload";

/// The main crate's embedded manifest (the set's `manifest.json`, zstd-compressed),
/// in [`PAYLOAD_DIR`]: a payload like the artifacts', locked and verified as one.
pub const EMBEDDED_MANIFEST: &str = "manifest.json.zst";

/// The main crate's generated source, which holds its run-time record of the
/// payloads ([`recorded_rs`]).
pub const GENERATED_RS: &str = "src/generated.rs";

/// The main crate's run-time record of the payloads, as `generated.rs` has
/// it: every artifact a crate carries as a payload (the parts of
/// [`crate::parts::tables`]), with the module, kind, arch, size and sha256 the
/// manifest gives it. The crate checks each payload against it as it inflates
/// it, so that loading a kernel needs no parse of the 5 MB embedded manifest
/// (whose reader was most of what a consumer's build compiled of kiln: docs/benchmarks.md);
/// `verify` checks the packaged crate's text is this, for the dist's manifest.
pub fn recorded_rs(manifest: &kiln_manifest::Manifest) -> String {
    let carried: BTreeSet<String> = crate::parts::tables(manifest).into_iter().flat_map(|p| p.paths).collect();
    let rows: Vec<&kiln_manifest::Artifact> = manifest.artifacts.iter().filter(|a| carried.contains(&a.path)).collect();
    let mut s = String::from("/// Every artifact a crate of this release carries as a payload, as the manifest records it.\n");
    let _ = writeln!(s, "pub(crate) static RECORDED: [Recorded; {}] = [", rows.len());
    for a in rows {
        let _ = writeln!(
            s,
            "    Recorded {{ module: {:?}, kind: kiln_manifest::Kind::{:?}, arch: {:?}, path: {:?}, size: {}, sha256: {:?} }},",
            a.module, a.kind, a.arch, a.path, a.size, a.sha256
        );
    }
    s.push_str("];\n");
    s
}

/// The text of the main crate's [`GENERATED_RS`] in the packaged crate `bytes`
/// that `record` describes; `None` where it has none.
pub fn generated_rs(record: &CrateRecord, bytes: &[u8]) -> Result<Option<String>> {
    let mut out = None;
    crate::crate_file::for_each(bytes, &record.file, crate::crate_file::LIMITS, |e, data| {
        if e.rel == GENERATED_RS {
            out = Some(String::from_utf8(data).map_err(|_| anyhow::anyhow!("{}: its {GENERATED_RS} is not UTF-8", record.file))?);
        }
        Ok(())
    })?;
    Ok(out)
}

/// Every payload file of the packaged crate `bytes` (a gzipped tar whose
/// paths start with `<name>-<version>/`) that `record` describes, as
/// (`<name>/payload/<file>`, compressed bytes): the `.zst` files below
/// [`PAYLOAD_DIR`] (the main crate's embedded `manifest.json.zst` among them).
pub fn payloads(record: &CrateRecord, bytes: &[u8]) -> Result<Vec<(String, Vec<u8>)>> {
    let top = format!("{}-{}", record.name, record.version);
    let prefix = format!("{PAYLOAD_DIR}/");
    let mut out = Vec::new();
    crate::crate_file::for_each(bytes, &record.file, crate::crate_file::LIMITS, |e, data| {
        if e.top != top {
            bail!("{}: its package folder is `{}`, not {top}", record.file, kiln_manifest::shown(e.top));
        }
        if let Some(rel) = e.rel.strip_prefix(&prefix).filter(|r| r.ends_with(".zst")) {
            out.push((format!("{}/{PAYLOAD_DIR}/{rel}", record.name), data));
        }
        Ok(())
    })?;
    Ok(out)
}

/// The sha256 of every payload file of the crates `records` lists (their
/// files relative to the dist folder `dist`), by `<crate>/payload/<file>`.
pub fn payload_digests(dist: &Path, records: &[CrateRecord]) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for r in records {
        let file = dist.join(&r.file);
        let bytes = crate::crate_file::read(&file)?;
        for (path, data) in payloads(r, &bytes)? {
            out.insert(path, kiln_manifest::sha256_hex(&data));
        }
    }
    Ok(out)
}
