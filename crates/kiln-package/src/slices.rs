//! The static library cut into slices that each fit one crate: its objects,
//! kept in archive order, grouped by their compressed size, each group
//! archived again with the pinned `ar` and compressed. [`split`] writes the
//! slices into a folder (one job of the dist's graph, as soon as the library
//! exists); the link crates are generated from that folder.

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use object::read::archive::ArchiveFile;
use serde::{Deserialize, Serialize};

use crate::{compress, parts, PAYLOAD_BUDGET};

/// Makes a static library named by the first argument from (member name, object file) pairs.
pub type Archiver<'a> = dyn Fn(&str, Vec<(String, PathBuf)>) -> Result<PathBuf> + 'a;

/// The slices' records inside [`split`]'s folder.
pub const SLICES_JSON: &str = "slices.json";

/// Bump when [`split`] writes anything differently (part of its cache key).
pub const VERSION: u32 = 1;

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
}

impl Slice {
    /// The compressed archive's file name, in [`split`]'s folder and in the crate.
    pub fn payload(&self) -> String {
        format!("lib{}.a.zst", self.lib)
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
    let parsed = ArchiveFile::parse(library).context("the static library is not an ar archive")?;
    let scratch = out.join(".objects");
    fs::create_dir_all(&scratch)?;
    let mut objects = Vec::new();
    let mut sizes = Vec::new();
    for member in parsed.members() {
        let member = member?;
        let name = String::from_utf8_lossy(member.name()).trim_end_matches('/').to_string();
        let data = member.data(library)?;
        let path = scratch.join(&name);
        fs::write(&path, data)?;
        sizes.push(compressed_size(&name, data)?);
        objects.push((name, path));
    }
    if objects.is_empty() {
        bail!("the static library has no objects");
    }
    let mut slices = Vec::new();
    for (i, group) in parts::split(&sizes, PAYLOAD_BUDGET * 9 / 10).into_iter().enumerate() {
        let lib = lib_name(main, i);
        let members: Vec<(String, PathBuf)> = group.iter().map(|&k| objects[k].clone()).collect();
        let archived = archive(&lib, members.clone())?;
        let data = fs::read(&archived).with_context(|| format!("cannot read {}", archived.display()))?;
        let slice = Slice {
            lib,
            members: members.into_iter().map(|(n, _)| n).collect(),
            raw_bytes: data.len() as u64,
            sha256: kiln_manifest::sha256_hex(&data),
        };
        fs::write(out.join(slice.payload()), compress::zstd(&data)?)?;
        slices.push(slice);
    }
    fs::remove_dir_all(&scratch)?;
    fs::write(out.join(SLICES_JSON), serde_json::to_string_pretty(&slices)? + "\n")?;
    Ok(slices)
}

/// The slices [`split`] wrote into `dir`.
pub fn read(dir: &Path) -> Result<Vec<Slice>> {
    let path = dir.join(SLICES_JSON);
    let text = fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} does not parse", path.display()))
}
