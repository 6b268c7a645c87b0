//! What goes into the crates is checked, not taken on the cache's word: a
//! payload job's cache entry holding another valid zstd stream (its recorded
//! sha256 made to agree, as whoever can write a shared cache can) is refused
//! at packaging, naming the artifact, and no dist folder is written; and
//! `verify` of a dist whose crate carries a swapped payload (crates.json made
//! to agree) fails, naming the payload.

use std::{
    fs,
    io::Read,
    path::{Path, PathBuf},
};

mod common;

use common::{scratch, text, warm_cache_at, xtask};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The artifact's sha256 in the committed lock.
fn locked(path: &str) -> String {
    kiln_dist::lock::Lock::load(&repo().join("artifacts.lock")).unwrap().artifacts[path].clone()
}

/// The cache entry of the zstd job whose input has sha256 `input`.
fn payload_entry(cache: &Path, input: &str) -> PathBuf {
    let needle = format!("staged input {input}\n");
    for shard in fs::read_dir(cache.join("objects")).unwrap().flatten() {
        for entry in fs::read_dir(shard.path()).into_iter().flatten().flatten() {
            let recipe = fs::read_to_string(entry.path().join("recipe.txt")).unwrap_or_default();
            if recipe.contains("\nstep zstd ") && recipe.contains(&needle) && entry.path().join("payload.zst").is_file() {
                return entry.path();
            }
        }
    }
    panic!("no payload entry for input {input} in {}: run `cargo xtask dist` first", cache.display())
}

/// Replaces `file` (a hard link into the real cache: never written through) with `bytes`.
fn replace(file: &Path, bytes: &[u8]) {
    fs::remove_file(file).unwrap();
    fs::write(file, bytes).unwrap();
}

#[test]
fn a_substituted_payload_in_the_cache_is_refused_at_packaging_naming_the_artifact() {
    let s = scratch("payload-substituted");
    let cache = warm_cache_at(&s.0.join("cache"));
    let victim = payload_entry(&cache, &locked("cuda/sm_90/affine.cubin"));
    // Another module's payload: well-formed zstd, other bytes; the entry's record made to agree.
    let donor = fs::read(payload_entry(&cache, &locked("cuda/sm_90/fill.cubin")).join("payload.zst")).unwrap();
    replace(&victim.join("payload.zst"), &donor);
    replace(&victim.join(kiln_build::store::SHA256_FILE), kiln_manifest::sha256_hex(&donor).as_bytes());
    let out = s.0.join("dist");
    let o = xtask(&cache).arg("dist").arg("--out").arg(&out).output().unwrap();
    let t = text(&o);
    assert!(!o.status.success(), "packaged a substituted payload:\n{t}");
    assert!(t.contains("cuda/sm_90/affine.cubin: its compressed payload") && t.contains("substituted") && t.contains("no crate was packaged"), "{t}");
    assert!(!out.exists(), "a refused dist wrote its folder");
}

/// `bytes` (a `.crate`) with the file at `path` inside it replaced by `data`.
fn swap_in_crate(bytes: &[u8], path: &str, data: &[u8]) -> Vec<u8> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    let mut out = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default()));
    let mut swapped = false;
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().into_owned();
        let mut body = Vec::new();
        entry.read_to_end(&mut body).unwrap();
        let mut header = entry.header().clone();
        if name.ends_with(path) {
            body = data.to_vec();
            header.set_size(body.len() as u64);
            header.set_cksum();
            swapped = true;
        }
        out.append_data(&mut header, &name, &body[..]).unwrap();
    }
    assert!(swapped, "no {path} in the crate");
    out.into_inner().unwrap().finish().unwrap()
}

/// The file at `path` inside the `.crate` `bytes`.
fn in_crate(bytes: &[u8], path: &str) -> Vec<u8> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.path().unwrap().to_string_lossy().ends_with(path) {
            let mut body = Vec::new();
            entry.read_to_end(&mut body).unwrap();
            return body;
        }
    }
    panic!("no {path} in the crate")
}

/// A hard-linked copy of the dist (`KILN_DIST_DIR`, else target/dist) under
/// the scratch folder `label`, in which the file `path` of the crate `krate`
/// is replaced by what `swap` makes of the crate's bytes and the copy's
/// `manifest.json`, crates.json made to agree: `cargo xtask verify`'s output on
/// it. The intact copy is verified first, so a failure is the swap's.
fn verify_with_swapped(label: &str, krate: impl Fn(&str) -> bool, path: &str, swap: impl Fn(&[u8], &str) -> Vec<u8>) -> std::process::Output {
    let dist = std::env::var_os("KILN_DIST_DIR").map_or_else(|| repo().join("target/dist"), PathBuf::from);
    assert!(dist.join("crates/crates.json").is_file(), "{} has no crates: run `cargo xtask dist` first", dist.display());
    let s = scratch(label);
    let copy = s.0.join("dist");
    // Hard links: every file that changes below is replaced, never written through.
    assert!(std::process::Command::new("cp").arg("-al").arg(&dist).arg(&copy).status().unwrap().success());
    let o = xtask(&s.0.join("unused-cache")).arg("verify").arg("--dist").arg(&copy).output().unwrap();
    assert!(o.status.success(), "the intact copy verifies: {}", text(&o));

    let json = copy.join("crates/crates.json");
    let mut records: Vec<serde_json::Value> = serde_json::from_str(&fs::read_to_string(&json).unwrap()).unwrap();
    let i = records.iter().position(|r| krate(r["name"].as_str().unwrap())).expect("the crate to swap a file in");
    let file = copy.join(records[i]["file"].as_str().unwrap());
    let bytes = fs::read(&file).unwrap();
    let data = swap(&bytes, &fs::read_to_string(copy.join("manifest.json")).unwrap());
    let swapped = swap_in_crate(&bytes, path, &data);
    replace(&file, &swapped);
    records[i]["sha256"] = kiln_manifest::sha256_hex(&swapped).into();
    records[i]["size"] = swapped.len().into();
    replace(&json, serde_json::to_string_pretty(&records).unwrap().as_bytes());
    xtask(&s.0.join("unused-cache")).arg("verify").arg("--dist").arg(&copy).output().unwrap()
}

#[test]
fn verify_of_a_dist_whose_crate_payload_was_swapped_fails_naming_it() {
    // Well-formed zstd, wrong content: another module's payload.
    let o = verify_with_swapped(
        "payload-verify",
        |n| n.ends_with("-sm90"),
        "/payload/cuda/sm_90/affine.cubin.zst",
        |bytes, _| in_crate(bytes, "/payload/cuda/sm_90/fill.cubin.zst"),
    );
    let t = text(&o);
    assert!(!o.status.success(), "verify passed a swapped payload:\n{t}");
    assert!(t.contains("payload/cuda/sm_90/affine.cubin.zst") && t.contains("which the manifest gives cuda/sm_90/affine.cubin"), "{t}");
    // The lock's payloads name it too.
    assert!(t.contains("payload/cuda/sm_90/affine.cubin.zst: differs: lock"), "{t}");
}

/// The main crate's embedded manifest is a payload too: one that inflates to
/// anything but the folder's `manifest.json` fails verify, naming it.
#[test]
fn verify_of_a_dist_whose_embedded_manifest_was_swapped_fails_naming_it() {
    let embedded = format!("/{}/{}", kiln_package::record::PAYLOAD_DIR, kiln_package::record::EMBEDDED_MANIFEST);
    // Well-formed zstd of a manifest that is not the folder's: a space added to it.
    let o = verify_with_swapped(
        "embedded-manifest-verify",
        |n| n == "kiln-candle-kernels",
        &embedded,
        |bytes, manifest| {
            assert!(!in_crate(bytes, &embedded).is_empty());
            kiln_package::compress::zstd(format!(" {manifest}").as_bytes()).unwrap()
        },
    );
    let t = text(&o);
    assert!(!o.status.success(), "verify passed a swapped embedded manifest:\n{t}");
    assert!(t.contains("payload/manifest.json.zst") && t.contains("the embedded manifest is not"), "{t}");
}

/// The main crate checks every payload against its generated record of them
/// (`src/generated.rs`'s `RECORDED`, which spares it parsing the embedded
/// manifest): a record whose sha256 for an artifact is not the manifest's fails
/// verify, naming the file and the artifact.
#[test]
fn verify_of_a_dist_whose_payload_record_was_altered_fails_naming_it() {
    let generated = format!("/{}", kiln_package::record::GENERATED_RS);
    let o = verify_with_swapped(
        "payload-record-verify",
        |n| n == "kiln-candle-kernels",
        &generated,
        |bytes, manifest| {
            let text = String::from_utf8(in_crate(bytes, &generated)).unwrap();
            let m = kiln_manifest::Manifest::from_json(manifest, "manifest.json").unwrap();
            let a = m.artifacts.iter().find(|a| a.path == "cuda/sm_90/affine.cubin").unwrap();
            let line = |sha: &str| format!("path: {:?}, size: {}, sha256: {sha:?} }}", a.path, a.size);
            assert!(text.contains(&line(&a.sha256)), "the record names cuda/sm_90/affine.cubin");
            text.replace(&line(&a.sha256), &line(&"0".repeat(64))).into_bytes()
        },
    );
    let t = text(&o);
    assert!(!o.status.success(), "verify passed an altered payload record:\n{t}");
    assert!(
        t.contains("src/generated.rs (in ") && t.contains("not the manifest's; first differing:") && t.contains("cuda/sm_90/affine.cubin"),
        "{t}"
    );
}
