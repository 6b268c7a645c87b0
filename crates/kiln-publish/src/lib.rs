//! Publishing kiln's kernel-artifact crates, and a registry to publish them to.
//!
//! [`packaged::load`] reads `crates/crates.json` from the dist folder and
//! every `.crate` it names, refusing any whose size or sha256 differs;
//! [`plan::build`] orders them by the dependencies in their normalized
//! `Cargo.toml` and builds the upload metadata from it as cargo would
//! ([`metadata`]); [`run`] prints the plan (a dry run by default) or uploads
//! the unchanged bytes through the registry web API (`PUT /api/v1/crates/new`).
//! [`serve`] starts ferro-cargo-registry-server, a registry others maintain,
//! on loopback (`cargo xtask registry serve`). The dev-only crate
//! `kiln-test-registry` is kiln's own small sparse registry: the tests'
//! fixture for what no maintained server that builds here offers (a token
//! check, crates.io's upload limit, other bytes under a version refused,
//! hostile requests answered; docs/registry.md).

pub mod attest;
pub mod http;
pub mod metadata;
pub mod packaged;
pub mod plan;
pub mod registry;
pub mod serve;

use std::{
    io::Write,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use crate::registry::{Config, IndexEntry, Registry};

/// crates.io refuses larger `.crate` files; kiln holds every registry to it.
pub const UPLOAD_LIMIT: u64 = 10_485_760;

/// crates.io's index as other registries' indexes name it.
pub const CRATES_IO_INDEX: &str = "https://github.com/rust-lang/crates.io-index";

pub struct Options {
    /// The dist folder (`target/dist`).
    pub dist: PathBuf,
    /// A registry name, as in `cargo publish --registry NAME`.
    pub registry: String,
    /// Upload; without it nothing is sent.
    pub execute: bool,
    /// How long to wait for each upload to show in the index before the
    /// next crate (whose dependencies must resolve) goes up.
    pub index_wait: Duration,
}

/// What a run did, crate by crate.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub uploaded: Vec<String>,
    pub already_there: Vec<String>,
    pub skipped: Vec<String>,
}

/// The registry's state for one crate of the plan.
enum State {
    New,
    /// The same version, byte for byte: nothing to do.
    Identical,
    /// Unknown: the registry could not be read (dry run only).
    Unknown,
}

/// Two versions a registry treats as one: equal but for build metadata.
pub fn same_version(a: &str, b: &str) -> bool {
    match (semver::Version::parse(a), semver::Version::parse(b)) {
        (Ok(a), Ok(b)) => (a.major, a.minor, a.patch, &a.pre) == (b.major, b.minor, b.patch, &b.pre),
        _ => a == b,
    }
}

pub fn run(opts: &Options, lookup: &registry::Lookup, out: &mut dyn Write) -> Result<Outcome> {
    let crates = packaged::load(&opts.dist)?;
    let reg = Registry::resolve(&opts.registry, lookup)?;
    let plan = plan::build(crates, &reg.index_base(), reg.is_crates_io())?;
    writeln!(
        out,
        "{} to registry `{}` ({}, from {}): {} crates in dependency order",
        if opts.execute { "publishing" } else { "dry run: would publish" },
        reg.name,
        reg.index,
        reg.index_from,
        plan.items.len()
    )?;

    // What the registry already has. A dry run still prints its plan when
    // the registry cannot be reached; a real run needs to know.
    let remote: Result<(Config, Vec<Vec<IndexEntry>>)> = reg.config().and_then(|config| {
        let entries = plan.items.iter().map(|i| reg.entries(&config, &i.meta.name)).collect::<Result<Vec<_>>>()?;
        Ok((config, entries))
    });
    let mut problems = plan.problems.clone();
    let mut states = Vec::new();
    let mut unread = None;
    match &remote {
        Ok((_, entries)) => {
            for (item, entries) in plan.items.iter().zip(entries) {
                let sha = &item.packaged.record.sha256;
                match entries.iter().find(|e| same_version(&e.vers, &item.meta.vers)) {
                    None => states.push(State::New),
                    Some(e) if &e.cksum == sha => states.push(State::Identical),
                    Some(e) => {
                        problems.push(format!(
                            "{} {}: the registry already has {} {} with other contents (sha256 {}, this one {sha}); registries treat versions that differ only in build metadata as one version, so a new revision needs a new version (docs/consuming.md, \"Versions\")",
                            item.meta.name,
                            kiln_manifest::shown(&item.meta.vers),
                            kiln_manifest::shown(&e.name),
                            kiln_manifest::shown(&e.vers),
                            kiln_manifest::shown(&e.cksum)
                        ));
                        states.push(State::New);
                    }
                }
            }
        }
        Err(e) => {
            if opts.execute {
                return Err(anyhow::anyhow!("{e:#}")).context(format!("cannot read registry `{}`", reg.name));
            }
            writeln!(out, "  (cannot read the registry, so the plan cannot say what it already has: {e:#})")?;
            unread = Some(format!("{e:#}"));
            states.extend(plan.items.iter().map(|_| State::Unknown));
        }
    }

    for (n, (item, state)) in plan.items.iter().zip(&states).enumerate() {
        let r = &item.packaged.record;
        let status = match (&item.skip, state) {
            (Some(_), _) => "skip",
            (None, State::Identical) => "already there",
            (None, State::New) => "new",
            (None, State::Unknown) => "?",
        };
        writeln!(out, "{:>4}. {:<40} {:>9} bytes  sha256 {}  [{status}]", n + 1, format!("{} {}", r.name, r.version), r.size, r.sha256)?;
        let deps: Vec<String> = item
            .meta
            .deps
            .iter()
            .map(|d| {
                let kind = if d.kind == "normal" { String::new() } else { format!("({}) ", d.kind) };
                let opt = if d.optional { " optional" } else { "" };
                let from = d.registry.as_deref().map_or(" (this registry)".to_string(), |r| {
                    if r == CRATES_IO_INDEX {
                        String::new()
                    } else {
                        format!(" ({r})")
                    }
                });
                format!("{kind}{} {}{opt}{from}", d.name, d.version_req)
            })
            .collect();
        writeln!(out, "        licence {}; deps: {}", licence(&item.meta), if deps.is_empty() { "none".into() } else { deps.join(", ") })?;
        if let Some(why) = &item.skip {
            writeln!(out, "        not for this registry: {why}")?;
        }
    }
    if !problems.is_empty() {
        bail!("refusing to publish to `{}`, nothing uploaded:\n  {}", reg.name, problems.join("\n  "));
    }
    let mut outcome = Outcome::default();
    if !opts.execute {
        match &unread {
            // On the last line, where a reader looks: the plan above could not be checked against the registry.
            Some(e) => writeln!(
                out,
                "dry run: nothing uploaded; registry `{}` could not be read ({e}), so the crates marked ? may already be there or be refused; --execute will stop unless it can read it",
                reg.name
            )?,
            None => writeln!(out, "dry run: nothing uploaded; pass --execute to upload")?,
        }
        return Ok(outcome);
    }
    let (config, _) = remote.expect("a real run returned early without it");
    let api = config.api.clone().with_context(|| format!("registry `{}` has no `api` in its config.json: it does not take uploads", reg.name))?;
    let token = reg.token.clone().with_context(|| {
        format!(
            "no token for registry `{}`: set {} or run `cargo login --registry {}`",
            reg.name,
            if reg.is_crates_io() { "CARGO_REGISTRY_TOKEN".to_string() } else { registry::env_key(&reg.name, "TOKEN") },
            reg.name
        )
    })?;
    let url = format!("{}/api/v1/crates/new", api.trim_end_matches('/'));
    for (item, state) in plan.items.iter().zip(&states) {
        let id = format!("{} {}", kiln_manifest::shown(&item.meta.name), kiln_manifest::shown(&item.meta.vers));
        if item.skip.is_some() {
            outcome.skipped.push(id);
            continue;
        }
        if matches!(state, State::Identical) {
            writeln!(out, "{id}: already in the registry with the same sha256, skipped")?;
            outcome.already_there.push(id);
            continue;
        }
        let body = metadata::encode(&item.meta, &item.packaged.bytes)?;
        let r = http::put(&url, &body, Some(&token))?;
        let text = r.text();
        let json: Option<serde_json::Value> = serde_json::from_str(&text).ok();
        let errors: Vec<String> = json
            .as_ref()
            .and_then(|j| j.get("errors"))
            .and_then(|e| e.as_array())
            .map(|a| a.iter().map(|e| e.get("detail").and_then(|d| d.as_str()).unwrap_or("?").to_string()).collect())
            .unwrap_or_default();
        if r.status != 200 || !errors.is_empty() {
            // The registry's words, escaped: a server's body never reaches the terminal raw.
            let detail = kiln_manifest::shown(if errors.is_empty() { text.trim().to_string() } else { errors.join("; ") }.as_str()).into_owned();
            let done = if outcome.uploaded.is_empty() {
                "nothing was uploaded".to_string()
            } else {
                format!("uploaded before it: {}", outcome.uploaded.join(", "))
            };
            bail!("{id}: the registry refused it (HTTP {}): {detail}\n{done}; a rerun skips what is already there", r.status);
        }
        writeln!(out, "{id}: uploaded ({} bytes)", item.packaged.bytes.len())?;
        if let Some(w) = json.as_ref().and_then(|j| j.get("warnings")) {
            let listed: Vec<String> = ["invalid_categories", "invalid_badges", "other"]
                .iter()
                .flat_map(|k| w.get(k).and_then(|v| v.as_array()).cloned().unwrap_or_default())
                .map(|v| v.as_str().map(String::from).unwrap_or_else(|| v.to_string()))
                .collect();
            for warning in listed {
                writeln!(out, "  registry warning: {}", kiln_manifest::shown(&warning))?;
            }
        }
        outcome.uploaded.push(id);
        wait_for_index(&reg, &config, item, opts.index_wait)?;
    }
    writeln!(out, "done: {} uploaded, {} already there, {} skipped", outcome.uploaded.len(), outcome.already_there.len(), outcome.skipped.len())?;
    Ok(outcome)
}

fn licence(m: &metadata::NewCrate) -> String {
    match (&m.license, &m.license_file) {
        (Some(l), _) => l.clone(),
        (None, Some(f)) => format!("file {f}"),
        (None, None) => "none".into(),
    }
}

/// Like `cargo publish`: a dependent uploaded before its dependency shows in
/// the index would not resolve (crates.io updates its index after the upload
/// returns).
fn wait_for_index(reg: &Registry, config: &Config, item: &plan::Item, limit: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        let entries = reg.entries(config, &item.meta.name)?;
        if entries.iter().any(|e| e.vers == item.meta.vers) {
            return Ok(());
        }
        if start.elapsed() > limit {
            bail!(
                "{} {} was uploaded but is not in the index after {:?}; rerun later (what is there is skipped)",
                kiln_manifest::shown(&item.meta.name),
                kiln_manifest::shown(&item.meta.vers),
                limit
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn build_metadata_does_not_make_a_new_version() {
        assert!(super::same_version("0.11.1+kiln.1", "0.11.1+kiln.2"));
        assert!(super::same_version("0.11.1", "0.11.1+kiln.2"));
        assert!(!super::same_version("0.11.1-rc.1", "0.11.1"));
        assert!(!super::same_version("0.11.2+kiln.1", "0.11.1+kiln.1"));
    }
}
