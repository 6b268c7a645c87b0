//! The file as serde sees it (spans kept for messages), and the checks that
//! turn it into [`crate::Pins`]: its own tables here, each other table by its
//! reader (`set_table.rs`, `containers.rs`), all with `fields.rs`'s checks.

use std::{collections::BTreeMap, path::PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::{
    error::PinError,
    fields::{check_debs, check_hip_headers, check_targets_of, check_wheel, relative_path, Ctx, RawDeb, RawWheelPin, S},
    set_table::RawSet,
    AmdNext, Closure, Cross, Flags, PackagePin, Pins, Targets, Toolchain,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPins {
    schema: S<u32>,
    sets: BTreeMap<S<String>, S<RawSet>>,
    targets: RawTargets,
    flags: RawFlags,
    toolchain: RawToolchain,
    containers: Option<crate::containers::RawContainers>,
    /// `[cuda_link_stubs.<major>]`: per library, the wheel member its stand-in is read from.
    #[serde(default)]
    cuda_link_stubs: BTreeMap<S<String>, BTreeMap<String, S<RawStubPin>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStubPin {
    pypi: String,
    version: String,
    url: S<String>,
    sha256: S<String>,
    member: S<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTargets {
    hip: Vec<S<String>>,
    code_object_version: S<u32>,
    cuda_ptx: Vec<S<String>>,
    cuda_sass: Vec<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFlags {
    cuda: Vec<String>,
    cuda_staticlib: Vec<String>,
    hip: Vec<String>,
    hip_force_include: Vec<S<String>>,
    #[serde(default)]
    hip_max_threads_per_block: BTreeMap<S<String>, S<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToolchain {
    distribution: S<String>,
    suite: String,
    mirrors: S<Vec<S<String>>>,
    components: Vec<String>,
    nvcc: S<RawPackagePin>,
    clang: S<RawPackagePin>,
    hip: S<RawPackagePin>,
    rocm_device_libs: S<RawPackagePin>,
    ptxas: Option<S<RawWheelPin>>,
    clang_next: Option<S<RawPackagePin>>,
    rocm_device_libs_next: Option<S<RawPackagePin>>,
    #[serde(default)]
    next_suites: Vec<String>,
    #[serde(default)]
    next_include: Vec<String>,
    #[serde(default)]
    include: Vec<String>,
    #[serde(default)]
    exclude: Vec<String>,
    closure: Option<S<RawClosure>>,
    /// `[toolchain.cross.<cpu>]`: a cross host compiler per CPU (kiln-target's host table).
    #[serde(default)]
    cross: BTreeMap<String, S<RawCross>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCross {
    cxx: S<String>,
    include: Vec<String>,
    closure: Option<S<RawClosure>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPackagePin {
    package: String,
    version: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClosure {
    debs: Vec<S<RawDeb>>,
}

pub(crate) fn parse(file: &PathBuf, text: &str) -> Result<Pins, PinError> {
    let raw: RawPins = toml::from_str(text).map_err(|e| {
        // toml's message repeats the location and a source excerpt; keep the reason only.
        PinError::at(file, text, e.span(), e.message().trim().to_string()).help("see docs/pins.md for the pin file's keys")
    })?;
    let cx = Ctx { file, text };

    match *raw.schema.get_ref() {
        SCHEMA => {}
        1 => {
            return Err(cx
                .err(&raw.schema, "schema 1 (one `[candle]` table and `[crate]`) is no longer read; this kiln reads schema 2")
                .help("move [candle] into [sets.candle] and [crate] into [sets.candle.crate] (docs/kernel-sets.md)"))
        }
        n => return Err(cx.err(&raw.schema, format!("unsupported schema {n}; this kiln reads schema {SCHEMA}"))),
    }

    let targets = check_targets(&cx, raw.targets)?;
    let toolchain = check_toolchain(&cx, raw.toolchain)?;
    crate::reach::check_targets(&targets, &toolchain, "targets").map_err(|(m, h)| PinError::at(file, text, None, m).help(h))?;
    let hip_force_include = check_hip_headers(&cx, &raw.flags.hip_force_include)?;
    let flags = Flags {
        cuda: raw.flags.cuda,
        cuda_staticlib: raw.flags.cuda_staticlib,
        hip: raw.flags.hip,
        hip_force_include,
        hip_max_threads_per_block: BTreeMap::new(),
    };
    let bounds = raw.flags.hip_max_threads_per_block;
    let mut flags = flags;
    flags.hip_max_threads_per_block = bounds.iter().map(|(m, b)| (m.get_ref().clone(), *b.get_ref())).collect();
    let sets = crate::set_table::check_sets(&cx, raw.sets, &targets, &flags, &bounds, &toolchain)?;
    let containers = match raw.containers {
        Some(c) => Some(crate::containers::check(&cx, c, &toolchain)?),
        None => None,
    };
    let cuda_link_stubs = check_link_stubs(&cx, raw.cuda_link_stubs)?;
    Ok(Pins { file: file.clone(), sets, targets, flags, toolchain, containers, cuda_link_stubs })
}

/// `[cuda_link_stubs.<major>]`: a CUDA major (a number) whose every library is a
/// pinned wheel and a member of it (a relative path).
fn check_link_stubs(cx: &Ctx, raw: BTreeMap<S<String>, BTreeMap<String, S<RawStubPin>>>) -> Result<Vec<crate::LinkStubPin>, PinError> {
    let mut out = Vec::new();
    for (major, libs) in raw {
        let m = major.get_ref().parse::<u32>().ok().filter(|m| (1..=99).contains(m));
        let Some(m) = m else {
            return Err(cx.err(&major, format!("`[cuda_link_stubs.{}]`: not a CUDA major version (a number, e.g. 13)", major.get_ref())));
        };
        for (lib, pin) in libs {
            let pin = pin.into_inner();
            if !relative_path(pin.member.get_ref()) {
                return Err(cx.err(&pin.member, format!("`{}` is not a path inside the wheel", pin.member.get_ref())));
            }
            let member = pin.member.get_ref().clone();
            let what = format!("cuda_link_stubs.{m}.{lib}");
            let wheel = check_wheel(cx, RawWheelPin { pypi: pin.pypi, version: pin.version, url: pin.url, sha256: pin.sha256 }, &what)?;
            out.push(crate::LinkStubPin { major: m, lib, wheel, member });
        }
    }
    Ok(out)
}

/// The pin-file schema this kiln reads.
pub const SCHEMA: u32 = 2;

fn check_targets(cx: &Ctx, raw: RawTargets) -> Result<Targets, PinError> {
    check_targets_of(cx, Some(&raw.hip), Some(&raw.code_object_version), Some(&raw.cuda_ptx), Some(&raw.cuda_sass), None, "targets")
}

fn check_toolchain(cx: &Ctx, raw: RawToolchain) -> Result<Toolchain, PinError> {
    if raw.distribution.get_ref() != "debian" {
        return Err(cx.err(&raw.distribution, "only `debian` toolchains are supported"));
    }
    if raw.mirrors.get_ref().is_empty() {
        return Err(cx.err(&raw.mirrors, "toolchain.mirrors is empty: kiln needs somewhere to download from"));
    }
    for m in raw.mirrors.get_ref() {
        let url = m.get_ref();
        if !(url.starts_with("http://") || url.starts_with("https://") || url.starts_with("file://")) || url.ends_with('/') {
            return Err(cx.err(m, format!("mirror `{url}` must be an http(s):// or file:// URL without a trailing slash")));
        }
    }
    let pin = |p: S<RawPackagePin>| {
        let span = p.span();
        let p = p.into_inner();
        (span, PackagePin { package: p.package, version: p.version })
    };
    let (nvcc_span, nvcc) = pin(raw.nvcc);
    let (clang_span, clang) = pin(raw.clang);
    let (hip_span, hip) = pin(raw.hip);
    let (dl_span, rocm_device_libs) = pin(raw.rocm_device_libs);
    let ptxas = match raw.ptxas {
        None => None,
        Some(w) => Some(check_wheel(cx, w.into_inner(), "toolchain.ptxas")?),
    };
    let mut pinned = vec![(nvcc_span, &nvcc), (clang_span, &clang), (hip_span, &hip), (dl_span, &rocm_device_libs)];
    let next = match (raw.clang_next, raw.rocm_device_libs_next) {
        (None, None) => None,
        (Some(c), Some(d)) => {
            let (c_span, c) = pin(c);
            let (d_span, d) = pin(d);
            if !c.package.starts_with("clang-") {
                return Err(PinError::at(
                    cx.file,
                    cx.text,
                    Some(c_span),
                    format!("toolchain.clang_next is `{}`, not a clang-<major> package", c.package),
                ));
            }
            if raw.next_suites.is_empty() {
                return Err(PinError::at(
                    cx.file,
                    cx.text,
                    Some(c_span),
                    "toolchain.clang_next needs next_suites: the suites beyond `suite` it comes from".to_string(),
                )
                .help("e.g. next_suites = [\"trixie-backports\", \"forky\"] (docs/toolchain.md)"));
            }
            Some(((c_span, c), (d_span, d)))
        }
        (Some(c), None) => {
            return Err(cx.err(&c, "toolchain.clang_next is pinned without rocm_device_libs_next: clang needs device libraries of its own LLVM"))
        }
        (None, Some(d)) => return Err(cx.err(&d, "toolchain.rocm_device_libs_next is pinned without clang_next")),
    };
    if let Some(((c_span, c), (d_span, d))) = &next {
        pinned.extend([(c_span.clone(), c), (d_span.clone(), d)]);
    }

    let closure = match raw.closure {
        None => None,
        Some(c) => {
            let debs = check_debs(cx, c.into_inner().debs)?;
            // A closure resolved for other compiler versions would provision the wrong toolchain.
            for (span, p) in &pinned {
                let found = debs.iter().find(|d| d.name == p.package);
                if found.map(|d| &d.version) != Some(&p.version) {
                    let now = found.map_or("is missing from it".to_string(), |d| format!("has {}", d.version));
                    return Err(PinError::at(
                        cx.file,
                        cx.text,
                        Some(span.clone()),
                        format!("{} is pinned to {} but [toolchain.closure] {now}", p.package, p.version),
                    )
                    .help("run `cargo xtask pins update` after changing a compiler pin"));
                }
            }
            Some(Closure { debs })
        }
    };
    drop(pinned);
    let mut cross = Vec::new();
    for (cpu, c) in raw.cross {
        let span = c.span();
        let c = c.into_inner();
        let Some(host) = kiln_target::host_object::host(&cpu).filter(|h| h != &kiln_target::host_object::BUILD_HOST) else {
            return Err(PinError::at(
                cx.file,
                cx.text,
                Some(span),
                format!(
                    "[toolchain.cross.{cpu}]: `{cpu}` is not a host CPU kiln builds cross host code for (kiln-target's host table: {}; {} is the toolchain's own)",
                    kiln_target::host_object::host_names(),
                    kiln_target::host_object::BUILD_HOST.cpu
                ),
            ));
        };
        if !c.cxx.get_ref().starts_with(&format!("{}-g++", host.gnu)) {
            return Err(cx.err(&c.cxx, format!("toolchain.cross.{cpu}.cxx `{}` is not a {}-g++ compiler", c.cxx.get_ref(), host.gnu)));
        }
        if c.include.is_empty() {
            return Err(PinError::at(
                cx.file,
                cx.text,
                Some(span),
                format!("toolchain.cross.{cpu}.include is empty: name the package of {}", c.cxx.get_ref()),
            ));
        }
        let closure = match c.closure {
            None => None,
            Some(cl) => Some(Closure { debs: check_debs(cx, cl.into_inner().debs)? }),
        };
        cross.push(Cross { cpu, cxx: c.cxx.into_inner(), include: c.include, closure });
    }
    let amd_next =
        next.map(|((_, clang), (_, rocm_device_libs))| AmdNext { clang, rocm_device_libs, suites: raw.next_suites, include: raw.next_include });

    Ok(Toolchain {
        distribution: raw.distribution.into_inner(),
        suite: raw.suite,
        mirrors: raw.mirrors.into_inner().into_iter().map(Spanned::into_inner).collect(),
        components: raw.components,
        nvcc,
        clang,
        hip,
        rocm_device_libs,
        ptxas,
        amd_next,
        include: raw.include,
        exclude: raw.exclude,
        closure,
        cross,
    })
}
