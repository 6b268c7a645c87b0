//! `Module::hsaco()`: the module's code objects for every gfx arch this crate
//! was built for, the LLVM generic targets' included, as one clang offload
//! bundle (`hip/bundle/<module>.hipfb`, in the `hip` part crate).
//! `hipModuleLoadData` reads the bundle and loads the entry whose arch is the
//! device's, else, from ROCm 6.4 on, the entry of its family's generic target
//! (the rule `kiln::select` follows). Where the process has already loaded a
//! HIP runtime (candle's ROCm port has, when it asks for a module), the bundle
//! is handed out only if that runtime loads an entry of it for the current
//! device (`kiln::select_on_hip`): a device served only by its family's
//! generic object on a runtime older than ROCm 6.4 stops here, naming the
//! device, what kiln carries and the ROCm it needs, instead of getting
//! `hipErrorNoBinaryForGpu` deep in HIP.

use std::sync::OnceLock;

use crate::{payload, MODULE_NAMES};

impl crate::Module {
    /// The module's AMD code: a clang offload bundle of its code objects for
    /// every gfx arch this crate was built for and its families' LLVM generic
    /// targets, for `hipModuleLoadData` (the HIP runtime loads the entry for
    /// the device's arch, else from ROCm 6.4 on its family's generic entry).
    /// Where the process has loaded a HIP runtime whose current device would
    /// get no entry of it (`hipErrorNoBinaryForGpu`), panics naming the device,
    /// what kiln carries for it and the ROCm it needs (`kiln::select_on_hip`'s
    /// answer). Needs the `hip` feature (on by default); panics, naming the
    /// module, if it is off or the payload is damaged.
    #[inline]
    pub fn hsaco(&self) -> &'static [u8] {
        bundle(self.index)
    }
}

#[inline]
fn bundle(index: usize) -> &'static [u8] {
    static BUNDLES: OnceLock<Vec<OnceLock<&'static [u8]>>> = OnceLock::new();
    let cells = BUNDLES.get_or_init(|| MODULE_NAMES.iter().map(|_| OnceLock::new()).collect());
    let bytes = *cells[index].get_or_init(|| {
        let module = MODULE_NAMES[index];
        let path = format!("hip/bundle/{module}.hipfb");
        if payload::find(&path).is_none() {
            if let Some(part) = crate::narrow::part_of(&path).filter(|p| p.feature_on) {
                panic!(
                    "{}: Module::hsaco() of {module} needs the HIP code-object bundles (the `{}` part), which this build leaves out: \
                     it is {}, no AMD GPU; name yours, e.g. {}",
                    env!("CARGO_PKG_NAME"),
                    part.feature,
                    crate::narrow::describe(),
                    first_hip_value().map_or_else(|| "an AMD GPU's value".to_string(), crate::narrow::advice)
                );
            }
            let archs: Vec<String> = crate::kiln::manifest()
                .artifacts
                .iter()
                .filter(|a| a.module == module && a.kind == crate::kiln::Kind::Bundle)
                .map(|a| a.arch.clone())
                .collect();
            panic!(
                "{}: Module::hsaco() of {module} needs the HIP code-object bundles, which come with the crate's `hip` feature \
                 (off in this build){}",
                env!("CARGO_PKG_NAME"),
                if archs.is_empty() { String::new() } else { format!("; its bundle holds {}", archs.join(", ")) }
            );
        }
        let bytes = payload::verified(&path).unwrap_or_else(|e| panic!("{module}: {e}"));
        Box::leak(bytes.into_boxed_slice())
    });
    check_current_device(MODULE_NAMES[index]);
    bytes
}

/// Stops, naming what is missing, where the process's HIP runtime would not
/// load any entry of module `module`'s bundle on its current device.
#[inline]
fn check_current_device(module: &str) {
    let Some((arch, version)) = current_device() else { return };
    if let Err(e) = crate::kiln::select_on_hip(module, &arch, version) {
        panic!("{}: Module::hsaco() of {module} on this process's HIP device ({arch}): {e}", env!("CARGO_PKG_NAME"));
    }
}

/// The current HIP device's `gcnArchName` and the runtime's `HIP_VERSION`,
/// from a HIP runtime this process has already loaded (one it has not is
/// never loaded here); `None` where there is none, or no device.
#[cfg(target_os = "linux")]
#[inline]
fn current_device() -> Option<(String, i64)> {
    use kiln_manifest::kiln_target::hip_abi::{gcn_arch_name, LIBRARY_NAMES, PROPERTIES_CALLS, PROPS_BUFFER};
    use libloading::os::unix::{Library, Symbol};
    // glibc's dlopen flags: resolve now, and only a library already loaded.
    const RTLD_NOW: std::os::raw::c_int = 2;
    const RTLD_NOLOAD: std::os::raw::c_int = 4;
    type IntOut = unsafe extern "C" fn(*mut std::os::raw::c_int) -> std::os::raw::c_int;
    type Properties = unsafe extern "C" fn(*mut u8, std::os::raw::c_int) -> std::os::raw::c_int;
    // SAFETY: the library is HIP's, already loaded by the process; each symbol is
    // called with the signature HIP's header gives it, the properties call with a
    // buffer larger than any layout it writes (kiln-target's hip_abi).
    unsafe {
        let lib = LIBRARY_NAMES.iter().find_map(|n| Library::open(Some(n), RTLD_NOW | RTLD_NOLOAD).ok())?;
        let get_device: Symbol<IntOut> = lib.get(b"hipGetDevice\0").ok()?;
        let runtime_version: Symbol<IntOut> = lib.get(b"hipRuntimeGetVersion\0").ok()?;
        let (mut device, mut version) = (0, 0);
        if get_device(&mut device) != 0 || runtime_version(&mut version) != 0 {
            return None;
        }
        let (call, properties) = PROPERTIES_CALLS.iter().find_map(|c| {
            let name = format!("{}\0", c.symbol);
            lib.get::<Properties>(name.as_bytes()).ok().map(|f| (c, f))
        })?;
        let mut props = vec![0u64; PROPS_BUFFER / 8];
        if properties(props.as_mut_ptr().cast(), device) != 0 {
            return None;
        }
        let bytes = std::slice::from_raw_parts(props.as_ptr().cast::<u8>(), PROPS_BUFFER);
        Some((gcn_arch_name(bytes, call)?, i64::from(version)))
    }
}

#[cfg(not(target_os = "linux"))]
#[inline]
fn current_device() -> Option<(String, i64)> {
    None
}

/// The `kiln_gpu` value of a gfx arch kiln built, for the example.
#[inline]
fn first_hip_value() -> Option<&'static str> {
    let a = crate::kiln::built().artifacts.iter().find(|a| a.kind == crate::kiln::Kind::Hsaco)?;
    crate::narrow::part_of(&a.path).map(|p| p.feature)
}
