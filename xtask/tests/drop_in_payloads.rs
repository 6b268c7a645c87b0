//! The generated crates refuse damaged payloads at run time, naming what is
//! damaged: a PTX whose bytes are not the manifest's (`Module::ptx()`), a
//! cubin (`kiln::bytes`, and the native image `From<ModulePtx> for Ptx` would
//! hand the driver), a HIP bundle (`Module::hsaco()`), and `hsaco()` with the
//! `hip` feature off. A real consumer program, built against a copy of the
//! sources `cargo xtask dist` keeps, with one payload swapped for another
//! well-formed zstd stream (so only the sha256 check can notice).

mod common;

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn copy_tree(from: &Path, to: &Path) {
    kiln_fs::copy_tree(from, to).unwrap();
}

const PROGRAM: &str = r#"
use kiln_candle_kernels as k;
fn main() {
    let what = std::env::args().nth(1).unwrap();
    match what.as_str() {
        "ptx" => println!("{}", k::AFFINE.ptx().len()),
        "cubin" => match k::kiln::bytes("cuda/sm_90/affine.cubin") {
            Ok(b) => println!("ok {}", b.len()),
            Err(e) => println!("error: {e}"),
        },
        "hsaco" => println!("{}", k::AFFINE.hsaco().len()),
        "intact" => println!("{} {}", k::FILL.ptx().len(), k::FILL.hsaco().len()),
        "select" => match k::kiln::select("fill", &std::env::args().nth(2).unwrap()) {
            Ok(a) => println!("ok {}", a.path),
            Err(e) => println!("error: {e}"),
        },
        // The images' SASS, planned from the crate's record of its payloads, against the manifest's
        // carried cubins, for every module (the static library's files too); no GPU here: every carried sm.
        "plan" => {
            let m = k::kiln::manifest();
            let mut modules: Vec<&str> = m.artifacts.iter().filter(|a| a.kind == k::kiln::Kind::Cubin).map(|a| a.module.as_str()).collect();
            modules.sort_unstable();
            modules.dedup();
            for module in &modules {
                let mut sms: Vec<u32> = m.artifacts.iter().filter(|a| a.module == *module && a.kind == k::kiln::Kind::Cubin)
                    .filter_map(|a| a.arch.strip_prefix("sm_")?.parse().ok()).collect();
                sms.sort_unstable();
                let plan = k::kiln::image_plan(module).sass;
                if plan != sms {
                    println!("differ on {module}: plan {plan:?}, manifest {sms:?}");
                    return;
                }
            }
            println!("agree on {} modules: {:?}", modules.len(), k::kiln::image_plan("affine").sass);
        }
        _ => unreachable!(),
    }
}
"#;

fn consumer(dir: &Path, sources: &Path, features: &str) -> PathBuf {
    consumer_with(dir, sources, features, "")
}

/// [`consumer`], built with `rustflags` (RUSTFLAGS) and into its own target folder.
fn consumer_with(dir: &Path, sources: &Path, features: &str, rustflags: &str) -> PathBuf {
    fs::create_dir_all(dir.join("src")).unwrap();
    fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"payload-consumer\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n[dependencies]\n\
             kiln-candle-kernels = {{ path = {:?}{features} }}\n\n[workspace]\n",
            sources.join("main").display().to_string()
        ),
    )
    .unwrap();
    fs::write(dir.join("src/main.rs"), PROGRAM).unwrap();
    // The rustflags give every unit its own files, but not the program: its own folder.
    let target = repo().join(if rustflags.is_empty() { "target/payload-consumer" } else { "target/payload-consumer-narrowed" });
    let out = common::lean_consumer_build(&mut Command::new("cargo"))
        .args(["build", "--quiet"])
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", &target)
        .env("RUSTFLAGS", rustflags)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    target.join("debug/payload-consumer")
}

fn run(exe: &Path, what: &str) -> (bool, String) {
    run_with(exe, &[what])
}

fn run_with(exe: &Path, args: &[&str]) -> (bool, String) {
    // No GPU here: the PTX level falls to the floor (the pins' first cuda_ptx); nothing is loaded.
    let out = Command::new(exe).args(args).env_remove("KILN_PTX_ARCH").output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn damaged_payloads_are_refused_naming_the_artifact() {
    let dist = std::env::var_os("KILN_DIST_DIR").map_or_else(|| repo().join("target/dist"), PathBuf::from);
    let generated = dist.join("crates/src");
    assert!(generated.join("main/Cargo.toml").is_file(), "{} has no generated crates: run `cargo xtask dist` first", generated.display());
    // Removed when the test ends, passed or not.
    let tmp = tempfile::Builder::new().prefix("kiln-payloads-").tempdir().unwrap();
    let tmp = tmp.path();
    let sources = tmp.join("src");
    copy_tree(&generated, &sources);
    // Well-formed zstd, wrong content: another module's payload of the same kind.
    let swap = |victim: &str, donor: &str| fs::copy(sources.join(donor), sources.join(victim)).unwrap();
    // The PTX a machine without a GPU reads: the floor's.
    let floor = kiln_pins::Pins::load(&repo().join(kiln_pins::FILE_NAME)).unwrap().targets.cuda_ptx[0].ptx();
    swap(&format!("main/payload/cuda/{floor}/affine.ptx.zst"), &format!("main/payload/cuda/{floor}/fill.ptx.zst"));
    swap("parts/sm90/payload/cuda/sm_90/affine.cubin.zst", "parts/sm90/payload/cuda/sm_90/fill.cubin.zst");
    swap("parts/hip/payload/hip/bundle/affine.hipfb.zst", "parts/hip/payload/hip/bundle/fill.hipfb.zst");

    let exe = consumer(&tmp.join("consumer"), &sources, "");
    let (ok, out) = run(&exe, "intact");
    assert!(ok, "untouched modules still load: {out}");
    let floor_ptx = format!("cuda/{floor}/affine.ptx");
    for (what, path) in [("ptx", floor_ptx.as_str()), ("cubin", "cuda/sm_90/affine.cubin"), ("hsaco", "hip/bundle/affine.hipfb")] {
        let (_, out) = run(&exe, what);
        assert!(out.contains(path) && out.contains("damaged") && out.contains("the manifest says"), "{what}: {out}");
    }
    let (ok, _) = run(&exe, "ptx");
    assert!(!ok, "a damaged PTX must not be returned as text");
    let (_, out) = run(&exe, "plan");
    let pinned: Vec<u32> = kiln_pins::Pins::load(&repo().join(kiln_pins::FILE_NAME)).unwrap().targets.cuda_sass.iter().map(|s| s.0).collect();
    assert!(out.starts_with("agree on ") && out.ends_with(&format!(": {pinned:?}\n")), "every pinned sm's SASS is carried: {out}");

    // Without the `hip` feature, hsaco() says which feature it needs.
    let exe = consumer(&tmp.join("consumer-nohip"), &sources, ", default-features = false, features = [\"sm90\"]");
    let (ok, out) = run(&exe, "hsaco");
    assert!(!ok && out.contains("`hip` feature") && out.contains("affine"), "{out}");
    // An arch kiln built but this build left out: the error names the feature that adds it.
    let (_, out) = run_with(&exe, &["select", "gfx942"]);
    assert!(out.starts_with("error:") && out.contains("hip/gfx942/fill.hsaco") && out.contains("enable the crate's `gfx942` feature"), "{out}");
    let (_, out) = run_with(&exe, &["select", "sm_90"]);
    assert!(out.starts_with("ok cuda/sm_90/fill.cubin"), "{out}");

    // Narrowed to sm90 (`--cfg kiln_gpu="sm90"`, every feature on): an arch
    // kiln built is left out, and the error gives the config line that adds it.
    let exe = consumer_with(&tmp.join("consumer-narrowed"), &sources, "", "--cfg kiln_gpu=\"sm90\"");
    let (_, out) = run_with(&exe, &["select", "gfx942"]);
    assert!(
        out.starts_with("error:")
            && out.contains("hip/gfx942/fill.hsaco")
            && out.contains("narrowed to `kiln_gpu` sm90")
            && out.contains(r#"rustflags = ["--cfg", 'kiln_gpu="sm90"', "--cfg", 'kiln_gpu="gfx942"']"#),
        "{out}"
    );
    let (_, out) = run_with(&exe, &["select", "sm_90"]);
    assert!(out.starts_with("ok cuda/sm_90/fill.cubin"), "{out}");
    let (_, out) = run_with(&exe, &["select", "sm_86"]);
    assert!(out.starts_with("ok cuda/compute_80/fill.ptx"), "kiln::select gives the best carried artifact: {out}");
    let (_, out) = run(&exe, "plan");
    assert!(out.starts_with("agree on ") && out.ends_with(": [90]\n"), "only the sm_90 SASS is carried: {out}");
    // No AMD GPU named: no HIP bundles, and hsaco() says how to name one.
    let (ok, out) = run(&exe, "hsaco");
    assert!(!ok && out.contains("needs the HIP code-object bundles") && out.contains("narrowed to `kiln_gpu` sm90"), "{out}");
    assert!(out.contains(r#"rustflags = ["--cfg", 'kiln_gpu="sm90"', "--cfg", 'kiln_gpu="gfx"#), "{out}");
}
