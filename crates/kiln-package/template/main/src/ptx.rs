//! Which PTX `Module::ptx()` returns. candle compiles some kernels only for
//! `__CUDA_ARCH__ >= 890` (fp8), so one PTX level cannot serve every GPU:
//! the crate carries several and picks the highest one the first GPU can
//! JIT, as upstream's build would have for the build machine's GPU.

use std::sync::OnceLock;

use crate::{payload, MODULE_NAMES, PTX_LEVELS};

/// Overrides the choice, e.g. `compute_80`.
pub const ENV: &str = "KILN_PTX_ARCH";

fn level() -> &'static str {
    static LEVEL: OnceLock<&'static str> = OnceLock::new();
    LEVEL.get_or_init(|| {
        if let Ok(wanted) = std::env::var(ENV) {
            if let Some((_, name)) = PTX_LEVELS.iter().find(|(_, n)| *n == wanted) {
                return name;
            }
        }
        let cap = device_capability().unwrap_or(0);
        PTX_LEVELS.iter().rev().find(|(l, _)| *l <= cap).unwrap_or(&PTX_LEVELS[0]).1
    })
}

/// The compute capability (major*10+minor) of CUDA device 0, asked of the
/// driver through dlopen: nothing CUDA is linked. `None` without a driver or GPU.
fn device_capability() -> Option<u32> {
    type Init = unsafe extern "C" fn(u32) -> i32;
    type DeviceGet = unsafe extern "C" fn(*mut i32, i32) -> i32;
    type Attribute = unsafe extern "C" fn(*mut i32, i32, i32) -> i32;
    const MAJOR: i32 = 75; // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
    const MINOR: i32 = 76;
    // SAFETY: libcuda's documented C entry points with their documented signatures.
    unsafe {
        let lib = libloading::Library::new("libcuda.so.1").ok()?;
        let init: libloading::Symbol<Init> = lib.get(b"cuInit\0").ok()?;
        let get: libloading::Symbol<DeviceGet> = lib.get(b"cuDeviceGet\0").ok()?;
        let attr: libloading::Symbol<Attribute> = lib.get(b"cuDeviceGetAttribute\0").ok()?;
        if init(0) != 0 {
            return None;
        }
        let mut dev = 0;
        if get(&mut dev, 0) != 0 {
            return None;
        }
        let (mut major, mut minor) = (0, 0);
        if attr(&mut major, MAJOR, dev) != 0 || attr(&mut minor, MINOR, dev) != 0 {
            return None;
        }
        // The library stays loaded: the process's CUDA user keeps it anyway.
        std::mem::forget(lib);
        Some(major as u32 * 10 + minor as u32)
    }
}

pub(crate) fn for_module(index: usize) -> &'static str {
    static TEXT: OnceLock<Vec<OnceLock<&'static str>>> = OnceLock::new();
    let cells = TEXT.get_or_init(|| MODULE_NAMES.iter().map(|_| OnceLock::new()).collect());
    cells[index].get_or_init(|| {
        let path = format!("cuda/{}/{}.ptx", level(), MODULE_NAMES[index]);
        let compressed = payload::find(&path).unwrap_or_else(|| panic!("{path} is not in this crate"));
        let bytes = payload::inflate(&path, compressed).unwrap_or_else(|e| panic!("{e}"));
        let text = String::from_utf8(bytes).unwrap_or_else(|_| panic!("{path} is not UTF-8"));
        Box::leak(text.into_boxed_str())
    })
}

/// The PTX level `Module::ptx()` uses in this process.
pub fn chosen_level() -> &'static str {
    level()
}
