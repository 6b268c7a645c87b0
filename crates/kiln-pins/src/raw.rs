//! The file as serde sees it (spans kept for messages), and the checks that
//! turn it into [`crate::Pins`].

use std::{collections::BTreeMap, path::PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::{
    arch::{HipArch, Sm},
    error::PinError,
    ArtifactCrate, Candle, Closure, Deb, Flags, PackagePin, Pins, StaticLib, Targets, Toolchain, WheelPin,
};

type S<T> = Spanned<T>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPins {
    schema: S<u32>,
    candle: RawCandle,
    targets: RawTargets,
    flags: RawFlags,
    #[serde(rename = "crate")]
    artifact_crate: RawArtifactCrate,
    toolchain: RawToolchain,
    containers: Option<crate::containers::RawContainers>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawArtifactCrate {
    name: S<String>,
    revision: S<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCandle {
    #[serde(rename = "crate")]
    crate_name: String,
    version: String,
    sha256: S<String>,
    modules: S<Vec<S<String>>>,
    staticlib: RawStaticLib,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStaticLib {
    name: S<String>,
    sources: Vec<S<String>>,
    sass: Vec<S<String>>,
    #[serde(default)]
    ptx: Vec<S<String>>,
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
    #[serde(default)]
    include: Vec<String>,
    #[serde(default)]
    exclude: Vec<String>,
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
struct RawWheelPin {
    pypi: String,
    version: String,
    url: S<String>,
    sha256: S<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClosure {
    debs: Vec<S<RawDeb>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDeb {
    name: String,
    version: String,
    arch: String,
    sha256: String,
    size: u64,
    path: String,
}

pub(crate) struct Ctx<'a> {
    pub(crate) file: &'a PathBuf,
    pub(crate) text: &'a str,
}

impl Ctx<'_> {
    pub(crate) fn err<T>(&self, spanned: &S<T>, message: impl Into<String>) -> PinError {
        PinError::at(self.file, self.text, Some(spanned.span()), message.into())
    }
}

pub(crate) fn parse(file: &PathBuf, text: &str) -> Result<Pins, PinError> {
    let raw: RawPins = toml::from_str(text).map_err(|e| {
        // toml's message repeats the location and a source excerpt; keep the reason only.
        PinError::at(file, text, e.span(), e.message().trim().to_string()).help("see docs/pins.md for the pin file's keys")
    })?;
    let cx = Ctx { file, text };

    if *raw.schema.get_ref() != 1 {
        return Err(cx.err(&raw.schema, format!("unsupported schema {}; this kiln reads schema 1", raw.schema.get_ref())));
    }

    let (candle, lib_targets) = check_candle(&cx, raw.candle)?;
    let targets = check_targets(&cx, raw.targets)?;
    let flags = check_flags(&cx, raw.flags, &candle.modules)?;
    let toolchain = check_toolchain(&cx, raw.toolchain)?;
    crate::reach::check(&cx, &targets, &candle.staticlib, &lib_targets, &toolchain)?;
    let name = raw.artifact_crate.name.get_ref();
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') || name.starts_with('-') {
        return Err(cx.err(&raw.artifact_crate.name, format!("`{name}` is not a crate name (lowercase letters, digits and `-`)")));
    }
    if *raw.artifact_crate.revision.get_ref() == 0 {
        return Err(cx.err(&raw.artifact_crate.revision, "crate.revision starts at 1"));
    }
    let artifact_crate = ArtifactCrate { name: name.clone(), revision: *raw.artifact_crate.revision.get_ref() };
    let containers = match raw.containers {
        Some(c) => Some(crate::containers::check(&cx, c, &toolchain)?),
        None => None,
    };
    Ok(Pins { file: file.clone(), candle, targets, flags, artifact_crate, toolchain, containers })
}

pub(crate) fn check_sha256(cx: &Ctx, value: &S<String>) -> Result<String, PinError> {
    let v = value.get_ref();
    if v.len() != 64 || !v.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(cx.err(value, format!("`{v}` is not a sha256 (64 lowercase hex digits)")));
    }
    Ok(v.clone())
}

fn unique<T: Clone + PartialEq + std::fmt::Debug>(
    cx: &Ctx,
    items: &[S<String>],
    what: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, PinError> {
    let mut out: Vec<T> = Vec::new();
    if items.is_empty() {
        return Err(PinError::at(cx.file, cx.text, None, format!("{what} is empty")));
    }
    for item in items {
        let value = parse(item.get_ref()).map_err(|m| cx.err(item, format!("{m} (in {what})")))?;
        if out.contains(&value) {
            return Err(cx.err(item, format!("`{}` is listed twice in {what}", item.get_ref())));
        }
        out.push(value);
    }
    Ok(out)
}

/// The static library's targets as written, for [`crate::reach`]'s messages.
pub(crate) struct LibTargets {
    pub(crate) sass: Vec<S<String>>,
    pub(crate) ptx: Vec<S<String>>,
}

fn check_candle(cx: &Ctx, raw: RawCandle) -> Result<(Candle, LibTargets), PinError> {
    let sha256 = check_sha256(cx, &raw.sha256)?;
    let modules = unique(cx, raw.modules.get_ref(), "candle.modules", |m| {
        if !m.is_empty() && m.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
            Ok(m.to_string())
        } else {
            Err(format!("`{m}` is not a module name (src/<name>.cu, lowercase)"))
        }
    })?;
    let sources = unique(cx, &raw.staticlib.sources, "candle.staticlib.sources", |s| {
        if s.ends_with(".cu") && !s.starts_with('/') && !s.split('/').any(|c| c == "..") {
            Ok(s.to_string())
        } else {
            Err(format!("`{s}` is not a .cu path inside the crate"))
        }
    })?;
    let name = raw.staticlib.name.get_ref();
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(cx.err(&raw.staticlib.name, format!("`{name}` is not a library name")));
    }
    let sass = unique(cx, &raw.staticlib.sass, "candle.staticlib.sass", |s| Sm::parse_prefixed(s, "sm_"))?;
    let ptx = if raw.staticlib.ptx.is_empty() {
        Vec::new()
    } else {
        unique(cx, &raw.staticlib.ptx, "candle.staticlib.ptx", |s| Sm::parse_prefixed(s, "compute_"))?
    };
    let staticlib = StaticLib { name: name.clone(), sources, sass, ptx };
    let lib_targets = LibTargets { sass: raw.staticlib.sass, ptx: raw.staticlib.ptx };
    Ok((Candle { crate_name: raw.crate_name, version: raw.version, sha256, modules, staticlib }, lib_targets))
}

fn check_targets(cx: &Ctx, raw: RawTargets) -> Result<Targets, PinError> {
    let hip = unique(cx, &raw.hip, "targets.hip", HipArch::parse)?;
    let cuda_sass = unique(cx, &raw.cuda_sass, "targets.cuda_sass", |s| Sm::parse_prefixed(s, "sm_"))?;
    let cuda_ptx = unique(cx, &raw.cuda_ptx, "targets.cuda_ptx", |s| Sm::parse_prefixed(s, "compute_"))?;
    if let Some(w) = cuda_ptx.windows(2).position(|w| w[0] >= w[1]) {
        return Err(cx.err(&raw.cuda_ptx[w + 1], "targets.cuda_ptx must be in ascending order: the first entry is the floor"));
    }
    let cov = *raw.code_object_version.get_ref();
    if !(4..=5).contains(&cov) {
        return Err(cx.err(&raw.code_object_version, format!("code_object_version {cov} is not supported; the pinned clang emits 4 or 5")));
    }
    Ok(Targets { hip, code_object_version: cov, cuda_ptx, cuda_sass })
}

fn check_flags(cx: &Ctx, raw: RawFlags, modules: &[String]) -> Result<Flags, PinError> {
    let mut bounds = BTreeMap::new();
    for (module, bound) in raw.hip_max_threads_per_block {
        if !modules.contains(module.get_ref()) {
            return Err(cx.err(&module, format!("`{}` is not one of candle.modules", module.get_ref())));
        }
        let n = *bound.get_ref();
        if !(1..=1024).contains(&n) {
            return Err(cx.err(&bound, format!("a launch bound of {n} threads is outside 1..=1024")));
        }
        bounds.insert(module.into_inner(), n);
    }
    Ok(Flags { cuda: raw.cuda, cuda_staticlib: raw.cuda_staticlib, hip: raw.hip, hip_max_threads_per_block: bounds })
}

/// A generated list of packages: hashes well formed, every name once.
pub(crate) fn check_debs(cx: &Ctx, raw: Vec<S<RawDeb>>) -> Result<Vec<Deb>, PinError> {
    let mut debs = Vec::new();
    for d in raw {
        let span = d.span();
        let d = d.into_inner();
        let sha = check_sha256(cx, &Spanned::new(span.clone(), d.sha256))?;
        if debs.iter().any(|o: &Deb| o.name == d.name) {
            return Err(PinError::at(cx.file, cx.text, Some(span), format!("package `{}` is listed twice in the closure", d.name)));
        }
        debs.push(Deb { name: d.name, version: d.version, arch: d.arch, sha256: sha, size: d.size, path: d.path });
    }
    Ok(debs)
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
        Some(w) => {
            let sha256 = check_sha256(cx, &w.get_ref().sha256)?;
            let url = w.get_ref().url.get_ref().clone();
            if !url.starts_with("https://") || !url.ends_with(".whl") {
                return Err(cx.err(&w.get_ref().url, format!("`{url}` is not an https:// URL of a wheel (.whl)")));
            }
            let w = w.into_inner();
            Some(WheelPin { package: w.pypi, version: w.version, url, sha256 })
        }
    };

    let closure = match raw.closure {
        None => None,
        Some(c) => {
            let debs = check_debs(cx, c.into_inner().debs)?;
            // A closure resolved for other compiler versions would provision the wrong toolchain.
            for (span, p) in [(&nvcc_span, &nvcc), (&clang_span, &clang), (&hip_span, &hip), (&dl_span, &rocm_device_libs)] {
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
        include: raw.include,
        exclude: raw.exclude,
        closure,
    })
}
