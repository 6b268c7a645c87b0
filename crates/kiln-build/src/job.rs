//! One compiler run: what it reads, the command, what it writes, and the
//! content key that names its result in the cache.

use std::{collections::HashMap, fmt, path::PathBuf, sync::Mutex};

use anyhow::Result;
use kiln_toolchain::Mount;

use crate::scan::Input;

/// Bump when the meaning of a cache entry changes, to orphan old entries.
const CACHE_FORMAT: &str = "kiln-cache v1";

use kiln_manifest::Kind;
use kiln_pins::{Sm, Target};
pub use kiln_target::Backend;

/// What a job compiles for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arch {
    /// One target: a module's HSACO, PTX or cubin.
    One(Target),
    /// Several targets in one object (SASS per sm, PTX per level), and the
    /// archive of such objects (the static library).
    Fat { sass: Vec<Sm>, ptx: Vec<Sm> },
    /// No GPU target: a per-target static library's host-only objects (the
    /// kernels are in its cubins), and their archive, for one host CPU.
    Host(&'static kiln_target::host_object::Host),
}

impl Arch {
    pub fn backend(&self) -> Backend {
        match self {
            Arch::One(t) => t.backend(),
            Arch::Fat { .. } | Arch::Host(_) => Backend::Cuda,
        }
    }
}

impl fmt::Display for Arch {
    /// `gfx90a`, `compute_80`, `sm_90`, or `sm_80+sm_90+compute_90` for several;
    /// `host` (x86_64) or the CPU (`aarch64`) for host objects.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arch::One(t) => t.fmt(f),
            Arch::Fat { sass, ptx } => f.write_str(&sass.iter().map(|s| s.sass()).chain(ptx.iter().map(|l| l.ptx())).collect::<Vec<_>>().join("+")),
            // The toolchain's own CPU keeps the name every lock and cost file has used.
            Arch::Host(h) if *h == kiln_target::host_object::BUILD_HOST => f.write_str("host"),
            Arch::Host(h) => f.write_str(h.cpu),
        }
    }
}

/// What a job writes: an artifact of one of the manifest's kinds, or a host
/// object the static library is archived from (never published).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobKind {
    Artifact(Kind),
    /// A host object of the static library: holding a fatbin, or (per
    /// target) only the tag of its file's cubins.
    Object,
    /// The PTX of one file of a per-target static library at one level,
    /// which its cubins of that level's SASS are assembled from: an
    /// intermediate of the graph (not an artifact, never shipped, not in
    /// the lock), compiled once and read by every cubin that needs it.
    LibPtx,
}

impl JobKind {
    /// The name the cache key's recipe and `job-costs.toml` carry: the
    /// artifact kind's own name, or `object`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Artifact(k) => k.as_str(),
            JobKind::Object => "object",
            JobKind::LibPtx => "lib-ptx",
        }
    }

    /// Runs a kernel compiler (what `--no-compile` forbids); the rest only assemble.
    pub fn is_compile(self) -> bool {
        matches!(self, JobKind::Artifact(Kind::Hsaco | Kind::Ptx | Kind::Cubin) | JobKind::Object | JobKind::LibPtx)
    }

    /// Its output is one of the dist's artifacts (validated, locked, shipped).
    pub fn is_artifact(self) -> bool {
        matches!(self, JobKind::Artifact(_))
    }
}

#[derive(Clone)]
pub struct Job {
    /// The kernel set the job belongs to (messages only: not in the cache key).
    pub set: String,
    pub module: String,
    pub arch: Arch,
    pub kind: JobKind,
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
        write!(f, "{} {} {}/{}", self.arch.backend(), self.arch, self.set, self.module)
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
        let h = kiln_toolchain::tiers::output_sha256(path)?;
        self.0.lock().unwrap().insert(path.clone(), h.clone());
        Ok(h)
    }
}

impl Job {
    /// The one target of a module's job (`None` for the static library's).
    pub fn target(&self) -> Option<&Target> {
        match &self.arch {
            Arch::One(t) => Some(t),
            Arch::Fat { .. } | Arch::Host(_) => None,
        }
    }

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

    /// The cache key of a recipe's text.
    pub fn key(recipe: &str) -> String {
        kiln_toolchain::tiers::entry_key(recipe)
    }
}

/// The text the cache key of an in-process step hashes: what its code is
/// (`recipe`, versioned by whoever writes the step), the toolchain (a step may
/// run a pinned tool), its output's name and every input it reads.
pub fn step_recipe(toolchain: &str, recipe: &str, output: &str, staged: &[(String, PathBuf)], hashes: &Hashes) -> Result<String> {
    let mut r = format!("{CACHE_FORMAT}\ntoolchain {toolchain}\nstep {recipe}\noutput {output}\n");
    for (name, path) in staged {
        r.push_str(&format!("staged {name} {}\n", hashes.of(path)?));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_kinds_keep_the_names_their_cache_keys_and_costs_carry() {
        // Every cache key's recipe and job-costs.toml name a job's kind: a
        // renamed kind would orphan the cache and every measured cost.
        let names: Vec<(&str, bool)> = [
            JobKind::Artifact(Kind::Hsaco),
            JobKind::Artifact(Kind::Ptx),
            JobKind::Artifact(Kind::Cubin),
            JobKind::Object,
            JobKind::Artifact(Kind::Staticlib),
            JobKind::Artifact(Kind::Bundle),
            JobKind::LibPtx,
        ]
        .into_iter()
        .map(|k| (k.as_str(), k.is_compile()))
        .collect();
        assert_eq!(
            names,
            [("hsaco", true), ("ptx", true), ("cubin", true), ("object", true), ("staticlib", false), ("bundle", false), ("lib-ptx", true)]
        );
        assert!(!JobKind::LibPtx.is_artifact() && !JobKind::Object.is_artifact() && JobKind::Artifact(Kind::Cubin).is_artifact());
    }
}
