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

/// The real dist's manifest in a new folder with the first artifact's `path`
/// set to `path` (and, if `make` is given, what it makes there).
fn verify_with_first_path(path: &str, make: impl Fn(&Path)) -> String {
    let dist = repo().join(kiln_dist::DIST_DIR);
    let text = fs::read_to_string(dist.join(kiln_manifest::FILE_NAME)).expect("target/dist: run `cargo xtask dist` first");
    let mut m: serde_json::Value = serde_json::from_str(&text).unwrap();
    m["artifacts"][0]["path"] = path.into();
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("a/b/dist");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(kiln_manifest::FILE_NAME), serde_json::to_string_pretty(&m).unwrap()).unwrap();
    make(&dir);
    let lock = Lock::load(&repo().join("artifacts.lock")).unwrap();
    // On a thread: a verify that opened a FIFO would block for ever.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(format!("{:#}", kiln_dist::verify::folder(&dir, &lock).unwrap_err())).unwrap());
    rx.recv_timeout(std::time::Duration::from_secs(60)).expect("verify hung (it opened a FIFO?)")
}

#[test]
fn verify_never_reads_outside_the_dist_folder_nor_a_fifo() {
    // `../../..` and an absolute path: refused by the loader's one check, before anything is read.
    for path in ["../../../etc/passwd", "/etc/passwd", "cuda/../../x", ""] {
        let e = verify_with_first_path(path, |_| {});
        assert!(e.contains(&format!("{path}: not a path inside the folder")), "{path}: {e}");
    }
    // A FIFO, or a link leading out, where the artifact should be: refused without opening it.
    let e = verify_with_first_path("cuda/x.ptx", |d| {
        fs::create_dir_all(d.join("cuda")).unwrap();
        assert!(std::process::Command::new("mkfifo").arg(d.join("cuda/x.ptx")).status().unwrap().success());
    });
    assert!(e.contains("cuda/x.ptx: ") && e.contains("not a regular file"), "{e}");
    let e = verify_with_first_path("cuda/x.ptx", |d| std::os::unix::fs::symlink("/etc", d.join("cuda")).unwrap());
    assert!(e.contains("symbolic link"), "{e}");
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
    let cache_admin::Verified { checked, damaged, .. } = cache_admin::verify(&cache, true).unwrap();
    assert_eq!((checked, damaged.len()), (0, 0), "{damaged:?}");
    assert!(strays.iter().all(|s| s.exists()), "cache verify --repair removed a file kiln did not make");
}

#[test]
fn cache_verify_reports_a_fifo_in_an_entry_or_among_downloads_without_opening_it() {
    // A shared cache where someone left FIFOs: an entry's output and a `.deb`.
    let root = tempfile::tempdir().unwrap();
    let cache = Cache::at(root.path().to_path_buf()).unwrap();
    let key = "ab".repeat(32);
    let entry = kiln_build::store::Store::new(&cache).entry(&key);
    fs::create_dir_all(&entry).unwrap();
    fs::create_dir_all(cache.debs()).unwrap();
    for fifo in [entry.join("out.ptx"), cache.debs().join(format!("{key}.deb"))] {
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    }
    fs::write(entry.join(kiln_build::store::SHA256_FILE), &key).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let c = cache.clone();
    std::thread::spawn(move || tx.send(cache_admin::verify(&c, false).map(|v| v.damaged).map_err(|e| format!("{e:#}"))).unwrap());
    let damaged = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("cache verify opened a FIFO and hung").unwrap();
    assert_eq!(damaged.len(), 2, "{damaged:?}");
    assert!(damaged.iter().all(|d| d.why.contains("not a regular file")), "{damaged:?}");
    // And a dist reading the entry calls it damaged (moved aside), not a hang.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(format!("{:?}", kiln_build::store::Store::new(&cache).get_local(&key, "out.ptx"))).unwrap());
    let got = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("the store opened a FIFO and hung");
    assert!(got.starts_with("Damaged") && got.contains("not a regular file"), "{got}");
}
