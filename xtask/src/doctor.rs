//! `cargo xtask doctor`: what kiln finds on this machine, without changing
//! anything. Every line says what was looked for and, if missing, what to do.

use std::path::Path;

use anyhow::Result;
use kiln_toolchain::{sysroot, Cache, Runner};

fn line(ok: bool, what: &str, detail: String) {
    println!("{} {what:<17} {detail}", if ok { "ok  " } else { "MISS" });
}

pub fn run(pins_path: &Path) -> Result<()> {
    println!("kiln doctor: the builder's side (a project that only depends on kiln's crates needs cargo alone: docs/consuming.md)");
    let pins = match crate::load_pins(pins_path) {
        Ok(p) => {
            let sets: Vec<String> =
                p.sets.iter().map(|s| format!("{}: {}{}", s.name, s.source.describe(), if s.default { "" } else { ", opt-in" })).collect();
            line(true, "pins", format!("{} (sets {})", pins_path.display(), sets.join("; ")));
            p
        }
        Err(e) => {
            line(false, "pins", format!("{e:#}"));
            return Ok(());
        }
    };
    let cache = Cache::from_env()?;
    let from = if std::env::var_os(kiln_toolchain::cache::ENV).is_some() { "from KILN_CACHE_DIR" } else { "default; KILN_CACHE_DIR moves it" };
    line(true, "cache", format!("{} ({from})", cache.root().display()));
    for (tool, install) in [("bwrap", "apt-get install bubblewrap"), ("dpkg-deb", "apt-get install dpkg")] {
        match sysroot::which(tool, install) {
            Ok(p) => line(true, tool, p.display().to_string()),
            Err(_) => line(false, tool, format!("not on PATH: {install} (or run `bash .ci/setup`)")),
        }
    }
    match sysroot::locate(&cache, &pins) {
        Ok(Some(root)) => {
            line(true, "toolchain", format!("{} ({:?}, identity {})", root.root.display(), root.mode, &root.identity[..16]));
            match Runner::new(root) {
                Ok(runner) => {
                    let ptxas = match &pins.toolchain.ptxas {
                        Some(pin) if !kiln_toolchain::wheel::is_unpacked(&cache, pin, kiln_dist::compilers::PTXAS_MEMBER) => {
                            line(false, "ptxas", format!("{} {} not downloaded yet: `cargo xtask dist` fetches it", pin.package, pin.version));
                            None
                        }
                        _ => kiln_dist::compilers::ptxas(&runner, &cache, &pins).unwrap_or_else(|e| {
                            line(false, "ptxas", format!("{e:#}"));
                            None
                        }),
                    };
                    match kiln_dist::compilers::check(&runner, &pins, ptxas.as_ref(), &pins.targets.hip) {
                        Ok(t) => {
                            for (what, v) in &t.reported {
                                line(true, what, v.clone());
                            }
                        }
                        Err(e) => line(false, "compilers", format!("{e:#}")),
                    }
                }
                Err(e) => line(false, "sandbox", format!("{e:#}")),
            }
        }
        Ok(None) => line(false, "toolchain", "not provisioned yet: `cargo xtask toolchain` (or `cargo xtask dist`) downloads it".into()),
        Err(e) => line(false, "toolchain", format!("{e:#}")),
    }
    if let Some(s) = std::env::var_os(sysroot::ENV) {
        line(true, "KILN_SYSROOT", s.to_string_lossy().into_owned());
    }
    let nextest = std::process::Command::new("cargo").args(["nextest", "--version"]).output();
    match nextest {
        Ok(o) if o.status.success() => line(true, "nextest", String::from_utf8_lossy(&o.stdout).lines().next().unwrap_or("").to_string()),
        _ => line(false, "nextest", "cargo-nextest is missing: cargo install cargo-nextest".into()),
    }
    let dist = crate::project_root().join(kiln_dist::DIST_DIR).join(kiln_manifest::FILE_NAME);
    line(dist.exists(), "dist", if dist.exists() { dist.display().to_string() } else { "no target/dist yet: cargo xtask dist".into() });
    Ok(())
}
