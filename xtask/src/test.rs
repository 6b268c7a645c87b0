//! `cargo xtask test`: the lint gate, then the workspace's tests.

use std::path::Path;

use anyhow::{Context, Result};
use xshell::{cmd, Shell};

/// Builds what the tests read (the toolchain, and `target/dist` checked
/// against artifacts.lock: the reproducibility test that matters most), runs
/// the lint gate (rustfmt, clippy with warnings denied), then the workspace's
/// tests with nextest.
pub fn run(pins: &Path, no_dist: bool, args: Vec<String>) -> Result<()> {
    let sh = Shell::new()?;
    sh.change_dir(crate::project_root());
    cmd!(sh, "cargo nextest --version")
        .quiet()
        .ignore_stdout()
        .run()
        .context("cargo-nextest is missing: run `bash .ci/setup` (or `cargo install cargo-nextest`)")?;
    if no_dist {
        crate::toolchain::run(pins)?;
    } else {
        crate::say("cargo xtask test: building target/dist first (`cargo xtask dist --locked`; cached after the first run)".into());
        let pins = pins.to_path_buf();
        cmd!(sh, "cargo xtask --pins {pins} dist --locked").run().context(
            "`cargo xtask dist --locked` failed, so the tests did not run. If you changed what the kernels are built \
             from on purpose, run `cargo xtask dist --update-lock` and commit artifacts.lock",
        )?;
    }
    // The lint gate first: seconds, and a failure there says more than a test would.
    cmd!(sh, "cargo fmt --all --check").run().context("rustfmt would change files: run `cargo fmt --all` and commit the result")?;
    cmd!(sh, "cargo clippy --workspace --all-targets --quiet -- -D warnings")
        .run()
        .context("clippy found warnings (denied): fix them, or allow one with a comment saying why")?;
    cmd!(sh, "cargo nextest run --workspace --no-fail-fast {args...}").run().context("tests failed")?;
    Ok(())
}
