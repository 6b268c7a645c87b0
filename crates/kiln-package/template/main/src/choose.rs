//! Which carried code each GPU of the process gets: kiln-target's one rule
//! (`kiln_target::compat`, the same that `kiln::select` follows), and the
//! options `kiln::select` chooses AMD code with; pure, so kiln's own tests can
//! check the decisions.

use kiln_manifest::kiln_target::{cuda_choice, rocm_of_hip_version, CudaCode};
use kiln_manifest::SelectOptions;

/// How `kiln::select` chooses for an AMD device: the sibling opt-in, and the
/// runtime's `HIP_VERSION` (`hipRuntimeGetVersion`), which decides whether a
/// generic target's code object may be chosen (`None`: not known).
pub fn hip_options(allow_siblings: bool, hip_version: Option<i64>) -> SelectOptions {
    SelectOptions { hip_compat: allow_siblings, hip_runtime: hip_version.and_then(rocm_of_hip_version), ..SelectOptions::default() }
}

/// What one module's image holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// sms of the carried SASS to include.
    pub sass: Vec<u32>,
    /// PTX levels (e.g. 80 for compute_80) to include.
    pub ptx: Vec<u32>,
    /// Compute capabilities (e.g. 75) that nothing carried can serve.
    pub unserved: Vec<u32>,
}

/// Chooses for `devices` (compute capabilities, major*10+minor) from the
/// carried `sass` sms and `ptx` levels; `forced_ptx` is `KILN_PTX_ARCH`'s level.
pub fn plan(devices: &[u32], sass: &[u32], ptx: &[u32], forced_ptx: Option<u32>) -> Plan {
    let mut p = Plan::default();
    for &cap in devices {
        if let Some(level) = forced_ptx {
            if !p.ptx.contains(&level) {
                p.ptx.push(level);
            }
            continue;
        }
        match cuda_choice(sass, ptx, cap) {
            Some(CudaCode::Sass(sm)) if !p.sass.contains(&sm) => p.sass.push(sm),
            Some(CudaCode::Ptx(level)) if !p.ptx.contains(&level) => p.ptx.push(level),
            None if !p.unserved.contains(&cap) => p.unserved.push(cap),
            _ => {}
        }
    }
    p.sass.sort_unstable();
    p.ptx.sort_unstable();
    p
}

/// Of `devices`, those a build narrowed to some GPUs (`kiln_gpu`) leaves
/// without native code: kiln built SASS for them (from every sm `built`, the
/// device would get SASS), but from the `carried` sms it gets none (the PTX
/// would be JIT-compiled instead). Each with the sm kiln built for it.
pub fn narrowed_out(devices: &[u32], built: &[u32], carried: &[u32], ptx: &[u32]) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for &cap in devices {
        if let (Some(CudaCode::Sass(sm)), Some(CudaCode::Ptx(_)) | None) = (cuda_choice(built, ptx, cap), cuda_choice(carried, ptx, cap)) {
            if !out.contains(&(cap, sm)) {
                out.push((cap, sm));
            }
        }
    }
    out
}
