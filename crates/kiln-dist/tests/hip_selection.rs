//! One HIP rule on every path (issue 36): for every AMD processor kiln serves,
//! exactly or through its family's generic target, and for runtimes either
//! side of the generic targets' floor (kiln-target's `GENERIC_ROCM`) or not
//! known, the same code object, or the same refusal, from
//!
//! - `kiln::select` (kiln-manifest's `Manifest::select_with`),
//! - the drop-in's `kiln::select`/`select_on_hip` (its options from the
//!   template's `choose::hip_options`, then the same call),
//! - the loader (`ModuleStore::check`: selection with its options, sha256,
//!   and the header check against the device), and
//! - the HIP runtime given the drop-in's `Module::hsaco()` bundle, as kiln-build
//!   writes it for the pinned archs, by clr's rule (kiln-validate's
//!   `bundle::hip_runtime_pick`).
//!
//! Nothing AMD runs here: the runtime's part is its rule read from its source.

use std::{borrow::Cow, collections::BTreeMap, path::Path};

use kiln_loader::{FnSource, ModuleStore, StoreOptions};
use kiln_manifest::{kiln_target, Artifact, Backend, DeviceArch, Kind, Manifest, Match, SelectOptions};

#[allow(dead_code)]
#[path = "../../kiln-package/template/main/src/choose.rs"]
mod choose;

/// The AMD archs of the main set, from pins.toml.
fn pinned() -> Vec<String> {
    let pins = kiln_pins::Pins::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../pins.toml")).expect("pins.toml");
    pins.main_set().targets.hip.iter().map(|a| a.to_string()).collect()
}

/// A minimal code object header for `gfx`: what the loader's header check reads.
fn elf(gfx: &str) -> Vec<u8> {
    let row = kiln_target::gfx(gfx).unwrap();
    let mut h = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 64, if row.is_generic() { 4 } else { 3 }, 0, 0, 0, 0, 0, 0, 0];
    h.extend_from_slice(&3u16.to_le_bytes()); // ET_DYN
    h.extend_from_slice(&224u16.to_le_bytes()); // EM_AMDGPU
    h.extend_from_slice(&1u32.to_le_bytes());
    h.extend_from_slice(&[0; 24]); // entry, phoff, shoff
    let generic_version = if row.is_generic() { 1 << 24 } else { 0 };
    h.extend_from_slice(&(row.mach.unwrap() | generic_version).to_le_bytes());
    for x in [64u16, 56, 0, 64, 0, 0] {
        h.extend_from_slice(&x.to_le_bytes());
    }
    h
}

/// A manifest carrying module `m` as a code object for each of `archs`, and their bytes.
fn carried(archs: &[String]) -> (Manifest, BTreeMap<String, Vec<u8>>) {
    let mut bytes = BTreeMap::new();
    let artifacts: Vec<Artifact> = archs
        .iter()
        .map(|a| {
            let b = elf(a);
            let path = format!("hip/{a}/m.hsaco");
            let art = Artifact {
                module: "m".into(),
                backend: Backend::Hip,
                arch: a.clone(),
                kind: Kind::Hsaco,
                path: path.clone(),
                size: b.len() as u64,
                sha256: kiln_manifest::sha256_hex(&b),
                kernels: vec![],
                ptx_version: None,
                resources: vec![],
                geometry: None,
            };
            bytes.insert(path, b);
            art
        })
        .collect();
    let m = serde_json::json!({
        "schema": kiln_manifest::SCHEMA, "kiln": "0.0.0",
        "source": {"crate": "candle-kernels", "version": "0.0.0", "sha256": "ab".repeat(32)},
        "toolchain": {"identity": "cd".repeat(32), "distribution": "debian", "suite": "trixie", "packages": {}, "reported": {}},
        "targets": {"hip": archs, "code_object_version": 5, "cuda_ptx": [], "cuda_sass": []},
        "artifacts": artifacts,
    });
    (Manifest::from_json(&m.to_string(), "the test manifest").expect("a manifest"), bytes)
}

/// One path's answer: the arch of the code object, or refused.
type Got = Option<String>;

#[test]
fn every_amd_device_gets_the_same_code_object_from_every_path() {
    let archs = pinned();
    let (manifest, bytes) = carried(&archs);
    // The devices kiln serves: every processor pinned or in a pinned generic target's family.
    let served: Vec<&str> =
        kiln_target::device_gfx().filter(|g| archs.iter().any(|a| a == g.name || Some(a.as_str()) == g.generic)).map(|g| g.name).collect();
    let mut listed = served.clone();
    listed.sort();
    assert_eq!(
        listed,
        [
            "gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036", "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150",
            "gfx1151", "gfx1152", "gfx1153", "gfx1200", "gfx1201", "gfx90a", "gfx942", "gfx950"
        ],
        "the AMD devices kiln serves changed"
    );
    let bundle = kiln_build::bundle::write(&archs.iter().map(|a| (a.as_str(), &[][..])).collect::<Vec<_>>());
    let entries = kiln_validate::bundle::read(&bundle).unwrap();
    let runtimes: [Option<kiln_target::Rocm>; 5] = [Some((5, 7)), Some((6, 3)), Some(kiln_target::GENERIC_ROCM), Some((7, 0)), None];
    let hip_version = |(major, minor): kiln_target::Rocm| i64::from(major) * 10_000_000 + i64::from(minor) * 100_000 + 42134;
    let mut generic_only = 0;
    for gfx in &served {
        let device = DeviceArch::parse(gfx).unwrap();
        for runtime in runtimes {
            let opts = SelectOptions { hip_runtime: runtime, ..SelectOptions::default() };
            let by_select: Got = manifest.select_with("m", &device, opts).ok().map(|s| s.artifact.arch.clone());
            let drop_in = choose::hip_options(false, runtime.map(hip_version));
            let by_drop_in: Got = manifest.select_with("m", &device, drop_in).ok().map(|s| s.artifact.arch.clone());
            let source = {
                let bytes = bytes.clone();
                FnSource::new("the test's code objects", manifest.clone(), move |p| bytes.get(p).cloned().map(Cow::Owned))
            };
            let store = ModuleStore::with_options(source, StoreOptions { select: opts });
            let by_loader: Got = store.check("m", &device).ok().map(|s| s.artifact.arch.clone());
            // The runtime of a bundle: an unknown version there is a current one.
            let by_bundle: Got =
                kiln_validate::bundle::hip_runtime_pick(&entries, gfx, runtime.unwrap_or((7, 0))).and_then(|e| e.gfx()).map(String::from);
            assert_eq!(by_select, by_drop_in, "{gfx} on {runtime:?}: the drop-in");
            assert_eq!(by_select, by_loader, "{gfx} on {runtime:?}: the loader");
            assert_eq!(by_select, by_bundle, "{gfx} on {runtime:?}: the HIP runtime's pick from the bundle");
            // What that answer is: the device's own object, else its family's generic one on ROCm >= 6.4.
            let row = kiln_target::gfx(gfx).unwrap();
            let own = archs.iter().any(|a| a == gfx);
            let loads_generic = runtime.is_none_or(|v| v >= kiln_target::GENERIC_ROCM);
            let want = if own {
                Some(gfx.to_string())
            } else if loads_generic {
                row.generic.map(String::from)
            } else {
                None
            };
            assert_eq!(by_select, want, "{gfx} on {runtime:?}");
            if !own && !loads_generic {
                generic_only += 1;
                let e = manifest.select_with("m", &device, opts).unwrap_err().to_string();
                let (major, minor) = kiln_target::GENERIC_ROCM;
                assert!(
                    e.contains(&format!("can run on {gfx}"))
                        && e.contains(&format!("this build carries {}", row.generic.unwrap()))
                        && e.contains(&format!("update ROCm to {major}.{minor} or newer")),
                    "{e}"
                );
            }
            if let Ok(s) = manifest.select_with("m", &device, opts) {
                assert_eq!(s.matched, if own { Match::Exact } else { Match::HipGeneric }, "{gfx}");
            }
        }
    }
    // gfx1031-gfx1036 on ROCm 5.7 and 6.3: refused, naming the ROCm they need.
    assert_eq!(generic_only, 6 * 2);
}
