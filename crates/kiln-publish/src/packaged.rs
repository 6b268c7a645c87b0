//! The packaged crates as `cargo xtask dist` left them: `crates/crates.json`
//! and the `.crate` files it names, read whole and checked against it.

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};

/// `crates.json`, relative to the dist folder.
/// `crates.json`, relative to the dist folder.
pub fn crates_json() -> String {
    format!("{}/{}", kiln_package::record::CRATES_DIR, kiln_package::record::CRATES_JSON)
}

/// One entry of `crates.json`, as kiln-dist writes it.
pub use kiln_package::record::CrateRecord as Record;

/// A `.crate` file, verified against its record, with what cargo put in it.
#[derive(Clone, Debug)]
pub struct Packaged {
    pub record: Record,
    pub path: PathBuf,
    pub bytes: Vec<u8>,
    /// The normalized `Cargo.toml` cargo wrote into the package: what a
    /// registry and every consumer see, so the upload metadata comes from it.
    pub manifest: toml::Table,
    /// Paths inside the package, relative to its `<name>-<version>/` folder.
    pub files: Vec<String>,
    /// The README's text, when the manifest names one.
    pub readme: Option<String>,
}

impl Packaged {
    pub fn name(&self) -> &str {
        &self.record.name
    }
    pub fn version(&self) -> &str {
        &self.record.version
    }
    pub fn package(&self) -> &toml::Table {
        static EMPTY: std::sync::OnceLock<toml::Table> = std::sync::OnceLock::new();
        self.manifest.get("package").and_then(|p| p.as_table()).unwrap_or_else(|| EMPTY.get_or_init(toml::Table::new))
    }
}

pub use kiln_manifest::sha256_hex;

/// Reads `crates.json` under `dist` and every crate it lists. A file whose
/// size or sha256 differs from its record is refused (all of them named):
/// what was packaged is what gets published, or nothing.
pub fn load(dist: &Path) -> Result<Vec<Packaged>> {
    let json_path = dist.join(crates_json());
    let text = match fs::read_to_string(&json_path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("{} does not exist: run `cargo xtask dist` first (it packages the crates)", json_path.display())
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", json_path.display())),
    };
    let records: Vec<Record> = serde_json::from_str(&text).with_context(|| format!("{} is not a list of crate records", json_path.display()))?;
    if records.is_empty() {
        bail!("{} lists no crates", json_path.display());
    }
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for record in records {
        // Inside the dist folder and a regular file: the loader's one check.
        let path = match kiln_manifest::regular_file_inside(dist, &record.file) {
            Ok(p) => p,
            Err(e) => {
                problems.push(format!("{}: `file` {:?}: {e}", json_path.display(), record.file));
                continue;
            }
        };
        let bytes = match kiln_package::crate_file::read(&path) {
            Ok(b) => b,
            Err(e) => {
                problems.push(format!("{e:#}"));
                continue;
            }
        };
        let sha = sha256_hex(&bytes);
        if sha != record.sha256 {
            problems.push(format!(
                "{}: sha256 is {sha}, but crates.json records {}: the file changed after `cargo xtask dist` packaged it",
                path.display(),
                record.sha256
            ));
            continue;
        }
        if bytes.len() as u64 != record.size {
            problems.push(format!("{}: {} bytes, but crates.json records {}", path.display(), bytes.len(), record.size));
            continue;
        }
        match read_package(&record, &bytes) {
            Ok((manifest, files, readme)) => out.push(Packaged { record, path, bytes, manifest, files, readme }),
            Err(e) => problems.push(format!("{}: {e:#}", path.display())),
        }
    }
    if !problems.is_empty() {
        bail!(
            "refusing to publish: {} of the packaged crates {} not what crates.json describes:\n  {}\nrerun `cargo xtask dist` to package them again",
            problems.len(),
            if problems.len() == 1 { "is" } else { "are" },
            problems.join("\n  ")
        );
    }
    Ok(out)
}

type Contents = (toml::Table, Vec<String>, Option<String>);

/// The normalized manifest, the file list and the README of a `.crate`
/// (a gzipped tar whose every path starts with `<name>-<version>/`).
pub fn read_package(record: &Record, bytes: &[u8]) -> Result<Contents> {
    let top = format!("{}-{}", record.name, record.version);
    let mut files = Vec::new();
    let mut texts = std::collections::BTreeMap::new();
    kiln_package::crate_file::for_each(bytes, &record.file, kiln_package::crate_file::LIMITS, |e, data| {
        if e.top != top {
            bail!("{}/{} is outside the package folder {top}/", kiln_manifest::shown(e.top), kiln_manifest::shown(e.rel));
        }
        let rel = e.rel.to_string();
        // Only small text files are kept: the manifest and a README.
        let file_name = rel.rsplit('/').next().unwrap_or_default().to_ascii_lowercase();
        if rel == "Cargo.toml" || file_name.starts_with("readme") {
            if data.len() >= 1 << 20 {
                if rel == "Cargo.toml" {
                    bail!("{top}/{rel} is over 1 MiB");
                }
            } else {
                let s = String::from_utf8(data).map_err(|_| anyhow::anyhow!("{top}/{} is not UTF-8", kiln_manifest::shown(&rel)))?;
                texts.insert(rel.clone(), s);
            }
        }
        files.push(rel);
        Ok(())
    })?;
    let prefix = format!("{top}/");
    let Some(toml_text) = texts.get("Cargo.toml") else {
        bail!("no {prefix}Cargo.toml in the package");
    };
    let manifest: toml::Table = toml_text.parse().context("its Cargo.toml does not parse")?;
    let package = manifest.get("package").and_then(|p| p.as_table()).context("its Cargo.toml has no [package]")?;
    let name = package.get("name").and_then(|v| v.as_str()).unwrap_or_default();
    let version = package.get("version").and_then(|v| v.as_str()).unwrap_or_default();
    if name != record.name || version != record.version {
        bail!("its Cargo.toml is for {name} {version}, but crates.json records {} {}", record.name, record.version);
    }
    let readme = match package.get("readme").and_then(|v| v.as_str()) {
        Some(r) => Some(texts.get(r).cloned().with_context(|| format!("its Cargo.toml names readme {r}, which is not in the package"))?),
        None => None,
    };
    files.sort();
    Ok((manifest, files, readme))
}
