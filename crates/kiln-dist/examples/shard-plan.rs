//! What `cargo xtask dist --shard K/N` plans for an empty cache, from the
//! committed `job-costs.toml` and this checkout's plan (nothing compiled):
//! the longest job, the longest unit (a job and the jobs it reads, which a
//! shard never splits), and per N the slowest shard's wall with `-j` workers
//! per machine. `bench/shard-plan.sh` runs it (docs/benchmarks.md).
//!
//! `cargo run -p kiln-dist --example shard-plan -- [--set NAME] [-j WORKERS] N...`

use anyhow::{Context, Result};
use kiln_dist::Builder;

fn main() -> Result<()> {
    let root = kiln_dist::kiln_root();
    let mut args = std::env::args().skip(1);
    let (mut set, mut workers, mut ns) = (None, 2usize, Vec::new());
    while let Some(a) = args.next() {
        match a.as_str() {
            "--set" => set = Some(args.next().context("--set NAME")?),
            "-j" => workers = args.next().context("-j WORKERS")?.parse()?,
            n => ns.push(n.parse::<u32>().with_context(|| format!("`{n}` is not a shard count"))?),
        }
    }
    if ns.is_empty() {
        ns = vec![1, 4, 8];
    }
    let pins = kiln_pins::Pins::load(&root.join(kiln_pins::FILE_NAME))?;
    let mut b = Builder::from_pins(&pins).kiln_dir(&root).base(&root).workers(workers);
    if let Some(set) = set {
        b = b.only(&[set]);
    }
    let s = |ms: u64| ms as f64 / 1e3;
    for (i, n) in ns.into_iter().enumerate() {
        let p = b.shard_plan(n, &|l| eprintln!("{l}"))?;
        if i == 0 {
            println!("plan: {} jobs, Σ {:.1} s of job time (job-costs.toml)", p.jobs.len(), s(p.total_ms));
            println!("longest job: {} ({:.1} s)", p.longest_job.0, s(p.longest_job.1));
            let unit =
                |u: &kiln_dist::PlannedUnit| format!("{} ({} jobs, Σ {:.1} s, critical path {:.1} s)", u.label, u.jobs, s(u.sum_ms), s(u.path_ms));
            if let Some(u) = p.units.first() {
                println!("longest unit: {}", unit(u));
            }
            if let Some(u) = p.units.iter().find(|u| u.jobs > 1) {
                println!("longest unit of several jobs (a PTX and the cubins that read it): {}", unit(u));
            }
        }
        let worst = p.shards.iter().map(|x| x.1).max().unwrap_or(0);
        println!(
            "--shard K/{n}, {} workers a machine: planned wall {:.1} s (the slowest shard; Σ per shard {:.1}-{:.1} s, {}-{} jobs)",
            p.workers,
            s(p.wall_ms()),
            s(p.shards.iter().map(|x| x.1).min().unwrap_or(0)),
            s(worst),
            p.shards.iter().map(|x| x.0).min().unwrap_or(0),
            p.shards.iter().map(|x| x.0).max().unwrap_or(0),
        );
    }
    Ok(())
}
