//! Which pinned compiler builds each pinned target, decided from the
//! compilers' versions and kiln-target's table. A target that no pinned
//! compiler can reach fails when the pin file is read (`cargo xtask pins
//! check`), naming the target and the compiler, not deep into a build.

use crate::{HipArch, LibKernels, PackagePin, Pins, Sm, StaticLib, Targets, Toolchain};

/// Why a target is out of reach, and what to do about it.
pub(crate) type OutOfReach = (String, String);

/// How the SASS for one pinned sm is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SassBy {
    /// The pinned nvcc compiles the source for it.
    Nvcc,
    /// The pinned nvcc compiles the source to PTX at `from` (the highest
    /// pinned level at or below the sm) and the pinned newer ptxas assembles
    /// that into the sm's SASS: what `nvcc -gencode arch=compute_<from>,code=sm_<sm>`
    /// of a newer nvcc does.
    Ptxas { from: Sm },
}

/// `1:17.0.6-22+b2` → `17.0.6`; `12.4.131~12.4.1-2` → `12.4.131`: the
/// upstream version inside a Debian version (no epoch, revision or `~` suffix);
/// a PyPI version (`12.9.86`) is its own.
pub fn upstream_version(debian: &str) -> &str {
    let v = debian.split_once(':').map_or(debian, |(_, v)| v);
    let v = v.rsplit_once('-').map_or(v, |(v, _)| v);
    let v = v.split('~').next().unwrap_or(v);
    v.split('+').next().unwrap_or(v)
}

/// `(major, minor)` of a CUDA version as Debian (`12.4.131~12.4.1-2`) or
/// PyPI (`12.9.86`) writes it ([`upstream_version`]'s first two numbers).
pub fn cuda_version(version: &str) -> Option<(u32, u32)> {
    let mut parts = upstream_version(version).split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

fn nvcc_builds(t: &Toolchain, sm: Sm) -> bool {
    cuda_version(&t.nvcc.version).is_some_and(|v| sm.row().built_by(v))
}

fn ptxas_builds(t: &Toolchain, sm: Sm) -> bool {
    t.ptxas.as_ref().and_then(|p| cuda_version(&p.version)).is_some_and(|v| sm.row().built_by(v))
}

impl Pins {
    /// How the SASS for `sm` (one of `targets.cuda_sass`, a set's or the
    /// global ones) is made.
    pub fn sass_by(&self, targets: &Targets, sm: Sm) -> SassBy {
        self.sass_from(&targets.cuda_ptx, sm)
    }

    /// How a per-target static library's cubin for `sm` (one of its `sass`) is made.
    pub fn lib_sass_by(&self, lib: &StaticLib, sm: Sm) -> SassBy {
        self.sass_from(&lib.ptx, sm)
    }

    /// nvcc where it reaches `sm`, else the pinned ptxas from the highest of
    /// `levels` at or below it (both checked when the pins were read).
    fn sass_from(&self, levels: &[Sm], sm: Sm) -> SassBy {
        if nvcc_builds(&self.toolchain, sm) {
            return SassBy::Nvcc;
        }
        let from = levels.iter().copied().filter(|l| l.0 <= sm.0).max().expect("checked when the pins were read");
        SassBy::Ptxas { from }
    }
}

/// The AMD compiler that builds one arch: a pinned clang and the device
/// libraries of its LLVM, which sit in that clang's resource directory.
#[derive(Clone, Copy, Debug)]
pub struct HipCompiler<'a> {
    /// `clang` or `clang_next`: the pin's name in `[toolchain]` (and in [`Pins::compilers`]).
    pub role: &'static str,
    /// Its device libraries' pin name: `rocm_device_libs` or `rocm_device_libs_next`.
    pub device_libs_role: &'static str,
    pub clang: &'a PackagePin,
    pub rocm_device_libs: &'a PackagePin,
    /// The LLVM major of `clang` (`clang-17`: 17).
    pub major: u32,
}

impl HipCompiler<'_> {
    /// The device libraries' folder in the sysroot, relative to its `/`.
    pub fn bitcode_dir(&self) -> String {
        let m = self.major;
        format!("usr/lib/llvm-{m}/lib/clang/{m}/amdgcn/bitcode")
    }
}

fn major(clang: &PackagePin) -> Option<u32> {
    clang.package.strip_prefix("clang-")?.parse().ok()
}

/// The pinned AMD compilers, first then next, with their LLVM majors.
fn hip_compilers(t: &Toolchain) -> Vec<HipCompiler<'_>> {
    let first = major(&t.clang).map(|major| HipCompiler {
        role: crate::role::CLANG,
        device_libs_role: crate::role::ROCM_DEVICE_LIBS,
        clang: &t.clang,
        rocm_device_libs: &t.rocm_device_libs,
        major,
    });
    let next = t.amd_next.as_ref().and_then(|n| {
        major(&n.clang).map(|major| HipCompiler {
            role: crate::role::CLANG_NEXT,
            device_libs_role: crate::role::ROCM_DEVICE_LIBS_NEXT,
            clang: &n.clang,
            rocm_device_libs: &n.rocm_device_libs,
            major,
        })
    });
    first.into_iter().chain(next).collect()
}

/// The compiler that builds `arch`: the first pinned clang whose LLVM knows
/// it (kiln-target's `llvm` column) and whose device libraries carry its ISA
/// bitcode (`device_lib`), so that a target the first clang builds keeps the
/// bytes it always had.
fn hip_reach<'a>(t: &'a Toolchain, arch: &HipArch) -> Option<HipCompiler<'a>> {
    let row = arch.row();
    hip_compilers(t).into_iter().find(|c| knows(row, c.major) && row.device_lib.is_some_and(|d| d <= c.major))
}

/// Whether LLVM `major` knows the processor (kiln-target's `llvm` and `llvm_until`).
fn knows(row: &kiln_target::Gfx, major: u32) -> bool {
    row.llvm <= major && row.llvm_until.is_none_or(|last| major <= last)
}

impl Pins {
    /// Every pinned AMD compiler: `clang`, then `clang_next` when pinned.
    pub fn hip_compilers(&self) -> Vec<HipCompiler<'_>> {
        hip_compilers(&self.toolchain)
    }

    /// The pinned AMD compiler that builds `arch` (one of a set's
    /// `targets.hip`, all checked to be within reach when the pins were read).
    pub fn hip_compiler(&self, arch: &HipArch) -> HipCompiler<'_> {
        hip_reach(&self.toolchain, arch).expect("checked when the pins were read")
    }
}

/// Every target of `targets` (named `what` in messages: `targets`,
/// `sets.flash-attn.targets`) within a pinned compiler's reach.
pub(crate) fn check_targets(targets: &Targets, t: &Toolchain, what: &str) -> Result<(), OutOfReach> {
    let nvcc = format!("{} {}", t.nvcc.package, t.nvcc.version);
    let clangs = hip_compilers(t);
    if !clangs.is_empty() {
        for arch in &targets.hip {
            if hip_reach(t, arch).is_some() {
                continue;
            }
            let row = arch.row();
            // LLVM knows it, but no pinned device library has its bitcode (gfx1250 and rocm-device-libs-21).
            if let Some(c) = clangs.iter().find(|c| knows(row, c.major)) {
                let bitcode = format!("oclc_isa_version_{}.bc", arch.as_str().trim_start_matches("gfx"));
                let libs =
                    clangs.iter().filter(|c| row.llvm <= c.major).map(|c| format!("{} {}", c.rocm_device_libs.package, c.rocm_device_libs.version));
                return Err((
                    format!(
                        "{what}.hip has {arch}, which {} {} knows, but no pinned ROCm device library has its bitcode: {bitcode} is not in {}",
                        c.clang.package,
                        c.clang.version,
                        libs.collect::<Vec<_>>().join(" nor ")
                    ),
                    format!(
                        "pin device libraries that carry {bitcode} as [toolchain] {} (none in Debian's archive carries it: docs/toolchain.md), or drop the arch",
                        c.device_libs_role
                    ),
                ));
            }
            let pinned = clangs.iter().map(|c| format!("{} {}", c.clang.package, c.clang.version)).collect::<Vec<_>>();
            let (which, help) = match t.amd_next {
                None => (
                    format!("the pinned clang is {}", pinned[0]),
                    format!(
                        "pin a clang >= {} and its ROCm device libraries as [toolchain] clang_next and rocm_device_libs_next \
                         (docs/toolchain.md#a-second-amd-toolchain-llvm--20-candidates), or drop the arch",
                        row.llvm
                    ),
                ),
                Some(_) => (
                    format!("the pinned clangs are {}", pinned.join(" and ")),
                    format!("pin a clang_next >= {} (and its rocm_device_libs_next), then `cargo xtask pins update`; or drop the arch", row.llvm),
                ),
            };
            return Err((format!("{what}.hip has {arch}, which LLVM knows from version {} on, but {which}", row.llvm), help));
        }
    }
    for &level in &targets.cuda_ptx {
        if !nvcc_builds(t, level) {
            return Err((
                format!("{what}.cuda_ptx has {}, which {nvcc} cannot compile for", level.ptx()),
                "PTX comes from nvcc: drop the level or pin an nvcc that has it".into(),
            ));
        }
    }
    let Some(&floor) = targets.cuda_ptx.first() else { return Ok(()) };
    for &sm in &targets.cuda_sass {
        if sm.0 < floor.0 {
            return Err((
                format!(
                    "{what}.cuda_sass has {} below the PTX floor {}: a GPU of that sm would be handed PTX above its capability",
                    sm.sass(),
                    floor.ptx()
                ),
                format!("lower {what}.cuda_ptx's first level to the lowest sm"),
            ));
        }
        if nvcc_builds(t, sm) {
            continue;
        }
        let ptxas = t.ptxas.as_ref().map(|p| format!("{} {}", p.package, p.version));
        if !ptxas_builds(t, sm) {
            return Err((
                format!(
                    "{what}.cuda_sass has {}, which neither {nvcc} nor {} can build",
                    sm.sass(),
                    ptxas.as_deref().unwrap_or("a ptxas (none is pinned: [toolchain].ptxas)")
                ),
                format!("{} needs CUDA {}.{} or newer", sm.sass(), sm.row().since.0, sm.row().since.1),
            ));
        }
    }
    Ok(())
}

/// The static library of set `set`. Fat objects come from one nvcc call
/// each, so everything in them must be within the pinned nvcc's reach; a
/// per-target library's cubins may also come from the pinned ptxas, from a
/// PTX level of its own at or below the sm. The error names the target's
/// index: its `sass`, then its `ptx`.
pub(crate) fn check_lib(set: &str, lib: &StaticLib, t: &Toolchain) -> Result<(), (usize, String, String)> {
    let nvcc = format!("{} {}", t.nvcc.package, t.nvcc.version);
    let written = lib.sass.iter().map(|sm| (*sm, sm.sass(), true)).chain(lib.ptx.iter().map(|sm| (*sm, sm.ptx(), false)));
    for (i, (sm, name, sass)) in written.enumerate() {
        if nvcc_builds(t, sm) {
            continue;
        }
        if lib.kernels == LibKernels::Fat || !sass {
            return Err((
                i,
                format!("the static library's {} are built by nvcc alone ({nvcc}), which cannot compile for {name}", what_nvcc_builds(lib)),
                format!("drop it: a GPU beyond the pinned nvcc JIT-compiles the library's highest PTX level (sets.{set}.staticlib.ptx)"),
            ));
        }
        let from = lib.ptx.iter().filter(|l| l.0 <= sm.0).max();
        let ptxas = t.ptxas.as_ref().map(|p| format!("{} {}", p.package, p.version));
        if from.is_none() || !ptxas_builds(t, sm) {
            return Err((
                i,
                format!(
                    "the static library's {name} cubins need {nvcc} or a pinned ptxas ({}) assembling a PTX level at or below it (sets.{set}.staticlib.ptx: {})",
                    ptxas.as_deref().unwrap_or("none is pinned: [toolchain].ptxas"),
                    if lib.ptx.is_empty() { "none".to_string() } else { lib.ptx.iter().map(|l| l.ptx()).collect::<Vec<_>>().join(", ") }
                ),
                format!("{name} needs CUDA {}.{} or newer, and a PTX level the pinned nvcc compiles", sm.row().since.0, sm.row().since.1),
            ));
        }
    }
    Ok(())
}

fn what_nvcc_builds(lib: &StaticLib) -> &'static str {
    match lib.kernels {
        LibKernels::Fat => "objects",
        LibKernels::PerTarget => "PTX levels",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_as_debian_and_pypi_write_them() {
        assert_eq!(cuda_version("12.4.131~12.4.1-2"), Some((12, 4)));
        assert_eq!(cuda_version("12.9.86"), Some((12, 9)));
        assert_eq!(cuda_version("1:13.0.88-1"), Some((13, 0)));
        assert_eq!(cuda_version("twelve"), None);
        assert_eq!(upstream_version("1:17.0.6-22+b2"), "17.0.6");
        assert_eq!(upstream_version("12.4.131~12.4.1-2"), "12.4.131");
        assert_eq!(upstream_version("5.7.1-6+deb13u1"), "5.7.1");
        assert_eq!(upstream_version("6.0+git20231212.5a852ed-2"), "6.0");
    }
}
