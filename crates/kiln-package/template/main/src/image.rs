//! The native image of a module for this process's GPUs, built once per
//! module from the artifacts this build carries:
//!
//! - every visible GPU gets what kiln-target's one rule (`kiln_target::compat`,
//!   which `kiln::select` follows too) picks: the SASS of the newest carried sm
//!   it runs (its own, else an older one of its major version, not on a
//!   Jetson), else the highest carried PTX level at or below its compute
//!   capability, which the driver JIT-compiles (once, into its cache), also
//!   when that level is above the SASS's sm (its kernels are a superset);
//! - `KILN_PTX_ARCH=compute_XX` gives every GPU that PTX and no SASS.
//!
//! - in a build narrowed to some GPUs (`kiln_gpu`, `narrow.rs`), a GPU that
//!   kiln built SASS for but the build leaves out is an error naming the
//!   line that adds it, never the PTX JIT in its stead (`choose::narrowed_out`).
//!
//! All of it goes into one fatbinary, and the driver picks per device: a
//! process with an sm_90 and an sm_86 GPU loads sm_90 SASS on one and sm_86 on
//! the other from the same `load_module` call. Only what the process's GPUs
//! use is inflated, which keeps the first load close to kiln's loader.

use std::sync::OnceLock;

use crate::{
    choose::{self, plan, Plan},
    fatbin, narrow, payload, ptx, MODULE_NAMES, PTX_LEVELS,
};

/// The compute capability of every CUDA device this process sees, asked of
/// the driver through dlopen (nothing CUDA is linked); empty without a
/// driver or a GPU.
pub fn devices() -> &'static [u32] {
    static DEVICES: OnceLock<Vec<u32>> = OnceLock::new();
    DEVICES.get_or_init(|| query_devices().unwrap_or_default())
}

fn query_devices() -> Option<Vec<u32>> {
    type Init = unsafe extern "C" fn(u32) -> i32;
    type Count = unsafe extern "C" fn(*mut i32) -> i32;
    type DeviceGet = unsafe extern "C" fn(*mut i32, i32) -> i32;
    type Attribute = unsafe extern "C" fn(*mut i32, i32, i32) -> i32;
    const MAJOR: i32 = 75; // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
    const MINOR: i32 = 76;
    // SAFETY: libcuda's documented C entry points with their documented signatures.
    unsafe {
        let lib = libloading::Library::new("libcuda.so.1").ok()?;
        let init: libloading::Symbol<Init> = lib.get(b"cuInit\0").ok()?;
        let count: libloading::Symbol<Count> = lib.get(b"cuDeviceGetCount\0").ok()?;
        let get: libloading::Symbol<DeviceGet> = lib.get(b"cuDeviceGet\0").ok()?;
        let attr: libloading::Symbol<Attribute> = lib.get(b"cuDeviceGetAttribute\0").ok()?;
        if init(0) != 0 {
            return None;
        }
        let mut n = 0;
        if count(&mut n) != 0 {
            return None;
        }
        let mut caps = Vec::new();
        for ordinal in 0..n {
            let mut dev = 0;
            let (mut major, mut minor) = (0, 0);
            if get(&mut dev, ordinal) != 0 || attr(&mut major, MAJOR, dev) != 0 || attr(&mut minor, MINOR, dev) != 0 {
                return None;
            }
            caps.push(major as u32 * 10 + minor as u32);
        }
        // The library stays loaded: the process's CUDA user keeps it anyway.
        std::mem::forget(lib);
        Some(caps)
    }
}

fn carried_sass(module: &str) -> Vec<u32> {
    sass_of(module, true)
}

/// Every sm kiln built SASS of `module` for, carried or not.
fn built_sass(module: &str) -> Vec<u32> {
    sass_of(module, false)
}

/// From the crate's record of the payloads (not the embedded manifest, whose
/// parse this path does without): the sms of `module`'s SASS, those carried only.
fn sass_of(module: &str, carried_only: bool) -> Vec<u32> {
    crate::RECORDED
        .iter()
        .filter(|a| a.module == module && a.kind == crate::kiln::Kind::Cubin)
        .filter(|a| !carried_only || payload::find(a.path).is_some())
        .filter_map(|a| a.arch.strip_prefix("sm_")?.parse().ok())
        .collect()
}

fn ptx_levels() -> Vec<u32> {
    PTX_LEVELS.iter().map(|(l, _)| *l).collect()
}

/// The PTX levels carried of `module`: the set's, for a module; none for a
/// file of the static library (its kernels are carried as SASS only).
fn ptx_of(module: &str) -> Vec<u32> {
    if is_library(module) {
        Vec::new()
    } else {
        ptx_levels()
    }
}

/// Whether `module` is a file of the static library (`moe/<stem>`).
fn is_library(module: &str) -> bool {
    kiln_manifest::library_file(module).is_some()
}

/// Of `devices`, those this build's narrowing (`kiln_gpu`) leaves without
/// the SASS kiln built for them, each with that sm; none unless narrowed,
/// nor with `KILN_PTX_ARCH` (the PTX on purpose).
fn narrowed_out(module: &str, devices: &[u32]) -> Vec<(u32, u32)> {
    if ptx::forced_level().is_some() || narrow::named().is_empty() {
        return Vec::new();
    }
    choose::narrowed_out(devices, &built_sass(module), &carried_sass(module), &ptx_of(module))
}

/// What this process's image of `module` holds.
pub fn plan_for(module: &str) -> Plan {
    let ptx = ptx_of(module);
    let devices = devices();
    let sass = carried_sass(module);
    // Without a driver the load fails anyway; an image for every carried
    // arch still makes the driver's error, not ours, the one users see.
    let wanted: Vec<u32> = if devices.is_empty() { sass.iter().copied().chain(ptx.first().copied()).collect() } else { devices.to_vec() };
    let out = narrowed_out(module, devices);
    let served: Vec<u32> = wanted.into_iter().filter(|cap| !out.iter().any(|(d, _)| d == cap)).collect();
    let forced = if is_library(module) { None } else { ptx::forced_level().map(|(l, _)| *l) };
    let mut p = plan(&served, &sass, &ptx, forced);
    p.unserved.extend(out.iter().map(|(cap, _)| *cap));
    p
}

/// The image of one file of the static library (`moe/<stem>`, what its host
/// object's launchers run: `launch.rs`): the SASS of its carried sms for this
/// process's GPUs, chosen as a module's; an error naming what is carried
/// where a GPU gets none (never another GPU's kernel).
pub(crate) fn for_library(module: &str) -> Result<&'static [u8], String> {
    static IMAGES: OnceLock<std::sync::Mutex<Vec<(String, &'static [u8])>>> = OnceLock::new();
    let images = IMAGES.get_or_init(Default::default);
    let mut images = images.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, image)) = images.iter().find(|(m, _)| m == module) {
        return Ok(image);
    }
    let p = plan_for(module);
    // As for a module: a GPU the narrowing leaves out is refused even beside others the image serves.
    if p.sass.is_empty() || !narrowed_out(module, &p.unserved).is_empty() {
        return Err(unserved_message(module, &p.unserved));
    }
    let mut cubins = Vec::new();
    for sm in &p.sass {
        cubins.push((*sm, payload::verified(&format!("cuda/sm_{sm}/{module}.cubin")).map_err(|e| format!("{module}: {e}"))?));
    }
    let entries: Vec<fatbin::Entry> = cubins.iter().map(|(sm, elf)| fatbin::Entry::Sass { sm: *sm, elf }).collect();
    let image: &'static [u8] = Box::leak(fatbin::write(&entries).into_boxed_slice());
    images.push((module.to_string(), image));
    Ok(image)
}

pub(crate) fn for_module(index: usize) -> &'static [u8] {
    static IMAGES: OnceLock<Vec<OnceLock<&'static [u8]>>> = OnceLock::new();
    let cells = IMAGES.get_or_init(|| MODULE_NAMES.iter().map(|_| OnceLock::new()).collect());
    cells[index].get_or_init(|| {
        let module = MODULE_NAMES[index];
        let p = plan_for(module);
        // A GPU the narrowing leaves out is refused even beside others the image serves.
        if (p.sass.is_empty() && p.ptx.is_empty()) || !narrowed_out(module, &p.unserved).is_empty() {
            panic!("{}", unserved_message(module, &p.unserved));
        }
        let cubins: Vec<(u32, Vec<u8>)> = p
            .sass
            .iter()
            .map(|sm| (*sm, payload::verified(&format!("cuda/sm_{sm}/{module}.cubin")).unwrap_or_else(|e| panic!("{module}: {e}"))))
            .collect();
        let mut entries: Vec<fatbin::Entry> = cubins.iter().map(|(sm, elf)| fatbin::Entry::Sass { sm: *sm, elf }).collect();
        for level in &p.ptx {
            let name = PTX_LEVELS.iter().find(|(l, _)| l == level).map(|(_, n)| *n).expect("planned from PTX_LEVELS");
            entries.push(fatbin::Entry::Ptx { level: *level, text: ptx::text_at(index, name) });
        }
        Box::leak(fatbin::write(&entries).into_boxed_slice())
    })
}

/// Why GPUs of this process cannot run `module`, and what would: for a GPU
/// a narrowed build leaves out, the `.cargo/config.toml` line that adds it.
pub fn unserved_message(module: &str, unserved: &[u32]) -> String {
    let caps: Vec<String> = unserved.iter().map(|c| format!("sm_{c}")).collect();
    let sass: Vec<String> = carried_sass(module).iter().map(|s| format!("sm_{s}")).collect();
    let ptx: Vec<String> = ptx_of(module).iter().map(|l| format!("compute_{l}")).collect();
    let carried = if sass.is_empty() { "no sm (no sm feature enabled)".to_string() } else { sass.join(", ") };
    let ptx = if ptx.is_empty() { "no PTX (the static library's kernels are SASS only)".to_string() } else { format!("PTX for {}", ptx.join(", ")) };
    let mut why = format!(
        "{} cannot load kernel module {module} on this machine's GPU(s) ({}): this build carries SASS for {carried} and {ptx}",
        env!("CARGO_PKG_NAME"),
        caps.join(", "),
    );
    let out = narrowed_out(module, unserved);
    if unserved.iter().any(|cap| !out.iter().any(|(d, _)| d == cap)) {
        why.push_str(
            ", and the driver JIT-compiles PTX only for a GPU at or above its level. A GPU with a lower compute capability needs a kiln \
             release that builds for it; SASS for another sm of a carried major version comes with that sm's crate feature",
        );
    }
    why.push('.');
    for (cap, sm) in &out {
        let path = format!("cuda/sm_{sm}/{module}.cubin");
        let value = narrow::part_of(&path).map_or_else(|| format!("sm{sm}"), |p| p.feature.to_string());
        why.push_str(&format!(
            "\nThe GPU sm_{cap} needs the sm_{sm} SASS, which kiln built but this build leaves out: it is {} (the PTX instead would be \
             JIT-compiled at every cold start, for tens of seconds, so kiln refuses). To run here, {}; or hide the GPU from this \
             process (CUDA_VISIBLE_DEVICES).",
            narrow::describe(),
            narrow::advice(&value)
        ));
    }
    why
}
