//! Runtime loader for kiln's prebuilt kernel artifacts (docs/loader.md).
//!
//! Given an [`ArtifactSource`] (the generated kernel crate, or a dist folder
//! via [`DistDir`]) and a [`Device`], a [`ModuleStore`] picks the artifact the
//! device should run (exact cubin/HSACO, else PTX at or below its capability),
//! checks it against the manifest's sha256 and against its own ELF/PTX header,
//! and loads it once per device.
//!
//! Neither CUDA nor ROCm is needed to build: libcuda is dlopened through
//! cudarc and libamdhip64 through a small binding of our own. A missing
//! driver, a missing device, a corrupt or wrong-arch artifact are all
//! [`Error`]s, never panics.
//!
//! ```no_run
//! use kiln_loader::{Device, DistDir, KernelArgs, LaunchConfig, ModuleStore};
//! # fn main() -> kiln_loader::Result<()> {
//! let store = ModuleStore::new(DistDir::open("target/dist")?);
//! let device = Device::cuda(0)?;
//! let module = store.get(&device, "fill")?;
//! let fill = module.function("fill_f32")?;
//! let out = device.alloc(1024 * 4)?;
//! let mut args = KernelArgs::new();
//! args.push_buffer(&out).push(1.5f32).push(1024usize);
//! // SAFETY: fill_f32(float* buf, float value, size_t numel) writes numel floats.
//! unsafe { fill.launch(&LaunchConfig::for_elements(1024, 256), &mut args)? };
//! let host: Vec<f32> = out.to_vec()?;
//! # Ok(()) }
//! ```

mod args;
#[cfg(feature = "cuda")]
mod cuda;
mod device;
mod driver;
mod error;
pub mod hip;
mod source;
mod store;
mod verify;

pub use args::{LaunchConfig, Pod};
pub use device::{Device, DeviceBuffer, DeviceInfo, Function, KernelArgs, LoadStats, Module};
pub use error::{Error, Result};
pub use kiln_manifest::{Artifact, Backend, DeviceArch, Kind, Manifest, Match, SelectOptions};
pub use source::{ArtifactSource, DistDir, FnSource, DIST_DIR_ENV};
pub use store::{ModuleStore, StoreOptions, HIP_COMPAT_ENV};
pub use verify::{check_blob, sha256_hex, verify_hash};

/// Whether the CUDA driver library can be loaded and has every entry point
/// the loader uses (without initialising CUDA).
pub fn cuda_driver_available() -> Result<()> {
    #[cfg(feature = "cuda")]
    {
        cuda::probe()
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(Error::BackendDisabled { backend: Backend::Cuda, feature: "cuda" })
    }
}

/// libloading's error with its cause (`dlopen failed: libcuda.so.1: cannot open
/// shared object file`); its Display alone says only "dlopen failed".
pub(crate) fn dl_error(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}
