//! The HIP backend: a small binding that dlopens libamdhip64 at run time and
//! resolves the handful of entry points it needs (docs/loader.md says why
//! this and not rocm-rs). Nothing of ROCm is needed to build.
//!
//! Only calls whose C signature has not changed between ROCm 5 and 7 are
//! used. The one exception is the device's arch name, which HIP offers only
//! inside `hipDeviceProp_t`, whose layout changed in ROCm 6; see `arch_name`.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::path::PathBuf;
use std::sync::OnceLock;

use kiln_manifest::{Artifact, Backend, DeviceArch};

use crate::args::LaunchConfig;
use crate::driver::{kernel_name, Driver, DriverFail, DriverResult, RawDeviceInfo};
use crate::error::{Error, Result};

/// Names an explicit libamdhip64 to load instead of searching.
pub const LIBRARY_ENV: &str = "KILN_HIP_LIBRARY";

type HipError = c_int;

/// The `hipError_t` values the binding tells apart, by the name HIP's header
/// (`hip/hip_runtime_api.h`) gives them. Checked against each runner image's
/// HIP headers by crates/kiln-container/tests/hip_runtime.rs.
pub const ERROR_CODES: [(&str, c_int); 3] = [("hipSuccess", 0), ("hipErrorNoDevice", 100), ("hipErrorInvalidDevice", 101)];
const HIP_SUCCESS: HipError = ERROR_CODES[0].1;
const HIP_ERROR_NO_DEVICE: HipError = ERROR_CODES[1].1;
const HIP_ERROR_INVALID_DEVICE: HipError = ERROR_CODES[2].1;

// The struct layouts the binding reads are kiln-target's (the drop-in's `Module::hsaco()`
// check reads them too): one table, checked against each runner image's runtime.
pub use kiln_manifest::kiln_target::hip_abi::{PropertiesCall, PROPERTIES_CALLS, PROPS_BUFFER};

type PropertiesFn = unsafe extern "C" fn(*mut c_void, c_int) -> HipError;

/// The resolved entry points. Plain function pointers, copied out of the
/// library, which `Api` keeps loaded for as long as the process lives.
#[allow(non_snake_case)]
struct Api {
    path: String,
    _library: libloading::Library,
    hipInit: unsafe extern "C" fn(c_uint) -> HipError,
    hipDriverGetVersion: unsafe extern "C" fn(*mut c_int) -> HipError,
    /// `HIP_VERSION` (major * 10 000 000 + minor * 100 000 + patch): the ROCm
    /// release, which decides whether a generic target's code object loads.
    hipRuntimeGetVersion: unsafe extern "C" fn(*mut c_int) -> HipError,
    hipGetDeviceCount: unsafe extern "C" fn(*mut c_int) -> HipError,
    hipSetDevice: unsafe extern "C" fn(c_int) -> HipError,
    hipDeviceGetName: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> HipError,
    hipGetErrorName: unsafe extern "C" fn(HipError) -> *const c_char,
    hipGetErrorString: unsafe extern "C" fn(HipError) -> *const c_char,
    hipMalloc: unsafe extern "C" fn(*mut *mut c_void, usize) -> HipError,
    hipFree: unsafe extern "C" fn(*mut c_void) -> HipError,
    hipMemset: unsafe extern "C" fn(*mut c_void, c_int, usize) -> HipError,
    hipMemcpyHtoD: unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> HipError,
    hipMemcpyDtoH: unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> HipError,
    hipDeviceSynchronize: unsafe extern "C" fn() -> HipError,
    hipModuleLoadData: unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> HipError,
    hipModuleUnload: unsafe extern "C" fn(*mut c_void) -> HipError,
    hipModuleGetFunction: unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const c_char) -> HipError,
    #[allow(clippy::type_complexity)]
    hipModuleLaunchKernel: unsafe extern "C" fn(
        *mut c_void,
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
    ) -> HipError,
    /// The first of [`PROPERTIES_CALLS`] the library exports.
    properties: Option<(&'static PropertiesCall, PropertiesFn)>,
}

/// The symbols `Api` must have (its `sym!`s: a unit test holds the two
/// together); a library lacking one is refused.
pub const REQUIRED_SYMBOLS: &[&str] = &[
    "hipInit",
    "hipDriverGetVersion",
    "hipRuntimeGetVersion",
    "hipGetDeviceCount",
    "hipSetDevice",
    "hipDeviceGetName",
    "hipGetErrorName",
    "hipGetErrorString",
    "hipMalloc",
    "hipFree",
    "hipMemset",
    "hipMemcpyHtoD",
    "hipMemcpyDtoH",
    "hipDeviceSynchronize",
    "hipModuleLoadData",
    "hipModuleUnload",
    "hipModuleGetFunction",
    "hipModuleLaunchKernel",
];

/// Where to look for the runtime: `KILN_HIP_LIBRARY`, the loader's search
/// path, then ROCm's install prefix (which is often not on that path).
pub fn library_candidates() -> Vec<String> {
    if let Some(explicit) = std::env::var_os(LIBRARY_ENV) {
        return vec![explicit.to_string_lossy().into_owned()];
    }
    let mut c: Vec<String> = if cfg!(windows) {
        vec!["amdhip64_7.dll".into(), "amdhip64_6.dll".into(), "amdhip64.dll".into()]
    } else {
        kiln_manifest::kiln_target::hip_abi::LIBRARY_NAMES.iter().map(|n| n.to_string()).collect()
    };
    if !cfg!(windows) {
        let mut prefixes: Vec<PathBuf> = std::env::var_os("ROCM_PATH").map(PathBuf::from).into_iter().collect();
        prefixes.push(PathBuf::from("/opt/rocm"));
        for p in prefixes {
            c.push(p.join("lib/libamdhip64.so").display().to_string());
        }
    }
    c
}

static API: OnceLock<std::result::Result<Api, Error>> = OnceLock::new();
static INIT: OnceLock<std::result::Result<(), DriverFail>> = OnceLock::new();

fn load_api(candidates: &[String]) -> std::result::Result<Api, Error> {
    let mut detail = String::new();
    for path in candidates {
        // SAFETY: the HIP runtime's initialisers run; that is loading ROCm.
        let library = match unsafe { libloading::Library::new(path.as_str()) } {
            Ok(l) => l,
            Err(e) => {
                if detail.is_empty() || std::path::Path::new(path).is_absolute() && std::path::Path::new(path).exists() {
                    detail = crate::dl_error(&e);
                }
                continue;
            }
        };
        return bind(path, library);
    }
    Err(Error::DriverMissing { backend: Backend::Hip, tried: candidates.to_vec(), detail })
}

fn bind(path: &str, library: libloading::Library) -> std::result::Result<Api, Error> {
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the type is the C signature of the HIP entry point of this name.
            *unsafe { library.get($name.as_bytes()) }.map_err(|_| Error::DriverTooOld {
                backend: Backend::Hip,
                library: path.to_string(),
                symbol: $name.to_string(),
            })?
        };
    }
    let properties = PROPERTIES_CALLS.iter().find_map(|call| {
        // SAFETY: every call of the table has the C signature `PropertiesFn`.
        unsafe { library.get::<PropertiesFn>(call.symbol.as_bytes()) }.ok().map(|f| (call, *f))
    });
    Ok(Api {
        path: path.to_string(),
        hipInit: sym!("hipInit"),
        hipDriverGetVersion: sym!("hipDriverGetVersion"),
        hipRuntimeGetVersion: sym!("hipRuntimeGetVersion"),
        hipGetDeviceCount: sym!("hipGetDeviceCount"),
        hipSetDevice: sym!("hipSetDevice"),
        hipDeviceGetName: sym!("hipDeviceGetName"),
        hipGetErrorName: sym!("hipGetErrorName"),
        hipGetErrorString: sym!("hipGetErrorString"),
        hipMalloc: sym!("hipMalloc"),
        hipFree: sym!("hipFree"),
        hipMemset: sym!("hipMemset"),
        hipMemcpyHtoD: sym!("hipMemcpyHtoD"),
        hipMemcpyDtoH: sym!("hipMemcpyDtoH"),
        hipDeviceSynchronize: sym!("hipDeviceSynchronize"),
        hipModuleLoadData: sym!("hipModuleLoadData"),
        hipModuleUnload: sym!("hipModuleUnload"),
        hipModuleGetFunction: sym!("hipModuleGetFunction"),
        hipModuleLaunchKernel: sym!("hipModuleLaunchKernel"),
        properties,
        _library: library,
    })
}

fn api() -> Result<&'static Api> {
    match API.get_or_init(|| load_api(&library_candidates())) {
        Ok(a) => Ok(a),
        Err(e) => Err(clone_error(e)),
    }
}

fn clone_error(e: &Error) -> Error {
    match e {
        Error::DriverMissing { backend, tried, detail } => Error::DriverMissing { backend: *backend, tried: tried.clone(), detail: detail.clone() },
        Error::DriverTooOld { backend, library, symbol } => {
            Error::DriverTooOld { backend: *backend, library: library.clone(), symbol: symbol.clone() }
        }
        other => Error::InvalidArgument(other.to_string()),
    }
}

impl Api {
    fn fail(&self, code: HipError) -> DriverFail {
        let text = |p: *const c_char| if p.is_null() { String::new() } else { unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned() };
        // SAFETY: both return static strings (or null for codes they do not know).
        let (name, mut message) = unsafe { (text((self.hipGetErrorName)(code)), text((self.hipGetErrorString)(code))) };
        // ROCm 5 answers hipGetErrorString with the name; say it once.
        if message == name {
            message.clear();
        }
        DriverFail { code: code as i64, name, message }
    }

    fn check(&self, code: HipError) -> std::result::Result<(), DriverFail> {
        if code == HIP_SUCCESS {
            Ok(())
        } else {
            Err(self.fail(code))
        }
    }

    /// `hipInit` once per process; its outcome is remembered, as the runtime's is.
    fn init(&self) -> std::result::Result<(), DriverFail> {
        INIT.get_or_init(|| {
            // SAFETY: no arguments but flags, which must be 0.
            self.check(unsafe { (self.hipInit)(0) }).map_err(|mut f| {
                f.message = format!("hipInit: {}", f.message);
                f
            })
        })
        .clone()
    }

    fn device_count(&self) -> std::result::Result<usize, DriverFail> {
        self.init()?;
        let mut n: c_int = 0;
        // SAFETY: writes one int.
        self.check(unsafe { (self.hipGetDeviceCount)(&mut n) })?;
        Ok(n.max(0) as usize)
    }

    /// The device's `gcnArchName` (`gfx90a:sramecc+:xnack-`).
    ///
    /// HIP has no stable call for it: `hipDeviceAttributeGcnArchName` was
    /// dropped, and `hipGetDeviceProperties` is, since ROCm 6, a macro for
    /// `hipGetDevicePropertiesR0600` while the plain symbol keeps the ROCm 5
    /// layout. So: the versioned symbol when the library has it, else the
    /// plain one, each read at its layout's offset into a buffer far larger
    /// than the struct. The result must read as an AMD processor name, or it
    /// is refused rather than trusted.
    fn arch_name(&self, ordinal: c_int) -> std::result::Result<String, String> {
        let Some((layout, call)) = self.properties else {
            let names: Vec<&str> = PROPERTIES_CALLS.iter().map(|c| c.symbol).collect();
            return Err(format!("{} has none of {}", self.path, names.join(", ")));
        };
        let mut props = vec![0u64; PROPS_BUFFER / 8];
        // SAFETY: the buffer is larger than any hipDeviceProp_t layout and 8-byte aligned.
        let code = unsafe { call(props.as_mut_ptr().cast(), ordinal) };
        if code != HIP_SUCCESS {
            let f = self.fail(code);
            return Err(format!("hipGetDeviceProperties failed: {} {}", f.name, f.message));
        }
        let name = kiln_manifest::kiln_target::hip_abi::gcn_arch_name(crate::args::as_bytes(&props), layout).unwrap_or_default();
        match DeviceArch::parse(&name) {
            Ok(DeviceArch::Hip { .. }) => Ok(name),
            _ => Err(format!(
                "the HIP runtime {} reported arch name {name:?}, which is not an AMD processor kiln knows (unrecognised ROCm ABI?)",
                self.path
            )),
        }
    }
}

/// How many HIP devices the runtime reports.
pub(crate) fn count() -> Result<usize> {
    let api = api()?;
    api.device_count().map_err(|f| no_device_or(f, 0, "hipGetDeviceCount"))
}

/// "No device" comes back from hipInit or hipGetDeviceCount as an error code.
fn no_device_or(f: DriverFail, ordinal: usize, call: &'static str) -> Error {
    if f.code == HIP_ERROR_NO_DEVICE as i64 || f.code == HIP_ERROR_INVALID_DEVICE as i64 {
        Error::NoDevice {
            backend: Backend::Hip,
            ordinal,
            count: 0,
            detail: format!("{} {}: {}", f.code, f.name, f.message).trim_end_matches([' ', ':']).to_string(),
        }
    } else {
        Error::Driver { backend: Backend::Hip, call, code: f.code, name: f.name, message: f.message, context: String::new() }
    }
}

fn driver_err(call: &'static str, context: String) -> impl FnOnce(DriverFail) -> Error {
    move |f| Error::Driver { backend: Backend::Hip, call, code: f.code, name: f.name, message: f.message, context }
}

/// Probe the runtime without touching a device: load the library and resolve
/// every entry point. For diagnostics and tests.
pub fn probe() -> Result<String> {
    api().map(|a| a.path.clone())
}

/// One HIP device. HIP keeps a current device per thread, so every call
/// selects it first.
pub(crate) struct HipDevice {
    api: &'static Api,
    ordinal: c_int,
}

impl HipDevice {
    pub(crate) fn open(ordinal: usize) -> Result<(HipDevice, RawDeviceInfo)> {
        let api = api()?;
        let n = api.device_count().map_err(|f| no_device_or(f, ordinal, "hipGetDeviceCount"))?;
        if ordinal >= n {
            return Err(Error::NoDevice { backend: Backend::Hip, ordinal, count: n, detail: String::new() });
        }
        let dev = HipDevice { api, ordinal: ordinal as c_int };
        dev.select().map_err(driver_err("hipSetDevice", format!("device {ordinal}")))?;
        let reported = api.arch_name(dev.ordinal).map_err(|m| Error::Driver {
            backend: Backend::Hip,
            call: "hipGetDeviceProperties",
            code: -1,
            name: String::new(),
            message: m,
            context: format!("device {ordinal}"),
        })?;
        let arch = DeviceArch::parse(&reported)?;
        let mut name = vec![0 as c_char; 256];
        // SAFETY: writes at most 255 chars and a NUL.
        let name = match unsafe { (api.hipDeviceGetName)(name.as_mut_ptr(), 255, dev.ordinal) } {
            HIP_SUCCESS => unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned(),
            _ => String::new(),
        };
        let mut version: c_int = 0;
        // SAFETY: writes one int.
        let driver_version = match unsafe { (api.hipDriverGetVersion)(&mut version) } {
            HIP_SUCCESS => format!("HIP {version}"),
            _ => "HIP (unknown version)".into(),
        };
        let mut runtime: c_int = 0;
        // SAFETY: writes one int.
        let hip_runtime = match unsafe { (api.hipRuntimeGetVersion)(&mut runtime) } {
            HIP_SUCCESS => kiln_manifest::kiln_target::rocm_of_hip_version(runtime.into()),
            _ => None,
        };
        let info = RawDeviceInfo { ordinal, name, arch, reported_arch: reported, driver_version, hip_runtime, context_id: 0 };
        Ok((dev, info))
    }

    fn select(&self) -> DriverResult<()> {
        // SAFETY: takes an ordinal checked against the count.
        self.api.check(unsafe { (self.api.hipSetDevice)(self.ordinal) })
    }
}

impl Driver for HipDevice {
    fn load_hint(&self, _code: i64, artifact: &Artifact, device: &DeviceArch) -> String {
        load_hint(artifact, device)
    }

    fn alloc(&self, bytes: usize) -> DriverResult<u64> {
        self.select()?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: writes one pointer.
        self.api.check(unsafe { (self.api.hipMalloc)(&mut p, bytes) })?;
        // SAFETY: `p` holds `bytes` bytes.
        if let Err(f) = self.api.check(unsafe { (self.api.hipMemset)(p, 0, bytes) }) {
            unsafe { (self.api.hipFree)(p) };
            return Err(f);
        }
        Ok(p as u64)
    }

    fn free(&self, ptr: u64) {
        if self.select().is_ok() {
            // SAFETY: `ptr` came from hipMalloc and is freed once (DeviceBuffer's drop).
            unsafe { (self.api.hipFree)(ptr as *mut c_void) };
        }
    }

    fn htod(&self, dst: u64, src: &[u8]) -> DriverResult<()> {
        self.select()?;
        // SAFETY: `dst` holds at least `src.len()` bytes (checked by DeviceBuffer); HIP only reads `src`.
        self.api.check(unsafe { (self.api.hipMemcpyHtoD)(dst as *mut c_void, src.as_ptr() as *mut c_void, src.len()) })
    }

    fn dtoh(&self, dst: &mut [u8], src: u64) -> DriverResult<()> {
        self.select()?;
        // SAFETY: as above, the other way.
        self.api.check(unsafe { (self.api.hipMemcpyDtoH)(dst.as_mut_ptr().cast(), src as *mut c_void, dst.len()) })
    }

    fn synchronize(&self) -> DriverResult<()> {
        self.select()?;
        // SAFETY: no arguments.
        self.api.check(unsafe { (self.api.hipDeviceSynchronize)() })
    }

    fn load_module(&self, image: &[u8]) -> DriverResult<u64> {
        self.select()?;
        let mut m: *mut c_void = std::ptr::null_mut();
        // SAFETY: `image` is a whole code object (checked before), alive for the call.
        self.api.check(unsafe { (self.api.hipModuleLoadData)(&mut m, image.as_ptr().cast()) })?;
        Ok(m as u64)
    }

    fn unload(&self, module: u64) {
        if self.select().is_ok() {
            // SAFETY: `module` came from hipModuleLoadData and is unloaded once.
            unsafe { (self.api.hipModuleUnload)(module as *mut c_void) };
        }
    }

    fn function(&self, module: u64, name: &str) -> DriverResult<u64> {
        let name = kernel_name(name)?;
        self.select()?;
        let mut f: *mut c_void = std::ptr::null_mut();
        // SAFETY: writes one handle; the module is loaded.
        self.api.check(unsafe { (self.api.hipModuleGetFunction)(&mut f, module as *mut c_void, name.as_ptr()) })?;
        Ok(f as u64)
    }

    /// # Safety
    /// `params` must match the kernel's parameters; see `Function::launch`.
    unsafe fn launch(&self, function: u64, cfg: &LaunchConfig, params: &mut [*mut c_void]) -> DriverResult<()> {
        self.select()?;
        let (g, b) = (cfg.grid, cfg.block);
        // SAFETY: the caller's contract; the null stream and no `extra`.
        self.api.check(unsafe {
            (self.api.hipModuleLaunchKernel)(
                function as *mut c_void,
                g.0,
                g.1,
                g.2,
                b.0,
                b.1,
                b.2,
                cfg.shared_mem_bytes,
                std::ptr::null_mut(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
    }
}

/// When ROCm refuses a sibling's code object, say what it takes.
fn load_hint(artifact: &Artifact, device: &DeviceArch) -> String {
    let DeviceArch::Hip { gfx } = device else { return String::new() };
    if artifact.arch == *gfx {
        return String::new();
    }
    if kiln_manifest::kiln_target::gfx(&artifact.arch).is_some_and(|g| g.is_generic()) {
        let (major, minor) = kiln_manifest::kiln_target::GENERIC_ROCM;
        return format!("{} is an LLVM generic target: ROCm loads those from {major}.{minor} on (code object v6); update ROCm", artifact.arch);
    }
    let version = artifact.arch.trim_start_matches("gfx");
    let override_value = match version.len() {
        // gfx1030 → 10.3.0, gfx90a → 9.0.10 (the last digit is hex).
        4 => format!("{}.{}.{}", &version[..2], &version[2..3], u32::from_str_radix(&version[3..], 16).unwrap_or(0)),
        3 => format!("{}.{}.{}", &version[..1], &version[1..2], u32::from_str_radix(&version[2..], 16).unwrap_or(0)),
        _ => return String::new(),
    };
    format!(
        "ROCm loads a code object only on its own processor, so KILN_HIP_ARCH_COMPAT alone cannot run {} code on {gfx}; \
         HSA_OVERRIDE_GFX_VERSION={override_value} makes the device present itself as {} (at your own risk; docs/loader.md)",
        artifact.arch, artifact.arch
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_library_is_a_clear_error() {
        let e = load_api(&["/nonexistent/libamdhip64.so".into(), "libkiln-no-such-hip.so".into()]).err().unwrap();
        let text = e.to_string();
        assert!(text.starts_with("libamdhip64.so not found; install the ROCm runtime"), "{text}");
        assert!(text.contains("/nonexistent/libamdhip64.so, libkiln-no-such-hip.so"), "{text}");
    }

    #[test]
    fn a_library_lacking_the_entry_points_is_refused() {
        let e = load_api(&["libc.so.6".into()]).err().unwrap();
        assert!(matches!(&e, Error::DriverTooOld { symbol, .. } if symbol == "hipInit"), "{e:?}");
        assert!(e.to_string().contains("libc.so.6 has no `hipInit`"), "{e}");
    }

    fn hsaco(arch: &str) -> Artifact {
        Artifact {
            module: "fill".into(),
            backend: Backend::Hip,
            arch: arch.into(),
            kind: kiln_manifest::Kind::Hsaco,
            path: format!("hip/{arch}/fill.hsaco"),
            size: 0,
            sha256: String::new(),
            kernels: vec![],
            ptx_version: None,
            resources: vec![],
            geometry: None,
        }
    }

    #[test]
    fn a_refused_sibling_object_names_the_override_that_would_work() {
        let dev = DeviceArch::parse("gfx1031").unwrap();
        let h = load_hint(&hsaco("gfx1030"), &dev);
        assert!(h.contains("HSA_OVERRIDE_GFX_VERSION=10.3.0"), "{h}");
        let h = load_hint(&hsaco("gfx90a"), &DeviceArch::parse("gfx908").unwrap());
        assert!(h.contains("HSA_OVERRIDE_GFX_VERSION=9.0.10"), "{h}");
        assert!(load_hint(&hsaco("gfx10-3-generic"), &dev).contains("ROCm loads those from 6.4 on"));
        // The device's own object refused: no override to suggest.
        assert_eq!(load_hint(&hsaco("gfx1031"), &dev), "");
    }

    #[test]
    fn the_required_symbols_are_the_ones_the_binding_resolves() {
        // `REQUIRED_SYMBOLS` is what the structural checks hold each runner
        // image's library to: it must be exactly the `sym!`s of `bind`.
        let src = include_str!("hip.rs");
        let body = &src[src.find("fn bind(").unwrap()..src.find("fn api()").unwrap()];
        let bound: Vec<&str> = body.split("sym!(\"").skip(1).map(|rest| &rest[..rest.find('"').unwrap()]).collect();
        assert_eq!(bound, REQUIRED_SYMBOLS, "hip.rs: bind's sym! list and REQUIRED_SYMBOLS differ");
        // Every layout fits the buffer the call writes into.
        assert!(PROPERTIES_CALLS.iter().all(|c| c.gcn_arch_name_offset + c.gcn_arch_name_len <= PROPS_BUFFER));
    }

    #[test]
    fn candidates_search_the_rocm_prefix_and_honour_the_override() {
        let c = library_candidates();
        if std::env::var_os(LIBRARY_ENV).is_none() {
            assert_eq!(c[0], "libamdhip64.so");
            assert!(c.iter().any(|p| p == "/opt/rocm/lib/libamdhip64.so"), "{c:?}");
        }
    }
}
