//! `cargo xtask dist` as a library: from the pin file to `target/dist/`.
//!
//! [`run`] provisions the pinned toolchain and checks it ([`compilers`]),
//! fetches the kernel sources, selects the jobs ([`select`]) and makes them
//! one job graph with the static library, the HIP bundles and the crates'
//! payloads ([`graph`]), runs it through kiln-build's cache, reads every
//! output back ([`collect`]), packages the crates ([`package`]), and only
//! when all of that succeeded replaces the dist folder in one step
//! ([`output`]). [`lock`] compares the result with the committed hashes.
//! Beyond one machine: [`shard`] builds a part of the plan's compiles
//! (balanced by [`costs`]) into a [`part`], and [`merge`] assembles parts
//! into the same dist folder a single machine writes.

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
pub mod shard;
pub mod verify;

use std::path::PathBuf;

use anyhow::{bail, Result};
use kiln_build::{run_graph, upstream, upstream::SourceCrate, Job, Plan};
use kiln_manifest::{Manifest, Toolchain};
use kiln_pins::Pins;
use kiln_toolchain::{remote, sysroot, Cache, Runner};

pub use select::Selection;

/// Where kiln's HIP shims live, relative to the repository root.
pub const SHIMS_DIR: &str = "kernels/hip";
/// Where kiln's CUDA headers live (force-included into the static library's objects).
pub const CUDA_HEADERS_DIR: &str = "kernels/cuda";

#[derive(Clone)]
pub struct Options {
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

pub struct Outcome {
    pub manifest: Manifest,
    /// The packaged artifact crates (empty when not packaged).
    pub crates: Vec<package::CrateRecord>,
    pub out: PathBuf,
    pub seconds: f64,
    /// Every compile job ([`costs::label`]) and the seconds it took where it
    /// was built, if its cache entry recorded them (`--update-costs`).
    pub compiled: Vec<(String, Option<f64>)>,
}

/// What every run needs before its jobs run: the cache, the checked
/// toolchain, the verified sources and the plan over them.
pub struct Prepared {
    pub cache: Cache,
    pub runner: Runner,
    pub toolchain: Toolchain,
    pub source: SourceCrate,
    pub plan: Plan,
}

/// Cleans up after interrupted runs, provisions and checks the pinned
/// toolchain and fetches the pinned sources.
pub fn prepare(pins: &Pins, opts: &Options, say: &(dyn Fn(String) + Sync)) -> Result<Prepared> {
    let cache = Cache::from_env()?.with_remote(opts.remote.clone());
    if let Some(r) = cache.remote() {
        say(format!("remote cache {}{}", r.url(), if r.config().read_only { " (read-only)" } else { "" }));
    }
    let (stale, bytes) = cache.remove_stale_scratch()?;
    if stale > 0 {
        say(format!("removed {stale} scratch folder(s) of interrupted runs ({:.1} MB) from {}", bytes as f64 / 1e6, cache.tmp().display()));
    }
    opts.selection.check(pins)?;
    let root = sysroot::provision(&cache, pins, opts.workers, say)?;
    let runner = Runner::new(root)?;
    let ptxas = if opts.selection.needs_ptxas(pins) { compilers::ptxas(&runner, &cache, pins)? } else { None };
    let toolchain = compilers::check(&runner, pins, ptxas.as_ref())?;

    let c = &pins.candle;
    let source = upstream::fetch_crate(&cache, &c.crate_name, &c.version, &c.sha256, &|l| say(l))?;
    let shims = opts.repo.join(SHIMS_DIR);
    if !shims.is_dir() {
        bail!("kiln's HIP shims are missing: {} is not a folder", shims.display());
    }
    let mut plan =
        Plan::new(source.root.clone(), format!("{} {}", c.crate_name, c.version), shims).with_cuda_headers(opts.repo.join(CUDA_HEADERS_DIR));
    if let Some(tool) = ptxas {
        plan = plan.with_ptxas(tool);
    }
    Ok(Prepared { cache, runner, toolchain, source, plan })
}

/// The compile jobs of `selection` (what shards divide): the module jobs,
/// then the static library's objects, in plan order.
pub fn compile_jobs(selection: &Selection, plan: &Plan, pins: &Pins) -> Result<Vec<Job>> {
    let mut jobs = selection.module_jobs(plan, pins)?;
    if selection.wants_staticlib(pins) {
        jobs.extend(selection.object_jobs(plan, pins)?);
    }
    Ok(jobs)
}

/// Builds, validates and publishes; on any error the previous `out` is left as it was.
pub fn run(pins: &Pins, opts: &Options, say: &(dyn Fn(String) + Sync)) -> Result<Outcome> {
    let start = std::time::Instant::now();
    opts.selection.check(pins)?;
    // Before hours of compiling: a --out that is not ours fails now, not at the end.
    output::check(&opts.out)?;
    let stale = output::remove_stale_siblings(&opts.out);
    if stale > 0 {
        say(format!("removed {stale} half-published dist folder(s) of interrupted runs beside {}", opts.out.display()));
    }

    let Prepared { cache, runner, toolchain, source, plan } = prepare(pins, opts, say)?;

    let package = opts.package && opts.selection.is_all();
    if opts.package && !package {
        say("not packaging crates: they need every artifact, and this run builds a selection".into());
    }
    let toolchain_files = kiln_package::sources::ToolchainFiles::in_sysroot(&runner.sysroot().root);
    let g = graph::build(pins, &plan, &opts.selection, package, &toolchain_files)?;
    say(format!(
        "building {} of {} ({}) with {} workers; cache {}",
        opts.selection.describe(),
        plan.src_name,
        g.describe(),
        opts.workers,
        cache.root().display()
    ));
    let run_opts = kiln_build::Options { workers: opts.workers, verbose: opts.verbose, no_compile: opts.no_compile, ..Default::default() };
    let results = run_graph(&runner, &cache, &g.nodes, &run_opts, say);
    let built = collect::successes(&g.nodes, results)?;
    let store = kiln_build::store::Store::new(&cache);
    let compiled = g
        .nodes
        .iter()
        .zip(&built)
        .filter_map(|(n, b)| match &n.work {
            kiln_build::Work::Command(j) if j.kind.is_compile() => {
                Some((costs::label(j), if b.cached { store.seconds(&b.key) } else { Some(b.seconds) }))
            }
            _ => None,
        })
        .collect();

    let modules: Vec<(kiln_build::Job, kiln_build::Built)> = g.modules.iter().map(|&i| (g.job(i).clone(), built[i].clone())).collect();
    let mut collected = collect::artifacts(pins, &modules)?;
    if let Some(a) = g.archive {
        collected.push(collect::staticlib(&source, g.job(a), &built[a])?);
    }
    collect::compare_kernel_sets(pins, &collected)?;
    let bundles: Vec<(String, kiln_build::Built)> = g.bundles.iter().map(|(m, i)| (m.clone(), built[*i].clone())).collect();
    let bundles = collect::hip_bundles(pins, &collected, &bundles)?;
    collected.extend(bundles);
    let manifest = collect::manifest(pins, toolchain, &collected);

    if let Some(lock) = &opts.locked {
        let diff = lock.differences(&manifest, opts.selection.is_all());
        if !diff.is_empty() {
            bail!("--locked: {} difference(s) from {}; the dist folder was left as it was:\n  {}", diff.len(), lock::FILE_NAME, diff.join("\n  "));
        }
    }
    let staged = output::stage(&opts.out, &manifest, &collected)?;
    output::failpoint("staged");
    let (crates, package_key) = match &g.package {
        Some(p) => {
            let mut artifacts = std::collections::BTreeMap::new();
            for &(of, payload) in &p.payloads {
                let path = match g.bundles.iter().find(|(_, i)| *i == of) {
                    Some((module, _)) => collect::bundle_path(module),
                    None => collect::dist_path(g.job(of)),
                };
                artifacts.insert(path, built[payload].path.clone());
            }
            let payloads = package::Payloads { artifacts, slices: built[p.slices].path.clone(), cudart: built[p.cudart].path.clone() };
            let (records, key) = package::crates(&runner, &cache, pins, &opts.repo, &source, &manifest, &payloads, &staged.dir, say)?;
            (records, Some(key))
        }
        None => (Vec::new(), None),
    };
    staged.commit(&opts.out)?;
    if opts.selection.is_all() {
        // What this checkout's plan uses, for `cargo xtask cache gc`.
        let name = |p: &std::path::Path| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let rec = cache_admin::PlanRecord {
            checkout: opts.repo.canonicalize().unwrap_or_else(|_| opts.repo.clone()),
            toolchain: runner.sysroot().identity.clone(),
            sources: vec![name(&source.root)],
            debs: pins.closure().map(|c| c.debs.iter().map(|d| format!("{}.deb", d.sha256)).collect()).unwrap_or_default(),
            keys: kiln_build::store::touched_keys(),
            packages: package_key.into_iter().collect(),
        };
        if let Err(e) = cache_admin::record(&cache, &rec) {
            say(format!("warning: cannot record what this dist used for `cargo xtask cache gc`: {e:#}"));
        }
    }
    if let Some(r) = cache.remote() {
        say(r.summary());
    }
    Ok(Outcome { manifest, crates, out: opts.out.clone(), seconds: start.elapsed().as_secs_f64(), compiled })
}
