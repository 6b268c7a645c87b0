//! The backend-generic surface: devices, device memory, a kernel's
//! parameters, modules, kernels. The same calls drive CUDA and HIP, so that
//! one test runs on both; which backend a device is, is chosen here alone
//! ([`Device::open`]), and the rest sees it only through `driver.rs`'s `Driver`.

use std::ffi::c_void;
use std::sync::Arc;
use std::time::Duration;

use kiln_manifest::{Artifact, Backend, DeviceArch, Kind, Match};

use crate::args::{as_bytes, as_bytes_mut, LaunchConfig, Pod};
use crate::driver::{Driver, DriverFail, RawDeviceInfo};
use crate::error::{Error, Result};

/// What a device is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub backend: Backend,
    pub ordinal: usize,
    /// The marketing name (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// What artifacts are chosen by.
    pub arch: DeviceArch,
    /// As the driver says it: `9.0`, `gfx90a:sramecc+:xnack-`.
    pub reported_arch: String,
    /// `CUDA 12.4`, `HIP 60032830`.
    pub driver_version: String,
    /// HIP: the ROCm release of the runtime (`hipRuntimeGetVersion`: HIP's
    /// version is ROCm's), which decides whether a generic target's code
    /// object may be chosen (kiln-target's `GENERIC_ROCM`); `None` on CUDA.
    pub hip_runtime: Option<kiln_manifest::kiln_target::Rocm>,
}

struct Inner {
    info: DeviceInfo,
    context_id: usize,
    driver: Box<dyn Driver>,
}

/// An open GPU. Cheap to clone; modules and buffers keep it alive.
#[derive(Clone)]
pub struct Device {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").field("info", &self.inner.info).finish()
    }
}

/// Identifies where a module lives: the same device through the same context.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct DeviceKey {
    backend: Backend,
    ordinal: usize,
    context_id: usize,
}

impl Device {
    /// Opens device `ordinal` of `backend`: the one place a backend is chosen.
    pub fn open(backend: Backend, ordinal: usize) -> Result<Device> {
        let (d, raw): (Box<dyn Driver>, RawDeviceInfo) = match backend {
            #[cfg(feature = "cuda")]
            Backend::Cuda => {
                let (d, raw) = crate::cuda::CudaDevice::open(ordinal)?;
                (Box::new(d), raw)
            }
            #[cfg(not(feature = "cuda"))]
            Backend::Cuda => return Err(Error::BackendDisabled { backend: Backend::Cuda, feature: "cuda" }),
            Backend::Hip => {
                let (d, raw) = crate::hip::HipDevice::open(ordinal)?;
                (Box::new(d), raw)
            }
        };
        Ok(Device::new(backend, raw, d))
    }

    /// CUDA device `ordinal`, through its primary context.
    pub fn cuda(ordinal: usize) -> Result<Device> {
        Device::open(Backend::Cuda, ordinal)
    }

    /// A device for a context the caller already has (candle's `CudaContext`),
    /// so that kiln modules load into it.
    #[cfg(feature = "cuda")]
    pub fn from_cuda_context(ctx: Arc<cudarc::driver::CudaContext>) -> Result<Device> {
        let (d, raw) = crate::cuda::CudaDevice::from_context(ctx)?;
        Ok(Device::new(Backend::Cuda, raw, Box::new(d)))
    }

    /// HIP device `ordinal`.
    pub fn hip(ordinal: usize) -> Result<Device> {
        Device::open(Backend::Hip, ordinal)
    }

    fn new(backend: Backend, raw: RawDeviceInfo, driver: Box<dyn Driver>) -> Device {
        let info = DeviceInfo {
            backend,
            ordinal: raw.ordinal,
            name: raw.name,
            arch: raw.arch,
            reported_arch: raw.reported_arch,
            driver_version: raw.driver_version,
            hip_runtime: raw.hip_runtime,
        };
        Device { inner: Arc::new(Inner { info, context_id: raw.context_id, driver }) }
    }

    /// How many devices `backend` has. Errors when its driver is missing.
    pub fn count(backend: Backend) -> Result<usize> {
        match backend {
            #[cfg(feature = "cuda")]
            Backend::Cuda => crate::cuda::count(),
            #[cfg(not(feature = "cuda"))]
            Backend::Cuda => Err(Error::BackendDisabled { backend: Backend::Cuda, feature: "cuda" }),
            Backend::Hip => crate::hip::count(),
        }
    }

    /// Opens and describes every device of `backend`.
    pub fn enumerate(backend: Backend) -> Result<Vec<DeviceInfo>> {
        let n = match Device::count(backend) {
            Err(Error::NoDevice { count: 0, .. }) => 0,
            other => other?,
        };
        (0..n).map(|i| Device::open(backend, i).map(|d| d.info().clone())).collect()
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    pub fn arch(&self) -> &DeviceArch {
        &self.inner.info.arch
    }

    pub fn backend(&self) -> Backend {
        self.inner.info.backend
    }

    pub fn ordinal(&self) -> usize {
        self.inner.info.ordinal
    }

    /// The cudarc context behind a CUDA device.
    #[cfg(feature = "cuda")]
    pub fn cuda_context(&self) -> Option<&Arc<cudarc::driver::CudaContext>> {
        self.inner.driver.cuda_context()
    }

    pub(crate) fn key(&self) -> DeviceKey {
        DeviceKey { backend: self.backend(), ordinal: self.ordinal(), context_id: self.inner.context_id }
    }

    fn err(&self, call: &'static str, context: String) -> impl FnOnce(DriverFail) -> Error {
        let backend = self.backend();
        move |f| Error::Driver { backend, call, code: f.code, name: f.name, message: f.message, context }
    }

    /// `bytes` of zeroed device memory.
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer> {
        let ptr = if bytes == 0 {
            0
        } else {
            let r = self.inner.driver.alloc(bytes);
            r.map_err(self.err("alloc", format!("{bytes} bytes on device {}", self.ordinal())))?
        };
        Ok(DeviceBuffer { device: self.clone(), ptr, len: bytes })
    }

    /// A device copy of `data`.
    pub fn upload<T: Pod>(&self, data: &[T]) -> Result<DeviceBuffer> {
        let mut b = self.alloc(std::mem::size_of_val(data))?;
        b.copy_from_host(data)?;
        Ok(b)
    }

    /// Waits for every launch on this device to finish; reports a kernel's fault.
    pub fn synchronize(&self) -> Result<()> {
        let r = self.inner.driver.synchronize();
        r.map_err(self.err("synchronize", format!("device {}", self.ordinal())))
    }

    /// Hands a checked image to the driver.
    pub(crate) fn load_image(&self, artifact: &Artifact, bytes: &[u8]) -> Result<u64> {
        // Drivers read images through plain pointers: give them 8-byte
        // alignment (embedded bytes have none) and PTX its terminating NUL.
        let mut aligned = vec![0u64; (bytes.len() + 1).div_ceil(8)];
        as_bytes_mut(&mut aligned)[..bytes.len()].copy_from_slice(bytes);
        let image = as_bytes(&aligned);
        let r = self.inner.driver.load_module(image);
        r.map_err(|f| {
            let hint = self.inner.driver.load_hint(f.code, artifact, self.arch());
            Error::ModuleRejected {
                backend: self.backend(),
                path: artifact.path.clone(),
                device: format!("{} device {} ({})", self.backend().as_str(), self.ordinal(), self.arch()),
                code: f.code,
                message: format!("{} {}", f.name, f.message).trim().to_string(),
                hint,
            }
        })
    }

    fn unload(&self, module: u64) {
        self.inner.driver.unload(module)
    }
}

/// Device memory, freed on drop.
pub struct DeviceBuffer {
    device: Device,
    ptr: u64,
    len: usize,
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBuffer({} bytes at 0x{:x} on {} {})", self.len, self.ptr, self.device.backend().as_str(), self.device.ordinal())
    }
}

impl DeviceBuffer {
    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address kernels see (0 for an empty buffer).
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    fn same_size(&self, bytes: usize, what: &str) -> Result<()> {
        if bytes != self.len {
            return Err(Error::InvalidArgument(format!("{what} of {bytes} bytes does not match the device buffer's {} bytes", self.len)));
        }
        Ok(())
    }

    /// Overwrites the whole buffer with `data` (same size in bytes).
    pub fn copy_from_host<T: Pod>(&mut self, data: &[T]) -> Result<()> {
        let src = as_bytes(data);
        self.same_size(src.len(), "a host slice")?;
        if src.is_empty() {
            return Ok(());
        }
        let r = self.device.inner.driver.htod(self.ptr, src);
        r.map_err(self.device.err("copy to device", format!("{} bytes", src.len())))
    }

    /// Reads the whole buffer into `out` (same size in bytes); waits for
    /// earlier launches on the device, as a blocking copy does.
    pub fn copy_to_host<T: Pod>(&self, out: &mut [T]) -> Result<()> {
        let dst = as_bytes_mut(out);
        self.same_size(dst.len(), "a host slice")?;
        if dst.is_empty() {
            return Ok(());
        }
        let r = self.device.inner.driver.dtoh(dst, self.ptr);
        r.map_err(self.device.err("copy to host", format!("{} bytes", self.len)))
    }

    /// The buffer as `len / size_of::<T>()` values.
    pub fn to_vec<T: Pod>(&self) -> Result<Vec<T>> {
        let size = std::mem::size_of::<T>();
        if !self.len.is_multiple_of(size) {
            return Err(Error::InvalidArgument(format!("a {} byte buffer is not a whole number of {size}-byte values", self.len)));
        }
        let mut v = vec![T::default(); self.len / size];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ptr == 0 {
            return;
        }
        self.device.inner.driver.free(self.ptr)
    }
}

/// A kernel's parameters, in declaration order.
///
/// Each value is kept in its own 16-byte aligned slot, so that the pointers
/// handed to the driver stay valid and aligned for any parameter type.
#[derive(Default, Debug)]
pub struct KernelArgs {
    slots: Vec<Box<[u128]>>,
}

impl KernelArgs {
    pub fn new() -> KernelArgs {
        KernelArgs::default()
    }

    /// A scalar parameter (`int n`, `float alpha`, `size_t numel`).
    pub fn push<T: Pod>(&mut self, value: T) -> &mut Self {
        self.push_bytes(as_bytes(std::slice::from_ref(&value)))
    }

    /// A device pointer parameter (`const float* x`) pointing at `buffer`.
    /// The buffer must outlive the kernel's execution.
    pub fn push_buffer(&mut self, buffer: &DeviceBuffer) -> &mut Self {
        self.push(buffer.device_ptr())
    }

    /// A parameter given as its raw bytes (a struct passed by value).
    pub fn push_bytes(&mut self, bytes: &[u8]) -> &mut Self {
        let mut slot = vec![0u128; bytes.len().div_ceil(16).max(1)].into_boxed_slice();
        // SAFETY: the slot holds at least `bytes.len()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), slot.as_mut_ptr().cast::<u8>(), bytes.len()) };
        self.slots.push(slot);
        self
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The `void**` array both `cuLaunchKernel` and `hipModuleLaunchKernel` take.
    /// Valid while `self` is neither dropped nor pushed to.
    pub(crate) fn pointers(&mut self) -> Vec<*mut c_void> {
        self.slots.iter_mut().map(|s| s.as_mut_ptr().cast::<c_void>()).collect()
    }
}

/// How long loading a module took, by step.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LoadStats {
    /// Getting the bytes from the source (reading, decompressing).
    pub fetch: Duration,
    /// sha256 and header checks (zero when the bytes were verified before).
    pub verify: Duration,
    /// The driver's module load (for PTX: the JIT compile).
    pub driver: Duration,
}

impl LoadStats {
    pub fn total(&self) -> Duration {
        self.fetch + self.verify + self.driver
    }
}

/// A kernel module loaded on one device; unloaded when the last `Arc` goes.
pub struct Module {
    device: Device,
    handle: u64,
    artifact: Artifact,
    matched: Match,
    stats: LoadStats,
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("artifact", &self.artifact.path)
            .field("matched", &self.matched)
            .field("device", &self.device.ordinal())
            .finish()
    }
}

impl Module {
    pub(crate) fn new(device: Device, handle: u64, artifact: Artifact, matched: Match, stats: LoadStats) -> Module {
        Module { device, handle, artifact, matched, stats }
    }

    /// The artifact it was loaded from (module, arch, kind, path, kernels).
    pub fn artifact(&self) -> &Artifact {
        &self.artifact
    }

    /// Exact SASS/HSACO, PTX, or a generic/sibling code object.
    pub fn matched(&self) -> Match {
        self.matched
    }

    pub fn kind(&self) -> Kind {
        self.artifact.kind
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn stats(&self) -> LoadStats {
        self.stats
    }

    /// The kernel `name` (`affine_f32`).
    pub fn function(self: &Arc<Self>, name: &str) -> Result<Function> {
        let r = self.device.inner.driver.function(self.handle, name);
        match r {
            Ok(handle) => Ok(Function { module: self.clone(), handle, name: name.to_string() }),
            Err(f) if !self.artifact.kernels.iter().any(|k| k == name) => {
                let _ = f;
                Err(Error::KernelNotFound { module: self.artifact.module.clone(), kernel: name.to_string(), artifact: self.artifact.path.clone() })
            }
            Err(f) => Err(self.device.err("get function", format!("kernel `{name}` of `{}`", self.artifact.path))(f)),
        }
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        self.device.unload(self.handle);
    }
}

/// A kernel, ready to launch. Keeps its module loaded.
#[derive(Clone)]
pub struct Function {
    module: Arc<Module>,
    handle: u64,
    name: String,
}

impl std::fmt::Debug for Function {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Function({} in {})", self.name, self.module.artifact.path)
    }
}

impl Function {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn module(&self) -> &Arc<Module> {
        &self.module
    }

    /// Queues the kernel on the device's default stream; [`Device::synchronize`]
    /// or a copy to the host waits for it.
    ///
    /// # Safety
    /// The driver cannot check arguments against the kernel's parameters:
    /// `args` must have exactly the kernel's parameter count, each of its
    /// type, and every pointer must address device memory of this device
    /// large enough for what the kernel touches with this launch
    /// configuration, alive until the kernel finishes. Otherwise the kernel
    /// reads or writes arbitrary device memory.
    pub unsafe fn launch(&self, cfg: &LaunchConfig, args: &mut KernelArgs) -> Result<()> {
        cfg.check()?;
        let mut params: Vec<*mut c_void> = args.pointers();
        let device = &self.module.device;
        let r = unsafe { device.inner.driver.launch(self.handle, cfg, &mut params) };
        r.map_err(device.err("launch", format!("kernel `{}`, grid {:?}, block {:?}", self.name, cfg.grid, cfg.block)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_argument_gets_an_aligned_slot_holding_its_bytes() {
        let mut a = KernelArgs::new();
        a.push(7u32).push(-1.5f32).push(0x1122_3344_5566_7788u64).push_bytes(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]);
        let ptrs = a.pointers();
        assert_eq!(ptrs.len(), 4);
        for p in &ptrs {
            assert_eq!(*p as usize % 16, 0);
        }
        unsafe {
            assert_eq!(*(ptrs[0] as *const u32), 7);
            assert_eq!(*(ptrs[1] as *const f32), -1.5);
            assert_eq!(*(ptrs[2] as *const u64), 0x1122_3344_5566_7788);
            assert_eq!(std::slice::from_raw_parts(ptrs[3] as *const u8, 17)[16], 17);
        }
    }
}
