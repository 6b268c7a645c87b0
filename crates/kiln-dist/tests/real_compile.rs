//! The compile path with the real pinned compilers (no mocks): kiln's probe
//! kernels (kernels/probe/) built for an AMD arch, PTX and SASS, validated
//! structurally, rebuilt from other directories bit for bit, and cached by
//! content. The toolchain is provisioned on first use (about 1.2 GB).

use std::{fs, path::Path};

use kiln_build::{cuda, hip, run_all, Job, Plan};
use kiln_pins::{HipArch, Pins, Sm, Target};
use kiln_toolchain::{Cache, Runner};

mod common;
use common::{repo, temp, toolchain};
use kiln_validate::{cubin, hsaco, ptx};

fn copy_tree(from: &Path, to: &Path) {
    kiln_fs::copy_tree(from, to).unwrap();
}

/// The probe's jobs: HSACO for gfx90a (wave64) and gfx1100, PTX at the floor, SASS for sm_90.
fn probe_jobs(pins: &Pins, plan: &Plan) -> Vec<Job> {
    let file = plan.file("probe.cu", "the probe").unwrap();
    vec![
        hip::job(plan, pins, "probe", &file, &HipArch::parse("gfx90a").unwrap()).unwrap(),
        hip::job(plan, pins, "probe", &file, &HipArch::parse("gfx1100").unwrap()).unwrap(),
        cuda::ptx_job(plan, "probe", &file, pins.targets.cuda_ptx[0]).unwrap(),
        cuda::cubin_job(plan, "probe", &file, Sm(90)).unwrap(),
    ]
}

/// Builds the probe from `src` (a copy of kernels/probe) and `shims` into `cache`.
fn build(runner: &Runner, pins: &Pins, src: &Path, shims: &Path, cache: &Cache) -> Vec<(Job, kiln_build::Built)> {
    let plan = Plan::new(pins.main_set(), src.to_path_buf(), shims.to_path_buf());
    let jobs = probe_jobs(pins, &plan);
    let results = run_all(runner, cache, &jobs, &kiln_build::Options { workers: 2, ..Default::default() }, &|l| eprintln!("{l}"));
    let out: Vec<_> = jobs.into_iter().zip(results).map(|(j, r)| (j, r.unwrap_or_else(|f| panic!("{f}")))).collect();
    out
}

const PROBE_KERNELS: [&str; 3] = ["probe_gather_checked", "probe_saxpy_f32", "probe_warp_sum_f16"];

#[test]
fn the_probe_compiles_for_every_kind_of_target_and_reads_back() {
    let (pins, runner) = toolchain();
    let dir = temp("rc-kinds");
    let cache = Cache::at(dir.join("cache")).unwrap();
    let built = build(&runner, &pins, &repo().join("kernels/probe"), &repo().join("kernels/hip"), &cache);
    for (job, b) in &built {
        let bytes = fs::read(&b.path).unwrap();
        let kernels = match job.target().unwrap() {
            Target::Hip(arch) => {
                let h = hsaco::check(&bytes, arch.as_str(), arch.mach(), pins.targets.code_object_version_for(arch)).unwrap();
                let wave = if arch.wave64() { 64 } else { 32 };
                assert!(h.kernels.iter().all(|k| k.wavefront_size == wave), "{arch}: {:?}", h.kernels);
                h.kernel_names()
            }
            Target::Ptx(level) => {
                let p = ptx::check(std::str::from_utf8(&bytes).unwrap(), level.0).unwrap();
                assert!(!p.version.is_empty());
                p.entries
            }
            Target::Sass(sm) => cubin::check(&bytes, sm.0).unwrap().kernels,
        };
        assert_eq!(kernels, PROBE_KERNELS, "{job}");
    }
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn builds_from_two_directories_and_caches_are_bit_identical() {
    let (pins, runner) = toolchain();
    let mut outputs = Vec::new();
    for side in ["a", "b"] {
        // Different absolute paths for sources, shims and cache: none may leak into the output.
        let tmp = temp(&format!("det-{side}"));
        let dir = tmp.join(format!("clone-{side}-deeper"));
        copy_tree(&repo().join("kernels/probe"), &dir.join("src"));
        copy_tree(&repo().join("kernels/hip"), &dir.join("shims"));
        let cache = Cache::at(dir.join("cache")).unwrap();
        let built = build(&runner, &pins, &dir.join("src"), &dir.join("shims"), &cache);
        assert!(built.iter().all(|(_, b)| !b.cached), "fresh caches build everything");
        outputs.push(built.iter().map(|(j, b)| (j.to_string(), fs::read(&b.path).unwrap())).collect::<Vec<_>>());
    }
    for ((job, a), (_, b)) in outputs[0].iter().zip(&outputs[1]) {
        assert!(a == b, "{job}: builds from two directories differ");
    }
}

#[test]
fn a_no_op_rebuild_is_cached_and_a_shim_change_rebuilds_only_hip() {
    let (pins, runner) = toolchain();
    let dir = temp("rc-cache");
    copy_tree(&repo().join("kernels/hip"), &dir.join("shims"));
    let cache = Cache::at(dir.join("cache")).unwrap();
    let src = repo().join("kernels/probe");
    let first = build(&runner, &pins, &src, &dir.join("shims"), &cache);
    let again = build(&runner, &pins, &src, &dir.join("shims"), &cache);
    assert!(again.iter().all(|(_, b)| b.cached), "an unchanged rebuild is all cache hits");
    for ((_, a), (_, b)) in first.iter().zip(&again) {
        assert_eq!(a.key, b.key);
    }

    let forced = dir.join("shims").join(&pins.flags.hip_force_include[0]);
    let text = fs::read_to_string(&forced).unwrap();
    fs::write(&forced, format!("{text}\n// touched by a test\n")).unwrap();
    let touched = build(&runner, &pins, &src, &dir.join("shims"), &cache);
    for (job, b) in &touched {
        let hip = job.arch.backend() == kiln_build::Backend::Hip;
        assert_eq!(b.cached, !hip, "{job}: only HIP jobs read the shims");
    }
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_compile_error_names_the_job_and_keeps_its_log() {
    let (pins, runner) = toolchain();
    let dir = temp("rc-error");
    fs::create_dir_all(dir.join("src")).unwrap();
    fs::write(dir.join("src/probe.cu"), "extern \"C\" __global__ void broken(float *x) { x[0] = undefined_name; }\n").unwrap();
    let cache = Cache::at(dir.join("cache")).unwrap();
    let plan = Plan::new(pins.main_set(), dir.join("src"), repo().join("kernels/hip"));
    let jobs = probe_jobs(&pins, &plan);
    let results = run_all(&runner, &cache, &jobs, &kiln_build::Options { workers: 2, ..Default::default() }, &|_| {});
    for (job, r) in jobs.iter().zip(results) {
        let f = r.expect_err("the broken kernel must fail");
        assert_eq!(f.job, job.to_string());
        let text = f.to_string();
        assert!(text.contains("undefined_name"), "{job}: the message quotes the compiler's error: {text}");
        assert!(f.log.is_file(), "{job}: the full log is kept at {}", f.log.display());
    }
    assert!(!cache.objects().exists() || fs::read_dir(cache.objects()).unwrap().count() == 0, "no cache entry for a failed job");
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn validation_refuses_artifacts_for_another_arch() {
    let (pins, runner) = toolchain();
    let dir = temp("rc-wrongarch");
    let cache = Cache::at(dir.join("cache")).unwrap();
    let built = build(&runner, &pins, &repo().join("kernels/probe"), &repo().join("kernels/hip"), &cache);
    let bytes = |arch: &str| fs::read(&built.iter().find(|(j, _)| j.arch.to_string() == arch).unwrap().1.path).unwrap();
    let gfx90a = HipArch::parse("gfx90a").unwrap();
    let e = hsaco::check(&bytes("gfx1100"), "gfx90a", gfx90a.mach(), pins.targets.code_object_version).unwrap_err();
    assert!(e.to_string().contains("0x41") && e.to_string().contains("gfx90a"), "{e}");
    let e = hsaco::check(&bytes("gfx90a"), "gfx90a", gfx90a.mach(), 4).unwrap_err();
    assert!(e.to_string().contains("code object v4"), "{e}");
    let e = cubin::check(&bytes("sm_90"), 80).unwrap_err();
    assert!(e.to_string().contains("sm_90"), "{e}");
    let floor = pins.targets.cuda_ptx[0];
    let e = ptx::check(std::str::from_utf8(&bytes(&floor.ptx())).unwrap(), 90).unwrap_err();
    assert!(e.to_string().contains(&floor.sass()), "{e}");
    assert!(hsaco::read(&bytes("sm_90")).is_err(), "a cubin is not an HSACO");
    assert!(cubin::read(b"\x7fELF garbage").is_err());
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_damaged_cache_entry_is_moved_aside_and_rebuilt_never_used() {
    let (pins, runner) = toolchain();
    let dir = temp("rc-damaged");
    let cache = Cache::at(dir.join("cache")).unwrap();
    let src = repo().join("kernels/probe");
    let first = build(&runner, &pins, &src, &repo().join("kernels/hip"), &cache);
    let good: Vec<Vec<u8>> = first.iter().map(|(_, b)| fs::read(&b.path).unwrap()).collect();
    // One byte flipped in the middle of a cached cubin, as a bad disk or a stray write would.
    let (victim_job, victim) = first.iter().find(|(j, _)| j.target() == Some(&Target::Sass(Sm(90)))).unwrap();
    let mut bytes = fs::read(&victim.path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x5a;
    fs::write(&victim.path, &bytes).unwrap();

    let said = std::sync::Mutex::new(Vec::new());
    let plan = Plan::new(pins.main_set(), src.clone(), repo().join("kernels/hip"));
    let jobs = probe_jobs(&pins, &plan);
    let results = run_all(&runner, &cache, &jobs, &kiln_build::Options { workers: 2, ..Default::default() }, &|l| said.lock().unwrap().push(l));
    let again: Vec<_> = results.into_iter().map(|r| r.unwrap()).collect();
    for ((job, b), want) in jobs.iter().zip(&again).zip(&good) {
        assert!(&fs::read(&b.path).unwrap() == want, "{job}: the rebuilt output differs from the first build");
        assert_eq!(b.cached, job.to_string() != victim_job.to_string(), "{job}: only the damaged entry is rebuilt");
    }
    let said = said.into_inner().unwrap();
    let warning = said.iter().find(|l| l.starts_with("warning:")).expect("a warning names the damaged entry");
    assert!(warning.contains(&victim.key) && warning.contains("damaged") && warning.contains("sha256"), "{warning}");
    let aside: Vec<_> = fs::read_dir(cache.root().join("damaged")).unwrap().flatten().collect();
    assert_eq!(aside.len(), 1, "the damaged entry is kept aside, not deleted");
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn cache_verify_finds_damage_and_gc_keeps_only_what_a_recorded_plan_uses() {
    use kiln_dist::cache_admin::{self, PlanRecord};
    let (pins, runner) = toolchain();
    let dir = temp("rc-gc");
    let cache = Cache::at(dir.join("cache")).unwrap();
    let built = build(&runner, &pins, &repo().join("kernels/probe"), &repo().join("kernels/hip"), &cache);
    let cache_admin::Verified { checked, damaged, .. } = cache_admin::verify(&cache, false).unwrap();
    assert_eq!((checked, damaged.len()), (built.len(), 0));

    // One flipped byte: listed, naming the entry; --repair removes it.
    let victim = &built[0].1;
    let mut bytes = fs::read(&victim.path).unwrap();
    bytes[10] ^= 1;
    fs::write(&victim.path, &bytes).unwrap();
    let damaged = cache_admin::verify(&cache, false).unwrap().damaged;
    assert_eq!(damaged.len(), 1);
    assert!(damaged[0].why.contains(&victim.key) && damaged[0].why.contains("sha256"), "{}", damaged[0].why);
    cache_admin::verify(&cache, true).unwrap();
    assert!(!victim.path.exists() && cache_admin::verify(&cache, false).unwrap().damaged.is_empty());

    // gc refuses to guess without a record, but still clears leftovers of dead runs (what kiln named only).
    fs::create_dir_all(cache.tmp().join("job.0.1")).unwrap();
    fs::write(cache.tmp().join("job.0.1.lock"), "").unwrap();
    // A store entry kiln moved aside (`<key>.<pid>.<n>`), and a name kiln never gives there.
    let aside = format!("damaged/{}.0.1", "ab".repeat(32));
    fs::create_dir_all(cache.root().join(&aside)).unwrap();
    fs::create_dir_all(cache.root().join("damaged/notes")).unwrap();
    assert!(format!("{:#}", cache_admin::gc(&cache).unwrap_err()).contains("run a full `cargo xtask dist` first"));
    assert!(!cache.tmp().join("job.0.1").exists(), "a dead run's scratch folder is removed");
    assert!(!cache.root().join(&aside).exists(), "what kiln moved aside is removed");
    assert!(cache.root().join("damaged/notes").exists());

    // With a record keeping one entry, the others go, and only they.
    let (kept, gone) = (&built[1].1, &built[2].1);
    let rec = PlanRecord { checkout: repo(), keys: vec![kept.key.clone()], ..Default::default() };
    cache_admin::record(&cache, &rec, "").unwrap();
    let freed = cache_admin::gc(&cache).unwrap();
    assert!(kept.path.exists() && !gone.path.exists(), "{:?}", freed.items);
    assert!(freed.bytes() > 0 && freed.items.iter().any(|(what, _)| what.contains(&gone.key)));
    // A record whose checkout is gone no longer keeps anything.
    let stale = PlanRecord { checkout: dir.join("deleted-checkout"), keys: vec![kept.key.clone()], ..Default::default() };
    cache_admin::record(&cache, &stale, "").unwrap();
    let freed = cache_admin::gc(&cache).unwrap();
    assert!(freed.items.iter().any(|(what, _)| what.contains("checkout gone")), "{:?}", freed.items);
    assert!(kept.path.exists(), "the live record still keeps its entry");
    fs::remove_dir_all(dir).unwrap();
}
