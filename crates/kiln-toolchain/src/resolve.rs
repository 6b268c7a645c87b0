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
    /// apt reading `[toolchain].suite`, and `extra` suites beside it at a lower
    /// priority: from those only what is asked for by version (or only they
    /// have) is taken.
    fn new(cache: &Cache, pins: &Pins, extra: &[String]) -> Result<Apt> {
        let keyring = keyring();
        if !std::path::Path::new(&keyring).exists() {
            bail!("{keyring} is missing: apt needs Debian's archive keys to trust the index (apt-get install debian-archive-keyring, or set KILN_DEBIAN_KEYRING)");
        }
        let t = &pins.toolchain;
        let suites: Vec<&String> = std::iter::once(&t.suite).chain(extra).collect();
        let dir = cache.root().join("apt").join(suites.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("+"));
        for sub in ["lists/partial", "archives/partial"] {
            fs::create_dir_all(dir.join(sub))?;
        }
        let sources = t
            .mirrors
            .iter()
            .take(1)
            .flat_map(|m| suites.iter().map(move |s| (m, s)))
            .map(|(m, s)| format!("deb [signed-by={keyring}] {m} {s} {}\n", t.components.join(" ")))
            .collect::<String>();
        fs::write(dir.join("sources.list"), sources)?;
        fs::write(dir.join("status"), "")?;
        // The extra suites in the order given: what the first has wins over a
        // newer version in the next (trixie-backports' lld-21 goes with its clang-21, not forky's).
        let preferences =
            extra.iter().enumerate().map(|(i, s)| format!("Package: *\nPin: release n={s}\nPin-Priority: {}\n\n", 500 - 10 * i)).collect::<String>();
        fs::write(dir.join("preferences"), preferences)?;
        let d = dir.display();
        let options = [
            format!("Dir::Etc::SourceList={d}/sources.list"),
            "Dir::Etc::SourceParts=/dev/null".into(),
            format!("Dir::Etc::Preferences={d}/preferences"),
            "Dir::Etc::PreferencesParts=/dev/null".into(),
            format!("Dir::State::Lists={d}/lists"),
            format!("Dir::State::status={d}/status"),
            format!("Dir::Cache={d}"),
            "Dir::Cache::pkgcache=".into(),
            "Dir::Cache::srcpkgcache=".into(),
            "APT::Architecture=amd64".into(),
            "APT::Architectures=amd64".into(),
            "APT::Install-Recommends=false".into(),
            // Everything the pins do not name by version comes from the first suite.
            format!("APT::Default-Release={}", t.suite),
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

/// The closure of the pinned compilers plus `include`, minus `exclude`; with a
/// newer AMD compiler pinned (`clang_next`), its packages resolved on top of
/// that from `next_suites`, so the first closure is the same with or without it.
pub fn resolve(cache: &Cache, pins: &Pins, say: &dyn Fn(String)) -> Result<Closure> {
    let t = &pins.toolchain;
    let pinned =
        |compilers: &[(&str, &kiln_pins::PackagePin)]| compilers.iter().map(|(_, p)| format!("{}={}", p.package, p.version)).collect::<Vec<_>>();
    let mut roots = pinned(&pins.first_compilers());
    roots.extend(t.include.iter().cloned());
    let where_excluded = "pins.toml [toolchain].exclude";
    let mut closure =
        Closure { debs: resolve_packages_in(cache, pins, &[], &roots, &t.exclude, where_excluded, say)?.into_iter().map(|p| p.deb).collect() };
    if let Some(next) = &t.amd_next {
        let mut roots = pinned(&pins.next_compilers());
        roots.extend(next.include.iter().cloned());
        let all = resolve_packages_in(cache, pins, &next.suites, &roots, &t.exclude, where_excluded, say)?;
        let added = on_top(all, &roots, &t.exclude, where_excluded, &closure)?;
        say(format!(
            "{} package(s) on top for {}: {}",
            added.debs.len(),
            next.clang.package,
            added.debs.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(" ")
        ));
        closure.debs.extend(added.debs);
        closure.debs.sort();
    }
    for (_, p) in pins.compilers() {
        if closure.find(&p.package).map(|d| &d.version) != Some(&p.version) {
            bail!("apt did not resolve {}={} as pinned", p.package, p.version);
        }
    }
    Ok(closure)
}

/// A resolved package and the dependency fields apt printed for it.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub deb: Deb,
    /// `Pre-Depends` and `Depends`, joined with `, `.
    pub depends: String,
    pub provides: String,
}

/// `roots` (`name` or `name=version`) and everything they depend on, as apt
/// resolves them in the pinned suite from nothing installed, minus what
/// `exclude` matches (`where_excluded` names that list in messages). Sorted by name.
pub fn resolve_packages(
    cache: &Cache,
    pins: &Pins,
    roots: &[String],
    exclude: &[String],
    where_excluded: &str,
    say: &dyn Fn(String),
) -> Result<Vec<Resolved>> {
    resolve_packages_in(cache, pins, &[], roots, exclude, where_excluded, say)
}

/// [`resolve_packages`] with `extra_suites` beside `[toolchain].suite`, each
/// below it and the first above the next (a runner image's `suites`): a
/// package named by version comes from whichever suite has it.
pub fn resolve_packages_in(
    cache: &Cache,
    pins: &Pins,
    extra_suites: &[String],
    roots: &[String],
    exclude: &[String],
    where_excluded: &str,
    say: &dyn Fn(String),
) -> Result<Vec<Resolved>> {
    let sh = Shell::new()?;
    let apt = Apt::new(cache, pins, extra_suites)?;
    let o = &apt.options;
    let t = &pins.toolchain;
    let suites = std::iter::once(&t.suite).chain(extra_suites).map(String::as_str).collect::<Vec<_>>().join(" + ");
    say(format!("resolving {} {suites} from {} (apt state in {})", t.distribution, t.mirrors[0], apt.dir.display()));
    cmd!(sh, "apt-get {o...} -qq update").quiet().run().with_context(|| format!("apt-get update failed for {suites}"))?;

    for root in roots {
        let name = root.split('=').next().unwrap();
        if let Some(p) = exclude.iter().find(|p| glob_match(p, name)) {
            bail!("`{name}` is both a root and excluded by `{p}` in {where_excluded}");
        }
    }
    let sim = cmd!(sh, "apt-get {o...} install -s {roots...}")
        .quiet()
        .read()
        .with_context(|| format!("apt cannot install {} from {suites}: is every pinned version still in the suite?", roots.join(" ")))?;
    let mut wanted = Vec::new();
    for line in sim.lines() {
        // Inst NAME (VERSION SUITE [ARCH])
        let Some(rest) = line.strip_prefix("Inst ") else { continue };
        let mut parts = rest.split_whitespace();
        let (Some(name), Some(version)) = (parts.next(), parts.next()) else { continue };
        let version = version.trim_start_matches('(');
        if exclude.iter().any(|p| glob_match(p, name)) {
            continue;
        }
        wanted.push(format!("{name}={version}"));
    }
    if wanted.is_empty() {
        bail!("apt resolved no packages; its output was:\n{sim}");
    }

    records(&sh, &apt, &wanted)
}

/// The index records of `wanted` (`name=version`), each alone: no
/// dependency is resolved (a runtime's header package, read but never
/// installed). Every one must be in `[toolchain].suite` or `extra_suites`.
pub fn package_records(cache: &Cache, pins: &Pins, extra_suites: &[String], wanted: &[String]) -> Result<Vec<Deb>> {
    let sh = Shell::new()?;
    let apt = Apt::new(cache, pins, extra_suites)?;
    let o = &apt.options;
    cmd!(sh, "apt-get {o...} -qq update").quiet().run().context("apt-get update failed")?;
    let out = records(&sh, &apt, wanted)?;
    for w in wanted {
        if !out.iter().any(|r| Some(format!("{}={}", r.deb.name, r.deb.version)).as_deref() == Some(w.as_str())) {
            bail!("apt's index has no `{w}` in {} {}", pins.toolchain.suite, extra_suites.join(" "));
        }
    }
    Ok(out.into_iter().map(|r| r.deb).collect())
}

fn records(sh: &Shell, apt: &Apt, wanted: &[String]) -> Result<Vec<Resolved>> {
    let o = &apt.options;
    let show = cmd!(sh, "apt-cache {o...} show {wanted...}").quiet().read().with_context(|| format!("apt-cache cannot show {}", wanted.join(" ")))?;
    let mut out: Vec<Resolved> = Vec::new();
    for stanza in show.split("\n\n").filter(|s| !s.trim().is_empty()) {
        let field = |key: &str| stanza.lines().find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(": ")).map(str::to_string));
        let (Some(name), Some(version), Some(arch), Some(path), Some(size), Some(sha256)) =
            (field("Package"), field("Version"), field("Architecture"), field("Filename"), field("Size"), field("SHA256"))
        else {
            bail!("apt-cache printed a package record kiln cannot read:\n{stanza}");
        };
        if out.iter().any(|d| d.deb.name == name) {
            continue; // the same version listed by two index files
        }
        let depends = [field("Pre-Depends"), field("Depends")].into_iter().flatten().collect::<Vec<_>>().join(", ");
        let provides = field("Provides").unwrap_or_default();
        out.push(Resolved { deb: Deb { name, version, arch, sha256, size: size.parse()?, path }, depends, provides });
    }
    out.sort_by(|a, b| a.deb.cmp(&b.deb));
    Ok(out)
}

/// `roots` resolved to sit on top of `below` (an unpacked closure that is
/// already there): what apt would add, less every package `below` already
/// has, less what nothing left needs. Each remaining package's dependencies
/// must then be met, at the versions asked for, by `below` or by the packages
/// added (or be left out on purpose by `exclude`); otherwise this fails
/// naming the package and the dependency, since apt's own answer assumed the
/// suite's newest versions, not `below`'s.
pub fn resolve_on_top(
    cache: &Cache,
    pins: &Pins,
    roots: &[String],
    exclude: &[String],
    where_excluded: &str,
    below: &Closure,
    say: &dyn Fn(String),
) -> Result<Closure> {
    let all = resolve_packages(cache, pins, roots, exclude, where_excluded, say)?;
    on_top(all, roots, exclude, where_excluded, below)
}

/// What `all` (apt's answer for `roots`) adds to `below`: see [`resolve_on_top`].
fn on_top(all: Vec<Resolved>, roots: &[String], exclude: &[String], where_excluded: &str, below: &Closure) -> Result<Closure> {
    let added: Vec<&Resolved> = all.iter().filter(|r| below.find(&r.deb.name).is_none()).collect();

    // Keep what the roots reach through packages that are added.
    let mut keep: Vec<&str> = Vec::new();
    let mut todo: Vec<&str> = roots.iter().map(|r| r.split('=').next().unwrap()).collect();
    while let Some(name) = todo.pop() {
        let Some(r) = added.iter().find(|r| r.deb.name == name) else { continue };
        if keep.contains(&name) {
            continue;
        }
        keep.push(name);
        for clause in r.depends.split(',').filter(|c| !c.trim().is_empty()) {
            for alt in clause.split('|') {
                todo.push(relation(alt).0);
            }
        }
    }
    let added: Vec<&Resolved> = added.into_iter().filter(|r| keep.contains(&r.deb.name.as_str())).collect();

    let sh = Shell::new()?;
    for r in &added {
        'clause: for clause in r.depends.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            let mut found = Vec::new();
            for alt in clause.split('|') {
                let (name, req) = relation(alt);
                if exclude.iter().any(|p| glob_match(p, name)) {
                    continue 'clause;
                }
                let have =
                    below.find(name).map(|d| d.version.clone()).or_else(|| added.iter().find(|a| a.deb.name == name).map(|a| a.deb.version.clone()));
                let provided = added.iter().any(|a| a.provides.split(',').any(|p| relation(p).0 == name));
                match (have, req) {
                    (Some(v), Some((op, want))) => {
                        if cmd!(sh, "dpkg --compare-versions {v} {op} {want}").quiet().ignore_status().output()?.status.success() {
                            continue 'clause;
                        }
                        found.push(format!("{name} {v}"));
                    }
                    (Some(_), None) => continue 'clause,
                    (None, None) if provided => continue 'clause,
                    (None, _) => {}
                }
            }
            bail!(
                "{} {} needs `{clause}`, which the packages below it do not meet{}.\n  \
                 Bump the toolchain (`cargo xtask pins update`), or leave the dependency out with {where_excluded} \
                 if nothing in the image runs it.",
                r.deb.name,
                r.deb.version,
                if found.is_empty() { String::new() } else { format!(" (they have {})", found.join(", ")) }
            );
        }
    }
    Ok(Closure { debs: added.into_iter().map(|r| r.deb.clone()).collect() })
}

/// `name:arch (op version)` as (name, Some((op, version))).
fn relation(text: &str) -> (&str, Option<(&str, &str)>) {
    let text = text.trim();
    let (name, rest) = text.split_once(' ').map_or((text, ""), |(n, r)| (n, r.trim()));
    let name = name.split(':').next().unwrap_or(name);
    let req =
        rest.strip_prefix('(').and_then(|r| r.strip_suffix(')')).and_then(|r| r.trim().split_once(' ')).map(|(op, v)| (op.trim(), v.trim())).map(
            |(op, v)| {
                (
                    if op == "<" {
                        "<="
                    } else if op == ">" {
                        ">="
                    } else {
                        op
                    },
                    v,
                )
            },
        );
    (name, req)
}

#[cfg(test)]
mod tests {
    use super::relation;

    #[test]
    fn relations_read_as_dpkg_writes_them() {
        assert_eq!(relation(" libc6 (>= 2.38)"), ("libc6", Some((">=", "2.38"))));
        assert_eq!(relation("libcurl4t64 (= 8.14.1-2+deb13u7)"), ("libcurl4t64", Some(("=", "8.14.1-2+deb13u7"))));
        assert_eq!(relation("python3:any"), ("python3", None));
        assert_eq!(relation("debconf-2.0 "), ("debconf-2.0", None));
        // `<` and `>` are the obsolete spellings of `<=` and `>=` (deb-control(5)).
        assert_eq!(relation("foo (< 1)"), ("foo", Some(("<=", "1"))));
    }
}
