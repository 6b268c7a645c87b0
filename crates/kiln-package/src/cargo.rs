//! `cargo package` of the generated workspace: the `.crate` files are what
//! `cargo publish` uploads. Each must fit crates.io's limit.

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use xshell::{cmd, Shell};

use crate::CRATES_IO_LIMIT;

#[derive(Clone, Debug)]
pub struct Packaged {
    pub name: String,
    pub file: PathBuf,
    pub size: u64,
}

/// Packages every crate of the generated workspace at `root` (in dependency
/// order, resolving the unpublished ones among themselves).
pub fn package(root: &Path) -> Result<Vec<Packaged>> {
    let sh = Shell::new()?;
    let manifest = root.join("Cargo.toml");
    let target = root.join("target");
    // No verify build: the consumer test builds the crates for real.
    cmd!(sh, "cargo package --workspace --no-verify --allow-dirty --quiet --manifest-path {manifest} --target-dir {target}")
        .quiet()
        .run()
        .context("cargo package failed for the generated crates")?;
    let mut out = Vec::new();
    for entry in fs::read_dir(target.join("package"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "crate") {
            let size = fs::metadata(&path)?.len();
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            out.push(Packaged { name, file: path, size });
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    let over: Vec<String> = out.iter().filter(|p| p.size > CRATES_IO_LIMIT).map(|p| format!("{} ({} bytes)", p.name, p.size)).collect();
    if !over.is_empty() {
        bail!("over the crates.io limit of {CRATES_IO_LIMIT} bytes: {}", over.join(", "));
    }
    Ok(out)
}
