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
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use kiln_manifest::{sha256_hex, shown};
use kiln_package::provenance::{self, Claims, Origin};
use kiln_pins::{KernelSet, Pins};

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

/// A `.crate`'s files by their path inside the package folder, read by
/// kiln's one bounded reader ([`kiln_package::crate_file`]).
pub fn unpack(bytes: &[u8], what: &str) -> Result<BTreeMap<String, Vec<u8>>> {
    kiln_package::crate_file::files(bytes, what)
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
            None => problems.push(format!("{}: listed in the record, missing from the crate", shown(path))),
            Some(b) if &sha256_hex(b) != sha => problems.push(format!(
                "{}: sha256 {} in the crate, the record says {sha}: the crate was changed after kiln packaged it",
                shown(path),
                sha256_hex(b)
            )),
            Some(_) => {}
        }
    }
    for path in files.keys().filter(|p| !claims.files.contains_key(*p) && *p != provenance::FILE && !CARGO_MADE.contains(&p.as_str())) {
        problems.push(format!("{}: in the crate, not in its record: added after kiln packaged it", shown(path)));
    }
    Ok((claims, problems))
}

/// kiln's own crates, packaged beside every set's from kiln's sources alone
/// (their record says `kiln:built-from`; their version is kiln's).
const KILN_OWN: &[&str] = &["kiln-target", "kiln-manifest"];

/// The set whose rebuild can reproduce crate `claims.name` `claims.version`,
/// decided by the crate's name and version against this checkout's pins,
/// never by what its record claims: the record must agree, and an opt-in set
/// (`default = false`, hours of compiling) is rebuilt only when `opt_in`.
pub fn set_to_rebuild<'p>(claims: &Claims, pins: &'p Pins, what: &str, opt_in: bool) -> Result<&'p KernelSet> {
    let (name, version) = (claims.name.as_str(), claims.version.as_str());
    let commit = || claims.built.as_ref().map_or_else(|| "that released it".to_string(), |b| shown(&b.kiln_commit).into_owned());
    if KILN_OWN.contains(&name) {
        let ours = env!("CARGO_PKG_VERSION");
        if version != ours {
            bail!(
                "{what} is {name} {}, this checkout's kiln is {ours}: check out the kiln commit of that version and run this again there",
                shown(version)
            );
        }
        if let Some(b) = &claims.built {
            bail!(
                "{what}: its record says set `{}` built it, but {name} is one of kiln's own crates (built from kiln's sources): refused",
                shown(&b.set)
            );
        }
        return Ok(pins.main_set());
    }
    let names = |s: &KernelSet| -> Vec<String> {
        let Some(c) = &s.artifact_crate else { return Vec::new() };
        let mut v = vec![c.name.clone()];
        if let kiln_pins::Source::Crate { name, .. } = &s.source {
            v.push(name.clone());
        }
        v
    };
    let owner = pins
        .sets
        .iter()
        .filter_map(|s| {
            let best = names(s)
                .into_iter()
                .filter(|n| name == n || name.strip_prefix(n.as_str()).is_some_and(|r| r.starts_with('-')))
                .map(|n| n.len())
                .max()?;
            Some((best, s))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, s)| s);
    let Some(set) = owner else {
        let known: Vec<String> = pins.sets.iter().flat_map(|s| names(s).into_iter().map(|n| format!("{n}[-<part>] (set `{}`)", s.name))).collect();
        bail!(
            "{what}: {} is no crate of a kernel set {} pins (its crates: {}, {}): nothing here rebuilds it",
            shown(name),
            pins.file.display(),
            known.join(", "),
            KILN_OWN.join(", ")
        );
    };
    let pinned = set.crate_version().unwrap_or_default();
    if version != pinned {
        bail!(
            "{what} is {name} {}; {} packages set `{}`'s crates at {pinned}: check out kiln commit {} and run this again there",
            shown(version),
            pins.file.display(),
            set.name,
            commit()
        );
    }
    match &claims.built {
        None => bail!(
            "{what}: its record says it was built from kiln's own sources (`kiln:built-from`), but {name} is set `{}`'s crate: the record does not describe this crate; refused",
            set.name
        ),
        Some(b) if b.set != set.name => bail!(
            "{what}: its record names set `{}`, but {name} {version} is set `{}`'s crate: the record does not describe this crate; refused",
            shown(&b.set),
            set.name
        ),
        Some(_) => {}
    }
    if !set.default && !opt_in {
        bail!(
            "{what} is a crate of set `{}`, an opt-in set (`default = false` in {}): rebuilding it compiles for hours; give --rebuild-opt-in-set to do so",
            set.name,
            pins.file.display()
        );
    }
    Ok(set)
}

/// This checkout can rebuild what `claims` names: every input its record
/// lists (toolchain packages, wheels, the source crate) pinned here, and the
/// same pin file. kiln's own crates (no set) have no inputs to check.
pub fn same_pins(claims: &Claims, pins: &Pins, what: &str) -> Result<()> {
    let Some(built) = &claims.built else {
        if let Some(i) = claims.inputs.first() {
            bail!("{what}: a record of kiln's own sources names the input {} {}: refused", shown(&i.name), shown(&i.version));
        }
        return Ok(());
    };
    let closure = pins.closure()?;
    let set = pins.set(&built.set);
    for i in &claims.inputs {
        let pinned = match i.origin {
            Origin::Deb => closure.debs.iter().any(|d| d.name == i.name && d.version == i.version && d.sha256 == i.sha256),
            Origin::Wheel => pins
                .toolchain
                .ptxas
                .iter()
                .chain(set.into_iter().flat_map(|s| s.inputs.iter().map(|t| &t.wheel)))
                .any(|w| w.package == i.name && w.version == i.version && w.sha256 == i.sha256),
            Origin::Crate => set.is_some_and(|s| {
                matches!(&s.source, kiln_pins::Source::Crate { name, version, sha256 } if *name == i.name && *version == i.version && *sha256 == i.sha256)
            }),
        };
        if !pinned {
            let kind = match i.origin {
                Origin::Deb => "toolchain package",
                Origin::Wheel => "wheel",
                Origin::Crate => "source crate",
            };
            bail!(
                "{what} was built with {kind} {} {} (sha256 {}), which {} does not pin: check out kiln commit {} and run this again there",
                shown(&i.name),
                shown(&i.version),
                shown(&i.sha256),
                pins.file.display(),
                shown(&built.kiln_commit)
            );
        }
    }
    let ours = sha256_hex(&fs::read(&pins.file).with_context(|| format!("cannot read {}", pins.file.display()))?);
    if ours != built.pins_sha256 {
        bail!(
            "{what} was built from a pin file with sha256 {}; {} has sha256 {ours}: check out kiln commit {} (whose pins.toml that is) and run this again there",
            shown(&built.pins_sha256),
            pins.file.display(),
            shown(&built.kiln_commit)
        );
    }
    Ok(())
}

/// Rebuilds the crate described by `bytes` into `scratch` (a folder of the
/// caller's; the rebuilt dist goes below it) and compares. An opt-in set is
/// refused ([`check_with`] takes it when asked).
pub fn check(pins: &Pins, kiln: &Path, bytes: &[u8], what: &str, scratch: &Path, say: &(dyn Fn(String) + Sync)) -> Result<Verdict> {
    check_with(pins, kiln, bytes, what, scratch, false, say)
}

/// [`check`], rebuilding an opt-in set when `opt_in`. Which set is rebuilt is
/// decided by [`set_to_rebuild`] and every input is checked against the pins
/// ([`same_pins`]) before anything is built.
pub fn check_with(
    pins: &Pins,
    kiln: &Path,
    bytes: &[u8],
    what: &str,
    scratch: &Path,
    opt_in: bool,
    say: &(dyn Fn(String) + Sync),
) -> Result<Verdict> {
    let files = unpack(bytes, what)?;
    let (claims, problems) = claims(&files, what)?;
    let (name, version) = (shown(&claims.name).into_owned(), shown(&claims.version).into_owned());
    if !problems.is_empty() {
        return Ok(Verdict { name, version, reproduced: false, differences: problems, files: files.len() });
    }
    let set = set_to_rebuild(&claims, pins, what, opt_in)?.name.clone();
    same_pins(&claims, pins, what)?;
    let out: PathBuf = scratch.join("rebuilt");
    say(format!("{what}: rebuilding set `{set}` from {} into {}", pins.file.display(), out.display()));
    let dist = Builder::from_pins(pins).kiln_dir(kiln).base(kiln).only(&[set.as_str()]).out(&out).package(true).build(say)?;
    let outcome = dist.sets.iter().find(|s| s.set == set).with_context(|| format!("the rebuild made no set `{set}`"))?;
    let Some(record) = outcome.crates.iter().find(|r| r.name == claims.name) else {
        bail!(
            "{what}: the rebuild of set `{set}` packaged no crate {name} (its crates: {})",
            outcome.crates.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(", ")
        )
    };
    if record.version != claims.version {
        bail!("{what} is {name} {version}, the rebuild packaged {} {}: the revision in pins.toml differs", record.name, record.version);
    }
    let rebuilt = fs::read(outcome.out.join(&record.file)).with_context(|| format!("cannot read the rebuilt {}", record.file))?;
    let n = claims.files.len();
    if sha256_hex(&rebuilt) == sha256_hex(bytes) {
        return Ok(Verdict { name, version, reproduced: true, differences: Vec::new(), files: n });
    }
    let again = unpack(&rebuilt, "the rebuilt crate")?;
    let mut differences = Vec::new();
    for path in files.keys().chain(again.keys()).collect::<std::collections::BTreeSet<_>>() {
        match (files.get(path), again.get(path)) {
            (Some(a), Some(b)) if a == b => {}
            (Some(_), Some(_)) => differences.push(format!("{}: other bytes in the rebuild: {}", shown(path), cause(path))),
            (Some(_), None) => differences.push(format!("{}: not in the rebuild: {}", shown(path), cause(path))),
            (None, _) => differences.push(format!("{}: only in the rebuild: {}", shown(path), cause(path))),
        }
    }
    if differences.is_empty() {
        differences.push("every file is the same, the archive is not: another cargo version packaged it".into());
    }
    Ok(Verdict { name, version, reproduced: false, differences, files: n })
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

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_package::provenance::{CrateFile, Input, SetRecord};

    fn pins() -> Pins {
        Pins::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../pins.toml")).unwrap()
    }

    fn tar_gz(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
        let mut b = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default()));
        for (path, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            b.append_data(&mut h, path, &data[..]).unwrap();
        }
        b.into_inner().unwrap().finish().unwrap()
    }

    /// A `.crate` of `name` `version` whose record says `set` built it (`None`:
    /// kiln's own sources) from `inputs`, with this checkout's pin file.
    fn crate_of(pins: &Pins, name: &str, version: &str, set: Option<&str>, inputs: Vec<Input>) -> Vec<u8> {
        let lib = b"// the crate's code".to_vec();
        let files = [CrateFile { path: "src/lib.rs".into(), sha256: sha256_hex(&lib), artifact: None }];
        let record = set.map(|set| SetRecord {
            kiln_version: "0.1.0".into(),
            kiln_commit: Some("0123456789abcdef0123456789abcdef01234567".into()),
            kiln_sources_sha256: "a".repeat(64),
            pins_sha256: sha256_hex(&fs::read(&pins.file).unwrap()),
            set: set.into(),
            toolchain_identity: "c".repeat(64),
            inputs,
            jobs: BTreeMap::new(),
        });
        let doc = provenance::document(record.as_ref(), "0.1.0", name, version, &files).unwrap();
        let top = format!("{name}-{version}");
        tar_gz(&[
            (format!("{top}/Cargo.toml"), b"[package]\n".to_vec()),
            (format!("{top}/src/lib.rs"), lib),
            (format!("{top}/{}", provenance::FILE), doc.into_bytes()),
        ])
    }

    /// `check` that must refuse before any rebuild starts.
    fn refused(pins: &Pins, bytes: &[u8]) -> String {
        let scratch = tempfile::tempdir().unwrap();
        let say = |l: String| assert!(!l.contains("rebuilding"), "a rebuild started: {l}");
        format!("{:#}", check(pins, Path::new("/nonexistent-kiln"), bytes, "c.crate", scratch.path(), &say).unwrap_err())
    }

    #[test]
    fn the_set_rebuilt_is_the_one_the_crates_name_and_version_belong_to_never_the_records() {
        let pins = pins();
        let main = pins.main_set();
        let (main_name, main_version) = (main.artifact_crate.as_ref().unwrap().name.clone(), main.crate_version().unwrap());
        let opt_in = pins.sets.iter().find(|s| !s.default).expect("pins.toml has an opt-in set");
        let gfx = format!("{main_name}-gfx1030");
        let deb = |d: &kiln_pins::Deb| Input {
            origin: Origin::Deb,
            name: d.name.clone(),
            version: d.version.clone(),
            sha256: d.sha256.clone(),
            license: None,
        };
        let debs: Vec<Input> = pins.closure().unwrap().debs.iter().map(deb).collect();
        let cases = [
            // The record's `kiln:set` names the opt-in set for a main-set crate.
            (
                crate_of(&pins, &gfx, &main_version, Some(&opt_in.name), debs.clone()),
                format!("its record names set `{}`, but {gfx} {main_version} is set `{}`'s crate", opt_in.name, main.name),
            ),
            // `kiln:built-from` on a set's crate: no pin check skipped.
            (crate_of(&pins, &gfx, &main_version, None, Vec::new()), "says it was built from kiln's own sources (`kiln:built-from`)".to_string()),
            (crate_of(&pins, "left-pad", "1.0.0", Some(&main.name), debs.clone()), "left-pad is no crate of a kernel set".to_string()),
            (
                crate_of(&pins, &gfx, "0.10.0+kiln.1", Some(&main.name), debs.clone()),
                format!("packages set `{}`'s crates at {main_version}", main.name),
            ),
            (crate_of(&pins, "\x1b]0;pwned\x07", "1.0.0", Some(&main.name), debs.clone()), "\\u{1b}]0;pwned\\u{7} is no crate".to_string()),
        ];
        for (bytes, want) in cases {
            let e = refused(&pins, &bytes);
            assert!(e.contains(&want) && !e.contains('\x1b'), "want {want}:\n{e}");
        }
        // An opt-in set's crate: refused unless asked for.
        let name = format!("{}-sm80", opt_in.artifact_crate.as_ref().unwrap().name);
        let e = refused(&pins, &crate_of(&pins, &name, &opt_in.crate_version().unwrap(), Some(&opt_in.name), debs));
        assert!(e.contains(&format!("a crate of set `{}`, an opt-in set", opt_in.name)) && e.contains("--rebuild-opt-in-set"), "{e}");
    }

    #[test]
    fn every_input_of_the_record_is_checked_against_the_pins_before_any_rebuild() {
        let pins = pins();
        let main = pins.main_set();
        let (name, version) = (format!("{}-sm90", main.artifact_crate.as_ref().unwrap().name), main.crate_version().unwrap());
        let input = |origin, name: &str| Input { origin, name: name.into(), version: "1.0".into(), sha256: "d".repeat(64), license: None };
        for (i, want) in [
            (input(Origin::Wheel, "nvidia-evil"), "wheel nvidia-evil 1.0"),
            (input(Origin::Crate, "candle-kernels"), "source crate candle-kernels 1.0"),
            (input(Origin::Deb, "libevil"), "toolchain package libevil 1.0"),
        ] {
            let e = refused(&pins, &crate_of(&pins, &name, &version, Some(&main.name), vec![i]));
            assert!(e.contains(want) && e.contains("does not pin: check out kiln commit 0123456789abcdef"), "{want}: {e}");
        }
    }

    #[test]
    fn a_crate_that_inflates_past_the_limit_is_refused_before_it_is_read_whole() {
        // A small gzip whose one entry claims (and holds) 300 MiB of zeros.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let mut h = tar::Header::new_gnu();
        h.set_path("c-1.0.0/zeros").unwrap();
        h.set_size(300 << 20);
        h.set_mode(0o644);
        h.set_cksum();
        std::io::Write::write_all(&mut gz, h.as_bytes()).unwrap();
        let mb = vec![0u8; 1 << 20];
        for _ in 0..300 {
            std::io::Write::write_all(&mut gz, &mb).unwrap();
        }
        let bytes = gz.finish().unwrap();
        assert!(bytes.len() < 2 << 20);
        let e = format!("{:#}", unpack(&bytes, "zeros.crate").unwrap_err());
        assert!(e.contains("zeros.crate: the entry `c-1.0.0/zeros` inflates to more than"), "{e}");
    }
}
