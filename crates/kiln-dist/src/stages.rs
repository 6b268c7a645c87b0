//! The stages of a build, in the order [`crate::Builder::build`] runs them,
//! over one [`Context`] (the settings, the provisioned toolchain, the
//! selection and one [`SetRun`] per set): the scope (stage 1), the toolchain
//! provisioned and each set planned (2, 3: [`Context::new`], which shards and
//! merges start from too), the job graph run and read back (4, 5: on
//! [`Context::run_nodes`], shared with a shard), each set validated (6),
//! staged (7), its crates packaged (8), the dist folders replaced and the
//! locks written (9), and what the build used recorded (10).

use std::{collections::BTreeSet, time::Instant};

use anyhow::{bail, Context as _, Result};
use kiln_build::{run_graph, Built, Job, Node, Plan};
use kiln_manifest::Toolchain;
use kiln_pins::{HipArch, KernelSet};
use kiln_toolchain::{fetch, remote, sysroot, wheel::Tool, Cache, Runner};

use crate::{
    cache_admin, collect, compilers, costs,
    graph::{self, Graph, SetNodes},
    lock, output, package,
    set_manifest::SetManifest,
    settings::{LockMode, Scope, SetScope, Settings},
    sources,
};

/// One set's result.
pub struct Outcome {
    pub set: String,
    /// Its manifest, as written to `out/manifest.json`.
    pub manifest: SetManifest,
    /// The packaged artifact crates (empty when not packaged).
    pub crates: Vec<package::CrateRecord>,
    /// Its dist folder.
    pub out: std::path::PathBuf,
    /// Its lock file (read or written only as [`LockMode`] says).
    pub lock: std::path::PathBuf,
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

/// Stages 1 to 10 for every set the settings choose; on any error no set's
/// dist folder (or lock) is changed.
pub(crate) fn build(settings: &Settings, say: &(dyn Fn(String) + Sync)) -> Result<Dist> {
    let start = Instant::now();
    let scope = scope(settings, say)?;
    let cx = Context::new(settings, scope, settings.remote.clone(), say)?;
    let ran = cx.run(say)?;
    let validated = cx.validate(&ran)?;
    let staged = stage(validated)?;
    output::failpoint("staged");
    let packaged = cx.package_crates(&ran, staged, say)?;
    let committed = commit(settings.lock, packaged)?;
    cx.record(&ran, &committed.package_keys, say);
    if let Some(r) = cx.tools.cache.remote() {
        say(r.summary());
    }
    let whole = if cx.selection.is_all() { cx.sets.iter().flat_map(|s| s.set.module_names()).collect() } else { Vec::new() };
    Ok(Dist { sets: committed.outcomes, seconds: start.elapsed().as_secs_f64(), compiled: ran.compiled, whole })
}

/// Stage 1: the sets this build builds, its selection, where each set
/// goes; before hours of compiling, a folder that is not ours or a lock
/// that is missing fails now.
fn scope<'s>(settings: &'s Settings, say: &(dyn Fn(String) + Sync)) -> Result<Scope<'s>> {
    let chosen = settings.chosen()?;
    let selection = settings.selection(&chosen)?;
    let chosen: Vec<&KernelSet> = chosen.into_iter().filter(|s| selection.builds(s)).collect();
    if chosen.is_empty() {
        bail!(
            "nothing to build: no set ({}) has what --module/--arch select",
            settings.sets.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
        );
    }
    let mut sets = Vec::new();
    for set in chosen {
        let output = settings.output_of(&set.name);
        output::check(&output.folder).with_context(|| format!("set `{}`", set.name))?;
        let stale = output::remove_stale_siblings(&output.folder);
        if stale > 0 {
            say(format!("removed {stale} half-published dist folder(s) of interrupted runs beside {}", output.folder.display()));
        }
        let lock = match settings.lock {
            LockMode::Check => Some(
                lock::Lock::load(&output.lock)
                    .with_context(|| format!("set `{}`: --locked needs its lock, which a build of the set with --update-lock writes", set.name))?,
            ),
            _ => None,
        };
        sets.push(SetScope { set, output, lock });
    }
    Ok(Scope { selection, sets })
}

/// What every stage after the first runs in: the builder's settings, the
/// selection, the provisioned toolchain and, per set (in the order built),
/// its [`SetRun`].
pub(crate) struct Context<'s> {
    pub(crate) settings: &'s Settings<'s>,
    pub(crate) selection: crate::select::Selection,
    pub(crate) tools: Provisioned,
    pub(crate) sets: Vec<SetRun<'s>>,
}

/// One set of a run: what it is, where it goes, its lock when it is
/// checked, its verified sources and the plan of its jobs over them.
pub(crate) struct SetRun<'s> {
    pub(crate) set: &'s KernelSet,
    pub(crate) output: crate::set_output::SetOutput,
    pub(crate) lock: Option<lock::Lock>,
    pub(crate) source: sources::SetSource,
    pub(crate) plan: Plan,
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

/// What the graph built (stages 4 and 5): the graph, per node its output,
/// per compile job its label and seconds.
pub(crate) struct Ran<'c> {
    graph: Graph<'c>,
    built: Vec<Built>,
    compiled: Vec<(String, Option<f64>)>,
}

/// One set's artifacts, validated, its manifest, and its static library's objects.
struct Validated<'c> {
    run: &'c SetRun<'c>,
    nodes: &'c SetNodes,
    manifest: SetManifest,
    collected: Vec<collect::Collected>,
    objects: lock::Digests,
}

/// One set's folder staged beside its dist folder.
struct StagedSet<'c> {
    run: &'c SetRun<'c>,
    nodes: &'c SetNodes,
    manifest: SetManifest,
    folder: output::Staged,
    objects: lock::Digests,
}

/// One set packaged, ready to publish.
struct Packaged {
    outcome: Outcome,
    folder: output::Staged,
    /// The packaged crates' cache key.
    key: Option<String>,
}

/// Every set published.
struct Committed {
    outcomes: Vec<Outcome>,
    /// The packaged crates' cache keys (for `cargo xtask cache gc`).
    package_keys: Vec<String>,
}

impl<'s> Context<'s> {
    /// Stages 2 and 3 (build, shard and merge alike): the toolchain
    /// provisioned for the scope's sets, with the remote cache `remote`, and
    /// each set's sources fetched and planned.
    pub(crate) fn new(
        settings: &'s Settings,
        scope: Scope<'s>,
        remote: Option<remote::Config>,
        say: &(dyn Fn(String) + Sync),
    ) -> Result<Context<'s>> {
        let sets: Vec<&KernelSet> = scope.sets.iter().map(|s| s.set).collect();
        let tools = provision(settings, &sets, &scope.selection, remote, say)?;
        let shims = settings.kiln.join(crate::SHIMS_DIR);
        if !shims.is_dir() {
            bail!("kiln's HIP shims are missing: {} is not a folder", shims.display());
        }
        let mut runs = Vec::new();
        for SetScope { set, output, lock } in scope.sets {
            let (source, plan) = plan(settings, &tools, set, &shims, say)?;
            runs.push(SetRun { set, output, lock, source, plan });
        }
        Ok(Context { settings, selection: scope.selection, tools, sets: runs })
    }

    /// The one run of a graph's nodes (a build's, a shard's) through the
    /// cache with the settings' workers; `estimates`: per node, the seconds
    /// the progress's time left starts from. Every node must have succeeded.
    pub(crate) fn run_nodes(&self, nodes: &[Node], estimates: Vec<Option<f64>>, say: &(dyn Fn(String) + Sync)) -> Result<Vec<Built>> {
        let s = self.settings;
        let opts = kiln_build::Options { workers: s.workers, verbose: s.verbose, no_compile: s.no_compile, estimates, ..Default::default() };
        collect::successes(nodes, run_graph(&self.tools.runner, &self.tools.cache, nodes, &opts, say))
    }

    /// Stages 4 and 5: every set's jobs as one graph (with the crates'
    /// payloads where they are packaged), announced, and run through the
    /// cache. The time left the progress names is the committed cost
    /// table's seconds (an unmeasured job estimated from its kind), scaled as jobs finish.
    fn run(&self, say: &(dyn Fn(String) + Sync)) -> Result<Ran<'_>> {
        let g = self.graph(say)?;
        let table = costs::Costs::load(&self.settings.costs_path()).unwrap_or_default();
        let compile = |n: &Node| match &n.work {
            kiln_build::Work::Command(j) if j.kind.is_compile() => Some(j.clone()),
            _ => None,
        };
        let estimates = g.nodes.iter().map(|n| compile(n).map(|j| table.estimate(std::slice::from_ref(&j))[0] as f64 / 1e3)).collect();
        let built = self.run_nodes(&g.nodes, estimates, say)?;
        let store = kiln_build::store::Store::new(&self.tools.cache);
        let compiled = g
            .nodes
            .iter()
            .zip(&built)
            .filter_map(|(n, b)| compile(n).map(|j| (costs::label(&j), if b.cached { store.seconds(&b.key) } else { Some(b.seconds) })))
            .collect();
        Ok(Ran { graph: g, built, compiled })
    }

    /// Stage 4: the graph, announced.
    fn graph(&self, say: &(dyn Fn(String) + Sync)) -> Result<Graph<'_>> {
        let (settings, selection) = (self.settings, &self.selection);
        let all = selection.is_all();
        let packaged = |s: &KernelSet| settings.package && all && s.artifact_crate.is_some();
        if settings.package && !all && self.sets.iter().any(|s| s.set.artifact_crate.is_some()) {
            say("not packaging crates: they need every artifact, and this run builds a selection".into());
        }
        let toolchain_files = kiln_package::sources::ToolchainFiles::in_sysroot(&self.tools.runner.sysroot().root);
        let g = graph::build(settings.pins, self.sets.iter().map(|s| &s.plan), selection, &packaged, &toolchain_files)?;
        let what = match self.sets.as_slice() {
            [one] if one.output.is_main => one.plan.src_name.clone(),
            sets => sets.iter().map(|s| format!("{} ({})", s.plan.src_name, s.plan.set.name)).collect::<Vec<_>>().join(", "),
        };
        say(format!(
            "building {} of {what} ({}) with {} workers; cache {}",
            selection.describe(),
            g.describe(),
            settings.workers,
            self.tools.cache.root().display()
        ));
        Ok(g)
    }

    /// Stage 6: each set's artifacts read back and validated, its manifest
    /// made and compared with its lock ([`LockMode::Check`]).
    fn validate<'c>(&'c self, ran: &'c Ran) -> Result<Vec<Validated<'c>>> {
        let (g, built) = (&ran.graph, &ran.built);
        let mut validated = Vec::new();
        for (run, nodes) in self.sets.iter().zip(&g.sets) {
            let (set, out) = (run.set, &run.output);
            let modules: Vec<(Job, Built)> = nodes.modules.iter().map(|&i| (g.job(i).clone(), built[i].clone())).collect();
            let mut collected = collect::artifacts(&set.targets, &modules).with_context(|| format!("set `{}`", set.name))?;
            for &a in &nodes.archives {
                collected.push(collect::staticlib(set, &run.source.root, g.job(a), &built[a])?);
            }
            collect::compare_kernel_sets(self.settings.pins, set, &collected)?;
            let bundles: Vec<(String, Built)> = nodes.bundles.iter().map(|(m, i)| (m.clone(), built[*i].clone())).collect();
            let bundles = collect::hip_bundles(set, &collected, &bundles)?;
            collected.extend(bundles);
            let manifest = collect::manifest(set, out.is_main, &run.source.sha256, self.tools.toolchain.clone(), &collected);
            let objects = objects(g, nodes, built)?;
            if let Some(lock) = &run.lock {
                let made = lock::Made { manifest: Some(&manifest), objects: Some(&objects), complete: self.selection.is_all(), ..Default::default() };
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
            validated.push(Validated { run, nodes, manifest, collected, objects });
        }
        Ok(validated)
    }

    /// Stage 8: each set's crates packaged into its staged folder, from the
    /// payloads the graph compressed (sets that are not packaged have none).
    fn package_crates(&self, ran: &Ran, staged: Vec<StagedSet>, say: &(dyn Fn(String) + Sync)) -> Result<Vec<Packaged>> {
        let mut packaged = Vec::new();
        for s in staged {
            let (set, out) = (s.run.set, &s.run.output);
            let (crates, key) = match &s.nodes.package {
                Some(p) => {
                    let payloads = payloads(&ran.graph, s.nodes, p, &ran.built);
                    let what = package::What {
                        runner: &self.tools.runner,
                        cache: &self.tools.cache,
                        set,
                        kiln: &self.settings.kiln,
                        source_root: &s.run.source.root,
                        manifest: &s.manifest,
                        cudart: self.settings.cudart_of(set),
                        pins: self.settings.pins,
                        jobs: ran.graph.job_records(s.nodes, &kiln_build::job::Hashes::default())?,
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
            if let (Some(lock), Some(payloads)) = (&s.run.lock, &payloads) {
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

    /// Stage 10: what a full build used, for `cargo xtask cache gc`: one
    /// record per combination of sets. The pin file's default sets keep the
    /// checkout's one record; any other combination (an opt-in set, a set
    /// described in code) gets its own, so neither hides the other's entries.
    fn record(&self, ran: &Ran, package_keys: &[String], say: &(dyn Fn(String) + Sync)) {
        if !self.selection.is_all() {
            return;
        }
        let (pins, base) = (self.settings.pins, &self.settings.base);
        let names: Vec<String> = self.sets.iter().map(|s| s.set.name.clone()).collect();
        let defaults: Vec<String> = pins.default_sets().map(|s| s.name.clone()).collect();
        let variant = if names == defaults { String::new() } else { names.join(",") };
        let rec = cache_admin::PlanRecord {
            checkout: base.canonicalize().unwrap_or_else(|_| base.clone()),
            toolchain: self.tools.runner.sysroot().identity.clone(),
            cross: self.tools.cross.iter().map(|c| c.identity.clone()).collect(),
            sources: self.sets.iter().filter_map(|s| s.source.cached.clone()).collect(),
            debs: pins
                .closure()
                .into_iter()
                .chain(pins.toolchain.cross.iter().filter_map(|c| c.closure.as_ref()))
                .flat_map(|c| c.debs.iter().map(|d| kiln_toolchain::cache::deb_file(&d.sha256)))
                .collect(),
            // Every job's key, found or stored: what this plan uses.
            keys: ran.built.iter().map(|b| b.key.clone()).collect::<BTreeSet<_>>().into_iter().collect(),
            packages: package_keys.to_vec(),
        };
        if let Err(e) = cache_admin::record(&self.tools.cache, &rec, &variant) {
            say(format!("warning: cannot record what this dist used for `cargo xtask cache gc`: {e:#}"));
        }
    }
}

/// Stage 2: the cache (cleaned of interrupted runs' scratch), the pinned
/// toolchain provisioned and checked for what `sets` need, and the pinned
/// ptxas where a target needs it.
fn provision(
    settings: &Settings,
    sets: &[&KernelSet],
    selection: &crate::select::Selection,
    remote: Option<remote::Config>,
    say: &(dyn Fn(String) + Sync),
) -> Result<Provisioned> {
    let pins = settings.pins;
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
    let root = sysroot::provision(&cache, pins, settings.workers, say)?;
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
                cross.push(sysroot::provision_cross(&cache, pins, cpu, settings.workers, say)?);
            }
        }
    }
    Ok(Provisioned { cache, runner, toolchain, ptxas, cross })
}

/// Stage 3, per set: its verified sources and inputs, and the plan of its jobs over them.
fn plan(
    settings: &Settings,
    tools: &Provisioned,
    set: &KernelSet,
    shims: &std::path::Path,
    say: &(dyn Fn(String) + Sync),
) -> Result<(sources::SetSource, Plan)> {
    let src = sources::fetch(&tools.cache, set, &settings.base, &|l| say(l))?;
    let inputs = sources::inputs(&tools.cache, set, &|l| say(l))?;
    let mut plan = Plan::new(set, src.root.clone(), shims.to_path_buf())
        .with_cuda_headers(settings.kiln.join(crate::CUDA_HEADERS_DIR))
        .with_includes(&inputs)?;
    if let Some(tool) = &tools.ptxas {
        plan = plan.with_ptxas(tool.clone());
    }
    Ok((src, plan.with_cross(tools.cross.clone())))
}

/// Stage 7: every set's folder staged (manifest and artifacts) before any is published.
fn stage(validated: Vec<Validated>) -> Result<Vec<StagedSet>> {
    let staged = validated.into_iter().map(|v| {
        let folder = output::stage(&v.run.output.folder, &v.manifest.to_json(), &v.collected)?;
        Ok(StagedSet { run: v.run, nodes: v.nodes, folder, manifest: v.manifest, objects: v.objects })
    });
    staged.collect()
}

/// Stage 9: every staged folder replaces its set's dist folder, then
/// the locks are written ([`LockMode::Update`]).
fn commit(mode: LockMode, packaged: Vec<Packaged>) -> Result<Committed> {
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
    if mode == LockMode::Update {
        for o in &outcomes {
            let mut l = if o.lock.exists() { lock::Lock::load(&o.lock)? } else { lock::Lock::of(&o.manifest) };
            l.update(&o.manifest, &o.objects, o.payloads.as_ref());
            l.write(&o.lock)?;
        }
    }
    Ok(Committed { outcomes, package_keys: keys })
}

/// A packaged set's payloads: each artifact's and bundle's compressed bytes
/// by its dist path, the static library's slices and the CUDA runtime.
fn payloads(g: &Graph, nodes: &SetNodes, p: &graph::Packaging, built: &[Built]) -> package::Payloads {
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
fn objects(g: &Graph, nodes: &SetNodes, built: &[Built]) -> Result<lock::Digests> {
    let inputs = nodes.archives.iter().flat_map(|&a| &g.nodes[a].inputs);
    inputs.map(|(o, _)| Ok((collect::object_path(g.job(*o)), fetch::sha256_file(&built[*o].path)?))).collect()
}
