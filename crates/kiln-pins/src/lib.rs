//! kiln's pin file (`pins.toml`): the one source of truth for what kiln
//! downloads (the kernel sets' sources, the toolchain's Debian packages) and
//! what it builds (each set's modules and static library, GPU targets, flags).
//!
//! [`Pins::load`] parses and checks the file; every problem comes back as a
//! [`PinError`] naming `file:line:column`. The flake and the container recipes
//! read the same file, so its shape is a published interface: docs/pins.md.

mod arch;
mod containers;
mod error;
mod fields;
mod raw;
mod reach;
mod set_check;
mod set_table;
mod sets;
mod show;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

pub use arch::{HipArch, Sm, Target};
pub use containers::{
    with_generated, BuilderImage, ContainerClosures, Containers, ImagePackages, ImageRef, Root, RunnerClosure, RunnerImage, RustComponent, RUNNERS,
};
pub use error::{line_col, PinError, PositionedError};
pub use raw::SCHEMA;
pub use reach::{cuda_version, upstream_version, HipCompiler, SassBy};

/// The names of the compiler pins in `[toolchain]`, which the manifest's
/// `toolchain.packages` and `toolchain.reported` are keyed by: written once.
pub mod role {
    pub const NVCC: &str = "nvcc";
    pub const CLANG: &str = "clang";
    pub const HIP: &str = "hip";
    pub const ROCM_DEVICE_LIBS: &str = "rocm_device_libs";
    pub const CLANG_NEXT: &str = "clang_next";
    pub const ROCM_DEVICE_LIBS_NEXT: &str = "rocm_device_libs_next";
    /// The pinned newer ptxas (a wheel, not a Debian package).
    pub const PTXAS: &str = "ptxas";
}
pub use set_check::check_sets;
pub use sets::{ArtifactCrate, CrateApi, IncludeRoot, InputLicense, KernelSet, LibKernels, Source, StaticLib, TreeInput};

/// The pin file kiln uses when none is named: `pins.toml` at the repository root.
pub const FILE_NAME: &str = "pins.toml";

#[derive(Clone, Debug)]
pub struct Pins {
    /// Where the pins were read from (for messages).
    pub file: PathBuf,
    /// The kernel sets, in file order: the first is the main set.
    pub sets: Vec<KernelSet>,
    /// The default targets and flags of every set.
    pub targets: Targets,
    pub flags: Flags,
    pub toolchain: Toolchain,
    /// The container images (`[containers]`); optional so that pin files
    /// written before it existed still load for everything else.
    pub containers: Option<Containers>,
    /// `[cuda_link_stubs]`: the CUDA libraries of majors beyond the toolchain's
    /// own, whose functions, sonames and symbol versions kiln reads at
    /// packaging to make link stand-ins of them (docs/consuming.md).
    pub cuda_link_stubs: Vec<LinkStubPin>,
}

/// One library of `[cuda_link_stubs.<major>]`: NVIDIA's library (or, for the
/// driver's `cuda`, its header) in a pinned wheel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkStubPin {
    /// The CUDA major, e.g. 13.
    pub major: u32,
    /// The library as linked (`cublas` for `-lcublas`).
    pub lib: String,
    pub wheel: WheelPin,
    /// The file in the wheel, e.g. `nvidia/cu13/lib/libcublas.so.13`.
    pub member: String,
}

impl Pins {
    /// The pin file's first set: its dist folder is `--out`, its lock
    /// `artifacts.lock`, and its manifest names no set.
    pub fn main_set(&self) -> &KernelSet {
        &self.sets[0]
    }

    pub fn set(&self, name: &str) -> Option<&KernelSet> {
        self.sets.iter().find(|s| s.name == name)
    }

    /// The sets a plain `cargo xtask dist` builds.
    pub fn default_sets(&self) -> impl Iterator<Item = &KernelSet> {
        self.sets.iter().filter(|s| s.default)
    }
}

#[derive(Clone, Debug)]
pub struct Targets {
    pub hip: Vec<HipArch>,
    pub code_object_version: u32,
    /// PTX levels, ascending; the first is the floor every GPU at or above it can JIT.
    pub cuda_ptx: Vec<Sm>,
    pub cuda_sass: Vec<Sm>,
}

impl Targets {
    /// Every pinned target, in build order: the AMD archs, the PTX levels, the sms.
    pub fn all(&self) -> Vec<Target> {
        let hip = self.hip.iter().cloned().map(Target::Hip);
        hip.chain(self.cuda_ptx.iter().copied().map(Target::Ptx)).chain(self.cuda_sass.iter().copied().map(Target::Sass)).collect()
    }

    /// The code object version `arch`'s objects are built as and validated
    /// against: the pinned `code_object_version`, raised to the lowest one
    /// the arch has (kiln-target's `Gfx::min_code_object_version`: 6 for a
    /// generic target, whose objects exist from v6 on).
    pub fn code_object_version_for(&self, arch: &HipArch) -> u32 {
        self.code_object_version.max(arch.row().min_code_object_version())
    }
}

#[derive(Clone, Debug)]
pub struct Flags {
    pub cuda: Vec<String>,
    pub cuda_staticlib: Vec<String>,
    pub hip: Vec<String>,
    /// Headers of kiln's `kernels/hip` force-included (`-include`), in order,
    /// ahead of every HIP source: the set's CUDA names mapped to HIP.
    pub hip_force_include: Vec<String>,
    /// Module name to the launch bound it is compiled with for AMD.
    pub hip_max_threads_per_block: BTreeMap<String, u32>,
}

#[derive(Clone, Debug)]
pub struct Toolchain {
    pub distribution: String,
    pub suite: String,
    pub mirrors: Vec<String>,
    pub components: Vec<String>,
    pub nvcc: PackagePin,
    pub clang: PackagePin,
    pub hip: PackagePin,
    pub rocm_device_libs: PackagePin,
    /// A newer ptxas (a PyPI wheel) for sms the pinned nvcc cannot target.
    pub ptxas: Option<WheelPin>,
    /// A second, newer AMD compiler for the archs `clang` is too old for;
    /// its packages are part of the same closure, so it runs in the same sandbox.
    pub amd_next: Option<AmdNext>,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    /// The resolved package closure; `None` until `cargo xtask pins update` ran.
    pub closure: Option<Closure>,
    /// Cross host compilers (`[toolchain.cross.<cpu>]`), by CPU name order.
    pub cross: Vec<Cross>,
}

impl Toolchain {
    /// The cross host compiler pinned for `cpu`.
    pub fn cross(&self, cpu: &str) -> Option<&Cross> {
        self.cross.iter().find(|c| c.cpu == cpu)
    }
}

/// A cross host compiler for nvcc (`[toolchain.cross.<cpu>]`): Debian's
/// cross g++ for one of kiln-target's host CPUs, resolved on top of the
/// closure (which it never changes) and unpacked into a root of its own that
/// only the jobs building host code for that CPU mount (docs/toolchain.md).
#[derive(Clone, Debug)]
pub struct Cross {
    /// The CPU, as kiln-target's host table names it (`aarch64`).
    pub cpu: String,
    /// The compiler nvcc is given (`-ccbin`), in the cross root's `usr/bin`.
    pub cxx: String,
    /// The packages it comes from (roots resolved on top of the closure).
    pub include: Vec<String>,
    /// Generated: the packages beyond the toolchain's closure; `None` until resolved.
    pub closure: Option<Closure>,
}

/// The newer AMD compiler (`clang_next`, `rocm_device_libs_next`, `next_suites`,
/// `next_include` in `[toolchain]`): resolved on top of the first suite's
/// closure from the suites that carry it (docs/toolchain.md).
#[derive(Clone, Debug)]
pub struct AmdNext {
    pub clang: PackagePin,
    pub rocm_device_libs: PackagePin,
    /// Suites beyond `[toolchain].suite` that the two packages (and what only
    /// they need) come from, e.g. `trixie-backports`, `forky`.
    pub suites: Vec<String>,
    /// Further roots resolved with them (the linker, `lld-21`).
    pub include: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackagePin {
    pub package: String,
    pub version: String,
}

/// A Python wheel from PyPI, by exact URL and sha256.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WheelPin {
    /// The PyPI project, e.g. `nvidia-cuda-nvcc-cu12`.
    pub package: String,
    pub version: String,
    pub url: String,
    pub sha256: String,
}

impl WheelPin {
    /// The wheel's file name (the last part of its URL).
    pub fn file_name(&self) -> &str {
        self.url.rsplit('/').next().unwrap_or(&self.url)
    }
}

/// Every file the toolchain is made of, by exact version and sha256.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Closure {
    pub debs: Vec<Deb>,
}

impl Closure {
    /// The HIP runtime among the packages (`libamdhip64-<soname major>`),
    /// what kiln-loader dlopens; an image without one is not an AMD runner.
    pub fn hip_runtime(&self) -> Option<&Deb> {
        self.debs.iter().find(|d| d.name.strip_prefix("libamdhip64-").is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit())))
    }

    /// The ROCm release of [`Closure::hip_runtime`] (`7.2.4-1~exp2` → (7, 2)): HIP's version is ROCm's.
    pub fn hip_rocm(&self) -> Option<(u32, u32)> {
        let v = upstream_version(&self.hip_runtime()?.version);
        let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
        Some((parts.next()??, parts.next()??))
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Deb {
    pub name: String,
    pub version: String,
    pub arch: String,
    pub sha256: String,
    pub size: u64,
    /// Path below a mirror's root, e.g. `pool/main/c/coreutils/coreutils_9.7-3_amd64.deb`.
    pub path: String,
}

impl Pins {
    /// Reads and checks a pin file.
    pub fn load(path: &Path) -> Result<Pins, PinError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            PinError::whole(path, format!("cannot read the pin file: {e}"))
                .help(format!("kiln expects its pins in `{FILE_NAME}` at the repository root"))
        })?;
        Pins::parse(path, &text)
    }

    /// Parses pin-file text; `path` is only used in messages.
    pub fn parse(path: &Path, text: &str) -> Result<Pins, PinError> {
        raw::parse(&path.to_path_buf(), text)
    }

    /// The closure, or an error that says how to make it.
    pub fn closure(&self) -> Result<&Closure, PinError> {
        self.toolchain.closure.as_ref().ok_or_else(|| {
            PinError::whole(&self.file, "the toolchain's package closure ([toolchain.closure]) is missing")
                .help("run `cargo xtask pins update` to resolve it from [toolchain]")
        })
    }

    /// The compiler pins, named, in a stable order: [`Pins::first_compilers`],
    /// then [`Pins::next_compilers`].
    pub fn compilers(&self) -> Vec<(&'static str, &PackagePin)> {
        let mut out = self.first_compilers().to_vec();
        out.extend(self.next_compilers());
        out
    }

    /// The four compilers of `[toolchain].suite`.
    pub fn first_compilers(&self) -> [(&'static str, &PackagePin); 4] {
        let t = &self.toolchain;
        [(role::NVCC, &t.nvcc), (role::CLANG, &t.clang), (role::HIP, &t.hip), (role::ROCM_DEVICE_LIBS, &t.rocm_device_libs)]
    }

    /// The newer AMD compiler's two pins (`clang_next`, `rocm_device_libs_next`), when one is pinned.
    pub fn next_compilers(&self) -> Vec<(&'static str, &PackagePin)> {
        self.toolchain.amd_next.iter().flat_map(|n| [(role::CLANG_NEXT, &n.clang), (role::ROCM_DEVICE_LIBS_NEXT, &n.rocm_device_libs)]).collect()
    }
}

impl Closure {
    pub fn find(&self, package: &str) -> Option<&Deb> {
        self.debs.iter().find(|d| d.name == package)
    }
}

impl Deb {
    /// `name_version_arch.deb` as Debian names it (epoch colons are dropped from file names).
    pub fn file_name(&self) -> String {
        self.path.rsplit('/').next().unwrap_or(&self.path).to_string()
    }
}

/// True when `name` matches a shell-style pattern with `*` wildcards (the `exclude` list).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, rest)) => {
            let Some(tail) = name.strip_prefix(head) else { return false };
            (0..=tail.len()).any(|i| tail.is_char_boundary(i) && glob_match(rest, &tail[i..]))
        }
    }
}

/// The comment line that starts the generated part of the pin file.
pub const GENERATED_MARKER: &str = "# ---- generated by `cargo xtask pins update` from [toolchain] above: do not edit by hand ----";

/// `text` (a pin file) without its generated part (the toolchain's and the
/// containers' closures): what `cargo xtask pins update` resolves from, so that
/// a compiler pin changed since (which the old closure contradicts) loads.
pub fn without_generated(text: &str) -> String {
    match text.find(GENERATED_MARKER) {
        Some(cut) => format!("{}\n", text[..cut].trim_end()),
        None => text.to_string(),
    }
}

/// `text` (a pin file) without its generated container closures: what
/// `cargo xtask container --update` reads, so that a [containers] table edited
/// since (a package added, which its old closure lacks) can be resolved again.
pub fn without_container_closures(text: &str) -> String {
    let cut = text.find(GENERATED_MARKER).and_then(|at| text[at..].find("\n[containers.").map(|c| at + c + 1));
    match cut {
        Some(cut) => format!("{}\n", text[..cut].trim_end()),
        None => text.to_string(),
    }
}

/// `text` (a pin file) with its generated toolchain closure replaced by
/// `closure`. The generated cross closures and container closures below it
/// are kept as they are (`cargo xtask container --update` or [`with_generated`]
/// redo the containers', [`with_cross`] the cross compilers').
pub fn with_closure(text: &str, closure: &Closure) -> String {
    let tail = text.find(GENERATED_MARKER).map(|at| &text[at..]).and_then(|gen| gen.find("\n[containers.").map(|c| &gen[c + 1..]));
    let mut out = with_generated(text, closure, None);
    if let Some(tail) = tail {
        out.push('\n');
        out.push_str(tail);
    }
    out
}

/// The generated cross closures of `text` (`[toolchain.cross.<cpu>.closure]`
/// tables, from the first to the container closures), as they stand.
pub(crate) fn cross_part(text: &str) -> &str {
    let Some(gen_at) = text.find(GENERATED_MARKER) else { return "" };
    let gen = &text[gen_at..];
    let Some(start) = gen.find("\n[toolchain.cross.").map(|c| c + 1) else { return "" };
    let end = gen[start..].find("\n[containers.").map_or(gen.len(), |c| start + c + 1);
    &gen[start..end]
}

/// `text` (a pin file) with its generated cross closures replaced by `cross`
/// (CPU, the packages it adds on top of the toolchain's closure); the
/// toolchain's and the containers' closures are kept as they are.
pub fn with_cross(text: &str, cross: &[(String, Closure)]) -> String {
    let old = cross_part(text);
    let mut rendered = String::new();
    for (cpu, closure) in cross {
        rendered.push_str(&format!("[toolchain.cross.{cpu}.closure]\n"));
        rendered.push_str(&format!("# The packages [toolchain.cross.{cpu}] adds on top of [toolchain.closure], by exact version and sha256.\n"));
        render_debs(&mut rendered, &closure.debs);
        rendered.push('\n');
    }
    let gen_at = text.find(GENERATED_MARKER).unwrap_or(text.len());
    if !old.is_empty() {
        let at = gen_at + text[gen_at..].find(old).expect("cross_part is a slice of the generated part");
        return format!("{}{rendered}{}", &text[..at], &text[at + old.len()..]);
    }
    // None yet: after the toolchain's closure, before the containers'.
    match text[gen_at..].find("\n[containers.") {
        Some(c) => format!("{}{rendered}{}", &text[..gen_at + c + 1], &text[gen_at + c + 1..]),
        None if rendered.is_empty() => text.to_string(),
        None => format!("{}\n\n{}\n", text.trim_end(), rendered.trim_end()),
    }
}

/// Rewrites the pin file at `path` as `rewrite` turns its text, atomically
/// and only if the result still loads: a pin file kiln cannot read is never
/// written. Returns the pins as written. Both generators of the pin file's
/// generated part (`pins update`, `container --update`) go through here.
pub fn rewrite(path: &Path, rewrite: impl FnOnce(&str) -> String) -> Result<Pins, PinError> {
    let io = |what: &Path, e: std::io::Error| PinError::whole(what, format!("cannot rewrite the pin file: {e}"));
    let text = std::fs::read_to_string(path).map_err(|e| io(path, e))?;
    let new = rewrite(&text);
    let pins = Pins::parse(path, &new)?;
    let tmp = path.with_extension("toml.tmp");
    std::fs::write(&tmp, &new).map_err(|e| io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io(path, e))?;
    Ok(pins)
}

pub(crate) fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

pub(crate) fn render_debs(out: &mut String, debs: &[Deb]) {
    render_deb_list(out, "debs", debs)
}

/// `key = [ ...one inline table per package... ]`.
pub(crate) fn render_deb_list(out: &mut String, key: &str, debs: &[Deb]) {
    out.push_str(&format!("{key} = [\n"));
    for d in debs {
        out.push_str(&format!(
            "  {{ name = {}, version = {}, arch = {}, size = {}, sha256 = {}, path = {} }},\n",
            quote(&d.name),
            quote(&d.version),
            quote(&d.arch),
            d.size,
            quote(&d.sha256),
            quote(&d.path)
        ));
    }
    out.push_str("]\n");
}
