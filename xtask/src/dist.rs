use std::path::Path;

use anyhow::{bail, Context, Result};
use kiln_dist::{costs::Costs, lock::Lock, Builder, Dist, LockMode, SetManifest};
use kiln_toolchain::remote;

use crate::flags;

fn workers(jobs: Option<usize>) -> usize {
    jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
}

/// The remote cache the flags and the environment name, if any.
fn remote_config(r: &flags::Remote) -> Result<Option<remote::Config>> {
    let mut config = match &r.url {
        Some(url) => {
            let mut c = remote::Config::new(url)?;
            c.apply_env()?;
            Some(c)
        }
        None => remote::Config::from_env()?,
    };
    if r.read_only {
        match &mut config {
            Some(c) => c.read_only = true,
            None => bail!("--remote-cache-read-only needs a remote cache: --remote-cache URL or {}", remote::URL_ENV),
        }
    }
    Ok(config)
}

pub fn run(pins_path: &Path, f: flags::Dist) -> Result<()> {
    if let Some(flags::DistCommand::Merge(m)) = f.command {
        return merge(pins_path, m);
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
            &o.part.plan.id[..12],
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
        let mut costs = Costs::load(&costs_path)?;
        let measured: Vec<(String, f64)> = dist.compiled.iter().filter_map(|(l, s)| s.map(|s| (l.clone(), s))).collect();
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        let note = format!("seconds per job as each cache entry recorded them; written with -j {} on a {cores}-core machine", workers(f.jobs));
        let n = costs.update(measured, &note);
        costs.write(&costs_path)?;
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
fn report(dist: &Dist, lock: LockMode) -> Result<()> {
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
            LockMode::Check => println!("all {} artifacts match {}", m.artifacts.len(), o.lock.display()),
            LockMode::Update => println!("{}: {} artifact hashes", o.lock.display(), Lock::load(&o.lock)?.artifacts.len()),
            LockMode::Off => {}
        }
    }
    Ok(())
}

/// `dist merge DIR...`.
fn merge(pins_path: &Path, m: flags::Merge) -> Result<()> {
    let pins = crate::load_pins(pins_path)?;
    let root = crate::project_root();
    // Relative part folders are relative to where the command was typed (a shell glob expanded there).
    let here = crate::invoked_from();
    let parts: Vec<_> = m.parts.iter().map(|p| here.join(p)).collect();
    let lock = if m.locked { LockMode::Check } else { LockMode::Off };
    // The parts name their set; its lock is beside pins.toml's other locks.
    let dist = Builder::from_pins(&pins)
        .kiln_dir(&root)
        .base(&root)
        .out(root.join(&m.out))
        .lock(lock)
        .package(!m.no_package)
        .workers(workers(m.jobs))
        .verbose(m.verbose)
        .remote(remote_config(&m.remote)?)
        .merge(&parts, &|l| crate::say(l))?;
    report(&dist, lock)?;
    Ok(())
}

/// Re-hashes the dist folder against its manifest, and the manifest against the lock.
pub fn verify(pins_path: &Path, v: flags::Verify) -> Result<()> {
    let _pins = crate::load_pins(pins_path)?;
    let root = crate::project_root();
    let dist = root.join(&v.dist);
    // The lock of the set the folder holds: artifacts.lock, or artifacts.<set>.lock.
    let mpath = dist.join(kiln_manifest::FILE_NAME);
    let text = std::fs::read_to_string(&mpath).with_context(|| format!("cannot read {}: run `cargo xtask dist` first", mpath.display()))?;
    let written = SetManifest::from_json(&text, &mpath.display().to_string())?;
    let lock_name = written.lock_name();
    let lock = Lock::load(&root.join(&lock_name))?;
    let (artifacts, crates) = kiln_dist::verify::folder(&dist, &lock)?;
    println!("{}: {artifacts} artifacts match the manifest and {lock_name} ({crates} crates match crates.json)", dist.display());
    Ok(())
}
