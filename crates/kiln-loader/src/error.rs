//! One error type for everything the loader refuses, each variant saying
//! what failed, where, and what to do about it.

use std::fmt;

use kiln_manifest::{ArchError, Backend, SelectError};

/// Why a device, an artifact or a kernel could not be used.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The manifest could not be read or parsed.
    Manifest { source: String, message: String },
    /// The artifact source could not produce an artifact's bytes.
    Artifact { path: String, message: String },
    /// An arch string named no GPU.
    Arch(ArchError),
    /// The manifest has nothing for this module on this device.
    Select(SelectError),
    /// An artifact's bytes are not the ones the manifest recorded.
    HashMismatch { path: String, expected_sha256: String, actual_sha256: String, expected_size: u64, actual_size: u64 },
    /// An artifact's own header says it is not for this device, or it is not
    /// the kind of file the manifest says (truncated, garbage, another arch).
    BadBlob { path: String, reason: String },
    /// The GPU driver's user-space library is not installed (or not found).
    DriverMissing { backend: Backend, tried: Vec<String>, detail: String },
    /// The driver library is there but lacks an entry point the loader needs.
    DriverTooOld { backend: Backend, library: String, symbol: String },
    /// No such device (or none at all).
    NoDevice { backend: Backend, ordinal: usize, count: usize, detail: String },
    /// A driver call failed.
    Driver { backend: Backend, call: &'static str, code: i64, name: String, message: String, context: String },
    /// The driver refused a module image that passed every check of ours.
    ModuleRejected { backend: Backend, path: String, device: String, code: i64, message: String, hint: String },
    /// A kernel name not in the module.
    KernelNotFound { module: String, kernel: String, artifact: String },
    /// The backend was left out when this crate was built.
    BackendDisabled { backend: Backend, feature: &'static str },
    /// A bad argument to the launch surface (size mismatch, zero-sized grid, ...).
    InvalidArgument(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

fn backend_name(b: Backend) -> &'static str {
    match b {
        Backend::Cuda => "CUDA",
        Backend::Hip => "HIP",
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Manifest { source, message } => write!(f, "kiln manifest from {source}: {message}"),
            Error::Artifact { path, message } => write!(f, "kiln artifact `{path}`: {message}"),
            Error::Arch(e) => e.fmt(f),
            Error::Select(e) => e.fmt(f),
            Error::HashMismatch { path, expected_sha256, actual_sha256, expected_size, actual_size } => write!(
                f,
                "kiln artifact `{path}` is not the file the manifest records (sha256 {actual_sha256}, {actual_size} bytes; expected sha256 {expected_sha256}, {expected_size} bytes): \
                 it is corrupt or from another build; refusing to load it. Rebuild or reinstall the artifacts (`cargo xtask dist`, or the kernel crate) so that files and manifest agree"
            ),
            Error::BadBlob { path, reason } => write!(f, "kiln artifact `{path}` cannot be loaded: {reason}"),
            Error::DriverMissing { backend, tried, detail } => {
                let what = match backend {
                    Backend::Cuda => "libcuda.so not found; install the NVIDIA driver (the toolkit is not needed)",
                    Backend::Hip => "libamdhip64.so not found; install the ROCm runtime (package libamdhip64 / rocm-hip-runtime), or point KILN_HIP_LIBRARY at it",
                };
                write!(f, "{what}; tried {}", tried.join(", "))?;
                if !detail.is_empty() {
                    write!(f, " ({detail})")?;
                }
                Ok(())
            }
            Error::DriverTooOld { backend, library, symbol } => write!(
                f,
                "{} driver library {library} has no `{symbol}`: it is older than this loader supports; update the {} driver",
                backend_name(*backend),
                backend_name(*backend)
            ),
            Error::NoDevice { backend, ordinal, count, detail } => {
                if *count == 0 {
                    write!(f, "no {} device: the driver reports none", backend_name(*backend))?;
                } else {
                    write!(f, "no {} device {ordinal}: the driver reports {count} (ordinals 0..{count})", backend_name(*backend))?;
                }
                if !detail.is_empty() {
                    write!(f, " ({detail})")?;
                }
                Ok(())
            }
            Error::Driver { backend, call, code, name, message, context } => {
                write!(f, "{} {call} failed with {code} {name}: {message}", backend_name(*backend))?;
                if !context.is_empty() {
                    write!(f, " ({context})")?;
                }
                Ok(())
            }
            Error::ModuleRejected { backend, path, device, code, message, hint } => {
                write!(f, "the {} driver refused kiln artifact `{path}` on {device}: error {code}, {message}", backend_name(*backend))?;
                if !hint.is_empty() {
                    write!(f, "; {hint}")?;
                }
                Ok(())
            }
            Error::KernelNotFound { module, kernel, artifact } => {
                write!(f, "no kernel `{kernel}` in module `{module}` (artifact `{artifact}`); the manifest lists the kernels each artifact defines")
            }
            Error::BackendDisabled { backend, feature } => {
                write!(f, "the {} backend was not built into kiln-loader: enable its `{feature}` feature", backend_name(*backend))
            }
            Error::InvalidArgument(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}

impl From<SelectError> for Error {
    fn from(e: SelectError) -> Self {
        Error::Select(e)
    }
}

impl From<ArchError> for Error {
    fn from(e: ArchError) -> Self {
        Error::Arch(e)
    }
}
