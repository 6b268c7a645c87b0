//! Which part of the build a run asks for (`--module`, `--arch`): the whole
//! pinned matrix by default, a slice of it for quick iterations and tests.

use anyhow::{bail, Result};
use kiln_build::{plan, Job, Kind, Plan};
use kiln_pins::{Pins, SassBy, Sm, Target};

#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Module names (`affine`, or the static library's `moe`); empty: all.
    pub modules: Vec<String>,
    /// Pinned targets; empty: all of them.
    pub archs: Vec<Target>,
}

impl Selection {
    /// From `--module` and `--arch` values, refusing names that are not in
    /// the pin file and listing what is.
    pub fn new(modules: Vec<String>, archs: &[String], pins: &Pins) -> Result<Selection> {
        let pinned = known_targets(pins);
        let known = || pinned.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ");
        let archs = archs
            .iter()
            .map(|a| match Target::parse(a) {
                Ok(t) if pinned.contains(&t) => Ok(t),
                _ => bail!("unknown arch `{a}` (--arch); pins.toml [targets] has: {}", known()),
            })
            .collect::<Result<Vec<_>>>()?;
        let s = Selection { modules, archs };
        s.check(pins)?;
        Ok(s)
    }

    pub fn is_all(&self) -> bool {
        self.modules.is_empty() && self.archs.is_empty()
    }

    /// Refuses module names that are not in the pin file, listing what is,
    /// and a pair of lists that selects nothing.
    pub fn check(&self, pins: &Pins) -> Result<()> {
        let modules = known_modules(pins);
        for m in &self.modules {
            if !modules.contains(m) {
                bail!("unknown module `{m}` (--module); pins.toml has: {}", modules.join(", "));
            }
        }
        if !self.modules.is_empty() && !self.archs.is_empty() && self.module_jobs_possible(pins) == 0 && !self.wants_staticlib(pins) {
            let archs: Vec<String> = self.archs.iter().map(|t| t.to_string()).collect();
            bail!("--module {} with --arch {} selects nothing to build", self.modules.join(","), archs.join(","));
        }
        Ok(())
    }

    fn module_jobs_possible(&self, pins: &Pins) -> usize {
        let m = pins.candle.modules.iter().filter(|m| self.module(m)).count();
        let a = pins.targets.all().iter().filter(|t| self.arch(t)).count();
        m * a
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

    /// Whether a selected sm's SASS comes from the pinned newer ptxas.
    pub fn needs_ptxas(&self, pins: &Pins) -> bool {
        let modules = pins.candle.modules.iter().any(|m| self.module(m));
        modules && pins.targets.cuda_sass.iter().any(|&s| self.arch(&Target::Sass(s)) && matches!(pins.sass_by(s), SassBy::Ptxas { .. }))
    }

    /// The static library's pinned sms and PTX levels that the selection
    /// names (all of them by default).
    pub fn staticlib_targets(&self, pins: &Pins) -> (Vec<Sm>, Vec<Sm>) {
        let lib = &pins.candle.staticlib;
        let sass = lib.sass.iter().copied().filter(|&s| self.arch(&Target::Sass(s))).collect();
        let ptx = lib.ptx.iter().copied().filter(|&l| self.arch(&Target::Ptx(l))).collect();
        (sass, ptx)
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

pub fn known_modules(pins: &Pins) -> Vec<String> {
    let mut v = pins.candle.modules.clone();
    v.push(pins.candle.staticlib.name.clone());
    v
}

/// Every target `--arch` may name: the modules' and the static library's own
/// PTX levels (compute_90).
pub fn known_targets(pins: &Pins) -> Vec<Target> {
    let mut v = pins.targets.all();
    for &l in &pins.candle.staticlib.ptx {
        if !v.contains(&Target::Ptx(l)) {
            v.push(Target::Ptx(l));
        }
    }
    v
}
