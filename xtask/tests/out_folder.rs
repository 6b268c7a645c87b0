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

/// Issue 34: a folder of the user's holding a dist's `manifest.json`, or the
/// whole of a dist folder copied in with its `.kiln-owned` (`cp -r`), is not
/// a dist folder: refused before any download, naming a file of the user's
/// (before: replaced whole, rc 0, the user's files gone).
#[test]
fn dist_refuses_a_users_folder_holding_a_copied_manifest_or_marker() {
    let tmp = scratch("copied");
    let d = tmp.path();
    let cache = d.join("cache");
    let written = d.join("dist");
    fs::create_dir_all(&written).unwrap();
    fs::write(written.join("manifest.json"), "{}").unwrap();
    kiln_dist::output::OWNER.seal(&written).unwrap();
    for copied in [&["manifest.json"][..], &["manifest.json", ".kiln-owned"]] {
        let mine = d.join(format!("mine-{}", copied.len()));
        fs::create_dir_all(mine.join("photos")).unwrap();
        fs::write(mine.join("photos/beach.jpg"), "mine").unwrap();
        fs::write(mine.join("thesis.tex"), "mine").unwrap();
        for f in copied {
            fs::copy(written.join(f), mine.join(f)).unwrap();
        }
        let (ok, err) = dist(&["--out", mine.to_str().unwrap()], &cache);
        assert!(!ok && err.contains(&mine.display().to_string()) && err.contains("refusing"), "{err}");
        assert!(copied.len() == 1 || err.contains("photos"), "the first foreign file is named: {err}");
        assert_eq!(fs::read_to_string(mine.join("thesis.tex")).unwrap(), "mine");
        assert_eq!(fs::read_to_string(mine.join("photos/beach.jpg")).unwrap(), "mine");
        assert!(!cache.join("debs").exists(), "the check must come before any download");
    }
}

#[test]
fn zero_jobs_is_refused_with_a_reason() {
    let tmp = scratch("jobs");
    let d = tmp.path();
    let (ok, err) = dist(&["-j", "0", "--out", d.join("out").to_str().unwrap()], d);
    assert!(!ok && err.contains("0 jobs would run nothing"), "{err}");
}
