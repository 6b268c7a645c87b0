//! Runs jobs in parallel (bounded by the cores), longest first, with a
//! progress line per finished job and a heartbeat naming what is still running.

use std::{
    fs,
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Condvar, Mutex,
    },
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use kiln_toolchain::{Cache, Mount, Runner};

use crate::{
    job::{Hashes, Job},
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

/// A job that failed, with where its log is and the end of it.
#[derive(Clone, Debug)]
pub struct Failed {
    pub job: String,
    pub log: PathBuf,
    pub tail: String,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed (full log: {})\n{}", self.job, self.log.display(), self.tail)
    }
}

pub struct Options {
    pub workers: usize,
    /// Print a line for cache hits too.
    pub verbose: bool,
    /// How often to say what is still running.
    pub heartbeat: Duration,
    /// Compile jobs ([`crate::Kind::is_compile`]) must come from the local or
    /// remote cache: a miss fails the job instead of running the compiler.
    pub no_compile: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            workers: std::thread::available_parallelism().map_or(2, |n| n.get()),
            verbose: false,
            heartbeat: Duration::from_secs(30),
            no_compile: false,
        }
    }
}

/// Runs every job; the result at index `i` belongs to `jobs[i]`. A failing
/// job does not stop the others, so one run reports every failure.
pub fn run_all(runner: &Runner, cache: &Cache, jobs: &[Job], opts: &Options, say: &(dyn Fn(String) + Sync)) -> Vec<Result<Built, Failed>> {
    let store = Store::new(cache);
    let hashes = Hashes::default();
    let start = Instant::now();
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(jobs[i].cost));

    let next = AtomicUsize::new(0);
    let finished = AtomicUsize::new(0);
    let built = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Built, Failed>>>> = Mutex::new(vec![None; jobs.len()]);
    let running: Mutex<Vec<(usize, Instant)>> = Mutex::new(Vec::new());
    let done = AtomicBool::new(false);
    let wake = (Mutex::new(()), Condvar::new());
    let total = jobs.len();
    let stamp = |n: usize| {
        let s = start.elapsed().as_secs();
        format!("[{n:>w$}/{total} {:>2}:{:02}]", s / 60, s % 60, w = total.to_string().len())
    };

    std::thread::scope(|s| {
        s.spawn(|| loop {
            let guard = wake.0.lock().unwrap();
            let (_g, _) = wake.1.wait_timeout(guard, opts.heartbeat).unwrap();
            if done.load(Ordering::SeqCst) {
                break;
            }
            let now = running.lock().unwrap().clone();
            if !now.is_empty() {
                let list: Vec<String> = now
                    .iter()
                    .map(|(i, t)| {
                        let e = t.elapsed().as_secs();
                        format!("{} {}:{:02}", jobs[*i], e / 60, e % 60)
                    })
                    .collect();
                say(format!("{} running: {}", stamp(finished.load(Ordering::SeqCst)), list.join(", ")));
            }
        });
        let workers: Vec<_> = (0..opts.workers.max(1))
            .map(|_| {
                s.spawn(|| loop {
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    let Some(&i) = order.get(n) else { break };
                    let job = &jobs[i];
                    running.lock().unwrap().push((i, Instant::now()));
                    let r = run_one(runner, cache, &store, &hashes, job, opts.no_compile, say);
                    running.lock().unwrap().retain(|(j, _)| *j != i);
                    let k = finished.fetch_add(1, Ordering::SeqCst) + 1;
                    match &r {
                        Ok(b) if b.cached => {
                            if opts.verbose {
                                say(format!("{} cached {job}", stamp(k)));
                            }
                        }
                        Ok(b) => {
                            built.fetch_add(1, Ordering::SeqCst);
                            say(format!("{} built  {job} ({:.1} s)", stamp(k), b.seconds));
                        }
                        Err(f) => say(format!("{} FAILED {job} (log: {})", stamp(k), f.log.display())),
                    }
                    results.lock().unwrap()[i] = Some(r);
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        done.store(true, Ordering::SeqCst);
        wake.1.notify_all();
    });

    let results: Vec<_> = results.into_inner().unwrap().into_iter().map(|r| r.expect("every job ran")).collect();
    let failed = results.iter().filter(|r| r.is_err()).count();
    let b = built.load(Ordering::SeqCst);
    say(format!("{} jobs in {:.1} s: {} from cache, {b} built, {failed} failed", total, start.elapsed().as_secs_f64(), total - b - failed));
    results
}

fn run_one(
    runner: &Runner,
    cache: &Cache,
    store: &Store,
    hashes: &Hashes,
    job: &Job,
    no_compile: bool,
    say: &(dyn Fn(String) + Sync),
) -> Result<Built, Failed> {
    let fail = |log: PathBuf, e: anyhow::Error| Failed { job: job.to_string(), log, tail: format!("{e:#}") };
    let recipe = job.recipe(&runner.sysroot().identity, hashes).map_err(|e| fail(PathBuf::new(), e))?;
    let key = Job::key(&recipe);
    match store.get(&key, &job.output) {
        Lookup::Hit(path) => return Ok(Built { path, key, cached: true, seconds: 0.0 }),
        Lookup::Damaged(message) => say(format!("warning: {job}: {message}")),
        Lookup::Miss => {}
    }
    if no_compile && job.kind.is_compile() {
        return Err(fail(
            PathBuf::new(),
            anyhow::anyhow!("not in the local or remote cache (key {key}), and compiling is turned off (--no-compile / dist merge)"),
        ));
    }

    let t = Instant::now();
    let dir = cache.scratch("job").map_err(|e| fail(PathBuf::new(), e))?;
    let log = dir.join("build.log");
    let result = (|| -> Result<PathBuf> {
        for (name, src) in &job.staged {
            link_or_copy(src, &dir.join(name))?;
        }
        let mut mounts = job.mounts.clone();
        mounts.push(Mount { host: dir.clone(), at: "/kiln/job", writable: true });
        let status = runner.run(&mounts, "/kiln/job", &job.argv, &log)?;
        if !status.success() {
            bail!("{} exited with {status}", job.argv[0]);
        }
        if !dir.join(&job.output).is_file() {
            bail!("{} succeeded but wrote no {}", job.argv[0], job.output);
        }
        for (name, _) in &job.staged {
            fs::remove_file(dir.join(name))?;
        }
        fs::write(dir.join("recipe.txt"), &recipe)?;
        fs::write(dir.join(crate::store::SECONDS_FILE), format!("{:.3}\n", t.elapsed().as_secs_f64()))?;
        store.put(&key, &dir, &job.output).context("cannot store the result in the cache")
    })();
    match result {
        Ok(path) => Ok(Built { path, key, cached: false, seconds: t.elapsed().as_secs_f64() }),
        Err(e) => {
            // Keep the log where the user can read it; drop the rest of the scratch folder.
            let kept = cache.root().join("failed").join(format!("{}-{}-{}.log", job.backend.as_str(), job.arch, job.module));
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
