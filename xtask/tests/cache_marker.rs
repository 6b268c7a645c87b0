//! kiln cleans only a cache it can tell is its own (issue 26 item 5): a
//! folder without kiln's marker is used but nothing in it is removed, and
//! `cache gc` / `cache verify --repair` refuse it; `cache mark` takes the
//! user's word for a folder that holds only what kiln writes there: its
//! areas at the top, and in each only names of the forms kiln gives there.

mod common;

use std::{fs, path::Path, process::Command};

fn cache_cmd(dir: &Path, args: &[&str]) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_xtask")).arg("cache").args(args).env("KILN_CACHE_DIR", dir).output().unwrap();
    (o.status.success(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

#[test]
fn cache_gc_refuses_a_folder_kiln_cannot_tell_is_its_own_and_removes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let user = root.path().join("mine");
    // What the old gc deleted: anything shaped `tmp/<a>.<digits>.<b>` with no
    // live pid, and damaged/ and failed/ whole.
    let theirs = ["tmp/photos.2023.12/a.jpg", "damaged/report.txt", "failed/notes.txt", "holiday.jpg"];
    for f in theirs {
        fs::create_dir_all(user.join(f).parent().unwrap()).unwrap();
        fs::write(user.join(f), "mine").unwrap();
    }
    for args in [&["gc"][..], &["verify", "--repair"]] {
        let (ok, out) = cache_cmd(&user, args);
        assert!(!ok, "{args:?}: {out}");
        assert!(out.contains("refusing to clean") && out.contains("cargo xtask cache mark") && out.contains("KILN_CACHE_DIR"), "{args:?}: {out}");
        assert!(theirs.iter().all(|f| user.join(f).is_file()), "{args:?} removed a file of the user's");
    }
    // Marking is refused while the folder holds what kiln never writes at a cache's root.
    let (ok, out) = cache_cmd(&user, &["mark"]);
    assert!(!ok && out.contains("holiday.jpg") && !user.join(".kiln-owned").exists(), "{out}");
    assert!(cache_cmd(&user, &["size"]).0, "a folder kiln does not own is still used");

    // A cache an older kiln made: the user says it is kiln's, then gc cleans
    // what kiln named there, and only that.
    fs::remove_file(user.join("holiday.jpg")).unwrap();
    // Nor while an area holds a name kiln never gives there (issue 34).
    let (ok, out) = cache_cmd(&user, &["mark"]);
    assert!(!ok && out.contains("damaged/report.txt") && !user.join(".kiln-owned").exists(), "{out}");
    let aside = root.path().join("aside");
    fs::create_dir_all(&aside).unwrap();
    for (i, f) in theirs[1..3].iter().enumerate() {
        fs::rename(user.join(f), aside.join(i.to_string())).unwrap();
    }
    let (ok, out) = cache_cmd(&user, &["mark"]);
    assert!(ok && user.join(".kiln-owned").is_file(), "{out}");
    // The user's files that come back later are kept by gc.
    for (i, f) in theirs[1..3].iter().enumerate() {
        fs::rename(aside.join(i.to_string()), user.join(f)).unwrap();
    }
    fs::create_dir_all(user.join("tmp/job.7.0")).unwrap();
    fs::write(user.join("tmp/job.7.0.lock"), "").unwrap();
    fs::create_dir_all(user.join(format!("damaged/{}.7.0", "ab".repeat(32)))).unwrap();
    fs::write(user.join("failed/compile-x.log"), "error").unwrap();
    let (ok, out) = cache_cmd(&user, &["gc"]);
    assert!(!ok && out.contains("run a full `cargo xtask dist` first"), "{out}");
    assert!(!user.join("tmp/job.7.0").exists() && !user.join("damaged").join(format!("{}.7.0", "ab".repeat(32))).exists());
    assert!(!user.join("failed/compile-x.log").exists());
    assert!(theirs[..3].iter().all(|f| user.join(f).is_file()), "gc removed a file kiln did not name");
}

#[test]
fn a_new_cache_is_marked_by_kiln_itself() {
    let root = tempfile::tempdir().unwrap();
    let new = root.path().join("new");
    assert!(cache_cmd(&new, &["size"]).0);
    assert!(new.join(".kiln-owned").is_file());
    let (ok, out) = cache_cmd(&new, &["gc"]);
    assert!(!ok && out.contains("run a full `cargo xtask dist` first") && !out.contains("refusing"), "{out}");
}

#[test]
fn dist_uses_a_cache_kiln_cannot_tell_is_its_own_but_cleans_nothing_in_it() {
    // A cache as an older kiln (or a user) left it: no marker, the real
    // toolchain and compiled entries, and scratch-shaped folders of theirs.
    let s = common::scratch("unmarked-dist");
    let cache = s.0.join("cache");
    fs::create_dir_all(&cache).unwrap();
    for area in ["toolchains", "sources"] {
        std::os::unix::fs::symlink(common::real_cache().join(area), cache.join(area)).unwrap();
    }
    assert!(Command::new("cp").arg("-al").arg(common::real_cache().join("objects")).arg(cache.join("objects")).status().unwrap().success());
    let theirs = [cache.join("tmp/photos.2023.12"), cache.join("tmp/job.1.0"), cache.join("damaged/x.1.0")];
    for t in &theirs {
        fs::create_dir_all(t).unwrap();
    }
    fs::write(cache.join("tmp/job.1.0.lock"), "").unwrap();
    let o =
        common::xtask(&cache).args(["dist", "--module", "fill", "--arch", "sm_90", "--no-package", "--out"]).arg(s.0.join("out")).output().unwrap();
    let out = common::text(&o);
    assert!(o.status.success(), "{out}");
    let warnings: Vec<&str> = out.lines().filter(|l| l.contains("not cleaning")).collect();
    assert_eq!(warnings.len(), 1, "one warning line: {out}");
    assert!(warnings[0].contains(&cache.canonicalize().unwrap().display().to_string()) && warnings[0].contains("cargo xtask cache mark"), "{out}");
    assert!(theirs.iter().all(|t| t.is_dir()), "dist removed a folder from a cache it cannot tell is kiln's");
    assert!(!cache.join(".kiln-owned").exists(), "a folder with things in it is never marked without the user");
}

#[test]
fn a_scratch_folder_another_container_holds_survives_gc_whatever_its_pid() {
    // Another container sharing the cache volume: its pid (999999999) names
    // no process here, but it holds its folder's lock (this test process does,
    // while `cache gc` runs as another process).
    let root = tempfile::tempdir().unwrap();
    let cache = kiln_toolchain::Cache::at(root.path().join("cache")).unwrap();
    let live = cache.tmp().join("job.999999999.0");
    fs::create_dir_all(live.join("sub")).unwrap();
    fs::write(live.join("sub/half.o"), "building").unwrap();
    let lock = fs::File::create(cache.tmp().join("job.999999999.0.lock")).unwrap();
    lock.try_lock().unwrap();
    let dead = cache.tmp().join("job.999999998.0");
    fs::create_dir_all(&dead).unwrap();
    fs::write(cache.tmp().join("job.999999998.0.lock"), "").unwrap();
    let (_, out) = cache_cmd(cache.root(), &["gc"]);
    assert!(live.join("sub/half.o").is_file(), "gc removed a live scratch folder: {out}");
    assert!(!dead.exists(), "a scratch folder nobody holds is removed: {out}");
    drop(lock);
}
