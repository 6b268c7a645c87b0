//! `cargo xtask ci`: the workflow from the runner matrix (crates/kiln-matrix).

use std::path::Path;

use anyhow::{bail, Result};
use kiln_matrix::{
    workflow::{self, Drift},
    Matrix, Status,
};

use crate::{load_pins, say};

pub fn run(pins_file: &Path, check: bool) -> Result<()> {
    let pins = load_pins(pins_file)?;
    let matrix = Matrix::load(Path::new(kiln_matrix::FILE), &pins)?;
    let files = workflow::generate(&matrix);
    let root = Path::new(".");

    let waiting: Vec<String> = matrix.legs.iter().filter(|l| l.status == Status::AwaitingRunner).map(|l| l.arch.name()).collect();
    if !waiting.is_empty() {
        say(format!("awaiting a runner (dispatch-only jobs): {}", waiting.join(", ")));
    }
    let placeholders: Vec<String> = matrix.legs.iter().filter(|l| l.image.is_placeholder()).map(|l| l.arch.name()).collect();
    if !placeholders.is_empty() {
        say(format!("warning: placeholder runner image digest (not published yet): {}", placeholders.join(", ")));
    }
    let untested = matrix.untested_targets(&pins.targets);
    if !untested.is_empty() {
        say(format!("built by dist but tested on no GPU: {}", untested.join(", ")));
    }

    if check {
        let drift = workflow::drift(root, &files)?;
        if !drift.is_empty() {
            let lines: Vec<String> = drift.iter().map(|d| format!("  {d}")).collect();
            bail!(
                "the checked-in workflows are not what {} generates:\n{}\nrun `cargo xtask ci` and commit the result",
                kiln_matrix::FILE,
                lines.join("\n")
            );
        }
        say(format!("{} is up to date ({} legs)", workflow::WORKFLOW, matrix.legs.len()));
        return Ok(());
    }

    let changes = workflow::write(root, &files)?;
    if changes.is_empty() {
        say(format!("{} is up to date ({} legs)", workflow::WORKFLOW, matrix.legs.len()));
    }
    for change in changes {
        match change {
            Drift::Missing(p) | Drift::Differs(p) => say(format!("wrote {}", p.display())),
            Drift::Stale(p) => say(format!("removed {} (no longer generated)", p.display())),
        }
    }
    Ok(())
}
