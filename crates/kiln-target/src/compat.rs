//! What an NVIDIA device runs of the code kiln carries: the one statement
//! of the rule. kiln's manifest selection (`kiln_manifest::Manifest::select`),
//! the loader's header check and the artifact crates' per-process image
//! (`choose.rs`) all call these.
//!
//! From NVIDIA's CUDA C++ Programming Guide ("Binary Compatibility", "PTX
//! Compatibility") and the per-architecture compatibility guides:
//!
//! - SASS (a cubin) built for sm_XY runs on a device of compute capability X.Z
//!   with Z >= Y: binary compatibility holds within a major version, never
//!   backwards, never across majors (sm_86 runs on 8.9; sm_89 not on 8.6; 8.x
//!   not on 9.0). Not on Tegra: the guide limits binary compatibility to the
//!   desktop (discrete) GPUs, and between desktop and Tegra there is none, so an
//!   integrated Jetson/DRIVE GPU (the `tegra` rows: 5.3, 6.2, 7.2, 8.7, 10.1,
//!   11.0) runs only SASS of its own sm, and Tegra SASS runs on no other sm.
//!   A device [`CUDA`](crate::CUDA) does not list gets only its own sm too: whether it is
//!   a Tegra part is unknown, and PTX still serves it.
//! - PTX of compute_XY is JIT-compiled by the driver for any device of compute
//!   capability X.Y or newer, across majors; never for an older one.
//! - Of what runs, the newest SASS (the device's own sm when carried) and the
//!   highest PTX level are the candidates: candle gates kernels on the arch
//!   (fp8 needs sm_89), so compute_89 PTX holds kernels compute_80 PTX and
//!   sm_80 SASS lack. The SASS wins (no JIT at load) unless the PTX's level is
//!   above its sm: then only the PTX has every kernel the device can run
//!   (sm_80 SASS on an 8.9 device would lose the fp8 kernels of compute_89).
//!
//! kiln carries only plain `sm_XY`/`compute_XY` (pins.toml's targets; kiln-pins
//! refuses `sm_90a`). Arch-specific (`sm_90a`, `sm_100a`) and family-specific
//! (`sm_100f`) code follows other rules (an `a` cubin runs only on its own sm,
//! its PTX JITs for no other): they would have to be taught here first.

use crate::cuda;

/// Whether SASS built for `sass_sm` runs on a device of compute capability
/// `device_sm` (both major*10+minor). See the [module docs](self) for the rule.
#[inline]
pub fn sass_runs_on(sass_sm: u32, device_sm: u32) -> bool {
    if sass_sm == device_sm {
        return true;
    }
    match (cuda(sass_sm), cuda(device_sm)) {
        (Some(s), Some(d)) => s.sm / 10 == d.sm / 10 && s.sm < d.sm && !s.tegra && !d.tegra,
        _ => false,
    }
}

/// Whether the driver JIT-compiles PTX of `ptx_level` (80 for compute_80) for
/// a device of compute capability `device_sm`.
#[inline]
pub fn ptx_jits_on(ptx_level: u32, device_sm: u32) -> bool {
    ptx_level <= device_sm
}

/// The newest of the `carried` sms whose SASS runs on `device_sm`.
#[inline]
pub fn best_sass(carried: impl IntoIterator<Item = u32>, device_sm: u32) -> Option<u32> {
    carried.into_iter().filter(|&sm| sass_runs_on(sm, device_sm)).max()
}

/// The highest of the `carried` PTX levels that JITs for `device_sm`.
#[inline]
pub fn best_ptx(carried: impl IntoIterator<Item = u32>, device_sm: u32) -> Option<u32> {
    carried.into_iter().filter(|&level| ptx_jits_on(level, device_sm)).max()
}

/// What an NVIDIA device gets of what is carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CudaCode {
    /// The SASS of this sm.
    Sass(u32),
    /// The PTX of this level, JIT-compiled by the driver.
    Ptx(u32),
}

/// The code a device of compute capability `device_sm` runs, from the carried
/// `sass` sms and `ptx` levels: the best SASS, unless the best PTX is of a
/// higher level; else the best PTX; else none. See the [module docs](self).
#[inline]
pub fn cuda_choice(sass: &[u32], ptx: &[u32], device_sm: u32) -> Option<CudaCode> {
    let sass = best_sass(sass.iter().copied(), device_sm);
    let ptx = best_ptx(ptx.iter().copied(), device_sm);
    match (sass, ptx) {
        (Some(sm), Some(level)) if level > sm => Some(CudaCode::Ptx(level)),
        (Some(sm), _) => Some(CudaCode::Sass(sm)),
        (None, level) => level.map(CudaCode::Ptx),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sass_runs_within_a_desktop_major_and_ptx_forward() {
        // NVIDIA's own examples: 8.6 SASS on 8.9, not 8.9 on 8.6, not 8.x on 9.0.
        assert!(sass_runs_on(86, 89) && !sass_runs_on(89, 86) && !sass_runs_on(80, 90));
        assert!(sass_runs_on(70, 75) && sass_runs_on(100, 103) && sass_runs_on(120, 121) && sass_runs_on(90, 90));
        // Tegra: its own sm only, both ways (sm_70 does not run on Xavier, sm_72 not on a T4).
        assert!(!sass_runs_on(70, 72) && !sass_runs_on(72, 75) && !sass_runs_on(86, 87) && !sass_runs_on(80, 87));
        assert!(!sass_runs_on(100, 101) && sass_runs_on(87, 87) && sass_runs_on(110, 110));
        // An sm the table does not know: its own SASS only.
        assert!(!sass_runs_on(120, 122) && sass_runs_on(122, 122));
        assert!(ptx_jits_on(80, 87) && ptx_jits_on(89, 120) && ptx_jits_on(90, 90) && !ptx_jits_on(89, 86));
    }

    #[test]
    fn the_choice_prefers_the_newest_sass_then_the_highest_ptx() {
        let (sass, ptx) = ([70, 75, 80, 86, 89, 90, 100, 120], [70, 80, 89]);
        let pick = |dev| cuda_choice(&sass, &ptx, dev);
        assert_eq!(pick(90), Some(CudaCode::Sass(90)));
        assert_eq!(pick(121), Some(CudaCode::Sass(120)));
        assert_eq!(pick(103), Some(CudaCode::Sass(100)));
        assert_eq!(pick(87), Some(CudaCode::Ptx(80)));
        assert_eq!(pick(72), Some(CudaCode::Ptx(70)));
        assert_eq!(pick(110), Some(CudaCode::Ptx(89)));
        assert_eq!(pick(61), None);
        assert_eq!(cuda_choice(&[], &ptx, 90), Some(CudaCode::Ptx(89)));
        // sm_80 SASS has compute_80's kernels: on an 8.6 it beats compute_80 PTX, on an 8.9 compute_89 beats it.
        assert_eq!(cuda_choice(&[80], &ptx, 86), Some(CudaCode::Sass(80)));
        assert_eq!(cuda_choice(&[80], &ptx, 89), Some(CudaCode::Ptx(89)));
        assert_eq!(best_sass([80, 86], 89), Some(86));
        assert_eq!(best_ptx([80, 89], 86), Some(80));
    }
}
