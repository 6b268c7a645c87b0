//! kiln's build as a library: from kernel sets to dist folders.
//!
//! [`Builder`] ([`builder`]) is the entry point, for `cargo xtask dist` and
//! for another project's xtask alike: it provisions the pinned toolchain and
//! checks it ([`compilers`]), fetches each set's sources and inputs
//! ([`sources`]), selects the jobs ([`select`]) and makes them one job graph
//! with the static libraries, the HIP bundles and the crates' payloads
//! ([`graph`]), runs it through kiln-build's cache, reads every output back
//! ([`collect`]), writes each set's manifest ([`set_manifest`]), packages the
//! crates ([`package`]), and only when all of that succeeded replaces each
//! set's dist folder in one step ([`output`]). [`lock`] compares the result
//! with the committed hashes. Beyond one machine: [`shard`] builds a part of
//! one set's compiles (balanced by [`costs`]) into a [`part`], and [`merge`]
//! assembles parts into the same dist folder a single machine writes ([`run`],
//! [`Options`]: that set through the [`Builder`]).

pub mod builder;
pub mod cache_admin;
pub mod collect;
pub mod compilers;
pub mod costs;
pub mod graph;
pub mod lock;
pub mod merge;
pub mod output;
pub mod package;
pub mod part;
pub mod select;
pub mod set_manifest;
pub mod set_output;
pub mod shard;
pub mod sources;
pub mod verify;

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use kiln_build::{Job, Plan};
use kiln_manifest::Toolchain;
use kiln_pins::Pins;
use kiln_toolchain::{remote, sysroot, Cache, Runner};

pub use builder::{kiln_root, Builder, Dist, LockMode, Outcome};
pub use kiln_pins::{KernelSet, StaticLib};
pub use select::Selection;
pub use set_manifest::SetManifest;
pub use set_output::SetOutput;

/// The main set's dist folder, relative to the repository root (`dist --out`'s default).
pub const DIST_DIR: &str = "target/dist";
/// Where kiln's HIP shims live, relative to kiln's repository root.
pub const SHIMS_DIR: &str = "kernels/hip";
/// Where kiln's CUDA headers live (force-included into static libraries' objects).
pub const CUDA_HEADERS_DIR: &str = "kernels/cuda";

/// A run of one set as shards and their merge see it.
#[derive(Clone)]
pub struct Options {
    /// The set built (`--set`): the pin file's main set when `None`.
    pub set: Option<String>,
    /// The repository root (shims, default lock).
    pub repo: PathBuf,
    /// The dist folder to (re)place, normally `target/dist`.
    pub out: PathBuf,
    pub selection: Selection,
    pub workers: usize,
    pub verbose: bool,
    /// Fail, publishing nothing, unless every artifact matches this lock.
    pub locked: Option<lock::Lock>,
    /// Also generate and package the kernel-artifact crates (full builds only).
    pub package: bool,
    /// Fail instead of compiling: every compile job must come from the local or remote cache.
    pub no_compile: bool,
    /// A remote cache shared with other machines (read through, written back unless read-only).
    pub remote: Option<remote::Config>,
}

impl Options {
    /// The set this run builds.
    pub fn set<'p>(&self, pins: &'p Pins) -> Result<&'p KernelSet> {
        match &self.set {
            None => Ok(pins.main_set()),
            Some(name) => pins.set(name).with_context(|| {
                format!("unknown set `{name}` (--set); the sets are: {}", pins.sets.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", "))
            }),
        }
    }

    /// Where that set goes when `out` is the main set's dist folder: its
    /// folder (`out`, or `<out>-<set>`) and its lock in `repo`.
    pub fn output(&self, pins: &Pins) -> Result<SetOutput> {
        let set = self.set(pins)?;
        Ok(SetOutput::new(&set.name, set.name == pins.main_set().name, &self.out, &self.repo))
    }
}

/// What every shard run needs before its jobs run: the cache, the checked
/// toolchain, the set's verified sources and the plan over them.
pub struct Prepared {
    pub cache: Cache,
    pub runner: Runner,
    pub toolchain: Toolchain,
    pub source: sources::SetSource,
    pub plan: Plan,
}

/// Cleans up after interrupted runs, provisions and checks the pinned
/// toolchain and fetches the set's sources and inputs.
pub fn prepare(pins: &Pins, opts: &Options, say: &(dyn Fn(String) + Sync)) -> Result<Prepared> {
    let cache = Cache::from_env()?.with_remote(opts.remote.clone());
    if let Some(r) = cache.remote() {
        say(format!("remote cache {}{}", r.url(), if r.config().read_only { " (read-only)" } else { "" }));
    }
    let (stale, bytes) = cache.remove_stale_scratch()?;
    if stale > 0 {
        say(format!("removed {stale} scratch folder(s) of interrupted runs ({:.1} MB) from {}", bytes as f64 / 1e6, cache.tmp().display()));
    }
    let set = opts.set(pins)?;
    opts.selection.check(&[set])?;
    let root = sysroot::provision(&cache, pins, opts.workers, say)?;
    let runner = Runner::new(root)?;
    let ptxas = if opts.selection.needs_ptxas(pins, set) { compilers::ptxas(&runner, &cache, pins)? } else { None };
    let toolchain = compilers::check(&runner, pins, ptxas.as_ref(), &set.targets.hip)?;

    let source = sources::fetch(&cache, set, &opts.repo, &|l| say(l))?;
    let inputs = sources::inputs(&cache, set, &|l| say(l))?;
    let shims = opts.repo.join(SHIMS_DIR);
    if !shims.is_dir() {
        bail!("kiln's HIP shims are missing: {} is not a folder", shims.display());
    }
    let mut plan = Plan::new(set, source.root.clone(), shims).with_cuda_headers(opts.repo.join(CUDA_HEADERS_DIR)).with_includes(&inputs)?;
    if let Some(tool) = ptxas {
        plan = plan.with_ptxas(tool);
    }
    Ok(Prepared { cache, runner, toolchain, source, plan })
}

/// The compile jobs of `selection` (what shards divide): the module jobs,
/// then the static library's objects, in plan order.
pub fn compile_jobs(selection: &Selection, plan: &Plan, pins: &Pins) -> Result<Vec<Job>> {
    let mut jobs = selection.module_jobs(plan, pins)?;
    if selection.wants_staticlib(&plan.set) {
        jobs.extend(selection.object_jobs(plan)?);
    }
    Ok(jobs)
}

/// Builds, validates and publishes the set as `opts` says (what `dist merge`
/// runs once the parts are in the cache) into its folder (`out`, or
/// `<out>-<set>` for a set other than the main one); on any error the
/// previous folder is left as it was.
pub fn run(pins: &Pins, opts: &Options, say: &(dyn Fn(String) + Sync)) -> Result<Dist> {
    let set = opts.set(pins)?;
    let builder = Builder::from_pins(pins)
        .kiln_dir(&opts.repo)
        .base(&opts.repo)
        .only(&[set.name.as_str()])
        .selection_of(opts.selection.clone())
        .out(&opts.out)
        .lock(if opts.locked.is_some() { LockMode::Check } else { LockMode::Off })
        .package(opts.package)
        .workers(opts.workers)
        .verbose(opts.verbose)
        .no_compile(opts.no_compile)
        .remote(opts.remote.clone());
    builder.build(say)
}
