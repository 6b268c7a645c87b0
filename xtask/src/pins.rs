//! `cargo xtask pins`: work on the pin file (update, show; kiln-pins, kiln-toolchain's `resolve`).

use std::path::Path;

use anyhow::{Context, Result};
use kiln_toolchain::{resolve, sysroot, Cache};

use crate::flags::PinsAction;

pub fn run(path: &Path, action: PinsAction) -> Result<()> {
    let pins = match action {
        // Resolved from the hand-written part alone: the old closure may contradict a pin just changed.
        PinsAction::Update { cross_only: false } => {
            let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            kiln_pins::Pins::parse(path, &kiln_pins::without_generated(&text))?
        }
        _ => crate::load_pins(path)?,
    };
    match action {
        PinsAction::Check => {
            println!("{}: ok", path.display());
            for set in &pins.sets {
                let lib = set.staticlib.as_ref().map_or(String::new(), |l| format!(", staticlib {} ({} sources)", l.name, l.sources.len()));
                let opt_in = if set.default { "" } else { "; opt-in: --set" };
                println!("  set {:<11} {} ({} modules{lib}{opt_in})", set.name, set.source.describe(), set.modules.len());
            }
            for (what, p) in pins.compilers() {
                println!("  {what:<21} {} {}", p.package, p.version);
            }
            match &pins.toolchain.closure {
                Some(c) => println!("  closure: {} packages, identity {}", c.debs.len(), sysroot::identity(c)),
                None => println!("  closure: missing (run `cargo xtask pins update`)"),
            }
            Ok(())
        }
        PinsAction::Update { cross_only: true } => {
            let cache = Cache::from_env()?;
            let closure = pins.closure()?;
            update_cross(path, &pins, closure, &cache)?;
            Ok(())
        }
        PinsAction::Update { cross_only: false } => {
            let cache = Cache::from_env()?;
            let closure = resolve::resolve(&cache, &pins, &|l| crate::say(l))?;
            let updated =
                kiln_pins::rewrite(path, |text| kiln_pins::with_closure(text, &closure)).context("the regenerated pin file does not check")?;
            let updated = update_cross(path, &updated, &closure, &cache)?;
            // The images sit on the toolchain: re-resolve them on the new one, and their Containerfiles.
            if updated.containers.is_some() {
                let updated = crate::container::update(path, &updated, &cache)?;
                for line in kiln_container::containerfile::write(&crate::project_root(), &updated)? {
                    println!("{line}");
                }
            }
            let total: u64 = closure.debs.iter().map(|d| d.size).sum();
            println!(
                "{}: closure of {} packages ({:.0} MB), identity {}",
                path.display(),
                closure.debs.len(),
                total as f64 / 1e6,
                sysroot::identity(&closure)
            );
            Ok(())
        }
        PinsAction::Show { json: _ } => {
            let identity = pins.toolchain.closure.as_ref().map(sysroot::identity);
            println!("{}", serde_json::to_string_pretty(&pins.show(identity))?);
            Ok(())
        }
    }
}

/// Resolves every `[toolchain.cross.<cpu>]` on top of `closure` and rewrites
/// their generated closures; returns the pins as written.
fn update_cross(path: &Path, pins: &kiln_pins::Pins, closure: &kiln_pins::Closure, cache: &Cache) -> Result<kiln_pins::Pins> {
    let mut resolved = Vec::new();
    for c in &pins.toolchain.cross {
        let where_excluded = "pins.toml [toolchain].exclude";
        let added = resolve::resolve_on_top(cache, pins, &c.include, &pins.toolchain.exclude, where_excluded, closure, &|l| crate::say(l))?;
        let total: u64 = added.debs.iter().map(|d| d.size).sum();
        println!(
            "{}: [toolchain.cross.{}]: {} packages on top of the closure ({:.0} MB), identity {}",
            path.display(),
            c.cpu,
            added.debs.len(),
            total as f64 / 1e6,
            sysroot::identity(&added)
        );
        resolved.push((c.cpu.clone(), added));
    }
    kiln_pins::rewrite(path, |text| kiln_pins::with_cross(text, &resolved)).context("the regenerated pin file does not check")
}
