//! `cargo xtask dist`: kiln-dist's `Builder` from the flags, its outcome printed.

use std::path::Path;

use anyhow::Result;
use kiln_dist::LockMode;

use crate::{flags, setup};

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
    let builder = setup::builder(&pins, &root, lock, !f.no_package, f.jobs, f.verbose, &f.remote)?
        .only(&f.sets)
        .select(f.modules, f.archs)
        .no_compile(f.no_compile);
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
    setup::report(&dist, lock)?;
    if f.update_costs {
        let r = kiln_dist::costs::record(&costs_path, &dist.compiled, &dist.whole, setup::workers(f.jobs))?;
        println!(
            "{}: {} of {} jobs measured ({} without a recorded time kept their old figure), {} entries of jobs in no plan dropped",
            costs_path.display(),
            r.measured,
            dist.compiled.len(),
            dist.compiled.len() - r.measured,
            r.dropped.len()
        );
    }
    Ok(())
}
