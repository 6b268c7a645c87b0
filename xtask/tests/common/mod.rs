//! What the xtask tests that run real dists share: scratch folders, caches
//! that share the real cache's toolchain and sources, running `xtask`, and a
//! real HTTP cache server (nginx) on loopback.
#![allow(dead_code)] // each test file uses its own part of this

pub mod nginx;

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Output},
};

pub fn real_cache() -> PathBuf {
    kiln_toolchain::Cache::from_env().unwrap().root().to_path_buf()
}

/// A folder removed (made writable first) when dropped.
pub struct Scratch(pub PathBuf);
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = Command::new("chmod").args(["-R", "u+w"]).arg(&self.0).status();
        let _ = fs::remove_dir_all(&self.0);
    }
}

pub fn scratch(name: &str) -> Scratch {
    let d = std::env::temp_dir().join(format!("kiln-rel-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    Scratch(d)
}

/// A cache at `dir` sharing the real cache's unpacked toolchain and sources
/// (provisioned by `cargo xtask test` before the tests run), with no compiled objects.
pub fn cache_at(dir: &Path) -> PathBuf {
    // Made (and so marked) by kiln before anything is put in it, as a new cache is.
    kiln_toolchain::Cache::at(dir.to_path_buf()).unwrap();
    for area in ["toolchains", "sources"] {
        let real = real_cache().join(area);
        assert!(real.is_dir(), "{} is missing: run `cargo xtask dist` (or `cargo xtask test`) first", real.display());
        std::os::unix::fs::symlink(real, dir.join(area)).unwrap();
    }
    dir.to_path_buf()
}

/// [`cache_at`] with every compiled entry of the real cache (hard links:
/// nothing is copied or changed), but no packaged crates.
pub fn warm_cache_at(dir: &Path) -> PathBuf {
    let cache = cache_at(dir);
    let st = Command::new("cp").arg("-al").arg(real_cache().join("objects")).arg(cache.join("objects")).status().unwrap();
    assert!(st.success());
    fs::remove_dir_all(cache.join("objects/packages")).ok();
    cache
}

/// `cmd` (a `cargo build` of a consumer crate the tests make) keeps no debug info and no
/// incremental state: nothing a test checks reads them, and they were most of those builds'
/// bytes (a fresh clone's consumer builds took 8.5 GB of target/ with them). Settings a
/// consumer may choose itself, in its environment, so a consumer's own files stay as written.
pub fn lean_consumer_build(cmd: &mut Command) -> &mut Command {
    cmd.env("CARGO_PROFILE_DEV_DEBUG", "0").env("CARGO_INCREMENTAL", "0")
}

/// `xtask` with `cache` as its cache, no failpoint and no remote cache from the environment.
pub fn xtask(cache: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_xtask"));
    c.env("KILN_CACHE_DIR", cache).env_remove("KILN_FAILPOINT");
    for v in ["KILN_REMOTE_CACHE", "KILN_REMOTE_CACHE_READ_ONLY", "KILN_REMOTE_CACHE_NETRC", "KILN_REMOTE_CACHE_TOKEN", "KILN_REMOTE_CACHE_TIMEOUT"] {
        c.env_remove(v);
    }
    c
}

pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Folders a killed publish could leave beside `out`.
pub fn leftovers(out: &Path) -> Vec<String> {
    let name = out.file_name().unwrap().to_string_lossy().into_owned();
    fs::read_dir(out.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!(".{name}.")))
        .collect()
}

/// Every file under `dir`, relative, with its bytes.
pub fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
        for e in fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                walk(root, &p, out);
            } else {
                out.push((p.strip_prefix(root).unwrap().to_path_buf(), fs::read(&p).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Fails, naming the first files that differ, unless `a` and `b` hold the same files with the same bytes.
pub fn assert_same_tree(a: &Path, b: &Path) {
    let (fa, fb) = (files(a), files(b));
    let names = |f: &[(PathBuf, Vec<u8>)]| f.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>();
    assert_eq!(names(&fa), names(&fb), "{} and {} hold different files", a.display(), b.display());
    let differ: Vec<String> = fa.iter().zip(&fb).filter(|(x, y)| x.1 != y.1).map(|(x, _)| x.0.display().to_string()).collect();
    assert!(differ.is_empty(), "{} files differ between {} and {}: {:?}", differ.len(), a.display(), b.display(), &differ[..differ.len().min(10)]);
    assert!(!fa.is_empty(), "{} is empty", a.display());
}
