//! The GPU architectures kiln knows, and what identifies each in a code object.
//!
//! A target that is not in these tables is refused when the pin file is read:
//! validation needs the ELF machine value to check what the compiler produced.

use std::fmt;

/// An AMD GPU ISA (`gfx...`), with the `EF_AMDGPU_MACH_*` value that its code
/// objects carry in the low byte of `e_flags` (LLVM's `ELF.h`).
pub const HIP_ARCHS: &[(&str, u32)] = &[
    ("gfx900", 0x2c),
    ("gfx902", 0x2d),
    ("gfx904", 0x2e),
    ("gfx906", 0x2f),
    ("gfx908", 0x30),
    ("gfx909", 0x31),
    ("gfx90c", 0x32),
    ("gfx1010", 0x33),
    ("gfx1011", 0x34),
    ("gfx1012", 0x35),
    ("gfx1030", 0x36),
    ("gfx1031", 0x37),
    ("gfx1032", 0x38),
    ("gfx1033", 0x39),
    ("gfx1035", 0x3d),
    ("gfx1034", 0x3e),
    ("gfx90a", 0x3f),
    ("gfx940", 0x40),
    ("gfx1100", 0x41),
    ("gfx1013", 0x42),
    ("gfx1150", 0x43),
    ("gfx1103", 0x44),
    ("gfx1036", 0x45),
    ("gfx1101", 0x46),
    ("gfx1102", 0x47),
    ("gfx1151", 0x4a),
    ("gfx941", 0x4b),
    ("gfx942", 0x4c),
];

/// NVIDIA compute capabilities kiln builds SASS for (CUDA 12 dropped < sm_50).
pub const SM_ARCHS: &[u32] = &[50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90];

/// An AMD target, e.g. `gfx90a`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HipArch(String);

impl HipArch {
    pub fn parse(s: &str) -> Result<HipArch, String> {
        match HIP_ARCHS.iter().find(|(name, _)| *name == s) {
            Some(_) => Ok(HipArch(s.to_string())),
            None => Err(format!("unknown AMD arch `{s}`; known: {}", HIP_ARCHS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "))),
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// `EF_AMDGPU_MACH_*` of this arch.
    pub fn mach(&self) -> u32 {
        HIP_ARCHS.iter().find(|(n, _)| *n == self.0).map(|(_, m)| *m).expect("checked at parse")
    }
    /// Wave64 GCN/CDNA parts versus wave32 RDNA (gfx10+): shuffles and
    /// reductions written for 32-lane warps behave differently on wave64.
    pub fn wave64(&self) -> bool {
        !self.0.starts_with("gfx1")
    }
}

impl fmt::Display for HipArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A CUDA compute capability, major*10+minor (`sm_90` is 90).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sm(pub u32);

impl Sm {
    /// Parses `sm_XX` (real, SASS) or `compute_XX` (virtual, PTX) with the given prefix.
    pub fn parse_prefixed(s: &str, prefix: &str) -> Result<Sm, String> {
        let known = || SM_ARCHS.iter().map(|n| format!("{prefix}{n}")).collect::<Vec<_>>().join(", ");
        let digits = s.strip_prefix(prefix).ok_or_else(|| format!("`{s}` is not a `{prefix}XX` arch; known: {}", known()))?;
        match digits.parse::<u32>() {
            Ok(n) if SM_ARCHS.contains(&n) => Ok(Sm(n)),
            _ => Err(format!("unknown NVIDIA arch `{s}`; known: {}", known())),
        }
    }
    pub fn sass(self) -> String {
        format!("sm_{}", self.0)
    }
    pub fn ptx(self) -> String {
        format!("compute_{}", self.0)
    }
}
