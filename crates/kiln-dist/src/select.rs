//! Which part of the build a run asks for (`--module`, `--arch`): the whole
//! pinned matrix of the sets it builds by default, a slice of it for quick
//! iterations and tests.

use anyhow::{bail, Result};
use kiln_build::{
    plan::{self, LibCubin},
    Arch, Job, JobKind, Plan,
};
use kiln_pins::{KernelSet, LibKernels, Pins, SassBy, Sm, Target};

/// A static library's compile jobs ([`Selection::library_jobs`]).
pub struct LibraryJobs {
    /// Per archive (the toolchain's own CPU's first; a per-target library has
    /// one per host CPU), its arch and what it is made of, in archive order.
    pub archives: Vec<(Arch, Vec<Job>)>,
    /// A per-target library's PTX that its cubins of a level share
    /// (intermediates: [`JobKind::LibPtx`]).
    pub ptx: Vec<Job>,
    /// A per-target library's cubins: artifacts like a module's, each with
    /// the index into `ptx` of the job it is assembled from, if any.
    pub cubins: Vec<LibCubin>,
}

impl LibraryJobs {
    /// Every object job, archive by archive.
    pub fn objects(&self) -> impl Iterator<Item = &Job> {
        self.archives.iter().flat_map(|(_, o)| o)
    }
}

#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Module names (`affine`, or a static library's `moe`); empty: all.
    pub modules: Vec<String>,
    /// Targets; empty: all of them.
    pub archs: Vec<Target>,
}

impl Selection {
    /// From `--module` and `--arch` values, refusing names that none of
    /// `sets` has and listing what they have.
    pub fn new(modules: Vec<String>, archs: &[String], sets: &[&KernelSet]) -> Result<Selection> {
        let known = known_targets(sets);
        let list = || known.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ");
        let archs = archs
            .iter()
            .map(|a| match Target::parse(a) {
                Ok(t) if known.contains(&t) => Ok(t),
                _ => bail!("unknown arch `{a}` (--arch); the sets built ({}) have: {}", names(sets), list()),
            })
            .collect::<Result<Vec<_>>>()?;
        let s = Selection { modules, archs };
        s.check(sets)?;
        Ok(s)
    }

    pub fn is_all(&self) -> bool {
        self.modules.is_empty() && self.archs.is_empty()
    }

    /// Refuses module names that none of `sets` has, listing what they have,
    /// and a pair of lists that selects nothing.
    pub fn check(&self, sets: &[&KernelSet]) -> Result<()> {
        let modules = known_modules(sets);
        for m in &self.modules {
            if !modules.contains(m) {
                bail!("unknown module `{m}` (--module); the sets built ({}) have: {}", names(sets), modules.join(", "));
            }
        }
        if !self.modules.is_empty() && !self.archs.is_empty() && !sets.iter().any(|s| self.builds(s)) {
            let archs: Vec<String> = self.archs.iter().map(|t| t.to_string()).collect();
            bail!("--module {} with --arch {} selects nothing to build", self.modules.join(","), archs.join(","));
        }
        Ok(())
    }

    /// Whether the selection builds anything of `set`.
    pub fn builds(&self, set: &KernelSet) -> bool {
        let modules = set.modules.iter().filter(|m| self.module(m)).count();
        let archs = set.targets.all().iter().filter(|t| self.arch(t)).count();
        modules * archs > 0 || self.wants_staticlib(set)
    }

    fn module(&self, m: &str) -> bool {
        self.modules.is_empty() || self.modules.iter().any(|x| x == m)
    }
    fn arch(&self, t: &Target) -> bool {
        self.archs.is_empty() || self.archs.contains(t)
    }

    pub fn module_jobs(&self, plan: &Plan, pins: &Pins) -> Result<Vec<Job>> {
        plan::module_jobs(plan, pins, &|m, a| self.module(m) && self.arch(a))
    }

    /// Whether a selected sm's SASS comes from the pinned newer ptxas: a
    /// module's, or the static library's.
    pub fn needs_ptxas(&self, pins: &Pins, set: &KernelSet) -> bool {
        let modules = set.modules.iter().any(|m| self.module(m));
        let t = &set.targets;
        let by_ptxas = |by: SassBy| matches!(by, SassBy::Ptxas { .. });
        let for_modules = modules && t.cuda_sass.iter().any(|&s| self.arch(&Target::Sass(s)) && by_ptxas(pins.sass_by(t, s)));
        let for_lib = match &set.staticlib {
            Some(lib) if self.wants_staticlib(set) => self.staticlib_targets(set).0.iter().any(|&s| by_ptxas(pins.lib_sass_by(lib, s))),
            _ => false,
        };
        for_modules || for_lib
    }

    /// The set's static library's sms and PTX levels that the selection
    /// names (all of them by default).
    pub fn staticlib_targets(&self, set: &KernelSet) -> (Vec<Sm>, Vec<Sm>) {
        let Some(lib) = &set.staticlib else { return (Vec::new(), Vec::new()) };
        let sass = lib.sass.iter().copied().filter(|&s| self.arch(&Target::Sass(s))).collect();
        let ptx = lib.ptx.iter().copied().filter(|&l| self.arch(&Target::Ptx(l))).collect();
        (sass, ptx)
    }

    pub fn wants_staticlib(&self, set: &KernelSet) -> bool {
        let Some(lib) = &set.staticlib else { return false };
        let (sass, ptx) = self.staticlib_targets(set);
        self.module(&lib.name) && !(sass.is_empty() && ptx.is_empty())
    }

    pub fn object_jobs(&self, plan: &Plan) -> Result<Vec<Job>> {
        let (sass, ptx) = self.staticlib_targets(&plan.set);
        let jobs = plan::object_jobs(plan, &sass, &ptx)?;
        debug_assert!(jobs.iter().all(|j| j.kind == JobKind::Object));
        Ok(jobs)
    }

    /// The static library's compile jobs for the selection, as its pins say it
    /// carries its kernels (the one place the dist's graph and `--shard` ask):
    /// fat objects; or per target, host objects per host CPU, a cubin per
    /// file and sm, and per file the PTX its cubins of one level share.
    pub fn library_jobs(&self, plan: &Plan, pins: &Pins) -> Result<LibraryJobs> {
        let Some(lib) = &plan.set.staticlib else { bail!("set `{}` has no static library", plan.set.name) };
        let (sass, ptx) = self.staticlib_targets(&plan.set);
        Ok(match lib.kernels {
            LibKernels::Fat => {
                LibraryJobs { archives: vec![(Arch::Fat { sass, ptx }, self.object_jobs(plan)?)], ptx: Vec::new(), cubins: Vec::new() }
            }
            LibKernels::PerTarget => {
                let plan::LibJobs { objects, ptx, cubins } = plan::lib_jobs(plan, pins, &sass)?;
                LibraryJobs { archives: objects.into_iter().map(|h| (Arch::Host(h.host), h.objects)).collect(), ptx, cubins }
            }
        })
    }

    fn archs_text(&self) -> String {
        self.archs.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
    }

    pub fn describe(&self) -> String {
        match (self.modules.is_empty(), self.archs.is_empty()) {
            (true, true) => "every module for every pinned target".into(),
            (false, true) => format!("module(s) {} for every pinned target", self.modules.join(", ")),
            (true, false) => format!("every module for {}", self.archs_text()),
            (false, false) => format!("module(s) {} for {}", self.modules.join(", "), self.archs_text()),
        }
    }
}

fn names(sets: &[&KernelSet]) -> String {
    sets.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
}

/// Every module and static library of `sets`: what `--module` may name.
pub(crate) fn known_modules(sets: &[&KernelSet]) -> Vec<String> {
    sets.iter().flat_map(|s| s.module_names()).collect()
}

/// Every target `--arch` may name: the sets' targets and their static
/// libraries' own sms and PTX levels (candle's compute_90).
pub(crate) fn known_targets(sets: &[&KernelSet]) -> Vec<Target> {
    let mut v: Vec<Target> = Vec::new();
    for s in sets {
        let lib = s.staticlib.iter().flat_map(|l| l.sass.iter().map(|&x| Target::Sass(x)).chain(l.ptx.iter().map(|&x| Target::Ptx(x))));
        for t in s.targets.all().into_iter().chain(lib) {
            if !v.contains(&t) {
                v.push(t);
            }
        }
    }
    v
}
