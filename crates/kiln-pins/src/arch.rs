//! Pinned targets, typed from the moment the pin file is read. What each GPU
//! is (its ELF machine value, family, wave size) lives in kiln-target's one
//! table; a target that is not buildable there is refused when the pin file
//! is read: validation needs the ELF machine value to check what the compiler
//! produced.

use std::fmt;

/// An AMD target, e.g. `gfx90a`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HipArch(String);

impl HipArch {
    pub fn parse(s: &str) -> Result<HipArch, String> {
        match kiln_target::gfx(s) {
            Some(g) if g.mach.is_some() => Ok(HipArch(s.to_string())),
            _ => Err(format!("unknown AMD arch `{s}`; known: {}", kiln_target::buildable_gfx().map(|g| g.name).collect::<Vec<_>>().join(", "))),
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// `EF_AMDGPU_MACH_*` of this arch.
    pub fn mach(&self) -> u32 {
        self.row().mach.expect("checked at parse")
    }
    /// See [`kiln_target::Gfx::wave64`].
    pub fn wave64(&self) -> bool {
        self.row().wave64()
    }
    /// This arch's row of kiln-target's table.
    pub fn row(&self) -> &'static kiln_target::Gfx {
        kiln_target::gfx(&self.0).expect("checked at parse")
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
        let known = || kiln_target::CUDA.iter().map(|c| format!("{prefix}{}", c.sm)).collect::<Vec<_>>().join(", ");
        let digits = s.strip_prefix(prefix).ok_or_else(|| format!("`{s}` is not a `{prefix}XX` arch; known: {}", known()))?;
        match digits.parse::<u32>() {
            Ok(n) if kiln_target::cuda(n).is_some() => Ok(Sm(n)),
            _ => Err(format!("unknown NVIDIA arch `{s}`; known: {}", known())),
        }
    }
    pub fn sass(self) -> String {
        format!("sm_{}", self.0)
    }
    pub fn ptx(self) -> String {
        format!("compute_{}", self.0)
    }
    /// This sm's row of kiln-target's table.
    pub fn row(self) -> &'static kiln_target::Cc {
        kiln_target::cuda(self.0).expect("checked at parse")
    }
}
