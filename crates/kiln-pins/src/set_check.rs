//! The rules a kernel set keeps, written once for both ways a set is
//! described: the pin file's `[sets.<name>]` (`set_table.rs`, which places a
//! [`Fault`] at the field's line and column) and a set described in code
//! ([`check_sets`], whose messages name the set instead).
//!
//! What is checked here is what a typed [`KernelSet`] can break: names,
//! fields that must agree with each other, targets within a pinned
//! compiler's reach, and sets against each other. The pin file's syntax (a
//! value that does not parse, a key given twice) is the pin file reader's.

use crate::{fields::valid_name, CrateApi, IncludeRoot, KernelSet, Pins, Source, Toolchain};

/// Which part of a set a [`Fault`] is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    /// The set's name (the pin file's table name).
    Name,
    /// The set as a whole (the pin file's table).
    Set,
    /// Its source: a set with nothing to build is placed there.
    Source,
    /// Its targets as a whole (the pin file places no position on these).
    Targets,
    /// The module at this index.
    Module(usize),
    /// The include root at this index.
    Include(usize),
    /// This module's launch bound.
    Bound(String),
    /// The static library's name.
    LibName,
    /// The static library's sources.
    LibSources,
    /// The static library's target at this index: its `sass`, then its `ptx`.
    LibTarget(usize),
    /// The crate the set is packaged into (its name).
    Crate,
    /// `crate.cudart` (the pin file places no position on it).
    Cudart,
}

/// A rule a set breaks: the set, the field and why.
#[derive(Clone, Debug)]
pub(crate) struct Fault {
    pub(crate) set: String,
    pub(crate) field: Field,
    pub(crate) message: String,
    pub(crate) help: Option<String>,
}

impl Fault {
    fn new(set: &str, field: Field, message: String) -> Fault {
        Fault { set: set.to_string(), field, message, help: None }
    }

    fn help(mut self, help: impl Into<String>) -> Fault {
        self.help = Some(help.into());
        self
    }

    /// The fault of a set described in code: the message naming its set
    /// (where the message does not already), the help on its own line.
    pub(crate) fn plain(&self) -> String {
        let named = format!("set `{}`", self.set);
        let message = if self.message.contains(&named) { self.message.clone() } else { format!("{named}: {}", self.message) };
        format!("{message}{}", self.help.as_ref().map(|h| format!("\n  help: {h}")).unwrap_or_default())
    }
}

fn check_module_name(m: &str) -> Result<(), String> {
    if !m.is_empty() && m.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
        Ok(())
    } else {
        Err(format!("`{m}` is not a module name (lowercase letters, digits and `_`)"))
    }
}

fn check_lib_name(name: &str) -> Result<(), String> {
    if !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        Ok(())
    } else {
        Err(format!("`{name}` is not a library name"))
    }
}

/// A launch bound (`hip_max_threads_per_block`) AMD's hardware can launch.
pub(crate) fn launch_bound(n: u32) -> Result<(), String> {
    if (1..=1024).contains(&n) {
        Ok(())
    } else {
        Err(format!("a launch bound of {n} threads is outside 1..=1024"))
    }
}

/// Every set on its own, then against each other (names, module and crate
/// names unique, `crate.cudart`), for sets described in code: a message names
/// the set and the field.
pub fn check_sets(pins: &Pins, sets: &[KernelSet]) -> Result<(), String> {
    for s in sets {
        check_set(s, &pins.toolchain).map_err(|f| f.plain())?;
    }
    check_together(sets).map_err(|f| f.plain())
}

/// One set's rules: names, fields that must agree, targets in reach, its crate.
pub(crate) fn check_set(set: &KernelSet, toolchain: &Toolchain) -> Result<(), Fault> {
    let name = set.name.as_str();
    let fault = |field: Field, message: String| Fault::new(name, field, message);
    if !valid_name(name) {
        return Err(fault(Field::Name, format!("`{name}` is not a set name (lowercase letters, digits, `-` and `_`)")));
    }
    for (i, m) in set.modules.iter().enumerate() {
        check_module_name(m).map_err(|e| fault(Field::Module(i), e))?;
    }
    if let Some(lib) = &set.staticlib {
        check_lib_name(&lib.name).map_err(|e| fault(Field::LibName, e))?;
        if lib.sources.is_empty() {
            return Err(fault(Field::LibSources, format!("static library `{}` has no sources", lib.name)));
        }
        for cpu in lib.cross_hosts() {
            if toolchain.cross(cpu).is_none() {
                return Err(fault(
                    Field::LibName,
                    format!("static library `{}` is built for {cpu} hosts, and [toolchain.cross.{cpu}] pins no compiler for them", lib.name),
                ));
            }
        }
    }
    if set.modules.is_empty() && set.staticlib.is_none() {
        return Err(fault(Field::Source, format!("set `{name}` has neither modules nor a static library: nothing to build")));
    }
    for (i, inc) in set.include.iter().enumerate() {
        if let IncludeRoot::Input(n) = inc {
            if set.input(n).is_none() {
                return Err(fault(Field::Include(i), format!("sets.{name}.include names input `{n}`, which [sets.{name}.inputs] does not have")));
            }
        }
    }
    for (module, &n) in &set.flags.hip_max_threads_per_block {
        launch_bound(n).map_err(|e| fault(Field::Bound(module.clone()), e))?;
    }
    crate::reach::check_targets(&set.targets, toolchain, &format!("sets.{name}.targets"))
        .map_err(|(message, help)| fault(Field::Targets, message).help(help))?;
    if let Some(lib) = &set.staticlib {
        crate::reach::check_lib(name, lib, toolchain).map_err(|(i, message, help)| fault(Field::LibTarget(i), message).help(help))?;
    }
    check_crate(set)
}

/// The crates a set is packaged into: named as crates.io names crates, of a
/// crate source (whose version they carry), with the static library their API needs.
fn check_crate(set: &KernelSet) -> Result<(), Fault> {
    let Some(c) = &set.artifact_crate else { return Ok(()) };
    let name = set.name.as_str();
    let fault = |message: String| Err(Fault::new(name, Field::Crate, message));
    let crate_name = &c.name;
    if crate_name.is_empty() || !crate_name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') || crate_name.starts_with('-')
    {
        return fault(format!("`{crate_name}` is not a crate name (lowercase letters, digits and `-`)"));
    }
    if !matches!(set.source, Source::Crate { .. }) {
        return fault(format!("set `{name}` packages crates, which carry the source crate's version: its source must be a crate"));
    }
    if c.api == CrateApi::Upstream && set.staticlib.as_ref().is_none_or(|l| l.ffi.is_none()) {
        return fault(format!(
            "set `{name}`: crate.api = \"upstream\" links a static library that defines the source's ffi: give sets.{name}.staticlib.ffi"
        ));
    }
    if c.api == CrateApi::Kiln && set.staticlib.is_none() {
        return fault(format!("set `{name}`: kiln's crate API carries the static library's `ffi` module; the set has no static library"));
    }
    Ok(())
}

/// Sets against each other: names unique; module, library and crate names
/// unique across sets (`--module`, job labels and crates name them); a
/// `crate.cudart` naming a set whose crates carry a CUDA runtime.
pub(crate) fn check_together(sets: &[KernelSet]) -> Result<(), Fault> {
    for (i, s) in sets.iter().enumerate() {
        let fault = |message: String| Fault::new(&s.name, Field::Set, message);
        for other in &sets[..i] {
            if other.name == s.name {
                return Err(fault(format!("two kernel sets are named `{}`: set names must be unique", s.name)));
            }
            let theirs = other.module_names();
            if let Some(m) = s.module_names().into_iter().find(|m| theirs.contains(m)) {
                return Err(fault(format!("module `{m}` of set `{}` is also a module of set `{}`", s.name, other.name))
                    .help("module and static-library names are unique across sets (`--module`, job labels and crates name them): rename one"));
            }
            if let (Some(c), Some(o)) = (&s.artifact_crate, &other.artifact_crate) {
                if c.name == o.name {
                    return Err(fault(format!("set `{}` packages crate `{}`, as set `{}` does", s.name, c.name, other.name)));
                }
            }
        }
    }
    for s in sets {
        let Some(cudart) = s.artifact_crate.as_ref().and_then(|c| c.cudart.as_ref()) else { continue };
        let carries = |o: &&KernelSet| o.artifact_crate.as_ref().is_some_and(|c| c.api == CrateApi::Kiln) && o.staticlib.is_some();
        if !sets.iter().filter(|o| &o.name == cudart).any(|o| carries(&o)) {
            return Err(Fault::new(
                &s.name,
                Field::Cudart,
                format!(
                    "set `{}`: crate.cudart = `{cudart}` names no set whose crates carry a CUDA runtime (a set with a static library and kiln's crate API)",
                    s.name
                ),
            ));
        }
    }
    Ok(())
}

impl KernelSet {
    /// The checks the pin file's sets get (this file's), for a set
    /// described in code: names, fields that agree, every target within a
    /// pinned compiler's reach, its crate. The message names the set.
    pub fn check(&self, pins: &Pins) -> Result<(), String> {
        check_set(self, &pins.toolchain).map_err(|f| f.plain())
    }
}
