//! `cargo xtask dist merge`: shards' parts merged into their set's dist folder (kiln-dist's `Builder::merge`).

use std::path::Path;

use anyhow::Result;
use kiln_dist::LockMode;

use crate::{flags, setup};

/// `dist merge DIR...`.
pub fn run(pins_path: &Path, m: flags::Merge) -> Result<()> {
    let pins = crate::load_pins(pins_path)?;
    let root = crate::project_root();
    // Relative part folders are relative to where the command was typed (a shell glob expanded there).
    let here = crate::invoked_from();
    let parts: Vec<_> = m.parts.iter().map(|p| here.join(p)).collect();
    let lock = if m.locked { LockMode::Check } else { LockMode::Off };
    // The parts name their set; its lock is beside pins.toml's other locks.
    let dist =
        setup::builder(&pins, &root, lock, !m.no_package, m.jobs, m.verbose, &m.remote)?.out(root.join(&m.out)).merge(&parts, &|l| crate::say(l))?;
    setup::report(&dist, lock)?;
    Ok(())
}
