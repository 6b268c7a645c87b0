//! `[containers]`: the builder and runner images (docs/containers.md).
//!
//! The hand-written part names the images, the base image by digest, the
//! Debian packages each image adds (by name, or `name=version` where the
//! version matters) and the Rust release the builder carries.
//! `cargo xtask container --update` (and `cargo xtask pins update`) resolve
//! that into generated closures below the marker line: every `.deb` by
//! version and sha256, every Rust archive by URL and sha256. Nothing that goes
//! into an image is chosen anywhere else.

use serde::Deserialize;
use toml::Spanned;

use crate::{
    error::PinError,
    fields::{check_debs, check_sha256, Ctx, RawDeb, S},
    quote, render_deb_list, render_debs, Closure, Deb, Toolchain, GENERATED_MARKER,
};

#[derive(Clone, Debug)]
pub struct Containers {
    /// Where the images are published: `<registry>/<image name>@sha256:...`.
    pub registry: String,
    /// Every timestamp in the builder's root filesystem and image.
    pub source_date_epoch: u64,
    /// The Debian image the runner images (and the builder Containerfile's
    /// download stage) start from.
    pub base: ImageRef,
    pub builder: BuilderImage,
    /// The runner images, in [`RUNNERS`]' order.
    pub runners: Vec<RunnerImage>,
}

/// The runner images' keys (`[containers.<key>]`), in the order their tables
/// and generated closures are written: the HIP 5.7 runner, the HIP 7 runner
/// for the archs and generic targets HIP 5.7 cannot load, the CUDA runner.
pub const RUNNERS: [&str; 3] = ["rocm", "rocm7", "cuda"];

/// An image reference pinned by digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRef {
    /// Repository and tag, e.g. `docker.io/library/debian:trixie-20260918-slim`.
    pub name: String,
    /// `sha256:<64 hex digits>`.
    pub digest: String,
}

impl ImageRef {
    /// `name@digest`: what a Containerfile's `FROM` names.
    pub fn pinned(&self) -> String {
        format!("{}@{}", self.name, self.digest)
    }
}

/// A package an image asks for; the version, when given, must be the one resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Root {
    pub package: String,
    pub version: Option<String>,
}

impl Root {
    /// How apt is asked for it: `name` or `name=version`.
    pub fn apt(&self) -> String {
        match &self.version {
            Some(v) => format!("{}={v}", self.package),
            None => self.package.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct ImagePackages {
    pub include: Vec<Root>,
    /// Dependencies left out (shell-style `*` patterns), as in `[toolchain]`.
    pub exclude: Vec<String>,
    /// Generated; `None` until resolved.
    pub closure: Option<Closure>,
}

#[derive(Clone, Debug)]
pub struct BuilderImage {
    pub name: String,
    /// Packages beyond the toolchain closure, resolved on top of it.
    pub packages: ImagePackages,
    /// The Rust release (`1.95.0`) the builder runs `cargo xtask` with.
    pub rust: String,
    /// Generated: the Rust archives, by URL and sha256.
    pub rust_components: Option<Vec<RustComponent>>,
    /// Generated: the toolchain identity the packages were resolved on top of.
    pub resolved_on: Option<String>,
}

#[derive(Clone, Debug)]
pub struct RunnerImage {
    /// Its table's key in `[containers]` (one of [`RUNNERS`]), and its folder in containers/.
    pub key: &'static str,
    pub name: String,
    /// Suites beyond `[toolchain].suite` its packages may come from, in order
    /// of preference (as `[toolchain].next_suites`): a package named by
    /// version is taken from whichever has it, the rest stays the toolchain suite's.
    pub suites: Vec<String>,
    pub packages: ImagePackages,
    /// Packages pinned beside the image but not installed in it: the headers
    /// of its runtime, which the structural checks read (`name=version`).
    pub headers: Vec<Root>,
    /// Generated: those packages' files; `None` until resolved.
    pub header_debs: Option<Vec<Deb>>,
}

/// One archive of a Rust release from static.rust-lang.org.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RustComponent {
    /// `rustc`, `cargo`, `rust-std`.
    pub name: String,
    pub version: String,
    pub target: String,
    pub size: u64,
    pub sha256: String,
    pub url: String,
}

/// Everything `cargo xtask container --update` resolves, for [`with_generated`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerClosures {
    /// The identity of the toolchain closure the builder's packages sit on.
    pub toolchain: String,
    pub builder: Closure,
    pub rust: Vec<RustComponent>,
    /// Every runner's, in [`RUNNERS`]' order.
    pub runners: Vec<RunnerClosure>,
}

/// A runner image's generated part: what it installs, and the headers pinned beside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerClosure {
    pub key: String,
    pub packages: Closure,
    pub headers: Vec<Deb>,
}

impl ContainerClosures {
    /// The runner `key`'s closure.
    pub fn runner(&self, key: &str) -> Option<&RunnerClosure> {
        self.runners.iter().find(|r| r.key == key)
    }
}

impl Containers {
    /// The runner image of table `key` (`rocm`, `rocm7`, `cuda`).
    pub fn runner(&self, key: &str) -> Option<&RunnerImage> {
        self.runners.iter().find(|r| r.key == key)
    }

    /// The generated closures, or an error that says how to make them.
    pub fn closures(&self, file: &std::path::Path) -> Result<ContainerClosures, PinError> {
        let b = &self.builder;
        let missing = |what: &str| {
            PinError::whole(file, format!("the generated {what} is missing")).help("run `cargo xtask container --update` to resolve [containers]")
        };
        Ok(ContainerClosures {
            toolchain: b.resolved_on.clone().ok_or_else(|| missing("[containers.builder.closure]"))?,
            builder: b.packages.closure.clone().ok_or_else(|| missing("[containers.builder.closure]"))?,
            rust: b.rust_components.clone().ok_or_else(|| missing("[containers.builder.closure] rust"))?,
            runners: self
                .runners
                .iter()
                .map(|r| {
                    let what = format!("[containers.{}.closure]", r.key);
                    Ok(RunnerClosure {
                        key: r.key.to_string(),
                        packages: r.packages.closure.clone().ok_or_else(|| missing(&what))?,
                        headers: r.header_debs.clone().ok_or_else(|| missing(&format!("{what} headers")))?,
                    })
                })
                .collect::<Result<_, PinError>>()?,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawContainers {
    registry: S<String>,
    source_date_epoch: S<i64>,
    base: S<String>,
    builder: RawBuilder,
    rocm: RawRunner,
    rocm7: RawRunner,
    cuda: RawRunner,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBuilder {
    name: S<String>,
    #[serde(default)]
    include: Vec<S<String>>,
    #[serde(default)]
    exclude: Vec<S<String>>,
    rust: S<String>,
    closure: Option<S<RawBuilderClosure>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRunner {
    name: S<String>,
    #[serde(default)]
    suites: Vec<S<String>>,
    #[serde(default)]
    include: Vec<S<String>>,
    #[serde(default)]
    exclude: Vec<S<String>>,
    #[serde(default)]
    headers: Vec<S<String>>,
    closure: Option<S<RawRunnerClosure>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBuilderClosure {
    toolchain: S<String>,
    debs: Vec<S<RawDeb>>,
    rust: Vec<S<RawRust>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRunnerClosure {
    debs: Vec<S<RawDeb>>,
    #[serde(default)]
    headers: Vec<S<RawDeb>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRust {
    name: String,
    version: String,
    target: String,
    size: u64,
    sha256: String,
    url: String,
}

const UPDATE: &str = "run `cargo xtask container --update` after changing [containers] (docs/containers.md)";

fn is_package_name(s: &str) -> bool {
    // Debian policy 5.6.1: lowercase letters, digits, + - . ; at least two, starting alphanumeric.
    s.len() >= 2
        && s.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b))
}

fn is_image_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-/".contains(&b))
        && !s.ends_with('/')
}

fn check_name(cx: &Ctx, name: &S<String>, what: &str) -> Result<String, PinError> {
    let n = name.get_ref();
    if !is_image_name(n) || n.contains('/') {
        return Err(cx.err(name, format!("`{n}` is not an image name for {what} (lowercase letters, digits, `.`, `_`, `-`)")));
    }
    Ok(n.clone())
}

fn check_base(cx: &Ctx, base: &S<String>) -> Result<ImageRef, PinError> {
    let b = base.get_ref();
    let Some((name, digest)) = b.split_once('@') else {
        return Err(cx
            .err(base, format!("containers.base `{b}` is not pinned by digest"))
            .help("write it as `<image>:<tag>@sha256:<digest>`: a tag can be moved to other bytes, a digest cannot"));
    };
    let hex = digest.strip_prefix("sha256:").unwrap_or("");
    if hex.len() != 64 || !hex.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)) {
        return Err(cx.err(base, format!("`{digest}` is not an image digest (sha256: and 64 lowercase hex digits)")));
    }
    let repo = name.rsplit_once(':').filter(|(_, tag)| !tag.contains('/')).map_or(name, |(r, _)| r);
    if !is_image_name(repo) {
        return Err(cx.err(base, format!("`{name}` is not an image reference")));
    }
    Ok(ImageRef { name: name.to_string(), digest: digest.to_string() })
}

fn check_roots(cx: &Ctx, include: &[S<String>], what: &str) -> Result<Vec<Root>, PinError> {
    let mut out: Vec<Root> = Vec::new();
    for item in include {
        let (package, version) = match item.get_ref().split_once('=') {
            Some((p, v)) => (p.to_string(), Some(v.to_string())),
            None => (item.get_ref().clone(), None),
        };
        if !is_package_name(&package) {
            return Err(cx.err(item, format!("`{package}` is not a Debian package name (in {what})")));
        }
        if version.as_ref().is_some_and(|v| v.is_empty() || v.contains(char::is_whitespace)) {
            return Err(cx.err(item, format!("`{}` has no usable version: write `name` or `name=version` (in {what})", item.get_ref())));
        }
        if out.iter().any(|r| r.package == package) {
            return Err(cx.err(item, format!("`{package}` is listed twice in {what}")));
        }
        out.push(Root { package, version });
    }
    Ok(out)
}

fn check_patterns(cx: &Ctx, exclude: Vec<S<String>>, what: &str) -> Result<Vec<String>, PinError> {
    exclude
        .into_iter()
        .map(|p| {
            if p.get_ref().is_empty() || p.get_ref().contains(char::is_whitespace) {
                Err(cx.err(&p, format!("`{}` is not a package pattern (in {what}.exclude)", p.get_ref())))
            } else {
                Ok(p.into_inner())
            }
        })
        .collect()
}

/// The roots each resolved as asked, nothing excluded slipped in.
fn check_closure(
    cx: &Ctx,
    span: std::ops::Range<usize>,
    what: &str,
    roots: &[Root],
    exclude: &[String],
    debs: &[Deb],
    below: Option<&Closure>,
) -> Result<(), PinError> {
    let at = |message: String| PinError::at(cx.file, cx.text, Some(span.clone()), message).help(UPDATE);
    for root in roots {
        let found = debs.iter().find(|d| d.name == root.package).or_else(|| below.and_then(|b| b.find(&root.package)));
        match (found, &root.version) {
            (None, _) => return Err(at(format!("{what} includes `{}` but its generated closure is missing it", root.package))),
            (Some(d), Some(v)) if &d.version != v => {
                return Err(at(format!("{} is pinned to {v} in {what}.include but the generated closure has {}", root.package, d.version)))
            }
            _ => {}
        }
    }
    for d in debs {
        if let Some(p) = exclude.iter().find(|p| crate::glob_match(p, &d.name)) {
            return Err(at(format!("{what}'s generated closure has `{}`, which `{p}` in {what}.exclude leaves out", d.name)));
        }
        if let Some(t) = below.and_then(|b| b.find(&d.name)) {
            return Err(at(format!(
                "{what}'s generated closure has `{} {}`, which [toolchain.closure] already has (as {}): the builder's root holds the toolchain's version",
                d.name, d.version, t.version
            )));
        }
    }
    Ok(())
}

pub(crate) fn check(cx: &Ctx, raw: RawContainers, toolchain: &Toolchain) -> Result<Containers, PinError> {
    let registry = raw.registry.get_ref();
    if !is_image_name(registry) || registry.contains("://") {
        return Err(cx.err(&raw.registry, format!("`{registry}` is not a registry path like `ghcr.io/owner` (no scheme, no trailing slash)")));
    }
    let epoch = *raw.source_date_epoch.get_ref();
    // 253402300799 is 9999-12-31T23:59:59Z, the last time RFC 3339 can write.
    if !(0..=253_402_300_799).contains(&epoch) {
        return Err(cx.err(&raw.source_date_epoch, format!("source_date_epoch {epoch} is not a time in seconds since 1970 (0 to 253402300799)")));
    }
    let base = check_base(cx, &raw.base)?;

    let b = raw.builder;
    let builder_name = check_name(cx, &b.name, "containers.builder")?;
    let rust = b.rust.get_ref();
    let parts: Vec<&str> = rust.split('.').collect();
    if parts.len() != 3 || parts.iter().any(|p| p.is_empty() || !p.bytes().all(|c| c.is_ascii_digit())) {
        return Err(cx.err(&b.rust, format!("`{rust}` is not a Rust release (e.g. `1.95.0`): the builder pins an exact one")));
    }
    let include = check_roots(cx, &b.include, "containers.builder.include")?;
    let exclude = check_patterns(cx, b.exclude, "containers.builder")?;
    let (closure, rust_components, resolved_on) = match b.closure {
        None => (None, None, None),
        Some(c) => {
            let span = c.span();
            let c = c.into_inner();
            let identity = check_sha256(cx, &c.toolchain)?;
            let debs = check_debs(cx, c.debs)?;
            check_closure(cx, span, "containers.builder", &include, &exclude, &debs, toolchain.closure.as_ref())?;
            let mut comps: Vec<RustComponent> = Vec::new();
            for r in c.rust {
                let span = r.span();
                let r = r.into_inner();
                let sha256 = check_sha256(cx, &Spanned::new(span.clone(), r.sha256))?;
                let at = |m: String| PinError::at(cx.file, cx.text, Some(span.clone()), m);
                if &r.version != rust {
                    return Err(at(format!("containers.builder.rust is {rust} but the generated {} archive is {}", r.name, r.version)).help(UPDATE));
                }
                if !r.url.starts_with("https://static.rust-lang.org/dist/") || !r.url.ends_with(".tar.gz") {
                    return Err(at(format!("`{}` is not a .tar.gz on https://static.rust-lang.org/dist/", r.url)));
                }
                if comps.iter().any(|o| o.name == r.name) {
                    return Err(at(format!("Rust component `{}` is listed twice", r.name)));
                }
                comps.push(RustComponent { name: r.name, version: r.version, target: r.target, size: r.size, sha256, url: r.url });
            }
            (Some(Closure { debs }), Some(comps), Some(identity))
        }
    };
    let builder =
        BuilderImage { name: builder_name, packages: ImagePackages { include, exclude, closure }, rust: rust.clone(), rust_components, resolved_on };

    let runner = |key: &'static str, r: RawRunner| -> Result<RunnerImage, PinError> {
        let what = format!("containers.{key}");
        let what = what.as_str();
        let name = check_name(cx, &r.name, what)?;
        let mut suites: Vec<String> = Vec::new();
        for s in &r.suites {
            let suite = s.get_ref();
            if !is_package_name(suite) || suite == &toolchain.suite || suites.contains(suite) {
                return Err(cx.err(
                    s,
                    format!("`{suite}` is not a Debian suite beyond [toolchain].suite `{}`, listed once (in {what}.suites)", toolchain.suite),
                ));
            }
            suites.push(suite.clone());
        }
        let include = check_roots(cx, &r.include, &format!("{what}.include"))?;
        let exclude = check_patterns(cx, r.exclude, what)?;
        let headers = check_roots(cx, &r.headers, &format!("{what}.headers"))?;
        if let Some((h, r)) = headers.iter().zip(&r.headers).find(|(h, _)| h.version.is_none()) {
            return Err(cx.err(r, format!("`{}` in {what}.headers has no version: write `name=version`, the runtime's own version", h.package)));
        }
        let (closure, header_debs) = match r.closure {
            None => (None, None),
            Some(c) => {
                let span = c.span();
                let c = c.into_inner();
                let debs = check_debs(cx, c.debs)?;
                check_closure(cx, span.clone(), what, &include, &exclude, &debs, None)?;
                let header_debs = check_debs(cx, c.headers)?;
                let at = |m: String| PinError::at(cx.file, cx.text, Some(span.clone()), m).help(UPDATE);
                for h in &headers {
                    if !header_debs.iter().any(|d| d.name == h.package && Some(&d.version) == h.version.as_ref()) {
                        return Err(at(format!("{what}.headers has `{}` but the generated closure's headers do not", h.apt())));
                    }
                }
                if let Some(d) = header_debs.iter().find(|d| !headers.iter().any(|h| h.package == d.name)) {
                    return Err(at(format!("{what}'s generated headers have `{}`, which {what}.headers does not name", d.name)));
                }
                (Some(Closure { debs }), Some(header_debs))
            }
        };
        Ok(RunnerImage { key, name, suites, packages: ImagePackages { include, exclude, closure }, headers, header_debs })
    };
    let mut raw_runners = [Some(raw.rocm), Some(raw.rocm7), Some(raw.cuda)];
    let mut runners = Vec::new();
    for (key, r) in RUNNERS.into_iter().zip(&mut raw_runners) {
        runners.push(runner(key, r.take().expect("each runner table once"))?);
    }
    let names: Vec<&String> = std::iter::once(&builder.name).chain(runners.iter().map(|r| &r.name)).collect();
    for (i, a) in names.iter().enumerate() {
        if names[..i].contains(a) {
            return Err(PinError::at(cx.file, cx.text, Some(raw.registry.span()), format!("two images are both named `{a}`")));
        }
    }
    Ok(Containers { registry: registry.clone(), source_date_epoch: epoch as u64, base, builder, runners })
}

/// `text` (a pin file) with its whole generated part replaced: the toolchain
/// closure and, when given, the container closures.
pub fn with_generated(text: &str, toolchain: &Closure, containers: Option<&ContainerClosures>) -> String {
    let head = match text.find(GENERATED_MARKER) {
        Some(at) => &text[..at],
        None => text,
    };
    let mut out = format!("{}\n{GENERATED_MARKER}\n", head.trim_end());
    out.push_str("# Every file of the toolchain, by exact version and sha256 (the package closure).\n");
    out.push_str("[toolchain.closure]\n");
    render_debs(&mut out, &toolchain.debs);
    let cross = crate::cross_part(text);
    if !cross.is_empty() {
        out.push('\n');
        out.push_str(cross.trim_end());
        out.push('\n');
    }
    let Some(c) = containers else { return out };

    // Comments go below each header: `with_closure` keeps these tables by
    // cutting at their header lines.
    out.push_str("\n[containers.builder.closure]\n");
    out.push_str("# The builder's packages beyond [toolchain.closure] (whose identity is `toolchain`), and its Rust.\n");
    out.push_str(&format!("toolchain = {}\n", quote(&c.toolchain)));
    render_debs(&mut out, &c.builder.debs);
    out.push_str("rust = [\n");
    for r in &c.rust {
        out.push_str(&format!(
            "  {{ name = {}, version = {}, target = {}, size = {}, sha256 = {}, url = {} }},\n",
            quote(&r.name),
            quote(&r.version),
            quote(&r.target),
            r.size,
            quote(&r.sha256),
            quote(&r.url)
        ));
    }
    out.push_str("]\n");
    for r in &c.runners {
        out.push_str(&format!("\n[containers.{}.closure]\n", r.key));
        out.push_str("# Installed on the base image, by exact version and sha256.\n");
        render_debs(&mut out, &r.packages.debs);
        if !r.headers.is_empty() {
            out.push_str("# Not installed: the runtime's headers, which the structural checks compile against.\n");
            render_deb_list(&mut out, "headers", &r.headers);
        }
    }
    out
}
