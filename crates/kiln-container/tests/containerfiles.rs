//! The checked-in containers/ against what pins.toml generates: this fails
//! while they differ (run `cargo xtask container --regenerate`), and a pin
//! edit is shown to make it fail.

use std::path::{Path, PathBuf};

use kiln_container::containerfile;
use kiln_pins::Pins;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn pins_with(from: &str, to: &str) -> Pins {
    let path = repo().join("pins.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "the fixture edit `{from}` no longer applies to pins.toml");
    Pins::parse(&path, &text.replacen(from, to, 1)).unwrap()
}

#[test]
fn checked_in_containerfiles_are_what_the_pins_generate() {
    let pins = Pins::load(&repo().join("pins.toml")).unwrap();
    let diff = containerfile::check(&repo(), &pins).unwrap();
    assert!(diff.is_empty(), "containers/ is stale; run `cargo xtask container --regenerate`:\n  {}", diff.join("\n  "));
}

#[test]
fn a_pin_edit_makes_them_stale() {
    // Another base image: every Containerfile names it.
    let pins = pins_with("trixie-20260918-slim@sha256:a99c", "trixie-20261001-slim@sha256:a99c");
    let diff = containerfile::check(&repo(), &pins).unwrap();
    for image in ["builder", "rocm", "cuda"] {
        let file = format!("containers/{image}/Containerfile differs");
        assert!(diff.iter().any(|d| d.starts_with(&file)), "{file}: {diff:?}");
    }
    // Another mirror: the package lists stay, the Containerfiles that download change.
    let pins = pins_with("\"http://deb.debian.org/debian\"", "\"http://ftp.debian.org/debian\"");
    let diff = containerfile::check(&repo(), &pins).unwrap();
    assert!(diff.iter().any(|d| d.starts_with("containers/rocm/Containerfile")), "{diff:?}");
    assert!(!diff.iter().any(|d| d.contains("packages.txt")), "{diff:?}");
}

#[test]
fn every_listed_package_is_a_pinned_one_in_unpack_order() {
    let pins = Pins::load(&repo().join("pins.toml")).unwrap();
    let closures = kiln_container::closures(&pins).unwrap();
    let files = containerfile::generate(&pins).unwrap();
    let get = |p: &str| String::from_utf8(files.iter().find(|(f, _)| f == Path::new(p)).unwrap().1.clone()).unwrap();
    let lines: Vec<String> = get("containers/builder/packages.txt").lines().filter(|l| !l.starts_with('#')).map(String::from).collect();
    let want: Vec<String> =
        pins.closure().unwrap().debs.iter().chain(&closures.builder.debs).map(|d| format!("{} {} {}", d.sha256, d.size, d.path)).collect();
    assert_eq!(lines, want, "the builder unpacks the toolchain closure first, in pins.toml's order, as the sysroot does");
    let record = get("containers/builder/rootfs/.kiln/sysroot.json");
    let record: kiln_toolchain::sysroot::Record = serde_json::from_str(&record).unwrap();
    assert_eq!(record, kiln_toolchain::sysroot::record(pins.closure().unwrap()), "the builder carries the sysroot's own record");
    for key in ["rocm", "rocm7"] {
        let listed = get(&format!("containers/{key}/packages.txt"));
        let runner = closures.runner(key).unwrap();
        for d in &runner.packages.debs {
            assert!(listed.contains(&format!("{} {} {}", d.sha256, d.size, d.path)), "{} is not listed for {key}", d.name);
        }
        // The headers pinned beside the image are read by the structural checks, never installed.
        assert!(!runner.headers.is_empty(), "{key} pins its runtime's headers");
        for d in &runner.headers {
            assert!(!listed.contains(&d.sha256), "{key} installs its header package {}", d.name);
        }
    }
    assert!(!files.iter().any(|(f, _)| f == Path::new("containers/cuda/packages.txt")), "the CUDA runner installs nothing");
}

#[test]
fn a_closure_resolved_on_another_toolchain_is_refused() {
    let (from, to) = {
        let pins = Pins::load(&repo().join("pins.toml")).unwrap();
        let id = kiln_toolchain::sysroot::identity(pins.closure().unwrap());
        (format!("toolchain = \"{id}\""), format!("toolchain = \"{}\"", "0".repeat(64)))
    };
    let pins = pins_with(&from, &to);
    let e = containerfile::check(&repo(), &pins).unwrap_err().to_string();
    assert!(e.contains("resolved on top of toolchain 000000000000") && e.contains("cargo xtask container --update"), "{e}");
}

#[test]
fn the_builder_carries_every_pinned_wheel_once_and_points_kiln_at_them() {
    let pins = Pins::load(&repo().join("pins.toml")).unwrap();
    let wheels = kiln_container::builder_wheels(&pins);
    let ptxas = pins.toolchain.ptxas.as_ref().expect("pins.toml pins a ptxas wheel");
    let cutlass = &pins.sets.iter().find(|s| s.name == "flash-attn").expect("the flash-attn set").inputs[0].wheel;
    let shas: Vec<&str> = wheels.iter().map(|w| w.sha256.as_str()).collect();
    assert_eq!(shas, [ptxas.sha256.as_str(), cutlass.sha256.as_str()], "the toolchain's, then each set's, once each");
    let files = containerfile::generate(&pins).unwrap();
    let list = files.iter().find(|(p, _)| p.ends_with("builder/wheels.txt")).map(|(_, b)| String::from_utf8_lossy(b).into_owned()).unwrap();
    for w in &wheels {
        assert!(list.contains(&format!("{} - {}", w.sha256, w.url)), "{list}");
    }
    let cf = files.iter().find(|(p, _)| p.ends_with("builder/Containerfile")).map(|(_, b)| String::from_utf8_lossy(b).into_owned()).unwrap();
    assert!(cf.contains("KILN_WHEELS=/.kiln/wheels") && cf.contains("/rootfs/.kiln/wheels/"), "{cf}");
    // A set input that is the toolchain's own wheel is carried once.
    let text = std::fs::read_to_string(repo().join("pins.toml")).unwrap();
    let same = text.replacen(&cutlass.sha256, &ptxas.sha256, 1).replacen(&cutlass.url, &ptxas.url, 1);
    assert_ne!(same, text, "the fixture edit no longer applies to pins.toml");
    let same = Pins::parse(&repo().join("pins.toml"), &same).unwrap();
    let shas: Vec<&str> = kiln_container::builder_wheels(&same).iter().map(|w| w.sha256.as_str()).collect();
    assert_eq!(shas, [ptxas.sha256.as_str()]);
}

/// Issue 34: `container --out` on a folder of the user's holding a copied
/// marker of an earlier `container --out` is refused before anything is
/// written, naming the user's file (before: the copied marker was trusted);
/// a folder holding only what the command writes there is reused.
#[test]
fn container_out_refuses_a_copied_marker_next_to_a_users_files() {
    let pins = Pins::load(&repo().join("pins.toml")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let outputs = kiln_container::default_outputs(&out, &pins).unwrap();
    let rootfs = outputs.rootfs.unwrap();
    std::fs::write(&rootfs, "a root filesystem").unwrap();
    kiln_container::default_outputs(&out, &pins).expect("the command's own folder is reused");
    let user = tmp.path().join("user");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::copy(out.join(".kiln-owned"), user.join(".kiln-owned")).unwrap();
    std::fs::write(user.join("tax-return.pdf"), "the user's").unwrap();
    let e = format!("{:#}", kiln_container::default_outputs(&user, &pins).unwrap_err());
    assert!(e.contains("tax-return.pdf") && e.contains("--out"), "{e}");
    assert_eq!(std::fs::read_to_string(user.join("tax-return.pdf")).unwrap(), "the user's");
}
