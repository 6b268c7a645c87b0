//! The command line. `cargo xtask --help` and `cargo xtask <task> --help` print this.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "cargo xtask",
    about = "kiln: candle's GPU kernels as reproducible, prebuilt, multi-arch artifacts",
    long_about = "kiln: candle's GPU kernels as reproducible, prebuilt, multi-arch artifacts.\n\n\
        Everything kiln downloads or targets is pinned in pins.toml. Downloads, unpacked \
        toolchains and compiled kernels are cached in $KILN_CACHE_DIR (default ~/.cache/kiln).",
    after_help = "Start with `cargo xtask dist`; `cargo xtask doctor` says what kiln finds on this machine."
)]
pub struct Xtask {
    /// The pin file to use.
    #[arg(long, global = true, default_value = "pins.toml", value_name = "FILE")]
    pub pins: PathBuf,
    #[command(subcommand)]
    pub task: Task,
}

#[derive(Subcommand, Debug)]
pub enum Task {
    /// Provision the pinned toolchain: download every package, verify its sha256, unpack.
    Toolchain,
    /// Print what kiln finds: pins, cache, toolchain, sandbox, compilers.
    Doctor,
    /// Work on the pin file.
    Pins {
        #[command(subcommand)]
        action: PinsAction,
    },
}

#[derive(Subcommand, Debug)]
pub enum PinsAction {
    /// Check the pin file and print a summary.
    Check,
    /// Resolve [toolchain] into the exact package closure and rewrite its generated part.
    Update,
}
