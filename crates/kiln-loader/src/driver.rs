//! What a GPU backend provides, whatever the vendor: [`Driver`], the calls
//! the backend-generic surface (`device.rs`) makes on an open device. Each
//! backend implements it in its own file (`cuda.rs` through cudarc, `hip.rs`
//! through a runtime-loaded binding) and imports nothing but this file (and
//! the launch geometry and errors), so it can be read alone; this file knows
//! no backend: `device.rs` opens them (`Device::open`, `Device::count`).

use std::ffi::c_void;

use kiln_manifest::{Artifact, DeviceArch};

use crate::args::LaunchConfig;

/// A failed driver call, before it is given its context.
#[derive(Clone, Debug)]
pub(crate) struct DriverFail {
    pub code: i64,
    pub name: String,
    pub message: String,
}

pub(crate) type DriverResult<T> = std::result::Result<T, DriverFail>;

/// A kernel's name as the driver APIs take it: refused, not truncated, when
/// it holds a NUL byte.
pub(crate) fn kernel_name(name: &str) -> DriverResult<std::ffi::CString> {
    std::ffi::CString::new(name).map_err(|_| DriverFail { code: -1, name: "invalid name".into(), message: "kernel name contains a NUL byte".into() })
}

/// What a backend says about a device it opened.
pub(crate) struct RawDeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub arch: DeviceArch,
    pub reported_arch: String,
    pub driver_version: String,
    /// HIP: the ROCm release of the runtime (`hipRuntimeGetVersion`), which
    /// decides whether a generic target's code object may be chosen.
    pub hip_runtime: Option<kiln_manifest::kiln_target::Rocm>,
    /// Tells contexts apart: the same module is loaded once per context.
    pub context_id: usize,
}

/// An open device of one backend. Handles (memory, modules, functions) are
/// the driver's own, carried as integers.
pub(crate) trait Driver: Send + Sync {
    /// `bytes` of zeroed device memory.
    fn alloc(&self, bytes: usize) -> DriverResult<u64>;
    fn free(&self, ptr: u64);
    fn htod(&self, dst: u64, src: &[u8]) -> DriverResult<()>;
    fn dtoh(&self, dst: &mut [u8], src: u64) -> DriverResult<()>;
    fn synchronize(&self) -> DriverResult<()>;
    /// `image` is a whole, checked image (cubin, NUL-terminated PTX, code
    /// object or bundle), 8-byte aligned.
    fn load_module(&self, image: &[u8]) -> DriverResult<u64>;
    fn unload(&self, module: u64);
    fn function(&self, module: u64, name: &str) -> DriverResult<u64>;
    /// # Safety
    /// `params` must match the kernel's parameters; see `Function::launch`.
    unsafe fn launch(&self, function: u64, cfg: &LaunchConfig, params: &mut [*mut c_void]) -> DriverResult<()>;
    /// What to tell the user when the driver refused `artifact` with `code`
    /// on a device of `device` (empty when there is nothing to add).
    fn load_hint(&self, code: i64, artifact: &Artifact, device: &DeviceArch) -> String;
    /// The cudarc context behind a CUDA device.
    #[cfg(feature = "cuda")]
    fn cuda_context(&self) -> Option<&std::sync::Arc<cudarc::driver::CudaContext>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::kernel_name;

    #[test]
    fn a_kernel_name_with_a_nul_byte_is_refused_not_truncated() {
        assert_eq!(kernel_name("affine_f32").unwrap().as_bytes(), b"affine_f32");
        let fail = kernel_name("affine\0_f32").unwrap_err();
        assert_eq!((fail.code, fail.name.as_str()), (-1, "invalid name"));
        assert!(fail.message.contains("NUL"), "{}", fail.message);
    }
}
