//! The HIP code-object bundle writer (kiln-build `bundle`) against LLVM's own
//! `clang-offload-bundler` (Debian's clang-tools-15, installed by .ci/setup:
//! the pinned toolchain ships none): kiln's probe kernel compiled for three gfx
//! archs with the pinned clang (passed to kiln out of order: kiln sorts), bundled
//! both ways, byte for byte; LLVM's unbundler takes every entry back out; then
//! read back and checked by kiln-validate, which catches a swapped entry.

use std::{fs, path::Path, process::Command};

mod common;
use common::{repo, toolchain};
use kiln_toolchain::Cache;

const BUNDLER: &str = "/usr/lib/llvm-15/bin/clang-offload-bundler";

#[test]
fn bundles_match_clang_offload_bundler_byte_for_byte() {
    assert!(Path::new(BUNDLER).is_file(), "{BUNDLER} is missing: `apt-get install clang-tools-15` (bash .ci/setup does)");
    let (pins, runner) = toolchain();
    let _cache = Cache::from_env().unwrap();
    let dir = std::env::temp_dir().join(format!("kiln-hipfb-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    // The probe compiled exactly as dist compiles a module (kiln-build's HIP job), into a scratch cache.
    let plan = kiln_build::Plan::new(pins.main_set(), repo().join("kernels/probe"), repo().join("kernels/hip"));
    let file = plan.file("probe.cu", "the probe").unwrap();
    // Given unsorted on purpose; the bundle (and LLVM's -targets) order them by id.
    let archs = ["gfx90a", "gfx1100", "gfx1030"];
    let mut sorted = archs;
    sorted.sort_by_key(|a| kiln_build::bundle::hip_id(a));
    let jobs: Vec<_> =
        archs.iter().map(|a| kiln_build::hip::job(&plan, &pins, "probe", &file, &kiln_pins::HipArch::parse(a).unwrap()).unwrap()).collect();
    let scratch = Cache::at(dir.join("cache")).unwrap();
    let built = kiln_build::run_all(&runner, &scratch, &jobs, &kiln_build::Options { workers: 3, ..Default::default() }, &|_| {});
    for (a, b) in archs.iter().zip(built) {
        fs::copy(b.unwrap_or_else(|f| panic!("{f}")).path, dir.join(format!("{a}.hsaco"))).unwrap();
    }
    let compiled: Vec<(&str, Vec<u8>)> = archs.iter().map(|a| (*a, fs::read(dir.join(format!("{a}.hsaco"))).unwrap())).collect();
    let inputs: Vec<(&str, &[u8])> = compiled.iter().map(|(a, b)| (*a, b.as_slice())).collect();
    let ours = kiln_build::bundle::write(&inputs);

    let targets = kiln_build::bundle::ids(archs);
    let expected: Vec<String> = std::iter::once(kiln_build::bundle::HOST_ID.to_string()).chain(sorted.map(kiln_build::bundle::hip_id)).collect();
    assert_eq!(targets, expected);
    let reference = dir.join("ref.hipfb");
    let mut cmd = Command::new(BUNDLER);
    cmd.args(["-type=o", "-bundle-align=4096", &format!("-targets={}", targets.join(",")), "-input=/dev/null"]);
    for a in sorted {
        cmd.arg(format!("-input={}", dir.join(format!("{a}.hsaco")).display()));
    }
    let out = cmd.arg(format!("-output={}", reference.display())).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let reference = fs::read(&reference).unwrap();
    assert_eq!(ours.len(), reference.len());
    assert!(
        ours == reference,
        "kiln's bundle differs from clang-offload-bundler's at byte {:?}",
        ours.iter().zip(&reference).position(|(a, b)| a != b)
    );

    // LLVM's own reader takes every entry back out unchanged.
    for a in archs {
        let out = dir.join(format!("{a}.out"));
        let st = Command::new(BUNDLER)
            .args(["-type=o", "-unbundle", &format!("-targets={}{a}", kiln_build::bundle::HIP_ID_PREFIX)])
            .arg(format!("-input={}", dir.join("ref.hipfb").display()))
            .arg(format!("-output={}", out.display()))
            .status()
            .unwrap();
        assert!(st.success());
        assert!(fs::read(&out).unwrap() == fs::read(dir.join(format!("{a}.hsaco"))).unwrap(), "{a} does not unbundle unchanged");
    }

    let entries = kiln_validate::bundle::verify(&ours, &inputs).unwrap();
    assert_eq!(entries.iter().filter_map(|e| e.gfx()).collect::<Vec<_>>(), sorted);
    // With the e_flags machine values from kiln-target, and the kernels of every entry.
    let mach = |g: &str| kiln_pins::HipArch::parse(g).ok().map(|a| a.mach());
    let objects = kiln_validate::bundle::verify_with(&ours, &inputs, &mach).unwrap();
    let kernels: Vec<Vec<String>> = objects.iter().map(|o| o.kernels()).collect();
    assert!(!kernels[0].is_empty() && kernels.iter().all(|k| *k == kernels[0]), "{kernels:?}");
    // A bundle whose gfx1030 entry holds the gfx90a code object is refused, naming both.
    let gfx90a = &compiled[0].1;
    let swapped = kiln_build::bundle::write(&[("gfx1030", gfx90a)]);
    let err = format!("{:#}", kiln_validate::bundle::verify(&swapped, &[("gfx1030", gfx90a)]).unwrap_err());
    assert!(err.contains("gfx1030") && err.contains("gfx90a"), "{err}");
    fs::remove_dir_all(&dir).ok();
}
