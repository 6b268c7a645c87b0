//! What every generated crate shares: the template's files, `{{PLACEHOLDER}}`
//! filling, the crates' names and versions, and the licence texts.

use std::{collections::BTreeMap, fs, path::Path};

use anyhow::{bail, Context, Result};

use super::Inputs;

/// Placeholder values, by name.
pub type Vars = BTreeMap<&'static str, String>;

/// The generator's state: the inputs, the output folder, and what every crate uses.
pub struct Gen<'a> {
    pub inp: &'a Inputs<'a>,
    pub out: &'a Path,
    /// The main crate's name, and the version and exact requirement every crate shares.
    pub main: String,
    pub version: String,
    pub exact: String,
    /// The targets carried, for descriptions (`sm_80, ..., gfx90a`).
    pub targets: String,
    /// The main crate name and version of the crates that carry the CUDA
    /// runtime the static library's parts link: this set's, or another's.
    pub cudart: (String, String),
    mit: String,
    apache: String,
}

impl<'a> Gen<'a> {
    pub fn new(inp: &'a Inputs<'a>, out: &'a Path) -> Result<Gen<'a>> {
        let Some(artifact_crate) = &inp.set.artifact_crate else { bail!("set `{}` has no crate to generate", inp.set.name) };
        let Some(version) = inp.set.crate_version() else { bail!("set `{}`: a packaged set's source is a crate", inp.set.name) };
        let apache_path = &inp.toolchain.apache_license;
        let apache = fs::read_to_string(apache_path).with_context(|| format!("cannot read {}", apache_path.display()))?;
        let t = &inp.manifest.targets;
        let targets = t.cuda_sass.iter().chain(&t.hip).cloned().collect::<Vec<_>>().join(", ");
        let cudart = inp.cudart.clone().unwrap_or_else(|| (artifact_crate.name.clone(), version.clone()));
        let mut g =
            Gen { inp, out, main: artifact_crate.name.clone(), exact: exact_req(&version), version, targets, cudart, mit: String::new(), apache };
        g.mit = g.template("LICENSE-MIT")?;
        Ok(g)
    }

    /// A file of the template, by its path in `template/`.
    pub fn template(&self, rel: &str) -> Result<String> {
        fs::read_to_string(self.inp.sources.template.join(rel)).with_context(|| format!("template file {rel} is missing"))
    }

    /// A template file with its placeholders filled in.
    pub fn filled(&self, rel: &str, vars: &Vars) -> Result<String> {
        fill(&self.template(rel)?, vars)
    }

    /// Both licence texts kiln's crates are published under.
    pub fn licenses(&self, dir: &Path) -> Result<()> {
        write(&dir.join("LICENSE-MIT"), &self.mit)?;
        write(&dir.join("LICENSE-APACHE"), &self.apache)
    }

    /// For a crate holding code compiled from the set's sources and inputs:
    /// kiln's licence texts and the inputs' (`LICENSE-BSD-3-Clause-CUTLASS`); returns the
    /// crate's `license` expression.
    pub fn compiled_licenses(&self, dir: &Path) -> Result<String> {
        self.licenses(dir)?;
        let mut expr = String::from("MIT OR Apache-2.0");
        if !self.inp.input_licenses.is_empty() {
            expr = format!("({expr})");
        }
        for l in self.inp.input_licenses {
            write(&dir.join(&l.file), &l.text)?;
            expr = format!("{expr} AND {}", l.spdx);
        }
        Ok(expr)
    }

    /// The source crate's name and version (`candle-kernels`, `0.11.1`).
    pub fn upstream(&self) -> (&str, &str) {
        match &self.inp.set.source {
            kiln_pins::Source::Crate { name, version, .. } => (name, version),
            kiln_pins::Source::Folder { .. } => unreachable!("checked in Gen::new: a packaged set's source is a crate"),
        }
    }

    /// The placeholders every crate of the set may use, for the crate `name`.
    pub fn common(&self, name: &str) -> Vars {
        let (upstream, upstream_version) = self.upstream();
        let mut v = Vars::new();
        v.insert("NAME", name.to_string());
        v.insert("LIB_NAME", lib_name(name));
        v.insert("VERSION", self.version.clone());
        v.insert("MAIN", self.main.clone());
        v.insert("REPOSITORY", crate::sources::REPOSITORY.to_string());
        v.insert("KILN_VERSION", self.inp.kiln_version.to_string());
        v.insert("CANDLE_VERSION", upstream_version.to_string());
        v.insert("TARGETS", self.targets.clone());
        v.insert("EXACT", self.exact.clone());
        v.insert("UPSTREAM", upstream.to_string());
        v.insert("UPSTREAM_LIB", lib_name(upstream));
        v
    }
}

/// A crate's Rust library name.
pub fn lib_name(name: &str) -> String {
    name.replace('-', "_")
}

/// `=0.11.1` for version `0.11.1+kiln.1`: cargo ignores build metadata in a
/// requirement (and warns that it does), so the requirement says only what
/// it means. crates.io (like kiln's test registry) refuses two versions that
/// differ only in metadata, so `=` still names exactly one crate there.
pub fn exact_req(version: &str) -> String {
    format!("={}", version.split_once('+').map_or(version, |(v, _)| v))
}

pub fn fill(template: &str, vars: &Vars) -> Result<String> {
    let mut out = template.to_string();
    for (k, v) in vars {
        out = out.replace(&format!("{{{{{k}}}}}"), v);
    }
    if let Some(at) = out.find("{{") {
        let end = out[at..].find("}}").map_or(out.len(), |e| at + e + 2);
        bail!("template placeholder {} has no value", &out[at..end]);
    }
    Ok(out)
}

pub fn write(path: &Path, text: impl AsRef<[u8]>) -> Result<()> {
    if let Some(p) = path.parent() {
        fs::create_dir_all(p)?;
    }
    fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// A Rust slice of (artifact path, payload bytes) pairs, the payloads included from `../payload/`.
pub fn table(paths: &[String]) -> String {
    use std::fmt::Write as _;
    let mut s = String::from("&[\n");
    for p in paths {
        let _ = writeln!(s, "    ({p:?}, include_bytes!(\"../payload/{p}.zst\")),");
    }
    s.push(']');
    s
}

pub fn dir_size(dir: &Path) -> Result<u64> {
    let mut n = 0;
    for e in fs::read_dir(dir)? {
        let e = e?;
        n += if e.file_type()?.is_dir() { dir_size(&e.path())? } else { e.metadata()?.len() };
    }
    Ok(n)
}

/// The `version` a generated crate's Cargo.toml names.
pub fn package_version(dir: &Path) -> Result<String> {
    let path = dir.join("Cargo.toml");
    let text = fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let doc: toml::Table = toml::from_str(&text).with_context(|| format!("{}: not TOML", path.display()))?;
    doc.get("package")
        .and_then(|p| p.get("version"))
        .and_then(|v| v.as_str())
        .map(str::to_string)
        .with_context(|| format!("{}: no package.version", path.display()))
}
