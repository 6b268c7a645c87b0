//! A kernel set's sources and pinned inputs, verified before any use: a
//! crate by the sha256 of its `.crate` ([`kiln_build::upstream`]), a folder
//! by the hash of its listing (recorded in the manifest, so a changed folder
//! shows in the lock), an input tree file by file against its wheel's RECORD
//! ([`kiln_toolchain::wheel::tree`]).

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use kiln_build::upstream;
use kiln_pins::{KernelSet, Source};
use kiln_toolchain::{fetch, wheel, Cache};

/// A set's verified sources.
#[derive(Clone, Debug)]
pub struct SetSource {
    /// The source root (mounted at `/kiln/src`).
    pub root: PathBuf,
    /// The `.crate`'s sha256, or the folder listing's.
    pub sha256: String,
    /// The crate's folder name under the cache's `sources/` (for `cache gc`).
    pub cached: Option<String>,
}

/// The set's sources: a crate fetched and checked against its pin, or a
/// folder (relative to `base`, the pin file's folder) hashed as it is now.
pub fn fetch(cache: &Cache, set: &KernelSet, base: &Path, say: &dyn Fn(String)) -> Result<SetSource> {
    match &set.source {
        Source::Crate { name, version, sha256 } => {
            let c = upstream::fetch_crate(cache, name, version, sha256, say).with_context(|| format!("set `{}`", set.name))?;
            let cached = c.root.file_name().map(|n| n.to_string_lossy().into_owned());
            Ok(SetSource { root: c.root, sha256: c.sha256, cached })
        }
        Source::Folder { path } => {
            let root = base.join(path);
            if !root.is_dir() {
                bail!("set `{}`: its source folder {} is not a folder", set.name, root.display());
            }
            Ok(SetSource { sha256: listing_sha256(&root)?, root, cached: None })
        }
    }
}

/// The set's pinned input trees, unpacked and checked: (name, folder).
pub fn inputs(cache: &Cache, set: &KernelSet, say: &dyn Fn(String)) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for input in &set.inputs {
        let tree = wheel::tree(cache, &input.wheel, &input.tree).with_context(|| format!("set `{}`, input `{}`", set.name, input.name))?;
        say(format!(
            "set `{}`: input `{}` is {} files of {} ({}), each checked against the wheel's RECORD",
            set.name, input.name, tree.files, tree.origin, input.tree
        ));
        out.push((input.name.clone(), tree.path));
    }
    Ok(out)
}

/// The licence texts of the set's inputs that name one (`[sets.<name>.inputs.<input>.license]`),
/// each read out of its checked wheel and matched against the wheel's RECORD.
pub fn input_licenses(cache: &Cache, set: &KernelSet) -> Result<Vec<kiln_package::LicenseText>> {
    let mut out = Vec::new();
    for input in &set.inputs {
        let Some(license) = &input.license else { continue };
        let bytes = wheel::member(cache, &input.wheel, &license.file)
            .with_context(|| format!("set `{}`, input `{}`: its licence {}", set.name, input.name, license.file))?;
        let text = String::from_utf8(bytes).with_context(|| format!("set `{}`, input `{}`: {} is not UTF-8", set.name, input.name, license.file))?;
        // Named for the licence and the input: `cargo xtask publish` looks for the SPDX name's text.
        let file = format!("LICENSE-{}-{}", license.spdx, input.name.to_ascii_uppercase());
        out.push(kiln_package::LicenseText { file, spdx: license.spdx.clone(), text });
    }
    Ok(out)
}

/// The CUDA link stand-ins' table (`kiln_package::link_stubs`): CUDA 12's from
/// the toolchain's link stubs (`stubs`), and each `[cuda_link_stubs.<major>]`
/// library from its member of the checked wheel (matched against the wheel's
/// RECORD). Only names, sonames and version nodes are kept: no byte of NVIDIA's
/// libraries reaches a crate.
pub fn cuda_link_stubs(cache: &Cache, pins: &kiln_pins::Pins, stubs: &Path) -> Result<Vec<kiln_package::link_stubs::StubLib>> {
    use kiln_package::link_stubs;
    let mut libs = link_stubs::read(stubs)?;
    let toolchain = libs.clone();
    for pin in &pins.cuda_link_stubs {
        let what = format!("{} of {} {}", pin.member, pin.wheel.package, pin.wheel.version);
        let bytes = wheel::member(cache, &pin.wheel, &pin.member).with_context(|| format!("[cuda_link_stubs.{}] {}: {what}", pin.major, pin.lib))?;
        libs.push(link_stubs::from_member(pin.major, &pin.lib, &pin.member, &what, &bytes, &toolchain)?);
    }
    link_stubs::check_complete(&libs)?;
    Ok(libs)
}

/// sha256 over `<sha256>  <relative path>` lines of every file below `root`, sorted by path.
pub fn listing_sha256(root: &Path) -> Result<String> {
    let mut files = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))? {
            let e = e?;
            if e.file_type()?.is_dir() {
                stack.push(e.path());
            } else {
                files.push(e.path());
            }
        }
    }
    let mut lines: Vec<String> = files
        .iter()
        .map(|f| Ok(format!("{}  {}\n", fetch::sha256_file(f)?, f.strip_prefix(root).expect("below the root").display())))
        .collect::<Result<_>>()?;
    lines.sort_by(|a, b| a[66..].cmp(&b[66..]));
    Ok(kiln_manifest::sha256_hex(lines.concat().as_bytes()))
}
