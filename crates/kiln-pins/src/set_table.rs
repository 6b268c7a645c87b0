//! The pin file's `[sets.<name>]` tables read into [`KernelSet`]s: each value
//! parsed where it is written, then `set_check.rs`'s rules placed at the
//! field's line and column.

use std::{collections::BTreeMap, ops::Range};

use serde::Deserialize;

use crate::{
    arch::Sm,
    error::PinError,
    fields::{check_hip_headers, check_sha256, check_targets_of, check_wheel, relative_path, unique, valid_name, Ctx, RawWheelPin, S},
    set_check::{self, Fault, Field},
    ArtifactCrate, CrateApi, Flags, IncludeRoot, InputLicense, KernelSet, LibKernels, Source, StaticLib, Targets, TreeInput,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSet {
    #[serde(default)]
    default: Option<S<bool>>,
    source: S<RawSource>,
    #[serde(default)]
    modules: Vec<S<String>>,
    staticlib: Option<S<RawStaticLib>>,
    #[serde(default)]
    include: Vec<S<String>>,
    #[serde(default)]
    inputs: BTreeMap<S<String>, S<RawInput>>,
    targets: Option<RawSetTargets>,
    flags: Option<RawSetFlags>,
    #[serde(rename = "crate")]
    artifact_crate: Option<RawArtifactCrate>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    #[serde(rename = "crate")]
    crate_name: Option<String>,
    version: Option<String>,
    sha256: Option<S<String>>,
    path: Option<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStaticLib {
    name: S<String>,
    sources: Vec<S<String>>,
    sass: Vec<S<String>>,
    #[serde(default)]
    ptx: Vec<S<String>>,
    ffi: Option<S<String>>,
    #[serde(default)]
    force_include: Vec<S<String>>,
    kernels: Option<S<String>>,
    #[serde(default)]
    hosts: Vec<S<String>>,
}

/// A wheel pin (as `[toolchain].ptxas`) and the folder taken out of it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInput {
    pypi: String,
    version: String,
    url: S<String>,
    sha256: S<String>,
    tree: S<String>,
    license: Option<S<RawInputLicense>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInputLicense {
    file: S<String>,
    spdx: S<String>,
}

/// Each key, when present, replaces the global `[targets]` one.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSetTargets {
    hip: Option<Vec<S<String>>>,
    code_object_version: Option<S<u32>>,
    cuda_ptx: Option<Vec<S<String>>>,
    cuda_sass: Option<Vec<S<String>>>,
}

/// Each key, when present, replaces the global `[flags]` one.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSetFlags {
    cuda: Option<Vec<String>>,
    cuda_staticlib: Option<Vec<String>>,
    hip: Option<Vec<String>>,
    hip_force_include: Option<Vec<S<String>>>,
    hip_max_threads_per_block: Option<BTreeMap<S<String>, S<u32>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawArtifactCrate {
    name: S<String>,
    revision: S<u32>,
    #[serde(default)]
    api: Option<S<String>>,
    cudart: Option<S<String>>,
}

/// The sets in file order, each read and checked on its own, then against
/// each other ([`crate::set_check`]'s rules, placed at the pin file's lines).
pub(crate) fn check_sets(
    cx: &Ctx,
    raw: BTreeMap<S<String>, S<RawSet>>,
    targets: &Targets,
    flags: &Flags,
    global_bounds: &BTreeMap<S<String>, S<u32>>,
    toolchain: &crate::Toolchain,
) -> Result<Vec<KernelSet>, PinError> {
    let mut raw: Vec<(S<String>, S<RawSet>)> = raw.into_iter().collect();
    raw.sort_by_key(|(_, s)| s.span().start);
    if raw.is_empty() {
        return Err(PinError::at(cx.file, cx.text, None, "the pin file has no kernel set ([sets.<name>])".into()).help("see docs/kernel-sets.md"));
    }
    let global = Global { targets, flags, bounds: global_bounds };
    let mut sets: Vec<KernelSet> = Vec::new();
    let mut spans: Vec<Spans> = Vec::new();
    for (i, (name, set)) in raw.into_iter().enumerate() {
        let set_name = name.get_ref().clone();
        let (s, at) = read_set(cx, &name, set, &global)?;
        set_check::check_set(&s, toolchain).map_err(|f| at.place(cx, f))?;
        if i == 0 && !s.default {
            return Err(PinError::at(
                cx.file,
                cx.text,
                Some(at.set.clone()),
                format!("set `{set_name}` is the pin file's first, its main set, which a plain dist must build: it cannot be `default = false`"),
            )
            .help("move another set first, or make this one a default set"));
        }
        sets.push(s);
        spans.push(at);
    }
    set_check::check_together(&sets).map_err(|f| {
        let i = sets.iter().position(|s| s.name == f.set).expect("a fault names one of the sets");
        spans[i].place(cx, f)
    })?;
    for (module, bound) in global_bounds {
        if !sets.iter().any(|s| s.modules.contains(module.get_ref())) {
            return Err(cx.err(module, format!("`{}` is not a module of any set", module.get_ref())));
        }
        set_check::launch_bound(*bound.get_ref()).map_err(|m| cx.err(bound, m))?;
    }
    Ok(sets)
}

/// The pin file's `[targets]`, `[flags]` and launch bounds, which a set's own replace.
struct Global<'a> {
    targets: &'a Targets,
    flags: &'a Flags,
    bounds: &'a BTreeMap<S<String>, S<u32>>,
}

/// Where each field of one set is in the pin file, to place a [`Fault`] at.
struct Spans {
    set: Range<usize>,
    name: Range<usize>,
    source: Range<usize>,
    modules: Vec<Range<usize>>,
    include: Vec<Range<usize>>,
    /// Each module's launch bound: the set's own, else the pin file's.
    bounds: BTreeMap<String, Range<usize>>,
    lib_name: Option<Range<usize>>,
    lib_sources: Option<Range<usize>>,
    /// The static library's `sass`, then its `ptx`.
    lib_targets: Vec<Range<usize>>,
    crate_name: Option<Range<usize>>,
}

impl Spans {
    fn place(&self, cx: &Ctx, f: Fault) -> PinError {
        let span = match &f.field {
            Field::Name => Some(self.name.clone()),
            Field::Set => Some(self.set.clone()),
            Field::Source => Some(self.source.clone()),
            Field::Targets | Field::Cudart => None,
            Field::Module(i) => self.modules.get(*i).cloned(),
            Field::Include(i) => self.include.get(*i).cloned(),
            Field::Bound(m) => self.bounds.get(m).cloned(),
            Field::LibName => self.lib_name.clone(),
            Field::LibSources => self.lib_sources.clone(),
            Field::LibTarget(i) => self.lib_targets.get(*i).cloned(),
            Field::Crate => self.crate_name.clone(),
        };
        let message = match &f.field {
            // As the pin file's other lists say where the item is (`fields::unique`).
            Field::Module(_) => format!("{} (in sets.{}.modules)", f.message, f.set),
            _ => f.message,
        };
        let e = PinError::at(cx.file, cx.text, span, message);
        match f.help {
            Some(h) => e.help(h),
            None => e,
        }
    }
}

/// One `[sets.<name>]` table read into a [`KernelSet`] (what its values
/// say, each parsed where it is written), with where each field is.
fn read_set(cx: &Ctx, name: &S<String>, set: S<RawSet>, global: &Global) -> Result<(KernelSet, Spans), PinError> {
    let set_span = set.span();
    let raw = set.into_inner();
    let name_str = name.get_ref().as_str();
    let at = |what: &str| format!("sets.{name_str}.{what}");
    let source_span = raw.source.span();
    let source = read_source(cx, raw.source, &at("source"))?;
    let modules = if raw.modules.is_empty() { Vec::new() } else { unique(cx, &raw.modules, &at("modules"), |m| Ok(m.to_string()))? };
    let inputs = read_inputs(cx, raw.inputs, &at("inputs"))?;
    let mut include = Vec::new();
    for inc in &raw.include {
        let root = IncludeRoot::parse(inc.get_ref()).map_err(|m| cx.err(inc, format!("{m} (in {})", at("include"))))?;
        if include.contains(&root) {
            return Err(cx.err(inc, format!("`{}` is listed twice in {}", inc.get_ref(), at("include"))));
        }
        include.push(root);
    }
    let targets = match &raw.targets {
        None => global.targets.clone(),
        Some(t) => check_targets_of(
            cx,
            t.hip.as_ref(),
            t.code_object_version.as_ref(),
            t.cuda_ptx.as_ref(),
            t.cuda_sass.as_ref(),
            Some(global.targets),
            &at("targets"),
        )?,
    };
    let (flags, bounds) = read_flags(cx, raw.flags, &modules, global, &at("modules"))?;
    let (staticlib, lib_spans) = match raw.staticlib {
        None => (None, None),
        Some(lib) => {
            let (lib, spans) = read_staticlib(cx, lib.into_inner(), &at)?;
            (Some(lib), Some(spans))
        }
    };
    let (artifact_crate, crate_name) = match raw.artifact_crate {
        None => (None, None),
        Some(c) => {
            let span = c.name.span();
            (Some(read_crate(cx, c, &at("crate.revision"))?), Some(span))
        }
    };
    let (lib_name, lib_sources, lib_targets) = lib_spans.unwrap_or_default();
    let spans = Spans {
        set: set_span,
        name: name.span(),
        source: source_span,
        modules: raw.modules.iter().map(|m| m.span()).collect(),
        include: raw.include.iter().map(|i| i.span()).collect(),
        bounds,
        lib_name,
        lib_sources,
        lib_targets,
        crate_name,
    };
    let default = raw.default.is_none_or(|d| *d.get_ref());
    let set = KernelSet { name: name_str.to_string(), default, source, modules, staticlib, include, inputs, targets, flags, artifact_crate };
    Ok((set, spans))
}

fn read_source(cx: &Ctx, raw: S<RawSource>, what: &str) -> Result<Source, PinError> {
    let span = raw.span();
    let src = raw.into_inner();
    match (src.crate_name, src.version, src.sha256, src.path) {
        (Some(crate_name), Some(version), Some(sha256), None) => Ok(Source::Crate { name: crate_name, version, sha256: check_sha256(cx, &sha256)? }),
        (None, None, None, Some(path)) => {
            if !relative_path(path.get_ref()) {
                return Err(cx.err(&path, format!("`{}` is not a folder relative to the pin file's folder", path.get_ref())));
            }
            Ok(Source::Folder { path: path.into_inner() })
        }
        _ => {
            Err(PinError::at(cx.file, cx.text, Some(span), format!("{what} is neither a crate (`crate`, `version`, `sha256`) nor a folder (`path`)"))
                .help("see docs/kernel-sets.md"))
        }
    }
}

/// `[sets.<name>.inputs]`: `what` is `sets.<name>.inputs`.
fn read_inputs(cx: &Ctx, raw: BTreeMap<S<String>, S<RawInput>>, what: &str) -> Result<Vec<TreeInput>, PinError> {
    let mut inputs = Vec::new();
    for (input_name, input) in raw {
        if !valid_name(input_name.get_ref()) {
            return Err(cx.err(&input_name, format!("`{}` is not an input name", input_name.get_ref())));
        }
        let input = input.into_inner();
        let raw_wheel = RawWheelPin { pypi: input.pypi, version: input.version, url: input.url, sha256: input.sha256 };
        let wheel = check_wheel(cx, raw_wheel, &format!("{what}.{}", input_name.get_ref()))?;
        if !relative_path(input.tree.get_ref()) {
            return Err(cx.err(&input.tree, format!("`{}` is not a folder inside the wheel", input.tree.get_ref())));
        }
        let license = match input.license {
            None => None,
            Some(l) => {
                let l = l.into_inner();
                if !relative_path(l.file.get_ref()) || l.file.get_ref().ends_with('/') {
                    return Err(cx.err(&l.file, format!("`{}` is not a file inside the wheel", l.file.get_ref())));
                }
                let spdx = l.spdx.get_ref();
                if spdx.is_empty() || !spdx.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.+".contains(&b)) {
                    return Err(cx.err(&l.spdx, format!("`{spdx}` is not an SPDX licence identifier (BSD-3-Clause, MIT, ...)")));
                }
                Some(InputLicense { file: l.file.into_inner(), spdx: l.spdx.into_inner() })
            }
        };
        inputs.push(TreeInput { name: input_name.into_inner(), wheel, tree: input.tree.into_inner().trim_end_matches('/').to_string(), license });
    }
    Ok(inputs)
}

/// The set's flags (each key given replaces the pin file's) and where each
/// module's launch bound is written; `modules_key` is `sets.<name>.modules`.
fn read_flags(
    cx: &Ctx,
    raw: Option<RawSetFlags>,
    modules: &[String],
    global: &Global,
    modules_key: &str,
) -> Result<(Flags, BTreeMap<String, Range<usize>>), PinError> {
    let global_spans = || global.bounds.iter().map(|(m, b)| (m.get_ref().clone(), b.span())).collect();
    let Some(f) = raw else { return Ok((global.flags.clone(), global_spans())) };
    let (bounds, spans) = match f.hip_max_threads_per_block {
        None => (global.flags.hip_max_threads_per_block.clone(), global_spans()),
        Some(b) => {
            let (mut bounds, mut spans) = (BTreeMap::new(), BTreeMap::new());
            for (module, bound) in b {
                if !modules.contains(module.get_ref()) {
                    return Err(cx.err(&module, format!("`{}` is not one of {modules_key}", module.get_ref())));
                }
                spans.insert(module.get_ref().clone(), bound.span());
                bounds.insert(module.into_inner(), bound.into_inner());
            }
            (bounds, spans)
        }
    };
    let flags = Flags {
        cuda: f.cuda.unwrap_or_else(|| global.flags.cuda.clone()),
        cuda_staticlib: f.cuda_staticlib.unwrap_or_else(|| global.flags.cuda_staticlib.clone()),
        hip: f.hip.unwrap_or_else(|| global.flags.hip.clone()),
        hip_force_include: match &f.hip_force_include {
            Some(h) => check_hip_headers(cx, h)?,
            None => global.flags.hip_force_include.clone(),
        },
        hip_max_threads_per_block: bounds,
    };
    Ok((flags, spans))
}

/// Where the static library's name, sources and targets (`sass`, then `ptx`) are.
type LibSpans = (Option<Range<usize>>, Option<Range<usize>>, Vec<Range<usize>>);

fn read_staticlib(cx: &Ctx, lib: RawStaticLib, at: &dyn Fn(&str) -> String) -> Result<(StaticLib, LibSpans), PinError> {
    let sources = unique(cx, &lib.sources, &at("staticlib.sources"), |s| {
        if s.ends_with(".cu") && relative_path(s) {
            Ok(s.to_string())
        } else {
            Err(format!("`{s}` is not a .cu path inside the set's source"))
        }
    })?;
    let sass = unique(cx, &lib.sass, &at("staticlib.sass"), |s| Sm::parse_prefixed(s, "sm_"))?;
    let ptx = if lib.ptx.is_empty() { Vec::new() } else { unique(cx, &lib.ptx, &at("staticlib.ptx"), |s| Sm::parse_prefixed(s, "compute_"))? };
    let ffi = match lib.ffi {
        Some(f) if f.get_ref().ends_with(".rs") && relative_path(f.get_ref()) => Some(f.into_inner()),
        Some(f) => return Err(cx.err(&f, format!("`{}` is not a .rs path inside the set's source", f.get_ref()))),
        None => None,
    };
    let mut force_include = Vec::new();
    for h in &lib.force_include {
        if !relative_path(h.get_ref()) {
            return Err(cx.err(h, format!("`{}` is not a header of kiln's kernels/cuda", h.get_ref())));
        }
        force_include.push(h.get_ref().clone());
    }
    let kernels = match lib.kernels.as_ref().map(|k| k.get_ref().as_str()) {
        None | Some("fat") => LibKernels::Fat,
        Some("per-target") => LibKernels::PerTarget,
        Some(other) => return Err(cx.err(lib.kernels.as_ref().unwrap(), format!("staticlib.kernels `{other}` is neither `fat` nor `per-target`"))),
    };
    let build_host = kiln_target::host_object::BUILD_HOST.cpu;
    let mut hosts = vec![build_host.to_string()];
    for h in &lib.hosts {
        let cpu = h.get_ref();
        if kiln_target::host_object::host(cpu).is_none() {
            return Err(cx.err(h, format!("staticlib.hosts: `{cpu}` is not a host CPU kiln knows ({})", kiln_target::host_object::host_names())));
        }
        if cpu == build_host {
            continue;
        }
        if hosts.contains(cpu) {
            return Err(cx.err(h, format!("staticlib.hosts names `{cpu}` twice")));
        }
        if kernels != LibKernels::PerTarget {
            return Err(cx.err(
                h,
                format!(
                    "staticlib.hosts: host code for `{cpu}` needs kernels = \"per-target\" (a fat object's kernels would be built again per CPU)"
                ),
            ));
        }
        hosts.push(cpu.clone());
    }
    let sources_span = lib.sources.first().map(|s| s.span());
    let targets = lib.sass.iter().chain(&lib.ptx).map(|s| s.span()).collect();
    let spans = (Some(lib.name.span()), sources_span, targets);
    Ok((StaticLib { name: lib.name.into_inner(), sources, sass, ptx, ffi, force_include, kernels, hosts }, spans))
}

/// `[sets.<name>.crate]`: `revision_key` is `sets.<name>.crate.revision`.
fn read_crate(cx: &Ctx, c: RawArtifactCrate, revision_key: &str) -> Result<ArtifactCrate, PinError> {
    if *c.revision.get_ref() == 0 {
        return Err(cx.err(&c.revision, format!("{revision_key} starts at 1")));
    }
    let api = match c.api.as_ref().map(|a| a.get_ref().as_str()) {
        None | Some("kiln") => CrateApi::Kiln,
        Some("upstream") => CrateApi::Upstream,
        Some(other) => return Err(cx.err(c.api.as_ref().unwrap(), format!("crate.api `{other}` is neither `kiln` nor `upstream`"))),
    };
    Ok(ArtifactCrate { name: c.name.into_inner(), revision: c.revision.into_inner(), api, cudart: c.cudart.map(|s| s.into_inner()) })
}
