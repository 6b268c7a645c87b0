//! What scripts read from the pin file (`cargo xtask pins show --json`;
//! bench/lib.sh's `pin`): the typed pins as JSON, so that no script parses
//! pins.toml itself.

use serde_json::{json, Map, Value};

use crate::{KernelSet, Pins, Source, Targets, WheelPin};

/// What scripts read from the pin file (`cargo xtask pins show --json`; bench/lib.sh's `pin`):
/// the typed pins, so that no script parses pins.toml itself.
impl Pins {
    /// `identity`: the sysroot identity of the resolved closure (kiln-toolchain computes it).
    pub fn show(&self, identity: Option<String>) -> Value {
        let pins = self;
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
                "identity": identity,
            },
        })
    }
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
            "sources": l.sources,
            "force_include": l.force_include,
            "kernels": l.kernels.as_str(),
        })),
        "flags": { "cuda": set.flags.cuda, "cuda_staticlib": set.flags.cuda_staticlib },
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
