//! Provenance inside every crate: a CycloneDX 1.5 bill of materials
//! (`kiln-provenance.cdx.json`, written through the CycloneDX project's own
//! `cyclonedx-bom` crate) that names what made the crate's bytes: kiln (its
//! version, its commit, a digest of the code that writes crates), the pin
//! file's sha256, the toolchain's every package and wheel (name, version,
//! sha256, licence), the set's source crate, and per file of the crate its
//! sha256, and for each artifact payload the artifact it inflates to and the
//! job that compiled it (its command and every input with its sha256).
//!
//! Byte-identical across rebuilds: no serial number, no timestamp, every
//! list in a fixed order. `cargo xtask verify-crate` reads it back
//! ([`read`]) to rebuild what a crate claims.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use cyclonedx_bom::{
    external_models::{normalized_string::NormalizedString, uri::Purl},
    models::{
        bom::{Bom, SpecVersion},
        component::{Classification, Component, Components},
        hash::{Hash, HashAlgorithm, HashValue, Hashes},
        license::{License, LicenseChoice, Licenses},
        metadata::Metadata,
        property::{Properties, Property},
        tool::{Tool, Tools},
    },
};

/// The file's name inside every crate.
pub const FILE: &str = "kiln-provenance.cdx.json";

/// Where a package came from (its purl type).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Origin {
    /// A Debian package of the toolchain closure.
    Deb,
    /// A PyPI wheel.
    Wheel,
    /// A crate (the set's source crate).
    Crate,
}

impl Origin {
    fn purl_type(self) -> &'static str {
        match self {
            Origin::Deb => "deb",
            Origin::Wheel => "pypi",
            Origin::Crate => "cargo",
        }
    }
}

/// One pinned input.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Input {
    pub origin: Origin,
    pub name: String,
    pub version: String,
    pub sha256: String,
    /// Its licence as its packaging states it (a Debian copyright file's
    /// first `License:`, a wheel's or crate's licence field), if it states one.
    pub license: Option<String>,
}

/// The job that made an artifact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRecord {
    /// The command, against the sandbox's fixed paths.
    pub argv: Vec<String>,
    /// Every file it read: its path in the sandbox and sha256.
    pub inputs: Vec<(String, String)>,
}

/// What every crate of a set shares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetRecord {
    pub kiln_version: String,
    /// kiln's commit, when built from a git checkout.
    pub kiln_commit: Option<String>,
    /// sha256 over the code that writes crates (the template and the generator).
    pub kiln_sources_sha256: String,
    pub pins_sha256: String,
    pub set: String,
    pub toolchain_identity: String,
    pub inputs: Vec<Input>,
    /// By the artifact's manifest path.
    pub jobs: BTreeMap<String, JobRecord>,
}

/// A file in the crate, as the record lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrateFile {
    /// Its path in the crate (`payload/cuda/sm_90/affine.cubin.zst`).
    pub path: String,
    pub sha256: String,
    /// For a payload: the artifact it inflates to (manifest path, size, sha256).
    pub artifact: Option<(String, u64, String)>,
}

const P: &str = "kiln:";

fn prop(name: &str, value: &str) -> Property {
    Property::new(format!("{P}{name}"), value)
}

fn sha256(hex: &str) -> Hashes {
    Hashes(vec![Hash { alg: HashAlgorithm::SHA_256, content: HashValue(hex.to_string()) }])
}

/// The record of crate `name` `version`, holding `files`, as JSON text.
/// `set`: what built an artifact crate; `None` for kiln's own source crates
/// (kiln-target, kiln-manifest), whose bytes are their sources' alone and
/// must not change with kiln's commit (their version is kiln's own).
pub fn document(set: Option<&SetRecord>, kiln_version: &str, name: &str, version: &str, files: &[CrateFile]) -> Result<String> {
    let mut me = Component::new(Classification::Library, name, version, Some(format!("crate:{name}")));
    me.purl = Purl::new("cargo", name, version).ok();
    let mut kiln = Tool {
        vendor: None,
        name: Some(NormalizedString::new("kiln")),
        version: Some(NormalizedString::new(kiln_version)),
        hashes: None,
        external_references: None,
    };
    let mut props = Vec::new();
    if let Some(set) = set {
        kiln.hashes = Some(sha256(&set.kiln_sources_sha256));
        props.extend([
            prop("set", &set.set),
            prop("pins-sha256", &set.pins_sha256),
            prop("kiln-sources-sha256", &set.kiln_sources_sha256),
            prop("toolchain-identity", &set.toolchain_identity),
            prop("kiln-commit", set.kiln_commit.as_deref().unwrap_or("unknown")),
        ]);
    } else {
        props.push(prop("built-from", "kiln's own sources, as they are"));
    }
    let metadata = Metadata {
        timestamp: None,
        tools: Some(Tools::List(vec![kiln])),
        authors: None,
        component: Some(me),
        manufacture: None,
        supplier: None,
        licenses: None,
        properties: Some(Properties(props)),
        lifecycles: None,
    };
    let mut components = Vec::new();
    let mut inputs = set.map(|s| s.inputs.clone()).unwrap_or_default();
    inputs.sort();
    for i in &inputs {
        let mut c = Component::new(Classification::Library, &i.name, &i.version, Some(format!("{}:{}@{}", i.origin.purl_type(), i.name, i.version)));
        c.purl = Purl::new(i.origin.purl_type(), &i.name, &i.version).ok();
        c.hashes = Some(sha256(&i.sha256));
        c.licenses = i.license.as_ref().map(|l| Licenses(vec![LicenseChoice::License(License::named_license(l))]));
        c.properties = Some(Properties(vec![prop(
            "input",
            match i.origin {
                Origin::Deb => "toolchain package",
                Origin::Wheel => "pinned wheel",
                Origin::Crate => "source crate",
            },
        )]));
        components.push(c);
    }
    let mut files = files.to_vec();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    for f in &files {
        let mut c = Component::new(Classification::File, &f.path, "", Some(format!("file:{}", f.path)));
        c.version = None;
        c.hashes = Some(sha256(&f.sha256));
        let mut props = Vec::new();
        if let Some((path, size, sha)) = &f.artifact {
            props.push(prop("artifact", path));
            props.push(prop("artifact-size", &size.to_string()));
            props.push(prop("artifact-sha256", sha));
            if let Some(job) = set.and_then(|s| s.jobs.get(path)) {
                props.push(prop("job-argv", &serde_json::to_string(&job.argv)?));
                for (at, sha) in &job.inputs {
                    props.push(prop("job-input", &format!("{sha} {at}")));
                }
            }
        }
        if !props.is_empty() {
            c.properties = Some(Properties(props));
        }
        components.push(c);
    }
    let bom = Bom {
        version: 1,
        serial_number: None,
        metadata: Some(metadata),
        components: Some(Components(components)),
        services: None,
        external_references: None,
        dependencies: None,
        compositions: None,
        properties: None,
        vulnerabilities: None,
        signature: None,
        annotations: None,
        formulation: None,
        spec_version: SpecVersion::V1_5,
    };
    let mut out = Vec::new();
    bom.output_as_json_v1_5(&mut out).context("cannot write the CycloneDX record")?;
    out.push(b'\n');
    Ok(String::from_utf8(out).expect("serde_json writes UTF-8"))
}

/// What [`read`] finds in a crate's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claims {
    pub name: String,
    pub version: String,
    /// What built it; `None` for kiln's own source crates.
    pub built: Option<Built>,
    /// Every file the crate holds by its record: path → sha256.
    pub files: BTreeMap<String, String>,
    pub inputs: Vec<Input>,
}

/// What built an artifact crate, by its record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Built {
    pub set: String,
    pub pins_sha256: String,
    pub kiln_commit: String,
    pub kiln_sources_sha256: String,
    pub toolchain_identity: String,
}

/// Reads a crate's record (`what` names it in errors): a CycloneDX 1.5
/// document that validates, with kiln's properties.
pub fn read(text: &str, what: &str) -> Result<Claims> {
    let bom = Bom::parse_from_json_v1_5(text.as_bytes()).map_err(|e| anyhow::anyhow!("{what}: not a CycloneDX 1.5 document: {e}"))?;
    let meta = bom.metadata.as_ref().with_context(|| format!("{what}: no `metadata`"))?;
    let me = meta.component.as_ref().with_context(|| format!("{what}: no `metadata.component` (the crate it describes)"))?;
    let props: BTreeMap<String, String> =
        meta.properties.as_ref().map(|p| p.0.iter().map(|p| (p.name.clone(), p.value.to_string())).collect()).unwrap_or_default();
    let field = |name: &str| -> Result<String> {
        props.get(&format!("{P}{name}")).cloned().with_context(|| format!("{what}: no `{P}{name}` property in `metadata.properties`"))
    };
    let mut files = BTreeMap::new();
    let mut inputs = Vec::new();
    for c in bom.components.as_ref().map(|c| &c.0[..]).unwrap_or_default() {
        let sha = c
            .hashes
            .as_ref()
            .and_then(|h| h.0.iter().find(|h| h.alg == HashAlgorithm::SHA_256))
            .map(|h| h.content.0.clone())
            .with_context(|| format!("{what}: component `{}` has no SHA-256", c.name))?;
        if !kiln_manifest::is_sha256_hex(&sha) {
            bail!("{what}: component `{}`: `{sha}` is not a sha256", c.name);
        }
        match c.component_type {
            Classification::File => {
                files.insert(c.name.to_string(), sha);
            }
            _ => {
                let origin = match c.purl.as_ref().map(|p| p.to_string()) {
                    Some(p) if p.starts_with("pkg:deb/") => Origin::Deb,
                    Some(p) if p.starts_with("pkg:pypi/") => Origin::Wheel,
                    Some(p) if p.starts_with("pkg:cargo/") => Origin::Crate,
                    other => bail!("{what}: component `{}` has purl {other:?}, not a deb, pypi or cargo package", c.name),
                };
                let license = c.licenses.as_ref().and_then(|l| l.0.first()).map(|l| match l {
                    LicenseChoice::License(l) => match &l.license_identifier {
                        cyclonedx_bom::models::license::LicenseIdentifier::Name(n) => n.to_string(),
                        cyclonedx_bom::models::license::LicenseIdentifier::SpdxId(id) => id.to_string(),
                    },
                    LicenseChoice::Expression(e) => e.to_string(),
                });
                let version = c.version.as_ref().map(|v| v.to_string()).unwrap_or_default();
                inputs.push(Input { origin, name: c.name.to_string(), version, sha256: sha, license });
            }
        }
    }
    let built = if props.contains_key(&format!("{P}built-from")) {
        None
    } else {
        Some(Built {
            set: field("set")?,
            pins_sha256: field("pins-sha256")?,
            kiln_commit: field("kiln-commit")?,
            kiln_sources_sha256: field("kiln-sources-sha256")?,
            toolchain_identity: field("toolchain-identity")?,
        })
    };
    Ok(Claims { name: me.name.to_string(), version: me.version.as_ref().map(|v| v.to_string()).unwrap_or_default(), built, files, inputs })
}

/// A Debian `copyright` file's licence: the first `License:` field of a
/// machine-readable one (DEP-5), else `None`.
pub fn debian_license(copyright: &str) -> Option<String> {
    if !copyright.starts_with("Format:") {
        return None;
    }
    copyright.lines().find_map(|l| l.strip_prefix("License:")).map(|l| l.trim().to_string()).filter(|l| !l.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> SetRecord {
        let sha = |c: char| c.to_string().repeat(64);
        SetRecord {
            kiln_version: "0.1.0".into(),
            kiln_commit: Some("0123456789abcdef0123456789abcdef01234567".into()),
            kiln_sources_sha256: sha('a'),
            pins_sha256: sha('b'),
            set: "candle-kernels".into(),
            toolchain_identity: sha('c'),
            inputs: vec![
                Input {
                    origin: Origin::Deb,
                    name: "clang-17".into(),
                    version: "1:17.0.6-22+b2".into(),
                    sha256: sha('d'),
                    license: Some("Apache-2.0 with LLVM exception".into()),
                },
                Input {
                    origin: Origin::Crate,
                    name: "candle-kernels".into(),
                    version: "0.11.1".into(),
                    sha256: sha('e'),
                    license: Some("MIT OR Apache-2.0".into()),
                },
            ],
            jobs: [(
                "cuda/sm_90/affine.cubin".to_string(),
                JobRecord { argv: vec!["nvcc".into(), "-arch=sm_90".into()], inputs: vec![("/kiln/src/affine.cu".into(), sha('f'))] },
            )]
            .into(),
        }
    }

    #[test]
    fn a_record_reads_back_and_is_the_same_bytes_every_time() {
        let files = vec![
            CrateFile {
                path: "payload/cuda/sm_90/affine.cubin.zst".into(),
                sha256: "1".repeat(64),
                artifact: Some(("cuda/sm_90/affine.cubin".into(), 1234, "2".repeat(64))),
            },
            CrateFile { path: "Cargo.toml".into(), sha256: "3".repeat(64), artifact: None },
        ];
        let text = document(Some(&set()), "0.1.0", "kiln-candle-kernels-sm90", "0.11.1+kiln.1", &files).unwrap();
        assert_eq!(text, document(Some(&set()), "0.1.0", "kiln-candle-kernels-sm90", "0.11.1+kiln.1", &files).unwrap());
        assert!(!text.contains("serialNumber") && !text.contains("timestamp"), "{text}");
        assert!(text.contains("\"specVersion\": \"1.5\"") && text.contains("nvcc") && text.contains("/kiln/src/affine.cu"), "{text}");
        let claims = read(&text, "the record").unwrap();
        assert_eq!((claims.name.as_str(), claims.version.as_str()), ("kiln-candle-kernels-sm90", "0.11.1+kiln.1"));
        assert_eq!(claims.built.as_ref().unwrap().set, "candle-kernels");
        assert_eq!(claims.built.as_ref().unwrap().kiln_commit, "0123456789abcdef0123456789abcdef01234567");
        // kiln's own crates: no set, no commit (their bytes are their sources').
        let own = document(None, "0.1.0", "kiln-target", "0.1.0", &files[1..]).unwrap();
        assert!(!own.contains("kiln-commit") && !own.contains("clang"), "{own}");
        assert_eq!(read(&own, "own").unwrap().built, None);
        assert_eq!(claims.files.len(), 2);
        assert_eq!(claims.files["Cargo.toml"], "3".repeat(64));
        assert_eq!(claims.inputs.len(), 2);
        assert!(claims
            .inputs
            .iter()
            .any(|i| i.origin == Origin::Deb && i.name == "clang-17" && i.license.as_deref() == Some("Apache-2.0 with LLVM exception")));
    }

    #[test]
    fn a_damaged_record_is_an_error_naming_what_is_wrong() {
        let text = document(Some(&set()), "0.1.0", "k", "1.0.0", &[]).unwrap();
        assert!(format!("{:#}", read("{", "x.json").unwrap_err()).contains("x.json: not a CycloneDX 1.5 document"));
        let no_pins = text.replace("kiln:pins-sha256", "kiln:other");
        assert!(format!("{:#}", read(&no_pins, "x.json").unwrap_err()).contains("no `kiln:pins-sha256` property"));
        let bad_sha = text.replace(&"d".repeat(64), "not-a-hash");
        assert!(format!("{:#}", read(&bad_sha, "x.json").unwrap_err()).contains("is not a sha256"));
    }

    #[test]
    fn debian_licences_come_from_machine_readable_copyright_files_only() {
        assert_eq!(
            debian_license("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\nFiles: *\nLicense: MIT\n").as_deref(),
            Some("MIT")
        );
        assert_eq!(debian_license("This package was debianized by ...\nLicense: GPL\n"), None);
    }
}
