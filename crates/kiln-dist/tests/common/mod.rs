//! What kiln-dist's integration tests share: the repository, its pins, the
//! provisioned pinned toolchain, and a fresh scratch folder. (Each test file
//! uses part of it.)
#![allow(dead_code)]

use std::{
    fs,
    path::{Path, PathBuf},
};

use kiln_pins::Pins;
use kiln_toolchain::{sysroot, Cache, Runner};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

pub fn pins() -> Pins {
    Pins::load(&repo().join("pins.toml")).unwrap()
}

/// A runner for the pinned toolchain, provisioned into the cache on first use (about 1.2 GB).
pub fn runner(pins: &Pins) -> Runner {
    let cache = Cache::from_env().unwrap();
    let root = sysroot::provision(&cache, pins, 4, &|l| eprintln!("{l}")).expect("the pinned toolchain provisions");
    Runner::new(root).unwrap()
}

pub fn toolchain() -> (Pins, Runner) {
    let pins = pins();
    let runner = runner(&pins);
    (pins, runner)
}

/// A fresh, empty folder for one test of one file (`label`, e.g. `graph-archive`).
pub fn temp(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-{label}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}
