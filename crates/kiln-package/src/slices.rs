//! The static library cut into slices that each fit one crate: its objects,
//! kept in archive order, grouped by their compressed size, each group
//! archived again with the pinned `ar` and compressed. [`split`] writes the
//! slices into a folder (one job of the dist's graph, as soon as the library
//! exists); the link crates are generated from that folder.
//!
//! A linker reads each archive once, in command-line order, taking only the
//! objects that define something still undefined. When an object of one
//! slice calls a function defined in another (candle-flash-attn's
//! `flash_api.o` calls the launchers in the 52 kernel objects), the caller's
//! archive must come first: each slice records the slices it calls
//! ([`Slice::calls`]), its link crate depends on theirs, and rustc puts a
//! crate's libraries before those of the crates it depends on.

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use object::{read::archive::ArchiveFile, Object, ObjectSymbol};
use serde::{Deserialize, Serialize};

use crate::{compress, parts, PAYLOAD_BUDGET};

/// Makes a static library named by the first argument from (member name, object file) pairs.
pub type Archiver<'a> = dyn Fn(&str, Vec<(String, PathBuf)>) -> Result<PathBuf> + 'a;

/// The slices' records inside [`split`]'s folder.
pub const SLICES_JSON: &str = "slices.json";

/// Bump when [`split`] writes anything differently (part of its cache key).
pub const VERSION: u32 = 2;

/// One slice: a link crate's static library.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slice {
    /// The library's name (`kiln_candle_kernels_0`: `lib<name>.a`).
    pub lib: String,
    /// Its objects, in archive order.
    pub members: Vec<String>,
    /// The archive's size and sha256 before compression.
    pub raw_bytes: u64,
    pub sha256: String,
    /// The slices (by index) whose objects define functions this slice's objects call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<usize>,
}

impl Slice {
    /// The compressed archive's file name, in [`split`]'s folder and in the crate.
    pub fn payload(&self) -> String {
        format!("lib{}.a.zst", self.lib)
    }
}

/// What the slices of a library of host code for `host` are named after: the
/// main crate's name (`kiln-candle-kernels`), with the CPU for any but the
/// toolchain's own (`kiln-candle-kernels-aarch64`): its link crates are
/// `<stem>-ffi-<i>`... see [`link_crate`], its libraries [`lib_name`].
pub fn crate_stem(main: &str, host: &kiln_manifest::kiln_target::host_object::Host) -> String {
    if host == kiln_manifest::kiln_target::host_object::BUILD_HOST {
        main.to_string()
    } else {
        format!("{main}-{}", host.cpu)
    }
}

/// The link crate of slice `i` of the library whose [`crate_stem`] is
/// `stem`, for main crate `main`: `<main>-ffi-<i>`, `<main>-ffi-aarch64-<i>`.
pub fn link_crate(main: &str, stem: &str, i: usize) -> String {
    match stem.strip_prefix(main).and_then(|r| r.strip_prefix('-')) {
        Some(cpu) => format!("{main}-ffi-{cpu}-{i}"),
        None => format!("{main}-ffi-{i}"),
    }
}

/// The name of slice `i` of the library of the crate `main`.
pub fn lib_name(main: &str, i: usize) -> String {
    format!("{}_{i}", main.replace('-', "_"))
}

/// Splits `library` into slices under the per-crate budget, by each member's
/// compressed size (`compressed_size(member name, bytes)`), and writes each
/// slice's compressed archive and [`SLICES_JSON`] into `out`.
pub fn split(library: &[u8], main: &str, compressed_size: &dyn Fn(&str, &[u8]) -> Result<u64>, archive: &Archiver, out: &Path) -> Result<Vec<Slice>> {
    split_within(library, main, PAYLOAD_BUDGET * 9 / 10, compressed_size, archive, out)
}

/// [`split`] with a budget of `budget` compressed bytes per slice.
pub fn split_within(
    library: &[u8],
    main: &str,
    budget: u64,
    compressed_size: &dyn Fn(&str, &[u8]) -> Result<u64>,
    archive: &Archiver,
    out: &Path,
) -> Result<Vec<Slice>> {
    let parsed = ArchiveFile::parse(library).context("the static library is not an ar archive")?;
    let scratch = out.join(".objects");
    fs::create_dir_all(&scratch)?;
    let mut objects = Vec::new();
    let mut sizes = Vec::new();
    let mut symbols = Vec::new();
    for member in parsed.members() {
        let member = member?;
        let name = String::from_utf8_lossy(member.name()).trim_end_matches('/').to_string();
        let data = member.data(library)?;
        let path = scratch.join(&name);
        fs::write(&path, data)?;
        sizes.push(compressed_size(&name, data)?);
        symbols.push((defined(data).with_context(|| format!("member {name}"))?, undefined(data).with_context(|| format!("member {name}"))?));
        objects.push((name, path));
    }
    if objects.is_empty() {
        bail!("the static library has no objects");
    }
    let groups = parts::split(&sizes, budget);
    let calls = calls_between(&groups, &symbols, &objects)?;
    let mut slices = Vec::new();
    for (i, group) in groups.into_iter().enumerate() {
        let lib = lib_name(main, i);
        let members: Vec<(String, PathBuf)> = group.iter().map(|&k| objects[k].clone()).collect();
        let archived = archive(&lib, members.clone())?;
        let data = fs::read(&archived).with_context(|| format!("cannot read {}", archived.display()))?;
        let slice = Slice {
            lib,
            members: members.into_iter().map(|(n, _)| n).collect(),
            raw_bytes: data.len() as u64,
            sha256: kiln_manifest::sha256_hex(&data),
            calls: calls[i].clone(),
        };
        fs::write(out.join(slice.payload()), compress::zstd(&data)?)?;
        slices.push(slice);
    }
    fs::remove_dir_all(&scratch)?;
    fs::write(out.join(SLICES_JSON), serde_json::to_string_pretty(&slices)? + "\n")?;
    Ok(slices)
}

/// Which groups each group's objects call into (an undefined symbol of one
/// of its objects that no object of the group defines, but one of another
/// group does). A cycle cannot be linked in one pass whatever the order:
/// refused, naming the objects.
fn calls_between(groups: &[Vec<usize>], symbols: &[(Vec<String>, Vec<String>)], objects: &[(String, PathBuf)]) -> Result<Vec<Vec<usize>>> {
    let mut definer = std::collections::BTreeMap::new();
    for (g, group) in groups.iter().enumerate() {
        for &k in group {
            for s in &symbols[k].0 {
                definer.entry(s.as_str()).or_insert((g, k));
            }
        }
    }
    let mut calls = vec![Vec::new(); groups.len()];
    let mut why = std::collections::BTreeMap::new();
    for (g, group) in groups.iter().enumerate() {
        let own: std::collections::BTreeSet<&str> = group.iter().flat_map(|&k| symbols[k].0.iter().map(String::as_str)).collect();
        for &k in group {
            for s in &symbols[k].1 {
                if let Some(&(other, by)) = definer.get(s.as_str()) {
                    if other != g && !own.contains(s.as_str()) && !calls[g].contains(&other) {
                        calls[g].push(other);
                        why.insert((g, other), format!("{} calls {s} in {}", objects[k].0, objects[by].0));
                    }
                }
            }
        }
        calls[g].sort();
    }
    // Depth-first search for a cycle: a group reached again while still on the path.
    fn visit(g: usize, calls: &[Vec<usize>], state: &mut [u8], path: &mut Vec<usize>) -> Option<Vec<usize>> {
        state[g] = 1;
        path.push(g);
        for &c in &calls[g] {
            if state[c] == 1 {
                let at = path.iter().position(|&p| p == c).expect("on the path");
                let mut cycle = path[at..].to_vec();
                cycle.push(c);
                return Some(cycle);
            }
            if state[c] == 0 {
                if let Some(cycle) = visit(c, calls, state, path) {
                    return Some(cycle);
                }
            }
        }
        path.pop();
        state[g] = 2;
        None
    }
    let mut state = vec![0u8; groups.len()];
    for g in 0..groups.len() {
        if state[g] == 0 {
            if let Some(cycle) = visit(g, &calls, &mut state, &mut Vec::new()) {
                let steps: Vec<String> = cycle.windows(2).map(|w| why[&(w[0], w[1])].clone()).collect();
                bail!("the static library's slices call each other in a cycle, which no link order resolves in one pass: {}", steps.join("; "));
            }
        }
    }
    Ok(calls)
}

/// The global symbols an object file defines (functions and data, weak ones too).
pub fn defined(object: &[u8]) -> Result<Vec<String>> {
    let file = object::File::parse(object).context("not an object file")?;
    let mut out: Vec<String> = file
        .symbols()
        .filter(|s| !s.is_undefined() && (s.is_global() || s.is_weak()) && s.section_index().is_some())
        .filter_map(|s| s.name().ok().map(String::from))
        .filter(|n| !n.is_empty())
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

/// The symbols an object file uses but does not define.
pub fn undefined(object: &[u8]) -> Result<Vec<String>> {
    let file = object::File::parse(object).context("not an object file")?;
    let mut out: Vec<String> =
        file.symbols().filter(|s| s.is_undefined()).filter_map(|s| s.name().ok().map(String::from)).filter(|n| !n.is_empty()).collect();
    out.sort();
    out.dedup();
    Ok(out)
}

/// The slices [`split`] wrote into `dir`.
pub fn read(dir: &Path) -> Result<Vec<Slice>> {
    let path = dir.join(SLICES_JSON);
    let text = fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} does not parse", path.display()))
}
