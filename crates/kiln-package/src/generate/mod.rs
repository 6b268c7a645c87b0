//! Writes the artifact crates from `template/`: the hand-written logic lives
//! there; this module only fills in names, versions and data tables, and
//! puts in place the payloads the dist's job graph already compressed.
//!
//! One file per kind of crate: [`support`] (kiln-target and kiln-manifest as
//! they are), [`table`] (the optional per-arch crates of artifact tables),
//! [`link`] (the static library's slices and the CUDA runtime, linked by
//! build scripts), [`main_crate`] (the API, the manifest, the PTX) and
//! [`shim`] (the drop-in under upstream's name); [`text`] holds what they
//! share (template files, placeholders, licences).

mod link;
mod main_crate;
mod shim;
mod support;
mod table;
mod text;
mod upstream;

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
};

use anyhow::{bail, Result};
use kiln_manifest::Manifest;
use kiln_pins::KernelSet;

use crate::{
    parts::{self, Role},
    sources::{Sources, ToolchainFiles},
    PAYLOAD_BUDGET,
};

/// What the generator reads besides the manifest.
pub struct Inputs<'a> {
    /// The kernel set packaged (its crate pins, modules, targets, source crate).
    pub set: &'a KernelSet,
    pub manifest: &'a Manifest,
    /// The manifest as the dist folder holds it (with the set's name, for a set other than the main one).
    pub manifest_json: &'a str,
    /// Each artifact's zstd-compressed bytes, by its manifest path.
    pub payloads: &'a BTreeMap<String, PathBuf>,
    /// The static library's slices ([`crate::slices::split`]'s folder), per
    /// host CPU of its `hosts`, in that order (the toolchain's own first).
    pub slices: &'a [PathBuf],
    /// `libcudart_static.a`, compressed.
    pub cudart_payload: &'a Path,
    /// The main crate name and version of another set's crates whose CUDA
    /// runtime crate this set's parts link (`None`: the set's own).
    pub cudart: Option<(String, String)>,
    /// The set's verified sources (upstream's Rust, for a drop-in that carries it).
    pub source_root: &'a Path,
    /// The set's `ffi` file from the verified sources (candle-kernels' `src/ffi.rs`).
    pub ffi_rs: &'a Path,
    pub sources: &'a Sources,
    pub toolchain: &'a ToolchainFiles,
    /// The CUDA link stand-ins' table, every major ([`crate::link_stubs`]): the
    /// toolchain's stubs' and those of `[cuda_link_stubs]`, read by the dist.
    pub link_stubs: &'a [crate::link_stubs::StubLib],
    /// Licences of the set's pinned inputs (CUTLASS's), which the static
    /// library's part crates carry beside kiln's own.
    pub input_licenses: &'a [LicenseText],
    pub kiln_version: &'a str,
    /// What built the set's crates, for the provenance record each carries ([`crate::provenance`]).
    pub provenance: &'a crate::provenance::SetRecord,
}

/// A licence text a crate carries as `file`, named in its `license` as `spdx`.
#[derive(Clone, Debug)]
pub struct LicenseText {
    /// `LICENSE-BSD-3-Clause-CUTLASS`.
    pub file: String,
    /// `BSD-3-Clause`.
    pub spdx: String,
    pub text: String,
}

/// One generated crate.
#[derive(Clone, Debug)]
pub struct Crate {
    pub name: String,
    pub dir: PathBuf,
    /// Bytes of artifacts before and after compression.
    pub raw_bytes: u64,
    pub payload_bytes: u64,
    /// Another set's crate, generated only so that the workspace packages
    /// (the CUDA runtime's): not this set's to publish.
    pub borrowed: bool,
}

/// The library whose renamed runtime functions the template's `launch.rs`
/// defines (`kiln_moe_cudaLaunchKernel`, ...): a test holds the two together.
pub const RUNTIME_LIBRARY: &str = "moe";

/// Generates the crates' workspace in `out` (which must not exist yet).
pub fn generate(inp: &Inputs, out: &Path) -> Result<Vec<Crate>> {
    if let Some(lib) = inp.set.staticlib.as_ref().filter(|l| l.kernels == kiln_pins::LibKernels::PerTarget) {
        if lib.name != RUNTIME_LIBRARY {
            anyhow::bail!(
                "set `{}`: the drop-in's runtime for a per-target static library (template main/src/launch.rs) defines the functions of \
                 library `{RUNTIME_LIBRARY}` ({}*), not of `{}`: rename the library or the runtime's functions",
                inp.set.name,
                kiln_manifest::kiln_target::host_object::renamed(RUNTIME_LIBRARY, ""),
                lib.name
            );
        }
    }
    let g = text::Gen::new(inp, out)?;
    let mut crates = support::crates(&g)?;
    let plan = parts::tables(inp.manifest);
    let mut main_deps = main_crate::Deps::new(&plan, &inp.manifest.targets);
    for part in plan.iter().filter(|p| p.role != Role::Main) {
        let c = table::part(&g, part)?;
        main_deps.table(&g, part, &c.name);
        crates.push(c);
    }
    let links = link::slices(&g)?;
    let several = links.iter().any(|(h, _)| *h != links[0].0);
    for (host, c) in links {
        main_deps.link(&g, &c, host, several);
        crates.push(c);
    }
    crates.push(link::cudart(&g)?);
    crates.push(main_crate::write_crate(&g, &plan[0], &main_deps)?);
    crates.push(shim::write_crate(&g, &main_deps)?);
    text::write(
        &out.join("Cargo.toml"),
        "# Generated by kiln: the kernel-artifact crates.\n[workspace]\nresolver = \"2\"\nmembers = [\"kiln-target\", \"kiln-manifest\", \"main\", \"shim\", \"parts/*\"]\n",
    )?;
    within_budget(&crates)?;
    provenance(inp, &crates)?;
    Ok(crates)
}

/// Generates the crates of a set whose crate API is upstream's (`crate.api =
/// "upstream"`: [`upstream`]) in `out` (which must not exist yet).
pub fn generate_upstream(inp: &Inputs, out: &Path) -> Result<Vec<Crate>> {
    let g = text::Gen::new(inp, out)?;
    let crates = upstream::crates(&g)?;
    within_budget(&crates)?;
    provenance(inp, &crates)?;
    Ok(crates)
}

/// Writes each crate's provenance record ([`crate::provenance::FILE`]):
/// every file the crate ships with its sha256 (`Cargo.toml` under the name
/// `cargo package` keeps it as, `Cargo.toml.orig`), each payload with the
/// artifact it inflates to; kiln's own source crates without the set's record.
fn provenance(inp: &Inputs, crates: &[Crate]) -> Result<()> {
    use crate::provenance::{document, CrateFile, FILE};
    for c in crates {
        let mut files = Vec::new();
        for path in crate::sources::files_under(&c.dir)? {
            let rel = path.strip_prefix(&c.dir).expect("under the crate").to_string_lossy().into_owned();
            if rel == FILE {
                continue;
            }
            let sha256 = kiln_manifest::sha256_hex(&fs::read(&path)?);
            let artifact = rel
                .strip_prefix("payload/")
                .and_then(|p| p.strip_suffix(".zst"))
                .and_then(|p| inp.manifest.artifacts.iter().find(|a| a.path == p))
                .map(|a| (a.path.clone(), a.size, a.sha256.clone()));
            let path = if rel == "Cargo.toml" { "Cargo.toml.orig".to_string() } else { rel };
            files.push(CrateFile { path, sha256, artifact });
        }
        let version = text::package_version(&c.dir)?;
        let own = ["kiln-target", "kiln-manifest"].contains(&c.name.as_str());
        let set = (!own).then_some(inp.provenance);
        text::write(&c.dir.join(FILE), document(set, inp.kiln_version, &c.name, &version, &files)?)?;
    }
    Ok(())
}

fn within_budget(crates: &[Crate]) -> Result<()> {
    for c in crates {
        if c.payload_bytes > PAYLOAD_BUDGET {
            bail!(
                "{} would carry {:.1} MB of compressed payload, over the {:.1} MB budget per crate; split it further",
                c.name,
                c.payload_bytes as f64 / 1e6,
                PAYLOAD_BUDGET as f64 / 1e6
            );
        }
    }
    Ok(())
}

/// Copies an artifact's compressed bytes to `dir/payload/<rel>.zst`, once
/// they inflate to the manifest's size and sha256 ([`checked_payload`]);
/// returns (raw, compressed) sizes.
fn payload(inp: &Inputs, dir: &Path, rel: &str) -> Result<(u64, u64)> {
    let Some(artifact) = inp.manifest.artifacts.iter().find(|a| a.path == rel) else { bail!("{rel} is not in the manifest") };
    let Some(z) = inp.payloads.get(rel) else { bail!("{rel} has no compressed payload") };
    let bytes = checked_payload(rel, z, artifact.size, &artifact.sha256)?;
    let dest = dir.join("payload").join(format!("{rel}.zst"));
    fs::create_dir_all(dest.parent().expect("payload/ is a parent"))?;
    fs::write(&dest, &bytes).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", dest.display()))?;
    Ok((artifact.size, bytes.len() as u64))
}

/// The compressed bytes of `what` at `z` (a job's output in the cache),
/// once they inflate to `size` bytes with sha256 `sha256`: else an error
/// naming `what`, the file, and what to do; nothing is packaged.
fn checked_payload(what: &str, z: &Path, size: u64, sha256: &str) -> Result<Vec<u8>> {
    let bytes = fs::read(z).map_err(|e| anyhow::anyhow!("{what}: cannot read its payload {}: {e}", z.display()))?;
    crate::compress::check(&bytes, size, sha256).map_err(|e| {
        anyhow::anyhow!(
            "{what}: its compressed payload {} {e:#}: the cache entry is damaged or was substituted (a shared or remote \
             cache, or a part, gave other bytes); no crate was packaged. Remove {} and run again, and check who writes that cache",
            z.display(),
            z.parent().unwrap_or(z).display()
        )
    })?;
    Ok(bytes)
}
