//! `dist --shard K/N`: one of N machines builds its part of the plan.
//!
//! The plan's compile jobs are cut into N parts of about equal estimated
//! seconds ([`partition`]: longest job first onto the least-loaded shard,
//! ties broken by name), from the committed cost table ([`crate::costs`]), so
//! every machine cuts the same plan the same way without talking to the
//! others. A shard compiles and validates its jobs and writes a part folder
//! ([`crate::part`]): the outputs and `part.json`, naming the shard and the
//! plan's identity. The assembling steps (static-library archive, HIP
//! bundles, manifest, crates) are left to `dist merge`, which needs every part.

use std::path::Path;

use anyhow::{bail, Context, Result};
use kiln_build::{job::Hashes, run_graph, Job, JobKind, Node, Plan};
use kiln_manifest::short;
use kiln_pins::{KernelSet, Pins};
use kiln_toolchain::fetch;

use crate::{
    builder::{Planned, Provisioned},
    collect,
    costs::{self, Costs},
    output::{self, Staged},
    part::{self, Part, PartJob, PlanIdentity, Spec},
    Builder, LockMode, Selection, SetOutput,
};

/// The one set a shard or a merge is of, and how much of it.
pub(crate) struct OneSet<'a> {
    pub(crate) pins: &'a Pins,
    pub(crate) set: &'a KernelSet,
    pub(crate) output: SetOutput,
    pub(crate) selection: Selection,
}

/// Which shard (1..=n) each job goes to: longest first onto the shard with
/// the least estimated time so far (the lowest-numbered on a tie); equal
/// costs are ordered by label. Depends on nothing but its arguments.
pub fn partition(labels: &[String], cost_ms: &[u64], n: u32) -> Vec<u32> {
    assert_eq!(labels.len(), cost_ms.len());
    let mut order: Vec<usize> = (0..labels.len()).collect();
    order.sort_by(|&a, &b| cost_ms[b].cmp(&cost_ms[a]).then_with(|| labels[a].cmp(&labels[b])));
    let mut load = vec![0u64; n as usize];
    let mut shard = vec![0u32; labels.len()];
    for i in order {
        let (s, _) = load.iter().enumerate().min_by_key(|&(s, l)| (*l, s)).expect("n >= 1");
        load[s] += cost_ms[i];
        shard[i] = s as u32 + 1;
    }
    shard
}

/// The recipe of every job (whose sha256 is the cache key kiln-build's runner uses).
pub fn recipes(jobs: &[Job], toolchain: &str) -> Result<Vec<String>> {
    let hashes = Hashes::default();
    jobs.iter().map(|j| j.recipe(toolchain, &hashes).with_context(|| format!("cannot hash the inputs of {j}"))).collect()
}

/// The identity of the plan `jobs` (with `keys`) of `one`'s selection
/// (whose sources have `source_sha256`).
fn identity(one: &OneSet, source_sha256: &str, toolchain: &str, jobs: &[Job], keys: &[String], costs_text: &[u8]) -> Result<PlanIdentity> {
    let set = one.set;
    // The main set's plans keep the identity they always had; another set's names itself.
    let set_name = one.output.named();
    // As the lock's `source` line writes it (a crate: name version sha256; a folder: path sha256).
    let source = match &set.source {
        kiln_pins::Source::Crate { name, version, sha256 } => format!("{name} {version} {sha256}"),
        kiln_pins::Source::Folder { path } => format!("{path} {source_sha256}"),
    };
    let targets: Vec<String> = crate::select::known_targets(&[set]).iter().map(|t| t.to_string()).collect();
    let costs = if costs_text.is_empty() { String::new() } else { kiln_manifest::sha256_hex(costs_text) };
    // `--module a --module b` and `--module b --module a` select the same jobs.
    let sorted = |v: &[String]| -> Vec<String> {
        let mut v = v.to_vec();
        v.sort();
        v.dedup();
        v
    };
    let archs: Vec<String> = one.selection.archs.iter().map(|t| t.to_string()).collect();
    let (modules, archs) = (sorted(&one.selection.modules), sorted(&archs));
    let mut text = String::from("kiln-plan v1\n");
    if let Some(name) = &set_name {
        text.push_str(&format!("set {name}\n"));
    }
    text.push_str(&format!(
        "toolchain {toolchain}\nsource {source}\ntargets {}\nmodules {}\narchs {}\ncosts {costs}\n",
        targets.join(" "),
        modules.join(" "),
        archs.join(" ")
    ));
    for (j, k) in jobs.iter().zip(keys) {
        text.push_str(&format!("job {} {k}\n", costs::label(j)));
    }
    Ok(PlanIdentity {
        id: kiln_manifest::sha256_hex(text.as_bytes()),
        set: set_name,
        toolchain: toolchain.to_string(),
        source,
        targets,
        modules,
        archs,
        costs,
        jobs: jobs.len(),
    })
}

/// The whole plan as the shards and the merge see it.
pub struct ShardPlan {
    pub jobs: Vec<Job>,
    /// How many of `jobs` (the first ones) are module jobs; the rest are static-library objects.
    pub n_modules: usize,
    pub recipes: Vec<String>,
    pub keys: Vec<String>,
    pub labels: Vec<String>,
    pub cost_ms: Vec<u64>,
    pub identity: PlanIdentity,
}

impl ShardPlan {
    /// The plan of `one` (planned as `planned`, its only set) with the cost table at `costs_path`.
    pub(crate) fn new(one: &OneSet, tools: &Provisioned, planned: &Planned, costs_path: &Path) -> Result<ShardPlan> {
        let costs_text = std::fs::read(costs_path).unwrap_or_default();
        let costs = Costs::load(costs_path)?;
        let jobs = compile_jobs(&one.selection, &planned.plans[0], one.pins)?;
        let n_modules = jobs.iter().filter(|j| j.kind != JobKind::Object).count();
        let toolchain = &tools.runner.sysroot().identity;
        let recipes = recipes(&jobs, toolchain)?;
        let keys: Vec<String> = recipes.iter().map(|r| Job::key(r)).collect();
        let labels: Vec<String> = jobs.iter().map(costs::label).collect();
        let cost_ms = costs.estimate(&jobs);
        let identity = identity(one, &planned.sources[0].sha256, toolchain, &jobs, &keys, &costs_text)?;
        Ok(ShardPlan { jobs, n_modules, recipes, keys, labels, cost_ms, identity })
    }

    /// Shard number (1..=n) of every job.
    pub fn assignment(&self, n: u32) -> Vec<u32> {
        partition(&self.labels, &self.cost_ms, n)
    }
}

/// What a shard run wrote.
pub struct PartOutcome {
    pub part: Part,
    pub out: std::path::PathBuf,
    pub built: usize,
    pub seconds: f64,
}

/// Where a module job's artifact goes in the dist folder.
fn dist_path(job: &Job) -> Option<String> {
    (job.kind != JobKind::Object).then(|| collect::dist_path(job))
}

/// The compile jobs of `selection` (what shards divide): the module jobs,
/// then the static library's (a per-target library's cubins, then its host CPUs'
/// objects), in plan order, as the dist's graph has them.
fn compile_jobs(selection: &Selection, plan: &Plan, pins: &Pins) -> Result<Vec<Job>> {
    let mut jobs = selection.module_jobs(plan, pins)?;
    if selection.wants_staticlib(&plan.set) {
        let lib = selection.library_jobs(plan, pins)?;
        let objects: Vec<Job> = lib.objects().cloned().collect();
        jobs.extend(lib.cubins);
        jobs.extend(objects);
    }
    Ok(jobs)
}

/// [`Builder::shard`]: builds shard `spec` of the builder's one set into its
/// part folder, replaced whole at the end (or left as it was on any failure).
pub(crate) fn run(b: &Builder, spec: Spec, say: &(dyn Fn(String) + Sync)) -> Result<PartOutcome> {
    let start = std::time::Instant::now();
    let one = b.one_set_of_shard()?;
    let out = b.part_folder(&one.output, spec);
    part::check_out(&out)?;
    output::remove_stale_siblings(&out);
    // Only the shard's own artifacts and objects are compared with the lock (`--locked`).
    let lock = if b.lock == LockMode::Check { Some(crate::lock::Lock::load(&one.output.lock)?) } else { None };
    let tools = b.provision(&[one.set], &one.selection, b.remote.clone(), say)?;
    let planned = b.plan(&tools, &[one.set], say)?;
    let plan = ShardPlan::new(&one, &tools, &planned, &b.base.join(costs::FILE_NAME))?;
    let shard = plan.assignment(spec.n);
    let mine: Vec<usize> = (0..plan.jobs.len()).filter(|&i| shard[i] == spec.k).collect();
    let jobs: Vec<Job> = mine.iter().map(|&i| plan.jobs[i].clone()).collect();
    let total: u64 = plan.cost_ms.iter().sum();
    let estimated: u64 = mine.iter().map(|&i| plan.cost_ms[i]).sum();
    let largest = mine.iter().max_by_key(|&&i| plan.cost_ms[i]);
    say(format!(
        "shard {spec} of plan {} ({} jobs, ~{:.0} s): {} jobs, ~{:.0} s{}; cache {}",
        short(&plan.identity.id, 12),
        plan.jobs.len(),
        total as f64 / 1e3,
        jobs.len(),
        estimated as f64 / 1e3,
        largest.map(|&i| format!(", the longest {} (~{:.0} s)", plan.labels[i], plan.cost_ms[i] as f64 / 1e3)).unwrap_or_default(),
        tools.cache.root().display()
    ));

    let run_opts = kiln_build::Options { workers: b.workers, verbose: b.verbose, no_compile: b.no_compile, ..Default::default() };
    let nodes: Vec<Node> = jobs.iter().cloned().map(Node::command).collect();
    let results = run_graph(&tools.runner, &tools.cache, &nodes, &run_opts, say);
    let built: Vec<(Job, kiln_build::Built)> = jobs.iter().cloned().zip(collect::successes(&nodes, results)?).collect();
    for (i, (j, b)) in mine.iter().zip(&built) {
        if b.key != plan.keys[*i] {
            bail!("{j}: the runner's cache key {} is not the plan's {}: kiln-build and kiln-dist disagree on the recipe", b.key, plan.keys[*i]);
        }
    }
    // Every module artifact is read back here already: a bad one fails this
    // shard, on the machine that built it, not the merge.
    let modules: Vec<_> = built.iter().filter(|(j, _)| j.kind != JobKind::Object).cloned().collect();
    let collected = collect::artifacts(&one.set.targets, &modules)?;
    if let Some(lock) = &lock {
        let m = collect::manifest(one.set, one.output.is_main, &planned.sources[0].sha256, tools.toolchain.clone(), &collected);
        let objects = built
            .iter()
            .filter(|(j, _)| j.kind == JobKind::Object)
            .map(|(j, b)| Ok((collect::object_path(j), fetch::sha256_file(&b.path)?)))
            .collect::<Result<crate::lock::Digests>>()?;
        let diff = lock.check(&one.output.lock_name(), crate::lock::Made { manifest: Some(&m), objects: Some(&objects), ..Default::default() });
        if !diff.is_empty() {
            bail!("--locked: {} difference(s) from {}; no part was written:\n  {}", diff.len(), one.output.lock_name(), diff.join("\n  "));
        }
    }
    let part = write_part(&tools, &out, spec, &plan, estimated, &built)?;
    if let Some(r) = tools.cache.remote() {
        say(r.summary());
    }
    let n_built = built.iter().filter(|(_, b)| !b.cached).count();
    Ok(PartOutcome { part, out, built: n_built, seconds: start.elapsed().as_secs_f64() })
}

/// The part folder `out`: every built job's output (a copy: nothing done to
/// the part may reach the cache) and `part.json`, staged and then put in place.
fn write_part(tools: &Provisioned, out: &Path, spec: Spec, plan: &ShardPlan, estimated: u64, built: &[(Job, kiln_build::Built)]) -> Result<Part> {
    let staged = Staged::begin(out, part::OWNER)?;
    let store = kiln_build::store::Store::new(&tools.cache);
    let mut part_jobs = Vec::new();
    for (job, b) in built {
        let rel = format!("{}/{}/{}", part::JOBS_DIR, b.key, job.output);
        let dest = staged.dir.join(&rel);
        std::fs::create_dir_all(dest.parent().expect("jobs/<key> has a parent"))?;
        std::fs::copy(&b.path, &dest).with_context(|| format!("cannot copy {} to {}", b.path.display(), dest.display()))?;
        let sha256 = fetch::sha256_file(&dest)?;
        let size = std::fs::metadata(&dest)?.len();
        part_jobs.push(PartJob {
            job: costs::label(job),
            key: b.key.clone(),
            file: rel,
            size,
            sha256,
            dist_path: dist_path(job),
            seconds: (!b.cached).then_some(b.seconds).or_else(|| store.seconds(&b.key)),
        });
    }
    let part = Part::new(spec, plan.identity.clone(), estimated, part_jobs);
    std::fs::write(staged.dir.join(part::FILE_NAME), part.to_json()).with_context(|| format!("cannot write {}", part::FILE_NAME))?;
    output::failpoint("part-staged");
    staged.commit(out)?;
    Ok(part)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("job{i:02}")).collect()
    }

    #[test]
    fn the_partition_balances_and_depends_only_on_its_inputs() {
        let l = labels(7);
        let c = vec![50, 40, 30, 30, 20, 10, 10];
        let s = partition(&l, &c, 2);
        assert_eq!(s, partition(&l, &c, 2), "deterministic");
        let load = |k: u32| -> u64 { s.iter().zip(&c).filter(|(x, _)| **x == k).map(|(_, c)| *c).sum() };
        assert_eq!(load(1) + load(2), 190);
        assert!(load(1).abs_diff(load(2)) <= 10, "{} vs {}", load(1), load(2));
        // Every job in exactly one shard, for any N, and none in a shard > N.
        for n in 1..=9 {
            let s = partition(&l, &c, n);
            assert!(s.iter().all(|&k| (1..=n).contains(&k)), "{n}: {s:?}");
        }
        // The longest job alone caps a shard: with as many shards as jobs, each gets one.
        let s = partition(&l, &c, 7);
        let mut sorted = s.clone();
        sorted.sort();
        assert_eq!(sorted, (1..=7).collect::<Vec<_>>());
        // More shards than jobs leaves some empty rather than failing.
        assert_eq!(partition(&l[..2], &c[..2], 4), vec![1, 2]);
    }

    #[test]
    fn equal_costs_are_cut_by_name_not_by_input_order() {
        let l = labels(4);
        let c = vec![5, 5, 5, 5];
        let forward = partition(&l, &c, 2);
        let mut rl = l.clone();
        rl.reverse();
        let mut backward = partition(&rl, &c, 2);
        backward.reverse();
        assert_eq!(forward, backward);
    }
}
