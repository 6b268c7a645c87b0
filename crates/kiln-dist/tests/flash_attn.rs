//! The candle-flash-attn set (pins.toml `[sets.flash-attn]`) without its
//! hours-long build: its plan (53 fat objects with upstream's flags and
//! CUTLASS's include root, in build.rs order), its inputs (the crate by its
//! sha256, CUTLASS from the pinned wheel, every file against the wheel's
//! RECORD, damage found and repaired), the include scan against nvcc's own
//! dependency list, and one real compile through the set: flash_api.cu, the
//! library's C entry point, for sm_80 and sm_90.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
};

use kiln_build::{cuda, plan::INPUTS_AT, run_all, Arch, JobKind, Plan};
use kiln_dist::{graph, sources, Selection};
use kiln_pins::{KernelSet, Pins, Sm};
use kiln_toolchain::{wheel, Cache, Mount, Runner};

mod common;
use common::{pins, repo, runner};

fn set(pins: &Pins) -> &KernelSet {
    pins.set("flash-attn").expect("pins.toml has the flash-attn set")
}

fn say(line: String) {
    eprintln!("{line}");
}

/// The set's plan over its verified sources and CUTLASS tree (the shared cache).
fn plan(pins: &Pins) -> (Plan, Cache) {
    let cache = Cache::from_env().unwrap();
    let set = set(pins);
    let src = sources::fetch(&cache, set, &repo(), &say).unwrap();
    let inputs = sources::inputs(&cache, set, &say).unwrap();
    let plan = Plan::new(set, src.root, repo().join("kernels/hip")).with_cuda_headers(repo().join("kernels/cuda")).with_includes(&inputs).unwrap();
    (plan, cache)
}

#[test]
fn the_set_is_opt_in_and_plans_53_fat_objects_with_upstreams_flags_and_cutlass() {
    let pins = pins();
    let set = set(&pins);
    assert!(!set.default, "hours of nvcc: never in a plain dist");
    assert_eq!(pins.default_sets().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["candle"]);
    let (plan, _) = plan(&pins);
    let jobs = Selection::default().object_jobs(&plan).unwrap();
    assert_eq!(jobs.len(), 53);
    // Every kernels/*.cu of the verified crate, in upstream's build.rs order (flash_api.cu first).
    let mut on_disk: Vec<String> = fs::read_dir(plan.src.host.join("kernels"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".cu"))
        .collect();
    on_disk.sort();
    let mut planned: Vec<String> = jobs.iter().map(|j| j.output.trim_end_matches(".o").to_string() + ".cu").collect();
    assert_eq!(planned[0], "flash_api.cu");
    let build_rs = fs::read_to_string(plan.src.host.join("build.rs")).unwrap();
    let upstream_order: Vec<&str> = build_rs.split('"').filter(|s| s.starts_with("kernels/") && s.ends_with(".cu")).collect();
    assert_eq!(planned.iter().map(|p| format!("kernels/{p}")).collect::<Vec<_>>(), upstream_order);
    planned.sort();
    assert_eq!(planned, on_disk);

    let cutlass = format!("{INPUTS_AT}/cutlass");
    for job in &jobs {
        let file = job.output.trim_end_matches(".o");
        let mut want: Vec<String> =
            ["nvcc", "-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90", "-c"].iter().map(|s| s.to_string()).collect();
        want.extend(set.flags.cuda_staticlib.iter().cloned());
        want.extend([format!("-I{cutlass}"), "-o".into(), format!("/kiln/job/{file}.o"), format!("/kiln/src/kernels/{file}.cu")]);
        assert_eq!(job.argv, want, "{job}");
        assert_eq!(job.arch, Arch::Fat { sass: vec![Sm(80), Sm(90)], ptx: vec![] });
        assert_eq!((job.set.as_str(), job.kind), ("flash-attn", JobKind::Object));
        assert!(job.mounts.iter().any(|m| m.at == cutlass && !m.writable), "{job}: CUTLASS is mounted read-only");
        // upstream's own flags, and none of kiln's candle-only ones (no forced arch gates).
        for flag in ["--expt-extended-lambda", "--use_fast_math", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__"] {
            assert!(job.argv.iter().any(|a| a == flag), "{job} lacks {flag}");
        }
        assert!(!job.argv.iter().any(|a| a == "-include"), "{job}");
        // The cache key reads the kernel's headers and CUTLASS's.
        assert!(job.inputs.iter().any(|i| i.at == "/kiln/src/kernels/flash.h"), "{job}");
        assert!(job.inputs.iter().any(|i| i.at == format!("{cutlass}/cute/tensor.hpp")), "{job}");
    }
    // The graph: the objects, their archive, and (packaged) a payload per object, the slices and the CUDA runtime.
    let toolchain = kiln_package::sources::ToolchainFiles::in_sysroot(Path::new("/nonexistent"));
    let plans = [plan];
    let g = graph::build(&pins, &plans, &Selection::default(), &|_| true, &toolchain).unwrap();
    assert_eq!(g.sets[0].modules.len(), 0);
    let archive = g.job(g.sets[0].archives[0]);
    assert_eq!((archive.output.as_str(), archive.argv.len()), ("libflashattention.a", 3 + 53));
    assert_eq!(g.nodes.len(), 53 + 1 + 53 + 1 + 1, "{}", g.describe());
}

#[test]
fn cutlass_comes_from_the_pinned_wheel_checked_against_its_record_and_is_cutlass_3_5_0() {
    let pins = pins();
    let input = set(&pins).input("cutlass").unwrap();
    // Downloaded into a cache of its own, from PyPI, by the pinned URL and sha256.
    let dir = std::env::temp_dir().join(format!("kiln-cutlass-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let cache = Cache::at(dir.clone()).unwrap();
    let tree = wheel::tree(&cache, &input.wheel, &input.tree).unwrap();
    assert_eq!(tree.files, 631, "cute/ and cutlass/ of the wheel's include folder");
    assert!(cache.wheels().join(format!("{}.whl", input.wheel.sha256)).is_file());
    // The commit upstream's build.rs pins is the tag v3.5.0: the headers must say so.
    let version = fs::read_to_string(tree.path.join("cutlass/version.h")).unwrap();
    for (name, n) in [("CUTLASS_MAJOR", 3), ("CUTLASS_MINOR", 5), ("CUTLASS_PATCH", 0)] {
        assert!(
            version.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["#define", name, &n.to_string()]),
            "version.h: {name} is not {n}"
        );
    }
    // A header changed after unpacking is found before the next use, and replaced.
    let victim = tree.path.join("cute/tensor.hpp");
    let good = fs::read(&victim).unwrap();
    fs::write(&victim, b"#error damaged\n").unwrap();
    let again = wheel::tree(&cache, &input.wheel, &input.tree).unwrap();
    assert_eq!(fs::read(again.path.join("cute/tensor.hpp")).unwrap(), good);
    assert_eq!(fs::read_dir(cache.root().join("damaged")).unwrap().count(), 1);
    // A damaged cached wheel is downloaded again when the tree must be unpacked again.
    fs::write(cache.wheels().join(format!("{}.whl", input.wheel.sha256)), b"not a wheel").unwrap();
    fs::remove_file(again.path.join("cute/tensor.hpp")).unwrap();
    assert_eq!(wheel::tree(&cache, &input.wheel, &input.tree).unwrap().files, 631);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_include_scan_finds_every_header_nvcc_reads() {
    let pins = pins();
    let (plan, cache) = plan(&pins);
    let runner = runner(&pins);
    let job = cuda::object_job(&plan, "flashattention", &plan.file("kernels/flash_api.cu", "test").unwrap(), &[Sm(80)], &[]).unwrap();
    // nvcc's own list of what it reads (-M), in the same sandbox with the same flags.
    let dir = cache.scratch("deps").unwrap();
    let mut argv: Vec<String> = job.argv.iter().take_while(|a| *a != "-o").filter(|&a| a != "-c").cloned().collect();
    argv.extend(["-M".into(), "-o".into(), "/kiln/job/deps.txt".into(), job.argv.last().unwrap().clone()]);
    let mut mounts = job.mounts.clone();
    mounts.push(Mount { host: dir.to_path_buf(), at: "/kiln/job".into(), writable: true });
    let status = runner.run(&mounts, "/kiln/job", &argv, &dir.join("log")).unwrap();
    assert!(status.success(), "nvcc -M: {}", fs::read_to_string(dir.join("log")).unwrap_or_default());
    let deps = fs::read_to_string(dir.join("deps.txt")).unwrap();
    let read: BTreeSet<&str> = deps.split_whitespace().filter(|w| w.starts_with("/kiln/") || w.starts_with(INPUTS_AT)).collect();
    let scanned: BTreeSet<&str> = job.inputs.iter().map(|i| i.at.as_str()).collect();
    let missed: Vec<&&str> = read.difference(&scanned).collect();
    assert!(missed.is_empty(), "the cache key would miss {} file(s) nvcc reads: {missed:?}", missed.len());
    let from_cutlass = read.iter().filter(|p| p.starts_with(INPUTS_AT)).count();
    assert!(from_cutlass >= 100, "nvcc read {from_cutlass} CUTLASS headers");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn flash_api_compiles_through_the_set_for_sm_80_and_sm_90() {
    let pins = pins();
    let (plan, cache) = plan(&pins);
    let runner = runner(&pins);
    let object = cuda::object_job(&plan, "flashattention", &plan.file("kernels/flash_api.cu", "test").unwrap(), &[Sm(80), Sm(90)], &[]).unwrap();
    let built = run_all(&runner, &cache, std::slice::from_ref(&object), &kiln_build::Options { workers: 1, ..Default::default() }, &say);
    let built = built.into_iter().next().unwrap().unwrap_or_else(|f| panic!("{f}"));
    // As the library's first member, read back the way dist reads the whole library.
    let mut archive =
        cuda::archive_job(&plan, "flashattention", Arch::Fat { sass: vec![Sm(80), Sm(90)], ptx: vec![] }, std::slice::from_ref(&object.output));
    archive.staged = vec![(object.output.clone(), built.path.clone())];
    let lib = run_all(&runner, &cache, &[archive], &kiln_build::Options { workers: 1, ..Default::default() }, &say)
        .into_iter()
        .next()
        .unwrap()
        .unwrap_or_else(|f| panic!("{f}"));
    let ffi = fs::read_to_string(plan.src.host.join("src/ffi.rs")).unwrap();
    let required = kiln_validate::ar::extern_fns(&ffi);
    assert_eq!(required, ["run_mha"], "upstream's ffi.rs declares one pub(crate) function");
    let a = kiln_validate::ar::check(&fs::read(&lib.path).unwrap(), &[80, 90], &[], &required).unwrap();
    assert!(a.functions().contains(&"run_mha".to_string()));
    // flash_api.cu itself launches nothing: the kernels are in the other 52 objects, which it calls.
    let calls = kiln_package::slices::undefined(&fs::read(&built.path).unwrap()).unwrap();
    assert!(calls.iter().any(|s| s.contains("run_mha_fwd_")), "flash_api.o calls the kernels' launchers: {calls:?}");
    // Deterministic: compiled again into an empty cache, the fat object (host code with
    // nvcc's temporary names, two cubins) is byte for byte the one dist stores and locks.
    let empty = common::temp("fa-determinism");
    let again = run_one(&runner, &Cache::at(PathBuf::from(&empty)).unwrap(), object.clone());
    assert!(fs::read(&again).unwrap() == fs::read(&built.path).unwrap(), "{} and {} differ", again.display(), built.path.display());
}

/// Runs one job (compile or archive) and returns its cached output.
fn run_one(runner: &Runner, cache: &Cache, job: kiln_build::Job) -> PathBuf {
    let r = run_all(runner, cache, &[job], &kiln_build::Options { workers: 1, ..Default::default() }, &say).into_iter().next().unwrap();
    r.unwrap_or_else(|f| panic!("{f}")).path
}

#[test]
fn the_drop_in_is_upstreams_api_over_parts_linked_callers_first() {
    let pins = pins();
    let (plan, cache) = plan(&pins);
    let runner = runner(&pins);
    let sms = [Sm(80), Sm(90)];
    // A small library of real objects: flash_api.o, and kiln's example pair where
    // axpy_api.o calls a launcher defined in axpy_kernel.o (as flash_api.o calls the kernels').
    let example = Plan::new(&example_set(&pins), repo().join("kernels/example"), repo().join("kernels/hip"));
    let mut objects = vec![cuda::object_job(&plan, "flashattention", &plan.file("kernels/flash_api.cu", "test").unwrap(), &sms, &[]).unwrap()];
    for f in ["lib/axpy_api.cu", "lib/axpy_kernel.cu"] {
        objects.push(cuda::object_job(&example, "flashattention", &example.file(f, "test").unwrap(), &sms, &[]).unwrap());
    }
    let members: Vec<(String, PathBuf)> = objects.iter().map(|j| (j.output.clone(), run_one(&runner, &cache, j.clone()))).collect();
    let names: Vec<String> = members.iter().map(|(n, _)| n.clone()).collect();
    let mut archive = cuda::archive_job(&plan, "flashattention", Arch::Fat { sass: sms.to_vec(), ptx: vec![] }, &names);
    archive.staged = members.clone();
    let library = run_one(&runner, &cache, archive.clone());

    // One object per slice: the caller's slice records the one it calls, and a cycle is impossible here.
    let work = cache.scratch("fa-package").unwrap();
    let slices_dir = work.join("slices");
    fs::create_dir_all(&slices_dir).unwrap();
    let archiver = |lib: &str, members: Vec<(String, PathBuf)>| -> anyhow::Result<PathBuf> {
        let mut job =
            cuda::archive_job(&plan, lib, Arch::Fat { sass: sms.to_vec(), ptx: vec![] }, &members.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>());
        job.staged = members;
        Ok(run_one(&runner, &cache, job))
    };
    let size = |_: &str, bytes: &[u8]| Ok(kiln_package::compress::zstd(bytes)?.len() as u64);
    let slices =
        kiln_package::slices::split_within(&fs::read(&library).unwrap(), "kiln-candle-flash-attn", 1, &size, &archiver, &slices_dir).unwrap();
    let calls: Vec<Vec<usize>> = slices.iter().map(|s| s.calls.clone()).collect();
    assert_eq!(calls, [vec![], vec![2], vec![]], "axpy_api.o (slice 1) calls into axpy_kernel.o (slice 2)");

    // The real linker shows why that matters: callers' archive first links, the other way round does not.
    let link = |order: [usize; 2]| {
        let dir = work.join(format!("link-{}{}", order[0], order[1]));
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join("main.c"),
            "int example_axpy(float, const float *, float *, unsigned, void *);\nint main(void) { return example_axpy(2.0f, 0, 0, 0, 0); }\n",
        )
        .unwrap();
        let mut argv: Vec<String> = ["g++-13", "-o", "/kiln/job/a.out", "-x", "c", "/kiln/job/main.c", "-x", "none"].map(String::from).to_vec();
        for i in order {
            let lib = format!("lib{}.a", slices[i].lib);
            let bytes = zstd::decode_all(&fs::read(slices_dir.join(slices[i].payload())).unwrap()[..]).unwrap();
            fs::write(dir.join(&lib), bytes).unwrap();
            argv.push(format!("/kiln/job/{lib}"));
        }
        argv.extend(["-lcudart_static", "-lrt", "-lpthread", "-ldl"].map(String::from));
        let mounts = [Mount { host: dir.clone(), at: "/kiln/job".into(), writable: true }];
        let ok = runner.run(&mounts, "/kiln/job", &argv, &dir.join("log")).unwrap().success();
        (ok, fs::read_to_string(dir.join("log")).unwrap())
    };
    let (ok, log) = link([1, 2]);
    assert!(ok, "the caller's slice first links: {log}");
    let (ok, log) = link([2, 1]);
    assert!(!ok && log.contains("undefined reference to `example_launch_axpy'"), "{log}");

    // The crates, as dist packages them: upstream's API over the parts, the CUDA runtime borrowed from candle's.
    let set = set(&pins);
    let mut lib_job = archive;
    lib_job.set = "flash-attn".into();
    let built = kiln_build::Built { path: library.clone(), key: String::new(), cached: true, seconds: 0.0 };
    let collected = kiln_dist::collect::staticlib(set, &plan.src.host, &lib_job, &built).unwrap();
    let collected_path = collected.artifact.path.clone();
    let toolchain = kiln_dist::compilers::check(&runner, &pins, None, &[]).unwrap();
    let src = sources::fetch(&cache, set, &repo(), &say).unwrap();
    let manifest = kiln_dist::collect::manifest(set, false, &src.sha256, toolchain, &[collected]);
    assert_eq!(manifest.set.as_deref(), Some("flash-attn"));
    let cudart_static = kiln_package::sources::ToolchainFiles::in_sysroot(&runner.sysroot().root).cudart_static;
    let cudart = work.join("cudart.zst");
    fs::write(&cudart, kiln_package::compress::zstd(&fs::read(&cudart_static).unwrap()).unwrap()).unwrap();
    let payloads = kiln_dist::package::Payloads { artifacts: Default::default(), slices: vec![slices_dir.clone()], cudart };
    let candle = pins.main_set();
    let what = kiln_dist::package::What {
        runner: &runner,
        cache: &cache,
        set,
        kiln: &repo(),
        source_root: &src.root,
        manifest: &manifest,
        cudart: Some((candle.artifact_crate.as_ref().unwrap().name.clone(), candle.crate_version().unwrap())),
        pins: &pins,
        jobs: [(collected_path.clone(), kiln_package::provenance::JobRecord { argv: lib_job.argv.clone(), inputs: Vec::new() })].into(),
    };
    let staged = work.join("staged");
    fs::create_dir_all(&staged).unwrap();
    let (records, _) = kiln_dist::package::crates(&what, &payloads, &staged, &say).unwrap();
    let mut names: Vec<&str> = records.iter().map(|r| r.name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        ["candle-flash-attn", "kiln-candle-flash-attn-ffi-0", "kiln-candle-flash-attn-ffi-1", "kiln-candle-flash-attn-ffi-2"],
        "candle's CUDA runtime crate is not this set's to publish"
    );
    assert!(records.iter().all(|r| r.version == "0.11.1+kiln.1" && r.size <= kiln_package::CRATES_IO_LIMIT));
    let gen = staged.join("crates/src");
    // Each crate names what made it (docs/consuming.md, "Provenance").
    let record = fs::read_to_string(gen.join("drop-in").join(kiln_package::provenance::FILE)).unwrap();
    let claims = kiln_package::provenance::read(&record, "the drop-in's record").unwrap();
    assert_eq!(claims.built.as_ref().map(|b| b.set.as_str()), Some("flash-attn"));
    // Upstream's Rust, verbatim (lib.rs gains only the lines naming the parts).
    assert_eq!(fs::read(gen.join("drop-in/src/ffi.rs")).unwrap(), fs::read(src.root.join("src/ffi.rs")).unwrap());
    let lib_rs = fs::read_to_string(gen.join("drop-in/src/lib.rs")).unwrap();
    let upstream_lib = fs::read_to_string(src.root.join("src/lib.rs")).unwrap();
    assert!(lib_rs.starts_with(&upstream_lib), "upstream's lib.rs comes first, unchanged");
    for i in 0..3 {
        assert!(lib_rs[upstream_lib.len()..].contains(&format!("extern crate kiln_candle_flash_attn_ffi_{i} as _;")), "{lib_rs}");
    }
    let cargo: toml::Table = toml::from_str(&fs::read_to_string(gen.join("drop-in/Cargo.toml")).unwrap()).unwrap();
    assert_eq!(cargo["package"]["name"].as_str(), Some("candle-flash-attn"));
    assert_eq!(cargo["lib"]["name"].as_str(), Some("candle_flash_attn"));
    assert!(cargo["package"].get("build").is_none() && cargo.get("build-dependencies").is_none() && cargo.get("dev-dependencies").is_none());
    let deps = cargo["dependencies"].as_table().unwrap();
    assert_eq!(deps["candle"]["package"].as_str(), Some("candle-core"));
    assert_eq!(deps["candle"]["features"].as_array().unwrap()[0].as_str(), Some("cuda"));
    assert!(deps.contains_key("half") && deps.contains_key("kiln-candle-flash-attn-ffi-0"));
    assert_eq!(cargo["features"]["cudnn"].as_array().unwrap()[0].as_str(), Some("candle/cudnn"));
    assert_eq!(cargo["package"]["metadata"]["kiln"]["drop-in-for"].as_str(), Some("candle-flash-attn"));
    // The calling part depends on the called one, so rustc links it first; every part links candle's CUDA runtime.
    let part = |i: usize| toml::from_str::<toml::Table>(&fs::read_to_string(gen.join(format!("parts/ffi-{i}/Cargo.toml"))).unwrap()).unwrap();
    let part1 = part(1);
    let deps1 = part1["dependencies"].as_table().unwrap();
    assert_eq!(deps1.keys().collect::<Vec<_>>(), ["kiln-candle-flash-attn-ffi-2", "kiln-candle-kernels-cudart"]);
    assert_eq!(deps1["kiln-candle-kernels-cudart"]["version"].as_str(), Some("=0.11.1"));
    assert!(fs::read_to_string(gen.join("parts/ffi-1/src/lib.rs")).unwrap().contains("extern crate kiln_candle_flash_attn_ffi_2 as _;"));
    assert_eq!(part(0)["dependencies"].as_table().unwrap().keys().collect::<Vec<_>>(), ["kiln-candle-kernels-cudart"]);
    // The parts hold compiled CUTLASS: its BSD-3-Clause text, out of the pinned wheel (checked against
    // RECORD), beside kiln's; the drop-in holds only upstream's Rust, under upstream's licence.
    let cutlass = set.input("cutlass").unwrap();
    let cutlass_license = kiln_toolchain::wheel::member(&cache, &cutlass.wheel, &cutlass.license.as_ref().unwrap().file).unwrap();
    assert!(String::from_utf8_lossy(&cutlass_license).contains("Redistribution and use in source and binary forms"));
    for i in 0..3 {
        assert_eq!(part(i)["package"]["license"].as_str(), Some("(MIT OR Apache-2.0) AND BSD-3-Clause"));
        assert_eq!(fs::read(gen.join(format!("parts/ffi-{i}/LICENSE-BSD-3-Clause-CUTLASS"))).unwrap(), cutlass_license);
        assert!(gen.join(format!("parts/ffi-{i}/LICENSE-MIT")).is_file() && gen.join(format!("parts/ffi-{i}/LICENSE-APACHE")).is_file());
    }
    assert_eq!(cargo["package"]["license"].as_str(), Some("MIT OR Apache-2.0"));
    assert!(!gen.join("drop-in/LICENSE-BSD-3-Clause-CUTLASS").exists());
    fs::remove_dir_all(&work).unwrap();
}

/// kernels/example as a set (its static library's objects are what the packaging test links).
fn example_set(pins: &Pins) -> KernelSet {
    let mut lib = kiln_pins::StaticLib::new("exampleops", ["lib/axpy_api.cu", "lib/axpy_kernel.cu"], &["sm_80", "sm_90"]).unwrap();
    lib.ffi = Some("ffi.rs".into());
    KernelSet::folder("example", "kernels/example", pins).staticlib(lib)
}
