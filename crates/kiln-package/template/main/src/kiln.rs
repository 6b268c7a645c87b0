//! Beyond the drop-in: what kiln built, and access to every artifact this
//! build carries (SASS per sm, HSACO per gfx arch, PTX per level).
//!
//! The manifest lists only what is carried (part crates can be left out with
//! features); each artifact's `sha256` is that of its decompressed bytes, for
//! loaders to verify before handing a blob to a driver.

use std::sync::OnceLock;

pub use kiln_manifest::{Artifact, Backend, Kind, Manifest};

pub use crate::choose::Plan as ImagePlan;

use crate::payload;

/// The manifest of what `cargo xtask dist` built, as JSON: the dist's
/// `manifest.json` byte for byte. The crate stores it zstd-compressed (5 MB of
/// JSON as a constant slowed every consumer's build of this crate); it is
/// inflated at first use and checked against the sha256 kiln recorded for it.
///
/// Panics, naming the file and what to do, only if the crate's own files are damaged.
#[inline]
pub fn manifest_json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(embedded_json)
}

/// The embedded manifest, inflated and checked; kept only by [`manifest_json`]
/// (what [`built`] parses is let go, not held for the process's life).
#[inline]
fn embedded_json() -> String {
    let (path, size, sha256) = crate::MANIFEST_JSON;
    let bytes = payload::checked(path, crate::MANIFEST_JSON_ZST, size, sha256, "kiln's record of it").unwrap_or_else(|e| panic!("{e}"));
    // Its sha256 is that of kiln's own JSON: UTF-8.
    String::from_utf8(bytes).expect("the embedded manifest, checked against its sha256, is UTF-8")
}

/// An artifact that is unknown, not carried, or damaged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    #[inline]
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Error {}

/// The manifest, restricted to the artifacts this build carries.
#[inline]
pub fn manifest() -> &'static Manifest {
    // Kept as a leaked reference: a static holding a `Manifest` would make every
    // build compile its drop code (its BTreeMaps'), though nothing drops it.
    static M: OnceLock<&'static Manifest> = OnceLock::new();
    M.get_or_init(|| {
        let mut m = built().clone();
        m.artifacts.retain(|a| a.kind == Kind::Staticlib || payload::find(&a.path).is_some());
        Box::leak(Box::new(m))
    })
}

/// The manifest of everything kiln built, carried by this build or not.
#[inline]
pub(crate) fn built() -> &'static Manifest {
    static BUILT: OnceLock<&'static Manifest> = OnceLock::new();
    BUILT.get_or_init(|| Box::leak(Box::new(Manifest::from_json(&embedded_json(), "the embedded manifest").expect("the packaged manifest parses"))))
}

/// The toolchain identity and compiler versions the artifacts were built with.
#[inline]
pub fn toolchain() -> &'static kiln_manifest::Toolchain {
    &manifest().toolchain
}

/// The bytes of the artifact at `path` (a manifest path), decompressed and
/// checked against the manifest's sha256.
#[inline]
pub fn bytes(path: &str) -> Result<Vec<u8>, Error> {
    if payload::find(path).is_none() {
        let carried = manifest().artifacts.iter().any(|a| a.path == path);
        return Err(Error(if carried {
            format!("{path} is listed but its payload is missing")
        } else {
            format!("{path} is not carried by this build of {} (enable its part crate's feature?)", env!("CARGO_PKG_NAME"))
        }));
    }
    payload::verified(path).map_err(Error)
}

/// The compute capabilities (e.g. 90) of this process's CUDA devices, as the
/// native images are planned for them; empty without a driver or GPU.
#[inline]
pub fn cuda_devices() -> &'static [u32] {
    crate::image::devices()
}

/// What `Module::ptx()`'s native image of `module` holds in this process:
/// SASS sms, PTX levels, and devices nothing carried can serve.
#[inline]
pub fn image_plan(module: &str) -> ImagePlan {
    crate::image::plan_for(module)
}

#[inline]
fn find(module: &str, kind: Kind, arch: &str) -> Option<&'static Artifact> {
    manifest().artifacts.iter().find(|a| a.module == module && a.kind == kind && a.arch == arch)
}

/// The SASS (cubin) of `module` for `sm` (e.g. 90), if carried.
#[inline]
pub fn sass(module: &str, sm: u32) -> Option<&'static Artifact> {
    find(module, Kind::Cubin, &format!("sm_{sm}"))
}

/// The HSACO of `module` for `gfx` (e.g. `gfx90a`), if carried.
#[inline]
pub fn hsaco(module: &str, gfx: &str) -> Option<&'static Artifact> {
    find(module, Kind::Hsaco, gfx)
}

/// The PTX of `module` at `level` (e.g. `compute_80`), if carried.
#[inline]
pub fn ptx(module: &str, level: &str) -> Option<&'static Artifact> {
    find(module, Kind::Ptx, level)
}

/// The PTX level `Module::ptx()` chose for this process.
#[inline]
pub fn chosen_ptx_level() -> &'static str {
    crate::ptx::chosen_level()
}

/// The best artifact of `module` for a device arch (`sm_90`, `90`, `gfx90a`,
/// `gfx90a:sramecc+:xnack-`): exact SASS, else the highest PTX at or below
/// the device; exact HSACO, else the code object of the device's family's
/// LLVM generic target (`gfx10-3-generic` for a gfx1031, which needs ROCm 6.4
/// or newer: [`select_on_hip`] checks the runtime), else an error listing the
/// carried archs.
#[inline]
pub fn select(module: &str, device_arch: &str) -> Result<&'static Artifact, Error> {
    select_with(module, device_arch, false)
}

/// Like [`select`]; with `allow_hip_siblings`, an AMD device may use the
/// code object of an ISA-identical sibling (`compat` in kiln-target's table).
#[inline]
pub fn select_with(module: &str, device_arch: &str, allow_hip_siblings: bool) -> Result<&'static Artifact, Error> {
    select_by(module, device_arch, crate::choose::hip_options(allow_hip_siblings, None))
}

/// Like [`select`], for an AMD device on a HIP runtime whose
/// `hipRuntimeGetVersion` is `hip_version` (`HIP_VERSION`: 60443483 for ROCm
/// 6.4): a generic target's code object only where that runtime loads it, else
/// an error naming the device, what this build carries for its family and the
/// ROCm it needs. `Module::hsaco()` asks it for the process's current HIP
/// device before handing out a bundle (and panics with its error).
#[inline]
pub fn select_on_hip(module: &str, device_arch: &str, hip_version: i64) -> Result<&'static Artifact, Error> {
    select_by(module, device_arch, crate::choose::hip_options(false, Some(hip_version)))
}

#[inline]
fn select_by(module: &str, device_arch: &str, opts: kiln_manifest::SelectOptions) -> Result<&'static Artifact, Error> {
    let arch = kiln_manifest::DeviceArch::parse(device_arch).map_err(|e| Error(e.to_string()))?;
    manifest().select_with(module, &arch, opts).map(|s| s.artifact).map_err(|e| Error(with_feature_hint(e, module, &arch, opts)))
}

/// The error, plus what adds the artifact where kiln built what the device
/// needs but this build leaves it out: its part crate's feature, or, where
/// the feature is on and the consumer narrowed the build to other GPUs, the
/// `kiln_gpu` line of its `.cargo/config.toml`.
#[inline]
fn with_feature_hint(e: kiln_manifest::SelectError, module: &str, arch: &kiln_manifest::DeviceArch, opts: kiln_manifest::SelectOptions) -> String {
    let Ok(s) = built().select_with(module, arch, opts) else { return e.to_string() };
    let path = &s.artifact.path;
    match crate::narrow::part_of(path) {
        Some(part) if part.feature_on => format!(
            "{e}; kiln built {path} for it, which this build of {} leaves out: it is {}; {}",
            env!("CARGO_PKG_NAME"),
            crate::narrow::describe(),
            crate::narrow::advice(part.feature)
        ),
        Some(part) => format!(
            "{e}; kiln built {path} for it, which this build of {} leaves out: enable the crate's `{}` feature",
            env!("CARGO_PKG_NAME"),
            part.feature
        ),
        None => e.to_string(),
    }
}
