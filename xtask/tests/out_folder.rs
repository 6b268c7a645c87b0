//! `cargo xtask dist --out` and `-j` as a user types them: a folder kiln did
//! not write is refused before anything is built, and left exactly as it was.

use std::{fs, process::Command};

/// A fresh folder, removed when the test ends, passed or not.
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("kiln-xtask-{name}-")).tempdir().unwrap()
}

fn dist(args: &[&str], cache: &std::path::Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask")).arg("dist").args(args).env("KILN_CACHE_DIR", cache).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn dist_refuses_an_out_folder_it_did_not_write() {
    let tmp = scratch("out");
    let d = tmp.path();
    let cache = d.join("cache");
    let mine = d.join("mydir");
    fs::create_dir_all(mine.join("sub")).unwrap();
    fs::write(mine.join("sub/file.txt"), "mine").unwrap();
    let (ok, err) = dist(&["--out", mine.to_str().unwrap()], &cache);
    assert!(!ok && err.contains(&mine.display().to_string()) && err.contains("refusing"), "{err}");
    assert_eq!(fs::read_to_string(mine.join("sub/file.txt")).unwrap(), "mine");
    assert_eq!(fs::read_dir(&mine).unwrap().count(), 1);
    // Refused before the toolchain was provisioned: nothing was downloaded.
    assert!(!cache.join("debs").exists(), "the check must come before any download");

    let file = d.join("notes.txt");
    fs::write(&file, "keep").unwrap();
    let (ok, err) = dist(&["--out", file.to_str().unwrap()], &cache);
    assert!(!ok && err.contains("is a file"), "{err}");
    assert_eq!(fs::read_to_string(&file).unwrap(), "keep");

    // `--out .` is the repository itself.
    let (ok, err) = dist(&["--out", "."], &cache);
    assert!(!ok && err.contains("did not write"), "{err}");
}

#[test]
fn zero_jobs_is_refused_with_a_reason() {
    let tmp = scratch("jobs");
    let d = tmp.path();
    let (ok, err) = dist(&["-j", "0", "--out", d.join("out").to_str().unwrap()], d);
    assert!(!ok && err.contains("0 jobs would run nothing"), "{err}");
}
