//! `cargo xtask verify`: a written dist folder read back against its manifest and lock (kiln-dist's `verify`).

use std::path::Path;

use anyhow::Result;

use crate::flags;

/// Re-hashes the dist folder against its manifest, and the manifest against the lock.
pub fn run(pins_path: &Path, v: flags::Verify) -> Result<()> {
    let _pins = crate::load_pins(pins_path)?;
    let root = crate::project_root();
    let dist = root.join(&v.dist);
    let (artifacts, crates, lock_name) = kiln_dist::verify::against_its_lock(&dist, &root)?;
    println!("{}: {artifacts} artifacts match the manifest and {lock_name} ({crates} crates match crates.json)", dist.display());
    Ok(())
}
