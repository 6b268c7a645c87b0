//! `cargo xtask toolchain`: provisions the pinned toolchain and prints its sysroot.

use std::path::Path;

use anyhow::Result;
use kiln_toolchain::{sysroot, Cache};

pub fn run(pins: &Path) -> Result<()> {
    let pins = crate::load_pins(pins)?;
    let cache = Cache::from_env()?;
    let jobs = kiln_toolchain::default_workers();
    let s = sysroot::provision(&cache, &pins, jobs, &|l| crate::say(l))?;
    println!("{}", s.root.display());
    Ok(())
}
