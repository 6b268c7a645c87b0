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

/// One target kiln builds a module for: an AMD processor (HSACO), a virtual
/// NVIDIA arch (PTX) or a real one (SASS). Named as in pins.toml and in the
/// manifest: `gfx90a`, `compute_80`, `sm_90`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    Hip(HipArch),
    Ptx(Sm),
    Sass(Sm),
}

impl Target {
    /// Parses a target's name, checked against kiln-target's table.
    pub fn parse(s: &str) -> Result<Target, String> {
        if s.starts_with("gfx") {
            HipArch::parse(s).map(Target::Hip)
        } else if s.starts_with("compute_") {
            Sm::parse_prefixed(s, "compute_").map(Target::Ptx)
        } else if s.starts_with("sm_") {
            Sm::parse_prefixed(s, "sm_").map(Target::Sass)
        } else {
            Err(format!("`{s}` is not a target: AMD targets are named gfx..., NVIDIA ones compute_XX (PTX) or sm_XX (SASS)"))
        }
    }

    pub fn backend(&self) -> kiln_target::Backend {
        match self {
            Target::Hip(_) => kiln_target::Backend::Hip,
            Target::Ptx(_) | Target::Sass(_) => kiln_target::Backend::Cuda,
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Hip(a) => a.fmt(f),
            Target::Ptx(s) => f.write_str(&s.ptx()),
            Target::Sass(s) => f.write_str(&s.sass()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_from_the_names_they_display_as() {
        for name in ["gfx90a", "gfx1100", "compute_80", "sm_90"] {
            assert_eq!(Target::parse(name).unwrap().to_string(), name);
        }
        assert_eq!(Target::parse("sm_90"), Ok(Target::Sass(Sm(90))));
        assert_eq!(Target::parse("compute_80").unwrap().backend(), kiln_target::Backend::Cuda);
        assert!(Target::parse("gfx9999").unwrap_err().contains("known: gfx900"));
        assert!(Target::parse("sm_91").unwrap_err().contains("sm_90"));
        assert!(Target::parse("h100").unwrap_err().contains("gfx..."));
    }
}
