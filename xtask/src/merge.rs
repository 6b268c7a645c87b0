use std::path::Path;

use anyhow::Result;
use kiln_dist::{Builder, LockMode};

use crate::{
    dist::{remote_config, report, workers},
    flags,
};

/// `dist merge DIR...`.
pub fn run(pins_path: &Path, m: flags::Merge) -> Result<()> {
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
