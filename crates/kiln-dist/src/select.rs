//! Which part of the build a run asks for (`--module`, `--arch`): the whole
//! pinned matrix by default, a slice of it for quick iterations and tests.

use anyhow::{bail, Result};
use kiln_build::{plan, Job, Kind, Plan};
use kiln_pins::{Pins, SassBy, Sm};

#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Module names (`affine`, or the static library's `moe`); empty: all.
    pub modules: Vec<String>,
    /// Targets (`gfx90a`, `compute_80`, `sm_90`); empty: all pinned ones.
    pub archs: Vec<String>,
}

impl Selection {
    pub fn is_all(&self) -> bool {
        self.modules.is_empty() && self.archs.is_empty()
    }

    /// Refuses names that are not in the pin file, listing what is.
    pub fn check(&self, pins: &Pins) -> Result<()> {
        let modules = known_modules(pins);
        for m in &self.modules {
            if !modules.contains(m) {
                bail!("unknown module `{m}` (--module); pins.toml has: {}", modules.join(", "));
            }
        }
        let archs = known_archs(pins);
        for a in &self.archs {
            if !archs.contains(a) {
                bail!("unknown arch `{a}` (--arch); pins.toml [targets] has: {}", archs.join(", "));
            }
        }
        if !self.modules.is_empty() && !self.archs.is_empty() && self.module_jobs_possible(pins) == 0 && !self.wants_staticlib(pins) {
            bail!("--module {} with --arch {} selects nothing to build", self.modules.join(","), self.archs.join(","));
        }
        Ok(())
    }

    fn module_jobs_possible(&self, pins: &Pins) -> usize {
        let m = pins.candle.modules.iter().filter(|m| self.module(m)).count();
        let a = module_archs(pins).iter().filter(|a| self.arch(a)).count();
        m * a
    }

    fn module(&self, m: &str) -> bool {
        self.modules.is_empty() || self.modules.iter().any(|x| x == m)
    }
    fn arch(&self, a: &str) -> bool {
        self.archs.is_empty() || self.archs.iter().any(|x| x == a)
    }

    pub fn module_jobs(&self, plan: &Plan, pins: &Pins) -> Result<Vec<Job>> {
        plan::module_jobs(plan, pins, &|m, a| self.module(m) && self.arch(a))
    }

    /// Whether a selected sm's SASS comes from the pinned newer ptxas.
    pub fn needs_ptxas(&self, pins: &Pins) -> bool {
        let sms = pins.targets.cuda_sass.iter().filter(|s| self.arch(&s.sass()));
        pins.candle.modules.iter().any(|m| self.module(m)) && sms.into_iter().any(|&s| matches!(pins.sass_by(s), SassBy::Ptxas { .. }))
    }

    /// The static library's pinned sms and PTX levels that the selection
    /// names (all of them by default).
    pub fn staticlib_targets(&self, pins: &Pins) -> (Vec<Sm>, Vec<Sm>) {
        let lib = &pins.candle.staticlib;
        (lib.sass.iter().copied().filter(|s| self.arch(&s.sass())).collect(), lib.ptx.iter().copied().filter(|l| self.arch(&l.ptx())).collect())
    }

    pub fn wants_staticlib(&self, pins: &Pins) -> bool {
        let (sass, ptx) = self.staticlib_targets(pins);
        self.module(&pins.candle.staticlib.name) && !(sass.is_empty() && ptx.is_empty())
    }

    pub fn object_jobs(&self, plan: &Plan, pins: &Pins) -> Result<Vec<Job>> {
        let (sass, ptx) = self.staticlib_targets(pins);
        let jobs = plan::object_jobs(plan, pins, &sass, &ptx)?;
        debug_assert!(jobs.iter().all(|j| j.kind == Kind::Object));
        Ok(jobs)
    }

    pub fn describe(&self) -> String {
        match (self.modules.is_empty(), self.archs.is_empty()) {
            (true, true) => "every module for every pinned target".into(),
            (false, true) => format!("module(s) {} for every pinned target", self.modules.join(", ")),
            (true, false) => format!("every module for {}", self.archs.join(", ")),
            (false, false) => format!("module(s) {} for {}", self.modules.join(", "), self.archs.join(", ")),
        }
    }
}

pub fn known_modules(pins: &Pins) -> Vec<String> {
    let mut v = pins.candle.modules.clone();
    v.push(pins.candle.staticlib.name.clone());
    v
}

/// The targets the PTX modules are built for.
fn module_archs(pins: &Pins) -> Vec<String> {
    let t = &pins.targets;
    let mut v: Vec<String> = t.hip.iter().map(|a| a.to_string()).collect();
    v.extend(t.cuda_ptx.iter().map(|s| s.ptx()));
    v.extend(t.cuda_sass.iter().map(|s| s.sass()));
    v
}

pub fn known_archs(pins: &Pins) -> Vec<String> {
    let mut v = module_archs(pins);
    // The static library's own PTX levels (compute_90) are targets too.
    for l in &pins.candle.staticlib.ptx {
        if !v.contains(&l.ptx()) {
            v.push(l.ptx());
        }
    }
    v
}
