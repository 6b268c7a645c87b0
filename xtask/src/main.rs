//! `cargo xtask`: kiln's command line. One module per task; the pipeline
//! itself lives in the library crates under crates/ (docs/ARCHITECTURE.md).

mod cache;
mod ci;
mod container;
mod dist;
mod doctor;
mod flags;
mod merge;
mod pins;
mod publish;
mod setup;
mod sign;
mod test;
mod test_matrix;
mod toolchain;
mod verify;
mod verify_crate;

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Parser;

fn main() -> std::process::ExitCode {
    let flags = flags::Xtask::parse();
    match run(flags) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Where the command was typed, before [`run`] moves to the repository root:
/// paths that name existing things the user points at (part folders) are relative to it.
static INVOKED_FROM: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

pub fn invoked_from() -> PathBuf {
    INVOKED_FROM.get().cloned().unwrap_or_else(project_root)
}

fn run(flags: flags::Xtask) -> Result<()> {
    if let Ok(here) = std::env::current_dir() {
        INVOKED_FROM.get_or_init(|| here);
    }
    std::env::set_current_dir(project_root())?;
    match flags.task {
        flags::Task::Dist(d) => dist::run(&flags.pins, d),
        flags::Task::Verify(v) => verify::run(&flags.pins, v),
        flags::Task::VerifyCrate(v) => verify_crate::run(&flags.pins, v),
        flags::Task::Test { no_dist, args } => test::run(&flags.pins, no_dist, args),
        flags::Task::Ci { check } => ci::run(&flags.pins, check),
        flags::Task::TestMatrix(t) => test_matrix::run(&flags.pins, t),
        flags::Task::Toolchain => toolchain::run(&flags.pins),
        flags::Task::Doctor => doctor::run(&flags.pins),
        flags::Task::Container(c) => container::run(&flags.pins, c),
        flags::Task::Pins { action } => pins::run(&flags.pins, action),
        flags::Task::Publish(p) => publish::run(p),
        flags::Task::Sign(s) => sign::run(s),
        flags::Task::Registry { action } => publish::registry(action),
        flags::Task::Cache { action } => cache::run(action),
    }
}

/// The repository root: the parent of this crate, or, for an xtask binary
/// carried to another machine (a GPU host with no cargo, for `test-matrix`),
/// the checkout around the current directory.
pub fn project_root() -> PathBuf {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    if built.join(kiln_pins::FILE_NAME).is_file() {
        return built;
    }
    let here = std::env::current_dir().ok();
    here.as_deref()
        .and_then(|d| d.ancestors().find(|a| a.join(kiln_pins::FILE_NAME).is_file() && a.join(kiln_matrix::FILE).is_file()))
        .map(Path::to_path_buf)
        .unwrap_or(built)
}

pub fn load_pins(path: &Path) -> Result<kiln_pins::Pins> {
    Ok(kiln_pins::Pins::load(path)?)
}

/// Progress lines go to stderr, so that stdout stays parseable.
pub fn say(line: String) {
    eprintln!("{line}");
}
