//! `cargo xtask test-matrix`: the GPU legs this machine can run, and a
//! leg × module report (crates/kiln-kernel-tests, `matrix`).

use std::path::Path;

use anyhow::{bail, Result};
use kiln_kernel_tests::matrix::{self, Options};

use crate::{flags, project_root, say};

pub fn run(pins: &Path, f: flags::TestMatrix) -> Result<()> {
    let root = project_root();
    let pairs = |v: &[String]| v.iter().map(|s| matrix::parse_arch_path(s)).collect::<Result<Vec<_>>>();
    let opts = Options {
        root: root.clone(),
        pins: pins.to_path_buf(),
        archive: f.archive_file.map(|a| root.join(a)),
        junit: pairs(&f.from_junit)?,
        lists: pairs(&f.lists)?,
        archs: f.archs,
        dist: f.dist.map(|d| root.join(d)),
        nextest: f.nextest,
        out: root.join(f.out),
    };
    let outcome = matrix::run(&opts)?;
    print!("{}", outcome.table);
    say(format!("wrote {}", outcome.report.display()));
    if outcome.failed {
        bail!("a leg failed or could not run; {} says which tests and why", outcome.report.display());
    }
    Ok(())
}
