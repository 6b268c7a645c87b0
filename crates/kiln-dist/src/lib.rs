//! `cargo xtask dist` as a library: from the pin file to `target/dist/`.
//!
//! [`run`] provisions the pinned toolchain and checks it ([`compilers`]),
//! fetches the kernel sources, selects the jobs ([`select`]), runs them
//! through kiln-build's cache, reads every output back ([`collect`]), and
//! only when all of that succeeded replaces the dist folder in one step
//! ([`output`]). [`lock`] compares the result with the committed hashes.
//! Beyond one machine: [`shard`] builds a part of the plan (balanced by
//! [`costs`]) into a [`part`], and [`merge`] assembles parts into the same
//! dist folder a single machine writes.

pub mod cache_admin;
pub mod collect;
pub mod compilers;
pub mod costs;
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
use kiln_build::{run_all, upstream, upstream::SourceCrate, Job, Plan};
use kiln_manifest::{Manifest, Toolchain};
use kiln_pins::Pins;
use kiln_toolchain::{remote, sysroot, Cache, Runner};

pub use select::Selection;

/// Where kiln's HIP shims live, relative to the repository root.
pub const SHIMS_DIR: &str = "kernels/hip";

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
    let toolchain = compilers::check(&runner, pins)?;

    let c = &pins.candle;
    let source = upstream::fetch_crate(&cache, &c.crate_name, &c.version, &c.sha256, &|l| say(l))?;
    let shims = opts.repo.join(SHIMS_DIR);
    if !shims.is_dir() {
        bail!("kiln's HIP shims are missing: {} is not a folder", shims.display());
    }
    let plan = Plan::new(source.root.clone(), format!("{} {}", c.crate_name, c.version), shims);
    Ok(Prepared { cache, runner, toolchain, source, plan })
}

/// The compile jobs of `selection`: the module jobs, then the static
/// library's objects; and how many of them are module jobs.
pub fn compile_jobs(selection: &Selection, plan: &Plan, pins: &Pins) -> Result<(Vec<Job>, usize)> {
    let jobs = selection.module_jobs(plan, pins)?;
    let objects = if selection.wants_staticlib(pins) { selection.object_jobs(plan, pins)? } else { Vec::new() };
    let n_modules = jobs.len();
    Ok((jobs.into_iter().chain(objects).collect(), n_modules))
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

    let (all, n_modules) = compile_jobs(&opts.selection, &plan, pins)?;
    say(format!(
        "building {} of {} ({} module jobs, {} static-library objects) with {} workers; cache {}",
        opts.selection.describe(),
        plan.src_name,
        n_modules,
        all.len() - n_modules,
        opts.workers,
        cache.root().display()
    ));
    let run_opts = kiln_build::Options { workers: opts.workers, verbose: opts.verbose, no_compile: opts.no_compile, ..Default::default() };
    let results = run_all(&runner, &cache, &all, &run_opts, say);
    let built = collect::successes(&all, results)?;
    let store = kiln_build::store::Store::new(&cache);
    let compiled = built.iter().map(|(j, b)| (costs::label(j), if b.cached { store.seconds(&b.key) } else { Some(b.seconds) })).collect();

    let mut collected = collect::artifacts(pins, &built[..n_modules])?;
    if n_modules < all.len() {
        collected.push(collect::staticlib(&runner, &cache, &plan, pins, &source, &built[n_modules..], say)?);
    }
    collect::compare_kernel_sets(pins, &collected)?;
    let bundles = collect::hip_bundles(&cache, pins, &collected)?;
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
    let (crates, package_key) = if opts.package && opts.selection.is_all() {
        let (records, key) = package::crates(&runner, &cache, &plan, pins, &opts.repo, &source, &manifest, &staged.dir, say)?;
        (records, Some(key))
    } else {
        if opts.package {
            say("not packaging crates: they need every artifact, and this run built a selection".into());
        }
        (Vec::new(), None)
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
            bundles: collected.iter().filter(|c| c.artifact.kind == kiln_manifest::Kind::Bundle).map(|c| name(&c.file)).collect(),
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
