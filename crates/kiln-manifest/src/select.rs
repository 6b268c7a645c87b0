//! Which artifact a device runs: the selection rules of docs/loader.md.
//!
//! Pure logic over the manifest, so that the artifact crates, the loader and
//! any tool that only wants to say "this GPU would get that file" agree.
//!
//! CUDA: kiln-target's one rule ([`kiln_target::compat`]): the cubin of the
//! newest carried sm that runs on the device (its own sm, else an older one of
//! its major version, not on Tegra), unless a carried PTX level at or below the
//! device is higher than that sm (it has kernels the cubin lacks); else the
//! highest such PTX level; else an error naming what is carried.
//!
//! HIP: the code object built for the device's exact gfx arch; else one built
//! for the LLVM generic target of its family (`gfx10-3-generic`), which the
//! ROCm loader accepts on every member, where the runtime can load it (code
//! object v6: ROCm [`kiln_target::GENERIC_ROCM`] or newer; a runtime the
//! caller does not know is taken to be able to); else, only when the caller
//! opts in, the code object of an ISA-identical sibling (`compat` in
//! kiln-target's table); else an error naming the device, what is carried
//! for its family and, where a generic object is carried but the runtime is
//! too old for it, the ROCm it needs. This is the HIP runtime's own rule for a
//! bundle (clr's `ExtractFatBinaryUsingCOMGR`: the device's processor, else
//! its generic target), so the drop-in's `Module::hsaco()` bundles, handed to
//! `hipModuleLoadData`, get the same answer. A code object for another gfx
//! arch is never chosen by default: ROCm refuses it, or worse, runs it on
//! hardware whose registers or hazards differ.

use std::fmt;

use kiln_target::CudaCode;

use crate::{Artifact, Backend, Kind, Manifest};

/// A GPU, as far as choosing code for it goes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DeviceArch {
    /// An NVIDIA device of compute capability `major.minor` (sm_90 is 9.0).
    Cuda { major: u32, minor: u32 },
    /// An AMD device by its gfx processor name, target features removed
    /// (`gfx90a:sramecc+:xnack-` is `gfx90a`).
    Hip { gfx: String },
}

/// How to choose, beyond the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SelectOptions {
    /// Allow the ISA-identical siblings (`compat` in kiln-target's table). Off unless the user asks.
    pub hip_compat: bool,
    /// CUDA: skip cubins and take the best PTX (for measuring the JIT path).
    pub force_ptx: bool,
    /// HIP: the ROCm release of the runtime that will load the code object
    /// (`kiln_target::rocm_of_hip_version` of `hipRuntimeGetVersion`), which
    /// decides whether a generic target's object may be chosen; `None`:
    /// not known, taken to load it (the selection then says `HipGeneric`).
    pub hip_runtime: Option<kiln_target::Rocm>,
    /// HIP: take the family's generic object even where the device's own is
    /// carried (where the runtime loads it): the CI leg of a generic target,
    /// run on a member kiln also builds for (`KILN_TEST_ARCH=gfx11-generic`). Off unless asked.
    pub hip_prefer_generic: bool,
}

/// How an artifact was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Match {
    /// Built for exactly this device (cubin for its sm, HSACO for its gfx).
    Exact,
    /// A cubin for an older sm of the device's major version, which the driver
    /// runs (CUDA binary compatibility, [`kiln_target::sass_runs_on`]).
    BinaryCompatible,
    /// PTX for a capability at or below the device's, JIT-compiled by the driver.
    Ptx,
    /// A code object for the LLVM generic target of the device's family.
    HipGeneric,
    /// An ISA-identical sibling's code object, by the caller's opt-in.
    HipCompat,
}

/// The chosen artifact and how it was chosen.
#[derive(Clone, Copy, Debug)]
pub struct Selection<'a> {
    pub artifact: &'a Artifact,
    pub matched: Match,
}

/// An arch string that names no GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchError {
    pub input: String,
    pub reason: String,
}

impl fmt::Display for ArchError {
    #[inline]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a GPU arch: {}; expected an NVIDIA compute capability (`sm_90`, `90`, `9.0`) or an AMD processor (`gfx90a`, `gfx90a:sramecc+:xnack-`)",
            self.input, self.reason
        )
    }
}
impl std::error::Error for ArchError {}

/// Why no artifact can be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelectError {
    /// The manifest has no artifact of that module at all.
    UnknownModule { module: String, carried: Vec<String> },
    /// The manifest has the module, but nothing this device can run.
    NoArtifact {
        module: String,
        device: DeviceArch,
        /// What the manifest carries for the device's backend (`sm_90`, `compute_80`, `gfx90a`).
        carried: Vec<String>,
        /// What to try, when there is something (an opt-in, an override).
        hint: Option<String>,
    },
}

impl fmt::Display for SelectError {
    #[inline]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelectError::UnknownModule { module, carried } => {
                write!(f, "no kernel module `{module}` in the manifest; it carries: {}", list(carried))
            }
            SelectError::NoArtifact { module, device, carried, hint } => {
                let backend = match device {
                    DeviceArch::Cuda { .. } => "CUDA",
                    DeviceArch::Hip { .. } => "HIP",
                };
                write!(f, "no artifact of module `{module}` can run on {device}: the {backend} artifacts carried are {}", list(carried))?;
                match device {
                    DeviceArch::Cuda { .. } => {
                        f.write_str(" (a cubin runs only on its own sm or a newer one of the same major version, and on a Jetson only on its own; PTX only on devices at or above its compute level)")?
                    }
                    // What the drop-in's `Module::hsaco()` bundle would meet in the HIP runtime.
                    DeviceArch::Hip { .. } => {
                        let (major, minor) = kiln_target::GENERIC_ROCM;
                        write!(
                            f,
                            " (a code object runs only on its own gfx arch, a generic target's on its family from ROCm {major}.{minor} on; \
                             the HIP runtime, given the module's bundle of these, finds no entry it can load for this device and fails with \
                             hipErrorNoBinaryForGpu)"
                        )?
                    }
                }
                if let Some(h) = hint {
                    write!(f, "; {h}")?;
                }
                Ok(())
            }
        }
    }
}
impl std::error::Error for SelectError {}

#[inline]
fn list(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join(", ")
    }
}

impl DeviceArch {
    /// Reads `sm_90`, `sm90`, `90`, `9.0`, `120`, `compute_90` (as the
    /// device it names), `gfx90a`, `gfx90a:sramecc+:xnack-`, `amdgcn-amd-amdhsa--gfx90a`.
    /// Any other text is an [`ArchError`]; an AMD name that no device reports (kiln-target's table) too.
    #[inline]
    pub fn parse(input: &str) -> Result<DeviceArch, ArchError> {
        let err = |reason: &str| ArchError { input: input.to_string(), reason: reason.to_string() };
        let s = input.trim();
        if s.is_empty() {
            return Err(err("it is empty"));
        }
        let lower = s.to_ascii_lowercase();
        let amd = lower.strip_prefix("amdgcn-amd-amdhsa--").unwrap_or(&lower);
        if amd.starts_with("gfx") {
            return parse_gfx(amd).map_err(|r| err(&r));
        }
        let digits = lower.strip_prefix("sm_").or_else(|| lower.strip_prefix("sm")).or_else(|| lower.strip_prefix("compute_")).unwrap_or(&lower);
        parse_capability(digits).map_err(|r| err(&r))
    }

    /// The name kiln files artifacts under: `sm_90`, `gfx90a`.
    #[inline]
    pub fn name(&self) -> String {
        match self {
            DeviceArch::Cuda { major, minor } => format!("sm_{major}{minor}"),
            DeviceArch::Hip { gfx } => gfx.clone(),
        }
    }

    #[inline]
    pub fn backend(&self) -> Backend {
        match self {
            DeviceArch::Cuda { .. } => Backend::Cuda,
            DeviceArch::Hip { .. } => Backend::Hip,
        }
    }
}

impl fmt::Display for DeviceArch {
    #[inline]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceArch::Cuda { major, minor } => write!(f, "sm_{major}{minor} (compute capability {major}.{minor})"),
            DeviceArch::Hip { gfx } => f.write_str(gfx),
        }
    }
}

impl std::str::FromStr for DeviceArch {
    type Err = ArchError;
    #[inline]
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DeviceArch::parse(s)
    }
}

/// `90` → 9.0, `120` → 12.0, `9.0` → 9.0. The minor is one digit in every
/// capability NVIDIA has issued, which is what makes `120` unambiguous.
#[inline]
fn parse_capability(s: &str) -> Result<DeviceArch, String> {
    // Byte-wise splitting below needs ASCII; anything else is not a capability anyway.
    if !s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err("not a compute capability".into());
    }
    let (major, minor) = match s.split_once('.') {
        Some((a, b)) => (a, b),
        None if s.len() >= 2 => s.split_at(s.len() - 1),
        None => return Err("a compute capability has a major and a minor digit (`90` is 9.0)".into()),
    };
    let digit_run = |t: &str| !t.is_empty() && t.len() <= 2 && t.bytes().all(|b| b.is_ascii_digit());
    if !digit_run(major) || minor.len() != 1 || !digit_run(minor) {
        return Err("not a compute capability".into());
    }
    let (major, minor): (u32, u32) = (major.parse().unwrap(), minor.parse().unwrap());
    // CUDA has never shipped a device below 1.0; 0.x is a typo, not a GPU.
    if major == 0 {
        return Err("compute capability major version 0".into());
    }
    Ok(DeviceArch::Cuda { major, minor })
}

/// `gfx90a:sramecc+:xnack-` → `gfx90a`. The features (`name+`/`name-`) say
/// how a device is configured, not which ISA it runs, so they are dropped
/// after checking they are well formed.
#[inline]
fn parse_gfx(s: &str) -> Result<DeviceArch, String> {
    let mut parts = s.split(':');
    let gfx = parts.next().unwrap_or_default();
    for feature in parts {
        let name = feature.strip_suffix('+').or_else(|| feature.strip_suffix('-'));
        match name {
            Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) => {}
            _ => return Err(format!("target feature `{feature}` is not `name+` or `name-`")),
        }
    }
    // A device never reports a generic target; a name outside the table is a typo (`gfx90`), not an uncarried GPU.
    if !kiln_target::device_gfx().any(|g| g.name == gfx) {
        return Err(format!("unknown AMD processor `{gfx}`; known: {}", kiln_target::device_gfx().map(|g| g.name).collect::<Vec<_>>().join(", ")));
    }
    Ok(DeviceArch::Hip { gfx: gfx.to_string() })
}

/// `sm_90`/`compute_90` → 90. `sm_90a` and other suffixed arches are
/// arch-specific builds that run only on that sm; they are not chosen by
/// these rules, so they read as `None`.
#[inline]
fn cuda_level(arch: &str, prefix: &str) -> Option<u32> {
    match parse_capability(arch.strip_prefix(prefix)?) {
        Ok(DeviceArch::Cuda { major, minor }) => Some(major * 10 + minor),
        _ => None,
    }
}

impl Manifest {
    /// The cubin of `module` for one sm (`90` for sm_90).
    #[inline]
    pub fn sass(&self, module: &str, sm: u32) -> Option<&Artifact> {
        self.find(module, Kind::Cubin, &format!("sm_{sm}"))
    }

    /// The PTX of `module` for one compute level (`80` for compute_80).
    #[inline]
    pub fn ptx(&self, module: &str, compute: u32) -> Option<&Artifact> {
        self.find(module, Kind::Ptx, &format!("compute_{compute}"))
    }

    /// The code object of `module` for one gfx arch (`gfx90a`).
    #[inline]
    pub fn hsaco(&self, module: &str, gfx: &str) -> Option<&Artifact> {
        self.find(module, Kind::Hsaco, gfx)
    }

    /// The kernel modules the manifest carries (static libraries and the
    /// files of one built per target, [`crate::library_file`], excluded), sorted.
    #[inline]
    pub fn modules(&self) -> Vec<&str> {
        let mut m: Vec<&str> = self
            .artifacts
            .iter()
            .filter(|a| a.kind != Kind::Staticlib && crate::library_file(&a.module).is_none())
            .map(|a| a.module.as_str())
            .collect();
        m.sort_unstable();
        m.dedup();
        m
    }

    /// The best artifact of `module` for `device` under the default rules
    /// (no sibling opt-in). See the module docs for the rules.
    #[inline]
    pub fn select(&self, module: &str, device: &DeviceArch) -> Result<&Artifact, SelectError> {
        self.select_with(module, device, SelectOptions::default()).map(|s| s.artifact)
    }

    /// [`Manifest::select`] with options, saying how the artifact matched.
    #[inline]
    pub fn select_with(&self, module: &str, device: &DeviceArch, opts: SelectOptions) -> Result<Selection<'_>, SelectError> {
        // One artifact per arch: bundles repeat the code objects, static libraries are not modules.
        let of_module: Vec<&Artifact> =
            self.artifacts.iter().filter(|a| a.module == module && !matches!(a.kind, Kind::Staticlib | Kind::Bundle)).collect();
        if of_module.is_empty() {
            return Err(SelectError::UnknownModule { module: module.to_string(), carried: self.modules().iter().map(|s| s.to_string()).collect() });
        }
        let backend = device.backend();
        let mut carried: Vec<String> = of_module.iter().filter(|a| a.backend == backend).map(|a| a.arch.clone()).collect();
        carried.sort_unstable();
        carried.dedup();
        let none =
            |hint: Option<String>| SelectError::NoArtifact { module: module.to_string(), device: device.clone(), carried: carried.clone(), hint };
        match device {
            DeviceArch::Cuda { major, minor } => {
                let dev = major * 10 + minor;
                let (cubins, ptx) =
                    (if opts.force_ptx { vec![] } else { levels(&of_module, Kind::Cubin, "sm_") }, levels(&of_module, Kind::Ptx, "compute_"));
                let sms: Vec<u32> = cubins.iter().map(|(l, _)| *l).collect();
                let ptx_levels: Vec<u32> = ptx.iter().map(|(l, _)| *l).collect();
                match kiln_target::cuda_choice(&sms, &ptx_levels, dev) {
                    Some(CudaCode::Sass(sm)) => Ok(pick(at(&cubins, sm), if sm == dev { Match::Exact } else { Match::BinaryCompatible })),
                    Some(CudaCode::Ptx(level)) => Ok(pick(at(&ptx, level), Match::Ptx)),
                    None => Err(none(self.cuda_hint(&of_module, dev))),
                }
            }
            DeviceArch::Hip { gfx } => {
                let row = kiln_target::gfx(gfx);
                let generic = row.and_then(|r| r.generic);
                let generic_artifact = generic.and_then(|g| of_module.iter().find(|a| a.kind == Kind::Hsaco && a.arch == g));
                // The runtime too old for the generic object: said instead of a load failure deep in HIP.
                let too_old = generic_artifact.and(opts.hip_runtime).filter(|v| *v < kiln_target::GENERIC_ROCM);
                if let (Some(a), None, true) = (generic_artifact, too_old, opts.hip_prefer_generic) {
                    return Ok(pick(a, Match::HipGeneric));
                }
                if let Some(a) = of_module.iter().find(|a| a.kind == Kind::Hsaco && &a.arch == gfx) {
                    return Ok(pick(a, Match::Exact));
                }
                if let (Some(a), None) = (generic_artifact, too_old) {
                    return Ok(pick(a, Match::HipGeneric));
                }
                let sibling = row.and_then(|r| r.compat);
                let sibling_artifact = sibling.and_then(|s| of_module.iter().find(|a| a.kind == Kind::Hsaco && a.arch == s));
                match (sibling_artifact, opts.hip_compat, too_old) {
                    (Some(a), true, _) => Ok(pick(a, Match::HipCompat)),
                    (_, _, Some(v)) => Err(none(Some(hip_runtime_hint(gfx, generic.unwrap_or_default(), &carried, v)))),
                    (Some(a), false, None) => Err(none(Some(format!(
                        "{gfx} has the same ISA as {} (LLVM's {} lists no restrictions): opt in with KILN_HIP_ARCH_COMPAT=1 (or SelectOptions::hip_compat), and see docs/loader.md for what ROCm itself requires",
                        a.arch,
                        generic.unwrap_or("generic target")
                    )))),
                    (None, _, None) => Err(none(self.hip_hint(gfx))),
                }
            }
        }
    }

    /// What would run `dev` when nothing carried does: it is below every PTX
    /// level this build has (the floor), so only a kiln that builds lower would.
    #[inline]
    fn cuda_hint(&self, of_module: &[&Artifact], sm: u32) -> Option<String> {
        let floor = of_module.iter().filter(|a| a.kind == Kind::Ptx).filter_map(|a| cuda_level(&a.arch, "compute_")).min()?;
        let known = kiln_target::cuda(sm).map(|c| format!(" ({})", c.example)).unwrap_or_default();
        Some(format!(
            "sm_{sm}{known} is below compute_{floor}, the lowest PTX level this build carries and the floor kiln builds for: no crate feature adds it; \
             it needs a kiln release whose pins.toml [targets] go that low (the CUDA toolkit must still build for it)"
        ))
    }

    /// Why an AMD processor gets nothing: not built by this kiln, and what
    /// building it would take (the LLVM that first knows it, from kiln-target).
    #[inline]
    fn hip_hint(&self, gfx: &str) -> Option<String> {
        let row = kiln_target::gfx(gfx)?;
        let clang = self.toolchain.reported.get("clang");
        let major = clang.and_then(|v| v.split('.').next()?.parse::<u32>().ok());
        Some(match (row.mach, major) {
            (None, _) => format!("{gfx} is older than anything ROCm still builds for"),
            (Some(_), Some(m)) if row.llvm > m => format!(
                "{gfx} needs LLVM {} or newer, and this build's clang is {}: a kiln release with a newer ROCm toolchain would add it (docs/toolchain.md)",
                row.llvm,
                clang.map(String::as_str).unwrap_or("?")
            ),
            _ => format!("this build's pins.toml [targets].hip does not list {gfx}; a kiln release that adds it would carry it"),
        })
    }
}

/// Why a device whose family is carried only as its generic target gets
/// nothing on this runtime: what is carried for the family, and the ROCm that
/// would load it.
#[inline]
fn hip_runtime_hint(gfx: &str, generic: &str, carried: &[String], runtime: kiln_target::Rocm) -> String {
    let family: Vec<&str> =
        carried.iter().map(String::as_str).filter(|a| *a == generic || kiln_target::gfx(a).is_some_and(|r| r.generic == Some(generic))).collect();
    let (need, have) = (kiln_target::GENERIC_ROCM, runtime);
    format!(
        "for {gfx}'s family ({generic}) this build carries {}, and {gfx} itself only as {generic}, a generic code object (v6), which the HIP runtime \
         loads from ROCm {}.{} on; this runtime is ROCm {}.{}: update ROCm to {}.{} or newer (docs/loader.md)",
        family.join(", "),
        need.0,
        need.1,
        have.0,
        have.1,
        need.0,
        need.1
    )
}

/// The artifacts of one CUDA kind with their level (`sm_86` → 86); suffixed arches left out.
#[inline]
fn levels<'a>(of_module: &[&'a Artifact], kind: Kind, prefix: &str) -> Vec<(u32, &'a Artifact)> {
    of_module.iter().filter(|a| a.kind == kind).filter_map(|a| Some((cuda_level(&a.arch, prefix)?, *a))).collect()
}

/// The artifact of `level` in a list [`levels`] made (the choice came from that list).
#[inline]
fn at<'a>(list: &[(u32, &'a Artifact)], level: u32) -> &'a Artifact {
    list.iter().find(|(l, _)| *l == level).map(|(_, a)| *a).expect("chosen from this list")
}

#[inline]
fn pick(artifact: &Artifact, matched: Match) -> Selection<'_> {
    Selection { artifact, matched }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Targets;

    fn art(module: &str, kind: Kind, arch: &str) -> Artifact {
        let backend = if kind == Kind::Hsaco { Backend::Hip } else { Backend::Cuda };
        Artifact {
            module: module.into(),
            backend,
            arch: arch.into(),
            kind,
            path: format!("{}/{arch}/{module}.{}", backend.as_str(), kind.as_str()),
            size: 1,
            sha256: "00".repeat(32),
            kernels: vec![],
            ptx_version: None,
            resources: vec![],
            geometry: None,
        }
    }

    fn manifest(artifacts: Vec<Artifact>) -> Manifest {
        crate::tests::manifest_of(Targets { hip: vec![], code_object_version: 5, cuda_ptx: vec![], cuda_sass: vec![] }, artifacts)
    }

    /// What `cargo xtask dist` builds by default, for one module.
    fn kiln_default() -> Manifest {
        let mut a = vec![];
        for m in ["affine", "fill"] {
            for sm in ["sm_80", "sm_86", "sm_89", "sm_90"] {
                a.push(art(m, Kind::Cubin, sm));
            }
            for c in ["compute_80", "compute_89"] {
                a.push(art(m, Kind::Ptx, c));
            }
            for g in ["gfx1030", "gfx1100", "gfx90a"] {
                a.push(art(m, Kind::Hsaco, g));
            }
        }
        a.push(art("moe", Kind::Staticlib, "sm_80+sm_90"));
        manifest(a)
    }

    fn arch(s: &str) -> DeviceArch {
        DeviceArch::parse(s).unwrap()
    }

    fn chosen(m: &Manifest, module: &str, dev: &str, opts: SelectOptions) -> (String, Match) {
        let s = m.select_with(module, &arch(dev), opts).unwrap_or_else(|e| panic!("{dev}: {e}"));
        (s.artifact.arch.clone(), s.matched)
    }

    #[test]
    fn parses_every_spelling_of_a_cuda_device() {
        for s in ["sm_90", "sm90", "90", "9.0", "SM_90", " sm_90 ", "compute_90"] {
            assert_eq!(arch(s), DeviceArch::Cuda { major: 9, minor: 0 }, "{s}");
        }
        assert_eq!(arch("sm_86"), DeviceArch::Cuda { major: 8, minor: 6 });
        assert_eq!(arch("120"), DeviceArch::Cuda { major: 12, minor: 0 });
        assert_eq!(arch("sm_100"), DeviceArch::Cuda { major: 10, minor: 0 });
        assert_eq!(arch("12.1"), DeviceArch::Cuda { major: 12, minor: 1 });
        assert_eq!(arch("sm_90").name(), "sm_90");
    }

    #[test]
    fn parses_amd_names_and_drops_target_features() {
        assert_eq!(arch("gfx90a"), DeviceArch::Hip { gfx: "gfx90a".into() });
        assert_eq!(arch("gfx90a:sramecc+:xnack-"), DeviceArch::Hip { gfx: "gfx90a".into() });
        assert_eq!(arch("amdgcn-amd-amdhsa--gfx1100"), DeviceArch::Hip { gfx: "gfx1100".into() });
        assert_eq!(arch("gfx1030").name(), "gfx1030");
    }

    #[test]
    fn refuses_garbage_and_unknown_archs() {
        for s in [
            "",
            "   ",
            "sm_",
            "sm_9",
            "9",
            "sm_9x",
            "sm_90a",
            "0.5",
            "sm_05",
            "9.",
            ".9",
            "9.10",
            "1234",
            "cuda",
            "h100",
            "gfx",
            "gfx90",
            "gfx9000",
            "gfx90a:xnack",
            "gfx90a:+",
            "gfx90a:sramecc+:",
            "gfx10-3-generic",
            "gfx90a;rm -rf",
            "-90",
            "sm_-9",
            "９０",
        ] {
            let e = DeviceArch::parse(s).expect_err(s);
            assert_eq!(e.input, s);
            assert!(e.to_string().contains("is not a GPU arch"), "{e}");
        }
        assert!(DeviceArch::parse("gfx9000").unwrap_err().reason.contains("unknown AMD processor `gfx9000`"));
    }

    #[test]
    fn cuda_takes_the_exact_cubin() {
        let m = kiln_default();
        for sm in ["sm_80", "sm_86", "sm_89", "sm_90"] {
            assert_eq!(chosen(&m, "affine", sm, SelectOptions::default()), (sm.to_string(), Match::Exact));
        }
        assert_eq!(m.select("affine", &arch("90")).unwrap().kind, Kind::Cubin);
    }

    #[test]
    fn cuda_falls_back_to_the_highest_ptx_at_or_below_the_device() {
        let m = kiln_default();
        let o = SelectOptions::default();
        // No sm_87/sm_88 cubin: compute_89 is above them, so compute_80.
        assert_eq!(chosen(&m, "affine", "sm_87", o), ("compute_80".into(), Match::Ptx));
        // Newer than anything carried: the highest PTX, which has the fp8 kernels.
        assert_eq!(chosen(&m, "affine", "sm_120", o), ("compute_89".into(), Match::Ptx));
        assert_eq!(chosen(&m, "affine", "sm_100", o), ("compute_89".into(), Match::Ptx));
        // Forced PTX never hands compute_89 to an sm_86.
        let p = SelectOptions { force_ptx: true, ..o };
        assert_eq!(chosen(&m, "affine", "sm_86", p), ("compute_80".into(), Match::Ptx));
        assert_eq!(chosen(&m, "affine", "sm_89", p), ("compute_89".into(), Match::Ptx));
        assert_eq!(chosen(&m, "affine", "sm_90", p), ("compute_89".into(), Match::Ptx));
    }

    #[test]
    fn cuda_takes_an_older_cubin_of_the_same_major_except_on_tegra() {
        let mut m = kiln_default();
        for sm in ["sm_70", "sm_100", "sm_120"] {
            m.artifacts.push(art("affine", Kind::Cubin, sm));
        }
        m.artifacts.push(art("affine", Kind::Ptx, "compute_70"));
        let o = SelectOptions::default();
        // GB10 (12.1) runs sm_120 SASS, B300 (10.3) sm_100's, an L40S-class 8.9 its own.
        assert_eq!(chosen(&m, "affine", "sm_121", o), ("sm_120".into(), Match::BinaryCompatible));
        assert_eq!(chosen(&m, "affine", "sm_103", o), ("sm_100".into(), Match::BinaryCompatible));
        assert_eq!(chosen(&m, "affine", "sm_89", o), ("sm_89".into(), Match::Exact));
        // Jetson Orin, Xavier and Thor: no SASS of another sm, the PTX below them.
        assert_eq!(chosen(&m, "affine", "sm_87", o), ("compute_80".into(), Match::Ptx));
        assert_eq!(chosen(&m, "affine", "sm_72", o), ("compute_70".into(), Match::Ptx));
        assert_eq!(chosen(&m, "affine", "sm_101", o), ("compute_89".into(), Match::Ptx));
        // Forced PTX skips compatible cubins too.
        assert_eq!(chosen(&m, "affine", "sm_121", SelectOptions { force_ptx: true, ..o }), ("compute_89".into(), Match::Ptx));
    }

    #[test]
    fn cuda_never_gives_ptx_above_the_device() {
        let m = manifest(vec![art("affine", Kind::Ptx, "compute_89"), art("affine", Kind::Cubin, "sm_90")]);
        let e = m.select("affine", &arch("sm_86")).unwrap_err();
        let SelectError::NoArtifact { carried, .. } = &e else { panic!("{e:?}") };
        assert_eq!(carried, &["compute_89".to_string(), "sm_90".to_string()]);
        let text = e.to_string();
        assert!(text.contains("module `affine`") && text.contains("sm_86") && text.contains("compute_89, sm_90"), "{text}");
        // Too old for any: sm_75 below the compute_80 floor, and the error says no feature helps.
        let e = kiln_default().select("affine", &arch("sm_75")).unwrap_err().to_string();
        assert!(
            e.contains("sm_75 (T4 / RTX 20xx) is below compute_80, the lowest PTX level this build carries")
                && e.contains("no crate feature adds it"),
            "{e}"
        );
    }

    #[test]
    fn an_uncarried_amd_processor_is_told_what_would_build_it() {
        let mut m = kiln_default();
        m.toolchain.reported.insert("clang".into(), "17.0.6".into());
        // RDNA4: LLVM 18 first knows it; the pinned clang is 17.
        let e = m.select("fill", &arch("gfx1201")).unwrap_err().to_string();
        assert!(e.contains("gfx1201 needs LLVM 18 or newer, and this build's clang is 17.0.6"), "{e}");
        // Krackan Point, the APU after those kiln builds: LLVM 19.
        let e = m.select("fill", &arch("gfx1152")).unwrap_err().to_string();
        assert!(e.contains("gfx1152 needs LLVM 19 or newer, and this build's clang is 17.0.6"), "{e}");
        // Buildable by this clang, just not pinned.
        let e = m.select("fill", &arch("gfx942")).unwrap_err().to_string();
        assert!(e.contains("does not list gfx942"), "{e}");
        // Older than ROCm builds for.
        let e = m.select("fill", &arch("gfx803")).unwrap_err().to_string();
        assert!(e.contains("gfx803 is older than anything ROCm still builds for"), "{e}");
    }

    #[test]
    fn hip_takes_the_exact_code_object_or_a_generic_one() {
        let m = kiln_default();
        for g in ["gfx1030", "gfx1100", "gfx90a"] {
            assert_eq!(chosen(&m, "fill", &format!("{g}:xnack-"), SelectOptions::default()), (g.to_string(), Match::Exact));
        }
        let mut g = kiln_default();
        g.artifacts.push(art("fill", Kind::Hsaco, "gfx11-generic"));
        assert_eq!(chosen(&g, "fill", "gfx1101", SelectOptions::default()), ("gfx11-generic".into(), Match::HipGeneric));
        // The exact object still beats the generic one.
        assert_eq!(chosen(&g, "fill", "gfx1100", SelectOptions::default()), ("gfx1100".into(), Match::Exact));
    }

    #[test]
    fn hip_takes_the_generic_object_only_where_the_runtime_loads_it() {
        let mut m = kiln_default();
        m.artifacts.push(art("fill", Kind::Hsaco, "gfx10-3-generic"));
        let on = |v| SelectOptions { hip_runtime: Some(v), ..Default::default() };
        // Exact first, whatever the runtime.
        assert_eq!(chosen(&m, "fill", "gfx1030", on((5, 7))), ("gfx1030".into(), Match::Exact));
        // The family's generic object from ROCm 6.4 on, and where the runtime is not known.
        for o in [on((6, 4)), on((7, 0)), SelectOptions::default()] {
            assert_eq!(chosen(&m, "fill", "gfx1031", o), ("gfx10-3-generic".into(), Match::HipGeneric));
        }
        // Too old a runtime: an error naming the device, the family's objects and the ROCm needed.
        let e = m.select_with("fill", &arch("gfx1031"), on((6, 3))).unwrap_err().to_string();
        assert!(
            e.contains("module `fill` can run on gfx1031")
                && e.contains("for gfx1031's family (gfx10-3-generic) this build carries gfx10-3-generic, gfx1030")
                && e.contains("which the HIP runtime loads from ROCm 6.4 on; this runtime is ROCm 6.3: update ROCm to 6.4 or newer"),
            "{e}"
        );
        // A generic target's CI leg on a member kiln builds for: the generic object first, where it loads.
        let prefer = |v| SelectOptions { hip_prefer_generic: true, ..on(v) };
        assert_eq!(chosen(&m, "fill", "gfx1030", prefer((6, 4))), ("gfx10-3-generic".into(), Match::HipGeneric));
        assert_eq!(chosen(&m, "fill", "gfx1030", prefer((6, 3))), ("gfx1030".into(), Match::Exact));
        assert_eq!(chosen(&m, "fill", "gfx1100", prefer((7, 0))), ("gfx1100".into(), Match::Exact));
        // ... unless the sibling opt-in picks the ISA-identical gfx1030.
        let both = SelectOptions { hip_compat: true, ..on((6, 2)) };
        assert_eq!(chosen(&m, "fill", "gfx1031", both), ("gfx1030".into(), Match::HipCompat));
        // A family with no generic object carried: the runtime changes nothing.
        assert!(m.select_with("fill", &arch("gfx1101"), on((7, 0))).unwrap_err().to_string().contains("gfx10-3-generic, gfx1030, gfx1100, gfx90a"));
    }

    #[test]
    fn hip_refuses_other_archs_and_lists_what_is_carried() {
        let m = kiln_default();
        for dev in ["gfx908", "gfx942", "gfx1101", "gfx1102", "gfx1031"] {
            let e = m.select("fill", &arch(dev)).unwrap_err();
            let SelectError::NoArtifact { carried, .. } = &e else { panic!("{e:?}") };
            assert_eq!(carried, &["gfx1030", "gfx1100", "gfx90a"], "{dev}");
            assert!(e.to_string().contains("gfx1030, gfx1100, gfx90a"), "{e}");
        }
        // gfx1031 gets told about the opt-in; gfx1101 does not (not ISA-identical).
        assert!(m.select("fill", &arch("gfx1031")).unwrap_err().to_string().contains("KILN_HIP_ARCH_COMPAT=1"));
        assert!(!m.select("fill", &arch("gfx1101")).unwrap_err().to_string().contains("KILN_HIP_ARCH_COMPAT"));
    }

    #[test]
    fn hip_siblings_only_with_the_opt_in() {
        let m = kiln_default();
        let on = SelectOptions { hip_compat: true, ..Default::default() };
        for dev in ["gfx1031", "gfx1032", "gfx1034", "gfx1035", "gfx1036"] {
            assert!(m.select("fill", &arch(dev)).is_err(), "{dev} without opt-in");
            assert_eq!(chosen(&m, "fill", dev, on), ("gfx1030".into(), Match::HipCompat));
        }
        // Not ISA-identical: refused even with the opt-in.
        for dev in ["gfx1101", "gfx1102", "gfx1103", "gfx908", "gfx942"] {
            assert!(m.select_with("fill", &arch(dev), on).is_err(), "{dev}");
        }
        // A CUDA device never gets HIP code, nor the reverse.
        assert!(manifest(vec![art("fill", Kind::Hsaco, "gfx90a")]).select("fill", &arch("sm_90")).is_err());
        assert!(manifest(vec![art("fill", Kind::Ptx, "compute_80")]).select("fill", &arch("gfx90a")).is_err());
    }

    #[test]
    fn the_apus_take_their_own_code_object_and_no_other() {
        // gfx1103 (Radeon 780M), gfx1150 (890M), gfx1151 (Strix Halo): Exact when carried.
        let apus = ["gfx1103", "gfx1150", "gfx1151"];
        let on = SelectOptions { hip_compat: true, ..Default::default() };
        let mut m = kiln_default();
        m.artifacts.extend(apus.map(|g| art("fill", Kind::Hsaco, g)));
        for g in apus {
            assert_eq!(chosen(&m, "fill", g, SelectOptions::default()), (g.to_string(), Match::Exact));
            assert_eq!(chosen(&m, "fill", g, on), (g.to_string(), Match::Exact));
        }
        // Not ISA-identical to each other nor to gfx1100: never another's, even with the opt-in.
        let mut one = kiln_default();
        one.artifacts.push(art("fill", Kind::Hsaco, "gfx1150"));
        for dev in ["gfx1103", "gfx1151", "gfx1152"] {
            assert!(one.select_with("fill", &arch(dev), on).is_err(), "{dev}");
        }
    }

    #[test]
    fn rdna4_and_mi350_take_their_own_code_object() {
        // gfx1200 (RX 9060), gfx1201 (RX 9070), gfx950 (MI350X/MI355X), built by clang_next: Exact when carried.
        let newer = ["gfx1200", "gfx1201", "gfx950"];
        let on = SelectOptions { hip_compat: true, ..Default::default() };
        let mut m = kiln_default();
        m.artifacts.extend(newer.map(|g| art("fill", Kind::Hsaco, g)));
        for g in newer {
            assert_eq!(chosen(&m, "fill", g, SelectOptions::default()), (g.to_string(), Match::Exact));
        }
        // MI350 never runs MI300's code object (another ISA), even with the opt-in.
        let mut cdna3 = kiln_default();
        cdna3.artifacts.push(art("fill", Kind::Hsaco, "gfx942"));
        assert!(cdna3.select_with("fill", &arch("gfx950"), on).is_err());
        // RDNA3's code object is never RDNA4's.
        let mut rdna3 = kiln_default();
        rdna3.artifacts.push(art("fill", Kind::Hsaco, "gfx1100"));
        for dev in ["gfx1200", "gfx1201"] {
            assert!(rdna3.select_with("fill", &arch(dev), on).is_err(), "{dev}");
        }
    }

    #[test]
    fn unknown_module_and_static_libraries() {
        let m = kiln_default();
        let e = m.select("convv", &arch("sm_90")).unwrap_err();
        assert_eq!(e, SelectError::UnknownModule { module: "convv".into(), carried: vec!["affine".into(), "fill".into()] });
        assert!(e.to_string().contains("affine, fill"));
        // The static library is not a loadable module.
        assert!(matches!(m.select("moe", &arch("sm_90")), Err(SelectError::UnknownModule { .. })));
        assert_eq!(m.modules(), ["affine", "fill"]);
    }

    #[test]
    fn accessors() {
        let m = kiln_default();
        assert_eq!(m.sass("affine", 90).unwrap().arch, "sm_90");
        assert!(m.sass("affine", 75).is_none());
        assert_eq!(m.ptx("affine", 89).unwrap().kind, Kind::Ptx);
        assert_eq!(m.hsaco("fill", "gfx90a").unwrap().backend, Backend::Hip);
        assert!(m.hsaco("fill", "gfx942").is_none());
    }
}
