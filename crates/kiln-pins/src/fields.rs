//! One value of the pin file, read where it is written: [`Ctx`], the file and
//! its text that place an error at a value's line and column, and the checks
//! that every table's reader shares (a sha256, a list without repeats, a wheel
//! pin, a generated package list, a relative path, a name, a targets table).
//! It reads no table itself: `raw.rs` (the file), `set_table.rs` (its sets)
//! and `containers.rs` call it.

use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use crate::{
    arch::{HipArch, Sm},
    error::PinError,
    Deb, Targets, WheelPin,
};

/// A value of the pin file with where it is written.
pub(crate) type S<T> = Spanned<T>;

/// The pin file and its text: what places an error at a value's line and column.
pub(crate) struct Ctx<'a> {
    pub(crate) file: &'a PathBuf,
    pub(crate) text: &'a str,
}

impl Ctx<'_> {
    pub(crate) fn err<T>(&self, spanned: &S<T>, message: impl Into<String>) -> PinError {
        PinError::at(self.file, self.text, Some(spanned.span()), message.into())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWheelPin {
    pub(crate) pypi: String,
    pub(crate) version: String,
    pub(crate) url: S<String>,
    pub(crate) sha256: S<String>,
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

/// A wheel pin: an https:// URL of a `.whl` and its sha256.
pub(crate) fn check_wheel(cx: &Ctx, w: RawWheelPin, what: &str) -> Result<WheelPin, PinError> {
    let sha256 = check_sha256(cx, &w.sha256)?;
    let url = w.url.get_ref().clone();
    if !url.starts_with("https://") || !url.ends_with(".whl") {
        return Err(cx.err(&w.url, format!("`{url}` is not an https:// URL of a wheel (.whl) ({what})")));
    }
    Ok(WheelPin { package: w.pypi, version: w.version, url, sha256 })
}

pub(crate) fn check_sha256(cx: &Ctx, value: &S<String>) -> Result<String, PinError> {
    let v = value.get_ref();
    if v.len() != 64 || !v.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(cx.err(value, format!("`{v}` is not a sha256 (64 lowercase hex digits)")));
    }
    Ok(v.clone())
}

pub(crate) fn unique<T: Clone + PartialEq + std::fmt::Debug>(
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

/// Targets from the keys given, each missing one taken from `defaults`
/// (a set's `[sets.<name>.targets]` over the global `[targets]`).
pub(crate) fn check_targets_of(
    cx: &Ctx,
    hip: Option<&Vec<S<String>>>,
    code_object_version: Option<&S<u32>>,
    cuda_ptx: Option<&Vec<S<String>>>,
    cuda_sass: Option<&Vec<S<String>>>,
    defaults: Option<&Targets>,
    what: &str,
) -> Result<Targets, PinError> {
    // The global table lists every backend; a set may leave one out.
    let list = |items: &[S<String>], key: &str| -> Result<(), PinError> {
        if items.is_empty() && defaults.is_none() {
            return Err(PinError::at(cx.file, cx.text, None, format!("{what}.{key} is empty")));
        }
        Ok(())
    };
    let hip = match hip {
        Some(h) => {
            list(h, "hip")?;
            unique_or_empty(cx, h, &format!("{what}.hip"), HipArch::parse)?
        }
        None => defaults.map(|t| t.hip.clone()).unwrap_or_default(),
    };
    let cuda_sass = match cuda_sass {
        Some(s) => {
            list(s, "cuda_sass")?;
            unique_or_empty(cx, s, &format!("{what}.cuda_sass"), |s| Sm::parse_prefixed(s, "sm_"))?
        }
        None => defaults.map(|t| t.cuda_sass.clone()).unwrap_or_default(),
    };
    let cuda_ptx = match cuda_ptx {
        Some(raw_ptx) => {
            list(raw_ptx, "cuda_ptx")?;
            let levels = unique_or_empty(cx, raw_ptx, &format!("{what}.cuda_ptx"), |s| Sm::parse_prefixed(s, "compute_"))?;
            if let Some(w) = levels.windows(2).position(|w| w[0] >= w[1]) {
                return Err(cx.err(&raw_ptx[w + 1], format!("{what}.cuda_ptx must be in ascending order: the first entry is the floor")));
            }
            levels
        }
        None => defaults.map(|t| t.cuda_ptx.clone()).unwrap_or_default(),
    };
    let cov = match code_object_version {
        Some(v) => {
            let cov = *v.get_ref();
            if !(4..=5).contains(&cov) {
                return Err(cx.err(v, format!("code_object_version {cov} is not supported; the pinned clang emits 4 or 5")));
            }
            cov
        }
        None => defaults.map_or(5, |t| t.code_object_version),
    };
    if !cuda_sass.is_empty() && cuda_ptx.is_empty() {
        return Err(PinError::at(cx.file, cx.text, None, format!("{what}.cuda_sass needs a PTX floor: {what}.cuda_ptx is empty")));
    }
    Ok(Targets { hip, code_object_version: cov, cuda_ptx, cuda_sass })
}

/// As [`unique`], but an empty list is allowed (a set may leave a backend out).
fn unique_or_empty<T: Clone + PartialEq + std::fmt::Debug>(
    cx: &Ctx,
    items: &[S<String>],
    what: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, PinError> {
    if items.is_empty() {
        Ok(Vec::new())
    } else {
        unique(cx, items, what, parse)
    }
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

/// `hip_force_include`: each a header of kiln's `kernels/hip` (a relative path).
pub(crate) fn check_hip_headers(cx: &Ctx, headers: &[S<String>]) -> Result<Vec<String>, PinError> {
    let check = |h: &S<String>| match relative_path(h.get_ref()) {
        true => Ok(h.get_ref().clone()),
        false => Err(cx.err(h, format!("`{}` is not a header of kiln's kernels/hip", h.get_ref()))),
    };
    headers.iter().map(check).collect()
}

/// A relative path in the pin file that stays inside its folder: kiln-manifest's one rule ([`kiln_manifest::path_inside`]).
pub(crate) fn relative_path(s: &str) -> bool {
    kiln_manifest::path_inside(std::path::Path::new(""), s).is_ok()
}

/// A set's or an input's name: lowercase letters, digits, `-` and `_`, not starting with `-` or `_`.
pub(crate) fn valid_name(s: &str) -> bool {
    s.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}
