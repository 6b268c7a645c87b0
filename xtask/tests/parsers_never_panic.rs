//! Every parser of data from outside (a file another machine, a server or a
//! user wrote) answers random, truncated and mutated input with an error
//! naming the file, never a panic (issue 26 item 6): the manifest, the lock,
//! `part.json`, the cost table, a registry's config.json and index lines, a
//! publish request's body, a `.crate` and `crates.json`, and the cache's own
//! records (plan records, an entry's recorded sha256 and seconds). Each
//! property runs 256 cases (`PROPTEST_CASES` changes it). The wheel's zip and
//! RECORD readers have theirs in kiln-toolchain `wheel::tests`.

use std::{fs, io::Write, path::Path};

use kiln_dist::{costs::Costs, lock::Lock, part::Part, set_manifest::SetManifest};
use proptest::prelude::*;

/// Values that break naive readers: short and empty hashes, huge and negative
/// numbers, escapes, non-ASCII, separators, other JSON/TOML types.
const TOKENS: &[&str] = &[
    "",
    "a",
    "ab",
    "é",
    "\u{1F600}",
    "-1",
    "1e300",
    "1e400",
    "18446744073709551616",
    "NaN",
    "null",
    "[]",
    "{}",
    "\"\"",
    "../",
    "/",
    "\\",
    "\u{0}",
    "\n",
    "=",
    ",",
    "a1e1476e38d38b6é",
    "a1e1476e38d38😀",
];

/// Random bytes; `sample` cut at a random point; `sample` with a random span
/// replaced by one of [`TOKENS`] or a random byte; `sample` with every
/// sha256 in it replaced by one of [`TOKENS`] (where cutting a hash for a
/// message used to panic).
fn crafted(sample: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let n = sample.len();
    let (a, b, c) = (sample.clone(), sample.clone(), sample.clone());
    let text = String::from_utf8_lossy(&sample).into_owned();
    prop_oneof![
        proptest::sample::select(TOKENS).prop_map(move |tok| text.replace(SHA, tok).into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..256),
        (0..=n).prop_map(move |k| a[..k].to_vec()),
        (0..n, 0..24usize, proptest::sample::select(TOKENS)).prop_map(move |(i, len, tok)| {
            let mut v = b[..i].to_vec();
            v.extend_from_slice(tok.as_bytes());
            v.extend_from_slice(&b[(i + len).min(n)..]);
            v
        }),
        (0..n, any::<u8>()).prop_map(move |(i, x)| {
            let mut v = c.clone();
            v[i] = x;
            v
        }),
    ]
}

fn config() -> ProptestConfig {
    // No regression files written into the repository: a failure prints its input.
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(256),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

const SHA: &str = "a1e1476e38d38b606637a1562ec17e890bb7d2d3b6d7728f7d48f8765ff89847";

fn manifest_sample() -> String {
    format!(
        r#"{{"schema":1,"kiln":"0.1.0","set":"flash-attn","source":{{"crate":"candle-kernels","version":"0.11.1","sha256":"{SHA}"}},
"toolchain":{{"identity":"{SHA}","distribution":"debian","suite":"trixie","packages":{{"nvcc":{{"package":"nvidia-cuda-toolkit","version":"12.4","sha256":"{SHA}"}}}},"reported":{{"nvcc":"12.4.131"}}}},
"targets":{{"hip":["gfx90a"],"code_object_version":5,"cuda_ptx":["compute_70"],"cuda_sass":["sm_80"]}},
"artifacts":[{{"module":"affine","backend":"cuda","arch":"compute_70","kind":"ptx","path":"cuda/compute_70/affine.ptx","size":5,"sha256":"{SHA}","kernels":["affine_f32"],"ptx_version":"8.4"}},
{{"module":"affine","backend":"hip","arch":"gfx90a","kind":"hsaco","path":"hip/gfx90a/affine.hsaco","size":5,"sha256":"{SHA}","kernels":["affine_f32"],"resources":[{{"name":"affine_f32","vgprs":1,"sgprs":2,"vgpr_spills":0,"sgpr_spills":0,"scratch_bytes":0,"lds_bytes":0,"max_flat_workgroup_size":256,"wavefront_size":64}}]}}]}}"#
    )
}

fn lock_sample() -> String {
    format!("schema = 1\nsource = \"candle-kernels 0.11.1 {SHA}\"\ntoolchain = \"{SHA}\"\n\n[artifacts]\n\"cuda/compute_70/affine.ptx\" = \"{SHA}\"\n\"hip/gfx90a/affine.hsaco\" = \"{SHA}\"\n")
}

fn part_sample() -> String {
    format!(
        r#"{{"kind":"kiln-dist-part","schema":1,"kiln":"0.1.0","shard":{{"k":1,"n":2}},"plan":{{"id":"{SHA}","toolchain":"{SHA}","source":"candle-kernels 0.11.1 {SHA}","targets":["sm_80"],"modules":[],"archs":[],"costs":"{SHA}","jobs":2}},"estimated_ms":1200,
"jobs":[{{"job":"ptx compute_70 affine","key":"{SHA}","file":"objects/{SHA}/affine.ptx","size":5,"sha256":"{SHA}","dist_path":"cuda/compute_70/affine.ptx","seconds":1.5}}]}}"#
    )
}

/// Writes `bytes` to `dir/name` (made fresh).
fn put(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.join(name);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn the_samples_parse() {
    // Otherwise the mutations below would test nothing but the first error.
    let d = tempfile::tempdir().unwrap();
    SetManifest::from_json(&manifest_sample(), "m").unwrap();
    Lock::load(&put(d.path(), "artifacts.lock", lock_sample().as_bytes())).unwrap();
    put(d.path(), "part/part.json", part_sample().as_bytes());
    Part::read(&d.path().join("part")).unwrap();
    Costs::load(&put(d.path(), "job-costs.toml", b"schema = 1\n[seconds]\n\"ptx compute_70 affine\" = 1.5\n")).unwrap();
    kiln_publish::registry::Config::parse("u", REGISTRY_CONFIG).unwrap();
    kiln_publish::metadata::decode(&publish_body()).unwrap();
    let bytes = crate_file("kiln-x", "1.0.0");
    put(d.path(), "crates/kiln-x-1.0.0.crate", &bytes);
    put(d.path(), "crates/crates.json", &crates_json_for(&bytes));
    kiln_publish::packaged::load(d.path()).unwrap();
}

const REGISTRY_CONFIG: &[u8] = br#"{"dl":"http://127.0.0.1:1/api/v1/crates","api":"http://127.0.0.1:1","auth-required":false}"#;

fn publish_body() -> Vec<u8> {
    let json = br#"{"name":"a","vers":"1.0.0","deps":[],"features":{},"authors":[],"description":"d","keywords":[],"categories":[],"license":"MIT","badges":{}}"#;
    let mut v = (json.len() as u32).to_le_bytes().to_vec();
    v.extend_from_slice(json);
    v.extend_from_slice(&5u32.to_le_bytes());
    v.extend_from_slice(b"crate");
    v
}

fn crates_json_for(bytes: &[u8]) -> Vec<u8> {
    let sha = kiln_manifest::sha256_hex(bytes);
    format!(r#"[{{"name":"kiln-x","version":"1.0.0","file":"crates/kiln-x-1.0.0.crate","size":{},"sha256":"{sha}"}}]"#, bytes.len()).into_bytes()
}

/// The properties' findings, kept as fixed cases (each panicked, hung or
/// read outside its folder before the fix).
#[test]
fn crafted_cases_the_properties_found() {
    let d = tempfile::tempdir().unwrap();
    // A lock hash with a multi-byte character where a message cuts it (lock.rs `short` sliced bytes).
    let bad = format!("a1e1476e38d38b6é{}", &SHA[17..]);
    let lock =
        Lock::load(&put(d.path(), "artifacts.lock", lock_sample().replace(&format!("ptx\" = \"{SHA}"), &format!("ptx\" = \"{bad}")).as_bytes()))
            .unwrap();
    let m = SetManifest::from_json(&manifest_sample(), "m").unwrap();
    assert!(lock.differences(&m, true).iter().any(|l| l.contains("a1e1476e38d38b6é")));
    let m = SetManifest::from_json(
        &manifest_sample().replacen(&format!("\"sha256\":\"{SHA}\",\"kernels\""), &format!("\"sha256\":\"{bad}\",\"kernels\""), 1),
        "m",
    )
    .unwrap();
    let good = Lock::load(&put(d.path(), "good.lock", lock_sample().as_bytes())).unwrap();
    assert!(good.differences(&m, true).iter().any(|l| l.contains("built a1e1476e38d38b6é")));

    // crates.json naming a file outside its folder, or a FIFO: refused without reading it.
    let bytes = crate_file("kiln-x", "1.0.0");
    put(d.path(), "crates/kiln-x-1.0.0.crate", &bytes);
    let json = String::from_utf8(crates_json_for(&bytes)).unwrap();
    put(d.path(), "crates/crates.json", json.replace("crates/kiln-x-1.0.0.crate", "../../../../etc/passwd").as_bytes());
    let e = format!("{:#}", kiln_publish::packaged::load(d.path()).unwrap_err());
    assert!(e.contains("crates.json") && e.contains("not a path inside"), "{e}");
    assert!(std::process::Command::new("mkfifo").arg(d.path().join("crates/fifo.crate")).status().unwrap().success());
    put(d.path(), "crates/crates.json", json.replace("crates/kiln-x-1.0.0.crate", "crates/fifo.crate").as_bytes());
    let (tx, rx) = std::sync::mpsc::channel();
    let (dist, crates) = (d.path().to_path_buf(), d.path().join("crates"));
    std::thread::spawn(move || {
        let a = kiln_publish::packaged::load(&dist).map(|_| ()).map_err(|e| format!("{e:#}"));
        let b = kiln_dist::package::verify_cached(&crates).map(|_| ()).map_err(|e| format!("{e:#}"));
        tx.send((a, b)).unwrap();
    });
    let (a, b) = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("a reader opened the FIFO and hung");
    for e in [a.unwrap_err(), b.unwrap_err()] {
        assert!(e.contains("not a regular file"), "{e}");
    }

    // A folder (or anything not a file) among the cache's plan records: not a record, not an error without a name.
    let cache = kiln_toolchain::Cache::at(d.path().join("cache")).unwrap();
    fs::create_dir_all(cache.root().join("plans/x.json")).unwrap();
    let e = format!("{:#}", kiln_dist::cache_admin::gc(&cache).unwrap_err());
    assert!(e.contains("run a full `cargo xtask dist` first"), "{e}");
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn manifests_and_what_reads_them(bytes in crafted(manifest_sample().into_bytes())) {
        let text = String::from_utf8_lossy(&bytes);
        let what = "some/dist/manifest.json";
        match SetManifest::from_json(&text, what) {
            Err(e) => prop_assert!(format!("{e:#}").contains(what), "{e:#}"),
            Ok(m) => {
                // What reads a parsed manifest: the lock's comparison and verify.
                let d = tempfile::tempdir().unwrap();
                let lock = Lock::load(&put(d.path(), "artifacts.lock", lock_sample().as_bytes())).unwrap();
                let _ = lock.differences(&m, true);
                let _ = m.lock_name();
                put(d.path(), "dist/manifest.json", &bytes);
                put(d.path(), "dist/cuda/compute_70/affine.ptx", b"bytes");
                let _ = kiln_dist::verify::folder(&d.path().join("dist"), &lock);
            }
        }
    }

    #[test]
    fn locks(bytes in crafted(lock_sample().into_bytes())) {
        let d = tempfile::tempdir().unwrap();
        let path = put(d.path(), "artifacts.lock", &bytes);
        match Lock::load(&path) {
            Err(e) => prop_assert!(format!("{e:#}").contains("artifacts.lock"), "{e:#}"),
            Ok(lock) => {
                let m = SetManifest::from_json(&manifest_sample(), "m").unwrap();
                let _ = lock.differences(&m, true);
                let _ = lock.differences(&m, false);
            }
        }
    }

    #[test]
    fn parts(bytes in crafted(part_sample().into_bytes())) {
        let d = tempfile::tempdir().unwrap();
        put(d.path(), "part/part.json", &bytes);
        match Part::read(&d.path().join("part")) {
            Err(e) => prop_assert!(format!("{e:#}").contains("part"), "{e:#}"),
            Ok(p) => {
                let sample: Part = serde_json::from_str(&part_sample()).unwrap();
                let _ = p.plan.differences(&sample.plan);
                let _ = sample.plan.differences(&p.plan);
                let _ = p.shard.to_string();
            }
        }
    }

    #[test]
    fn cost_tables(bytes in crafted(b"schema = 1\nmeasured = \"x\"\n[seconds]\n\"ptx compute_70 affine\" = 1.5\n\"cubin sm_80 binary\" = 20\n".to_vec())) {
        let d = tempfile::tempdir().unwrap();
        let path = put(d.path(), "job-costs.toml", &bytes);
        if let Err(e) = Costs::load(&path) {
            prop_assert!(format!("{e:#}").contains("job-costs.toml"), "{e:#}");
        }
    }

    #[test]
    fn registry_configs(bytes in crafted(REGISTRY_CONFIG.to_vec())) {
        let url = "http://127.0.0.1:1/index/config.json";
        if let Err(e) = kiln_publish::registry::Config::parse(url, &bytes) {
            prop_assert!(format!("{e:#}").contains(url), "{e:#}");
        }
    }

    #[test]
    fn publish_bodies(bytes in crafted(publish_body())) {
        let _ = kiln_publish::metadata::decode(&bytes);
    }

    #[test]
    fn packaged_crates_and_their_records(bytes in crafted(crate_file("kiln-x", "1.0.0"))) {
        let d = tempfile::tempdir().unwrap();
        put(d.path(), "crates/kiln-x-1.0.0.crate", &bytes);
        put(d.path(), "crates/crates.json", &crates_json_for(&bytes));
        if let Err(e) = kiln_publish::packaged::load(d.path()) {
            prop_assert!(format!("{e:#}").contains("kiln-x-1.0.0.crate"), "{e:#}");
        }
    }

    #[test]
    fn crates_json(bytes in crafted(crates_json_for(&crate_file("kiln-x", "1.0.0")))) {
        let d = tempfile::tempdir().unwrap();
        put(d.path(), "crates/crates.json", &bytes);
        put(d.path(), "crates/kiln-x-1.0.0.crate", &crate_file("kiln-x", "1.0.0"));
        if let Err(e) = kiln_publish::packaged::load(d.path()) {
            prop_assert!(format!("{e:#}").contains("crates.json"), "{e:#}");
        }
        if let Err(e) = kiln_dist::package::verify_cached(&d.path().join("crates")) {
            prop_assert!(format!("{e:#}").contains("crates.json") || format!("{e:#}").contains("crate"), "{e:#}");
        }
    }
}

proptest! {
    // A quarter of the cases: each makes a cache and runs `cache verify` and `gc` on it.
    #![proptest_config(ProptestConfig { cases: config().cases / 4, ..config() })]

    #[test]
    fn the_caches_own_records(record in crafted(br#"{"checkout":"/nowhere","toolchain":"t","sources":[],"debs":[],"keys":[],"packages":[]}"#.to_vec()),
                              sha in crafted(SHA.as_bytes().to_vec()),
                              seconds in crafted(b"12.5\n".to_vec())) {
        let d = tempfile::tempdir().unwrap();
        let cache = kiln_toolchain::Cache::at(d.path().join("cache")).unwrap();
        put(cache.root(), "plans/0123456789abcdef.json", &record);
        let store = kiln_build::store::Store::new(&cache);
        let key = "ab".repeat(32);
        let entry = store.entry(&key);
        put(&entry, "out.ptx", b"bytes");
        put(&entry, kiln_build::store::SHA256_FILE, &sha);
        put(&entry, kiln_build::store::SECONDS_FILE, &seconds);
        let _ = store.seconds(&key);
        let _ = kiln_dist::cache_admin::verify(&cache, false).unwrap();
        let _ = store.get_local(&key, "out.ptx");
        let _ = kiln_dist::cache_admin::gc(&cache);
    }
}

/// A `.crate` as cargo writes it: a gzipped tar of `<name>-<version>/`.
fn crate_file(name: &str, version: &str) -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    for (path, text) in
        [("Cargo.toml", format!("[package]\nname = \"{name}\"\nversion = \"{version}\"\nreadme = \"README.md\"\n")), ("README.md", "# x\n".into())]
    {
        let mut h = tar::Header::new_gnu();
        h.set_size(text.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append_data(&mut h, format!("{name}-{version}/{path}"), text.as_bytes()).unwrap();
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&tar.into_inner().unwrap()).unwrap();
    gz.finish().unwrap()
}
