//! Every GPU target kiln knows, in one table per vendor: the only place a GPU
//! is added. The build side (pins, validation, the test matrix) and the
//! consumer side (the manifest's selection rules, the loader, the generated
//! crates) both read it, so this crate depends on serde alone and is
//! published with the artifact crates.
//!
//! Adding a GPU is one row here plus its pin in pins.toml. Which NVIDIA code
//! runs on which device (SASS within a major, PTX forward) is [`compat`].

use std::fmt;

use serde::Serialize;

pub mod compat;
pub mod hip_abi;
pub mod host_object;
pub use compat::{best_ptx, best_sass, cuda_choice, ptx_jits_on, sass_runs_on, CudaCode};

/// Which vendor's stack an artifact or a device belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Hip,
    Cuda,
}

impl Backend {
    #[inline]
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Hip => "hip",
            Backend::Cuda => "cuda",
        }
    }
}

impl fmt::Display for Backend {
    #[inline]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One AMD processor (or LLVM generic target) as LLVM's AMDGPUUsage names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gfx {
    pub name: &'static str,
    /// `EF_AMDGPU_MACH_*`: the low byte of a code object's `e_flags` (LLVM's
    /// `ELF.h`). `None` for processors kiln cannot build for (pre-GCN5: ROCm
    /// dropped them), which are listed only so a device reporting one is
    /// recognised, not called a typo.
    pub mach: Option<u32>,
    /// The LLVM generic target covering it ("Generic Processors"), whose code
    /// objects ROCm loads on every member (from [`GENERIC_ROCM`] on). The same
    /// map as the HIP runtime's own (clr `hip_fatbin.cpp`, `TargetGenericMap`).
    pub generic: Option<&'static str>,
    /// An ISA-identical sibling whose code object it may run, on opt-in only:
    /// pairs whose generic target lists no restrictions (gfx10-3-generic,
    /// gfx12-generic). Left out on purpose: gfx1101/gfx1102 → gfx1100
    /// (gfx11-generic needs member-specific hazard workarounds, and gfx1100
    /// has a larger VGPR file than gfx1102).
    pub compat: Option<&'static str>,
    /// The first LLVM major version whose AMDGPU backend knows it (clang's
    /// `--print-supported-cpus`; checked against both pinned clangs, 17 and
    /// 21, by kiln-dist's `tests/device_libs.rs`). A pinned clang older than
    /// this cannot build the target: `cargo xtask pins check` says so.
    pub llvm: u32,
    /// The last LLVM major that still knows it, where a later one dropped it
    /// (gfx940 and gfx941, MI300 pre-production parts: known to clang 17, not
    /// to clang 21). Checked with `llvm` against both pinned clangs by
    /// kiln-dist's `tests/device_libs.rs`.
    pub llvm_until: Option<u32>,
    /// The RDNA generation macro candle's quantized kernels (llama.cpp's)
    /// read, which kiln defines on the compile line (`-DRDNA2`, `-DRDNA3`) as
    /// upstream's ROCm backend does (candle PR #3801: `RDNA2` for
    /// gfx1030-gfx1039, `RDNA3` for gfx1100-gfx1299; nothing for RDNA1 and
    /// GCN/CDNA). See [`Gfx::geometry_defines`]. A generic row carries
    /// its members' macro (they all share one), so that its code object is
    /// the same source-level build as each member's.
    pub rdna: Option<&'static str>,
    /// The first LLVM major whose ROCm device libraries carry the
    /// processor's ISA bitcode (`oclc_isa_version_<n>.bc`, which every HIP
    /// compile links); `None` where no release known to kiln does. Equal to
    /// `llvm` but for gfx1250: clang 21 knows it, rocm-device-libs-21 (the
    /// only Debian device libraries of LLVM 21) has no `oclc_isa_version_1250.bc`.
    /// Checked against both pinned device libraries by kiln-dist's
    /// `tests/device_libs.rs`; `cargo xtask pins check` refuses an arch no
    /// pinned device library reaches.
    pub device_lib: Option<u32>,
}

impl Gfx {
    /// An LLVM generic target (`gfx11-generic`): code objects can be built for
    /// it, but no device reports it.
    #[inline]
    pub fn is_generic(&self) -> bool {
        self.name.ends_with("-generic")
    }

    /// The lowest code object version its code objects can have: 6 for a
    /// generic target (LLVM AMDGPUUsage, "Generic Processors": generic code
    /// objects exist from code object v6 on, `EI_ABIVERSION` 4, with the
    /// generic version in the top byte of `e_flags`), else 4.
    #[inline]
    pub fn min_code_object_version(&self) -> u32 {
        if self.is_generic() {
            6
        } else {
            4
        }
    }

    /// The concrete processors this generic target covers, in table order
    /// (the rows naming it in their `generic` column); empty for a concrete row.
    #[inline]
    pub fn members(&self) -> Vec<&'static Gfx> {
        GFX.iter().filter(|g| g.generic == Some(self.name)).collect()
    }

    /// Wave64 GCN/CDNA parts versus wave32 RDNA (gfx10+): shuffles and
    /// reductions written for 32-lane warps behave differently on wave64.
    #[inline]
    pub fn wave64(&self) -> bool {
        !self.name.starts_with("gfx1")
    }

    /// Lanes per wave that its code objects are compiled for: 64 on GCN/CDNA,
    /// 32 on RDNA (clang's default there; kiln never passes `-mwavefrontsize64`).
    #[inline]
    pub fn wavefront_size(&self) -> u32 {
        if self.wave64() {
            64
        } else {
            32
        }
    }

    /// The macros defined on this arch's compile line that may change launch
    /// geometry (what a host must assume when it launches the code objects:
    /// docs/consuming.md). Only the RDNA generation: `GGML_USE_HIPBLAS`, which
    /// together with `RDNA2`/`RDNA3` switches candle 0.11.1's `mul_mat_vec_q`
    /// to one warp and one row per block, is never defined, as upstream's ROCm
    /// backend does not: candle-core's launcher sizes those blocks for the
    /// CUDA geometry (4 or 2 warps, 1 or 2 rows per block).
    #[inline]
    pub fn geometry_defines(&self) -> Vec<&'static str> {
        self.rdna.into_iter().collect()
    }
}

#[inline]
const fn row(name: &'static str, mach: u32, generic: Option<&'static str>, compat: Option<&'static str>) -> Gfx {
    Gfx { name, mach: Some(mach), generic, compat, llvm: 17, llvm_until: None, rdna: None, device_lib: Some(17) }
}

/// RDNA2 (gfx103x) and RDNA3 (gfx11xx, and gfx12xx, which upstream's range
/// gfx1100-gfx1299 puts with it) rows: [`Gfx::rdna`].
#[inline]
const fn rdna2(gfx: Gfx) -> Gfx {
    Gfx { rdna: Some("RDNA2"), ..gfx }
}
#[inline]
const fn rdna3(gfx: Gfx) -> Gfx {
    Gfx { rdna: Some("RDNA3"), ..gfx }
}

/// A row that LLVM 17 does not know yet (its device libraries come with the same LLVM).
#[inline]
const fn newer(llvm: u32, gfx: Gfx) -> Gfx {
    Gfx { llvm, device_lib: Some(llvm), ..gfx }
}

/// A row that LLVM dropped after major `last`.
#[inline]
const fn dropped_after(last: u32, gfx: Gfx) -> Gfx {
    Gfx { llvm_until: Some(last), ..gfx }
}

/// A row whose ISA bitcode no ROCm device library known to kiln carries.
#[inline]
const fn no_device_lib(gfx: Gfx) -> Gfx {
    Gfx { device_lib: None, ..gfx }
}

#[inline]
const fn old(name: &'static str) -> Gfx {
    Gfx { name, mach: None, generic: None, compat: None, llvm: 17, llvm_until: None, rdna: None, device_lib: None }
}

const G9: Option<&str> = Some("gfx9-generic");
const G94: Option<&str> = Some("gfx9-4-generic");
const G101: Option<&str> = Some("gfx10-1-generic");
const G103: Option<&str> = Some("gfx10-3-generic");
const G11: Option<&str> = Some("gfx11-generic");
const G12: Option<&str> = Some("gfx12-generic");

/// The AMD table. `rdna2`/`rdna3` rows: the RDNA generation macro of
/// upstream's ROCm backend (candle PR #3801's kernel build, which takes it
/// from the device's gcnArchName: gfx1030-gfx1039 `-DRDNA2`, gfx1100-gfx1299
/// `-DRDNA3`), the same ranges as llama.cpp's HIP build; a generic target
/// gets its members' macro (gfx10-3-generic RDNA2, gfx11-generic and
/// gfx12-generic RDNA3), gfx9-4-generic none.
pub const GFX: &[Gfx] = &[
    old("gfx600"),
    old("gfx601"),
    old("gfx602"),
    old("gfx700"),
    old("gfx701"),
    old("gfx702"),
    old("gfx703"),
    old("gfx704"),
    old("gfx705"),
    old("gfx801"),
    old("gfx802"),
    old("gfx803"),
    old("gfx805"),
    old("gfx810"),
    row("gfx900", 0x2c, G9, None),
    row("gfx902", 0x2d, G9, None),
    row("gfx904", 0x2e, G9, None),
    row("gfx906", 0x2f, G9, None),
    row("gfx908", 0x30, None, None),
    row("gfx909", 0x31, G9, None),
    row("gfx90a", 0x3f, None, None),
    row("gfx90c", 0x32, G9, None),
    // MI300 pre-production: LLVM 21 no longer knows them, ROCr dropped them
    // (rocm-systems 13c591d25, 2025-02-19) and clr's generic map
    // (`TargetGenericMap`) never had them, so no generic family either.
    dropped_after(20, row("gfx940", 0x40, None, None)),
    dropped_after(20, row("gfx941", 0x4b, None, None)),
    row("gfx942", 0x4c, G94, None),
    newer(20, row("gfx950", 0x4f, G94, None)),
    row("gfx1010", 0x33, G101, None),
    row("gfx1011", 0x34, G101, None),
    row("gfx1012", 0x35, G101, None),
    row("gfx1013", 0x42, G101, None),
    rdna2(row("gfx1030", 0x36, G103, None)),
    rdna2(row("gfx1031", 0x37, G103, Some("gfx1030"))),
    rdna2(row("gfx1032", 0x38, G103, Some("gfx1030"))),
    rdna2(row("gfx1033", 0x39, G103, Some("gfx1030"))),
    rdna2(row("gfx1034", 0x3e, G103, Some("gfx1030"))),
    rdna2(row("gfx1035", 0x3d, G103, Some("gfx1030"))),
    rdna2(row("gfx1036", 0x45, G103, Some("gfx1030"))),
    rdna3(row("gfx1100", 0x41, G11, None)),
    rdna3(row("gfx1101", 0x46, G11, None)),
    rdna3(row("gfx1102", 0x47, G11, None)),
    rdna3(row("gfx1103", 0x44, G11, None)),
    rdna3(row("gfx1150", 0x43, G11, None)),
    rdna3(row("gfx1151", 0x4a, G11, None)),
    newer(19, rdna3(row("gfx1152", 0x55, G11, None))),
    newer(21, rdna3(row("gfx1153", 0x58, G11, None))),
    newer(18, rdna3(row("gfx1200", 0x48, G12, None))),
    newer(18, rdna3(row("gfx1201", 0x4e, G12, Some("gfx1200")))),
    // MI450-class (LLVM 21: `e_flags` 0x49, measured with the pinned clang 21);
    // no generic family, and no device library yet (see `device_lib`).
    no_device_lib(newer(21, rdna3(row("gfx1250", 0x49, None, None)))),
    newer(19, row("gfx9-generic", 0x51, None, None)),
    newer(20, row("gfx9-4-generic", 0x5f, None, None)),
    newer(19, row("gfx10-1-generic", 0x52, None, None)),
    newer(19, rdna2(row("gfx10-3-generic", 0x53, None, None))),
    newer(19, rdna3(row("gfx11-generic", 0x54, None, None))),
    newer(19, rdna3(row("gfx12-generic", 0x59, None, None))),
];

/// A ROCm release, `(major, minor)`: what the HIP runtime reports as its
/// version (`hipRuntimeGetVersion`: `HIP_VERSION`, major * 10 000 000 +
/// minor * 100 000 + patch; HIP's version is ROCm's).
pub type Rocm = (u32, u32);

/// The first ROCm whose runtime loads code objects of an LLVM generic target
/// (code object v6), alone (`hipModuleLoadData` of the ELF: ROCr decides) or
/// as a bundle entry (HIP picks it when the bundle has no entry for the
/// device's own processor). Both halves arrived after ROCm 6.3 was branched:
///
/// - ROCr: ROCm 6.2.0 parses code object v6 (ROCR-Runtime a93c18dc, "Support
///   COV6/Generic Targets", tag rocm-6.2.0) but its loader still compares the
///   code object's ISA with the agent's for equality (`LoaderContext::
///   IsaSupportedByAgent` ignores the generic version; the ISA registry has no
///   generic names, through ROCR-Runtime's last commit of 2024-10-23);
///   `Isa::IsCompatible` accepts a generic object on its members from
///   "rocr: Generic ISA targets support" (ROCm/rocm-systems
///   projects/rocr-runtime, 0c18ff22e, 2024-10-28), gfx9-4-generic from
///   f32e26493 (2024-12-03); ROCr's library version went to 1.15 (ROCm 6.4)
///   on 2025-01-27.
/// - HIP (clr `hipamd/src/hip_fatbin.cpp`, `ExtractFatBinaryUsingCOMGR`):
///   the device's generic target (`TargetToGeneric`, its `TargetGenericMap`
///   matching kiln's `generic` column) is asked of the bundle beside the
///   device's own processor, and used only when there is no entry for the
///   latter; absent from ROCm/clr's release/rocm-rel-6.3.0.1 and from its
///   amd-staging of 2024-10-22, present in ROCm/rocm-systems' projects/clr.
///
/// ROCm 6.4 is thus the first release that can load them; composable_kernel
/// moved its CI to generic targets with 6.4.1 ("do not use generic targets
/// until 6.4.1 release"). Nothing AMD is executed by kiln's tests: this is
/// read from the sources named, not measured.
pub const GENERIC_ROCM: Rocm = (6, 4);

/// `HIP_VERSION` as `hipRuntimeGetVersion` reports it (60443483) → (6, 4).
#[inline]
pub fn rocm_of_hip_version(hip_version: i64) -> Option<Rocm> {
    if hip_version <= 0 {
        return None;
    }
    let major = hip_version / 10_000_000;
    let minor = hip_version / 100_000 % 100;
    (major > 0).then_some((major as u32, minor as u32))
}

/// The row of `name` (`gfx90a`; target features such as `:xnack-` are not part of a name).
#[inline]
pub fn gfx(name: &str) -> Option<&'static Gfx> {
    GFX.iter().find(|g| g.name == name)
}

/// The row whose code objects carry `mach` in `e_flags`.
#[inline]
pub fn gfx_by_mach(mach: u32) -> Option<&'static Gfx> {
    GFX.iter().find(|g| g.mach == Some(mach))
}

/// Processors a device can report (every concrete row), for telling a real
/// but uncarried GPU from a typo.
#[inline]
pub fn device_gfx() -> impl Iterator<Item = &'static Gfx> {
    GFX.iter().filter(|g| !g.is_generic())
}

/// Processors kiln can build code objects for (a known ELF machine value).
#[inline]
pub fn buildable_gfx() -> impl Iterator<Item = &'static Gfx> {
    GFX.iter().filter(|g| g.mach.is_some())
}

/// One NVIDIA compute capability, and which CUDA toolkits can build for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cc {
    /// major*10+minor: 90 for sm_90 / compute_90.
    pub sm: u32,
    /// The first toolkit (major, minor) whose nvcc/ptxas target it.
    pub since: (u32, u32),
    /// The last toolkit major that still does (CUDA 13 dropped sm_50..sm_72).
    pub until: Option<u32>,
    /// A GPU people know it by, for messages.
    pub example: &'static str,
    /// An integrated GPU of a Tegra SoC (Jetson, DRIVE): SASS binary
    /// compatibility across minor versions does not hold there ([`sass_runs_on`]).
    pub tegra: bool,
}

impl Cc {
    /// Whether a toolkit of `version` (major, minor) can compile for it.
    #[inline]
    pub fn built_by(&self, version: (u32, u32)) -> bool {
        version >= self.since && self.until.is_none_or(|last| version.0 <= last)
    }
}

#[inline]
const fn cc(sm: u32, since: (u32, u32), until: Option<u32>, example: &'static str) -> Cc {
    Cc { sm, since, until, example, tegra: false }
}

/// A Tegra SoC's GPU.
#[inline]
const fn tegra(c: Cc) -> Cc {
    Cc { tegra: true, ..c }
}

/// The NVIDIA table: every compute capability kiln may build SASS or PTX
/// for (CUDA 12 dropped everything below sm_50), from NVIDIA's CUDA
/// toolkit release notes.
pub const CUDA: &[Cc] = &[
    cc(50, (6, 0), Some(12), "GTX 750"),
    cc(52, (6, 5), Some(12), "GTX 980 / M40"),
    tegra(cc(53, (7, 0), Some(12), "Jetson TX1")),
    cc(60, (8, 0), Some(12), "P100"),
    cc(61, (8, 0), Some(12), "GTX 1080 / P40"),
    tegra(cc(62, (8, 0), Some(12), "Jetson TX2")),
    cc(70, (9, 0), Some(12), "V100"),
    tegra(cc(72, (10, 0), Some(12), "Jetson Xavier")),
    cc(75, (10, 0), None, "T4 / RTX 20xx"),
    cc(80, (11, 0), None, "A100"),
    cc(86, (11, 1), None, "A10 / RTX 30xx"),
    tegra(cc(87, (11, 4), None, "Jetson Orin")),
    cc(89, (11, 8), None, "L4 / L40S / RTX 40xx"),
    cc(90, (11, 8), None, "H100 / H200"),
    cc(100, (12, 8), None, "B200 / GB200"),
    // CUDA 13 renamed sm_101 (Thor) to sm_110.
    tegra(cc(101, (12, 8), Some(12), "Jetson Thor (CUDA 12)")),
    cc(103, (12, 9), None, "B300 / GB300"),
    tegra(cc(110, (13, 0), None, "Jetson Thor")),
    cc(120, (12, 8), None, "RTX 50xx / RTX PRO 6000"),
    cc(121, (12, 9), None, "DGX Spark (GB10)"),
];

/// The row of compute capability `sm` (90 for sm_90).
#[inline]
pub fn cuda(sm: u32) -> Option<&'static Cc> {
    CUDA.iter().find(|c| c.sm == sm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdna_macros_follow_upstreams_ranges() {
        // candle PR #3801: gfx1030-gfx1039 RDNA2, gfx1100-gfx1299 RDNA3, else none;
        // a generic target its members' (which must agree).
        for g in GFX {
            let n: Option<u32> = g.name.strip_prefix("gfx").and_then(|d| d.parse().ok());
            let want = match n {
                Some(1030..=1039) => Some("RDNA2"),
                Some(1100..=1299) => Some("RDNA3"),
                _ if g.is_generic() => {
                    let members = g.members();
                    assert!(!members.is_empty(), "{} covers no row", g.name);
                    assert!(members.iter().all(|m| m.rdna == members[0].rdna), "{}'s members disagree on their RDNA macro", g.name);
                    members[0].rdna
                }
                _ => None,
            };
            assert_eq!(g.rdna, want, "{}", g.name);
            assert_eq!(g.geometry_defines(), want.into_iter().collect::<Vec<_>>(), "{}", g.name);
            assert_eq!(g.wavefront_size(), if g.wave64() { 64 } else { 32 });
        }
    }

    #[test]
    fn the_table_is_consistent() {
        for (i, g) in GFX.iter().enumerate() {
            assert!(GFX[..i].iter().all(|h| h.name != g.name), "{} twice", g.name);
            if let Some(m) = g.mach {
                assert!(GFX[..i].iter().all(|h| h.mach != Some(m)), "{} reuses machine 0x{m:x}", g.name);
            }
            if let Some(f) = g.generic {
                assert!(gfx(f).is_some_and(Gfx::is_generic), "{}: {f} is no generic row", g.name);
            }
            if let Some(s) = g.compat {
                let sib = gfx(s).unwrap_or_else(|| panic!("{}: sibling {s} is not a row", g.name));
                assert_eq!(sib.generic, g.generic, "{} and its sibling {s} must share a family", g.name);
                assert!(matches!(g.generic, Some("gfx10-3-generic" | "gfx12-generic")), "{}: siblings only where the ISA is identical", g.name);
            }
        }
        assert_eq!(gfx_by_mach(0x3f).map(|g| g.name), Some("gfx90a"));
        assert!(gfx("gfx90a").unwrap().wave64() && !gfx("gfx1100").unwrap().wave64());
        assert!(!device_gfx().any(|g| g.is_generic()));
        // Generic targets: code object v6 and up, built by an LLVM no older than any member's.
        for g in GFX.iter().filter(|g| g.is_generic()) {
            assert_eq!(g.min_code_object_version(), 6, "{}", g.name);
            assert!(g.members().iter().all(|m| m.generic == Some(g.name) && m.wave64() == g.wave64()), "{}", g.name);
        }
        assert_eq!(gfx("gfx1100").unwrap().min_code_object_version(), 4);
        assert_eq!(
            gfx("gfx11-generic").unwrap().members().iter().map(|g| g.name).collect::<Vec<_>>(),
            ["gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"]
        );
        // The one row LLVM knows but no device library does.
        let no_lib: Vec<&str> = buildable_gfx().filter(|g| g.device_lib != Some(g.llvm)).map(|g| g.name).collect();
        assert_eq!(no_lib, ["gfx1250"]);
        assert_eq!(rocm_of_hip_version(60443483), Some((6, 4)));
        assert_eq!(rocm_of_hip_version(70051831), Some((7, 0)));
        assert_eq!(rocm_of_hip_version(50731921), Some((5, 7)));
        assert_eq!(rocm_of_hip_version(0), None);
        assert!(GENERIC_ROCM > (6, 3) && rocm_of_hip_version(60342134).unwrap() < GENERIC_ROCM);
        assert!(CUDA.windows(2).all(|w| w[0].sm < w[1].sm), "the NVIDIA table is ascending, each sm once");
    }

    #[test]
    fn toolkits_build_what_their_release_notes_say() {
        let sm = |n| cuda(n).unwrap();
        assert!(sm(70).built_by((12, 4)) && !sm(70).built_by((13, 0)));
        assert!(sm(90).built_by((12, 4)) && !sm(100).built_by((12, 4)));
        assert!(sm(100).built_by((12, 9)) && sm(120).built_by((12, 9)) && sm(120).built_by((13, 0)));
        assert!(!sm(103).built_by((12, 8)) && sm(103).built_by((12, 9)));
        assert!(!sm(110).built_by((12, 9)) && !sm(101).built_by((13, 0)));
    }
}
