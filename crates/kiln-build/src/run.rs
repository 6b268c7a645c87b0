//! Runs a graph of jobs in parallel (bounded by the cores): compiles, and the
//! work that reads their outputs (an archive, a bundle, compressed payloads).
//! A job starts once every job it reads from is built; among the jobs that
//! can start, those that finish something (the deepest in the graph) go
//! first, then the longest. Every job goes through the same content cache and
//! keeps its log; a progress line per finished job and a heartbeat naming
//! what is still running.

use std::{
    collections::BinaryHeap,
    fmt, fs,
    path::{Path, PathBuf},
    sync::{Condvar, Mutex},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use kiln_toolchain::{sysroot::JOB_DIR, Cache, Mount, Runner};

use crate::{
    job::{self, Hashes, Job},
    store::{link_or_copy, Lookup, Store},
};

/// A job's result, in the cache.
#[derive(Clone, Debug)]
pub struct Built {
    pub path: PathBuf,
    pub key: String,
    pub cached: bool,
    pub seconds: f64,
}

/// A job that failed, with where its log is and the end of it; or one that
/// was not run because a job it reads from failed (no log; the input's own
/// failure says why).
#[derive(Clone, Debug)]
pub struct Failed {
    pub job: String,
    pub log: PathBuf,
    pub tail: String,
    pub not_run: bool,
}

impl Failed {
    /// Not run: an input failed.
    pub fn skipped(&self) -> bool {
        self.not_run
    }

    /// ` (<what>: <log>)`, or nothing for a job that failed before it wrote a log
    /// (a cache miss under `--no-compile`): an empty path would only puzzle.
    fn log_note(&self, what: &str) -> String {
        if self.log.as_os_str().is_empty() {
            String::new()
        } else {
            format!(" ({what}: {})", self.log.display())
        }
    }
}

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.skipped() {
            write!(f, "{}: {}", self.job, self.tail)
        } else {
            write!(f, "{} failed{}\n{}", self.job, self.log_note("full log"), self.tail)
        }
    }
}

pub struct Options {
    pub workers: usize,
    /// Print a line for cache hits too.
    pub verbose: bool,
    /// How often to say what is still running.
    pub heartbeat: Duration,
    /// Compile jobs ([`crate::JobKind::is_compile`]) must come from the local or
    /// remote cache: a miss fails the job instead of running the compiler.
    pub no_compile: bool,
    /// Estimated seconds of each node, in the nodes' order (`None`: no
    /// estimate, e.g. a step), for the time left that the heartbeat names;
    /// empty: none is named.
    pub estimates: Vec<Option<f64>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            workers: kiln_toolchain::default_workers(),
            verbose: false,
            heartbeat: Duration::from_secs(30),
            no_compile: false,
            estimates: Vec::new(),
        }
    }
}

/// Rust code run as a job: it reads its inputs from its job folder (staged
/// there by name) and writes its output there, like a command does.
pub type StepFn<'a> = dyn Fn(&StepIo) -> Result<()> + Send + Sync + 'a;

/// A job done in-process (compressing, bundling, splitting) rather than by a
/// compiler; cached, logged and scheduled like the compiles.
pub struct Step<'a> {
    /// What it does, for progress lines and errors (`zstd cuda sm_90 affine`).
    pub label: String,
    /// The file or folder it writes into its job folder.
    pub output: String,
    /// Names the code and every parameter that changes the output (a version
    /// to bump when the code changes what it writes): with the inputs'
    /// hashes, it makes the cache key.
    pub recipe: String,
    /// Host files it reads besides other jobs' outputs, staged by name.
    pub staged: Vec<(String, PathBuf)>,
    /// Rough relative cost, in the units of [`Job::cost`].
    pub cost: u64,
    pub run: Box<StepFn<'a>>,
}

/// What a step sees: its job folder (inputs in, output out) and its log.
pub struct StepIo<'r> {
    pub dir: &'r Path,
    log: &'r Path,
    runner: &'r Runner,
}

impl StepIo<'_> {
    /// A staged input or the output, by name.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Appends a line to the step's log.
    pub fn log(&self, line: &str) -> Result<()> {
        use std::io::Write;
        let mut f = fs::OpenOptions::new().append(true).create(true).open(self.log)?;
        writeln!(f, "{line}")?;
        Ok(())
    }

    /// Runs a pinned tool in the sandbox with `dir` (a folder inside the job
    /// folder) as `/kiln/job`, its output appended to the step's log.
    pub fn sandboxed(&self, dir: &Path, mounts: &[Mount], argv: &[String]) -> Result<()> {
        let mut mounts = mounts.to_vec();
        mounts.push(Mount { host: dir.to_path_buf(), at: JOB_DIR.into(), writable: true });
        let log = self.dir.join(".command.log");
        let status = self.runner.run(&mounts, JOB_DIR, argv, &log)?;
        let text = fs::read_to_string(&log).unwrap_or_default();
        fs::remove_file(&log).ok();
        self.log(&format!("$ {}\n{text}", argv.join(" ")))?;
        if !status.success() {
            bail!("{} exited with {status}", argv[0]);
        }
        Ok(())
    }
}

/// What a node of the graph does.
pub enum Work<'a> {
    /// A compiler (or `ar`) in the sandbox.
    Command(Job),
    Step(Step<'a>),
}

/// One job of the graph.
pub struct Node<'a> {
    pub work: Work<'a>,
    /// Outputs of earlier nodes (by index, always lower than this node's) that
    /// this one reads, each staged into its job folder under the given name.
    pub inputs: Vec<(usize, String)>,
}

impl<'a> Node<'a> {
    pub fn command(job: Job) -> Node<'a> {
        Node { work: Work::Command(job), inputs: Vec::new() }
    }

    pub fn step(step: Step<'a>, inputs: Vec<(usize, String)>) -> Node<'a> {
        Node { work: Work::Step(step), inputs }
    }

    fn cost(&self) -> u64 {
        match &self.work {
            Work::Command(j) => j.cost,
            Work::Step(s) => s.cost,
        }
    }

    fn output(&self) -> &str {
        match &self.work {
            Work::Command(j) => &j.output,
            Work::Step(s) => &s.output,
        }
    }

    fn staged(&self) -> &[(String, PathBuf)] {
        match &self.work {
            Work::Command(j) => &j.staged,
            Work::Step(s) => &s.staged,
        }
    }
}

impl fmt::Display for Node<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.work {
            Work::Command(j) => j.fmt(f),
            Work::Step(s) => f.write_str(&s.label),
        }
    }
}

/// Runs every job; the result at index `i` belongs to `jobs[i]`. A failing
/// job does not stop the others, so one run reports every failure.
pub fn run_all(runner: &Runner, cache: &Cache, jobs: &[Job], opts: &Options, say: &(dyn Fn(String) + Sync)) -> Vec<Result<Built, Failed>> {
    let nodes: Vec<Node> = jobs.iter().cloned().map(Node::command).collect();
    run_graph(runner, cache, &nodes, opts, say)
}

/// Where the scheduler keeps a job that can start: deepest first, then the
/// most costly, then the earliest given.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Ready {
    depth: usize,
    cost: u64,
    first: std::cmp::Reverse<usize>,
}

struct State {
    ready: BinaryHeap<Ready>,
    /// Per node: inputs not built yet.
    waiting: Vec<usize>,
    results: Vec<Option<Result<Built, Failed>>>,
    running: Vec<(usize, Instant)>,
    finished: usize,
    built: usize,
    job_seconds: f64,
}

/// Runs every node of the graph; the result at index `i` belongs to
/// `nodes[i]`. A failing node does not stop the others: the nodes that read
/// from it are reported as not run, and everything else runs, so one run
/// reports every failure.
pub fn run_graph(runner: &Runner, cache: &Cache, nodes: &[Node], opts: &Options, say: &(dyn Fn(String) + Sync)) -> Vec<Result<Built, Failed>> {
    let store = Store::new(cache);
    let hashes = Hashes::default();
    let start = Instant::now();
    let total = nodes.len();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); total];
    let mut depth = vec![0usize; total];
    for (i, n) in nodes.iter().enumerate() {
        for &(d, _) in &n.inputs {
            assert!(d < i, "node {i} ({n}) reads node {d}, which does not come before it");
            dependents[d].push(i);
            depth[i] = depth[i].max(depth[d] + 1);
        }
    }
    let ready = |i: usize| Ready { depth: depth[i], cost: nodes[i].cost(), first: std::cmp::Reverse(i) };
    let state = Mutex::new(State {
        ready: (0..total).filter(|&i| nodes[i].inputs.is_empty()).map(ready).collect(),
        waiting: nodes.iter().map(|n| n.inputs.len()).collect(),
        results: vec![None; total],
        running: Vec::new(),
        finished: 0,
        built: 0,
        job_seconds: 0.0,
    });
    let changed = Condvar::new();
    let stamp = |n: usize| {
        let s = start.elapsed().as_secs();
        format!("[{n:>w$}/{total} {:>2}:{:02}]", s / 60, s % 60, w = total.to_string().len())
    };

    // Records a result, then releases (or, after a failure, reports as not
    // run) the nodes that were waiting for it.
    let finish = |st: &mut State, i: usize, r: Result<Built, Failed>| {
        let mut done = vec![(i, r)];
        while let Some((i, r)) = done.pop() {
            st.finished += 1;
            let k = st.finished;
            match &r {
                Ok(b) if b.cached => {
                    if opts.verbose {
                        say(format!("{} cached {}", stamp(k), nodes[i]));
                    }
                }
                Ok(b) => {
                    st.built += 1;
                    st.job_seconds += b.seconds;
                    say(format!("{} built  {} ({:.1} s)", stamp(k), nodes[i], b.seconds));
                }
                Err(f) if f.skipped() => say(format!("{} not run {} ({})", stamp(k), nodes[i], f.tail)),
                Err(f) => say(format!("{} FAILED {}{}", stamp(k), nodes[i], f.log_note("log"))),
            }
            let ok = r.is_ok();
            st.results[i] = Some(r);
            for &d in &dependents[i] {
                if !ok {
                    if st.results[d].is_none() && !done.iter().any(|(j, _)| *j == d) {
                        let why = Failed {
                            job: nodes[d].to_string(),
                            log: PathBuf::new(),
                            tail: format!("not run: its input {} failed", nodes[i]),
                            not_run: true,
                        };
                        done.push((d, Err(why)));
                    }
                    continue;
                }
                st.waiting[d] -= 1;
                if st.waiting[d] == 0 && st.results[d].is_none() {
                    st.ready.push(ready(d));
                }
            }
        }
    };

    std::thread::scope(|s| {
        s.spawn(|| {
            let mut st = state.lock().unwrap();
            let mut next = Instant::now() + opts.heartbeat;
            while st.finished < total {
                let now = Instant::now();
                if now < next {
                    st = changed.wait_timeout(st, next - now).unwrap().0;
                    continue;
                }
                next = now + opts.heartbeat;
                if !st.running.is_empty() {
                    let list: Vec<String> = st
                        .running
                        .iter()
                        .map(|(i, t)| {
                            let e = t.elapsed().as_secs();
                            format!("{} {}:{:02}", nodes[*i], e / 60, e % 60)
                        })
                        .collect();
                    let left = if opts.estimates.len() == total { time_left(&opts.estimates, &st, opts.workers) } else { None };
                    let left = left.map(|s| format!("; {}", describe_left(s))).unwrap_or_default();
                    say(format!("{} running: {}{left}", stamp(st.finished), list.join(", ")));
                }
            }
        });
        for _ in 0..opts.workers.max(1) {
            s.spawn(|| loop {
                let mut st = state.lock().unwrap();
                let i = loop {
                    if let Some(r) = st.ready.pop() {
                        break r.first.0;
                    }
                    if st.finished == total {
                        return;
                    }
                    st = changed.wait(st).unwrap();
                };
                // Queued only once every input was built.
                let inputs: Vec<(String, PathBuf)> = nodes[i]
                    .inputs
                    .iter()
                    .map(|(d, name)| match &st.results[*d] {
                        Some(Ok(b)) => (name.clone(), b.path.clone()),
                        _ => unreachable!("a queued job's inputs are built"),
                    })
                    .collect();
                st.running.push((i, Instant::now()));
                drop(st);
                let r = run_node(runner, cache, &store, &hashes, &nodes[i], inputs, opts.no_compile, say);
                let mut st = state.lock().unwrap();
                st.running.retain(|(j, _)| *j != i);
                finish(&mut st, i, r);
                drop(st);
                changed.notify_all();
            });
        }
    });

    let st = state.into_inner().unwrap();
    let results: Vec<_> = st.results.into_iter().map(|r| r.expect("every job ran or was reported not run")).collect();
    let failed = results.iter().filter(|r| r.as_ref().is_err_and(|f| !f.skipped())).count();
    let skipped = results.iter().filter(|r| r.as_ref().is_err_and(Failed::skipped)).count();
    let b = st.built;
    let mut line = format!(
        "{} jobs in {:.1} s: {} from cache, {b} built ({:.1} s of job time), {failed} failed",
        total,
        start.elapsed().as_secs_f64(),
        total - b - failed - skipped,
        st.job_seconds
    );
    if skipped > 0 {
        line.push_str(&format!(", {skipped} not run"));
    }
    say(line);
    results
}

/// Seconds until the graph is done, from the nodes' estimates: those of the
/// jobs not started, and what is left of the running ones, each scaled by how
/// long the jobs built so far took against their estimates (a cost table
/// measured on another machine is off by about one factor), spread over the
/// workers but never less than the longest running job's remainder. `None`
/// when nothing left has an estimate.
fn time_left(estimates: &[Option<f64>], st: &State, workers: usize) -> Option<f64> {
    let (mut took, mut expected) = (0.0, 0.0);
    for (i, r) in st.results.iter().enumerate() {
        if let (Some(Ok(b)), Some(e)) = (r, estimates[i]) {
            if !b.cached && e > 0.0 {
                took += b.seconds;
                expected += e;
            }
        }
    }
    // A running job already past its estimate says as much about the machine as a built
    // one: counted as if it ended now (a lower bound), so that a set none of whose jobs
    // has finished yet (hours of nvcc against a table that lacks them) does not keep
    // promising the table's figure.
    for (i, started) in &st.running {
        if let Some(e) = estimates[*i] {
            let so_far = started.elapsed().as_secs_f64();
            if e > 0.0 && so_far > e {
                took += so_far;
                expected += e;
            }
        }
    }
    let scale = if expected > 0.0 { took / expected } else { 1.0 };
    let mut known = false;
    let mut running_left = Vec::new();
    for (i, started) in &st.running {
        if let Some(e) = estimates[*i] {
            known = true;
            running_left.push((e * scale - started.elapsed().as_secs_f64()).max(0.0));
        }
    }
    let mut waiting = 0.0;
    for (i, e) in estimates.iter().enumerate() {
        if let Some(e) = e {
            if st.results[i].is_none() && !st.running.iter().any(|(j, _)| *j == i) {
                known = true;
                waiting += e * scale;
            }
        }
    }
    let longest = running_left.iter().cloned().fold(0.0, f64::max);
    known.then(|| ((waiting + running_left.iter().sum::<f64>()) / workers.max(1) as f64).max(longest))
}

/// `about 1 h 05 min left`, `about 4 min left`, `under a minute left`.
fn describe_left(seconds: f64) -> String {
    let m = (seconds / 60.0).round() as u64;
    match m {
        0 => "under a minute left".into(),
        1..=59 => format!("about {m} min left"),
        _ => format!("about {} h {:02} min left", m / 60, m % 60),
    }
}

/// The cache key's text and the files to stage, for a node whose inputs are built.
fn recipe(node: &Node, toolchain: &str, hashes: &Hashes, inputs: &[(String, PathBuf)]) -> Result<(String, Vec<(String, PathBuf)>)> {
    let mut staged = node.staged().to_vec();
    staged.extend(inputs.iter().cloned());
    let text = match &node.work {
        Work::Command(j) => {
            let mut j = j.clone();
            j.staged = staged.clone();
            j.recipe(toolchain, hashes)?
        }
        Work::Step(s) => job::step_recipe(toolchain, &s.recipe, &s.output, &staged, hashes)?,
    };
    Ok((text, staged))
}

// Everything a node needs from the run; a struct for it would only be unpacked again.
#[allow(clippy::too_many_arguments)]
fn run_node(
    runner: &Runner,
    cache: &Cache,
    store: &Store,
    hashes: &Hashes,
    node: &Node,
    inputs: Vec<(String, PathBuf)>,
    no_compile: bool,
    say: &(dyn Fn(String) + Sync),
) -> Result<Built, Failed> {
    let fail = |log: PathBuf, e: anyhow::Error| Failed { job: node.to_string(), log, tail: format!("{e:#}"), not_run: false };
    let (recipe, staged) = recipe(node, &runner.sysroot().identity, hashes, &inputs).map_err(|e| fail(PathBuf::new(), e))?;
    let key = Job::key(&recipe);
    let output = node.output();
    match store.get(&key, output) {
        Lookup::Hit(path) => return Ok(Built { path, key, cached: true, seconds: 0.0 }),
        Lookup::Damaged(message) => say(format!("warning: {node}: {message}")),
        Lookup::Miss => {}
    }
    if let (true, Work::Command(job)) = (no_compile, &node.work) {
        if job.kind.is_compile() {
            return Err(fail(
                PathBuf::new(),
                anyhow::anyhow!("not in the local or remote cache (key {key}), and compiling is turned off (--no-compile / dist merge)"),
            ));
        }
    }

    let t = Instant::now();
    let dir = cache.scratch("job").map_err(|e| fail(PathBuf::new(), e))?;
    let log = dir.join("build.log");
    let result = (|| -> Result<PathBuf> {
        for (name, src) in &staged {
            link_or_copy(src, &dir.join(name))?;
        }
        match &node.work {
            Work::Command(job) => {
                let mut mounts = job.mounts.clone();
                mounts.push(Mount { host: dir.to_path_buf(), at: JOB_DIR.into(), writable: true });
                let status = runner.run(&mounts, JOB_DIR, &job.argv, &log)?;
                if !status.success() {
                    bail!("{} exited with {status}", job.argv[0]);
                }
            }
            Work::Step(step) => {
                fs::write(&log, "")?;
                (step.run)(&StepIo { dir: &dir, log: &log, runner })?;
            }
        }
        // A link would be followed out of the job folder (by the hash, the
        // cache and every reader after it): outputs are regular files or folders.
        match fs::symlink_metadata(dir.join(output)) {
            Err(_) => bail!("{node} succeeded but wrote no {output}"),
            Ok(m) if m.file_type().is_symlink() => {
                let to = fs::read_link(dir.join(output)).map(|t| t.display().to_string()).unwrap_or_default();
                bail!("{node}: its output {output} is a symbolic link (to {to}), not a regular file; refused")
            }
            Ok(_) => {}
        }
        for (name, _) in &staged {
            let p = dir.join(name);
            if p.is_dir() {
                fs::remove_dir_all(p)?;
            } else {
                fs::remove_file(p)?;
            }
        }
        fs::write(dir.join("recipe.txt"), &recipe)?;
        fs::write(dir.join(crate::store::SECONDS_FILE), format!("{:.3}\n", t.elapsed().as_secs_f64()))?;
        store.put(&key, &dir, output).context("cannot store the result in the cache")
    })();
    match result {
        Ok(path) => Ok(Built { path, key, cached: false, seconds: t.elapsed().as_secs_f64() }),
        Err(e) => {
            // Keep the log where the user can read it; drop the rest of the scratch folder.
            let kept = cache.failed_log(&node.to_string());
            let _ = fs::create_dir_all(kept.parent().unwrap());
            let _ = fs::copy(&log, &kept);
            let _ = fs::remove_dir_all(&dir);
            let text = fs::read_to_string(&kept).unwrap_or_default();
            let mut tail: Vec<&str> = text.lines().filter(|l| l.contains("error")).take(8).collect();
            if tail.is_empty() {
                tail = text.lines().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect();
            }
            let mut f = fail(kept, e);
            f.tail = format!("  {}\n  {}", f.tail, tail.join("\n  "));
            Err(f)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(results: Vec<Option<Result<Built, Failed>>>, running: &[usize]) -> State {
        let n = results.len();
        State {
            ready: BinaryHeap::new(),
            waiting: vec![0; n],
            results,
            running: running.iter().map(|&i| (i, Instant::now())).collect(),
            finished: 0,
            built: 0,
            job_seconds: 0.0,
        }
    }

    fn built(seconds: f64, cached: bool) -> Option<Result<Built, Failed>> {
        Some(Ok(Built { path: PathBuf::new(), key: String::new(), cached, seconds }))
    }

    #[test]
    fn time_left_scales_the_estimates_by_the_jobs_built_so_far() {
        let est = vec![Some(100.0), Some(100.0), Some(100.0), Some(100.0), Some(300.0), None];
        // Nothing built yet: the estimates as they are, over two workers; the step has none.
        let st = state(vec![None, None, None, None, None, None], &[]);
        assert_eq!(time_left(&est, &st, 2), Some(350.0));
        // Two jobs took twice their estimate (this machine is slower than the table's): the rest will too.
        // A cached job took no time and says nothing of the machine.
        let st = state(vec![built(200.0, false), built(200.0, false), built(0.1, true), None, None, None], &[3]);
        let left = time_left(&est, &st, 2).unwrap();
        assert!((left - (200.0 + 600.0) / 2.0).abs() < 1.0, "{left}");
        // One long job left: the workers cannot share it.
        let st = state(vec![built(200.0, false), built(200.0, false), built(0.1, true), built(200.0, false), None, None], &[4]);
        let left = time_left(&est, &st, 2).unwrap();
        assert!((left - 600.0).abs() < 1.0, "{left}");
        // Only steps left: no figure rather than a wrong one.
        let st = state(vec![built(1.0, false), built(1.0, false), built(1.0, false), built(1.0, false), built(1.0, false), None], &[5]);
        assert_eq!(time_left(&est, &st, 2), None);
    }

    #[test]
    fn time_left_learns_from_jobs_still_running_past_their_estimate() {
        let est = vec![Some(100.0); 4];
        let mut st = state(vec![None, None, None, None], &[0, 1]);
        let long_ago = Instant::now().checked_sub(std::time::Duration::from_secs(400)).unwrap();
        for r in &mut st.running {
            r.1 = long_ago;
        }
        // Both running jobs have taken 4x their estimate already: the two waiting ones will too.
        let left = time_left(&est, &st, 2).unwrap();
        assert!((left - 2.0 * 400.0 / 2.0).abs() < 5.0, "{left}");
        // Not yet past their estimate: no evidence either way, the table's figure stands.
        let st = state(vec![None, None, None, None], &[0, 1]);
        assert!((time_left(&est, &st, 2).unwrap() - 200.0).abs() < 1.0);
    }

    #[test]
    fn time_left_reads_in_minutes_and_hours() {
        assert_eq!(describe_left(20.0), "under a minute left");
        assert_eq!(describe_left(250.0), "about 4 min left");
        assert_eq!(describe_left(3.0 * 3600.0 + 300.0), "about 3 h 05 min left");
    }
}
