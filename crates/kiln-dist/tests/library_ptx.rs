//! A per-target static library's PTX, shared (docs/static-library.md): per
//! file one compute_90 PTX job, which its sm_90 (nvcc's own ptxas), sm_100 and
//! sm_120 (the pinned newer ptxas) cubins read from the graph, instead of
//! each compiling it again; `--shard` keeps such a PTX and its cubins in one
//! shard. Candle's plan is checked without compiling; the example library is
//! compiled for real, its shared-PTX sm_90 cubin against nvcc's own `--cubin`.

use std::{fs, path::Path};

use kiln_build::{cuda, run_all, Arch, JobKind, Plan};
use kiln_dist::{compilers, graph, sources, Builder, LockMode, Selection};
use kiln_pins::{LibKernels, Sm, StaticLib, Target};
use kiln_toolchain::Cache;

mod common;
use common::{repo, temp, toolchain};

fn say(line: String) {
    eprintln!("{line}");
}

#[test]
fn each_library_file_has_one_ptx_that_its_sm_90_100_and_120_cubins_read() {
    let (pins, runner) = toolchain();
    let cache = Cache::from_env().unwrap();
    let set = pins.default_sets().next().expect("the main set");
    let lib = set.staticlib.as_ref().expect("candle's static library");
    assert_eq!(lib.kernels, LibKernels::PerTarget);
    // Which sms share a PTX comes from the pins: nvcc's level for the sm it reaches, ptxas's source level beyond.
    let shared: Vec<Sm> = lib.sass.iter().copied().filter(|&sm| cuda::lib_ptx_level(&pins, lib, sm).is_some()).collect();
    assert_eq!(shared, [Sm(90), Sm(100), Sm(120)]);
    assert!(shared.iter().all(|&sm| cuda::lib_ptx_level(&pins, lib, sm) == Some(Sm(90))));

    let src = sources::fetch(&cache, set, &repo(), &say).unwrap();
    let inputs = sources::inputs(&cache, set, &say).unwrap();
    let ptxas = compilers::ptxas(&runner, &cache, &pins).unwrap().expect("the pins pin a newer ptxas");
    // The cross compilers of the library's other host CPUs (its aarch64 host objects), as the builder provisions them.
    let cross = lib.cross_hosts().map(|cpu| kiln_toolchain::sysroot::provision_cross(&cache, &pins, cpu, 2, &say).unwrap()).collect();
    let plan = Plan::new(set, src.root, repo().join("kernels/hip"))
        .with_cuda_headers(repo().join("kernels/cuda"))
        .with_includes(&inputs)
        .unwrap()
        .with_ptxas(ptxas)
        .with_cross(cross);
    let toolchain = kiln_package::sources::ToolchainFiles::in_sysroot(Path::new("/nonexistent"));
    let plans = [plan];
    let g = graph::build(&pins, &plans, &Selection::default(), &|_| false, &toolchain).unwrap();
    let nodes = &g.sets[0];
    assert_eq!(nodes.intermediates.len(), lib.sources.len(), "one PTX per file: {}", g.describe());
    for &p in &nodes.intermediates {
        let ptx = g.job(p);
        assert_eq!((ptx.kind, &ptx.arch), (JobKind::LibPtx, &Arch::One(Target::Ptx(Sm(90)))), "{ptx}");
        assert!(!nodes.modules.contains(&p), "{ptx}: a library PTX is no artifact");
        // The same compile as a cubin of the library from source, but for compute_90 PTX.
        let sm89 = nodes.modules.iter().map(|&i| g.job(i)).find(|j| j.module == ptx.module && j.target() == Some(&Target::Sass(Sm(89)))).unwrap();
        assert_eq!(ptx.argv[..3], ["nvcc", "-gencode=arch=compute_90,code=compute_90", "--ptx"], "{ptx:?}");
        assert_eq!(sm89.argv[..3], ["nvcc", "-gencode=arch=compute_89,code=sm_89", "--cubin"], "{sm89:?}");
        let n = ptx.argv.len();
        assert_eq!(ptx.argv[3..n - 2], sm89.argv[3..n - 2], "the library's flags, forced headers and arch list");
        assert_eq!(ptx.argv.last(), sm89.argv.last(), "the same source file");
        assert!(ptx.argv.iter().any(|a| a.starts_with("-DKILN_ARCH_LIST=")) && ptx.argv.iter().any(|a| a == "-include"), "{ptx:?}");
        assert_eq!(ptx.inputs.iter().map(|i| &i.at).collect::<Vec<_>>(), sm89.inputs.iter().map(|i| &i.at).collect::<Vec<_>>());
    }
    // Every cubin of the library: sm_90, sm_100 and sm_120 read their file's one PTX, the others none.
    for &i in &nodes.modules {
        let job = g.job(i);
        let Some(Target::Sass(sm)) = job.target().cloned() else { continue };
        if !job.module.starts_with(&format!("{}/", lib.name)) {
            assert!(g.nodes[i].inputs.is_empty(), "{job}: a module's cubin reads nothing");
            continue;
        }
        let reads: Vec<_> = g.nodes[i].inputs.iter().map(|(d, name)| (g.job(*d), name.as_str())).collect();
        if shared.contains(&sm) {
            let [(ptx, name)] = reads[..] else { panic!("{job} reads {} jobs", reads.len()) };
            assert_eq!((ptx.kind, &ptx.module, name), (JobKind::LibPtx, &job.module, ptx.output.as_str()), "{job}");
            assert!(job.inputs.is_empty() && job.argv.last().unwrap().ends_with(&ptx.output), "{job:?}");
            // nvcc's own ptxas (the toolchain root's) where nvcc reaches the sm, else the pinned one, staged.
            let pinned = matches!(pins.lib_sass_by(lib, sm), kiln_pins::SassBy::Ptxas { .. });
            assert_eq!((job.argv[0].as_str(), job.staged.len()), if pinned { ("/kiln/job/ptxas", 1) } else { ("ptxas", 0) }, "{job:?}");
            assert_eq!(job.argv[1..3], [format!("-arch={}", sm.sass()), "-m64".to_string()]);
        } else {
            assert!(reads.is_empty(), "{job}");
        }
    }
    let readers = |p: usize| nodes.modules.iter().filter(|&&i| g.nodes[i].inputs.iter().any(|(d, _)| *d == p)).count();
    assert!(nodes.intermediates.iter().all(|&p| readers(p) == 3));
    assert!(g.describe().contains("15 static-library PTX"), "{}", g.describe());

    // --shard: for every N, a PTX and its three cubins land in one shard, which runs them as a graph.
    let b = Builder::from_pins(&pins).kiln_dir(repo()).base(repo()).workers(2);
    for n in [2, 3, 8, 16] {
        let planned = b.shard_plan(n, &say).unwrap();
        let shard_of = |label: &str| planned.jobs.iter().find(|j| j.label == label).unwrap().shard;
        let mut units = 0;
        for j in planned.jobs.iter().filter(|j| !j.reads.is_empty()) {
            assert_eq!(j.reads.len(), 1, "{}", j.label);
            assert!(j.reads[0].starts_with("lib-ptx compute_90 moe/"), "{} reads {:?}", j.label, j.reads);
            assert_eq!(shard_of(&j.label), shard_of(&j.reads[0]), "N = {n}: {} and the PTX it reads are split", j.label);
            units += 1;
        }
        assert_eq!(units, 45, "N = {n}");
        assert!(planned.wall_ms() >= planned.units[0].path_ms, "no shard is shorter than the longest unit's path");
        let shared: Vec<_> = planned.units.iter().filter(|u| u.jobs > 1).collect();
        assert_eq!(shared.len(), 15, "N = {n}");
        assert!(shared.iter().all(|u| u.jobs == 4 && u.label.starts_with("lib-ptx compute_90 moe/") && u.path_ms < u.sum_ms));
    }
}

/// The example library per target for sm_90 and sm_100 from compute_90 PTX,
/// built for real: both cubins of a file are assembled from its one PTX, and
/// the sm_90 cubin is byte for byte the one `nvcc --cubin` makes of the file.
#[test]
fn the_shared_ptx_gives_nvccs_own_sm_90_cubin() {
    let (pins, runner) = toolchain();
    let tmp = temp("library-ptx");
    let mut lib = StaticLib::new("exampleops", ["lib/axpy_api.cu", "lib/axpy_kernel.cu"], &["sm_90", "sm_100"]).unwrap();
    lib.ffi = Some("ffi.rs".into());
    lib.ptx = vec![Sm(90)];
    lib.kernels = LibKernels::PerTarget;
    let set =
        kiln_pins::KernelSet::folder("example", "kernels/example", &pins).modules(["scale"]).staticlib(lib.clone()).targets(&["sm_90"]).unwrap();
    let out = tmp.join("kernels");
    let dist = Builder::new(&pins).set(set.clone()).out(&out).lock_dir(&tmp).lock(LockMode::Update).build(&say).unwrap();
    let m = &dist.sets[0].manifest.manifest;
    let cubins: Vec<&str> = m.artifacts.iter().filter(|a| a.kind == kiln_manifest::Kind::Cubin).map(|a| a.path.as_str()).collect();
    assert_eq!(
        cubins,
        [
            "cuda/sm_100/exampleops/axpy_api.cubin",
            "cuda/sm_100/exampleops/axpy_kernel.cubin",
            "cuda/sm_90/exampleops/axpy_api.cubin",
            "cuda/sm_90/exampleops/axpy_kernel.cubin",
            "cuda/sm_90/scale.cubin"
        ]
    );
    assert!(!m.artifacts.iter().any(|a| a.path.ends_with(".ptx") && a.module.starts_with("exampleops/")), "the PTX is not shipped");
    let lock = fs::read_to_string(tmp.join("artifacts.lock")).unwrap();
    assert!(!lock.contains("compute_90/exampleops"), "nor locked:\n{lock}");

    // nvcc's own `--cubin` of the kernel file for sm_90, through the same sandbox.
    let plan = Plan::new(&set, repo().join("kernels/example"), repo().join("kernels/hip")).with_cuda_headers(repo().join("kernels/cuda"));
    let file = plan.file("lib/axpy_kernel.cu", "test").unwrap();
    let job = cuda::lib_cubin_job(&plan, &pins, &lib, &file, Sm(90)).unwrap();
    assert_eq!(job.argv[..3], ["nvcc", "-gencode=arch=compute_90,code=sm_90", "--cubin"]);
    let cache = Cache::from_env().unwrap();
    let built = run_all(&runner, &cache, &[job], &kiln_build::Options { workers: 1, ..Default::default() }, &say);
    let nvcc = fs::read(&built[0].as_ref().unwrap().path).unwrap();
    let shared = fs::read(out.join("cuda/sm_90/exampleops/axpy_kernel.cubin")).unwrap();
    assert!(nvcc == shared, "the sm_90 cubin from the shared PTX ({} B) differs from nvcc --cubin's ({} B)", shared.len(), nvcc.len());
    fs::remove_dir_all(&tmp).unwrap();
}
