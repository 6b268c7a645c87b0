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

use std::{
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{bail, Context, Result};
use kiln_build::{run_graph, Job, Plan};
use kiln_manifest::Toolchain;
use kiln_pins::{HipArch, KernelSet, Pins};
use kiln_toolchain::{fetch, remote, sysroot, wheel::Tool, Cache, Runner};

use crate::{
    cache_admin, collect, compilers, costs,
    graph::{self, Graph},
    lock, merge, output, package,
    part::Spec,
    set_manifest::SetManifest,
    shard, sources, Selection, SetOutput,
};

/// kiln's own repository, where this crate was built from: its HIP shims
/// (`kernels/hip`), CUDA headers (`kernels/cuda`) and crate template, which
/// a project that depends on kiln-dist by path or git finds here.
pub fn kiln_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// What `build()` does with each set's lock file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LockMode {
    /// Neither read nor written.
    #[default]
    Off,
    /// Fail, publishing nothing, unless every artifact matches the lock.
    Check,
    /// Write the built artifacts' hashes into the lock.
    Update,
}

/// kiln's one way in: [`Builder::build`] (every chosen set, one machine),
/// [`Builder::shard`] (part of one set's compiles) and [`Builder::merge`]
/// (the parts into that set's dist folder), all provisioning and planning
/// through the same stages.
pub struct Builder<'p> {
    pub(crate) pins: &'p Pins,
    pub(crate) sets: Vec<KernelSet>,
    only: Vec<String>,
    pub(crate) modules: Vec<String>,
    pub(crate) archs: Vec<String>,
    /// A selection already parsed (`dist merge`'s, from its parts), instead of `modules`/`archs`.
    selection: Option<Selection>,
    kiln: PathBuf,
    pub(crate) base: PathBuf,
    out: Option<PathBuf>,
    /// A shard's part folder, when not the default one.
    part_out: Option<PathBuf>,
    lock_dir: Option<PathBuf>,
    pub(crate) lock: LockMode,
    package: bool,
    pub(crate) workers: usize,
    pub(crate) verbose: bool,
    pub(crate) no_compile: bool,
    pub(crate) remote: Option<remote::Config>,
}

/// One set's result.
pub struct Outcome {
    pub set: String,
    /// Its manifest, as written to `out/manifest.json`.
    pub manifest: SetManifest,
    /// The packaged artifact crates (empty when not packaged).
    pub crates: Vec<package::CrateRecord>,
    /// Its dist folder.
    pub out: PathBuf,
    /// Its lock file (read or written only as [`LockMode`] says).
    pub lock: PathBuf,
    /// Its static library's objects, by the lock's paths ([`lock::Lock::objects`]).
    pub objects: lock::Digests,
    /// Its crates' payload files (`None`: not packaged), by the lock's paths ([`lock::Lock::payloads`]).
    pub payloads: Option<lock::Digests>,
}

pub struct Dist {
    /// Per set built, in the order the builder knows them.
    pub sets: Vec<Outcome>,
    pub seconds: f64,
    /// Every compile job ([`costs::label`]) and the seconds it took where it
    /// was built, if its cache entry recorded them (`--update-costs`).
    pub compiled: Vec<(String, Option<f64>)>,
    /// The module and static-library names of the sets whose whole plan
    /// `compiled` is (none when the selection is part of a plan): what
    /// `--update-costs` may drop entries of ([`costs::Costs::prune`]).
    pub whole: Vec<String>,
}

impl<'p> Builder<'p> {
    /// A builder with the pins' toolchain and default targets and flags, and
    /// no kernel set yet ([`Builder::set`]). Relative folders (sources, the
    /// dist folder, locks) are taken from the pin file's folder.
    pub fn new(pins: &'p Pins) -> Builder<'p> {
        let base = pins.file.parent().filter(|p| !p.as_os_str().is_empty()).map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        Builder {
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
        }
    }

    /// A builder with every set of the pin file (what `cargo xtask dist` uses),
    /// packaging the sets that have crates.
    pub fn from_pins(pins: &'p Pins) -> Builder<'p> {
        let mut b = Builder::new(pins);
        b.sets = pins.sets.clone();
        b.package = true;
        b
    }

    /// Adds a kernel set. The first set a builder knows is its main set: its
    /// dist folder is [`Builder::out`] itself, its lock `artifacts.lock`.
    pub fn set(mut self, set: KernelSet) -> Builder<'p> {
        self.sets.push(set);
        self
    }

    /// Builds only these sets (`--set`); by default every default set.
    pub fn only<S: AsRef<str>>(mut self, names: &[S]) -> Builder<'p> {
        self.only = names.iter().map(|s| s.as_ref().to_string()).collect();
        self
    }

    /// Builds only these modules and targets (`--module`, `--arch`); empty: all.
    pub fn select(mut self, modules: Vec<String>, archs: Vec<String>) -> Builder<'p> {
        self.modules = modules;
        self.archs = archs;
        self
    }

    /// Builds exactly this selection (already checked against the sets).
    pub fn selection_of(mut self, selection: Selection) -> Builder<'p> {
        self.selection = Some(selection);
        self
    }

    /// Fails instead of compiling: every compile must come from the local or remote cache.
    pub fn no_compile(mut self, yes: bool) -> Builder<'p> {
        self.no_compile = yes;
        self
    }

    /// A remote cache shared with other machines (docs/distributed.md).
    pub fn remote(mut self, config: Option<remote::Config>) -> Builder<'p> {
        self.remote = config;
        self
    }

    /// The main set's dist folder; another set's is `<out>-<set>` beside it.
    pub fn out(mut self, dir: impl Into<PathBuf>) -> Builder<'p> {
        self.out = Some(dir.into());
        self
    }

    /// The folder [`Builder::shard`] writes its part into (default:
    /// `<set's dist folder>-part-K-of-N`).
    pub fn part_out(mut self, dir: impl Into<PathBuf>) -> Builder<'p> {
        self.part_out = Some(dir.into());
        self
    }

    /// Where relative source folders, `out` and the locks are (default: the pin file's folder).
    pub fn base(mut self, dir: impl Into<PathBuf>) -> Builder<'p> {
        self.base = dir.into();
        self
    }

    /// kiln's repository (default: [`kiln_root`]).
    pub fn kiln_dir(mut self, dir: impl Into<PathBuf>) -> Builder<'p> {
        self.kiln = dir.into();
        self
    }

    /// Checks or updates each set's lock (`artifacts.lock`, `artifacts.<set>.lock`) in `dir` (default: `base`).
    pub fn lock(mut self, mode: LockMode) -> Builder<'p> {
        self.lock = mode;
        self
    }

    pub fn lock_dir(mut self, dir: impl Into<PathBuf>) -> Builder<'p> {
        self.lock_dir = Some(dir.into());
        self
    }

    /// Packages the crates of the sets that have a `crate` (full builds only).
    pub fn package(mut self, yes: bool) -> Builder<'p> {
        self.package = yes;
        self
    }

    /// Jobs to run at once (default: the number of cores).
    pub fn workers(mut self, n: usize) -> Builder<'p> {
        self.workers = n.max(1);
        self
    }

    /// Also report cache hits.
    pub fn verbose(mut self, yes: bool) -> Builder<'p> {
        self.verbose = yes;
        self
    }

    fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base.join(p)
        }
    }

    /// The main set's dist folder.
    pub fn main_out(&self) -> PathBuf {
        self.resolve(self.out.as_deref().unwrap_or(Path::new(crate::DIST_DIR)))
    }

    /// Where set `name` goes: the main set's folder is `out`, another's
    /// `<out>-<name>`; its lock is in the lock folder.
    pub fn output_of(&self, name: &str) -> SetOutput {
        let lock_dir = self.lock_dir.as_deref().map_or_else(|| self.base.clone(), |d| self.resolve(d));
        SetOutput::new(name, self.sets.first().is_some_and(|s| s.name == name), &self.main_out(), &lock_dir)
    }

    /// The sets this build will build: the named ones, or every default set.
    pub fn chosen(&self) -> Result<Vec<&KernelSet>> {
        check_sets(self.pins, &self.sets)?;
        if self.only.is_empty() {
            return Ok(self.sets.iter().filter(|s| s.default).collect());
        }
        let known = || self.sets.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ");
        let mut chosen = Vec::new();
        for name in &self.only {
            let Some(set) = self.sets.iter().find(|s| &s.name == name) else { bail!("unknown set `{name}` (--set); the sets are: {}", known()) };
            if !chosen.iter().any(|c: &&KernelSet| c.name == set.name) {
                chosen.push(set);
            }
        }
        Ok(chosen)
    }

    /// The one set a shard or a merge is of: `name`, else the main set.
    pub(crate) fn set_named(&self, name: Option<&str>) -> Result<&KernelSet> {
        check_sets(self.pins, &self.sets)?;
        let Some(name) = name else { return Ok(&self.sets[0]) };
        let known = || self.sets.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ");
        self.sets.iter().find(|s| s.name == name).with_context(|| format!("unknown set `{name}` (--set); the sets are: {}", known()))
    }

    /// The set [`Builder::shard`] builds part of (the one [`Builder::only`]
    /// names, else the main set), where it goes and the selection of it.
    pub(crate) fn one_set_of_shard(&self) -> Result<shard::OneSet<'_>> {
        if self.only.len() > 1 {
            bail!("--shard builds part of one set: give at most one --set (got {})", self.only.join(", "));
        }
        let set = self.set_named(self.only.first().map(String::as_str))?;
        let selection = match &self.selection {
            Some(s) => {
                s.check(&[set])?;
                s.clone()
            }
            None => Selection::new(self.modules.clone(), &self.archs, &[set])?,
        };
        Ok(shard::OneSet { pins: self.pins, set, output: self.output_of(&set.name), selection })
    }

    /// The part folder of shard `spec` of the set that goes to `output`.
    pub(crate) fn part_folder(&self, output: &SetOutput, spec: Spec) -> PathBuf {
        self.part_out.as_deref().map_or_else(|| output.part_folder(spec), |d| self.resolve(d))
    }

    /// The selection over the chosen sets; a `--module` of a set not chosen says which `--set` adds it.
    pub fn selection(&self, chosen: &[&KernelSet]) -> Result<Selection> {
        if let Some(s) = &self.selection {
            s.check(chosen)?;
            return Ok(s.clone());
        }
        for m in &self.modules {
            if chosen.iter().any(|s| s.module_names().contains(m)) {
                continue;
            }
            if let Some(other) = self.sets.iter().find(|s| s.module_names().contains(m)) {
                bail!("module `{m}` (--module) is of set `{}`, which this run does not build: add --set {}", other.name, other.name);
            }
        }
        Selection::new(self.modules.clone(), &self.archs, chosen)
    }

    /// Builds, validates and publishes every chosen set; on any error no
    /// set's dist folder (or lock) is changed. Its stages, in order, below.
    pub fn build(self, say: &(dyn Fn(String) + Sync)) -> Result<Dist> {
        let start = Instant::now();
        let scope = self.scope(say)?;
        let tools = self.provision(&scope.sets, &scope.selection, self.remote.clone(), say)?;
        let planned = self.plan(&tools, &scope.sets, say)?;
        let graph = self.graph(&scope, &tools, &planned, say)?;
        let ran = self.run(&graph, &tools, say)?;
        let validated = self.validate(&scope, &tools, &planned, &graph, &ran)?;
        let staged = stage(&scope.outputs, validated)?;
        output::failpoint("staged");
        let packaged = self.package_crates(&scope, &tools, &planned, &graph, &ran, staged, say)?;
        let committed = self.commit(packaged)?;
        self.record(&scope, &tools, &planned, &ran, &committed.package_keys, say);
        if let Some(r) = tools.cache.remote() {
            say(r.summary());
        }
        let whole = if scope.selection.is_all() { scope.sets.iter().flat_map(|s| s.module_names()).collect() } else { Vec::new() };
        Ok(Dist { sets: committed.outcomes, seconds: start.elapsed().as_secs_f64(), compiled: ran.compiled, whole })
    }

    /// Builds shard `spec` of one set (the one [`Builder::only`] names, else
    /// the main set) into its part folder ([`Builder::part_out`], else
    /// `<set's dist folder>-part-K-of-N`), for `dist merge` (docs/distributed.md).
    pub fn shard(self, spec: Spec, say: &(dyn Fn(String) + Sync)) -> Result<shard::PartOutcome> {
        shard::run(&self, spec, say)
    }

    /// What `--shard K/n` plans for this builder's one set from an empty
    /// cache (`job-costs.toml`'s seconds, this builder's workers per machine):
    /// nothing is compiled.
    pub fn shard_plan(&self, n: u32, say: &(dyn Fn(String) + Sync)) -> Result<shard::PlannedWall> {
        shard::planned(self, n, say)
    }

    /// Merges the part folders of the shards of one set into that set's dist
    /// folder, exactly as a single machine writes it: the parts name their set
    /// and selection; [`LockMode::Check`] also requires the set's lock and the
    /// whole result to match it.
    pub fn merge(self, parts: &[PathBuf], say: &(dyn Fn(String) + Sync)) -> Result<Dist> {
        merge::run(self, parts, say)
    }

    /// Stage 1: the sets this build builds, its selection, where each set
    /// goes; before hours of compiling, a folder that is not ours or a lock
    /// that is missing fails now.
    fn scope(&self, say: &(dyn Fn(String) + Sync)) -> Result<Scope<'_>> {
        let chosen = self.chosen()?;
        let selection = self.selection(&chosen)?;
        let sets: Vec<&KernelSet> = chosen.into_iter().filter(|s| selection.builds(s)).collect();
        if sets.is_empty() {
            bail!(
                "nothing to build: no set ({}) has what --module/--arch select",
                self.sets.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
            );
        }
        let outputs: Vec<SetOutput> = sets.iter().map(|s| self.output_of(&s.name)).collect();
        let mut locks = Vec::new();
        for (set, out) in sets.iter().zip(&outputs) {
            output::check(&out.folder).with_context(|| format!("set `{}`", set.name))?;
            let stale = output::remove_stale_siblings(&out.folder);
            if stale > 0 {
                say(format!("removed {stale} half-published dist folder(s) of interrupted runs beside {}", out.folder.display()));
            }
            locks.push(match self.lock {
                LockMode::Check => {
                    Some(lock::Lock::load(&out.lock).with_context(|| {
                        format!("set `{}`: --locked needs its lock, which a build of the set with --update-lock writes", set.name)
                    })?)
                }
                _ => None,
            });
        }
        Ok(Scope { sets, selection, outputs, locks })
    }

    /// Stage 2 (build, shard and merge alike): the cache (cleaned of
    /// interrupted runs' scratch), the pinned toolchain provisioned and
    /// checked for what `sets` need, and the pinned ptxas where a target needs it.
    pub(crate) fn provision(
        &self,
        sets: &[&KernelSet],
        selection: &Selection,
        remote: Option<remote::Config>,
        say: &(dyn Fn(String) + Sync),
    ) -> Result<Provisioned> {
        let pins = self.pins;
        let cache = Cache::from_env()?.with_remote(remote);
        if let Some(r) = cache.remote() {
            say(format!("remote cache {}{}", r.url(), if r.config().read_only { " (read-only)" } else { "" }));
        }
        if !cache.marked() {
            say(format!("warning: not cleaning scratch folders of interrupted runs: {}", kiln_toolchain::cache::KEPT.unmarked_reason(cache.root())));
        }
        let (stale, bytes) = cache.remove_stale_scratch()?;
        if stale > 0 {
            say(format!("removed {stale} scratch folder(s) of interrupted runs ({:.1} MB) from {}", bytes as f64 / 1e6, cache.tmp().display()));
        }
        let root = sysroot::provision(&cache, pins, self.workers, say)?;
        let runner = Runner::new(root)?;
        let ptxas = if sets.iter().any(|s| selection.needs_ptxas(pins, s)) { compilers::ptxas(&runner, &cache, pins)? } else { None };
        let mut hip: Vec<HipArch> = Vec::new();
        for a in sets.iter().flat_map(|s| &s.targets.hip) {
            if !hip.contains(a) {
                hip.push(a.clone());
            }
        }
        let toolchain = compilers::check(&runner, pins, ptxas.as_ref(), &hip)?;
        // The cross compilers of the static libraries' other host CPUs, where a library is built.
        let mut cross: Vec<sysroot::CrossRoot> = Vec::new();
        for set in sets.iter().filter(|s| selection.wants_staticlib(s)) {
            for cpu in set.staticlib.iter().flat_map(|l| l.cross_hosts()) {
                if !cross.iter().any(|c| c.cpu == cpu) {
                    cross.push(sysroot::provision_cross(&cache, pins, cpu, self.workers, say)?);
                }
            }
        }
        Ok(Provisioned { cache, runner, toolchain, ptxas, cross })
    }

    /// Stage 3: each set's verified sources and inputs, and the plan of its jobs over them.
    pub(crate) fn plan(&self, tools: &Provisioned, sets: &[&KernelSet], say: &(dyn Fn(String) + Sync)) -> Result<Planned> {
        let shims = self.kiln.join(crate::SHIMS_DIR);
        if !shims.is_dir() {
            bail!("kiln's HIP shims are missing: {} is not a folder", shims.display());
        }
        let mut planned = Planned { plans: Vec::new(), sources: Vec::new() };
        for set in sets {
            let src = sources::fetch(&tools.cache, set, &self.base, &|l| say(l))?;
            let inputs = sources::inputs(&tools.cache, set, &|l| say(l))?;
            let mut plan =
                Plan::new(set, src.root.clone(), shims.clone()).with_cuda_headers(self.kiln.join(crate::CUDA_HEADERS_DIR)).with_includes(&inputs)?;
            if let Some(tool) = &tools.ptxas {
                plan = plan.with_ptxas(tool.clone());
            }
            plan = plan.with_cross(tools.cross.clone());
            planned.plans.push(plan);
            planned.sources.push(src);
        }
        Ok(planned)
    }

    /// Stage 4: every set's jobs as one graph (with the crates' payloads
    /// where they are packaged), announced.
    fn graph<'g>(&'g self, scope: &Scope, tools: &Provisioned, planned: &'g Planned, say: &(dyn Fn(String) + Sync)) -> Result<Graph<'g>> {
        let selection = &scope.selection;
        let all = selection.is_all();
        let packaged = |s: &KernelSet| self.package && all && s.artifact_crate.is_some();
        if self.package && !all && scope.sets.iter().any(|s| s.artifact_crate.is_some()) {
            say("not packaging crates: they need every artifact, and this run builds a selection".into());
        }
        let toolchain_files = kiln_package::sources::ToolchainFiles::in_sysroot(&tools.runner.sysroot().root);
        let g = graph::build(self.pins, &planned.plans, selection, &packaged, &toolchain_files)?;
        let plans = &planned.plans;
        let names: Vec<String> = plans.iter().map(|p| format!("{} ({})", p.src_name, p.set.name)).collect();
        let what = if scope.outputs.len() == 1 && scope.outputs[0].is_main { plans[0].src_name.clone() } else { names.join(", ") };
        say(format!(
            "building {} of {what} ({}) with {} workers; cache {}",
            selection.describe(),
            g.describe(),
            self.workers,
            tools.cache.root().display()
        ));
        Ok(g)
    }

    /// Stage 5: the graph run through the cache; every node must have
    /// succeeded. The time left the progress names is the committed cost
    /// table's seconds (an unmeasured job estimated from its kind), scaled as jobs finish.
    fn run(&self, g: &Graph, tools: &Provisioned, say: &(dyn Fn(String) + Sync)) -> Result<Ran> {
        let table = costs::Costs::load(&self.base.join(costs::FILE_NAME)).unwrap_or_default();
        let compile = |n: &kiln_build::Node| match &n.work {
            kiln_build::Work::Command(j) if j.kind.is_compile() => Some(j.clone()),
            _ => None,
        };
        let estimates = g.nodes.iter().map(|n| compile(n).map(|j| table.estimate(std::slice::from_ref(&j))[0] as f64 / 1e3)).collect();
        let run_opts =
            kiln_build::Options { workers: self.workers, verbose: self.verbose, no_compile: self.no_compile, estimates, ..Default::default() };
        let results = run_graph(&tools.runner, &tools.cache, &g.nodes, &run_opts, say);
        let built = collect::successes(&g.nodes, results)?;
        let store = kiln_build::store::Store::new(&tools.cache);
        let compiled = g
            .nodes
            .iter()
            .zip(&built)
            .filter_map(|(n, b)| compile(n).map(|j| (costs::label(&j), if b.cached { store.seconds(&b.key) } else { Some(b.seconds) })))
            .collect();
        Ok(Ran { built, compiled })
    }

    /// Stage 6: each set's artifacts read back and validated, its manifest
    /// made and compared with its lock ([`LockMode::Check`]).
    fn validate(&self, scope: &Scope, tools: &Provisioned, planned: &Planned, g: &Graph, ran: &Ran) -> Result<Vec<Validated>> {
        let built = &ran.built;
        let mut validated = Vec::new();
        for (i, (plan, nodes)) in planned.plans.iter().zip(&g.sets).enumerate() {
            let (set, src, out) = (&plan.set, &planned.sources[i], &scope.outputs[i]);
            let modules: Vec<(Job, kiln_build::Built)> = nodes.modules.iter().map(|&i| (g.job(i).clone(), built[i].clone())).collect();
            let mut collected = collect::artifacts(&set.targets, &modules).with_context(|| format!("set `{}`", set.name))?;
            for &a in &nodes.archives {
                collected.push(collect::staticlib(set, &src.root, g.job(a), &built[a])?);
            }
            collect::compare_kernel_sets(self.pins, set, &collected)?;
            let bundles: Vec<(String, kiln_build::Built)> = nodes.bundles.iter().map(|(m, i)| (m.clone(), built[*i].clone())).collect();
            let bundles = collect::hip_bundles(set, &collected, &bundles)?;
            collected.extend(bundles);
            let manifest = collect::manifest(set, out.is_main, &src.sha256, tools.toolchain.clone(), &collected);
            let objects = objects(g, nodes, built)?;
            if let Some(lock) = &scope.locks[i] {
                let made =
                    lock::Made { manifest: Some(&manifest), objects: Some(&objects), complete: scope.selection.is_all(), ..Default::default() };
                let diff = lock.check(&out.lock_name(), made);
                if !diff.is_empty() {
                    bail!(
                        "--locked: set `{}`: {} difference(s) from {}; no dist folder was changed:\n  {}",
                        set.name,
                        diff.len(),
                        out.lock.display(),
                        diff.join("\n  ")
                    );
                }
            }
            validated.push(Validated { manifest, collected, objects });
        }
        Ok(validated)
    }

    /// Stage 8: each set's crates packaged into its staged folder, from the
    /// payloads the graph compressed (sets that are not packaged have none).
    #[allow(clippy::too_many_arguments)]
    fn package_crates(
        &self,
        scope: &Scope,
        tools: &Provisioned,
        planned: &Planned,
        g: &Graph,
        ran: &Ran,
        staged: Vec<StagedSet>,
        say: &(dyn Fn(String) + Sync),
    ) -> Result<Vec<Packaged>> {
        let mut packaged = Vec::new();
        for (i, s) in staged.into_iter().enumerate() {
            let (set, out) = (scope.sets[i], &scope.outputs[i]);
            let (crates, key) = match &g.sets[i].package {
                Some(p) => {
                    let payloads = payloads(g, &g.sets[i], p, &ran.built);
                    let what = package::What {
                        runner: &tools.runner,
                        cache: &tools.cache,
                        set,
                        kiln: &self.kiln,
                        source_root: &planned.sources[i].root,
                        manifest: &s.manifest,
                        cudart: self.cudart_of(set),
                        pins: self.pins,
                        jobs: g.job_records(i, &kiln_build::job::Hashes::default())?,
                    };
                    let (records, key) = package::crates(&what, &payloads, &s.folder.dir, say)?;
                    (records, Some(key))
                }
                None => (Vec::new(), None),
            };
            // What the crates carry, against the lock's payloads ([`LockMode::Check`]).
            let payloads = match key {
                Some(_) => Some(kiln_package::record::payload_digests(&s.folder.dir, &crates)?),
                None => None,
            };
            if let (Some(lock), Some(payloads)) = (&scope.locks[i], &payloads) {
                let diff = lock.check(&out.lock_name(), lock::Made { payloads: Some(payloads), ..Default::default() });
                if !diff.is_empty() {
                    bail!(
                        "--locked: set `{}`: {} payload(s) of its crates differ from {} (a substituted or damaged cache entry, \
                         or the crates' payloads changed: then `--update-lock`); no dist folder was changed:\n  {}",
                        set.name,
                        diff.len(),
                        out.lock.display(),
                        diff.join("\n  ")
                    );
                }
            }
            let outcome = Outcome {
                set: set.name.clone(),
                manifest: s.manifest,
                crates,
                out: out.folder.clone(),
                lock: out.lock.clone(),
                objects: s.objects,
                payloads,
            };
            packaged.push(Packaged { outcome, folder: s.folder, key });
        }
        Ok(packaged)
    }

    /// The main crate name and version of the set whose CUDA runtime crate
    /// `set`'s parts link (`crate.cudart`), if not its own.
    fn cudart_of(&self, set: &KernelSet) -> Option<(String, String)> {
        let name = set.artifact_crate.as_ref().and_then(|c| c.cudart.as_ref())?;
        let other = self.sets.iter().chain(&self.pins.sets).find(|s| &s.name == name).expect("checked: crate.cudart names a set");
        Some((other.artifact_crate.as_ref().expect("a set with crates").name.clone(), other.crate_version().expect("a crate source")))
    }

    /// Stage 9: every staged folder replaces its set's dist folder, then
    /// the locks are written ([`LockMode::Update`]).
    fn commit(&self, packaged: Vec<Packaged>) -> Result<Committed> {
        let mut outcomes = Vec::new();
        let mut keys = Vec::new();
        let mut committing = Vec::new();
        for p in packaged {
            committing.push((p.folder, p.outcome.out.clone()));
            keys.extend(p.key);
            outcomes.push(p.outcome);
        }
        for (folder, out) in committing {
            folder.commit(&out)?;
        }
        if self.lock == LockMode::Update {
            for o in &outcomes {
                let mut l = if o.lock.exists() { lock::Lock::load(&o.lock)? } else { lock::Lock::of(&o.manifest) };
                l.update(&o.manifest, &o.objects, o.payloads.as_ref());
                l.write(&o.lock)?;
            }
        }
        Ok(Committed { outcomes, package_keys: keys })
    }

    /// Stage 10: what a full build used, for `cargo xtask cache gc`: one
    /// record per combination of sets. The pin file's default sets keep the
    /// checkout's one record; any other combination (an opt-in set, a set
    /// described in code) gets its own, so neither hides the other's entries.
    fn record(&self, scope: &Scope, tools: &Provisioned, planned: &Planned, ran: &Ran, package_keys: &[String], say: &(dyn Fn(String) + Sync)) {
        if !scope.selection.is_all() {
            return;
        }
        let names: Vec<String> = scope.sets.iter().map(|s| s.name.clone()).collect();
        let defaults: Vec<String> = self.pins.default_sets().map(|s| s.name.clone()).collect();
        let variant = if names == defaults { String::new() } else { names.join(",") };
        let rec = cache_admin::PlanRecord {
            checkout: self.base.canonicalize().unwrap_or_else(|_| self.base.clone()),
            toolchain: tools.runner.sysroot().identity.clone(),
            cross: tools.cross.iter().map(|c| c.identity.clone()).collect(),
            sources: planned.sources.iter().filter_map(|s| s.cached.clone()).collect(),
            debs: self
                .pins
                .closure()
                .into_iter()
                .chain(self.pins.toolchain.cross.iter().filter_map(|c| c.closure.as_ref()))
                .flat_map(|c| c.debs.iter().map(|d| kiln_toolchain::cache::deb_file(&d.sha256)))
                .collect(),
            // Every job's key, found or stored: what this plan uses.
            keys: ran.built.iter().map(|b| b.key.clone()).collect::<std::collections::BTreeSet<_>>().into_iter().collect(),
            packages: package_keys.to_vec(),
        };
        if let Err(e) = cache_admin::record(&tools.cache, &rec, &variant) {
            say(format!("warning: cannot record what this dist used for `cargo xtask cache gc`: {e:#}"));
        }
    }
}

/// Stage 7: every set's folder staged (manifest and artifacts) before any is published.
fn stage(outputs: &[SetOutput], validated: Vec<Validated>) -> Result<Vec<StagedSet>> {
    let staged = outputs.iter().zip(validated).map(|(out, v)| {
        Ok(StagedSet { folder: output::stage(&out.folder, &v.manifest.to_json(), &v.collected)?, manifest: v.manifest, objects: v.objects })
    });
    staged.collect()
}

/// A packaged set's payloads: each artifact's and bundle's compressed bytes
/// by its dist path, the static library's slices and the CUDA runtime.
fn payloads(g: &Graph, nodes: &graph::SetNodes, p: &graph::Packaging, built: &[kiln_build::Built]) -> package::Payloads {
    let mut artifacts = std::collections::BTreeMap::new();
    for &(of, payload) in &p.payloads {
        let path = match nodes.bundles.iter().find(|(_, i)| *i == of) {
            Some((module, _)) => collect::bundle_path(module),
            None => collect::dist_path(g.job(of)),
        };
        artifacts.insert(path, built[payload].path.clone());
    }
    let slices = p.slices.iter().map(|&s| built[s].path.clone()).collect();
    package::Payloads { artifacts, slices, cudart: built[p.cudart].path.clone() }
}

/// The sha256 of each static-library object a set's archive was made of,
/// by the path the lock names it with ([`collect::object_path`]).
fn objects(g: &Graph, nodes: &graph::SetNodes, built: &[kiln_build::Built]) -> Result<lock::Digests> {
    let inputs = nodes.archives.iter().flat_map(|&a| &g.nodes[a].inputs);
    inputs.map(|(o, _)| Ok((collect::object_path(g.job(*o)), fetch::sha256_file(&built[*o].path)?))).collect()
}

/// What a build is of ([`Builder::build`]'s first stage).
struct Scope<'b> {
    sets: Vec<&'b KernelSet>,
    selection: Selection,
    /// Per set, where it goes.
    outputs: Vec<SetOutput>,
    /// Per set, its lock when it is checked.
    locks: Vec<Option<lock::Lock>>,
}

/// The cache and the pinned toolchain, provisioned and checked.
pub(crate) struct Provisioned {
    pub(crate) cache: Cache,
    pub(crate) runner: Runner,
    pub(crate) toolchain: Toolchain,
    ptxas: Option<Tool>,
    /// The cross compilers' roots (`[toolchain.cross.<cpu>]`) the sets' static libraries need.
    cross: Vec<sysroot::CrossRoot>,
}

/// Per set (in the order built), its plan and its verified sources.
pub(crate) struct Planned {
    pub(crate) plans: Vec<Plan>,
    pub(crate) sources: Vec<sources::SetSource>,
}

/// What the graph built: per node, its output; per compile job, its label and seconds.
struct Ran {
    built: Vec<kiln_build::Built>,
    compiled: Vec<(String, Option<f64>)>,
}

/// One set's artifacts, validated, its manifest, and its static library's objects.
struct Validated {
    manifest: SetManifest,
    collected: Vec<collect::Collected>,
    objects: lock::Digests,
}

/// One set's folder staged beside its dist folder.
struct StagedSet {
    manifest: SetManifest,
    folder: output::Staged,
    objects: lock::Digests,
}

/// Every set published.
struct Committed {
    outcomes: Vec<Outcome>,
    /// The packaged crates' cache keys (for `cargo xtask cache gc`).
    package_keys: Vec<String>,
}

/// One set packaged, ready to publish.
struct Packaged {
    outcome: Outcome,
    folder: output::Staged,
    /// The packaged crates' cache key.
    key: Option<String>,
}

/// The sets a builder is given: at least one, each keeping the pin file's
/// rules and the sets together (kiln-pins' [`kiln_pins::check_sets`]).
fn check_sets(pins: &Pins, sets: &[KernelSet]) -> Result<()> {
    if sets.is_empty() {
        bail!("the builder has no kernel set: add one with Builder::set (or Builder::from_pins)");
    }
    kiln_pins::check_sets(pins, sets).map_err(anyhow::Error::msg)
}
