use std::path::Path;

use anyhow::{Context, Result};
use kiln_toolchain::{sysroot, Cache};
use xshell::{cmd, Shell};

/// Provisions what the tests compile with (once, not in every test process),
/// then runs the workspace's tests with nextest.
pub fn run(pins: &Path, args: Vec<String>) -> Result<()> {
    let pins = crate::load_pins(pins)?;
    let cache = Cache::from_env()?;
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let root = sysroot::provision(&cache, &pins, jobs, &|l| crate::say(l))?;
    crate::say(format!("toolchain: {}", root.root.display()));
    let c = &pins.candle;
    kiln_build::upstream::fetch_crate(&cache, &c.crate_name, &c.version, &c.sha256, &|l| crate::say(l))?;

    let sh = Shell::new()?;
    sh.change_dir(crate::project_root());
    cmd!(sh, "cargo nextest --version").quiet().ignore_stdout().run().context("cargo-nextest is missing: run `bash .ci/setup` (or `cargo install cargo-nextest`)")?;
    cmd!(sh, "cargo nextest run --workspace --no-fail-fast {args...}").run().context("tests failed")?;
    Ok(())
}
