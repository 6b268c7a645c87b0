//! Kernel sets (`[sets.<name>]`): each is one body of kernel sources and what
//! kiln builds from it. candle-kernels is one set; candle-flash-attn another;
//! a folder of a project's own kernels a third. A set's targets and flags
//! default to the pin file's `[targets]` and `[flags]`.
//!
//! The first set of the pin file is the *main* set: its dist folder is
//! `--out` itself, its lock `artifacts.lock`, and its manifest names no set
//! (docs/kernel-sets.md says why).

//!
//! The types and what they say; the pin file's `[sets.<name>]` tables are
//! read into them by `set_table.rs`, and `set_check.rs` holds their rules.

use crate::{
    arch::{Sm, Target},
    fields::{relative_path, valid_name},
    Flags, Targets, WheelPin,
};

/// One kernel set.
#[derive(Clone, Debug)]
pub struct KernelSet {
    /// `candle`, `flash-attn`: names the set in `--set`, messages, dist folders and the manifest.
    pub name: String,
    /// Built by a plain `cargo xtask dist`; `false`: only when named with `--set`.
    pub default: bool,
    pub source: Source,
    /// PTX/SASS/HSACO modules: `src/<module>.cu` of a crate, `<module>.cu` of a folder.
    pub modules: Vec<String>,
    pub staticlib: Option<StaticLib>,
    /// Extra `-I` roots, in search order.
    pub include: Vec<IncludeRoot>,
    /// Pinned trees the set reads besides its source (CUTLASS's headers), by name.
    pub inputs: Vec<TreeInput>,
    pub targets: Targets,
    pub flags: Flags,
    /// The kernel-artifact crates packaged from the set; none: not packaged.
    pub artifact_crate: Option<ArtifactCrate>,
}

/// Where a set's sources come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A crate from crates.io, checked against the sha256 of its `.crate` before any use.
    Crate { name: String, version: String, sha256: String },
    /// A folder of the repository (relative to the pin file's folder) or, for
    /// a set described in code, any folder.
    Folder { path: String },
}

impl Source {
    /// `candle-kernels 0.11.1`, `kernels/example`: for messages.
    pub fn describe(&self) -> String {
        match self {
            Source::Crate { name, version, .. } => format!("{name} {version}"),
            Source::Folder { path } => path.clone(),
        }
    }

    /// Where a module's source is: `src/<m>.cu` in a crate (candle's layout), `<m>.cu` in a folder.
    pub fn module_file(&self, module: &str) -> String {
        match self {
            Source::Crate { .. } => format!("src/{module}.cu"),
            Source::Folder { .. } => format!("{module}.cu"),
        }
    }
}

/// How a static library carries its kernels ([`StaticLib::kernels`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LibKernels {
    /// In its objects: one fat object per source with SASS for each of
    /// `sass` and PTX for each of `ptx` (upstream's build; every consumer
    /// links every GPU's code, with NVIDIA's static runtime).
    Fat,
    /// Beside its objects: per source one cubin per sm of `sass` (the sms
    /// the pinned nvcc cannot target assembled by the pinned ptxas from the
    /// highest `ptx` level at or below them), and one host object whose
    /// calls into NVIDIA's runtime are renamed to the crate's own runtime
    /// (docs/static-library.md). `ptx` is then only what Blackwell's SASS is
    /// assembled from.
    PerTarget,
}

impl LibKernels {
    /// Its value in pins.toml (`kernels = "..."`).
    pub fn as_str(self) -> &'static str {
        match self {
            LibKernels::Fat => "fat",
            LibKernels::PerTarget => "per-target",
        }
    }
}

/// A static library built from some of a set's sources, archived in order:
/// fat objects, or host objects beside per-sm cubins ([`LibKernels`]).
#[derive(Clone, Debug)]
pub struct StaticLib {
    pub name: String,
    /// Paths relative to the source root, in archive order.
    pub sources: Vec<String>,
    /// The sms every object's fatbin carries SASS for (one nvcc call per object).
    pub sass: Vec<Sm>,
    /// PTX levels every object's fatbin carries, for GPUs without that SASS.
    pub ptx: Vec<Sm>,
    /// The Rust file (relative to the source root) whose `extern "C"` block
    /// the library must define: validation refuses a library that lacks one.
    pub ffi: Option<String>,
    /// Headers of kiln's `kernels/cuda` force-included (`nvcc -include`) into every object.
    pub force_include: Vec<String>,
    /// Where its kernels are: `kernels = "fat"` (the default) or `"per-target"`.
    pub kernels: LibKernels,
    /// The CPUs its host code is built for (kiln-target's host table), the
    /// toolchain's own first; another needs `[toolchain.cross.<cpu>]` and
    /// per-target kernels. Default: the toolchain's own alone.
    pub hosts: Vec<String>,
}

impl StaticLib {
    /// The host CPUs beyond the toolchain's own that its host code is built for.
    pub fn cross_hosts(&self) -> impl Iterator<Item = &str> {
        self.hosts.iter().map(String::as_str).filter(|c| *c != kiln_target::host_object::BUILD_HOST.cpu)
    }

    /// A library of `sources` with SASS for `sass` (`sm_80`, ...), nothing else;
    /// its name is checked with the set's ([`crate::check_sets`]).
    pub fn new<S: Into<String>>(name: &str, sources: impl IntoIterator<Item = S>, sass: &[&str]) -> Result<StaticLib, String> {
        let sass = sass.iter().map(|s| Sm::parse_prefixed(s, "sm_")).collect::<Result<Vec<_>, _>>()?;
        let lib = StaticLib {
            name: name.to_string(),
            sources: sources.into_iter().map(Into::into).collect(),
            sass,
            ptx: Vec::new(),
            ffi: None,
            force_include: Vec::new(),
            kernels: LibKernels::Fat,
            hosts: vec![kiln_target::host_object::BUILD_HOST.cpu.to_string()],
        };
        Ok(lib)
    }
}

/// An extra `-I` root of a set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IncludeRoot {
    /// A folder of the set's source (`kernels`).
    Source(String),
    /// One of the set's [`TreeInput`]s (`input:cutlass`).
    Input(String),
}

impl IncludeRoot {
    pub fn parse(s: &str) -> Result<IncludeRoot, String> {
        match s.strip_prefix("input:") {
            Some(name) if valid_name(name) => Ok(IncludeRoot::Input(name.to_string())),
            Some(_) => Err(format!("`{s}` does not name an input (`input:<name>` of [sets.<set>.inputs])")),
            None if relative_path(s) => Ok(IncludeRoot::Source(s.trim_end_matches('/').to_string())),
            None => Err(format!("`{s}` is neither a folder inside the set's source nor `input:<name>`")),
        }
    }
}

/// A folder of headers out of a pinned wheel: every file checked against the
/// wheel's RECORD when unpacked, and against its recorded sha256 before every use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeInput {
    pub name: String,
    pub wheel: WheelPin,
    /// The folder inside the wheel, e.g. `cutlass_library/source/include`.
    pub tree: String,
    /// The input's licence, which the crates holding code compiled from it carry.
    pub license: Option<InputLicense>,
}

/// A licence text inside an input's wheel: the static library's part crates
/// hold code compiled from the input (CUTLASS's templates), so they carry the
/// text as `LICENSE-<SPDX>-<INPUT>` and name it in their `license` expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputLicense {
    /// The file in the wheel, checked against its RECORD
    /// (`nvidia_cutlass-3.5.0.0.dist-info/LICENSE.txt`).
    pub file: String,
    /// Its SPDX identifier (`BSD-3-Clause`).
    pub spdx: String,
}

/// The crates a set is packaged into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArtifactCrate {
    /// The main crate's name; its part crates are named `<name>-<part>`.
    pub name: String,
    /// Bumped to publish new artifacts for the same source version.
    pub revision: u32,
    pub api: CrateApi,
    /// The set whose `-cudart` crate the static library's parts link, when
    /// not this set's own (one CUDA runtime in a binary that uses both).
    pub cudart: Option<String>,
}

/// What the drop-in crate's Rust is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrateApi {
    /// kiln's module API (the template's `main` crate) and a shim under the source crate's name.
    Kiln,
    /// The source crate's own `src/` (verbatim), linking the prebuilt static library.
    Upstream,
}

impl KernelSet {
    /// A set of the kernels in folder `dir` (no modules and no static library
    /// yet), with the pins' default targets and flags.
    pub fn folder(name: &str, dir: impl Into<String>, pins: &crate::Pins) -> KernelSet {
        KernelSet {
            name: name.to_string(),
            default: true,
            source: Source::Folder { path: dir.into() },
            modules: Vec::new(),
            staticlib: None,
            include: Vec::new(),
            inputs: Vec::new(),
            targets: pins.targets.clone(),
            flags: pins.flags.clone(),
            artifact_crate: None,
        }
    }

    /// The set with these modules (`<module>.cu` in the folder).
    pub fn modules<S: Into<String>>(mut self, modules: impl IntoIterator<Item = S>) -> KernelSet {
        self.modules = modules.into_iter().map(Into::into).collect();
        self
    }

    /// The set with this static library.
    pub fn staticlib(mut self, lib: StaticLib) -> KernelSet {
        self.staticlib = Some(lib);
        self
    }

    /// The set built for exactly these targets (`gfx90a`, `compute_80`, `sm_90`);
    /// PTX levels are kept in ascending order, the first being the floor.
    pub fn targets(mut self, names: &[&str]) -> Result<KernelSet, String> {
        let mut t = Targets { hip: Vec::new(), code_object_version: self.targets.code_object_version, cuda_ptx: Vec::new(), cuda_sass: Vec::new() };
        for n in names {
            match Target::parse(n)? {
                Target::Hip(a) => t.hip.push(a),
                Target::Ptx(l) => t.cuda_ptx.push(l),
                Target::Sass(s) => t.cuda_sass.push(s),
            }
        }
        t.cuda_ptx.sort();
        self.targets = t;
        Ok(self)
    }

    /// Every module name and the static library's: what `--module` may name.
    pub fn module_names(&self) -> Vec<String> {
        self.modules.iter().cloned().chain(self.staticlib.as_ref().map(|l| l.name.clone())).collect()
    }

    /// `0.11.1+kiln.1`: the source crate's version, plus the artifact revision
    /// as build metadata, so that `^0.11.1` requirements still match it.
    pub fn crate_version(&self) -> Option<String> {
        let (Source::Crate { version, .. }, Some(c)) = (&self.source, &self.artifact_crate) else { return None };
        Some(format!("{version}+kiln.{}", c.revision))
    }

    /// The named input.
    pub fn input(&self, name: &str) -> Option<&TreeInput> {
        self.inputs.iter().find(|i| i.name == name)
    }
}
