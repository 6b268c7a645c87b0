//! One CUDA compatibility rule: `kiln::select` (kiln-manifest's selection, which
//! the loader and the artifact crates' `kiln::select` use) and the artifact
//! crates' per-process image (the template's `choose::plan`) must give every
//! device the same code, for the pinned targets and for every subset of the
//! pinned sms a consumer's crate features can leave (each sm is its own crate).

// The template's AMD options (`hip_options`) are checked by kiln-dist's tests/hip_selection.rs.
#[allow(dead_code)]
#[path = "../template/main/src/choose.rs"]
mod choose;

use std::path::Path;

use kiln_manifest::{kiln_target, DeviceArch, Kind, Manifest, Match, SelectError, SelectOptions};

/// What a device gets: one answer, whoever chooses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Got {
    Sass(u32),
    Ptx(u32),
    Unserved,
}

/// The sms and PTX levels of every pinned set that carries CUDA modules, from pins.toml.
fn pinned() -> Vec<(String, Vec<u32>, Vec<u32>)> {
    let pins = kiln_pins::Pins::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../pins.toml")).expect("pins.toml");
    let sets = pins.sets.iter().filter(|s| !s.modules.is_empty() && !s.targets.cuda_ptx.is_empty());
    let lists: Vec<_> =
        sets.map(|s| (s.name.clone(), s.targets.cuda_sass.iter().map(|x| x.0).collect(), s.targets.cuda_ptx.iter().map(|x| x.0).collect())).collect();
    assert!(!lists.is_empty(), "pins.toml has a set with CUDA modules");
    lists
}

/// A manifest carrying module `m` as SASS for `sass` and PTX for `ptx`.
fn manifest(sass: &[u32], ptx: &[u32]) -> Manifest {
    let art = |kind: &str, arch: String| serde_json::json!({"module": "m", "backend": "cuda", "arch": arch, "kind": kind, "path": format!("cuda/{arch}/m.{kind}"), "size": 1, "sha256": "00".repeat(32), "kernels": []});
    let artifacts: Vec<_> =
        sass.iter().map(|s| art("cubin", format!("sm_{s}"))).chain(ptx.iter().map(|l| art("ptx", format!("compute_{l}")))).collect();
    let m = serde_json::json!({
        "schema": kiln_manifest::SCHEMA, "kiln": "0.0.0",
        "source": {"crate": "candle-kernels", "version": "0.0.0", "sha256": "ab".repeat(32)},
        "toolchain": {"identity": "cd".repeat(32), "distribution": "debian", "suite": "trixie", "packages": {}, "reported": {}},
        "targets": {"hip": [], "code_object_version": 5, "cuda_ptx": [], "cuda_sass": []},
        "artifacts": artifacts,
    });
    Manifest::from_json(&m.to_string(), "the test manifest").expect("a manifest")
}

fn device(sm: u32) -> DeviceArch {
    DeviceArch::parse(&sm.to_string()).unwrap()
}

/// `kiln::select`'s answer; a cubin is `Exact` exactly when it is the device's own sm.
fn by_select(m: &Manifest, sm: u32) -> Got {
    match m.select_with("m", &device(sm), SelectOptions::default()) {
        Ok(s) => {
            let level = |p: &str| s.artifact.arch.strip_prefix(p).and_then(|d| d.parse().ok()).unwrap();
            match s.artifact.kind {
                Kind::Cubin => {
                    let want = if level("sm_") == sm { Match::Exact } else { Match::BinaryCompatible };
                    assert_eq!(s.matched, want, "sm_{sm} got {}", s.artifact.arch);
                    Got::Sass(level("sm_"))
                }
                Kind::Ptx => Got::Ptx(level("compute_")),
                k => panic!("sm_{sm} got a {k:?}"),
            }
        }
        Err(SelectError::NoArtifact { .. }) => Got::Unserved,
        Err(e) => panic!("sm_{sm}: {e}"),
    }
}

/// The image's answer for a process with this one GPU.
fn by_plan(sass: &[u32], ptx: &[u32], sm: u32) -> Got {
    let p = choose::plan(&[sm], sass, ptx, None);
    match (p.sass.as_slice(), p.ptx.as_slice(), p.unserved.as_slice()) {
        ([s], [], []) => Got::Sass(*s),
        ([], [l], []) => Got::Ptx(*l),
        ([], [], [c]) if *c == sm => Got::Unserved,
        _ => panic!("sm_{sm}: a one-GPU plan holds one thing: {p:?}"),
    }
}

/// Every device from sm_70 to sm_129: each real compute capability there
/// (kiln-target's table, Jetson Orin's 8.7 and GB10's 12.1 among them) and the
/// capabilities no GPU has yet, which both sides must treat alike too.
fn devices() -> Vec<u32> {
    let all: Vec<u32> = (70..=129).collect();
    let real: Vec<u32> = kiln_target::CUDA.iter().map(|c| c.sm).filter(|sm| (70..=121).contains(sm)).collect();
    assert!(real.contains(&87) && real.contains(&121) && real.iter().all(|sm| all.contains(sm)));
    all
}

/// Every subset of `sms` (2^8 for the pinned eight).
fn subsets(sms: &[u32]) -> impl Iterator<Item = Vec<u32>> + '_ {
    (0u32..1 << sms.len()).map(move |bits| sms.iter().enumerate().filter(|(i, _)| bits & (1 << i) != 0).map(|(_, s)| *s).collect())
}

/// The devices on which two choosers differ, with both answers.
fn disagreements(a: impl Fn(u32) -> Got, b: impl Fn(u32) -> Got) -> Vec<(u32, Got, Got)> {
    devices().into_iter().map(|sm| (sm, a(sm), b(sm))).filter(|(_, x, y)| x != y).collect()
}

#[test]
fn select_and_the_image_give_every_device_the_same_code() {
    for (set, sass, ptx) in pinned() {
        for carried in subsets(&sass) {
            let m = manifest(&carried, &ptx);
            let differ = disagreements(|sm| by_select(&m, sm), |sm| by_plan(&carried, &ptx, sm));
            assert!(differ.is_empty(), "set {set}, SASS {carried:?}, PTX {ptx:?}: (device, kiln::select, image) {differ:?}");
        }
        // What the pinned targets give the GPUs the two rules once disagreed on.
        let m = manifest(&sass, &ptx);
        assert_eq!(by_select(&m, 121), Got::Sass(120), "GB10 runs the RTX 50xx SASS");
        assert_eq!(by_select(&m, 87), Got::Ptx(80), "Jetson Orin: no SASS of another sm, compute_80 PTX");
    }
}

/// The exact-sm rule kiln-manifest had (cubin only for the device's own sm).
fn old_exact_rule(sass: &[u32], ptx: &[u32], sm: u32) -> Got {
    if sass.contains(&sm) {
        return Got::Sass(sm);
    }
    ptx.iter().filter(|&&l| l <= sm).max().map_or(Got::Unserved, |&l| Got::Ptx(l))
}

/// The same-major rule the template had (no Tegra exception, SASS over any PTX).
fn old_same_major_rule(sass: &[u32], ptx: &[u32], sm: u32) -> Got {
    match sass.iter().filter(|&&s| s / 10 == sm / 10 && s <= sm).max() {
        Some(&s) => Got::Sass(s),
        None => ptx.iter().filter(|&&l| l <= sm).max().map_or(Got::Unserved, |&l| Got::Ptx(l)),
    }
}

#[test]
fn the_comparison_catches_either_old_rule() {
    let (_, sass, ptx) = pinned().remove(0);
    let m = manifest(&sass, &ptx);
    let exact = disagreements(|sm| old_exact_rule(&sass, &ptx, sm), |sm| by_plan(&sass, &ptx, sm));
    assert!(exact.contains(&(121, Got::Ptx(89), Got::Sass(120))), "{exact:?}");
    let same_major = disagreements(|sm| by_select(&m, sm), |sm| old_same_major_rule(&sass, &ptx, sm));
    assert!(same_major.contains(&(87, Got::Ptx(80), Got::Sass(86))), "{same_major:?}");
    // With only the sm_80 crate on an 8.9 GPU, the same-major rule dropped compute_89's fp8 kernels.
    let (sass80, m80) = ([80], manifest(&[80], &ptx));
    let fp8 = disagreements(|sm| by_select(&m80, sm), |sm| old_same_major_rule(&sass80, &ptx, sm));
    assert!(fp8.contains(&(89, Got::Ptx(89), Got::Sass(80))), "{fp8:?}");
}

/// A build narrowed to some GPUs (`kiln_gpu`) refuses a GPU it leaves without
/// the SASS kiln built for it (where the PTX would be JIT-compiled instead),
/// and only such a GPU: one the carried SASS still runs, or one that takes
/// the PTX whatever is carried, is served as before. For every pinned set,
/// narrowed to each one sm, against every device from sm_70 to sm_129.
#[test]
fn a_narrowed_build_refuses_only_the_gpus_it_leaves_without_their_sass() {
    for (set, sass, ptx) in pinned() {
        for &only in &sass {
            for device in 70..130 {
                let full = choose::plan(&[device], &sass, &ptx, None);
                let narrowed = choose::plan(&[device], &[only], &ptx, None);
                let out = choose::narrowed_out(&[device], &sass, &[only], &ptx);
                let expected = match (full.sass.as_slice(), narrowed.sass.as_slice()) {
                    ([sm], []) => vec![(device, *sm)],
                    _ => vec![],
                };
                assert_eq!(out, expected, "set {set}, narrowed to sm_{only}, device sm_{device}: full {full:?}, narrowed {narrowed:?}");
            }
        }
    }
    // The cases by name: narrowed to sm_80, an A10 (8.6) runs sm_80's SASS, an
    // L4 (8.9) would JIT compute_89 (its fp8 kernels), a Jetson Orin (8.7)
    // takes the PTX in any build; an H100 needs sm_90.
    let (sass, ptx) = ([70, 75, 80, 86, 89, 90], [70, 80, 89]);
    assert_eq!(choose::narrowed_out(&[86, 89, 87, 90, 90], &sass, &[80], &ptx), [(89, 89), (90, 90)]);
}
