//! `cargo xtask pins show --json`, what bench/lib.sh reads instead of parsing pins.toml:
//! every field checked against the pin file read through kiln_pins, and a changed pin
//! file shows the change.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use kiln_pins::{Pins, Source};
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn show(pins: &Path) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask")).arg("--pins").arg(pins).args(["pins", "show", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("pins show --json prints one JSON object")
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

/// Every set, its source, inputs, targets and crate version, the global targets and the
/// toolchain, as kiln_pins reads them.
fn assert_shows(json: &Value, pins: &Pins) {
    assert_eq!(json["main_set"], pins.main_set().name.as_str());
    assert_eq!(json["sets"].as_object().unwrap().len(), pins.sets.len());
    for set in &pins.sets {
        let j = &json["sets"][&set.name];
        assert_eq!(j["default"], set.default, "{}", set.name);
        match &set.source {
            Source::Crate { name, version, sha256 } => {
                assert_eq!(j["source"]["crate"], name.as_str());
                assert_eq!(j["source"]["version"], version.as_str());
                assert_eq!(j["source"]["sha256"], sha256.as_str());
            }
            Source::Folder { path } => assert_eq!(j["source"]["folder"], path.as_str()),
        }
        assert_eq!(strings(&j["modules"]), set.modules);
        assert_eq!(j["inputs"].as_object().unwrap().len(), set.inputs.len(), "{}", set.name);
        for input in &set.inputs {
            let w = &j["inputs"][&input.name];
            assert_eq!(w["url"], input.wheel.url.as_str());
            assert_eq!(w["sha256"], input.wheel.sha256.as_str());
            assert_eq!(w["version"], input.wheel.version.as_str());
            assert_eq!(w["file"], input.wheel.file_name());
            assert_eq!(w["tree"], input.tree.as_str());
        }
        assert_eq!(strings(&j["targets"]["cuda_ptx"]), set.targets.cuda_ptx.iter().map(|s| s.ptx()).collect::<Vec<_>>());
        assert_eq!(strings(&j["targets"]["cuda_sass"]), set.targets.cuda_sass.iter().map(|s| s.sass()).collect::<Vec<_>>());
        assert_eq!(j["crate"]["version"].as_str().map(String::from), set.crate_version(), "{}", set.name);
    }
    let t = &json["targets"];
    assert_eq!(strings(&t["cuda_ptx"]), pins.targets.cuda_ptx.iter().map(|s| s.ptx()).collect::<Vec<_>>());
    assert_eq!(strings(&t["cuda_sass"]), pins.targets.cuda_sass.iter().map(|s| s.sass()).collect::<Vec<_>>());
    assert_eq!(strings(&t["hip"]), pins.targets.hip.iter().map(|a| a.as_str().to_string()).collect::<Vec<_>>());
    for (what, p) in pins.compilers() {
        assert_eq!(json["toolchain"]["compilers"][what]["version"], p.version.as_str(), "{what}");
    }
    let ptxas = pins.toolchain.ptxas.as_ref().expect("pins.toml pins a ptxas wheel");
    assert_eq!(json["toolchain"]["ptxas"]["sha256"], ptxas.sha256.as_str());
    assert_eq!(json["toolchain"]["ptxas"]["url"], ptxas.url.as_str());
    let identity = pins.toolchain.closure.as_ref().map(kiln_toolchain::sysroot::identity);
    assert_eq!(json["toolchain"]["identity"].as_str().map(String::from), identity);
}

#[test]
fn pins_show_json_is_the_pin_file_as_kiln_pins_reads_it() {
    let file = root().join("pins.toml");
    let pins = Pins::load(&file).unwrap();
    assert!(pins.sets.iter().any(|s| !s.inputs.is_empty()), "test setup: a set with a pinned input");
    assert_shows(&show(&file), &pins);
}

#[test]
fn pins_show_json_follows_the_pin_file() {
    let tmp = tempfile::Builder::new().prefix("kiln-xtask-pins-show-").tempdir().unwrap();
    let text = fs::read_to_string(root().join("pins.toml")).unwrap();
    let pins = Pins::load(&root().join("pins.toml")).unwrap();
    let Source::Crate { sha256, .. } = &pins.main_set().source else { panic!("a crate source") };
    let other = "0".repeat(64);
    let changed = tmp.path().join("pins.toml");
    fs::write(&changed, text.replace(sha256.as_str(), &other)).unwrap();
    let json = show(&changed);
    assert_eq!(json["sets"][&json["main_set"].as_str().unwrap().to_string()]["source"]["sha256"], other.as_str());
    assert_shows(&json, &Pins::load(&changed).unwrap());

    let out = Command::new(env!("CARGO_BIN_EXE_xtask")).arg("--pins").arg(&changed).args(["pins", "show"]).output().unwrap();
    assert!(!out.status.success(), "--json is the one format, and required");
}
