use std::path::Path;

use anyhow::{Context, Result};
use kiln_pins::{KernelSet, Pins, Source, Targets, WheelPin};
use kiln_toolchain::{resolve, sysroot, Cache};
use serde_json::{json, Map, Value};

use crate::flags::PinsAction;

pub fn run(path: &Path, action: PinsAction) -> Result<()> {
    let pins = crate::load_pins(path)?;
    match action {
        PinsAction::Check => {
            println!("{}: ok", path.display());
            for set in &pins.sets {
                let lib = set.staticlib.as_ref().map_or(String::new(), |l| format!(", staticlib {} ({} sources)", l.name, l.sources.len()));
                let opt_in = if set.default { "" } else { "; opt-in: --set" };
                println!("  set {:<11} {} ({} modules{lib}{opt_in})", set.name, set.source.describe(), set.modules.len());
            }
            for (what, p) in pins.compilers() {
                println!("  {what:<17} {} {}", p.package, p.version);
            }
            match &pins.toolchain.closure {
                Some(c) => println!("  closure: {} packages, identity {}", c.debs.len(), sysroot::identity(c)),
                None => println!("  closure: missing (run `cargo xtask pins update`)"),
            }
            Ok(())
        }
        PinsAction::Update => {
            let cache = Cache::from_env()?;
            let closure = resolve::resolve(&cache, &pins, &|l| crate::say(l))?;
            let updated =
                kiln_pins::rewrite(path, |text| kiln_pins::with_closure(text, &closure)).context("the regenerated pin file does not check")?;
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
            println!("{}", serde_json::to_string_pretty(&show(&pins))?);
            Ok(())
        }
    }
}

/// What scripts read from the pin file (`cargo xtask pins show --json`; bench/lib.sh's `pin`):
/// the typed pins, so that no script parses pins.toml itself.
pub fn show(pins: &Pins) -> Value {
    let sets: Map<String, Value> = pins.sets.iter().map(|s| (s.name.clone(), set_json(s))).collect();
    let t = &pins.toolchain;
    let compilers: Map<String, Value> =
        pins.compilers().iter().map(|(what, p)| (what.to_string(), json!({ "package": p.package, "version": p.version }))).collect();
    json!({
        "file": pins.file.display().to_string(),
        "main_set": pins.main_set().name,
        "sets": sets,
        "targets": targets_json(&pins.targets),
        "toolchain": {
            "distribution": t.distribution,
            "suite": t.suite,
            "compilers": compilers,
            "ptxas": t.ptxas.as_ref().map(wheel_json),
            "identity": t.closure.as_ref().map(sysroot::identity),
        },
    })
}

fn set_json(set: &KernelSet) -> Value {
    let source = match &set.source {
        Source::Crate { name, version, sha256 } => json!({ "crate": name, "version": version, "sha256": sha256 }),
        Source::Folder { path } => json!({ "folder": path }),
    };
    let inputs: Map<String, Value> = set
        .inputs
        .iter()
        .map(|i| {
            let mut w = wheel_json(&i.wheel);
            w["tree"] = json!(i.tree);
            (i.name.clone(), w)
        })
        .collect();
    json!({
        "default": set.default,
        "source": source,
        "modules": set.modules,
        "staticlib": set.staticlib.as_ref().map(|l| json!({
            "name": l.name,
            "sass": l.sass.iter().map(|s| s.sass()).collect::<Vec<_>>(),
            "ptx": l.ptx.iter().map(|s| s.ptx()).collect::<Vec<_>>(),
        })),
        "inputs": inputs,
        "targets": targets_json(&set.targets),
        "crate": set.artifact_crate.as_ref().map(|c| json!({ "name": c.name, "version": set.crate_version() })),
    })
}

fn targets_json(t: &Targets) -> Value {
    json!({
        "cuda_ptx": t.cuda_ptx.iter().map(|s| s.ptx()).collect::<Vec<_>>(),
        "cuda_sass": t.cuda_sass.iter().map(|s| s.sass()).collect::<Vec<_>>(),
        "hip": t.hip.iter().map(|a| a.as_str()).collect::<Vec<_>>(),
        "code_object_version": t.code_object_version,
    })
}

fn wheel_json(w: &WheelPin) -> Value {
    json!({ "package": w.package, "version": w.version, "url": w.url, "sha256": w.sha256, "file": w.file_name() })
}
