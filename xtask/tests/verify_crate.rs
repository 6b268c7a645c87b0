//! `cargo xtask verify-crate` for real: a crate of this checkout's dist is
//! rebuilt from its provenance record and found the same, byte for byte,
//! from a file and from a registry on loopback (kiln's test registry); then
//! the refusals, each naming what it refuses: a crate changed after packaging
//! (a payload byte), one whose record was changed to match (found by the
//! rebuild, naming the payload and its likely cause), one without a record,
//! one built from other pins or another toolchain package, a registry that
//! serves other bytes than it indexed, and one that cannot be reached.
//!
//! Needs a full `cargo xtask dist` of this checkout's commit (`cargo xtask
//! test` runs it first): the rebuild then comes from kiln's cache.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use kiln_manifest::sha256_hex;
use kiln_test_registry::{self as server, Server};

const CRATE: &str = "kiln-candle-kernels-sm90";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn crate_file() -> PathBuf {
    let dist = repo().join("target/dist");
    let records: Vec<serde_json::Value> =
        serde_json::from_str(&fs::read_to_string(dist.join("crates/crates.json")).expect("target/dist has no crates: run `cargo xtask dist` first"))
            .unwrap();
    let r = records.iter().find(|r| r["name"] == CRATE).unwrap();
    dist.join(r["file"].as_str().unwrap())
}

fn verify_crate(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xtask"));
    cmd.arg("verify-crate").args(args).current_dir(repo());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out: Output = cmd.output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// `file` rewritten with `change` applied to each entry (path inside the package, bytes).
fn rewrite(file: &Path, to: &Path, change: impl Fn(&str, &mut Vec<u8>) -> bool) {
    let original = fs::read(file).unwrap();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&original[..]));
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default()));
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().into_owned();
        let rel = path.to_string_lossy().split_once('/').unwrap().1.to_string();
        let mut header = entry.header().clone();
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut data).unwrap();
        if !change(&rel, &mut data) {
            continue;
        }
        header.set_size(data.len() as u64);
        builder.append_data(&mut header, &path, &data[..]).unwrap();
    }
    fs::write(to, builder.into_inner().unwrap().finish().unwrap()).unwrap();
}

const PAYLOAD: &str = "payload/cuda/sm_90/affine.cubin.zst";

#[test]
fn a_crate_of_this_checkout_is_reproduced_and_a_changed_one_is_named() {
    let file = crate_file();
    let (ok, log) = verify_crate(&[file.to_str().unwrap()], &[]);
    assert!(ok && log.contains(&format!("{CRATE} 0.11.1+kiln.1: reproduced: the rebuild is the same .crate, byte for byte")), "{log}");

    let tmp = tempfile::tempdir().unwrap();
    // A payload byte changed after packaging: found from the crate alone.
    let changed = tmp.path().join("changed.crate");
    rewrite(&file, &changed, |rel, data| {
        if rel == PAYLOAD {
            let n = data.len() / 2;
            data[n] ^= 0xff;
        }
        true
    });
    let (ok, log) = verify_crate(&[changed.to_str().unwrap()], &[]);
    assert!(!ok && log.contains(&format!("{PAYLOAD}: sha256 ")) && log.contains("the crate was changed after kiln packaged it"), "{log}");
    assert!(!log.contains("rebuilding"), "no rebuild is needed to see it:\n{log}");

    // The record changed to agree: the rebuild finds the payload.
    let forged = tmp.path().join("forged.crate");
    let files = kiln_dist::verify_crate::unpack(&fs::read(&changed).unwrap(), "changed").unwrap();
    let new = sha256_hex(&files[PAYLOAD]);
    let original = kiln_dist::verify_crate::unpack(&fs::read(&file).unwrap(), "original").unwrap();
    let was = sha256_hex(&original[PAYLOAD]);
    rewrite(&changed, &forged, |rel, data| {
        if rel == kiln_package::provenance::FILE {
            *data = String::from_utf8(data.clone()).unwrap().replace(&was, &new).into_bytes();
        }
        true
    });
    let (ok, log) = verify_crate(&[forged.to_str().unwrap()], &[]);
    assert!(!ok && log.contains("NOT reproduced"), "{log}");
    assert!(log.contains(&format!("{PAYLOAD}: other bytes in the rebuild: a compiled artifact differs")), "{log}");

    // No record at all.
    let bare = tmp.path().join("bare.crate");
    rewrite(&file, &bare, |rel, _| rel != kiln_package::provenance::FILE);
    let (ok, log) = verify_crate(&[bare.to_str().unwrap()], &[]);
    assert!(!ok && log.contains("holds no kiln-provenance.cdx.json: it was not packaged by kiln"), "{log}");

    // Built from other pins, or with a toolchain package this checkout does not pin.
    let record = String::from_utf8(original[kiln_package::provenance::FILE].clone()).unwrap();
    let claims = kiln_package::provenance::read(&record, "x").unwrap();
    let built = claims.built.unwrap();
    let other_pins = tmp.path().join("other-pins.crate");
    rewrite(&file, &other_pins, |rel, data| {
        if rel == kiln_package::provenance::FILE {
            *data = record.replace(&built.pins_sha256, &"0".repeat(64)).into_bytes();
        }
        true
    });
    let (ok, log) = verify_crate(&[other_pins.to_str().unwrap()], &[]);
    assert!(!ok && log.contains(&format!("built from a pin file with sha256 {}", "0".repeat(64))), "{log}");
    assert!(log.contains(&format!("check out kiln commit {}", built.kiln_commit)), "{log}");
    let deb = claims.inputs.iter().find(|i| i.name == "clang-17").unwrap();
    let other_deb = tmp.path().join("other-deb.crate");
    rewrite(&file, &other_deb, |rel, data| {
        if rel == kiln_package::provenance::FILE {
            *data = record.replace(&deb.sha256, &"1".repeat(64)).into_bytes();
        }
        true
    });
    let (ok, log) = verify_crate(&[other_deb.to_str().unwrap()], &[]);
    assert!(!ok && log.contains(&format!("built with toolchain package clang-17 {} (sha256 {})", deb.version, "1".repeat(64))), "{log}");

    // Neither a file nor NAME@VERSION.
    let (ok, log) = verify_crate(&["nonsense"], &[]);
    assert!(!ok && log.contains("is neither a .crate file nor NAME@VERSION"), "{log}");
}

#[test]
fn a_crate_from_a_registry_is_checked_against_its_index_then_rebuilt() {
    let file = crate_file();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("registry");
    let server = Server::start(&dir, "127.0.0.1:0", server::Options { token: Some("t".into()), ..Default::default() }).unwrap();
    let bytes = fs::read(&file).unwrap();
    // Published as `cargo xtask publish` would, through the registry's API.
    let packaged = kiln_publish::packaged::load(&repo().join("target/dist")).unwrap();
    let p = packaged.iter().find(|p| p.name() == CRATE).unwrap();
    let family = [p.name().to_string()].into();
    let sources = kiln_publish::metadata::Sources { family: &family, target_index: "http://x/", target_is_crates_io: false };
    let body = kiln_publish::metadata::encode(&kiln_publish::metadata::new_crate(p, &sources).unwrap(), &bytes).unwrap();
    let r = kiln_publish::http::put(&format!("http://{}/api/v1/crates/new", server.addr()), &body, Some("t")).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());

    let index = server.index_url();
    let env = [("CARGO_REGISTRIES_KILN_INDEX", index.as_str())];
    let (ok, log) = verify_crate(&[&format!("{CRATE}@0.11.1+kiln.1"), "--registry", "kiln"], &env);
    assert!(ok && log.contains("reproduced"), "{log}");
    let (ok, log) = verify_crate(&[&format!("{CRATE}@0.11.2"), "--registry", "kiln"], &env);
    assert!(!ok && log.contains(&format!("registry `kiln` has no {CRATE} 0.11.2 (its index lists: 0.11.1+kiln.1)")), "{log}");

    // The registry serves other bytes than its index lists.
    let stored: Vec<PathBuf> = walk(&dir.join("crates"));
    assert_eq!(stored.len(), 1, "{stored:?}");
    let mut other = bytes.clone();
    other[100] ^= 0xff;
    fs::write(&stored[0], &other).unwrap();
    let (ok, log) = verify_crate(&[&format!("{CRATE}@0.11.1+kiln.1"), "--registry", "kiln"], &env);
    assert!(!ok && log.contains("the registry served other bytes than it indexed"), "{log}");

    // A registry that cannot be reached: named.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let gone = format!("sparse+http://{closed}/index/");
    let (ok, log) = verify_crate(&[&format!("{CRATE}@0.11.1"), "--registry", "kiln"], &[("CARGO_REGISTRIES_KILN_INDEX", &gone)]);
    assert!(!ok && log.contains(&format!("http://{closed}/index/config.json")), "{log}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}
