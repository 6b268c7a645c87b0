//! `[containers]` → the generated closures (`cargo xtask container --update`).
//!
//! The builder's packages are resolved on top of the pinned toolchain closure,
//! which stays as it is (kiln_toolchain::resolve::resolve_on_top); the runners'
//! are whole closures, installed over the base image. The Rust archives come
//! from the release's channel file on static.rust-lang.org, which lists each
//! archive's sha256; each archive is downloaded once and checked against it.

use std::{fs, path::Path};

use anyhow::{bail, Context, Result};
use kiln_pins::{Closure, ContainerClosures, ImagePackages, Pins, RunnerClosure, RustComponent};
use kiln_toolchain::{fetch, resolve, sysroot, Cache};

use crate::containers;

/// The only platform kiln's images are built for.
pub const RUST_TARGET: &str = "x86_64-unknown-linux-gnu";
/// What `cargo xtask dist` needs of a Rust release: no docs, no clippy.
pub const RUST_COMPONENTS: &[&str] = &["rustc", "cargo", "rust-std"];
pub const RUST_DIST: &str = "https://static.rust-lang.org/dist";

fn roots(p: &ImagePackages) -> Vec<String> {
    p.include.iter().map(|r| r.apt()).collect()
}

/// The pin file at `path` read for `--update`: without its container closures,
/// which may no longer match an edited `[containers]` table.
pub fn load_for_update(path: &Path) -> Result<Pins> {
    let text = fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(Pins::parse(path, &kiln_pins::without_container_closures(&text))?)
}

/// `--update`: resolves the container closures on top of `pins`' toolchain
/// closure and rewrites the generated part of the pin file at `path`; returns
/// the pins as written and the closures.
pub fn update(path: &Path, pins: &Pins, cache: &Cache, say: &dyn Fn(String)) -> Result<(Pins, ContainerClosures)> {
    let closures = resolve(cache, pins, say)?;
    let closure = pins.closure()?;
    let pins = kiln_pins::rewrite(path, |text| kiln_pins::with_generated(text, closure, Some(&closures)))
        .context("the regenerated pin file does not check")?;
    Ok((pins, closures))
}

/// Resolves every image's packages and the builder's Rust.
pub fn resolve(cache: &Cache, pins: &Pins, say: &dyn Fn(String)) -> Result<ContainerClosures> {
    let c = containers(pins)?;
    let toolchain = pins.closure()?;
    let b = &c.builder.packages;
    let builder = if b.include.is_empty() {
        Closure { debs: Vec::new() }
    } else {
        say(format!("{}: {} on top of the toolchain closure", c.builder.name, roots(b).join(" ")));
        resolve::resolve_on_top(cache, pins, &roots(b), &b.exclude, "pins.toml [containers.builder].exclude", toolchain, say)?
    };
    let mut runners = Vec::new();
    for image in &c.runners {
        let (key, p) = (image.key, &image.packages);
        let packages = if p.include.is_empty() {
            Closure { debs: Vec::new() }
        } else {
            say(format!("{}: {}", image.name, roots(p).join(" ")));
            let where_excluded = format!("pins.toml [containers.{key}].exclude");
            let debs = resolve::resolve_packages_in(cache, pins, &image.suites, &roots(p), &p.exclude, &where_excluded, say)?;
            Closure { debs: debs.into_iter().map(|r| r.deb).collect() }
        };
        let headers = if image.headers.is_empty() {
            Vec::new()
        } else {
            let wanted: Vec<String> = image.headers.iter().map(|r| r.apt()).collect();
            say(format!("{} headers (not installed): {}", image.name, wanted.join(" ")));
            resolve::package_records(cache, pins, &image.suites, &wanted)?
        };
        runners.push(RunnerClosure { key: key.to_string(), packages, headers });
    }
    let rust = rust_release(cache, &c.builder.rust, say)?;
    Ok(ContainerClosures { toolchain: sysroot::identity(toolchain), builder, rust, runners })
}

/// The archives of Rust `version` for [`RUST_TARGET`], each downloaded and checked.
pub fn rust_release(cache: &Cache, version: &str, say: &dyn Fn(String)) -> Result<Vec<RustComponent>> {
    let url = format!("{RUST_DIST}/channel-rust-{version}.toml");
    say(format!("Rust {version}: reading {url}"));
    let text = fetch::get_index(&url).with_context(|| format!("cannot read {url}: is {version} a released Rust version?"))?;
    let channel: toml::Table = toml::from_str(&text).with_context(|| format!("{url} is not a channel file"))?;
    let mut out = Vec::new();
    for name in RUST_COMPONENTS {
        let t = channel
            .get("pkg")
            .and_then(|p| p.get(name))
            .and_then(|p| p.get("target"))
            .and_then(|t| t.get(RUST_TARGET))
            .with_context(|| format!("{url} has no {name} for {RUST_TARGET}"))?;
        if t.get("available").and_then(|a| a.as_bool()) != Some(true) {
            bail!("{url}: {name} is not available for {RUST_TARGET}");
        }
        let (Some(archive), Some(sha256)) = (t.get("url").and_then(|u| u.as_str()), t.get("hash").and_then(|h| h.as_str())) else {
            bail!("{url}: {name} for {RUST_TARGET} has no url and hash");
        };
        let mut component = RustComponent {
            name: name.to_string(),
            version: version.to_string(),
            target: RUST_TARGET.into(),
            size: 0,
            sha256: sha256.to_string(),
            url: archive.to_string(),
        };
        // Downloaded now, so that a hash the channel file gets wrong fails here, not in an image build.
        let path = crate::fetch_rust(cache, &component)?;
        component.size = fs::metadata(&path)?.len();
        fetch::verify_file(&path, sha256, archive)?;
        say(format!("  {name} {version}: {:.0} MB, sha256 {}", component.size as f64 / 1e6, &sha256[..16]));
        out.push(component);
    }
    Ok(out)
}
