//! `dist merge DIR...`: the parts of N shards into the dist folder of the set
//! they are of, exactly as a single machine writes it.
//!
//! The parts are checked against each other and against the plan this
//! checkout makes (same identity, every job exactly once, every file whole,
//! every artifact and static-library object as the set's lock has it, whenever
//! there is one), and every problem is named
//! before anything is written. Then each output goes into the local cache
//! under its job key, and the ordinary dist runs with compiling turned off:
//! every compile job is a cache hit, and the assembling steps (static-library
//! archive, HIP bundles, manifest, crates) run here, through the same code as
//! on one machine. That is why the result is the same, byte for byte.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
};

use anyhow::{bail, Context as _, Result};
use kiln_build::store::Store;
use kiln_manifest::short;
use kiln_toolchain::fetch;

use crate::{
    lock::{Entry, Lock, Table},
    output,
    part::{Part, PartJob},
    select::Selection,
    settings::{LockMode, Scope, SetScope, Settings},
    shard::ShardPlan,
    stages::{Context, Dist},
};

/// Reads every part, naming each folder that is not one.
fn read_parts(dirs: &[PathBuf]) -> Result<Vec<(PathBuf, Part)>> {
    if dirs.is_empty() {
        bail!("dist merge: give the part folders that `cargo xtask dist --shard K/N` wrote, one per shard");
    }
    let mut parts = Vec::new();
    let mut problems = Vec::new();
    for d in dirs {
        match Part::read(d) {
            Ok(p) => parts.push((d.clone(), p)),
            Err(e) => problems.push(format!("{e:#}")),
        }
    }
    if !problems.is_empty() {
        bail!("{} of the {} folders given are not dist parts; nothing was written:\n  {}", problems.len(), dirs.len(), problems.join("\n  "));
    }
    Ok(parts)
}

/// The parts must be the shards of one plan, cut once, each given once.
fn check_together(parts: &[(PathBuf, Part)]) -> Result<()> {
    let (d0, p0) = &parts[0];
    let mut problems = Vec::new();
    for (d, p) in &parts[1..] {
        if p.plan != p0.plan {
            problems.push(format!(
                "{} is a part of another plan than {} ({} vs {}): {}",
                d.display(),
                d0.display(),
                short(&p.plan.id, 12),
                short(&p0.plan.id, 12),
                p0.plan.differences(&p.plan).join("; ")
            ));
        } else if p.shard.n != p0.shard.n {
            problems.push(format!(
                "{} is shard {} but {} is shard {}: parts of one merge come from one --shard K/N",
                d.display(),
                p.shard,
                d0.display(),
                p0.shard
            ));
        }
    }
    let mut seen: BTreeMap<u32, &PathBuf> = BTreeMap::new();
    for (d, p) in parts {
        if let Some(first) = seen.insert(p.shard.k, d) {
            problems.push(format!("shard {} is given twice: {} and {}", p.shard, first.display(), d.display()));
        }
    }
    if !problems.is_empty() {
        bail!("the parts do not belong together; nothing was written:\n  {}", problems.join("\n  "));
    }
    Ok(())
}

/// What [`prepare`] found: the set and selection the parts were built of,
/// which the ordinary build then builds with compiling turned off
/// ([`crate::Builder::merge`]), and the lock its result is read back against.
pub(crate) struct Merging {
    pub(crate) set: String,
    pub(crate) selection: Selection,
    /// The set's lock, when `--locked` compares the whole result with it.
    locked: Option<Lock>,
    lock_name: String,
}

/// [`crate::Builder::merge`]'s first half: reads `dirs`, the parts of one
/// set, checks them and puts their outputs into the cache. The set's lock,
/// where there is one, holds the committed hashes each part's artifacts are
/// checked against (where it is for these pins); [`LockMode::Check`] also
/// requires it, and the whole result to match it ([`Merging::read_back`]).
pub(crate) fn prepare(settings: &Settings, dirs: &[PathBuf], say: &(dyn Fn(String) + Sync)) -> Result<Merging> {
    let parts = read_parts(dirs)?;
    check_together(&parts)?;
    let first = &parts[0].1;
    let n = first.shard.n;
    let locked = settings.lock == LockMode::Check;
    // The parts say which set and selection were built; this merge builds the same.
    let set = settings.set_named(first.plan.set.as_deref()).context("the parts are of a set this pin file does not have")?;
    let set_out = settings.output_of(&set.name);
    let lock_name = set_out.lock_name();
    let lock = if locked || set_out.lock.exists() {
        Some(Lock::load(&set_out.lock).with_context(|| format!("set `{}`: --locked compares with {lock_name}", set.name))?)
    } else {
        None
    };
    let selection = Selection::new(first.plan.modules.clone(), &first.plan.archs, &[set])?;
    output::check(&set_out.folder)?;
    // The checks need no remote cache; the dist after them uses it, if one is given.
    let scope = Scope { selection: selection.clone(), sets: vec![SetScope { set, output: set_out, lock: None }] };
    let cx = Context::new(settings, scope, None, say)?;
    let plan = ShardPlan::new(&cx)?;
    if plan.identity != first.plan {
        bail!(
            "the parts are of plan {}, but this checkout makes plan {}: {}; merge parts on a checkout of the commit the shards built",
            short(&first.plan.id, 12),
            short(&plan.identity.id, 12),
            first.plan.differences(&plan.identity).join("; ")
        );
    }
    say(format!("merging {} part(s) of plan {} ({} jobs, {} shards)", parts.len(), short(&plan.identity.id, 12), plan.jobs.len(), n));
    let chosen = check_parts(&parts, &plan, lock.as_ref(), locked, &lock_name, say)?;
    import(&cx.tools.cache, &parts, &plan, &chosen, say)?;
    Ok(Merging { set: set.name.clone(), selection, locked: lock.filter(|_| locked), lock_name })
}

impl Merging {
    /// [`crate::Builder::merge`]'s last step: with `--locked`, the whole
    /// result, read back from the folder as a consumer gets it.
    pub(crate) fn read_back(&self, dist: &Dist, say: &(dyn Fn(String) + Sync)) -> Result<()> {
        let Some(lock) = &self.locked else { return Ok(()) };
        let outcome = &dist.sets[0];
        let (artifacts, crates) = crate::verify::folder(&outcome.out, lock)?;
        say(format!(
            "{}: read back: {artifacts} artifacts match the manifest and {}, {crates} crates match crates.json",
            outcome.out.display(),
            self.lock_name
        ));
        Ok(())
    }
}

/// Every job of `plan` in exactly one part, every file whole, and every
/// artifact the one the lock names; every problem is named before any is
/// refused. Returns, per job of the plan, the part and the part's record of it.
fn check_parts<'p>(
    parts: &'p [(PathBuf, Part)],
    plan: &ShardPlan,
    lock: Option<&Lock>,
    locked: bool,
    lock_name: &str,
    say: &(dyn Fn(String) + Sync),
) -> Result<Vec<(usize, &'p PartJob, String)>> {
    let n = parts[0].1.shard.n;
    let mut problems = Vec::new();
    // Every job exactly once.
    let mut by_key: BTreeMap<&str, Vec<(usize, &PartJob)>> = BTreeMap::new();
    for (i, (_, p)) in parts.iter().enumerate() {
        for j in &p.jobs {
            by_key.entry(j.key.as_str()).or_default().push((i, j));
        }
    }
    let assignment = plan.assignment(n);
    let given: BTreeSet<u32> = parts.iter().map(|(_, p)| p.shard.k).collect();
    for k in (1..=n).filter(|k| !given.contains(k)) {
        let count = assignment.iter().filter(|&&s| s == k).count();
        if count > 0 {
            problems.push(format!("shard {k}/{n} was not given: its {count} job(s) are missing"));
        }
    }
    let mut chosen: Vec<Option<(usize, &PartJob)>> = vec![None; plan.jobs.len()];
    // Per job, its cache recipe: a job that reads others' outputs (jobs before
    // it) hashes the files the parts hold of them, as the runner did.
    let mut recipes: Vec<Option<String>> = vec![None; plan.jobs.len()];
    for i in 0..plan.jobs.len() {
        let label = &plan.labels[i];
        let output = |d: usize| chosen[d].map(|(p, j): (usize, &PartJob)| Part::file(&parts[p].0, j));
        let Ok(recipe) = plan.cache_recipe(i, &output) else {
            // What it reads is missing from the parts: named there.
            continue;
        };
        let key = kiln_build::Job::key(&recipe);
        recipes[i] = Some(recipe);
        match by_key.remove(key.as_str()).unwrap_or_default().as_slice() {
            [] if given.contains(&assignment[i]) => {
                problems.push(format!("{label}: missing from the part of shard {}/{n}, which should hold it", assignment[i]))
            }
            [] => {}
            [one] => chosen[i] = Some(*one),
            several => problems.push(format!(
                "{label}: in {} parts ({}); each job belongs to one shard",
                several.len(),
                several.iter().map(|(p, _)| parts[*p].0.display().to_string()).collect::<Vec<_>>().join(", ")
            )),
        }
    }
    for (key, rest) in by_key {
        for (p, j) in rest {
            problems.push(format!("{}: holds `{}` ({key}), which is not a job of this plan", parts[p].0.display(), j.job));
        }
    }

    // Every file whole, and every artifact the one the lock names.
    let lock_applies = lock.filter(|l| l.applies_to(&plan.identity.toolchain, &plan.identity.source));
    if lock.is_some() && lock_applies.is_none() {
        let line = format!("{lock_name} is for other pins than these parts (toolchain or source differ): their artifacts are not compared with it");
        if locked {
            problems.push(line);
        } else {
            say(format!("warning: {line}"));
        }
    }
    if lock_applies.is_some_and(|l| l.objects.is_empty()) && plan.jobs.iter().any(|j| j.kind == kiln_build::JobKind::Object) {
        say(format!(
            "warning: {lock_name} holds no static-library objects (written before it did): the parts' objects are not compared with it; \
             `--update-lock` adds them"
        ));
    }
    for (i, (p, j)) in chosen.iter().enumerate().filter_map(|(i, c)| c.map(|c| (i, c))) {
        let (dir, part) = &parts[p];
        let file = Part::file(dir, j);
        let whose = format!("{} (shard {}, {})", dir.display(), part.shard, j.job);
        match fetch::sha256_file(&file) {
            Err(_) => problems.push(format!("{whose}: {} is missing: the part is incomplete", j.file)),
            Ok(h) if h != j.sha256 => problems.push(format!(
                "{whose}: {} has sha256 {}, but {} says {} (damaged on the way?)",
                j.file,
                short(&h, 16),
                crate::part::FILE_NAME,
                &j.sha256[..16.min(j.sha256.len())]
            )),
            Ok(_) => {
                // Every file taken from a part, artifact or static-library
                // object, against the lock whenever there is one for these pins.
                let Some(lock) = lock_applies else { continue };
                let (path, table) = match &j.dist_path {
                    Some(path) => (path.clone(), Table::Artifacts),
                    // A library's PTX is no artifact and not locked: the cubins made of it are.
                    None if plan.jobs[i].kind == kiln_build::JobKind::LibPtx => continue,
                    None if lock.objects.is_empty() => continue,
                    None => (crate::collect::object_path(&plan.jobs[i]), Table::Objects),
                };
                match lock.entry(table, &path, &j.sha256) {
                    Entry::Differs(h) => {
                        problems.push(format!("{whose}: {path} has sha256 {}, {lock_name} says {}", short(&j.sha256, 16), short(h, 16)))
                    }
                    Entry::Absent if locked => problems.push(format!("{whose}: {path} is not in {lock_name} (--locked)")),
                    _ => {}
                }
            }
        }
    }
    if !problems.is_empty() {
        bail!("{} problem(s) with the parts; nothing was written:\n  {}", problems.len(), problems.join("\n  "));
    }
    Ok(chosen
        .into_iter()
        .zip(recipes)
        .map(|(c, r)| {
            let (p, j) = c.expect("checked above: every job is in one part");
            (p, j, r.expect("every job in a part has its recipe"))
        })
        .collect())
}

/// Each job's output into the local cache under its key, from the part that holds it.
fn import(
    cache: &kiln_toolchain::Cache,
    parts: &[(PathBuf, Part)],
    plan: &ShardPlan,
    chosen: &[(usize, &PartJob, String)],
    say: &(dyn Fn(String) + Sync),
) -> Result<()> {
    let store = Store::new(cache);
    for (i, (p, j, recipe)) in chosen.iter().enumerate() {
        let (dir, part) = &parts[*p];
        let origin = format!("dist part {} (shard {})", dir.display(), part.shard);
        store.import(&kiln_build::Job::key(recipe), recipe, &plan.jobs[i].output, &Part::file(dir, j), &j.sha256, &origin)?;
    }
    for (dir, part) in parts {
        let measured: f64 = part.jobs.iter().filter_map(|j| j.seconds).sum();
        say(format!("  shard {}: {} jobs from {} (Σ {:.0} s of compiling where built)", part.shard, part.jobs.len(), dir.display(), measured));
    }
    Ok(())
}
