//! What a publish would do: the crates in dependency order, the metadata
//! each would be uploaded with, and every reason not to upload them.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Result};

use crate::{
    metadata::{self, NewCrate, Sources},
    packaged::Packaged,
    UPLOAD_LIMIT,
};

pub struct Item {
    pub packaged: Packaged,
    pub meta: NewCrate,
    /// Set for a crate that is not to go to this registry (the drop-in
    /// under upstream's name, on crates.io), with the reason.
    pub skip: Option<String>,
}

pub struct Plan {
    pub items: Vec<Item>,
    /// Reasons to upload nothing, each naming its crate.
    pub problems: Vec<String>,
}

/// The `[package.metadata.kiln] drop-in-for` of a crate: the upstream crate
/// it stands in for under the same name.
pub fn drop_in_for(p: &Packaged) -> Option<String> {
    let kiln = p.package().get("metadata")?.get("kiln")?;
    kiln.get("drop-in-for")?.as_str().map(String::from)
}

pub fn build(crates: Vec<Packaged>, target_index: &str, target_is_crates_io: bool) -> Result<Plan> {
    let family: BTreeSet<String> = crates.iter().map(|c| c.name().to_string()).collect();
    let sources = Sources { family: &family, target_index, target_is_crates_io };
    let mut problems = Vec::new();
    let mut items = Vec::new();
    for p in crates {
        let meta = match metadata::new_crate(&p, &sources) {
            Ok(m) => m,
            Err(e) => {
                problems.push(format!("{} {}: {e:#}", p.name(), p.version()));
                continue;
            }
        };
        let skip = drop_in_for(&p)
            .filter(|_| target_is_crates_io)
            .map(|up| format!("the drop-in under upstream's name: `{up}` on crates.io is candle's own crate (publish it to your own registry)"));
        items.push(Item { packaged: p, meta, skip });
    }
    let versions: BTreeMap<String, String> = items.iter().map(|i| (i.meta.name.clone(), i.meta.vers.clone())).collect();
    for item in &items {
        problems.extend(
            check(item, &versions)
                .into_iter()
                .map(|p| format!("{} {}: {p}", kiln_manifest::shown(&item.meta.name), kiln_manifest::shown(&item.meta.vers))),
        );
    }
    let items = order(items)?;
    Ok(Plan { items, problems })
}

/// What a registry (crates.io first of all) would refuse, or what kiln
/// promises about every crate: size, description, licence and its texts,
/// dependencies that resolve among the crates published together.
fn check(item: &Item, versions: &BTreeMap<String, String>) -> Vec<String> {
    let mut problems = Vec::new();
    let m = &item.meta;
    let size = item.packaged.bytes.len() as u64;
    if size > UPLOAD_LIMIT {
        problems.push(format!("{size} bytes, over the {UPLOAD_LIMIT}-byte upload limit of crates.io"));
    }
    if m.description.as_deref().is_none_or(|d| d.trim().is_empty()) {
        problems.push("no description".into());
    }
    let files = &item.packaged.files;
    match (&m.license, &m.license_file) {
        (None, None) => problems.push("neither license nor license-file".into()),
        (_, Some(f)) if !files.contains(f) => problems.push(format!("license-file {f} is not in the package")),
        _ => {}
    }
    // Every licence the expression names has its text in the package.
    if let Some(expr) = &m.license {
        for id in expr.split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == '/') {
            if id.is_empty() || ["OR", "AND", "WITH"].contains(&id) {
                continue;
            }
            let stem = id.split('-').next().unwrap_or(id).to_uppercase();
            let has_text = files.iter().any(|f| !f.contains('/') && f.to_uppercase().starts_with("LICENSE") && f.to_uppercase().contains(&stem));
            if !has_text {
                problems.push(format!("license names {id}, but no LICENSE-{stem}* file carries its text"));
            }
        }
    }
    for d in &m.deps {
        if let Some(v) = versions.get(&d.name) {
            let ok = semver::Version::parse(v).ok().zip(semver::VersionReq::parse(&d.version_req).ok()).is_some_and(|(v, r)| r.matches(&v));
            if !ok {
                problems.push(format!("depends on {} {}, but the one published with it is {v}", d.name, d.version_req));
            }
        }
    }
    problems
}

/// Dependencies first (any kind, any target: a registry may check that
/// they exist), ties by name so that the order is stable.
fn order(items: Vec<Item>) -> Result<Vec<Item>> {
    let names: BTreeSet<String> = items.iter().map(|i| i.meta.name.clone()).collect();
    let mut waiting: BTreeMap<String, (Item, BTreeSet<String>)> = items
        .into_iter()
        .map(|i| {
            let deps = i.meta.deps.iter().filter(|d| names.contains(&d.name) && d.name != i.meta.name).map(|d| d.name.clone()).collect();
            (i.meta.name.clone(), (i, deps))
        })
        .collect();
    let mut out = Vec::new();
    while !waiting.is_empty() {
        let Some(next) = waiting.iter().find(|(_, (_, deps))| deps.is_empty()).map(|(n, _)| n.clone()) else {
            let stuck: Vec<String> = waiting.keys().cloned().collect();
            bail!("the crates depend on each other in a cycle: {}", stuck.join(", "));
        };
        let (item, _) = waiting.remove(&next).unwrap();
        for (_, deps) in waiting.values_mut() {
            deps.remove(&next);
        }
        out.push(item);
    }
    Ok(out)
}
