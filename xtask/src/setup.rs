//! The `Builder` that `cargo xtask dist` and `dist merge` both start from (the
//! flags they share), and what both print of its outcome.

use std::path::Path;

use anyhow::Result;
use kiln_dist::{lock::Lock, Builder, Dist, LockMode};
use kiln_pins::Pins;
use kiln_toolchain::remote;

use crate::flags;

/// `-j`, else one job per core ([`kiln_toolchain::default_workers`]).
pub(crate) fn workers(jobs: Option<usize>) -> usize {
    jobs.unwrap_or_else(kiln_toolchain::default_workers)
}

/// The builder of the pin file's sets in the checkout `root`, with the flags both commands take.
pub(crate) fn builder<'p>(
    pins: &'p Pins,
    root: &Path,
    lock: LockMode,
    package: bool,
    jobs: Option<usize>,
    verbose: bool,
    remote: &flags::Remote,
) -> Result<Builder<'p>> {
    Ok(Builder::from_pins(pins)
        .kiln_dir(root)
        .base(root)
        .lock(lock)
        .package(package)
        .workers(workers(jobs))
        .verbose(verbose)
        .remote(remote::Config::resolve(remote.url.as_deref(), remote.read_only)?))
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
