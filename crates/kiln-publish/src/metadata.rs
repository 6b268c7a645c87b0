//! The JSON that precedes a `.crate` in a publish request, built from the
//! normalized `Cargo.toml` inside it the way cargo builds it from the same
//! manifest (cargo's `ops::registry::publish::transmit`, the web API's
//! `NewCrate`).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::packaged::Packaged;

/// The publish request's metadata (the registry web API's `NewCrate`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct NewCrate {
    pub name: String,
    pub vers: String,
    pub deps: Vec<NewDep>,
    pub features: BTreeMap<String, Vec<String>>,
    pub authors: Vec<String>,
    pub description: Option<String>,
    pub documentation: Option<String>,
    pub homepage: Option<String>,
    /// The README's text (not its path).
    pub readme: Option<String>,
    pub readme_file: Option<String>,
    pub keywords: Vec<String>,
    pub categories: Vec<String>,
    pub license: Option<String>,
    pub license_file: Option<String>,
    pub repository: Option<String>,
    pub badges: BTreeMap<String, BTreeMap<String, String>>,
    pub links: Option<String>,
    #[serde(default)]
    pub rust_version: Option<String>,
}

/// One dependency in a publish request.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct NewDep {
    /// The package's real name.
    pub name: String,
    pub version_req: String,
    pub features: Vec<String>,
    pub optional: bool,
    pub default_features: bool,
    pub target: Option<String>,
    /// `normal`, `build` or `dev`.
    pub kind: String,
    /// The index URL of the registry it comes from; `None`: the registry
    /// published to.
    pub registry: Option<String>,
    /// The name in `[dependencies]` when it renames the package.
    pub explicit_name_in_toml: Option<String>,
}

fn strings(v: Option<&toml::Value>) -> Vec<String> {
    v.and_then(|v| v.as_array()).map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect()).unwrap_or_default()
}

fn string(t: &toml::Table, key: &str) -> Option<String> {
    t.get(key).and_then(|v| v.as_str()).map(String::from)
}

/// Where the crates' dependencies come from once published: a dependency on
/// one of the `family` (the crates published together) is in the registry
/// published to; any other one is where its manifest says: `registry-index`,
/// or crates.io when it names none.
///
/// This is where kiln departs from `cargo publish`, which would record a
/// family dependency as a crates.io one (the `.crate` was packaged without a
/// registry, and `Cargo.toml` means crates.io then). kiln packages once and
/// publishes the same bytes to any registry, so the family goes together.
pub struct Sources<'a> {
    pub family: &'a BTreeSet<String>,
    /// The index URL of the registry published to, as the index records it
    /// (`https://...`, no `sparse+`).
    pub target_index: &'a str,
    pub target_is_crates_io: bool,
}

/// Index URLs compared the way a registry would: without `sparse+` and a
/// trailing slash.
pub fn same_index(a: &str, b: &str) -> bool {
    let norm = |s: &str| s.trim_start_matches("sparse+").trim_end_matches('/').to_string();
    norm(a) == norm(b)
}

pub fn new_crate(p: &Packaged, sources: &Sources) -> Result<NewCrate> {
    let pkg = p.package();
    let mut deps = Vec::new();
    collect_deps(&p.manifest, None, sources, &mut deps)?;
    if let Some(targets) = p.manifest.get("target").and_then(|t| t.as_table()) {
        for (spec, table) in targets {
            let table = table.as_table().with_context(|| format!("[target.{spec:?}] is not a table"))?;
            collect_deps(table, Some(spec), sources, &mut deps)?;
        }
    }
    let features = p
        .manifest
        .get("features")
        .and_then(|f| f.as_table())
        .map(|t| t.iter().map(|(k, v)| (k.clone(), strings(Some(v)))).collect())
        .unwrap_or_default();
    Ok(NewCrate {
        name: p.name().to_string(),
        vers: p.version().to_string(),
        deps,
        features,
        authors: strings(pkg.get("authors")),
        description: string(pkg, "description"),
        documentation: string(pkg, "documentation"),
        homepage: string(pkg, "homepage"),
        readme: p.readme.clone(),
        readme_file: string(pkg, "readme"),
        keywords: strings(pkg.get("keywords")),
        categories: strings(pkg.get("categories")),
        license: string(pkg, "license"),
        license_file: string(pkg, "license-file"),
        repository: string(pkg, "repository"),
        badges: BTreeMap::new(),
        links: string(pkg, "links"),
        rust_version: string(pkg, "rust-version"),
    })
}

fn collect_deps(table: &toml::Table, target: Option<&str>, sources: &Sources, out: &mut Vec<NewDep>) -> Result<()> {
    for (key, kind) in [
        ("dependencies", "normal"),
        ("build-dependencies", "build"),
        ("build_dependencies", "build"),
        ("dev-dependencies", "dev"),
        ("dev_dependencies", "dev"),
    ] {
        let Some(deps) = table.get(key).and_then(|d| d.as_table()) else { continue };
        for (toml_name, spec) in deps {
            out.push(dep(toml_name, spec, kind, target, sources).with_context(|| format!("dependency `{toml_name}` in [{key}]"))?);
        }
    }
    Ok(())
}

fn dep(toml_name: &str, spec: &toml::Value, kind: &str, target: Option<&str>, sources: &Sources) -> Result<NewDep> {
    let empty = toml::Table::new();
    let (version, t) = match spec {
        toml::Value::String(v) => (Some(v.clone()), &empty),
        toml::Value::Table(t) => (string(t, "version"), t),
        _ => bail!("neither a version nor a table"),
    };
    let Some(version) = version else {
        bail!("has no version requirement (a registry cannot resolve path or git dependencies)");
    };
    // As cargo sends it: the requirement parsed and printed (`0.9` → `^0.9`).
    let req = semver::VersionReq::parse(&version).with_context(|| format!("`{version}` is not a version requirement"))?;
    let name = string(t, "package").unwrap_or_else(|| toml_name.to_string());
    let registry = if sources.family.contains(&name) {
        None
    } else {
        let from = string(t, "registry-index").unwrap_or_else(|| crate::CRATES_IO_INDEX.to_string());
        let from_crates_io = same_index(&from, crate::CRATES_IO_INDEX);
        if (from_crates_io && sources.target_is_crates_io) || same_index(&from, sources.target_index) {
            None
        } else {
            Some(from.trim_start_matches("sparse+").to_string())
        }
    };
    let default_features = t.get("default-features").or_else(|| t.get("default_features")).and_then(|v| v.as_bool()).unwrap_or(true);
    Ok(NewDep {
        explicit_name_in_toml: (name != toml_name).then(|| toml_name.to_string()),
        name,
        version_req: req.to_string(),
        features: strings(t.get("features")),
        optional: t.get("optional").and_then(|v| v.as_bool()).unwrap_or(false),
        default_features,
        target: target.map(String::from),
        kind: kind.to_string(),
        registry,
    })
}

/// The request body: u32-LE length + JSON, u32-LE length + the `.crate`.
pub fn encode(meta: &NewCrate, crate_bytes: &[u8]) -> Result<Vec<u8>> {
    let json = serde_json::to_vec(meta)?;
    let mut body = Vec::with_capacity(8 + json.len() + crate_bytes.len());
    body.extend_from_slice(&u32::try_from(json.len())?.to_le_bytes());
    body.extend_from_slice(&json);
    body.extend_from_slice(&u32::try_from(crate_bytes.len())?.to_le_bytes());
    body.extend_from_slice(crate_bytes);
    Ok(body)
}

/// The inverse of [`encode`] (what a registry does with the body).
pub fn decode(body: &[u8]) -> Result<(NewCrate, &[u8])> {
    fn take<'a>(body: &'a [u8], at: &mut usize) -> Result<&'a [u8]> {
        let len_bytes: [u8; 4] = body.get(*at..*at + 4).context("the body ends inside a length")?.try_into()?;
        let len = u32::from_le_bytes(len_bytes) as usize;
        *at += 4;
        let part = body.get(*at..*at + len).context("the body is shorter than a length it declares")?;
        *at += len;
        Ok(part)
    }
    let mut at = 0;
    let json = take(body, &mut at)?;
    let meta: NewCrate = serde_json::from_slice(json).context("the metadata is not publish JSON")?;
    let krate = take(body, &mut at)?;
    if at != body.len() {
        bail!("{} bytes after the crate", body.len() - at);
    }
    Ok((meta, krate))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_round_trips_and_rejects_truncation() {
        let meta = NewCrate {
            name: "a".into(),
            vers: "1.0.0+x.1".into(),
            deps: vec![],
            features: BTreeMap::new(),
            authors: vec![],
            description: Some("d".into()),
            documentation: None,
            homepage: None,
            readme: None,
            readme_file: None,
            keywords: vec![],
            categories: vec![],
            license: Some("MIT".into()),
            license_file: None,
            repository: None,
            badges: BTreeMap::new(),
            links: None,
            rust_version: None,
        };
        let body = encode(&meta, b"crate bytes").unwrap();
        let (back, krate) = decode(&body).unwrap();
        assert_eq!(back, meta);
        assert_eq!(krate, b"crate bytes");
        let err = decode(&body[..body.len() - 1]).unwrap_err().to_string();
        assert!(err.contains("shorter"), "{err}");
    }

    #[test]
    fn index_urls_compare_without_sparse_and_slash() {
        assert!(same_index("sparse+http://127.0.0.1:1/index/", "http://127.0.0.1:1/index"));
        assert!(!same_index("sparse+http://127.0.0.1:1/index/", "http://127.0.0.1:2/index/"));
    }
}
