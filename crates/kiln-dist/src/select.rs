//! Which part of the build a run asks for (`--module`, `--arch`): the whole
//! pinned matrix by default, a slice of it for quick iterations and tests.

use anyhow::{bail, Result};
use kiln_build::{plan, Job, Kind, Plan};
use kiln_pins::{Pins, Sm, Target};

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
        let pinned = pins.targets.all();
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

    /// The static library is built with the selected sms (all pinned ones by default).
    pub fn staticlib_sms(&self, pins: &Pins) -> Vec<Sm> {
        pins.targets.cuda_sass.iter().copied().filter(|&s| self.arch(&Target::Sass(s))).collect()
    }

    pub fn wants_staticlib(&self, pins: &Pins) -> bool {
        self.module(&pins.candle.staticlib.name) && !self.staticlib_sms(pins).is_empty()
    }

    pub fn object_jobs(&self, plan: &Plan, pins: &Pins) -> Result<Vec<Job>> {
        let mut narrowed = pins.clone();
        narrowed.targets.cuda_sass = self.staticlib_sms(pins);
        let jobs = plan::object_jobs(plan, &narrowed)?;
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
