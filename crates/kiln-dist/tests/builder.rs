//! kiln's build as a library ([`kiln_dist::Builder`]), as another project's
//! xtask calls it: kiln's example kernel folder (kernels/example/, two
//! modules and a static library) built with the real pinned compilers for
//! two AMD archs, one PTX level and one sm; a second set beside the main
//! one; and bad sets refused, naming the set (and a failing kernel, its
//! module and arch) with no dist folder changed.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
};

use kiln_dist::{lock::Lock, Builder, KernelSet, LockMode, SetManifest, StaticLib};

mod common;
use common::{pins, repo, temp};
use kiln_pins::{IncludeRoot, Pins};

fn say(line: String) {
    eprintln!("{line}");
}

/// kernels/example as a set: its two modules for gfx90a (wave64), gfx1100
/// (wave32), compute_80 and sm_90, and its static library for sm_90.
fn example(pins: &Pins) -> KernelSet {
    let mut lib = StaticLib::new("exampleops", ["lib/axpy_api.cu", "lib/axpy_kernel.cu"], &["sm_90"]).unwrap();
    lib.ffi = Some("ffi.rs".into());
    KernelSet::folder("example", "kernels/example", pins)
        .modules(["scale", "block_sum"])
        .staticlib(lib)
        .targets(&["gfx90a", "gfx1100", "compute_80", "sm_90"])
        .unwrap()
}

/// Every file below `dir` with its bytes: to show a folder was left exactly as it was.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.insert(e.path(), fs::read(e.path()).unwrap());
            }
        }
    }
    out
}

#[test]
fn the_example_folder_builds_through_the_builder_with_the_real_compilers() {
    let pins = pins();
    let tmp = temp("builder-example");
    let out = tmp.join("kernels");
    // What another project's xtask writes: a set, targets, a dist folder, a lock.
    let dist = Builder::new(&pins).set(example(&pins)).out(&out).lock_dir(&tmp).lock(LockMode::Update).build(&say).unwrap();

    assert_eq!(dist.sets.len(), 1);
    let o = &dist.sets[0];
    assert_eq!((o.set.as_str(), o.out.as_path()), ("example", out.as_path()));
    let m = &o.manifest;
    assert_eq!(m.set, None, "the builder's first set is its main set: its manifest names no set");
    assert_eq!(m.source_path.as_deref(), Some("kernels/example"));
    assert_eq!(m.manifest.source.sha256, kiln_dist::sources::listing_sha256(&repo().join("kernels/example")).unwrap());
    let paths: Vec<&str> = m.manifest.artifacts.iter().map(|a| a.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "cuda/compute_80/block_sum.ptx",
            "cuda/compute_80/scale.ptx",
            "cuda/lib/libexampleops.a",
            "cuda/sm_90/block_sum.cubin",
            "cuda/sm_90/scale.cubin",
            "hip/bundle/block_sum.hipfb",
            "hip/bundle/scale.hipfb",
            "hip/gfx1100/block_sum.hsaco",
            "hip/gfx1100/scale.hsaco",
            "hip/gfx90a/block_sum.hsaco",
            "hip/gfx90a/scale.hsaco",
        ]
    );
    // The kernels were read back from each file; every target has the same ones.
    for a in m.manifest.artifacts.iter().filter(|a| a.module == "scale") {
        assert_eq!(a.kernels, ["example_scale_f32", "example_scale_f64"], "{}", a.path);
    }
    for a in m.manifest.artifacts.iter().filter(|a| a.module == "block_sum") {
        assert_eq!(a.kernels, ["example_block_sum_f32"], "{}", a.path);
    }
    // Each code object records the geometry kiln-target's row gave its compile; CUDA entries have none.
    for a in &m.manifest.artifacts {
        let want = match a.arch.as_str() {
            "gfx1100" => Some(kiln_manifest::Geometry { cuda_arch: 890, defines: vec!["RDNA3".into()], wavefront_size: 32 }),
            "gfx90a" => Some(kiln_manifest::Geometry { cuda_arch: 890, defines: vec![], wavefront_size: 64 }),
            _ => None,
        };
        assert_eq!(a.geometry, want, "{}", a.path);
    }
    let hsaco = m.manifest.artifacts.iter().find(|a| a.path == "hip/gfx90a/block_sum.hsaco").unwrap();
    assert_eq!(hsaco.resources[0].lds_bytes, 256 * 4, "the shared-memory partial sums (example_common.cuh's block)");
    // The library defines what ffi.rs declares, and the launcher one object calls in the other.
    let lib = m.manifest.artifacts.iter().find(|a| a.kind == kiln_manifest::Kind::Staticlib).unwrap();
    assert_eq!(lib.kernels, ["example_axpy", "example_launch_axpy"]);
    assert_eq!(lib.arch, "sm_90");
    // The folder holds what the manifest says.
    let written = SetManifest::from_json(&fs::read_to_string(out.join("manifest.json")).unwrap(), "manifest").unwrap();
    assert_eq!(&written, m);
    for a in &m.manifest.artifacts {
        assert_eq!(kiln_manifest::sha256_hex(&fs::read(out.join(&a.path)).unwrap()), a.sha256, "{}", a.path);
    }
    let lock = Lock::load(&tmp.join("artifacts.lock")).unwrap();
    assert_eq!(lock.artifacts.len(), 11);
    assert_eq!(lock.source, format!("kernels/example {}", m.manifest.source.sha256));

    // Again, against the lock it wrote: the same bytes (from the cache, each entry re-checked).
    let again = Builder::new(&pins).set(example(&pins)).out(&out).lock_dir(&tmp).lock(LockMode::Check).build(&say).unwrap();
    assert_eq!(again.sets[0].manifest, *m);
    fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn a_second_set_goes_beside_the_main_one_and_names_itself() {
    let pins = pins();
    let tmp = temp("builder-second");
    let out = tmp.join("dist");
    let mut probe = KernelSet::folder("probe", "kernels/probe", &pins).modules(["probe"]).targets(&["compute_80", "sm_90"]).unwrap();
    probe.default = false;
    let builder = || Builder::new(&pins).set(example(&pins)).set(probe.clone()).out(&out).lock_dir(&tmp);
    // Only the opt-in set: the main set's folder is not made.
    let dist = builder().only(&["probe"]).lock(LockMode::Update).build(&say).unwrap();
    let o = &dist.sets[0];
    assert_eq!(o.out, tmp.join("dist-probe"));
    assert_eq!(o.manifest.set.as_deref(), Some("probe"));
    assert_eq!(o.lock, tmp.join("artifacts.probe.lock"));
    assert!(!out.exists(), "building the probe set alone leaves the main set's folder alone");
    let text = fs::read_to_string(tmp.join("dist-probe/manifest.json")).unwrap();
    assert!(text.starts_with("{\n  \"set\": \"probe\","), "{text}");
    assert_eq!(
        o.manifest.manifest.artifacts.iter().map(|a| a.path.as_str()).collect::<Vec<_>>(),
        ["cuda/compute_80/probe.ptx", "cuda/sm_90/probe.cubin"]
    );
    // A plain build is the default sets: the example, and the probe's folder is not touched.
    let before = snapshot(&tmp.join("dist-probe"));
    let dist = builder().build(&say).unwrap();
    assert_eq!(dist.sets.iter().map(|s| s.set.as_str()).collect::<Vec<_>>(), ["example"]);
    assert_eq!(snapshot(&tmp.join("dist-probe")), before);
    // A module of a set not built says which --set adds it; an unknown set lists the sets.
    let e = builder().select(vec!["probe".into()], vec![]).build(&say).err().unwrap();
    assert!(format!("{e:#}").contains("module `probe` (--module) is of set `probe`") && format!("{e:#}").contains("--set probe"), "{e:#}");
    let e = builder().only(&["flash"]).build(&say).err().unwrap();
    assert!(format!("{e:#}").contains("unknown set `flash`") && format!("{e:#}").contains("example, probe"), "{e:#}");
    fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn bad_sets_are_refused_naming_the_set_and_nothing_is_written() {
    let pins = pins();
    let tmp = temp("builder-bad");
    let out = tmp.join("dist");
    let build = |sets: Vec<KernelSet>| {
        let mut b = Builder::new(&pins).out(&out).lock_dir(&tmp);
        for s in sets {
            b = b.set(s);
        }
        format!("{:#}", b.build(&say).err().expect("the build must fail"))
    };
    let probe = || KernelSet::folder("probe", "kernels/probe", &pins).modules(["probe"]).targets(&["sm_90"]).unwrap();

    let e = build(vec![probe(), probe()]);
    assert!(e.contains("two kernel sets are named `probe`"), "{e}");
    let mut other = KernelSet::folder("other", "kernels/example", &pins).modules(["probe"]);
    other.targets = probe().targets;
    let e = build(vec![probe(), other]);
    assert!(e.contains("module `probe` of set `other` is also a module of set `probe`"), "{e}");
    let mut missing = probe();
    missing.include = vec![IncludeRoot::Source("no-such-folder".into())];
    let e = build(vec![missing]);
    assert!(e.contains("set `probe`") && e.contains("include root `no-such-folder` is not a folder"), "{e}");
    let mut unpinned = probe();
    unpinned.include = vec![IncludeRoot::Input("cutlass".into())];
    let e = build(vec![unpinned]);
    // The pin file's wording (one check in kiln-pins for both): it names the include root's input.
    assert!(e.contains("set `probe`") && e.contains("names input `cutlass`"), "{e}");
    let e = build(vec![KernelSet::folder("gone", "kernels/no-such-folder", &pins).modules(["x"])]);
    assert!(e.contains("set `gone`") && e.contains("kernels/no-such-folder is not a folder"), "{e}");
    // A crate source whose .crate does not have the pinned sha256.
    let mut wrong = pins.main_set().clone();
    let kiln_pins::Source::Crate { sha256, .. } = &mut wrong.source else { panic!("candle's source is a crate") };
    *sha256 = "0".repeat(64);
    wrong.artifact_crate = None;
    let e = build(vec![wrong]);
    assert!(e.contains("set `candle`") && e.contains("sha256"), "{e}");
    assert!(!out.exists(), "no dist folder was written");
    fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn a_kernel_that_fails_for_one_arch_names_set_module_and_arch_and_no_folder_changes() {
    let pins = pins();
    let tmp = temp("builder-fails");
    let out = tmp.join("dist");
    let src = tmp.join("fragile");
    fs::create_dir_all(&src).unwrap();
    fs::write(
        src.join("picky.cu"),
        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n#error kiln test: picky does not build for sm_90\n#endif\n\
         extern \"C\" __global__ void picky(float *x) { x[threadIdx.x] = 1.0f; }\n",
    )
    .unwrap();
    let fragile = KernelSet::folder("fragile", src.to_str().unwrap(), &pins).modules(["picky"]).targets(&["compute_80", "sm_90"]).unwrap();
    let probe = KernelSet::folder("probe", "kernels/probe", &pins).modules(["probe"]).targets(&["sm_90"]).unwrap();
    // A first, good build of the probe set: its folder is what must survive.
    Builder::new(&pins).set(probe.clone()).out(&out).build(&say).unwrap();
    let before = snapshot(&out);
    let e = Builder::new(&pins).set(probe).set(fragile).out(&out).build(&say).err().unwrap();
    let e = format!("{e:#}");
    assert!(e.contains("cuda sm_90 fragile/picky failed") && e.contains("picky does not build for sm_90"), "{e}");
    assert!(!e.contains("compute_80 fragile/picky failed"), "only the arch that fails is named: {e}");
    assert_eq!(snapshot(&out), before, "the probe set's folder is exactly as it was");
    assert!(!tmp.join("dist-fragile").exists());
    fs::remove_dir_all(&tmp).unwrap();
}

/// `dist merge` without `--locked` still checks every file it takes from a
/// part against the set's lock, the static library's objects too: an object
/// substituted in a part (its bytes and part.json agreeing) is refused,
/// naming it, before anything reaches the cache or the dist folder (it
/// would otherwise be archived into the library the crates ship).
#[test]
fn a_merge_without_locked_refuses_a_substituted_object_naming_it() {
    let pins = pins();
    let tmp = temp("merge-object");
    let out = tmp.join("kernels");
    let dist = Builder::new(&pins).set(example(&pins)).out(&out).lock_dir(&tmp).lock(LockMode::Update).build(&say).unwrap();
    let lock = Lock::load(&tmp.join("artifacts.lock")).unwrap();
    assert_eq!(lock.objects.keys().collect::<Vec<_>>(), ["cuda/lib/exampleops/axpy_api.o", "cuda/lib/exampleops/axpy_kernel.o"]);
    assert_eq!(&lock.objects, &dist.sets[0].objects);

    let part = tmp.join("part");
    Builder::new(&pins).set(example(&pins)).lock_dir(&tmp).part_out(&part).shard(kiln_dist::Spec { k: 1, n: 1 }, &say).unwrap();
    // One object's bytes replaced by the other's, part.json made to agree.
    let json = part.join("part.json");
    let mut doc: serde_json::Value = serde_json::from_str(&fs::read_to_string(&json).unwrap()).unwrap();
    let jobs = doc["jobs"].as_array().unwrap();
    let file_of = |stem: &str| jobs.iter().position(|j| j["file"].as_str().unwrap().ends_with(&format!("/{stem}.o"))).unwrap();
    let (victim, donor) = (file_of("axpy_api"), file_of("axpy_kernel"));
    let bytes = fs::read(part.join(jobs[donor]["file"].as_str().unwrap())).unwrap();
    fs::write(part.join(jobs[victim]["file"].as_str().unwrap()), &bytes).unwrap();
    doc["jobs"][victim]["sha256"] = kiln_manifest::sha256_hex(&bytes).into();
    doc["jobs"][victim]["size"] = bytes.len().into();
    fs::write(&json, serde_json::to_string_pretty(&doc).unwrap()).unwrap();

    let merged = tmp.join("merged");
    let e = Builder::new(&pins).set(example(&pins)).out(&merged).lock_dir(&tmp).merge(&[part], &say);
    let Err(e) = e else { panic!("merged a part with a substituted object") };
    let e = format!("{e:#}");
    assert!(e.contains("cuda/lib/exampleops/axpy_api.o has sha256") && e.contains("artifacts.lock says") && e.contains("nothing was written"), "{e}");
    assert!(!merged.exists(), "a refused merge wrote its dist folder");
    fs::remove_dir_all(&tmp).unwrap();
}

/// Kernel parity across backends with the real compilers: a kernel that
/// upstream gates on `__CUDA_ARCH__ >= 890` (as candle does its fp8 ones) is in
/// the AMD object too, and so is one gated on the RDNA2 macro kiln-target gives
/// gfx1030; an AMD object that lacks a kernel sm_89 has fails the dist, naming
/// module, arch and kernel, and writes nothing.
#[test]
fn amd_objects_carry_the_sm_89_kernels_and_a_gap_fails_the_dist() {
    let pins = pins();
    let tmp = temp("builder-parity");
    let src = tmp.join("gated");
    fs::create_dir_all(&src).unwrap();
    let source = |gap: &str| {
        format!(
            "extern \"C\" __global__ void everywhere(float *x) {{ x[threadIdx.x] = 1.0f; }}\n\
             #if __CUDA_ARCH__ >= 890{gap}\n\
             extern \"C\" __global__ void from_sm_89(float *x) {{ x[threadIdx.x] = 2.0f; }}\n\
             #endif\n\
             #if !defined(__HIP__) || defined(RDNA2)\n\
             extern \"C\" __global__ void rdna2_macro_seen(float *x) {{ x[threadIdx.x] = 3.0f; }}\n\
             #endif\n"
        )
    };
    let set = || KernelSet::folder("gated", src.to_str().unwrap(), &pins).modules(["gated"]).targets(&["gfx1030", "sm_89"]).unwrap();
    fs::write(src.join("gated.cu"), source("")).unwrap();
    let out = tmp.join("dist");
    let dist = Builder::new(&pins).set(set()).out(&out).build(&say).unwrap();
    for a in dist.sets[0].manifest.manifest.artifacts.iter().filter(|a| a.module == "gated") {
        assert_eq!(a.kernels, ["everywhere", "from_sm_89", "rdna2_macro_seen"], "{}", a.path);
    }
    let before = snapshot(&out);
    // The same kernel left out of AMD objects only: a gap, which nothing records.
    fs::write(src.join("gated.cu"), source(" && !defined(__HIP__)")).unwrap();
    let e = format!("{:#}", Builder::new(&pins).set(set()).out(&out).build(&say).err().expect("a parity gap fails the dist"));
    assert!(e.contains("set `gated`, module gated: gfx1030 lacks 1 kernel(s) that sm_89 has: from_sm_89 (kernel parity)"), "{e}");
    assert_eq!(snapshot(&out), before, "the dist folder is as the good build left it");
    fs::remove_dir_all(&tmp).unwrap();
}

/// The example's static library built per target (docs/static-library.md), as
/// candle's is, with the real pinned nvcc and objcopy: one host object per
/// file, tagged with its file and calling NVIDIA's runtime only through the
/// renamed names (`ar::check_host` passed in the dist), and one cubin per
/// file and sm (module `<lib>/<stem>`) beside the modules' SASS.
#[test]
fn a_per_target_library_ships_host_objects_and_a_cubin_per_file_and_sm() {
    let pins = pins();
    let tmp = temp("builder-per-target");
    let out = tmp.join("kernels");
    let mut set = example(&pins);
    set.staticlib.as_mut().unwrap().kernels = kiln_pins::LibKernels::PerTarget;
    let dist = Builder::new(&pins).set(set).out(&out).lock_dir(&tmp).lock(LockMode::Update).build(&say).unwrap();
    let m = &dist.sets[0].manifest.manifest;
    let of = |kind| m.artifacts.iter().filter(move |a| a.kind == kind).map(|a| a.path.as_str()).collect::<Vec<_>>();
    assert_eq!(
        of(kiln_manifest::Kind::Cubin),
        ["cuda/sm_90/block_sum.cubin", "cuda/sm_90/exampleops/axpy_api.cubin", "cuda/sm_90/exampleops/axpy_kernel.cubin", "cuda/sm_90/scale.cubin"]
    );
    let lib = m.artifacts.iter().find(|a| a.kind == kiln_manifest::Kind::Staticlib).unwrap();
    assert_eq!((lib.arch.as_str(), lib.kernels.clone()), ("host", vec!["example_axpy".to_string(), "example_launch_axpy".to_string()]));
    // The library's files are no kernel modules of the crate's API.
    assert_eq!(m.modules(), ["block_sum", "scale"]);
    let kernel = m.artifacts.iter().find(|a| a.module == "exampleops/axpy_kernel").unwrap();
    assert!(kernel.kernels.iter().any(|k| k.contains("axpy")), "{:?}", kernel.kernels);
    // The archive, read again: no device code, each member its own file's tag, the runtime renamed.
    let archive = kiln_validate::ar::read(&fs::read(out.join(&lib.path)).unwrap()).unwrap();
    for member in &archive.members {
        assert_eq!(member.tag.as_deref(), member.name.strip_suffix(".o"), "{}", member.name);
        assert!(member.fatbin.is_empty());
        assert!(!member.undefined.iter().any(|s| kiln_manifest::kiln_target::host_object::is_runtime_symbol(s)), "{:?}", member.undefined);
    }
    let launcher = archive.members.iter().find(|m| m.name == "axpy_kernel.o").unwrap();
    assert!(launcher.undefined.iter().any(|s| s.starts_with("kiln_exampleops_cudaLaunchKernel")), "{:?}", launcher.undefined);
    // The lock names the host objects as it names fat ones.
    let lock = Lock::load(&tmp.join("artifacts.lock")).unwrap();
    assert_eq!(lock.objects.keys().map(String::as_str).collect::<Vec<_>>(), ["cuda/lib/exampleops/axpy_api.o", "cuda/lib/exampleops/axpy_kernel.o"]);
    fs::remove_dir_all(&tmp).unwrap();
}
