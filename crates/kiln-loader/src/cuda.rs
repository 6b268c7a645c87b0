//! The CUDA backend: the driver API through cudarc, which dlopens libcuda at
//! run time, so nothing of CUDA is needed to build.
//!
//! cudarc panics when libcuda or one of its symbols is missing. The loader
//! first opens libcuda itself and looks up every entry point it will use, so
//! that those cases are errors; every cudarc call is also wrapped in
//! `catch_unwind` for what the probe cannot foresee (needs `panic = "unwind"`,
//! the default).

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

use cudarc::driver::{result, sys, CudaContext, DriverError};
use kiln_manifest::{Artifact, Backend, DeviceArch};

use crate::args::LaunchConfig;
use crate::driver::{kernel_name, Driver, DriverFail, DriverResult, RawDeviceInfo};
use crate::error::{Error, Result};

/// The names libcuda goes by; cudarc tries these too (and more spellings).
#[cfg(unix)]
const LIBRARY_NAMES: &[&str] = &["libcuda.so.1", "libcuda.so"];
#[cfg(windows)]
const LIBRARY_NAMES: &[&str] = &["nvcuda.dll"];

/// Every driver entry point the calls below reach through cudarc.
pub(crate) const REQUIRED_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuLaunchKernel",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
    "cuMemsetD8_v2",
    "cuGetErrorName",
    "cuGetErrorString",
];

struct Probe {
    #[allow(dead_code)] // held so that the library stays loaded
    library: libloading::Library,
}

static PROBE: OnceLock<std::result::Result<Probe, ProbeFailure>> = OnceLock::new();

#[derive(Clone, Debug)]
enum ProbeFailure {
    Missing { tried: Vec<String>, detail: String },
    Symbol { library: String, symbol: String },
}

/// Opens libcuda and resolves every symbol, once per process.
pub(crate) fn probe() -> Result<()> {
    probe_with(LIBRARY_NAMES, &PROBE)
}

fn probe_with(names: &[&str], cell: &'static OnceLock<std::result::Result<Probe, ProbeFailure>>) -> Result<()> {
    let outcome = cell.get_or_init(|| {
        let mut detail = String::new();
        for name in names {
            // SAFETY: libcuda's initialisers are the driver's own; loading it
            // is what cudarc would do next.
            match unsafe { libloading::Library::new(*name) } {
                Ok(library) => {
                    for symbol in REQUIRED_SYMBOLS {
                        // SAFETY: only looked up, not called.
                        if unsafe { library.get::<*const c_void>(symbol.as_bytes()) }.is_err() {
                            return Err(ProbeFailure::Symbol { library: name.to_string(), symbol: symbol.to_string() });
                        }
                    }
                    return Ok(Probe { library });
                }
                Err(e) => {
                    if detail.is_empty() {
                        detail = crate::dl_error(&e);
                    }
                }
            }
        }
        Err(ProbeFailure::Missing { tried: names.iter().map(|s| s.to_string()).collect(), detail })
    });
    match outcome {
        Ok(_) => Ok(()),
        Err(ProbeFailure::Missing { tried, detail }) => {
            Err(Error::DriverMissing { backend: Backend::Cuda, tried: tried.clone(), detail: detail.clone() })
        }
        Err(ProbeFailure::Symbol { library, symbol }) => {
            Err(Error::DriverTooOld { backend: Backend::Cuda, library: library.clone(), symbol: symbol.clone() })
        }
    }
}

fn fail(e: DriverError) -> DriverFail {
    DriverFail {
        code: e.0 as i64,
        name: e.error_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("{:?}", e.0)),
        message: e.error_string().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
    }
}

/// Runs a cudarc call, turning both its error and its panic into a `DriverFail`.
fn guarded<T>(f: impl FnOnce() -> std::result::Result<T, DriverError>) -> std::result::Result<T, DriverFail> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r.map_err(fail),
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "cudarc panicked".into());
            Err(DriverFail { code: -1, name: "panic in the CUDA binding".into(), message })
        }
    }
}

fn driver_err(call: &'static str, context: String) -> impl FnOnce(DriverFail) -> Error {
    move |f| Error::Driver { backend: Backend::Cuda, call, code: f.code, name: f.name, message: f.message, context }
}

/// How many CUDA devices the driver reports.
pub(crate) fn count() -> Result<usize> {
    probe()?;
    guarded(result::init).map_err(|f| {
        // No device, or a driver that does not match the kernel module, surfaces here.
        if f.code == sys::cudaError_enum::CUDA_ERROR_NO_DEVICE as i64 {
            Error::NoDevice { backend: Backend::Cuda, ordinal: 0, count: 0, detail: f.message.clone() }
        } else {
            driver_err("cuInit", String::new())(f)
        }
    })?;
    guarded(result::device::get_count).map(|n| n.max(0) as usize).map_err(driver_err("cuDeviceGetCount", String::new()))
}

/// One CUDA device, through its primary context (the one candle uses too,
/// so that modules and memory can be shared with it).
pub(crate) struct CudaDevice {
    ctx: Arc<CudaContext>,
}

impl CudaDevice {
    pub(crate) fn open(ordinal: usize) -> Result<(CudaDevice, RawDeviceInfo)> {
        let n = count()?;
        if ordinal >= n {
            return Err(Error::NoDevice { backend: Backend::Cuda, ordinal, count: n, detail: String::new() });
        }
        let ctx = guarded(|| CudaContext::new(ordinal)).map_err(driver_err("context creation", format!("device {ordinal}")))?;
        CudaDevice::from_context(ctx)
    }

    pub(crate) fn from_context(ctx: Arc<CudaContext>) -> Result<(CudaDevice, RawDeviceInfo)> {
        probe()?;
        let ordinal = ctx.ordinal();
        let (major, minor) =
            guarded(|| ctx.compute_capability()).map_err(driver_err("cuDeviceGetAttribute", format!("device {ordinal} compute capability")))?;
        let name = guarded(|| ctx.name()).map_err(driver_err("cuDeviceGetName", format!("device {ordinal}")))?;
        let version = guarded(|| {
            let mut v = 0;
            unsafe { sys::cuDriverGetVersion(&mut v) }.result().map(|_| v)
        })
        .map_err(driver_err("cuDriverGetVersion", String::new()))?;
        let info = RawDeviceInfo {
            ordinal,
            name,
            arch: DeviceArch::Cuda { major: major as u32, minor: minor as u32 },
            reported_arch: format!("{major}.{minor}"),
            driver_version: format!("CUDA {}.{}", version / 1000, (version % 1000) / 10),
            hip_runtime: None,
            context_id: ctx.cu_ctx() as usize,
        };
        Ok((CudaDevice { ctx }, info))
    }

    fn bind(&self) -> DriverResult<()> {
        guarded(|| self.ctx.bind_to_thread())
    }
}

impl Driver for CudaDevice {
    fn cuda_context(&self) -> Option<&Arc<CudaContext>> {
        Some(&self.ctx)
    }

    fn load_hint(&self, code: i64, artifact: &Artifact, _: &DeviceArch) -> String {
        load_hint(code, artifact.ptx_version.as_deref())
    }

    fn alloc(&self, bytes: usize) -> DriverResult<u64> {
        self.bind()?;
        let ptr = guarded(|| unsafe { result::malloc_sync(bytes) })?;
        guarded(|| unsafe { result::memset_d8_sync(ptr, 0, bytes) }).inspect_err(|_| {
            let _ = guarded(|| unsafe { result::free_sync(ptr) });
        })?;
        Ok(ptr)
    }

    fn free(&self, ptr: u64) {
        // A free can only fail after a sticky context error, already reported elsewhere.
        let _ = self.bind().and_then(|_| guarded(|| unsafe { result::free_sync(ptr) }));
    }

    fn htod(&self, dst: u64, src: &[u8]) -> DriverResult<()> {
        self.bind()?;
        guarded(|| unsafe { result::memcpy_htod_sync(dst, src) })
    }

    fn dtoh(&self, dst: &mut [u8], src: u64) -> DriverResult<()> {
        self.bind()?;
        guarded(|| unsafe { result::memcpy_dtoh_sync(dst, src) })
    }

    fn synchronize(&self) -> DriverResult<()> {
        self.bind()?;
        guarded(result::ctx::synchronize)
    }

    /// `image` is a cubin or NUL-terminated PTX, 8-byte aligned.
    fn load_module(&self, image: &[u8]) -> DriverResult<u64> {
        self.bind()?;
        guarded(|| unsafe { result::module::load_data(image.as_ptr().cast()) }).map(|m| m as u64)
    }

    fn unload(&self, module: u64) {
        let _ = self.bind().and_then(|_| guarded(|| unsafe { result::module::unload(module as sys::CUmodule) }));
    }

    fn function(&self, module: u64, name: &str) -> DriverResult<u64> {
        let name = kernel_name(name)?;
        self.bind()?;
        guarded(|| unsafe { result::module::get_function(module as sys::CUmodule, name) }).map(|f| f as u64)
    }

    /// # Safety
    /// `params` must match the kernel's parameters; see `Function::launch`.
    unsafe fn launch(&self, function: u64, cfg: &LaunchConfig, params: &mut [*mut c_void]) -> DriverResult<()> {
        self.bind()?;
        guarded(|| unsafe {
            result::launch_kernel(function as sys::CUfunction, cfg.grid, cfg.block, cfg.shared_mem_bytes, std::ptr::null_mut(), params)
        })
    }
}

/// Hints for the driver errors a module load can end in.
fn load_hint(code: i64, ptx_version: Option<&str>) -> String {
    use sys::cudaError_enum as E;
    match code {
        c if c == E::CUDA_ERROR_UNSUPPORTED_PTX_VERSION as i64 => format!(
            "the PTX's .version {} is newer than this driver can compile: update the NVIDIA driver (PTX ISA 8.x needs a CUDA 12.x driver of the same or higher minor version)",
            ptx_version.unwrap_or("?")
        ),
        c if c == E::CUDA_ERROR_NO_BINARY_FOR_GPU as i64 => "the image has no code for this GPU".into(),
        c if c == E::CUDA_ERROR_INVALID_PTX as i64 => "the driver's PTX compiler rejected the text".into(),
        c if c == E::CUDA_ERROR_JIT_COMPILER_NOT_FOUND as i64 => "the driver's PTX JIT compiler (libnvidia-ptxjitcompiler) is not installed".into(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_driver_library_is_an_error_naming_what_was_tried() {
        static CELL: OnceLock<std::result::Result<Probe, ProbeFailure>> = OnceLock::new();
        let e = probe_with(&["libkiln-no-such-driver.so.1"], &CELL).unwrap_err();
        assert!(matches!(e, Error::DriverMissing { backend: Backend::Cuda, .. }), "{e:?}");
        let text = e.to_string();
        assert!(text.starts_with("libcuda.so not found; install the NVIDIA driver"), "{text}");
        assert!(text.contains("libkiln-no-such-driver.so.1"), "{text}");
    }

    #[test]
    fn a_library_without_the_driver_symbols_is_refused_before_cudarc_sees_it() {
        static CELL: OnceLock<std::result::Result<Probe, ProbeFailure>> = OnceLock::new();
        // libc loads fine and has none of the driver's entry points.
        let e = probe_with(&["libc.so.6"], &CELL).unwrap_err();
        assert!(matches!(&e, Error::DriverTooOld { symbol, .. } if symbol == "cuInit"), "{e:?}");
    }
}
