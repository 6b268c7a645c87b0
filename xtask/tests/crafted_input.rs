//! Crafted files give kiln's readers an error naming what is wrong, never a
//! panic (issue 26 item 6): a manifest whose sha256 is short under `verify`,
//! stray files in the cache's objects/ under `cache verify`.

use std::{fs, path::Path};

use kiln_dist::{cache_admin, lock::Lock};
use kiln_toolchain::Cache;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

#[test]
fn verify_of_a_manifest_with_a_short_sha256_names_the_artifact() {
    // The real dist's manifest (cargo xtask test builds target/dist first),
    // one artifact beside it, and that artifact's sha256 cut to two digits.
    let dist = repo().join(kiln_dist::DIST_DIR);
    let text = fs::read_to_string(dist.join(kiln_manifest::FILE_NAME)).expect("target/dist: run `cargo xtask dist` first");
    let mut m: serde_json::Value = serde_json::from_str(&text).unwrap();
    let first = &mut m["artifacts"][0];
    let path = first["path"].as_str().unwrap().to_string();
    first["sha256"] = "ab".into();
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join(kiln_manifest::FILE_NAME), serde_json::to_string_pretty(&m).unwrap()).unwrap();
    fs::create_dir_all(dir.path().join(&path).parent().unwrap()).unwrap();
    fs::copy(dist.join(&path), dir.path().join(&path)).unwrap();
    let lock = Lock::load(&repo().join("artifacts.lock")).unwrap();
    let e = format!("{:#}", kiln_dist::verify::folder(dir.path(), &lock).unwrap_err());
    assert!(e.contains(&format!("{path}: sha256 ")) && e.contains("but the manifest says ab"), "{e}");
}

#[test]
fn cache_verify_skips_stray_files_in_objects_and_removes_none_of_them() {
    let root = tempfile::tempdir().unwrap();
    let cache = Cache::at(root.path().to_path_buf()).unwrap();
    let shard = cache.objects().join("ab");
    fs::create_dir_all(&shard).unwrap();
    // A one-letter file (before: a panic slicing its name), a file named like
    // a key, and a key-named folder of another shard: none is a cache entry.
    let strays = [shard.join("x"), shard.join(format!("ab{}", "0".repeat(62))), shard.join(format!("cd{}", "1".repeat(62)))];
    fs::write(&strays[0], "mine").unwrap();
    fs::write(&strays[1], "mine too").unwrap();
    fs::create_dir_all(&strays[2]).unwrap();
    let (checked, damaged) = cache_admin::verify(&cache, true).unwrap();
    assert_eq!((checked, damaged.len()), (0, 0), "{damaged:?}");
    assert!(strays.iter().all(|s| s.exists()), "cache verify --repair removed a file kiln did not make");
}
