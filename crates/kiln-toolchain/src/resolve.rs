//! Resolving `[toolchain]` into the exact package closure (`pins update`).
//!
//! apt does the dependency resolution against the pinned suite, with a
//! private configuration and an empty package database, so the answer does
//! not depend on what this machine has installed.

use std::{fs, path::PathBuf};

use anyhow::{bail, Context, Result};
use kiln_pins::{glob_match, Closure, Deb, Pins};
use xshell::{cmd, Shell};

use crate::cache::Cache;

/// Debian's archive keys; `KILN_DEBIAN_KEYRING` points elsewhere (e.g. a Nix store path).
fn keyring() -> String {
    std::env::var("KILN_DEBIAN_KEYRING").unwrap_or_else(|_| "/usr/share/keyrings/debian-archive-keyring.gpg".into())
}

struct Apt {
    dir: PathBuf,
    options: Vec<String>,
}

impl Apt {
    fn new(cache: &Cache, pins: &Pins) -> Result<Apt> {
        let keyring = keyring();
        if !std::path::Path::new(&keyring).exists() {
            bail!("{keyring} is missing: apt needs Debian's archive keys to trust the index (apt-get install debian-archive-keyring, or set KILN_DEBIAN_KEYRING)");
        }
        let t = &pins.toolchain;
        let dir = cache.root().join("apt").join(&t.suite);
        for sub in ["lists/partial", "archives/partial"] {
            fs::create_dir_all(dir.join(sub))?;
        }
        let sources = t
            .mirrors
            .iter()
            .take(1)
            .map(|m| format!("deb [signed-by={keyring}] {m} {} {}\n", t.suite, t.components.join(" ")))
            .collect::<String>();
        fs::write(dir.join("sources.list"), sources)?;
        fs::write(dir.join("status"), "")?;
        let d = dir.display();
        let options = [
            format!("Dir::Etc::SourceList={d}/sources.list"),
            "Dir::Etc::SourceParts=/dev/null".into(),
            format!("Dir::State::Lists={d}/lists"),
            format!("Dir::State::status={d}/status"),
            format!("Dir::Cache={d}"),
            "Dir::Cache::pkgcache=".into(),
            "Dir::Cache::srcpkgcache=".into(),
            "APT::Architecture=amd64".into(),
            "APT::Architectures=amd64".into(),
            "APT::Install-Recommends=false".into(),
            "Debug::NoLocking=true".into(),
            // The index is read, never installed from: no need for the _apt user.
            "APT::Sandbox::User=root".into(),
        ]
        .into_iter()
        .flat_map(|o| ["-o".to_string(), o])
        .collect();
        Ok(Apt { dir, options })
    }
}

/// The closure of the pinned compilers plus `include`, minus `exclude`.
pub fn resolve(cache: &Cache, pins: &Pins, say: &dyn Fn(String)) -> Result<Closure> {
    let sh = Shell::new()?;
    let apt = Apt::new(cache, pins)?;
    let o = &apt.options;
    let t = &pins.toolchain;
    say(format!("resolving {} {} from {} (apt state in {})", t.distribution, t.suite, t.mirrors[0], apt.dir.display()));
    cmd!(sh, "apt-get {o...} -qq update").quiet().run().context("apt-get update failed for the pinned suite")?;

    let mut roots: Vec<String> = pins.compilers().iter().map(|(_, p)| format!("{}={}", p.package, p.version)).collect();
    roots.extend(t.include.iter().cloned());
    for root in &roots {
        let name = root.split('=').next().unwrap();
        if let Some(p) = t.exclude.iter().find(|p| glob_match(p, name)) {
            bail!("`{name}` is both a root of the toolchain and excluded by `{p}` in pins.toml [toolchain].exclude");
        }
    }
    let sim = cmd!(sh, "apt-get {o...} install -s {roots...}").quiet().read().with_context(|| {
        format!("apt cannot install the pinned packages from {}: is every pinned version still in the suite?", t.suite)
    })?;
    let mut wanted = Vec::new();
    for line in sim.lines() {
        // Inst NAME (VERSION SUITE [ARCH])
        let Some(rest) = line.strip_prefix("Inst ") else { continue };
        let mut parts = rest.split_whitespace();
        let (Some(name), Some(version)) = (parts.next(), parts.next()) else { continue };
        let version = version.trim_start_matches('(');
        if t.exclude.iter().any(|p| glob_match(p, name)) {
            continue;
        }
        wanted.push(format!("{name}={version}"));
    }
    if wanted.is_empty() {
        bail!("apt resolved no packages; its output was:\n{sim}");
    }

    let show = cmd!(sh, "apt-cache {o...} show {wanted...}").quiet().read()?;
    let mut debs = Vec::new();
    for stanza in show.split("\n\n").filter(|s| !s.trim().is_empty()) {
        let field = |key: &str| {
            stanza.lines().find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(": ")).map(str::to_string))
        };
        let (Some(name), Some(version), Some(arch), Some(path), Some(size), Some(sha256)) = (
            field("Package"),
            field("Version"),
            field("Architecture"),
            field("Filename"),
            field("Size"),
            field("SHA256"),
        ) else {
            bail!("apt-cache printed a package record kiln cannot read:\n{stanza}");
        };
        if debs.iter().any(|d: &Deb| d.name == name) {
            continue; // the same version listed by two index files
        }
        debs.push(Deb { name, version, arch, sha256, size: size.parse()?, path });
    }
    debs.sort();
    let closure = Closure { debs };
    for (_, p) in pins.compilers() {
        if closure.find(&p.package).map(|d| &d.version) != Some(&p.version) {
            bail!("apt did not resolve {}={} as pinned", p.package, p.version);
        }
    }
    Ok(closure)
}
