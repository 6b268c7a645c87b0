//! kiln's CUDA runtime for the static library's launchers.
//!
//! The launchers (candle's C++ host code: `launch_mmq_gguf_q4_0`, ...) are
//! compiled once per host with no kernels in them (kiln-build's host-object
//! job; `kiln_target::host_object` states the contract, and kiln's test holds
//! that this file defines every function it names): every call they make into
//! NVIDIA's runtime (`cudaLaunchKernel`, `__cudaRegisterFunction`, ...) was
//! renamed at build time to `kiln_<lib>_<name>` and lands here. The kernels
//! come from the module images this crate carries per GPU (SASS per sm,
//! loaded with `cuModuleLoadData` in the calling thread's context), so a
//! consumer links only the code of the GPUs it chose, and nothing of
//! NVIDIA's static runtime.
//!
//! What each function does is what the runtime documents for it, through the
//! driver API (libcuda.so.1, loaded at first use):
//! - registration (static constructors, before `main`): which module and
//!   which mangled kernel name each launcher's host stub stands for;
//! - `cudaLaunchKernel`: the kernel of that name in the module's image for
//!   the current context's device, `cuLaunchKernel` with the same arguments;
//!   a null stream is the per-thread default stream (the objects are built
//!   with `--default-stream per-thread`, as upstream's);
//! - errors are returned, and kept for `cudaGetLastError`, as the runtime does.

use std::{
    cell::{Cell, RefCell},
    collections::HashMap,
    ffi::{c_char, c_int, c_uint, c_void, CStr, CString},
    sync::{Mutex, OnceLock},
};

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Dim3 {
    pub x: c_uint,
    pub y: c_uint,
    pub z: c_uint,
}

/// `__fatBinC_Wrapper_t`: what a host object hands to `__cudaRegisterFatBinary`.
#[repr(C)]
struct FatbinWrapper {
    magic: c_int,
    version: c_int,
    data: *const u8,
    filename_or_fatbins: *const c_void,
}

/// The tag kiln writes in place of each object's fatbin: `KILNMOD\0<module>\0`.
use kiln_manifest::kiln_target::host_object::TAG_MAGIC as TAG;

#[derive(Default)]
struct Registry {
    /// Host stub address → (module, mangled kernel name).
    kernels: HashMap<usize, (&'static str, CString)>,
}

fn registry() -> &'static Mutex<Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(Default::default)
}

// cudart's error codes that this runtime returns itself.
const SUCCESS: c_int = 0;
const INVALID_VALUE: c_int = 1;
const INITIALIZATION_ERROR: c_int = 3;
const INVALID_DEVICE_FUNCTION: c_int = 98;
const NO_KERNEL_IMAGE: c_int = 209;
const CU_STREAM_PER_THREAD: usize = 0x2;

thread_local! {
    static LAST_ERROR: Cell<c_int> = const { Cell::new(SUCCESS) };
    static CONFIGS: RefCell<Vec<(Dim3, Dim3, usize, *mut c_void)>> = const { RefCell::new(Vec::new()) };
}

fn fail(code: c_int) -> c_int {
    if code != SUCCESS {
        LAST_ERROR.with(|e| e.set(code));
    }
    code
}

type CuResult = c_int;
type CuCtx = *mut c_void;
type CuModule = *mut c_void;
type CuFunction = *mut c_void;

struct Driver {
    ctx_get_current: unsafe extern "C" fn(*mut CuCtx) -> CuResult,
    ctx_set_current: unsafe extern "C" fn(CuCtx) -> CuResult,
    ctx_get_device: unsafe extern "C" fn(*mut c_int) -> CuResult,
    primary_ctx_retain: unsafe extern "C" fn(*mut CuCtx, c_int) -> CuResult,
    device_get: unsafe extern "C" fn(*mut c_int, c_int) -> CuResult,
    module_load_data: unsafe extern "C" fn(*mut CuModule, *const c_void) -> CuResult,
    module_get_function: unsafe extern "C" fn(*mut CuFunction, CuModule, *const c_char) -> CuResult,
    launch_kernel: unsafe extern "C" fn(
        CuFunction,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        *mut c_void,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> CuResult,
    func_set_attribute: unsafe extern "C" fn(CuFunction, c_int, c_int) -> CuResult,
    memset_d8_async: unsafe extern "C" fn(u64, u8, usize, *mut c_void) -> CuResult,
    mem_alloc_async: unsafe extern "C" fn(*mut u64, usize, *mut c_void) -> CuResult,
    mem_free_async: unsafe extern "C" fn(u64, *mut c_void) -> CuResult,
    mem_alloc: unsafe extern "C" fn(*mut u64, usize) -> CuResult,
    mem_free: unsafe extern "C" fn(u64) -> CuResult,
    device_get_count: unsafe extern "C" fn(*mut c_int) -> CuResult,
    device_get_attribute: unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CuResult,
    func_get_attribute: unsafe extern "C" fn(*mut c_int, c_int, CuFunction) -> CuResult,
    occupancy: unsafe extern "C" fn(*mut c_int, CuFunction, c_int, usize, c_uint) -> CuResult,
    stream_synchronize: unsafe extern "C" fn(*mut c_void) -> CuResult,
}

fn driver() -> Result<&'static Driver, c_int> {
    static D: OnceLock<Option<Driver>> = OnceLock::new();
    D.get_or_init(|| {
        // SAFETY: libcuda's documented entry points with their documented signatures.
        unsafe {
            let lib = libloading::Library::new("libcuda.so.1").ok()?;
            let init: libloading::Symbol<unsafe extern "C" fn(c_uint) -> CuResult> = lib.get(b"cuInit\0").ok()?;
            if init(0) != 0 {
                return None;
            }
            // Each symbol is looked up as a plain pointer, then given its
            // signature: one instantiation of libloading's lookup, not one per
            // signature (this crate's compile time in every consumer's build).
            macro_rules! sym {
                ($name:literal) => {
                    std::mem::transmute::<*mut c_void, _>(*lib.get::<*mut c_void>(concat!($name, "\0").as_bytes()).ok()?)
                };
            }
            let d = Driver {
                ctx_get_current: sym!("cuCtxGetCurrent"),
                ctx_set_current: sym!("cuCtxSetCurrent"),
                ctx_get_device: sym!("cuCtxGetDevice"),
                primary_ctx_retain: sym!("cuDevicePrimaryCtxRetain"),
                device_get: sym!("cuDeviceGet"),
                module_load_data: sym!("cuModuleLoadData"),
                module_get_function: sym!("cuModuleGetFunction"),
                launch_kernel: sym!("cuLaunchKernel"),
                func_set_attribute: sym!("cuFuncSetAttribute"),
                memset_d8_async: sym!("cuMemsetD8Async"),
                mem_alloc_async: sym!("cuMemAllocAsync"),
                mem_free_async: sym!("cuMemFreeAsync"),
                mem_alloc: sym!("cuMemAlloc_v2"),
                mem_free: sym!("cuMemFree_v2"),
                device_get_count: sym!("cuDeviceGetCount"),
                device_get_attribute: sym!("cuDeviceGetAttribute"),
                func_get_attribute: sym!("cuFuncGetAttribute"),
                occupancy: sym!("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags"),
                stream_synchronize: sym!("cuStreamSynchronize"),
            };
            // The process's CUDA user keeps libcuda loaded anyway.
            std::mem::forget(lib);
            Some(d)
        }
    })
    .as_ref()
    .ok_or(INITIALIZATION_ERROR)
}

/// The calling thread's context, else device 0's primary context made
/// current (what the runtime does on first use).
fn context(d: &Driver) -> Result<CuCtx, c_int> {
    let mut ctx: CuCtx = std::ptr::null_mut();
    // SAFETY: out-pointers to locals.
    unsafe {
        if (d.ctx_get_current)(&mut ctx) == 0 && !ctx.is_null() {
            return Ok(ctx);
        }
        let mut dev = 0;
        if (d.device_get)(&mut dev, 0) != 0 || (d.primary_ctx_retain)(&mut ctx, dev) != 0 || (d.ctx_set_current)(ctx) != 0 {
            return Err(INITIALIZATION_ERROR);
        }
    }
    Ok(ctx)
}

/// The kernel a host stub stands for, in the current context.
fn function(host_fun: *const c_void) -> Result<CuFunction, c_int> {
    static MODULES: OnceLock<Mutex<HashMap<(usize, &'static str), usize>>> = OnceLock::new();
    static FUNCTIONS: OnceLock<Mutex<HashMap<(usize, usize), usize>>> = OnceLock::new();
    let d = driver()?;
    let ctx = context(d)?;
    let functions = FUNCTIONS.get_or_init(Default::default);
    if let Some(&f) = functions.lock().unwrap().get(&(ctx as usize, host_fun as usize)) {
        return Ok(f as CuFunction);
    }
    let (module, name) = {
        let r = registry().lock().unwrap();
        let Some((m, n)) = r.kernels.get(&(host_fun as usize)) else { return Err(INVALID_DEVICE_FUNCTION) };
        (*m, n.clone())
    };
    let modules = MODULES.get_or_init(Default::default);
    let mut loaded = modules.lock().unwrap();
    let handle = match loaded.get(&(ctx as usize, module)) {
        Some(&m) => m as CuModule,
        None => {
            let image = crate::library_image(module).map_err(|e| {
                eprintln!("{e}");
                NO_KERNEL_IMAGE
            })?;
            let mut m: CuModule = std::ptr::null_mut();
            // SAFETY: a fatbinary the provider made, alive for the process.
            let r = unsafe { (d.module_load_data)(&mut m, image.as_ptr().cast()) };
            if r != 0 {
                return Err(r);
            }
            loaded.insert((ctx as usize, module), m as usize);
            m
        }
    };
    drop(loaded);
    let mut f: CuFunction = std::ptr::null_mut();
    // SAFETY: a loaded module and a NUL-terminated name.
    let r = unsafe { (d.module_get_function)(&mut f, handle, name.as_ptr()) };
    if r != 0 {
        // A kernel this GPU's code lacks (gated out below its sm, as upstream's build does).
        return Err(INVALID_DEVICE_FUNCTION);
    }
    functions.lock().unwrap().insert((ctx as usize, host_fun as usize), f as usize);
    Ok(f)
}

fn launch(host_fun: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shmem: usize, stream: *mut c_void, ptsz: bool) -> c_int {
    let f = match function(host_fun) {
        Ok(f) => f,
        Err(e) => {
            if std::env::var_os("KILN_FFI_DEBUG").is_some() {
                eprintln!("launch {:p}: error {e}", host_fun);
            }
            return fail(e);
        }
    };
    let stream = if stream.is_null() && ptsz { CU_STREAM_PER_THREAD as *mut c_void } else { stream };
    let Ok(d) = driver() else { return fail(INITIALIZATION_ERROR) };
    // SAFETY: `args` is the launcher's array of pointers to the kernel's arguments, as cuLaunchKernel takes it.
    let r = unsafe { (d.launch_kernel)(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, shmem as c_uint, stream, args, std::ptr::null_mut()) };
    fail(r)
}

// The renamed runtime entry points. `kiln_moe_` is the prefix of the library `moe`.

#[unsafe(no_mangle)]
pub unsafe extern "C" fn kiln_moe___cudaRegisterFatBinary(wrapper: *const c_void) -> *mut *mut c_void {
    // SAFETY: nvcc's wrapper struct, whose data kiln replaced by its tag.
    let module: &'static str = unsafe {
        let w = &*(wrapper as *const FatbinWrapper);
        let data = std::slice::from_raw_parts(w.data, TAG.len());
        if data != TAG {
            ""
        } else {
            let name = CStr::from_ptr(w.data.add(TAG.len()).cast());
            Box::leak(name.to_string_lossy().into_owned().into_boxed_str())
        }
    };
    Box::into_raw(Box::new(Box::into_raw(Box::new(module)) as *mut c_void))
}

/// `__device__` variables: the kernels reach them in their module; the host
/// never copies to or from them (no `cudaMemcpyToSymbol` in the launchers).
#[unsafe(no_mangle)]
pub extern "C" fn kiln_moe___cudaRegisterVar(
    _handle: *mut *mut c_void,
    _host_var: *mut c_char,
    _device_address: *mut c_char,
    _device_name: *const c_char,
    _ext: c_int,
    _size: usize,
    _constant: c_int,
    _global: c_int,
) {
}

#[unsafe(no_mangle)]
pub extern "C" fn kiln_moe___cudaRegisterFatBinaryEnd(_handle: *mut *mut c_void) {}

#[unsafe(no_mangle)]
pub extern "C" fn kiln_moe___cudaUnregisterFatBinary(_handle: *mut *mut c_void) {}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn kiln_moe___cudaRegisterFunction(
    handle: *mut *mut c_void,
    host_fun: *const c_char,
    _device_fun: *mut c_char,
    device_name: *const c_char,
    _thread_limit: c_int,
    _tid: *mut c_void,
    _bid: *mut c_void,
    _bdim: *mut Dim3,
    _gdim: *mut Dim3,
    _wsize: *mut c_int,
) {
    // SAFETY: the handle this module returned, and nvcc's NUL-terminated name.
    let (module, name) = unsafe { (*(*handle as *const &'static str), CStr::from_ptr(device_name).to_owned()) };
    if std::env::var_os("KILN_FFI_DEBUG").is_some() {
        eprintln!("register {:p} {module} {:?}", host_fun, name);
    }
    registry().lock().unwrap().kernels.insert(host_fun as usize, (module, name));
}

#[unsafe(no_mangle)]
pub extern "C" fn kiln_moe___cudaPushCallConfiguration(grid: Dim3, block: Dim3, shmem: usize, stream: *mut c_void) -> c_uint {
    CONFIGS.with(|c| c.borrow_mut().push((grid, block, shmem, stream)));
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn kiln_moe___cudaPopCallConfiguration(
    grid: *mut Dim3,
    block: *mut Dim3,
    shmem: *mut usize,
    stream: *mut *mut c_void,
) -> c_int {
    match CONFIGS.with(|c| c.borrow_mut().pop()) {
        // SAFETY: the stub's out-pointers.
        Some((g, b, s, st)) => unsafe {
            *grid = g;
            *block = b;
            *shmem = s;
            *stream = st;
            SUCCESS
        },
        None => fail(INVALID_VALUE),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn kiln_moe_cudaLaunchKernel(
    f: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: *mut *mut c_void,
    shmem: usize,
    stream: *mut c_void,
) -> c_int {
    launch(f, grid, block, args, shmem, stream, false)
}

#[unsafe(no_mangle)]
pub extern "C" fn kiln_moe_cudaLaunchKernel_ptsz(
    f: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: *mut *mut c_void,
    shmem: usize,
    stream: *mut c_void,
) -> c_int {
    launch(f, grid, block, args, shmem, stream, true)
}

#[unsafe(no_mangle)]
pub extern "C" fn kiln_moe_cudaGetLastError() -> c_int {
    LAST_ERROR.with(|e| e.replace(SUCCESS))
}

#[unsafe(no_mangle)]
pub extern "C" fn kiln_moe_cudaPeekAtLastError() -> c_int {
    LAST_ERROR.with(|e| e.get())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn kiln_moe_cudaGetDevice(device: *mut c_int) -> c_int {
    let d = match driver() {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    if let Err(e) = context(d) {
        return fail(e);
    }
    // SAFETY: the caller's out-pointer.
    fail(unsafe { (d.ctx_get_device)(device) })
}

#[unsafe(no_mangle)]
pub extern "C" fn kiln_moe_cudaFuncSetAttribute(f: *const c_void, attr: c_int, value: c_int) -> c_int {
    // cudaFuncAttributeMaxDynamicSharedMemorySize (8) and the preferred carveout (9)
    // have the driver's numbers (CU_FUNC_ATTRIBUTE_*).
    let func = match function(f) {
        Ok(func) => func,
        Err(e) => return fail(e),
    };
    let Ok(d) = driver() else { return fail(INITIALIZATION_ERROR) };
    // SAFETY: a function of a loaded module.
    fail(unsafe { (d.func_set_attribute)(func, attr, value) })
}

fn stream_of(stream: *mut c_void, ptsz: bool) -> *mut c_void {
    if stream.is_null() && ptsz {
        CU_STREAM_PER_THREAD as *mut c_void
    } else {
        stream
    }
}

fn memset(ptr: *mut c_void, value: c_int, count: usize, stream: *mut c_void, ptsz: bool) -> c_int {
    let d = match driver().and_then(|d| context(d).map(|_| d)) {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    // SAFETY: a device pointer of the caller's.
    fail(unsafe { (d.memset_d8_async)(ptr as u64, value as u8, count, stream_of(stream, ptsz)) })
}

#[unsafe(no_mangle)]
pub extern "C" fn kiln_moe_cudaMemsetAsync(ptr: *mut c_void, value: c_int, count: usize, stream: *mut c_void) -> c_int {
    memset(ptr, value, count, stream, false)
}

#[unsafe(no_mangle)]
pub extern "C" fn kiln_moe_cudaMemsetAsync_ptsz(ptr: *mut c_void, value: c_int, count: usize, stream: *mut c_void) -> c_int {
    memset(ptr, value, count, stream, true)
}

fn malloc(ptr: *mut *mut c_void, size: usize, stream: *mut c_void, ptsz: bool) -> c_int {
    let d = match driver().and_then(|d| context(d).map(|_| d)) {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let mut p = 0u64;
    // SAFETY: an out-pointer to a local.
    let r = unsafe { (d.mem_alloc_async)(&mut p, size, stream_of(stream, ptsz)) };
    if r == 0 {
        // SAFETY: the caller's out-pointer.
        unsafe { *ptr = p as *mut c_void };
    }
    fail(r)
}

#[unsafe(no_mangle)]
pub extern "C" fn kiln_moe_cudaMallocAsync(ptr: *mut *mut c_void, size: usize, stream: *mut c_void) -> c_int {
    malloc(ptr, size, stream, false)
}

#[unsafe(no_mangle)]
pub extern "C" fn kiln_moe_cudaMallocAsync_ptsz(ptr: *mut *mut c_void, size: usize, stream: *mut c_void) -> c_int {
    malloc(ptr, size, stream, true)
}

fn free(ptr: *mut c_void, stream: *mut c_void, ptsz: bool) -> c_int {
    let d = match driver().and_then(|d| context(d).map(|_| d)) {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    // SAFETY: a pointer the caller allocated with cudaMallocAsync.
    fail(unsafe { (d.mem_free_async)(ptr as u64, stream_of(stream, ptsz)) })
}

#[unsafe(no_mangle)]
pub extern "C" fn kiln_moe_cudaFreeAsync(ptr: *mut c_void, stream: *mut c_void) -> c_int {
    free(ptr, stream, false)
}

#[unsafe(no_mangle)]
pub extern "C" fn kiln_moe_cudaFreeAsync_ptsz(ptr: *mut c_void, stream: *mut c_void) -> c_int {
    free(ptr, stream, true)
}

// What Thrust/CUB's host code calls (moe_wmma*.cu's scans): allocation, device queries,
// kernel attributes and occupancy, stream synchronisation, error text.

/// The calling thread's driver, its context made current.
fn ready() -> Result<&'static Driver, c_int> {
    let d = driver()?;
    context(d)?;
    Ok(d)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn kiln_moe_cudaMalloc(ptr: *mut *mut c_void, size: usize) -> c_int {
    let d = match ready() {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let mut p = 0u64;
    // SAFETY: an out-pointer to a local.
    let r = unsafe { (d.mem_alloc)(&mut p, size) };
    if r == 0 {
        // SAFETY: the caller's out-pointer.
        unsafe { *ptr = p as *mut c_void };
    }
    fail(r)
}

#[unsafe(no_mangle)]
pub extern "C" fn kiln_moe_cudaFree(ptr: *mut c_void) -> c_int {
    if ptr.is_null() {
        return SUCCESS;
    }
    let d = match ready() {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    // SAFETY: a pointer the caller allocated with cudaMalloc.
    fail(unsafe { (d.mem_free)(ptr as u64) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn kiln_moe_cudaGetDeviceCount(count: *mut c_int) -> c_int {
    let d = match driver() {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    // SAFETY: the caller's out-pointer.
    fail(unsafe { (d.device_get_count)(count) })
}

/// The runtime's device attributes have the driver's numbers (cudaDevAttr* = CU_DEVICE_ATTRIBUTE_*).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kiln_moe_cudaDeviceGetAttribute(value: *mut c_int, attr: c_int, device: c_int) -> c_int {
    let d = match driver() {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let mut dev = 0;
    // SAFETY: out-pointers.
    unsafe {
        let r = (d.device_get)(&mut dev, device);
        if r != 0 {
            return fail(r);
        }
        fail((d.device_get_attribute)(value, attr, dev))
    }
}

/// NVIDIA's runtime: the device of the calling thread, its primary context made current.
#[unsafe(no_mangle)]
pub extern "C" fn kiln_moe_cudaSetDevice(device: c_int) -> c_int {
    let d = match driver() {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let (mut dev, mut ctx) = (0, std::ptr::null_mut());
    // SAFETY: out-pointers to locals.
    unsafe {
        let r = (d.device_get)(&mut dev, device);
        if r != 0 {
            return fail(r);
        }
        let r = (d.primary_ctx_retain)(&mut ctx, dev);
        if r != 0 {
            return fail(r);
        }
        fail((d.ctx_set_current)(ctx))
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn kiln_moe_cudaStreamSynchronize(stream: *mut c_void) -> c_int {
    match ready() {
        // SAFETY: a stream of the caller's.
        Ok(d) => fail(unsafe { (d.stream_synchronize)(stream_of(stream, false)) }),
        Err(e) => fail(e),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn kiln_moe_cudaStreamSynchronize_ptsz(stream: *mut c_void) -> c_int {
    match ready() {
        // SAFETY: a stream of the caller's.
        Ok(d) => fail(unsafe { (d.stream_synchronize)(stream_of(stream, true)) }),
        Err(e) => fail(e),
    }
}

/// `struct cudaFuncAttributes` of CUDA 12 (driver_types.h).
#[repr(C)]
pub struct FuncAttributes {
    shared_size_bytes: usize,
    const_size_bytes: usize,
    local_size_bytes: usize,
    max_threads_per_block: c_int,
    num_regs: c_int,
    ptx_version: c_int,
    binary_version: c_int,
    cache_mode_ca: c_int,
    max_dynamic_shared_size_bytes: c_int,
    preferred_shmem_carveout: c_int,
    cluster_dim_must_be_set: c_int,
    required_cluster_width: c_int,
    required_cluster_height: c_int,
    required_cluster_depth: c_int,
    cluster_scheduling_policy_preference: c_int,
    non_portable_cluster_size_allowed: c_int,
    reserved: [c_int; 16],
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn kiln_moe_cudaFuncGetAttributes(attr: *mut FuncAttributes, f: *const c_void) -> c_int {
    let func = match function(f) {
        Ok(func) => func,
        Err(e) => return fail(e),
    };
    let Ok(d) = driver() else { return fail(INITIALIZATION_ERROR) };
    // CU_FUNC_ATTRIBUTE_* 0..=15, in the order of the struct's ints after its three sizes.
    let mut v = [0 as c_int; 16];
    for (i, slot) in v.iter_mut().enumerate() {
        // SAFETY: a function of a loaded module; an out-pointer to a local.
        let r = unsafe { (d.func_get_attribute)(slot, i as c_int, func) };
        if r != 0 && i < 10 {
            return fail(r);
        }
    }
    // SAFETY: the caller's out-pointer.
    unsafe {
        *attr = FuncAttributes {
            max_threads_per_block: v[0],
            shared_size_bytes: v[1] as usize,
            const_size_bytes: v[2] as usize,
            local_size_bytes: v[3] as usize,
            num_regs: v[4],
            ptx_version: v[5],
            binary_version: v[6],
            cache_mode_ca: v[7],
            max_dynamic_shared_size_bytes: v[8],
            preferred_shmem_carveout: v[9],
            cluster_dim_must_be_set: v[10],
            required_cluster_width: v[11],
            required_cluster_height: v[12],
            required_cluster_depth: v[13],
            non_portable_cluster_size_allowed: v[14],
            cluster_scheduling_policy_preference: v[15],
            reserved: [0; 16],
        };
    }
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn kiln_moe_cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    blocks: *mut c_int,
    f: *const c_void,
    block_size: c_int,
    dynamic_smem: usize,
    flags: c_uint,
) -> c_int {
    let func = match function(f) {
        Ok(func) => func,
        Err(e) => return fail(e),
    };
    let Ok(d) = driver() else { return fail(INITIALIZATION_ERROR) };
    // SAFETY: the caller's out-pointer; a function of a loaded module.
    fail(unsafe { (d.occupancy)(blocks, func, block_size, dynamic_smem, flags) })
}

/// The runtime's error names, as static C strings (unknown codes by number).
fn error_text(code: c_int) -> *const c_char {
    static TEXT: OnceLock<Mutex<HashMap<c_int, &'static CStr>>> = OnceLock::new();
    let mut map = TEXT.get_or_init(Default::default).lock().unwrap();
    let s = map.entry(code).or_insert_with(|| {
        let name = match code {
            SUCCESS => "cudaSuccess".to_string(),
            INVALID_VALUE => "cudaErrorInvalidValue".to_string(),
            2 => "cudaErrorMemoryAllocation".to_string(),
            INITIALIZATION_ERROR => "cudaErrorInitializationError (kiln: no CUDA driver or device)".to_string(),
            INVALID_DEVICE_FUNCTION => "cudaErrorInvalidDeviceFunction (kiln: this GPU's code lacks the kernel)".to_string(),
            NO_KERNEL_IMAGE => "cudaErrorNoKernelImageForDevice (kiln: no code carried for this GPU)".to_string(),
            n => format!("CUDA error {n}"),
        };
        Box::leak(CString::new(name).expect("no NUL").into_boxed_c_str())
    });
    s.as_ptr()
}

#[unsafe(no_mangle)]
pub extern "C" fn kiln_moe_cudaGetErrorName(code: c_int) -> *const c_char {
    error_text(code)
}

#[unsafe(no_mangle)]
pub extern "C" fn kiln_moe_cudaGetErrorString(code: c_int) -> *const c_char {
    error_text(code)
}
