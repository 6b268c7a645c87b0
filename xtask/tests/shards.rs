//! `dist --shard K/N` and `dist merge`: parts built on separate caches (as on
//! separate machines), merged on a third, give the dist folder a single
//! machine writes, byte for byte; parts that do not make one plan, exactly
//! once, are refused with every problem named and nothing written.
//!
//! The small plan compiles for real on empty caches; the full plan takes its
//! shards' objects from the real cache (`cargo xtask test` filled it) and
//! merges on an empty one, so everything after compiling (the static
//! library's archive, the HIP bundles, the crates) happens in the merge.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Output,
};

mod common;

use common::{assert_same_tree, cache_at, leftovers, real_cache, scratch, text, warm_cache_at, xtask};

/// Two modules for every pinned AMD arch (so that both get HIP bundles), one sm and the PTX floor.
fn small() -> Vec<String> {
    let pins = kiln_pins::Pins::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../pins.toml")).unwrap();
    let mut v: Vec<String> = ["--module", "affine", "--module", "fill", "--arch", "sm_90", "--no-package"].iter().map(|s| s.to_string()).collect();
    v.extend(["--arch".to_string(), pins.targets.cuda_ptx[0].ptx()]);
    for a in &pins.targets.hip {
        v.extend(["--arch".to_string(), a.to_string()]);
    }
    v
}

fn shard<S: AsRef<std::ffi::OsStr>>(cache: &Path, sel: &[S], spec: &str, out: &Path) -> Output {
    xtask(cache).arg("dist").args(sel).args(["--shard", spec]).arg("--out").arg(out).output().unwrap()
}

fn merge(cache: &Path, parts: &[&Path], out: &Path, extra: &[&str]) -> Output {
    xtask(cache).args(["dist", "merge"]).args(parts).arg("--out").arg(out).args(extra).output().unwrap()
}

fn part_json(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&fs::read_to_string(dir.join("part.json")).unwrap()).unwrap()
}

fn jobs_of(dir: &Path) -> Vec<String> {
    part_json(dir)["jobs"].as_array().unwrap().iter().map(|j| j["job"].as_str().unwrap().to_string()).collect()
}

#[test]
fn parts_built_on_empty_caches_merge_into_the_single_machine_dist_byte_for_byte() {
    let s = scratch("shards-small");
    let p1 = s.0.join("part1");
    let p2 = s.0.join("part2");
    for (spec, part, cache) in [("1/2", &p1, "cache1"), ("2/2", &p2, "cache2")] {
        let o = shard(&cache_at(&s.0.join(cache)), &small(), spec, part);
        assert!(o.status.success(), "shard {spec}: {}", text(&o));
        assert!(text(&o).contains(" built"), "an empty cache compiles: {}", text(&o));
    }
    // Each job in exactly one part, and together every job of the plan (2 modules x the targets).
    let (j1, j2) = (jobs_of(&p1), jobs_of(&p2));
    assert!(!j1.is_empty() && !j2.is_empty(), "{j1:?} {j2:?}");
    assert!(j1.iter().all(|j| !j2.contains(j)), "{j1:?} {j2:?}");
    assert_eq!(j1.len() + j2.len(), 2 * (small().iter().filter(|a| *a == "--arch").count()));
    assert_eq!(part_json(&p1)["plan"], part_json(&p2)["plan"]);
    assert_eq!(part_json(&p2)["shard"]["k"], 2);

    // The merge machine has compiled nothing: every object comes from the parts.
    let merged = s.0.join("merged");
    let o = merge(&cache_at(&s.0.join("cache3")), &[&p1, &p2], &merged, &["--no-package", "--locked"]);
    assert!(o.status.success(), "{}", text(&o));
    // Only the HIP bundles are made here; no compile line (`built  hip …`, `built  cuda …`).
    assert!(
        !text(&o).lines().any(|l| l.contains("] built  cuda ") || (l.contains("] built  hip ") && !l.contains("] built  hip bundle "))),
        "{}",
        text(&o)
    );
    // The single-machine dist of the same commit, from the real cache.
    let single = s.0.join("single");
    let o = xtask(&real_cache()).arg("dist").args(small()).arg("--locked").arg("--out").arg(&single).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_same_tree(&merged, &single);
    let manifest = fs::read_to_string(merged.join("manifest.json")).unwrap();
    assert!(manifest.contains("hip/bundle/affine.hipfb") && manifest.contains("hip/bundle/fill.hipfb"), "{manifest}");
}

#[test]
fn the_whole_plan_merged_from_three_parts_is_target_dist_byte_for_byte() {
    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/dist");
    assert!(dist.join("crates/crates.json").is_file(), "{} has no crates: run `cargo xtask dist` first", dist.display());
    let s = scratch("shards-full");
    let parts: Vec<PathBuf> = (1..=3).map(|k| s.0.join(format!("part{k}"))).collect();
    for (k, part) in parts.iter().enumerate() {
        let cache = warm_cache_at(&s.0.join(format!("cache{k}")));
        let o = shard::<&str>(&cache, &[], &format!("{}/3", k + 1), part);
        assert!(o.status.success(), "shard {}/3: {}", k + 1, text(&o));
    }
    let all: Vec<String> = parts.iter().flat_map(|p| jobs_of(p)).collect();
    let mut unique = all.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), all.len(), "a job in two parts");
    assert_eq!(all.len() as u64, part_json(&parts[0])["plan"]["jobs"].as_u64().unwrap(), "every job in some part");
    assert!(all.iter().any(|j| j.starts_with("object ")), "the static library's objects are jobs of the shards");

    // Merged on an empty cache: archive, bundles, manifest and crates are made here.
    let merged = s.0.join("merged");
    let refs: Vec<&Path> = parts.iter().map(PathBuf::as_path).collect();
    let o = merge(&cache_at(&s.0.join("merge-cache")), &refs, &merged, &["--locked"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("read back:"), "--locked reads the result back: {}", text(&o));
    assert_same_tree(&merged, &dist);
}

/// Small parts from the real cache (whatever is missing compiles into it once).
fn small_parts(root: &Path) -> (PathBuf, PathBuf) {
    let sel = ["--module", "affine", "--arch", "gfx90a", "--arch", "sm_90", "--no-package"];
    let (p1, p2) = (root.join("p1"), root.join("p2"));
    for (spec, p) in [("1/2", &p1), ("2/2", &p2)] {
        let o = shard(&real_cache(), &sel, spec, p);
        assert!(o.status.success(), "{}", text(&o));
    }
    (p1, p2)
}

/// A merge that must fail: its message contains every `needle`, and nothing was written.
fn refused(root: &Path, parts: &[&Path], needles: &[&str]) {
    let out = root.join("merged");
    let o = merge(&cache_at(&root.join(format!("cache-{}", fastrand()))), parts, &out, &["--no-package"]);
    let t = text(&o);
    assert!(!o.status.success(), "merged what it should refuse:\n{t}");
    for n in needles {
        assert!(t.contains(n), "no `{n}` in:\n{t}");
    }
    assert!(!out.exists() && leftovers(&out).is_empty(), "a refused merge wrote something");
}

fn fastrand() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
}

#[test]
fn merge_refuses_parts_that_do_not_make_one_plan_and_names_each_problem() {
    let s = scratch("shards-bad");
    let (p1, p2) = small_parts(&s.0);

    // Not a part at all; a shard missing; a shard given twice.
    let empty = s.0.join("empty");
    fs::create_dir_all(&empty).unwrap();
    refused(&s.0, &[&p1, &empty], &["is not a dist part", "no part.json"]);
    refused(&s.0, &[&p1], &["shard 2/2 was not given"]);
    let copy = s.0.join("p1-copy");
    assert!(std::process::Command::new("cp").arg("-a").arg(&p1).arg(&copy).status().unwrap().success());
    refused(&s.0, &[&p1, &copy, &p2], &["shard 1/2 is given twice"]);

    // Parts of two different pins (the same commit, one shard given another target list).
    let pins = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../pins.toml")).unwrap();
    let other = s.0.join("other-pins.toml");
    // sm_86 leaves [targets] (it has no GPU leg and the static library's sms are pinned apart).
    let narrowed: String =
        pins.lines().map(|l| if l.starts_with("cuda_sass = [") { l.replace("\"sm_86\", ", "") } else { l.to_string() } + "\n").collect();
    assert_ne!(pins, narrowed, "pins.toml's cuda_sass line no longer names sm_86: update this test");
    fs::write(&other, narrowed).unwrap();
    let foreign = s.0.join("p2-other-pins");
    let o = xtask(&real_cache())
        .arg("--pins")
        .arg(&other)
        .args(["dist", "--module", "affine", "--arch", "gfx90a", "--arch", "sm_90", "--no-package", "--shard", "2/2", "--out"])
        .arg(&foreign)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    refused(&s.0, &[&p1, &foreign], &["is a part of another plan", "targets"]);

    // A part missing an artifact.
    let holed = s.0.join("p2-holed");
    assert!(std::process::Command::new("cp").arg("-a").arg(&p2).arg(&holed).status().unwrap().success());
    let job = &part_json(&holed)["jobs"][0];
    let label = job["job"].as_str().unwrap().to_string();
    fs::remove_file(holed.join(job["file"].as_str().unwrap())).unwrap();
    refused(&s.0, &[&p1, &holed], &["is missing: the part is incomplete", &label]);

    // Damaged on the way: bytes that are not what part.json says.
    let damaged = s.0.join("p2-damaged");
    assert!(std::process::Command::new("cp").arg("-a").arg(&p2).arg(&damaged).status().unwrap().success());
    let file = damaged.join(part_json(&damaged)["jobs"][0]["file"].as_str().unwrap());
    let mut bytes = fs::read(&file).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    fs::write(&file, &bytes).unwrap();
    refused(&s.0, &[&p1, &damaged], &["but part.json says"]);

    // An artifact whose bytes and part.json agree but that is not what artifacts.lock says.
    let mut doc = part_json(&damaged);
    doc["jobs"][0]["sha256"] = serde_json::Value::String(kiln_manifest::sha256_hex(&bytes));
    fs::write(damaged.join("part.json"), serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    refused(&s.0, &[&p1, &damaged], &["artifacts.lock says", &label]);

    // The good parts merge.
    let out = s.0.join("good");
    let o = merge(&cache_at(&s.0.join("cache-good")), &[&p2, &p1], &out, &["--no-package", "--locked"]);
    assert!(o.status.success(), "{}", text(&o));
}

/// pins.toml with kiln's example folder as an opt-in second set: two modules for gfx90a,
/// compute_80 and sm_90 and a two-object static library (seconds of compiling).
fn pins_with_example(dir: &Path) -> PathBuf {
    pins_with_example_library(dir, "sass = [\"sm_90\"]")
}

/// [`pins_with_example`] with `lib` the static library's targets (and how it carries them).
fn pins_with_example_library(dir: &Path, lib: &str) -> PathBuf {
    let real = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../pins.toml")).unwrap();
    let at = real.find("\n[targets]").expect("pins.toml has [targets]");
    let example = r#"
[sets.example]
default = false
source = { path = "kernels/example" }
modules = ["scale", "block_sum"]

[sets.example.staticlib]
name = "exampleops"
sources = ["lib/axpy_api.cu", "lib/axpy_kernel.cu"]
LIB
ffi = "ffi.rs"

[sets.example.targets]
hip = ["gfx90a"]
cuda_ptx = ["compute_80"]
cuda_sass = ["sm_90"]
"#;
    let path = dir.join("pins-with-example.toml");
    fs::write(&path, format!("{}\n{}{}", &real[..at], example.replace("LIB", lib), &real[at..])).unwrap();
    path
}

#[test]
fn a_set_other_than_the_main_one_is_sharded_and_merged_into_its_own_folder() {
    let s = scratch("shards-set");
    let pins = pins_with_example(&s.0);
    let with_pins = |cache: &Path| {
        let mut c = xtask(cache);
        c.arg("--pins").arg(&pins);
        c
    };
    let (p1, p2) = (s.0.join("p1"), s.0.join("p2"));
    for (spec, part, cache) in [("1/2", &p1, "cache1"), ("2/2", &p2, "cache2")] {
        let o = with_pins(&cache_at(&s.0.join(cache))).args(["dist", "--set", "example", "--shard", spec, "--out"]).arg(part).output().unwrap();
        assert!(o.status.success(), "shard {spec}: {}", text(&o));
    }
    let plan = &part_json(&p1)["plan"];
    assert_eq!(plan["set"], "example", "{plan}");
    assert!(plan["source"].as_str().unwrap().starts_with("kernels/example "), "{plan}");
    // 2 modules x 3 targets and the library's 2 objects, each in one part.
    let (j1, j2) = (jobs_of(&p1), jobs_of(&p2));
    assert!(j1.iter().all(|j| !j2.contains(j)), "{j1:?} {j2:?}");
    assert_eq!(j1.len() + j2.len(), 8, "{j1:?} {j2:?}");
    assert!(j1.iter().chain(&j2).filter(|j| j.starts_with("object ")).count() == 2, "{j1:?} {j2:?}");

    // Merged on a third cache into the set's own folder (<out>-example); the main set's is not touched.
    let merged = s.0.join("merged");
    let o = with_pins(&cache_at(&s.0.join("cache3"))).args(["dist", "merge"]).arg(&p1).arg(&p2).arg("--out").arg(&merged).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(!merged.exists(), "the main set's folder was written by a merge of another set's parts");
    // One machine, its own empty cache: the same folder, byte for byte.
    let single = s.0.join("single");
    let o = with_pins(&cache_at(&s.0.join("cache4"))).args(["dist", "--set", "example", "--out"]).arg(&single).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_same_tree(&s.0.join("merged-example"), &s.0.join("single-example"));
    let manifest = fs::read_to_string(s.0.join("merged-example/manifest.json")).unwrap();
    assert!(manifest.contains("\"set\": \"example\"") && manifest.contains("cuda/lib/libexampleops.a"), "{manifest}");

    // A part of this set and one of the main set are not one plan; two sets at once are not one shard.
    let (_, main_p2) = small_parts(&s.0.join("main"));
    refused(&s.0, &[&p1, &main_p2], &["is a part of another plan", "set example vs the main set"]);
    let o = with_pins(&s.0.join("unused-cache"))
        .args(["dist", "--set", "example", "--set", "candle", "--shard", "1/2", "--out"])
        .arg(s.0.join("p"))
        .output()
        .unwrap();
    assert!(!o.status.success() && text(&o).contains("give at most one --set"), "{}", text(&o));
}

/// A per-target library whose sm_90 and sm_100 cubins are assembled from
/// one compute_90 PTX per file: each PTX and the cubins that read it are
/// one unit, in one part, run there as a graph; the merge is the
/// single-machine dist byte for byte.
#[test]
fn a_library_ptx_and_the_cubins_that_read_it_are_one_shards_and_merge_as_one_machine() {
    let s = scratch("shards-lib-ptx");
    let lib = "kernels = \"per-target\"\nsass = [\"sm_90\", \"sm_100\"]\nptx = [\"compute_90\"]";
    let pins = pins_with_example_library(&s.0, lib);
    let with_pins = |cache: &Path| {
        // The pinned newer ptxas (sm_100), unpacked in the real cache, shared like the toolchain.
        for area in ["wheels", "tools"] {
            std::os::unix::fs::symlink(real_cache().join(area), cache.join(area)).unwrap();
        }
        let mut c = xtask(cache);
        c.arg("--pins").arg(&pins);
        c
    };
    let parts: Vec<PathBuf> = (1..=3).map(|k| s.0.join(format!("p{k}"))).collect();
    for (k, part) in parts.iter().enumerate() {
        let spec = format!("{}/3", k + 1);
        let o = with_pins(&cache_at(&s.0.join(format!("cache{k}"))))
            .args(["dist", "--set", "example", "--no-package", "--shard", &spec, "--out"])
            .arg(part)
            .output()
            .unwrap();
        assert!(o.status.success(), "shard {spec}: {}", text(&o));
    }
    let jobs: Vec<Vec<String>> = parts.iter().map(|p| jobs_of(p)).collect();
    let part_of = |job: &str| jobs.iter().position(|j| j.iter().any(|x| x == job)).unwrap_or_else(|| panic!("{job} in no part: {jobs:?}"));
    for file in ["axpy_api", "axpy_kernel"] {
        let ptx = format!("lib-ptx compute_90 exampleops/{file}");
        for sm in ["sm_90", "sm_100"] {
            assert_eq!(part_of(&format!("cubin {sm} exampleops/{file}")), part_of(&ptx), "{file}, {sm}: {jobs:?}");
        }
        // The PTX is part of the part (the merge puts it into the cache), but no artifact of it.
        let p = &part_json(&parts[part_of(&ptx)]);
        let record = p["jobs"].as_array().unwrap().iter().find(|j| j["job"] == ptx.as_str()).unwrap();
        assert!(record["dist_path"].is_null(), "{record}");
    }
    assert_eq!(jobs.iter().map(Vec::len).sum::<usize>(), 2 * 3 + 2 + 2 + 4, "{jobs:?}");

    let merged = s.0.join("merged");
    let refs: Vec<&PathBuf> = parts.iter().collect();
    let o = with_pins(&cache_at(&s.0.join("cache-merge")))
        .args(["dist", "merge", "--no-package"])
        .args(&refs)
        .arg("--out")
        .arg(&merged)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let single = s.0.join("single");
    let o =
        with_pins(&cache_at(&s.0.join("cache-single"))).args(["dist", "--set", "example", "--no-package", "--out"]).arg(&single).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("2 static-library PTX"), "{}", text(&o));
    assert_same_tree(&s.0.join("merged-example"), &s.0.join("single-example"));
}

#[test]
fn bad_shard_specs_are_refused_before_anything_runs() {
    let s = scratch("shards-spec");
    let cache = s.0.join("cache");
    for (spec, why) in [("0/4", "counted from 1"), ("5/4", "only 4 shards"), ("a/b", "whole numbers"), ("4", "not K/N")] {
        let o = xtask(&cache).args(["dist", "--shard", spec, "--out"]).arg(s.0.join("p")).output().unwrap();
        assert!(!o.status.success() && text(&o).contains(why), "{spec}: {}", text(&o));
    }
    assert!(!cache.exists(), "a bad spec must fail before the cache is touched");
    let o = xtask(&cache).args(["dist", "merge"]).output().unwrap();
    assert!(!o.status.success() && text(&o).contains("<DIR>"), "{}", text(&o));
}

#[test]
fn a_full_disk_while_writing_a_part_leaves_no_part() {
    let s = scratch("shards-full-disk");
    let small = s.0.join("small");
    fs::create_dir_all(&small).unwrap();
    let out = small.join("part");
    // The listing runs inside the sandbox, where the small file system is.
    let script = "\"$0\" \"$@\"; rc=$?; echo; echo \"left: [$(ls -A \"$KILN_TEST_SMALL\")]\"; exit $rc";
    let o = std::process::Command::new("bwrap")
        .args(["--dev-bind", "/", "/", "--size", "65536", "--tmpfs"])
        .arg(&small)
        .args(["--", "sh", "-c", script])
        .arg(env!("CARGO_BIN_EXE_xtask"))
        .args(["dist", "--module", "quantized", "--arch", "gfx90a", "--no-package", "--shard", "1/1", "--out"])
        .arg(&out)
        .env("KILN_CACHE_DIR", real_cache())
        .env("KILN_TEST_SMALL", &small)
        .output()
        .unwrap();
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("No space left on device"), "{t}");
    assert!(t.contains("left: []"), "a half-written part (or its staging folder) was left behind: {t}");
}
