//! [`Builder`]: kiln's build as a library. Describe kernel sets (the pin
//! file's, or folders of another project's own) and targets; `build()`
//! provisions the pinned toolchain, compiles every set in one job graph
//! through the content cache, validates every artifact, writes a manifest
//! per set, checks or updates its lock, packages its crates, and only then
//! replaces each set's dist folder in one step. `cargo xtask dist` is this
//! builder with the pin file's sets.
//!
//! ```no_run
//! use kiln_dist::{Builder, KernelSet, StaticLib};
//! # fn main() -> anyhow::Result<()> {
//! let pins = kiln_pins::Pins::load("pins.toml".as_ref())?; // kiln's toolchain pins
//! let set = KernelSet::folder("my-kernels", "kernels", &pins)
//!     .modules(["scale", "saxpy"])
//!     .staticlib(StaticLib::new("myops", ["ops.cu"], &["sm_80", "sm_90"]).map_err(anyhow::Error::msg)?)
//!     .targets(&["gfx90a", "compute_80", "sm_80", "sm_90"]).map_err(anyhow::Error::msg)?;
//! let dist = Builder::new(&pins).set(set).out("target/kernels").build(&|line| eprintln!("{line}"))?;
//! let built = &dist.sets[0];
//! println!("{} artifacts in {}", built.manifest.manifest.artifacts.len(), built.out.display());
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};

use anyhow::Result;
use kiln_pins::{KernelSet, Pins};
use kiln_toolchain::remote;

use crate::{
    merge,
    part::Spec,
    select::Selection,
    settings::{LockMode, Settings},
    shard,
    stages::{self, Dist},
};

/// kiln's own repository, where this crate was built from: its HIP shims
/// (`kernels/hip`), CUDA headers (`kernels/cuda`) and crate template, which
/// a project that depends on kiln-dist by path or git finds here.
pub fn kiln_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// kiln's one way in: [`Builder::build`] (every chosen set, one machine),
/// [`Builder::shard`] (part of one set's compiles) and [`Builder::merge`]
/// (the parts into that set's dist folder), all provisioning and planning
/// through the same stages (`stages.rs`).
pub struct Builder<'p>(Settings<'p>);

impl<'p> Builder<'p> {
    /// A builder with the pins' toolchain and default targets and flags, and
    /// no kernel set yet ([`Builder::set`]). Relative folders (sources, the
    /// dist folder, locks) are taken from the pin file's folder.
    pub fn new(pins: &'p Pins) -> Builder<'p> {
        let base = pins.file.parent().filter(|p| !p.as_os_str().is_empty()).map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        Builder(Settings {
            pins,
            sets: Vec::new(),
            only: Vec::new(),
            modules: Vec::new(),
            archs: Vec::new(),
            selection: None,
            kiln: kiln_root(),
            base,
            out: None,
            part_out: None,
            lock_dir: None,
            lock: LockMode::Off,
            package: false,
            workers: kiln_toolchain::default_workers(),
            verbose: false,
            no_compile: false,
            remote: None,
        })
    }

    /// A builder with every set of the pin file (what `cargo xtask dist` uses),
    /// packaging the sets that have crates.
    pub fn from_pins(pins: &'p Pins) -> Builder<'p> {
        let mut b = Builder::new(pins);
        b.0.sets = pins.sets.clone();
        b.0.package = true;
        b
    }

    /// Adds a kernel set. The first set a builder knows is its main set: its
    /// dist folder is [`Builder::out`] itself, its lock `artifacts.lock`.
    pub fn set(mut self, set: KernelSet) -> Builder<'p> {
        self.0.sets.push(set);
        self
    }

    /// Builds only these sets (`--set`); by default every default set.
    pub fn only<S: AsRef<str>>(mut self, names: &[S]) -> Builder<'p> {
        self.0.only = names.iter().map(|s| s.as_ref().to_string()).collect();
        self
    }

    /// Builds only these modules and targets (`--module`, `--arch`); empty: all.
    pub fn select(mut self, modules: Vec<String>, archs: Vec<String>) -> Builder<'p> {
        self.0.modules = modules;
        self.0.archs = archs;
        self
    }

    /// Builds exactly this selection (already checked against the sets).
    pub fn selection_of(mut self, selection: Selection) -> Builder<'p> {
        self.0.selection = Some(selection);
        self
    }

    /// Fails instead of compiling: every compile must come from the local or remote cache.
    pub fn no_compile(mut self, yes: bool) -> Builder<'p> {
        self.0.no_compile = yes;
        self
    }

    /// A remote cache shared with other machines (docs/distributed.md).
    pub fn remote(mut self, config: Option<remote::Config>) -> Builder<'p> {
        self.0.remote = config;
        self
    }

    /// The main set's dist folder; another set's is `<out>-<set>` beside it.
    pub fn out(mut self, dir: impl Into<PathBuf>) -> Builder<'p> {
        self.0.out = Some(dir.into());
        self
    }

    /// The folder [`Builder::shard`] writes its part into (default:
    /// `<set's dist folder>-part-K-of-N`).
    pub fn part_out(mut self, dir: impl Into<PathBuf>) -> Builder<'p> {
        self.0.part_out = Some(dir.into());
        self
    }

    /// Where relative source folders, `out` and the locks are (default: the pin file's folder).
    pub fn base(mut self, dir: impl Into<PathBuf>) -> Builder<'p> {
        self.0.base = dir.into();
        self
    }

    /// kiln's repository (default: [`kiln_root`]).
    pub fn kiln_dir(mut self, dir: impl Into<PathBuf>) -> Builder<'p> {
        self.0.kiln = dir.into();
        self
    }

    /// Checks or updates each set's lock (`artifacts.lock`, `artifacts.<set>.lock`) in `dir` (default: `base`).
    pub fn lock(mut self, mode: LockMode) -> Builder<'p> {
        self.0.lock = mode;
        self
    }

    pub fn lock_dir(mut self, dir: impl Into<PathBuf>) -> Builder<'p> {
        self.0.lock_dir = Some(dir.into());
        self
    }

    /// Packages the crates of the sets that have a `crate` (full builds only).
    pub fn package(mut self, yes: bool) -> Builder<'p> {
        self.0.package = yes;
        self
    }

    /// Jobs to run at once (default: the number of cores).
    pub fn workers(mut self, n: usize) -> Builder<'p> {
        self.0.workers = n.max(1);
        self
    }

    /// Also report cache hits.
    pub fn verbose(mut self, yes: bool) -> Builder<'p> {
        self.0.verbose = yes;
        self
    }

    /// Builds, validates and publishes every chosen set; on any error no
    /// set's dist folder (or lock) is changed. Its stages: `stages.rs`.
    pub fn build(self, say: &(dyn Fn(String) + Sync)) -> Result<Dist> {
        stages::build(&self.0, say)
    }

    /// Builds shard `spec` of one set (the one [`Builder::only`] names, else
    /// the main set) into its part folder ([`Builder::part_out`], else
    /// `<set's dist folder>-part-K-of-N`), for `dist merge` (docs/distributed.md).
    pub fn shard(self, spec: Spec, say: &(dyn Fn(String) + Sync)) -> Result<shard::PartOutcome> {
        shard::run(&self.0, spec, say)
    }

    /// What `--shard K/n` plans for this builder's one set from an empty
    /// cache (`job-costs.toml`'s seconds, this builder's workers per machine):
    /// nothing is compiled.
    pub fn shard_plan(&self, n: u32, say: &(dyn Fn(String) + Sync)) -> Result<shard::PlannedWall> {
        shard::planned(&self.0, n, say)
    }

    /// Merges the part folders of the shards of one set into that set's dist
    /// folder, exactly as a single machine writes it: the parts name their set
    /// and selection, which are checked and put into the cache; then the
    /// ordinary build of that set and selection runs with compiling turned
    /// off. [`LockMode::Check`] also requires the set's lock and the whole
    /// result to match it.
    pub fn merge(self, parts: &[PathBuf], say: &(dyn Fn(String) + Sync)) -> Result<Dist> {
        let merging = merge::prepare(&self.0, parts, say)?;
        let dist = self.only(std::slice::from_ref(&merging.set)).selection_of(merging.selection.clone()).no_compile(true).build(say)?;
        merging.read_back(&dist, say)?;
        Ok(dist)
    }
}
