//! What kiln-dist's integration tests share: the repository, its pins, the
//! provisioned pinned toolchain, and a fresh scratch folder. (Each test file
//! uses part of it.)
#![allow(dead_code)]

use std::path::{Path, PathBuf};

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

/// A fresh, empty folder for one test of one file (`label`, e.g. `graph-archive`),
/// removed when the test ends, passed or not: bind it for as long as it is used.
pub fn temp(label: &str) -> Temp {
    Temp(tempfile::Builder::new().prefix(&format!("kiln-{label}-")).tempdir().unwrap())
}

pub struct Temp(tempfile::TempDir);
impl std::ops::Deref for Temp {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}
impl From<&Temp> for PathBuf {
    fn from(t: &Temp) -> PathBuf {
        t.0.path().to_path_buf()
    }
}
impl AsRef<Path> for Temp {
    fn as_ref(&self) -> &Path {
        self.0.path()
    }
}
