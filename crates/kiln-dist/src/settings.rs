//! [`Settings`]: what a [`crate::Builder`] was told (its sets, selection,
//! folders, lock mode, workers, remote cache), and the answers the stages ask
//! of it: which sets a run builds ([`Settings::chosen`]) and of what
//! ([`Settings::selection`]), where each goes ([`Settings::output_of`]), the
//! one set of a shard or a merge. Nothing here provisions or builds.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kiln_pins::{KernelSet, Pins};
use kiln_toolchain::remote;

use crate::{part::Spec, select::Selection, set_output::SetOutput};

/// What `build()` does with each set's lock file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LockMode {
    /// Neither read nor written.
    #[default]
    Off,
    /// Fail, publishing nothing, unless every artifact matches the lock.
    Check,
    /// Write the built artifacts' hashes into the lock.
    Update,
}

/// A builder's settings, as its setters left them.
pub(crate) struct Settings<'p> {
    pub(crate) pins: &'p Pins,
    pub(crate) sets: Vec<KernelSet>,
    pub(crate) only: Vec<String>,
    pub(crate) modules: Vec<String>,
    pub(crate) archs: Vec<String>,
    /// A selection already parsed (`dist merge`'s, from its parts), instead of `modules`/`archs`.
    pub(crate) selection: Option<Selection>,
    pub(crate) kiln: PathBuf,
    pub(crate) base: PathBuf,
    pub(crate) out: Option<PathBuf>,
    /// A shard's part folder, when not the default one.
    pub(crate) part_out: Option<PathBuf>,
    pub(crate) lock_dir: Option<PathBuf>,
    pub(crate) lock: LockMode,
    pub(crate) package: bool,
    pub(crate) workers: usize,
    pub(crate) verbose: bool,
    pub(crate) no_compile: bool,
    pub(crate) remote: Option<remote::Config>,
}

/// The sets a run builds, of what, where each goes and its lock when it is
/// checked (a build's first stage, or the one set of a shard or a merge).
pub(crate) struct Scope<'s> {
    pub(crate) selection: Selection,
    pub(crate) sets: Vec<SetScope<'s>>,
}

/// One set of a [`Scope`].
pub(crate) struct SetScope<'s> {
    pub(crate) set: &'s KernelSet,
    pub(crate) output: SetOutput,
    /// Its lock, when the build compares with it ([`LockMode::Check`]).
    pub(crate) lock: Option<crate::lock::Lock>,
}

impl Settings<'_> {
    fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base.join(p)
        }
    }

    /// The main set's dist folder.
    pub(crate) fn main_out(&self) -> PathBuf {
        self.resolve(self.out.as_deref().unwrap_or(Path::new(crate::DIST_DIR)))
    }

    /// Where set `name` goes: the main set's folder is `out`, another's
    /// `<out>-<name>`; its lock is in the lock folder.
    pub(crate) fn output_of(&self, name: &str) -> SetOutput {
        let lock_dir = self.lock_dir.as_deref().map_or_else(|| self.base.clone(), |d| self.resolve(d));
        SetOutput::new(name, self.sets.first().is_some_and(|s| s.name == name), &self.main_out(), &lock_dir)
    }

    /// The sets this build will build: the named ones, or every default set.
    pub(crate) fn chosen(&self) -> Result<Vec<&KernelSet>> {
        check_sets(self.pins, &self.sets)?;
        if self.only.is_empty() {
            return Ok(self.sets.iter().filter(|s| s.default).collect());
        }
        let mut chosen = Vec::new();
        for name in &self.only {
            let Some(set) = self.sets.iter().find(|s| &s.name == name) else { bail!("unknown set `{name}` (--set); the sets are: {}", self.known()) };
            if !chosen.iter().any(|c: &&KernelSet| c.name == set.name) {
                chosen.push(set);
            }
        }
        Ok(chosen)
    }

    /// The names of the sets this builder knows, for a message.
    fn known(&self) -> String {
        self.sets.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
    }

    /// The one set a shard or a merge is of: `name`, else the main set.
    pub(crate) fn set_named(&self, name: Option<&str>) -> Result<&KernelSet> {
        check_sets(self.pins, &self.sets)?;
        let Some(name) = name else { return Ok(&self.sets[0]) };
        self.sets.iter().find(|s| s.name == name).with_context(|| format!("unknown set `{name}` (--set); the sets are: {}", self.known()))
    }

    /// The set a shard builds part of (the one `only` names, else the main
    /// set), where it goes and the selection of it; no lock.
    pub(crate) fn shard_scope(&self) -> Result<Scope<'_>> {
        if self.only.len() > 1 {
            bail!("--shard builds part of one set: give at most one --set (got {})", self.only.join(", "));
        }
        let set = self.set_named(self.only.first().map(String::as_str))?;
        let selection = match &self.selection {
            Some(s) => {
                s.check(&[set])?;
                s.clone()
            }
            None => Selection::new(self.modules.clone(), &self.archs, &[set])?,
        };
        Ok(Scope { selection, sets: vec![SetScope { set, output: self.output_of(&set.name), lock: None }] })
    }

    /// The part folder of shard `spec` of the set that goes to `output`.
    pub(crate) fn part_folder(&self, output: &SetOutput, spec: Spec) -> PathBuf {
        self.part_out.as_deref().map_or_else(|| output.part_folder(spec), |d| self.resolve(d))
    }

    /// The selection over the chosen sets; a `--module` of a set not chosen says which `--set` adds it.
    pub(crate) fn selection(&self, chosen: &[&KernelSet]) -> Result<Selection> {
        if let Some(s) = &self.selection {
            s.check(chosen)?;
            return Ok(s.clone());
        }
        for m in &self.modules {
            if chosen.iter().any(|s| s.module_names().contains(m)) {
                continue;
            }
            if let Some(other) = self.sets.iter().find(|s| s.module_names().contains(m)) {
                bail!("module `{m}` (--module) is of set `{}`, which this run does not build: add --set {}", other.name, other.name);
            }
        }
        Selection::new(self.modules.clone(), &self.archs, chosen)
    }

    /// The main crate name and version of the set whose CUDA runtime crate
    /// `set`'s parts link (`crate.cudart`), if not its own.
    pub(crate) fn cudart_of(&self, set: &KernelSet) -> Option<(String, String)> {
        let name = set.artifact_crate.as_ref().and_then(|c| c.cudart.as_ref())?;
        let other = self.sets.iter().chain(&self.pins.sets).find(|s| &s.name == name).expect("checked: crate.cudart names a set");
        Some((other.artifact_crate.as_ref().expect("a set with crates").name.clone(), other.crate_version().expect("a crate source")))
    }

    /// The committed cost table's file (`job-costs.toml` in `base`).
    pub(crate) fn costs_path(&self) -> PathBuf {
        self.base.join(crate::costs::FILE_NAME)
    }
}

/// The sets a builder is given: at least one, each keeping the pin file's
/// rules and the sets together (kiln-pins' [`kiln_pins::check_sets`]).
fn check_sets(pins: &Pins, sets: &[KernelSet]) -> Result<()> {
    if sets.is_empty() {
        bail!("the builder has no kernel set: add one with Builder::set (or Builder::from_pins)");
    }
    kiln_pins::check_sets(pins, sets).map_err(anyhow::Error::msg)
}
