//! The repository's own matrix, and the workflow checked in next to it.
//! Like rust-analyzer's tidy tests: generate in memory, compare with the
//! files, and say which command fixes a difference.

use std::path::{Path, PathBuf};

use kiln_matrix::{workflow, Matrix};
use saphyr::{LoadableYamlNode, Yaml};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn repository_matrix() -> Matrix {
    let root = root();
    let pins = kiln_pins::Pins::load(&root.join("pins.toml")).unwrap_or_else(|e| panic!("{e}"));
    Matrix::load(&root.join(kiln_matrix::FILE), &pins).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_checked_in_workflows_are_what_the_matrix_generates() {
    let files = workflow::generate(&repository_matrix());
    let drift = workflow::drift(&root(), &files).unwrap();
    assert!(
        drift.is_empty(),
        "the checked-in workflows are stale:\n  {}\nrun `cargo xtask ci` and commit the result",
        drift.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("\n  ")
    );
}

#[test]
fn legs_run_in_the_pinned_runner_images_and_generic_legs_in_one_that_loads_them() {
    let root = root();
    let pins = kiln_pins::Pins::load(&root.join("pins.toml")).unwrap();
    let m = repository_matrix();
    let image_of = |arch: &str| m.legs.iter().find(|l| l.arch.name() == arch).unwrap().image.name.clone();
    // What HIP 5.7 cannot load runs in the HIP 7 image, the rest in the HIP 5.7 one.
    for arch in ["gfx1152", "gfx1153", "gfx10-3-generic", "gfx11-generic", "gfx12-generic", "gfx9-4-generic", "gfx1200", "gfx1201", "gfx950"] {
        assert_eq!(image_of(arch), "ghcr.io/kiln-gpu/kiln-runner-rocm7", "{arch}");
    }
    for arch in ["gfx1030", "gfx1100", "gfx90a", "gfx942"] {
        assert_eq!(image_of(arch), "ghcr.io/kiln-gpu/kiln-runner-rocm", "{arch}");
    }
    let text = std::fs::read_to_string(root.join(kiln_matrix::FILE)).unwrap();
    let load = |edited: String| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("matrix.yaml");
        std::fs::write(&path, &edited).unwrap();
        Matrix::load(&path, &pins).map(|_| ()).unwrap_err()
    };
    // A generic target's leg on the HIP 5.7 image: refused, naming the ROCm it needs.
    let leg = "  - arch: gfx11-generic\n    backend: hip\n    status: awaiting-runner\n    image: rocm7\n";
    assert!(text.contains(leg), "the fixture edit no longer applies to ci/matrix.yaml");
    let e = load(text.replacen(leg, "  - arch: gfx11-generic\n    backend: hip\n    status: awaiting-runner\n    image: hip\n", 1));
    assert!(
        e.message.contains(
            "the `gfx11-generic` leg runs in kiln-runner-rocm (HIP 5.7), which cannot load a generic target's code object v6 (ROCm >= 6.4)"
        ),
        "{e}"
    );
    assert_eq!(e.line, text[..text.find(leg).unwrap()].matches('\n').count() + 1, "{e}");
    // An image that is not one of pins.toml's runners.
    let e = load(text.replacen("ghcr.io/kiln-gpu/kiln-runner-rocm7@", "ghcr.io/kiln-gpu/kiln-runner-rocm8@", 1));
    assert!(e.message.contains("image `ghcr.io/kiln-gpu/kiln-runner-rocm8` is not a runner image of [containers]"), "{e}");
    assert!(e.help.as_deref().unwrap_or("").contains("ghcr.io/kiln-gpu/kiln-runner-rocm7"), "{e}");
}

#[test]
fn the_repository_matrix_tests_every_pinned_amd_arch() {
    let m = repository_matrix();
    let root = root();
    let pins = kiln_pins::Pins::load(&root.join("pins.toml")).unwrap();
    for gfx in &pins.targets.hip {
        assert!(m.legs.iter().any(|l| l.arch.name() == gfx.as_str()), "pins.toml builds {gfx} but ci/matrix.yaml has no leg for it");
    }
    assert!(m.legs.iter().any(|l| l.arch.name() == "sm_90"), "the H100 leg");
}

#[test]
fn a_generic_targets_leg_runs_on_a_member_without_its_own_object_else_on_any_member() {
    let m = repository_matrix();
    let names = |arch: &str| {
        let leg = m.legs.iter().find(|l| l.arch.name() == arch).unwrap_or_else(|| panic!("no {arch} leg"));
        workflow::runner_gfx(&m, &leg.arch).into_iter().map(|(v, g)| format!("{g}={v}")).collect::<Vec<_>>()
    };
    assert_eq!(
        names("gfx10-3-generic"),
        ["gfx1031=100301", "gfx1032=100302", "gfx1033=100303", "gfx1034=100304", "gfx1035=100305", "gfx1036=100306"]
    );
    // Every member carried: any of them, the tests preferring the generic object.
    assert_eq!(names("gfx12-generic"), ["gfx1200=120000", "gfx1201=120001"]);
    assert_eq!(names("gfx9-4-generic"), ["gfx942=90402", "gfx950=90500"]);
    assert_eq!(names("gfx90a"), ["gfx90a=90010"]);
}

/// `bash -n` on every `run:` script: a syntax error would otherwise first
/// show on a GPU runner.
#[test]
fn every_generated_script_is_valid_bash() {
    let files = workflow::generate(&repository_matrix());
    let wf = files.iter().find(|g| g.path.to_str() == Some(workflow::WORKFLOW)).unwrap();
    let doc = Yaml::load_from_str(&wf.text).unwrap();
    let jobs = doc[0]["jobs"].as_mapping().unwrap();
    let mut checked = 0;
    for (job, body) in jobs {
        for step in body["steps"].as_sequence().unwrap() {
            let Some(script) = step.as_mapping_get("run").and_then(|r| r.as_str()) else { continue };
            let out = std::process::Command::new("bash").args(["-n", "-c", script]).output().expect("bash runs");
            assert!(
                out.status.success(),
                "job {} step {:?}: {}\n{script}",
                job.as_str().unwrap(),
                step["name"].as_str(),
                String::from_utf8_lossy(&out.stderr)
            );
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} scripts found");
}
