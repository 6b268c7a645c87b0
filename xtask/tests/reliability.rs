//! kiln under interruption and hostile conditions, with the real compilers on
//! a small selection (one module, one AMD and one NVIDIA target) so it fits CI:
//! `kill -9` during compiling and packaging, an abort at the final swap,
//! three dists at once on one cache, a full disk as `--out` and as the cache,
//! a read-only cache. Each time: the rerun reproduces artifacts.lock, and
//! nothing half-written is left where it could be taken for whole.
//!
//! Each test gets its own cache whose `toolchains/` and `sources/` link to the
//! real cache's (provisioned by `cargo xtask test` before the tests run).

use std::{
    fs,
    io::{BufRead, BufReader},
    path::Path,
    process::{Command, Output, Stdio},
    time::Duration,
};

mod common;

use common::{cache_at, leftovers, real_cache, scratch, text, warm_cache_at, xtask};

const SELECTION: &[&str] = &["--module", "affine", "--arch", "sm_90", "--arch", "gfx90a", "--no-package"];

fn dist(cache: &Path, out: &Path, extra: &[&str]) -> Output {
    xtask(cache).arg("dist").args(SELECTION).arg("--out").arg(out).args(extra).output().unwrap()
}

/// Starts a dist and kills it with SIGKILL once its stderr shows `marker`, plus `after`.
fn kill_when(mut cmd: Command, marker: &str, after: Duration) -> String {
    let mut child = cmd.stderr(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
    let err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    for line in err.lines().map_while(Result::ok) {
        seen.push_str(&line);
        seen.push('\n');
        if line.contains(marker) {
            std::thread::sleep(after);
            break;
        }
    }
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(!status.success(), "the dist finished before it could be killed:\n{seen}");
    seen
}

/// A compile long enough to be caught mid-way (binary.cu for sm_90: about 15 s on 2 cores).
const SLOW: &[&str] = &["--module", "binary", "--arch", "sm_90", "--no-package"];

#[test]
fn killed_while_compiling_then_rerun_reproduces_the_lock() {
    let s = scratch("compile");
    let cache = cache_at(&s.0.join("cache"));
    let out = s.0.join("dist");
    let mut cmd = xtask(&cache);
    cmd.arg("dist").args(SLOW).arg("--out").arg(&out);
    let seen = kill_when(cmd, "building", Duration::from_secs(2));
    assert!(!out.exists(), "a killed first dist published something:\n{seen}");
    let stale = fs::read_dir(cache.join("tmp")).map(|d| d.flatten().count()).unwrap_or(0);
    assert!(stale > 0, "the compile was killed mid-way, so its scratch folder is still there");
    let o = xtask(&cache).arg("dist").args(SLOW).arg("--locked").arg("--out").arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("scratch folder(s) of interrupted runs"), "{}", text(&o));
    assert_eq!(fs::read_dir(cache.join("tmp")).map(|d| d.flatten().count()).unwrap_or(0), 0, "stale scratch left");
    assert!(leftovers(&out).is_empty(), "{:?}", leftovers(&out));
}

/// Removes the store entries of the graph's in-process steps (bundles,
/// payloads, slices): what a dist does besides compiling.
fn remove_steps(objects: &Path) {
    for shard in fs::read_dir(objects).unwrap().flatten() {
        for entry in fs::read_dir(shard.path()).into_iter().flatten().flatten() {
            let recipe = fs::read_to_string(entry.path().join("recipe.txt")).unwrap_or_default();
            if recipe.lines().any(|l| l.starts_with("step ")) {
                fs::remove_dir_all(entry.path()).unwrap();
            }
        }
    }
}

#[test]
fn killed_while_packaging_then_rerun_packages_the_same_crates() {
    let real_crates = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/dist/crates/crates.json"))
        .expect("target/dist/crates/crates.json: run `cargo xtask dist` first");
    let s = scratch("package");
    // Every compiled entry of the real cache (hard links: nothing is copied or changed), but no packaging.
    let cache = warm_cache_at(&s.0.join("cache"));
    remove_steps(&cache.join("objects"));
    let out = s.0.join("dist");
    let mut cmd = xtask(&cache);
    cmd.arg("dist").arg("--out").arg(&out);
    // Killed while the graph compresses the crates' payloads.
    kill_when(cmd, "built  zstd", Duration::from_secs(2));
    assert!(!out.exists());
    let o = xtask(&cache).arg("dist").arg("--locked").arg("--out").arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(fs::read_to_string(out.join("crates/crates.json")).unwrap(), real_crates, "repackaging after a kill gave other crates");
    assert!(leftovers(&out).is_empty(), "{:?}", leftovers(&out));
}

#[test]
fn an_abort_at_the_final_swap_leaves_a_whole_dist_and_the_next_run_cleans_up() {
    let s = scratch("swap");
    let cache = cache_at(&s.0.join("cache"));
    let out = s.0.join("dist");
    assert!(dist(&cache, &out, &[]).status.success());
    let manifest = fs::read_to_string(out.join("manifest.json")).unwrap();
    for point in ["staged", "before-swap", "after-swap"] {
        let o = xtask(&cache).env("KILN_FAILPOINT", point).arg("dist").args(SELECTION).arg("--out").arg(&out).output().unwrap();
        assert!(!o.status.success() && text(&o).contains(point), "{point}: {}", text(&o));
        // Whatever the moment, `out` is one whole dist folder.
        assert_eq!(fs::read_to_string(out.join("manifest.json")).unwrap(), manifest, "{point}");
        let v = xtask(&cache).arg("verify").arg("--dist").arg(&out).output().unwrap();
        assert!(text(&v).contains("artifacts match the manifest"), "{point}: {}", text(&v));
        assert!(!leftovers(&out).is_empty(), "{point}: an abort this late leaves its staging folder");
        let o = dist(&cache, &out, &["--locked"]);
        assert!(o.status.success() && text(&o).contains("half-published"), "{point}: {}", text(&o));
        assert!(leftovers(&out).is_empty(), "{point}: {:?}", leftovers(&out));
    }
}

#[test]
fn three_dists_at_once_on_one_cache_all_match_the_lock() {
    let s = scratch("concurrent");
    let cache = cache_at(&s.0.join("cache"));
    let children: Vec<_> = (0..3)
        .map(|i| xtask(&cache).arg("dist").args(SELECTION).arg("--locked").arg("--out").arg(s.0.join(format!("dist{i}"))).output())
        .collect::<Vec<_>>();
    for (i, o) in children.into_iter().enumerate() {
        let o = o.unwrap();
        assert!(o.status.success(), "dist {i}: {}", text(&o));
    }
    let m: Vec<String> = (0..3).map(|i| fs::read_to_string(s.0.join(format!("dist{i}/manifest.json"))).unwrap()).collect();
    assert!(m[0] == m[1] && m[1] == m[2]);
}

/// Runs `cmd` in a mount namespace where `small` is a tmpfs of `bytes` and `ro` is read-only.
fn sandboxed(cache: &Path, small: Option<(&Path, u64)>, ro: Option<&Path>, args: &[&str], out: &Path) -> Output {
    let mut c = Command::new("bwrap");
    c.args(["--dev-bind", "/", "/"]);
    if let Some((dir, bytes)) = small {
        c.arg("--size").arg(bytes.to_string()).arg("--tmpfs").arg(dir);
    }
    if let Some(dir) = ro {
        c.arg("--ro-bind").arg(dir).arg(dir);
    }
    c.arg("--").arg(env!("CARGO_BIN_EXE_xtask")).arg("dist").args(SELECTION).args(args).arg("--out").arg(out);
    c.env("KILN_CACHE_DIR", cache).env_remove("KILN_FAILPOINT");
    c.output().unwrap()
}

#[test]
fn a_full_disk_fails_clearly_and_leaves_nothing_half_written() {
    let s = scratch("full");
    let cache = cache_at(&s.0.join("cache"));
    // Built once, so the full --out is the only problem.
    assert!(dist(&cache, &s.0.join("warm"), &[]).status.success());
    let small = s.0.join("small");
    fs::create_dir_all(&small).unwrap();
    let o = sandboxed(&cache, Some((&small, 64 * 1024)), None, &[], &small.join("dist"));
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("No space left on device") || text(&o).contains("cannot copy"), "{}", text(&o));

    // A full cache: the compile cannot store its output; the error says so and no entry appears.
    let tiny = s.0.join("tiny-cache");
    fs::create_dir_all(&tiny).unwrap();
    let o = {
        let mut c = Command::new("bwrap");
        c.args(["--dev-bind", "/", "/", "--size", "16384", "--tmpfs"]).arg(&tiny);
        for area in ["toolchains", "sources"] {
            c.arg("--symlink").arg(real_cache().join(area)).arg(tiny.join(area));
        }
        c.arg("--").arg(env!("CARGO_BIN_EXE_xtask")).arg("dist").args(SELECTION).arg("--out").arg(s.0.join("out2"));
        c.env("KILN_CACHE_DIR", &tiny).output().unwrap()
    };
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("failed") && !s.0.join("out2").exists(), "{}", text(&o));
}

#[test]
fn a_read_only_cache_serves_what_it_has_and_says_what_it_cannot_store() {
    let s = scratch("readonly");
    let cache = cache_at(&s.0.join("cache"));
    assert!(dist(&cache, &s.0.join("warm"), &[]).status.success());
    let o = sandboxed(&cache, None, Some(&cache), &["--locked"], &s.0.join("dist"));
    assert!(o.status.success(), "everything cached: a read-only cache is enough:\n{}", text(&o));
    // Something not cached yet: the job cannot store its output, and the error names the cache.
    let o = {
        let mut c = Command::new("bwrap");
        c.args(["--dev-bind", "/", "/", "--ro-bind"]).arg(&cache).arg(&cache);
        c.arg("--")
            .arg(env!("CARGO_BIN_EXE_xtask"))
            .args(["dist", "--module", "fill", "--arch", "sm_90", "--no-package", "--out"])
            .arg(s.0.join("d2"));
        c.env("KILN_CACHE_DIR", &cache).output().unwrap()
    };
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains(&cache.display().to_string()) && text(&o).contains("Read-only"), "{}", text(&o));
}
