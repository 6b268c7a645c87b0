//! `dist --shard K/N`: one of N machines builds its part of the plan.
//!
//! The plan's compile jobs are cut into N parts of about equal estimated
//! seconds ([`partition`]: longest job first onto the least-loaded shard,
//! ties broken by name), from the committed cost table ([`crate::costs`]), so
//! every machine cuts the same plan the same way without talking to the
//! others. A job that reads another's output (a library cubin assembled from
//! its file's PTX) is cut with it as one unit of their summed seconds, so a
//! shard runs both, as a graph. A shard compiles and validates its jobs and writes a part folder
//! ([`crate::part`]): the outputs and `part.json`, naming the shard and the
//! plan's identity. The assembling steps (static-library archive, HIP
//! bundles, manifest, crates) are left to `dist merge`, which needs every part.

use std::path::Path;

use anyhow::{bail, Context as _, Result};
use kiln_build::{job::Hashes, Job, JobKind, Node, Plan, Work};
use kiln_manifest::short;
use kiln_pins::Pins;
use kiln_toolchain::fetch;

use crate::{
    collect,
    costs::{self, Costs},
    output::{self, Staged},
    part::{self, Part, PartJob, PlanIdentity, Spec},
    select::Selection,
    settings::{LockMode, Settings},
    stages::{Context, Provisioned},
};

/// Which shard (1..=n) each job goes to: longest first onto the shard with
/// the least estimated time so far (the lowest-numbered on a tie); equal
/// costs are ordered by label. Depends on nothing but its arguments.
pub(crate) fn partition(labels: &[String], cost_ms: &[u64], n: u32) -> Vec<u32> {
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

/// [`partition`] of units rather than jobs: jobs joined by `reads` (each
/// job's inputs, by index) go to one shard, cut as one unit named by its
/// first job's label, of their summed cost. Returns each job's shard.
pub(crate) fn partition_units(labels: &[String], cost_ms: &[u64], reads: &[Vec<usize>], n: u32) -> Vec<u32> {
    let unit = units(reads);
    let mut roots: Vec<usize> = unit.clone();
    roots.sort_unstable();
    roots.dedup();
    let unit_labels: Vec<String> = roots.iter().map(|&r| labels[r].clone()).collect();
    let unit_cost: Vec<u64> = roots.iter().map(|&r| (0..labels.len()).filter(|&i| unit[i] == r).map(|i| cost_ms[i]).sum()).collect();
    let shard = partition(&unit_labels, &unit_cost, n);
    unit.iter().map(|u| shard[roots.binary_search(u).expect("every unit is a root")]).collect()
}

/// Each job's unit: the lowest index among the jobs it is joined to through
/// `reads` (either way, transitively).
pub(crate) fn units(reads: &[Vec<usize>]) -> Vec<usize> {
    let mut parent: Vec<usize> = (0..reads.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for (i, r) in reads.iter().enumerate() {
        for &d in r {
            let (a, b) = (root(&mut parent, i), root(&mut parent, d));
            parent[a.max(b)] = a.min(b);
        }
    }
    (0..reads.len()).map(|i| root(&mut parent, i)).collect()
}

/// The recipe of every job (whose sha256 is the cache key kiln-build's runner uses).
pub(crate) fn recipes(jobs: &[Job], toolchain: &str) -> Result<Vec<String>> {
    let hashes = Hashes::default();
    jobs.iter().map(|j| j.recipe(toolchain, &hashes).with_context(|| format!("cannot hash the inputs of {j}"))).collect()
}

/// The identity of the plan `jobs` (with `keys`) of the one set of `cx`.
fn identity(cx: &Context, toolchain: &str, jobs: &[Job], reads: &[Vec<(usize, String)>], keys: &[String], costs_text: &[u8]) -> Result<PlanIdentity> {
    let one = &cx.sets[0];
    let (set, source_sha256) = (one.set, &one.source.sha256);
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
    let archs: Vec<String> = cx.selection.archs.iter().map(|t| t.to_string()).collect();
    let (modules, archs) = (sorted(&cx.selection.modules), sorted(&archs));
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
    for (i, r) in reads.iter().enumerate().filter(|(_, r)| !r.is_empty()) {
        let names: Vec<String> = r.iter().map(|(d, name)| format!("{name}={}", costs::label(&jobs[*d]))).collect();
        text.push_str(&format!("reads {} {}\n", costs::label(&jobs[i]), names.join(" ")));
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

/// The jobs whose outputs a job reads (index into the plan's jobs) and the
/// name each is staged under in its job folder.
pub(crate) type Reads = Vec<(usize, String)>;

/// The whole plan as the shards and the merge see it.
pub(crate) struct ShardPlan {
    pub(crate) jobs: Vec<Job>,
    /// Per job, the earlier jobs whose outputs it reads: a library cubin's PTX.
    pub(crate) reads: Vec<Reads>,
    /// Per job, its recipe: for a job that reads others, without their
    /// bytes, which only exist once they are built ([`ShardPlan::cache_recipe`]).
    pub(crate) recipes: Vec<String>,
    pub(crate) labels: Vec<String>,
    pub(crate) cost_ms: Vec<u64>,
    pub(crate) identity: PlanIdentity,
    /// The toolchain identity the recipes name.
    toolchain: String,
}

impl ShardPlan {
    /// The plan of the one set of `cx` with the committed cost table.
    pub(crate) fn new(cx: &Context) -> Result<ShardPlan> {
        let costs_path = cx.settings.costs_path();
        let costs_text = std::fs::read(&costs_path).unwrap_or_default();
        let costs = Costs::load(&costs_path)?;
        let (jobs, reads) = compile_jobs(&cx.selection, &cx.sets[0].plan, cx.settings.pins)?;
        let toolchain = &cx.tools.runner.sysroot().identity;
        let recipes = recipes(&jobs, toolchain)?;
        let keys: Vec<String> = recipes.iter().map(|r| Job::key(r)).collect();
        let labels: Vec<String> = jobs.iter().map(costs::label).collect();
        let cost_ms = costs.estimate(&jobs);
        let identity = identity(cx, toolchain, &jobs, &reads, &keys, &costs_text)?;
        Ok(ShardPlan { jobs, reads, recipes, labels, cost_ms, identity, toolchain: toolchain.clone() })
    }

    /// Shard number (1..=n) of every job: a job and those it reads in one.
    pub(crate) fn assignment(&self, n: u32) -> Vec<u32> {
        let reads: Vec<Vec<usize>> = self.reads.iter().map(|r| r.iter().map(|(d, _)| *d).collect()).collect();
        partition_units(&self.labels, &self.cost_ms, &reads, n)
    }

    /// Job `i`'s cache recipe, the runner's, given where the output of each
    /// job it reads is (`output(j)`): its own recipe with those files staged.
    pub(crate) fn cache_recipe(&self, i: usize, output: &dyn Fn(usize) -> Option<std::path::PathBuf>) -> Result<String> {
        if self.reads[i].is_empty() {
            return Ok(self.recipes[i].clone());
        }
        let mut job = self.jobs[i].clone();
        for (d, name) in &self.reads[i] {
            let path = output(*d).with_context(|| format!("{}: the output of {} it reads is missing", self.labels[i], self.labels[*d]))?;
            job.staged.push((name.clone(), path));
        }
        job.recipe(&self.toolchain, &Hashes::default()).with_context(|| format!("cannot hash the inputs of {}", self.labels[i]))
    }

    /// Per unit of the plan (a job and the jobs it reads, cut together),
    /// its first job's label and the summed estimate, longest first.
    pub(crate) fn units(&self) -> Vec<(String, u64)> {
        let reads: Vec<Vec<usize>> = self.reads.iter().map(|r| r.iter().map(|(d, _)| *d).collect()).collect();
        let unit = units(&reads);
        let mut out: Vec<(String, u64)> = Vec::new();
        for (i, &u) in unit.iter().enumerate() {
            match out.iter_mut().find(|(l, _)| *l == self.labels[u]) {
                Some((_, c)) => *c += self.cost_ms[i],
                None => out.push((self.labels[u].clone(), self.cost_ms[i])),
            }
        }
        out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        out
    }
}

/// What `--shard K/N` plans for an empty cache, from `job-costs.toml`'s
/// seconds ([`crate::Builder::shard_plan`]).
pub struct PlannedWall {
    /// Every job of the plan, in plan order.
    pub jobs: Vec<PlannedJob>,
    /// Σ estimated job seconds of the whole plan, in milliseconds.
    pub total_ms: u64,
    /// The longest single job: its label and estimate.
    pub longest_job: (String, u64),
    /// Every unit of the cut (a job and the jobs it reads or that read it,
    /// never split), the longest Σ first.
    pub units: Vec<PlannedUnit>,
    /// Per shard: its jobs, Σ estimate, and the wall its `workers` plan
    /// (scheduled as kiln-build's runner does).
    pub shards: Vec<(usize, u64, u64)>,
    pub workers: usize,
}

/// One unit of a [`PlannedWall`].
pub struct PlannedUnit {
    /// Its first job's label (a library PTX's, for a PTX and its cubins).
    pub label: String,
    pub jobs: usize,
    /// Σ of its jobs' estimates, in milliseconds.
    pub sum_ms: u64,
    /// Its critical path: its longest chain of jobs, each after what it reads.
    pub path_ms: u64,
}

impl PlannedWall {
    /// The planned wall of the whole cut: its slowest shard's.
    pub fn wall_ms(&self) -> u64 {
        self.shards.iter().map(|s| s.2).max().unwrap_or(0)
    }
}

/// The wall that `workers` take on `jobs` (costs `cost_ms`, each starting once
/// the jobs it `reads` are done), scheduled as kiln-build's runner does:
/// among the jobs that can start, the deepest in the graph first, then the
/// costliest, then the earliest.
pub(crate) fn wall(cost_ms: &[u64], reads: &[Vec<usize>], workers: usize) -> u64 {
    let n = cost_ms.len();
    let mut depth = vec![0usize; n];
    for i in 0..n {
        for &d in &reads[i] {
            depth[i] = depth[i].max(depth[d] + 1);
        }
    }
    let mut waiting: Vec<usize> = reads.iter().map(Vec::len).collect();
    let mut ready: Vec<usize> = (0..n).filter(|&i| waiting[i] == 0).collect();
    let mut running: Vec<(u64, usize)> = Vec::new();
    let (mut now, mut done) = (0u64, 0usize);
    while done < n {
        while running.len() < workers.max(1) && !ready.is_empty() {
            let (pos, _) = ready.iter().enumerate().max_by_key(|(_, &i)| (depth[i], cost_ms[i], std::cmp::Reverse(i))).expect("not empty");
            let i = ready.swap_remove(pos);
            running.push((now + cost_ms[i], i));
        }
        let (pos, &(end, i)) = running.iter().enumerate().min_by_key(|(_, r)| **r).expect("a job runs while any is left");
        running.swap_remove(pos);
        now = end;
        done += 1;
        for (j, r) in reads.iter().enumerate() {
            if r.contains(&i) {
                waiting[j] -= 1;
                if waiting[j] == 0 {
                    ready.push(j);
                }
            }
        }
    }
    now
}

/// [`crate::Builder::shard_plan`].
pub(crate) fn planned(settings: &Settings, n: u32, say: &(dyn Fn(String) + Sync)) -> Result<PlannedWall> {
    let cx = Context::new(settings, settings.shard_scope()?, None, say)?;
    let plan = ShardPlan::new(&cx)?;
    let reads: Vec<Vec<usize>> = plan.reads.iter().map(|r| r.iter().map(|(d, _)| *d).collect()).collect();
    let longest = (0..plan.jobs.len()).max_by_key(|&i| (plan.cost_ms[i], std::cmp::Reverse(i))).context("the plan has no job")?;
    let unit = units(&reads);
    let mut planned_units: Vec<PlannedUnit> = plan
        .units()
        .into_iter()
        .map(|(label, sum_ms)| {
            let root = (0..plan.jobs.len()).find(|&i| plan.labels[i] == label).expect("a unit is named by its first job");
            let members: Vec<usize> = (0..plan.jobs.len()).filter(|&i| unit[i] == unit[root]).collect();
            let local = |d: &usize| members.iter().position(|m| m == d).expect("what a job reads is in its unit");
            let cost: Vec<u64> = members.iter().map(|&i| plan.cost_ms[i]).collect();
            let r: Vec<Vec<usize>> = members.iter().map(|&i| reads[i].iter().map(local).collect()).collect();
            PlannedUnit { label, jobs: members.len(), sum_ms, path_ms: wall(&cost, &r, members.len()) }
        })
        .collect();
    planned_units.sort_by(|a, b| b.sum_ms.cmp(&a.sum_ms).then_with(|| a.label.cmp(&b.label)));
    let shard = plan.assignment(n);
    let shards = (1..=n)
        .map(|k| {
            let mine: Vec<usize> = (0..plan.jobs.len()).filter(|&i| shard[i] == k).collect();
            let local = |d: &usize| mine.iter().position(|m| m == d).expect("a unit is in one shard");
            let cost: Vec<u64> = mine.iter().map(|&i| plan.cost_ms[i]).collect();
            let r: Vec<Vec<usize>> = mine.iter().map(|&i| reads[i].iter().map(local).collect()).collect();
            (mine.len(), cost.iter().sum(), wall(&cost, &r, settings.workers))
        })
        .collect();
    let jobs = (0..plan.jobs.len())
        .map(|i| PlannedJob {
            label: plan.labels[i].clone(),
            reads: reads[i].iter().map(|&d| plan.labels[d].clone()).collect(),
            cost_ms: plan.cost_ms[i],
            shard: shard[i],
        })
        .collect();
    Ok(PlannedWall {
        jobs,
        total_ms: plan.cost_ms.iter().sum(),
        longest_job: (plan.labels[longest].clone(), plan.cost_ms[longest]),
        units: planned_units,
        shards,
        workers: settings.workers,
    })
}

/// One job of a [`PlannedWall`].
pub struct PlannedJob {
    pub label: String,
    /// The labels of the jobs whose outputs it reads.
    pub reads: Vec<String>,
    /// Its estimate, in milliseconds.
    pub cost_ms: u64,
    /// The shard (1..=n) that builds it.
    pub shard: u32,
}

/// What a shard run wrote.
pub struct PartOutcome {
    pub part: Part,
    pub out: std::path::PathBuf,
    pub built: usize,
    pub seconds: f64,
}

/// Where an artifact job's output goes in the dist folder (none for an
/// object or a library PTX).
fn dist_path(job: &Job) -> Option<String> {
    job.kind.is_artifact().then(|| collect::dist_path(job))
}

/// The compile jobs of `selection` (what shards divide): the module jobs,
/// then the static library's (a per-target library's PTX, its cubins, then
/// its host CPUs' objects), in plan order, as the dist's graph has them; and
/// per job, the jobs it reads (index, staged name).
fn compile_jobs(selection: &Selection, plan: &Plan, pins: &Pins) -> Result<(Vec<Job>, Vec<Reads>)> {
    let mut jobs = selection.module_jobs(plan, pins)?;
    let mut reads = vec![Vec::new(); jobs.len()];
    if selection.wants_staticlib(&plan.set) {
        let lib = selection.library_jobs(plan, pins)?;
        let objects: Vec<Job> = lib.objects().cloned().collect();
        let first = jobs.len();
        reads.extend(lib.ptx.iter().map(|_| Vec::new()));
        jobs.extend(lib.ptx);
        for cubin in lib.cubins {
            reads.push(cubin.reads.map(|p| (first + p, jobs[first + p].output.clone())).into_iter().collect());
            jobs.push(cubin.job);
        }
        reads.extend(objects.iter().map(|_| Vec::new()));
        jobs.extend(objects);
    }
    Ok((jobs, reads))
}

/// [`crate::Builder::shard`]: builds shard `spec` of the builder's one set into its
/// part folder, replaced whole at the end (or left as it was on any failure).
pub(crate) fn run(settings: &Settings, spec: Spec, say: &(dyn Fn(String) + Sync)) -> Result<PartOutcome> {
    let start = std::time::Instant::now();
    let mut scope = settings.shard_scope()?;
    let out = settings.part_folder(&scope.sets[0].output, spec);
    part::check_out(&out)?;
    output::remove_stale_siblings(&out);
    // Only the shard's own artifacts and objects are compared with the lock (`--locked`).
    if settings.lock == LockMode::Check {
        let lock = crate::lock::Lock::load(&scope.sets[0].output.lock)?;
        scope.sets[0].lock = Some(lock);
    }
    let cx = Context::new(settings, scope, settings.remote.clone(), say)?;
    let (one, tools) = (&cx.sets[0], &cx.tools);
    let plan = ShardPlan::new(&cx)?;
    let shard = plan.assignment(spec.n);
    let mine: Vec<usize> = (0..plan.jobs.len()).filter(|&i| shard[i] == spec.k).collect();
    let jobs: Vec<Job> = mine.iter().map(|&i| plan.jobs[i].clone()).collect();
    let total: u64 = plan.cost_ms.iter().sum();
    let estimated: u64 = mine.iter().map(|&i| plan.cost_ms[i]).sum();
    let units = plan.units();
    let largest = units.iter().find(|(l, _)| mine.iter().any(|&i| plan.labels[i] == *l));
    say(format!(
        "shard {spec} of plan {} ({} jobs, ~{:.0} s): {} jobs, ~{:.0} s{}; cache {}",
        short(&plan.identity.id, 12),
        plan.jobs.len(),
        total as f64 / 1e3,
        jobs.len(),
        estimated as f64 / 1e3,
        largest.map(|(l, c)| format!(", the longest {l} (~{:.0} s)", *c as f64 / 1e3)).unwrap_or_default(),
        tools.cache.root().display()
    ));

    // The shard's jobs as a graph: a job it reads is its own (one unit), and comes first.
    let local = |d: usize| mine.iter().position(|&m| m == d).expect("a job and the jobs it reads are in one shard");
    let nodes: Vec<Node> = mine
        .iter()
        .map(|&i| Node {
            work: Work::Command(plan.jobs[i].clone()),
            inputs: plan.reads[i].iter().map(|(d, name)| (local(*d), name.clone())).collect(),
        })
        .collect();
    let built: Vec<(Job, kiln_build::Built)> = jobs.iter().cloned().zip(cx.run_nodes(&nodes, Vec::new(), say)?).collect();
    for (i, (j, b)) in mine.iter().zip(&built) {
        let key = Job::key(&plan.cache_recipe(*i, &|d| Some(built[local(d)].1.path.clone()))?);
        if b.key != key {
            bail!("{j}: the runner's cache key {} is not the plan's {key}: kiln-build and kiln-dist disagree on the recipe", b.key);
        }
    }
    // Every module artifact is read back here already: a bad one fails this
    // shard, on the machine that built it, not the merge.
    let modules: Vec<_> = built.iter().filter(|(j, _)| j.kind.is_artifact()).cloned().collect();
    let collected = collect::artifacts(&one.set.targets, &modules)?;
    if let Some(lock) = &one.lock {
        let m = collect::manifest(one.set, one.output.is_main, &one.source.sha256, tools.toolchain.clone(), &collected);
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
    let part = write_part(tools, &out, spec, &plan, estimated, &built)?;
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
    fn a_unit_is_never_split_and_is_cut_by_its_summed_cost() {
        // Job 0 (a PTX, 30) is read by 1, 2 and 3 (its cubins, 20 each): one unit of 90.
        let l = labels(6);
        let c = vec![30, 20, 20, 20, 50, 40];
        let reads = vec![vec![], vec![0], vec![0], vec![0], vec![], vec![]];
        assert_eq!(units(&reads), [0, 0, 0, 0, 4, 5]);
        for n in 1..=6 {
            let s = partition_units(&l, &c, &reads, n);
            assert!(s[1..4].iter().all(|&k| k == s[0]), "{n}: {s:?}");
            assert!(s.iter().all(|&k| (1..=n).contains(&k)), "{n}: {s:?}");
        }
        // As a unit of 90 it goes first, alone; the others share the second shard.
        assert_eq!(partition_units(&l, &c, &reads, 2), [1, 1, 1, 1, 2, 2]);
        // Cut as jobs, the PTX and its cubins would have been spread over both.
        let jobs = partition(&l, &c, 2);
        assert!(jobs[1..4].iter().any(|&k| k != jobs[0]), "{jobs:?}");
    }

    #[test]
    fn the_planned_wall_runs_a_job_after_what_it_reads() {
        // One worker: everything in turn.
        assert_eq!(wall(&[30, 20, 20], &[vec![], vec![0], vec![0]], 1), 70);
        // Two workers: the PTX (30), then its two cubins side by side (20).
        assert_eq!(wall(&[30, 20, 20], &[vec![], vec![0], vec![0]], 2), 50);
        // A long independent job runs beside the chain.
        assert_eq!(wall(&[30, 20, 20, 60], &[vec![], vec![0], vec![0], vec![]], 2), 70);
        assert_eq!(wall(&[], &[], 2), 0);
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
