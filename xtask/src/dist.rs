use std::path::Path;

use anyhow::Result;
use kiln_dist::{lock::Lock, Builder, Dist, LockMode};
use kiln_toolchain::remote;

use crate::flags;

pub(crate) fn workers(jobs: Option<usize>) -> usize {
    jobs.unwrap_or_else(kiln_toolchain::default_workers)
}

/// The remote cache the flags and the environment name, if any.
pub(crate) fn remote_config(r: &flags::Remote) -> Result<Option<remote::Config>> {
    remote::Config::resolve(r.url.as_deref(), r.read_only)
}

pub fn run(pins_path: &Path, f: flags::Dist) -> Result<()> {
    if let Some(flags::DistCommand::Merge(m)) = f.command {
        return crate::merge::run(pins_path, m);
    }
    let pins = crate::load_pins(pins_path)?;
    let root = crate::project_root();
    let costs_path = root.join(kiln_dist::costs::FILE_NAME);
    let lock = match (f.locked, f.update_lock) {
        (true, _) => LockMode::Check,
        (_, true) => LockMode::Update,
        _ => LockMode::Off,
    };
    // The same builder another project's xtask would use, with the pin file's sets.
    let builder = Builder::from_pins(&pins)
        .kiln_dir(&root)
        .base(&root)
        .only(&f.sets)
        .select(f.modules, f.archs)
        .lock(lock)
        .package(!f.no_package)
        .workers(workers(f.jobs))
        .verbose(f.verbose)
        .no_compile(f.no_compile)
        .remote(remote_config(&f.remote)?);
    if let Some(spec) = f.shard {
        // A shard builds part of one set: the main one, or the one --set names (docs/distributed.md).
        let builder = match &f.out {
            Some(dir) => builder.part_out(root.join(dir)),
            None => builder,
        };
        let o = builder.shard(spec, &|l| crate::say(l))?;
        let bytes: u64 = o.part.jobs.iter().map(|j| j.size).sum();
        println!(
            "{}: shard {} of plan {}: {} jobs ({} built here, {:.1} MB) in {:.1} s; `cargo xtask dist merge` takes it with the other parts",
            o.out.display(),
            o.part.shard,
            kiln_manifest::short(&o.part.plan.id, 12),
            o.part.jobs.len(),
            o.built,
            bytes as f64 / 1e6,
            o.seconds
        );
        return Ok(());
    }
    let builder = match &f.out {
        Some(dir) => builder.out(root.join(dir)),
        None => builder,
    };
    let dist = builder.build(&|l| crate::say(l))?;
    report(&dist, lock)?;
    if f.update_costs {
        let n = kiln_dist::costs::record(&costs_path, &dist.compiled, workers(f.jobs))?;
        println!(
            "{}: {n} of {} jobs measured ({} without a recorded time kept their old figure)",
            costs_path.display(),
            dist.compiled.len(),
            dist.compiled.len() - n
        );
    }
    Ok(())
}

/// What each set's build wrote: its folder, crates and lock.
pub(crate) fn report(dist: &Dist, lock: LockMode) -> Result<()> {
    for o in &dist.sets {
        let m = &o.manifest.manifest;
        let bytes: u64 = m.artifacts.iter().map(|a| a.size).sum();
        let set = if o.manifest.set.is_some() { format!(" (set {})", o.set) } else { String::new() };
        println!(
            "{}{set}: {} artifacts ({:.1} MB) in {:.1} s; manifest {}",
            o.out.display(),
            m.artifacts.len(),
            bytes as f64 / 1e6,
            dist.seconds,
            o.out.join(kiln_manifest::FILE_NAME).display()
        );
        if !o.crates.is_empty() {
            let total: u64 = o.crates.iter().map(|c| c.size).sum();
            println!("{} crates ({:.1} MB) in {}", o.crates.len(), total as f64 / 1e6, o.out.join(kiln_dist::package::CRATES_DIR).display());
        }
        match lock {
            LockMode::Check => println!("{}", Lock::load(&o.lock)?.summary(&o.lock, m.artifacts.len(), &o.objects, o.payloads.as_ref())),
            LockMode::Update => {
                let l = Lock::load(&o.lock)?;
                println!("{}: {} artifact, {} object and {} payload hashes", o.lock.display(), l.artifacts.len(), l.objects.len(), l.payloads.len())
            }
            LockMode::Off => {}
        }
    }
    Ok(())
}
