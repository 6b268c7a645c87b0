//! One compiler run: what it reads, the command, what it writes, and the
//! content key that names its result in the cache.

use std::{collections::HashMap, fmt, path::PathBuf, sync::Mutex};

use anyhow::Result;
use kiln_toolchain::{fetch, Mount};
use sha2::{Digest, Sha256};

use crate::scan::Input;

/// Bump when the meaning of a cache entry changes, to orphan old entries.
const CACHE_FORMAT: &str = "kiln-cache v1";

pub use kiln_target::Backend;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Hsaco,
    Ptx,
    Cubin,
    /// A host object holding a fatbin, for the static library.
    Object,
    Staticlib,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Hsaco => "hsaco",
            Kind::Ptx => "ptx",
            Kind::Cubin => "cubin",
            Kind::Object => "object",
            Kind::Staticlib => "staticlib",
        }
    }

    /// Runs a kernel compiler (what `--no-compile` forbids); the rest only assemble.
    pub fn is_compile(self) -> bool {
        matches!(self, Kind::Hsaco | Kind::Ptx | Kind::Cubin | Kind::Object)
    }
}

#[derive(Clone)]
pub struct Job {
    pub module: String,
    pub backend: Backend,
    /// `gfx90a`, `sm_90`, `compute_80`, or several joined by `+` for a multi-arch object.
    pub arch: String,
    pub kind: Kind,
    /// The command, written against the fixed sandbox paths.
    pub argv: Vec<String>,
    /// The file the command writes into `/kiln/job/`.
    pub output: String,
    /// Every tree file the command reads (they make the cache key).
    pub inputs: Vec<Input>,
    /// Files copied into `/kiln/job/` before the run (e.g. objects for `ar`), by name.
    pub staged: Vec<(String, PathBuf)>,
    pub mounts: Vec<Mount>,
    /// Rough relative cost, to start the longest jobs first.
    pub cost: u64,
}

impl fmt::Display for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.backend.as_str(), self.arch, self.module)
    }
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Job({self}: {})", self.argv.join(" "))
    }
}

/// Hashes of files, computed once per run however many jobs read them.
#[derive(Default)]
pub struct Hashes(Mutex<HashMap<PathBuf, String>>);

impl Hashes {
    pub fn of(&self, path: &PathBuf) -> Result<String> {
        if let Some(h) = self.0.lock().unwrap().get(path) {
            return Ok(h.clone());
        }
        let h = fetch::sha256_file(path)?;
        self.0.lock().unwrap().insert(path.clone(), h.clone());
        Ok(h)
    }
}

impl Job {
    /// The text the cache key hashes: everything that can change the output.
    pub fn recipe(&self, toolchain: &str, hashes: &Hashes) -> Result<String> {
        let mut r = format!("{CACHE_FORMAT}\ntoolchain {toolchain}\nkind {}\noutput {}\n", self.kind.as_str(), self.output);
        for a in &self.argv {
            r.push_str(&format!("arg {a}\n"));
        }
        for i in &self.inputs {
            r.push_str(&format!("input {} {}\n", i.at, hashes.of(&i.host)?));
        }
        for (name, path) in &self.staged {
            r.push_str(&format!("staged {name} {}\n", hashes.of(path)?));
        }
        Ok(r)
    }

    pub fn key(recipe: &str) -> String {
        fetch::hex(&Sha256::digest(recipe.as_bytes()))
    }
}
