//! The provenance record inside every crate `cargo xtask dist` packaged
//! (docs/consuming.md, "Provenance"), read back from the `.crate` files as a
//! user's tool would: a CycloneDX 1.5 document that names every file the
//! crate ships with its sha256 (each checked against the bytes in the
//! `.crate`), each payload's artifact as the manifest has it, with the job
//! that compiled it, the pin file's sha256, kiln's commit, and every package
//! of the pinned toolchain closure.
//!
//! Needs a full `cargo xtask dist` (`cargo xtask test` runs it first), or
//! `KILN_DIST_DIR` naming one.

use std::{
    collections::BTreeMap,
    fs,
    io::Read,
    path::{Path, PathBuf},
};

use kiln_manifest::{sha256_hex, Manifest};
use kiln_package::provenance::{self, Origin};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn dist() -> PathBuf {
    let dir = std::env::var_os("KILN_DIST_DIR").map_or_else(|| repo().join("target/dist"), PathBuf::from);
    assert!(dir.join("crates/crates.json").is_file(), "{} has no crates: run `cargo xtask dist` first, or set KILN_DIST_DIR", dir.display());
    dir
}

/// A `.crate`'s files by their path inside the package folder.
fn unpack(file: &Path) -> BTreeMap<String, Vec<u8>> {
    let bytes = fs::read(file).unwrap();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..]));
    let mut out = BTreeMap::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().to_string_lossy().into_owned();
        let rel = path.split_once('/').unwrap().1.to_string();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        out.insert(rel, data);
    }
    out
}

#[test]
fn every_crate_says_what_made_each_of_its_files() {
    let dist = dist();
    let manifest = Manifest::from_json(&fs::read_to_string(dist.join("manifest.json")).unwrap(), "the dist manifest").unwrap();
    let records: Vec<serde_json::Value> = serde_json::from_str(&fs::read_to_string(dist.join("crates/crates.json")).unwrap()).unwrap();
    let pins = kiln_pins::Pins::load(&repo().join("pins.toml")).unwrap();
    let closure = pins.closure().unwrap();
    let pins_sha256 = sha256_hex(&fs::read(repo().join("pins.toml")).unwrap());
    let mut payloads_seen = 0;
    for r in &records {
        let (name, version) = (r["name"].as_str().unwrap(), r["version"].as_str().unwrap());
        let files = unpack(&dist.join(r["file"].as_str().unwrap()));
        let text =
            String::from_utf8(files.get(provenance::FILE).unwrap_or_else(|| panic!("{name} carries no {}", provenance::FILE)).clone()).unwrap();
        let claims = provenance::read(&text, name).unwrap();
        assert_eq!((claims.name.as_str(), claims.version.as_str()), (name, version));
        // Every file of the .crate but the ones cargo derives (the normalized
        // Cargo.toml, Cargo.lock) and the record itself, with its sha256.
        let shipped: Vec<&String> = files.keys().filter(|f| !["Cargo.toml", "Cargo.lock", provenance::FILE].contains(&f.as_str())).collect();
        assert_eq!(claims.files.keys().collect::<Vec<_>>(), shipped, "{name}: the record lists other files than the crate holds");
        for (path, sha) in &claims.files {
            assert_eq!(&sha256_hex(&files[path]), sha, "{name}: {path} is not the bytes its record names");
        }
        if ["kiln-target", "kiln-manifest"].contains(&name) {
            assert!(claims.built.is_none() && claims.inputs.is_empty(), "{name}: kiln's own sources, nothing built");
            continue;
        }
        let built = claims.built.as_ref().unwrap_or_else(|| panic!("{name}: no record of what built it"));
        assert_eq!(built.set, "candle");
        assert_eq!(built.pins_sha256, pins_sha256, "{name}: built from another pins.toml than this checkout's");
        assert_eq!(built.toolchain_identity, manifest.toolchain.identity);
        assert!(built.kiln_commit.len() == 40 || built.kiln_commit == "unknown", "{}", built.kiln_commit);
        for deb in &closure.debs {
            assert!(
                claims.inputs.iter().any(|i| i.origin == Origin::Deb && i.name == deb.name && i.version == deb.version && i.sha256 == deb.sha256),
                "{name}: toolchain package {} {} is not in its record",
                deb.name,
                deb.version
            );
        }
        let source = claims.inputs.iter().find(|i| i.origin == Origin::Crate).expect("the source crate");
        assert_eq!((source.name.as_str(), source.license.as_deref()), ("candle-kernels", Some("MIT OR Apache-2.0")));
        // Each artifact payload: the manifest's artifact and the job that made it.
        for (path, _) in claims.files.iter().filter(|(p, _)| p.starts_with("payload/") && p.ends_with(".zst")) {
            let artifact_path = &path["payload/".len()..path.len() - 4];
            let Some(a) = manifest.artifacts.iter().find(|a| a.path == artifact_path) else { continue };
            payloads_seen += 1;
            let props = component_properties(&text, path);
            assert_eq!(props.get("kiln:artifact-sha256").map(String::as_str), Some(a.sha256.as_str()), "{name}: {path}");
            if a.kind != kiln_manifest::Kind::Bundle {
                let argv = props.get("kiln:job-argv").unwrap_or_else(|| panic!("{name}: {path} names no job"));
                // A static library's file (`moe/<stem>`) is made as `<stem>.cubin`.
                let file = kiln_manifest::library_file(&a.module).map_or(a.module.as_str(), |(_, stem)| stem);
                assert!(argv.contains(&format!("{file}.")), "{name}: {path}: {argv}");
            }
        }
    }
    // Every artifact but the static libraries (one per host CPU), whose bytes the link crates carry as slices.
    let payloaded = manifest.artifacts.iter().filter(|a| a.kind != kiln_manifest::Kind::Staticlib).count();
    assert!(payloads_seen >= payloaded, "only {payloads_seen} of {payloaded} artifact payloads were found in the records");
}

/// A file component's properties (the last value of each name).
fn component_properties(record: &str, file: &str) -> BTreeMap<String, String> {
    let doc: serde_json::Value = serde_json::from_str(record).unwrap();
    let c = doc["components"].as_array().unwrap().iter().find(|c| c["name"] == file).unwrap();
    c["properties"].as_array().map_or_else(BTreeMap::new, |p| {
        p.iter().map(|p| (p["name"].as_str().unwrap().to_string(), p["value"].as_str().unwrap().to_string())).collect()
    })
}
