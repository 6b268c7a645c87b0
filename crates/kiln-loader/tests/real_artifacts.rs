//! The loader on real compiler output: a dist folder built by `cargo xtask dist`
//! (affine and fill; PTX at compute_80 and compute_89, cubins for sm_80 and
//! sm_90), then selected, verified, tampered with and, where a GPU is present,
//! loaded and launched.
//!
//! The fixture is built once per target dir (a file lock keeps concurrent test
//! processes from building it twice), or taken from `KILN_LOADER_FIXTURE`.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kiln_loader::{
    check_blob, sha256_hex, ArtifactSource, Backend, Device, DeviceArch, DistDir, Error, KernelArgs, Kind, LaunchConfig, Manifest, Match,
    ModuleStore, SelectOptions, StoreOptions,
};

const FIXTURE_ENV: &str = "KILN_LOADER_FIXTURE";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The dist folder, built on first use.
fn fixture() -> PathBuf {
    if let Some(dir) = std::env::var_os(FIXTURE_ENV) {
        return PathBuf::from(dir);
    }
    if let Some(dist) = std::env::var_os("KILN_DIST_DIR") {
        // A GPU runner has a full dist (the CI artifact) and no compilers: cut the fixture from it.
        return subset_of(Path::new(&dist));
    }
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let dir = base.join("loader-dist-fixture");
    let lock = fs::File::create(base.join("loader-dist-fixture.lock")).unwrap();
    lock.lock().unwrap();
    if !dir.join("manifest.json").exists() {
        // Its own target dir: under `cargo test` the outer cargo still holds
        // the build lock of ours, and a nested build there would wait forever.
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = std::process::Command::new(cargo)
            .current_dir(repo())
            .env("CARGO_TARGET_DIR", base.join("xtask-target"))
            .args(["xtask", "dist", "--module", "affine", "--module", "fill"])
            .args(["--arch", "compute_80", "--arch", "compute_89", "--arch", "sm_80", "--arch", "sm_90"])
            .arg("--out")
            .arg(&dir)
            .status()
            .expect("cargo runs");
        assert!(status.success(), "cargo xtask dist failed for the loader fixture");
    }
    lock.unlock().unwrap();
    dir
}

/// The fixture's modules and archs taken from a whole dist folder (the same
/// bytes `cargo xtask dist --module affine --module fill --arch ...` writes,
/// since every artifact is a pure function of its inputs), once per process.
fn subset_of(dist: &Path) -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let text = fs::read_to_string(dist.join("manifest.json"))
            .unwrap_or_else(|e| panic!("KILN_DIST_DIR={}: cannot read manifest.json: {e}", dist.display()));
        let mut m = Manifest::from_json(&text, "KILN_DIST_DIR manifest").unwrap();
        let archs = ["compute_80", "compute_89", "sm_80", "sm_90"];
        m.artifacts.retain(|a| ["affine", "fill"].contains(&a.module.as_str()) && archs.contains(&a.arch.as_str()));
        m.targets.hip.clear();
        m.targets.cuda_ptx.retain(|a| archs.contains(&a.as_str()));
        m.targets.cuda_sass.retain(|a| archs.contains(&a.as_str()));
        assert_eq!(m.artifacts.len(), 8, "KILN_DIST_DIR={} lacks some of affine/fill for {archs:?}", dist.display());
        let to = std::env::temp_dir().join(format!("kiln-loader-fixture-{}", std::process::id()));
        let _ = fs::remove_dir_all(&to);
        for a in &m.artifacts {
            let dest = to.join(&a.path);
            fs::create_dir_all(dest.parent().unwrap()).unwrap();
            fs::copy(dist.join(&a.path), &dest).unwrap();
        }
        write_manifest(&to, &m);
        to
    })
    .clone()
}

/// A private copy of the fixture to tamper with, removed when dropped.
struct TempDist(PathBuf);

impl std::ops::Deref for TempDist {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDist {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn copy_fixture(label: &str) -> TempDist {
    // The system temp dir, not the target dir: the test binary also runs on GPU machines without this checkout.
    let to = std::env::temp_dir().join(format!("kiln-loader-{label}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&to);
    copy_tree(&fixture(), &to);
    TempDist(to)
}

fn copy_tree(from: &Path, to: &Path) {
    kiln_fs::copy_tree(from, to).unwrap();
}

fn arch(s: &str) -> DeviceArch {
    DeviceArch::parse(s).unwrap()
}

fn store(dir: &Path) -> ModuleStore<DistDir> {
    ModuleStore::with_options(DistDir::open(dir).unwrap(), StoreOptions::default())
}

fn write_manifest(dir: &Path, m: &Manifest) {
    fs::write(dir.join("manifest.json"), m.to_json()).unwrap();
}

#[test]
fn real_artifacts_are_selected_by_the_rules_and_pass_every_check() {
    let s = store(&fixture());
    for (device, module, want_arch, want_kind, want_match) in [
        ("sm_90", "fill", "sm_90", Kind::Cubin, Match::Exact),
        ("sm_80", "affine", "sm_80", Kind::Cubin, Match::Exact),
        ("sm_86", "affine", "sm_80", Kind::Cubin, Match::BinaryCompatible),
        ("sm_87", "affine", "compute_80", Kind::Ptx, Match::Ptx),
        ("sm_89", "affine", "compute_89", Kind::Ptx, Match::Ptx),
        ("sm_120", "fill", "compute_89", Kind::Ptx, Match::Ptx),
    ] {
        let sel = s.check(module, &arch(device)).unwrap_or_else(|e| panic!("{device} {module}: {e}"));
        assert_eq!((sel.artifact.arch.as_str(), sel.artifact.kind, sel.matched), (want_arch, want_kind, want_match), "{device} {module}");
    }
    // candle gates fp8 on sm_89: the compute_89 PTX has the kernel, compute_80's does not.
    let m = s.source().manifest();
    let has = |arch: &str, k: &str| m.ptx("affine", arch.trim_start_matches("compute_").parse().unwrap()).unwrap().kernels.iter().any(|x| x == k);
    assert!(has("compute_89", "affine_f8_e4m3") && !has("compute_80", "affine_f8_e4m3"));
    // Forced PTX on sm_90 takes the highest level, never a cubin.
    let ptx = ModuleStore::with_options(
        DistDir::open(fixture()).unwrap(),
        StoreOptions { select: SelectOptions { force_ptx: true, ..Default::default() } },
    );
    let sel = ptx.check("fill", &arch("sm_90")).unwrap();
    assert_eq!((sel.artifact.arch.as_str(), sel.artifact.kind), ("compute_89", Kind::Ptx));
}

#[test]
fn a_real_cubin_or_ptx_for_another_device_is_refused_by_its_header() {
    let dir = fixture();
    let src = DistDir::open(&*dir).unwrap();
    let m = src.manifest().clone();
    let sm80 = m.sass("fill", 80).unwrap();
    let bytes = src.bytes(&sm80.path).unwrap();
    let e = check_blob(sm80, &bytes, &arch("sm_90"), Match::Exact).unwrap_err();
    assert!(e.to_string().contains("cubin is for sm_80 and the device is sm_90"), "{e}");
    let p89 = m.ptx("affine", 89).unwrap();
    let e = check_blob(p89, &src.bytes(&p89.path).unwrap(), &arch("sm_86"), Match::Ptx).unwrap_err();
    assert!(e.to_string().contains("targets sm_89, above the device's sm_86"), "{e}");
}

#[test]
fn an_sm80_cubin_recorded_as_sm90_is_caught_even_with_a_matching_hash() {
    let dir = copy_fixture("wrong-arch");
    let mut m = DistDir::open(&*dir).unwrap().manifest().clone();
    let sm80_path = m.sass("fill", 80).unwrap().path.clone();
    let bytes = fs::read(dir.join(&sm80_path)).unwrap();
    // A self-consistent lie: the sm_90 entry's file, hash and size are now the sm_80 cubin's.
    let entry = m.artifacts.iter_mut().find(|a| a.module == "fill" && a.arch == "sm_90").unwrap();
    fs::write(dir.join(&entry.path), &bytes).unwrap();
    entry.sha256 = sha256_hex(&bytes);
    entry.size = bytes.len() as u64;
    write_manifest(&dir, &m);
    let e = store(&dir).check("fill", &arch("sm_90")).unwrap_err();
    assert!(matches!(e, Error::BadBlob { .. }), "{e:?}");
    assert!(e.to_string().contains("cuda/sm_90/fill.cubin") && e.to_string().contains("manifest says sm_90 but the cubin is for sm_80"), "{e}");
}

#[test]
fn corrupt_truncated_or_swapped_payloads_fail_the_hash() {
    let dir = copy_fixture("corrupt");
    let m = DistDir::open(&*dir).unwrap().manifest().clone();
    // One flipped bit.
    let cubin = dir.join(&m.sass("fill", 90).unwrap().path);
    let mut b = fs::read(&cubin).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 1;
    fs::write(&cubin, &b).unwrap();
    // Truncated.
    let ptx = dir.join(&m.ptx("affine", 89).unwrap().path);
    let b = fs::read(&ptx).unwrap();
    fs::write(&ptx, &b[..b.len() / 3]).unwrap();
    // Another artifact's bytes in its place.
    let other = fs::read(dir.join(&m.sass("affine", 80).unwrap().path)).unwrap();
    fs::write(dir.join(&m.sass("fill", 80).unwrap().path), other).unwrap();

    let s = store(&dir);
    for (module, device, path) in
        [("fill", "sm_90", "cuda/sm_90/fill.cubin"), ("affine", "sm_89", "cuda/compute_89/affine.ptx"), ("fill", "sm_80", "cuda/sm_80/fill.cubin")]
    {
        let e = s.check(module, &arch(device)).unwrap_err();
        assert!(matches!(&e, Error::HashMismatch { path: p, .. } if p == path), "{device}: {e:?}");
        assert!(e.to_string().contains("refusing to load it"), "{e}");
    }
    // The untouched artifacts still load.
    s.check("affine", &arch("sm_90")).unwrap();
}

#[test]
fn missing_files_bad_manifests_and_escaping_paths_are_errors() {
    let dir = copy_fixture("manifest");
    let mut m = DistDir::open(&*dir).unwrap().manifest().clone();
    fs::remove_file(dir.join(&m.sass("affine", 90).unwrap().path)).unwrap();
    let e = store(&dir).check("affine", &arch("sm_90")).unwrap_err();
    assert!(matches!(e, Error::Artifact { .. }) && e.to_string().contains("cannot read"), "{e}");

    // A manifest pointing outside its folder.
    m.artifacts.iter_mut().find(|a| a.module == "fill" && a.arch == "sm_90").unwrap().path = "../../../../etc/passwd".into();
    write_manifest(&dir, &m);
    let e = store(&dir).check("fill", &arch("sm_90")).unwrap_err();
    assert!(e.to_string().contains("not a path inside the folder"), "{e}");

    // A FIFO (a read would block for ever) or a link where an artifact should be: refused, not opened.
    let ptx = m.ptx("affine", 80).unwrap().path.clone();
    fs::remove_file(dir.join(&ptx)).unwrap();
    assert!(std::process::Command::new("mkfifo").arg(dir.join(&ptx)).status().unwrap().success());
    let e = store(&dir).check("affine", &arch("sm_87")).unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
    fs::remove_file(dir.join(&ptx)).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.join(&ptx)).unwrap();
    let e = store(&dir).check("affine", &arch("sm_87")).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");

    fs::write(dir.join("manifest.json"), "{ not json").unwrap();
    let e = DistDir::open(&*dir).unwrap_err();
    assert!(matches!(e, Error::Manifest { .. }) && e.to_string().contains("not a kiln manifest"), "{e}");
    let e = DistDir::open(dir.join("nowhere")).unwrap_err();
    assert!(e.to_string().contains("cargo xtask dist") && e.to_string().contains("KILN_DIST_DIR"), "{e}");
}

#[test]
fn devices_with_nothing_to_run_and_unknown_modules_are_errors_listing_what_is_carried() {
    let s = store(&fixture());
    let e = s.check("affine", &arch("sm_75")).unwrap_err();
    assert!(e.to_string().contains("carried are compute_80, compute_89, sm_80, sm_90"), "{e}");
    let e = s.check("affine", &arch("gfx90a")).unwrap_err();
    assert!(e.to_string().contains("HIP artifacts carried are none"), "{e}");
    let e = s.check("softmax", &arch("sm_90")).unwrap_err();
    assert!(e.to_string().contains("no kernel module `softmax`") && e.to_string().contains("affine, fill"), "{e}");
    assert!(DeviceArch::parse("sm_9O").is_err());
}

/// What opening a device gives on this machine: a device, or the right error.
fn open_or_explain(backend: Backend) -> Option<Device> {
    let available = match backend {
        Backend::Cuda => kiln_loader::cuda_driver_available().map(|_| ()),
        Backend::Hip => kiln_loader::hip::probe().map(|_| ()),
    };
    match (available, Device::open(backend, 0)) {
        (Ok(()), Ok(d)) => Some(d),
        (Ok(()), Err(e @ Error::NoDevice { .. })) => {
            assert!(e.to_string().starts_with(&format!("no {} device", if backend == Backend::Cuda { "CUDA" } else { "HIP" })), "{e}");
            eprintln!("{}: driver present, {e}", backend.as_str());
            None
        }
        (Err(probe), Err(open)) => {
            // No driver library: both say so, in the same words.
            assert!(matches!(probe, Error::DriverMissing { .. } | Error::DriverTooOld { .. } | Error::BackendDisabled { .. }), "{probe:?}");
            assert_eq!(probe.to_string(), open.to_string());
            eprintln!("{}: {open}", backend.as_str());
            None
        }
        (probe, open) => panic!("{}: probe {probe:?} but open {open:?}", backend.as_str()),
    }
}

#[test]
fn a_missing_driver_or_device_is_a_clear_error_and_never_a_panic() {
    let _ = open_or_explain(Backend::Cuda);
    let _ = open_or_explain(Backend::Hip);
    assert!(matches!(
        Device::count(Backend::Cuda),
        Ok(_) | Err(Error::DriverMissing { .. } | Error::DriverTooOld { .. } | Error::NoDevice { .. } | Error::BackendDisabled { .. })
    ));
}

/// On a CUDA machine: every fixture module loads through the store (best and
/// PTX paths), once, and a kernel runs. Elsewhere the device error is checked
/// by `open_or_explain`.
#[test]
fn on_a_cuda_gpu_modules_load_once_and_kernels_run() {
    let Some(device) = open_or_explain(Backend::Cuda) else { return };
    for force_ptx in [false, true] {
        let s = Arc::new(ModuleStore::with_options(
            DistDir::open(fixture()).unwrap(),
            StoreOptions { select: SelectOptions { force_ptx, ..Default::default() } },
        ));
        // Eight threads race for each module; each must get the one loaded copy.
        let got: Vec<Vec<Arc<kiln_loader::Module>>> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..8).map(|_| sc.spawn(|| ["affine", "fill"].iter().map(|m| s.get(&device, m).unwrap()).collect::<Vec<_>>())).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for per_thread in &got {
            for (a, b) in per_thread.iter().zip(&got[0]) {
                assert!(Arc::ptr_eq(a, b), "a module was loaded twice");
            }
        }
        let fill = s.get(&device, "fill").unwrap();
        assert_eq!(fill.kind(), if force_ptx { Kind::Ptx } else { s.check("fill", device.arch()).unwrap().artifact.kind });
        for k in &fill.artifact().kernels {
            fill.function(k).unwrap();
        }
        assert!(matches!(fill.function("no_such_kernel"), Err(Error::KernelNotFound { .. })));

        let n = 100_000usize;
        let out = device.alloc(n * 4).unwrap();
        let mut args = KernelArgs::new();
        args.push_buffer(&out).push(2.25f32).push(n);
        // SAFETY: fill_f32(float* buf, float value, size_t numel) writes n floats into a buffer of n.
        unsafe { fill.function("fill_f32").unwrap().launch(&LaunchConfig::for_elements(n as u32, 256), &mut args).unwrap() };
        let host: Vec<f32> = out.to_vec().unwrap();
        assert!(host.iter().all(|&v| v == 2.25), "fill_f32 through {} wrote wrong values", fill.artifact().path);
        let back = device.upload(&[1u32, 2, 3]).unwrap();
        assert_eq!(back.to_vec::<u32>().unwrap(), [1, 2, 3]);
        assert!(matches!(back.copy_to_host(&mut [0u32; 2]), Err(Error::InvalidArgument(_))));
    }
}
