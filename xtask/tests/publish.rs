//! `cargo xtask publish` for real, end to end: the crates `cargo xtask dist`
//! packaged (target/dist/crates) are published by the xtask binary to a
//! sparse registry that kiln-publish serves on loopback, then fresh consumer
//! crates resolve them from it and build with real cargo, with no nvcc,
//! hipcc, CUDA or ROCm on their PATH: as a plain dependency, and as the
//! drop-in for candle-kernels through `[patch.crates-io]` (from the registry
//! and from dist's generated sources), next to upstream's crate failing for
//! want of nvcc. Then the refusals: a dry run uploads nothing, a tampered
//! `.crate`, one over the size limit and a conflicting version are refused.
//! Last, `cargo xtask registry serve` itself: ferro-cargo-registry-server, a
//! registry others maintain, published to with the lines it prints.
//!
//! Needs a full `cargo xtask dist` (`cargo xtask test` runs it first), or
//! `KILN_DIST_DIR` naming one; without it these tests fail, never skip.
//! crates.io must be reachable for the consumers' ordinary dependencies
//! (serde, ruzstd, ...); their `.crate` files are seeded from the local cargo
//! cache when it has them.

mod common;

use std::{
    collections::BTreeMap,
    ffi::OsString,
    fs,
    path::{Path, PathBuf},
    process::{Command, Output},
    time::Instant,
};

use kiln_manifest::{Kind, Manifest};
use kiln_publish::serve::{self, Ferro};
use kiln_test_registry::{self as server, Server};
use serde::Deserialize;

const TOKEN: &str = "kiln-test-token";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn dist() -> PathBuf {
    let dir = std::env::var_os("KILN_DIST_DIR").map_or_else(|| repo().join("target/dist"), PathBuf::from);
    assert!(
        dir.join("crates/crates.json").is_file(),
        "{} has no crates/crates.json: run `cargo xtask dist` first (`cargo xtask test` does), or set KILN_DIST_DIR",
        dir.display()
    );
    dir
}

#[derive(Deserialize, Clone, Debug)]
struct Record {
    name: String,
    version: String,
    file: String,
    size: u64,
    sha256: String,
}

fn records(dist: &Path) -> Vec<Record> {
    serde_json::from_str(&fs::read_to_string(dist.join("crates/crates.json")).unwrap()).unwrap()
}

fn record<'a>(records: &'a [Record], name: &str) -> &'a Record {
    records.iter().find(|r| r.name == name).unwrap_or_else(|| panic!("crates.json has no {name}"))
}

fn manifest(dist: &Path) -> Manifest {
    Manifest::from_json(&fs::read_to_string(dist.join("manifest.json")).unwrap(), "manifest.json").unwrap()
}

/// A folder in the system temp dir, removed when dropped.
struct Temp(PathBuf);

impl Temp {
    fn new(label: &str) -> Temp {
        let p = std::env::temp_dir().join(format!("kiln-publish-{label}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        Temp(p)
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn text(o: &Output) -> String {
    format!("--- stdout\n{}\n--- stderr\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// `cargo xtask publish ...`: the real binary, with the registry given as
/// cargo takes it from the environment.
fn publish(server: &Server, args: &[&str], token: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xtask"));
    cmd.arg("publish").args(["--registry", "kiln"]).args(args);
    if !args.contains(&"--dist") {
        cmd.arg("--dist").arg(dist());
    }
    cmd.env("CARGO_REGISTRIES_KILN_INDEX", server.index_url()).env_remove("CARGO_REGISTRIES_KILN_TOKEN");
    if let Some(t) = token {
        cmd.env("CARGO_REGISTRIES_KILN_TOKEN", t);
    }
    cmd.output().expect("the xtask binary runs")
}

/// A registry served from `dir`, holding every packaged crate.
fn registry_with_everything(dir: &Path) -> Server {
    let server = Server::start(dir, "127.0.0.1:0", server::Options { token: Some(TOKEN.into()), ..Default::default() }).unwrap();
    let start = Instant::now();
    let out = publish(&server, &["--execute"], Some(TOKEN));
    let log = text(&out);
    assert!(out.status.success(), "publishing failed:\n{log}");
    let recs = records(&dist());
    for r in &recs {
        assert!(log.contains(&format!("{} {}: uploaded ({} bytes)", r.name, r.version, r.size)), "{} was not uploaded:\n{log}", r.name);
        // What the index says is what was packaged.
        let line = fs::read_to_string(dir.join("index").join(kiln_publish::registry::index_path(&r.name))).unwrap();
        let entry: serde_json::Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
        assert_eq!((entry["vers"].as_str(), entry["cksum"].as_str()), (Some(r.version.as_str()), Some(r.sha256.as_str())), "{line}");
    }
    assert!(log.contains(&format!("done: {} uploaded, 0 already there, 0 skipped", recs.len())), "{log}");
    eprintln!("published {} crates to {} in {:.1?}", recs.len(), server.index_url(), start.elapsed());
    server
}

// ---- consumers -----------------------------------------------------------

/// The environment a consumer builds in: a PATH without nvcc or hipcc (and
/// no directory named for CUDA or ROCm), no CUDA/ROCm variables or library
/// paths, its own CARGO_HOME knowing the `kiln` registry.
struct Consumer {
    home: PathBuf,
    target: PathBuf,
    path: OsString,
}

fn real_cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME").map(PathBuf::from).unwrap_or_else(|| Path::new(&std::env::var_os("HOME").unwrap()).join(".cargo"))
}

fn is_gpu_sdk_dir(dir: &Path) -> bool {
    let lower = dir.to_string_lossy().to_lowercase();
    lower.contains("cuda") || lower.contains("rocm") || ["nvcc", "hipcc"].iter().any(|t| dir.join(t).exists())
}

impl Consumer {
    /// `label` keeps one CARGO_HOME per test (a test holds its lock for its
    /// whole run); the target dir is shared, so crates.io dependencies build once.
    fn new(label: &str, index: &str) -> (Consumer, fs::File) {
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let home = base.join(format!("consumer-home-{label}"));
        fs::create_dir_all(&home).unwrap();
        let lock = fs::File::create(base.join(format!("consumer-home-{label}.lock"))).unwrap();
        lock.lock().unwrap();
        // Registries of earlier runs were on other ports.
        for sub in ["index", "cache", "src"] {
            if let Ok(rd) = fs::read_dir(home.join("registry").join(sub)) {
                for e in rd.flatten() {
                    if e.file_name().to_string_lossy().starts_with("127.0.0.1-") {
                        fs::remove_dir_all(e.path()).unwrap();
                    }
                }
            }
        }
        seed_crates_io_cache(&home);
        fs::write(home.join("config.toml"), format!("[registries.kiln]\nindex = \"{index}\"\n\n[net]\nretry = 5\n")).unwrap();
        let path = std::env::join_paths(std::env::split_paths(&std::env::var_os("PATH").unwrap()).filter(|d| !is_gpu_sdk_dir(d))).unwrap();
        let c = Consumer { home, target: base.join("consumer-target"), path };
        c.assert_no_gpu_sdk();
        (c, lock)
    }

    fn command(&self, program: &str, dir: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(dir).env_clear();
        cmd.env("PATH", &self.path).env("CARGO_HOME", &self.home).env("CARGO_TARGET_DIR", &self.target).env("CARGO_TERM_COLOR", "never");
        common::lean_consumer_build(&mut cmd);
        for keep in [
            "HOME",
            "TMPDIR",
            "RUSTUP_HOME",
            "RUSTUP_TOOLCHAIN",
            "SSL_CERT_FILE",
            "SSL_CERT_DIR",
            "http_proxy",
            "https_proxy",
            "HTTP_PROXY",
            "HTTPS_PROXY",
        ] {
            if let Some(v) = std::env::var_os(keep) {
                cmd.env(keep, v);
            }
        }
        // cudarc (under candle-core, and under the drop-in's `cudarc` feature) needs a CUDA
        // version at build time; with no nvcc here, the variable gives it, as it must for users.
        cmd.env("CUDARC_CUDA_VERSION", "12040");
        // The registry is on loopback, never behind a proxy.
        let no_proxy = std::env::var("no_proxy").or_else(|_| std::env::var("NO_PROXY")).map_or("127.0.0.1".to_string(), |v| format!("{v},127.0.0.1"));
        cmd.env("no_proxy", &no_proxy).env("NO_PROXY", &no_proxy);
        cmd
    }

    fn cargo(&self, dir: &Path, args: &[&str]) -> Output {
        let start = Instant::now();
        let out = self.command("cargo", dir).args(args).output().expect("cargo runs");
        eprintln!("cargo {} in {}: {:.1?}", args.join(" "), dir.display(), start.elapsed());
        out
    }

    /// The machine and the environment have no GPU compiler to find: not on
    /// PATH, nor where candle-kernels' build (cudaforge) or cudarc look.
    fn assert_no_gpu_sdk(&self) {
        for tool in ["nvcc", "hipcc"] {
            let out = self.command("sh", Path::new("/")).args(["-c", &format!("command -v {tool}")]).output().unwrap();
            assert!(
                !out.status.success(),
                "{tool} is on the consumer's PATH ({}): this test needs a machine without it",
                String::from_utf8_lossy(&out.stdout).trim()
            );
        }
        for standard in
            ["/usr/local/cuda/bin/nvcc", "/opt/cuda/bin/nvcc", "/usr/lib/cuda/bin/nvcc", "/usr/bin/nvcc", "/opt/rocm/bin/hipcc", "/usr/bin/hipcc"]
        {
            assert!(!Path::new(standard).exists(), "{standard} exists: this test shows builds on a machine without CUDA or ROCm, run it on one");
        }
    }
}

/// Hard links (else copies) of the `.crate` files in the local cargo cache,
/// so that the consumers download from crates.io only what it lacks.
fn seed_crates_io_cache(home: &Path) {
    let Ok(rd) = fs::read_dir(real_cargo_home().join("registry/cache")) else { return };
    for dir in rd.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("index.crates.io-")) {
        let to = home.join("registry/cache").join(dir.file_name());
        fs::create_dir_all(&to).unwrap();
        for f in fs::read_dir(dir.path()).unwrap().flatten() {
            let dest = to.join(f.file_name());
            if !dest.exists() && fs::hard_link(f.path(), &dest).is_err() {
                let _ = fs::copy(f.path(), &dest);
            }
        }
    }
}

/// A consumer crate at `dir`: `deps` and `extra` go into its Cargo.toml.
fn consumer_crate(dir: &Path, name: &str, deps: &str, extra: &str, main_rs: &str) {
    fs::create_dir_all(dir.join("src")).unwrap();
    fs::write(
        dir.join("Cargo.toml"),
        format!("[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\npublish = false\n\n[dependencies]\n{deps}\n{extra}\n[workspace]\n"),
    )
    .unwrap();
    fs::write(dir.join("src/main.rs"), main_rs).unwrap();
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325, |h, b| (h ^ *b as u64).wrapping_mul(0x100000001b3))
}

/// The names of candle's modules, in the manifest's order of first PTX.
fn modules(m: &Manifest) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for a in m.artifacts.iter().filter(|a| a.kind == Kind::Ptx) {
        if !v.contains(&a.module) {
            v.push(a.module.clone());
        }
    }
    v
}

/// A program over the drop-in API (plus `kiln`), printing what the test
/// checks against the dist folder: every module's PTX (length, hash, first
/// line, `.target`), the manifest's artifact counts and toolchain identity,
/// and an `ffi` function's address, which links the static library and the
/// static CUDA runtime for real.
fn program(krate: &str, modules: &[String]) -> String {
    let consts: Vec<String> = modules.iter().map(|m| format!("(\"{m}\", &k::{})", m.to_uppercase())).collect();
    format!(
        r#"use {krate} as k;

fn fnv1a(bytes: &[u8]) -> u64 {{
    bytes.iter().fold(0xcbf29ce484222325, |h, b| (h ^ *b as u64).wrapping_mul(0x100000001b3))
}}

fn main() {{
    println!("ids {{}}", k::ALL_IDS.len());
    println!("level {{}}", k::kiln::chosen_ptx_level());
    let modules: [(&str, &k::Module); {n}] = [{consts}];
    for (name, m) in modules {{
        let ptx = m.ptx();
        let first = ptx.lines().next().unwrap_or("");
        let target = ptx.lines().find(|l| l.starts_with(".target")).unwrap_or("none");
        println!("ptx {{name}} {{}} {{}} {{:016x}} {{first}} | {{target}}", m.index(), ptx.len(), fnv1a(ptx.as_bytes()));
    }}
    let mut kinds = std::collections::BTreeMap::new();
    for a in &k::kiln::manifest().artifacts {{
        *kinds.entry(format!("{{:?}}", a.kind).to_lowercase()).or_insert(0) += 1;
    }}
    for (kind, n) in kinds {{
        println!("artifacts {{kind}} {{n}}");
    }}
    println!("toolchain {{}}", k::kiln::toolchain().identity);
    let f = k::ffi::moe_gemm_wmma as *const ();
    println!("ffi {{}}", f as usize);
}}
"#,
        n = modules.len(),
        consts = consts.join(", ")
    )
}

/// Builds and runs the consumer; checks its output against the dist folder.
fn build_run_check(c: &Consumer, dir: &Path, bin: &str) -> String {
    let build = c.cargo(dir, &["build"]);
    assert!(build.status.success(), "the consumer did not build:\n{}", text(&build));
    let stderr = String::from_utf8_lossy(&build.stderr);
    assert!(!stderr.contains("was not used in the crate graph"), "a patch was left unused:\n{stderr}");
    let exe = c.target.join("debug").join(bin);
    let run = c.command(exe.to_str().unwrap(), dir).output().unwrap();
    let out = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(run.status.success(), "the consumer failed:\n{}", text(&run));
    check_output(&out);
    check_needed(&exe);
    out
}

fn check_output(out: &str) {
    let dist = dist();
    let m = manifest(&dist);
    let mods = modules(&m);
    let field = |key: &str| -> String {
        out.lines().find_map(|l| l.strip_prefix(&format!("{key} "))).unwrap_or_else(|| panic!("no `{key}` line in:\n{out}")).to_string()
    };
    assert_eq!(field("ids"), mods.len().to_string(), "{out}");
    let level = field("level");
    assert!(m.artifacts.iter().any(|a| a.kind == Kind::Ptx && a.arch == level), "chosen PTX level {level} is not in the manifest");
    let sm = level.replace("compute_", "sm_");
    for (i, name) in mods.iter().enumerate() {
        let line = field(&format!("ptx {name}"));
        let expected = fs::read(dist.join(format!("cuda/{level}/{name}.ptx"))).unwrap();
        let first = String::from_utf8_lossy(&expected).lines().next().unwrap_or("").to_string();
        assert_eq!(
            line,
            format!("{i} {} {:016x} {first} | .target {sm}", expected.len(), fnv1a(&expected)),
            "{name}: Module::ptx() is not dist's cuda/{level}/{name}.ptx"
        );
    }
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for a in &m.artifacts {
        *kinds.entry(format!("{:?}", a.kind).to_lowercase()).or_default() += 1;
    }
    for (kind, n) in &kinds {
        assert_eq!(field(&format!("artifacts {kind}")), n.to_string(), "every {kind} of the dist is carried (all features on):\n{out}");
    }
    assert_eq!(field("toolchain"), m.toolchain.identity);
    assert_ne!(field("ffi"), "0", "ffi::moe_gemm_wmma has no address");
}

/// The executable's shared libraries: system ones only. The static library
/// and NVIDIA's static CUDA runtime are inside; libcuda is opened at run time.
fn check_needed(exe: &Path) {
    let needed = needed(exe);
    eprintln!("{} needs {needed:?}", exe.display());
    for lib in &needed {
        let l = lib.to_lowercase();
        assert!(!["cuda", "nvrtc", "cublas", "hip", "amd", "roc"].iter().any(|w| l.contains(w)), "{} needs {lib}", exe.display());
    }
    assert!(needed.iter().any(|l| l.starts_with("libstdc++")), "the static library's C++ runtime is linked: {needed:?}");
}

/// The packages of every unit a `cargo build --message-format=json...` built
/// (fresh or not: each is a compiler-artifact message naming its package).
fn built_packages(stdout: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact")
        .filter_map(|v| Some(v["package_id"].as_str()?.rsplit_once('#')?.1.split('@').next()?.to_string()))
        .collect()
}

/// Whether crate `name` is a link part of the static library's host code for
/// another CPU than this machine's (`kiln-candle-kernels-ffi-aarch64-0` here).
fn another_cpus_part(name: &str) -> bool {
    use kiln_manifest::kiln_target::host_object::HOSTS;
    let main = "kiln-candle-kernels";
    HOSTS.iter().filter(|h| h.cpu != std::env::consts::ARCH).any(|h| {
        let stem = kiln_package::slices::crate_stem(main, h);
        (0..64).any(|i| name == kiln_package::slices::link_crate(main, &stem, i))
    })
}

fn version_req(version: &str) -> String {
    format!("={}", version.split('+').next().unwrap())
}

// ---- the tests -----------------------------------------------------------

#[test]
fn fresh_consumer_resolves_and_builds_with_no_gpu_sdk() {
    let dist = dist();
    let recs = records(&dist);
    let main = record(&recs, "kiln-candle-kernels");
    let tmp = Temp::new("consumer");
    let server = registry_with_everything(&tmp.0.join("registry"));
    let (c, _lock) = Consumer::new("plain", &server.index_url());
    let dir = tmp.0.join("consumer");
    let deps = format!("kiln-candle-kernels = {{ version = \"{}\", registry = \"kiln\" }}", version_req(&main.version));
    consumer_crate(&dir, "plain-consumer", &deps, "", &program("kiln_candle_kernels", &modules(&manifest(&dist))));
    let out = build_run_check(&c, &dir, "plain-consumer");
    eprintln!("{out}");

    let tree = c.cargo(&dir, &["tree", "--prefix", "none", "--edges", "normal,build"]);
    let tree = String::from_utf8_lossy(&tree.stdout).into_owned();
    // Every crate but the shim (whose name is in the others'), and NVIDIA's runtime crate, packaged
    // for kiln-candle-flash-attn's library: candle's own runs on the drop-in's runtime.
    // The static library's parts of another CPU are dependencies only of a build for that CPU.
    for r in recs.iter().filter(|r| r.name != "candle-kernels") {
        let in_graph = tree.lines().any(|l| l.starts_with(&format!("{} v{} (registry `kiln`)", r.name, r.version)));
        assert_eq!(in_graph, r.name != CUDART && !another_cpus_part(&r.name), "{} in the graph: {in_graph}\n{tree}", r.name);
    }
}

/// The crate of NVIDIA's static CUDA runtime, which only kiln-candle-flash-attn's library links.
const CUDART: &str = "kiln-candle-kernels-cudart";

#[test]
fn drop_in_replaces_upstream_through_patch() {
    let dist = dist();
    let recs = records(&dist);
    let shim = record(&recs, "candle-kernels");
    let tmp = Temp::new("drop-in");
    let server = registry_with_everything(&tmp.0.join("registry"));
    let (c, _lock) = Consumer::new("drop-in", &server.index_url());
    let main_rs = program("candle_kernels", &modules(&manifest(&dist)));
    let upstream = "candle-kernels = \"0.11.1\"";

    // Upstream's own crate needs nvcc in its build script, which is not there.
    let plain = tmp.0.join("upstream");
    consumer_crate(&plain, "upstream-consumer", upstream, "", &main_rs);
    let failed = c.cargo(&plain, &["build"]);
    let log = text(&failed);
    assert!(!failed.status.success(), "upstream candle-kernels built without nvcc?\n{log}");
    assert!(log.contains("candle-kernels v0.11.1") && log.contains("nvcc") && log.contains("failed to run custom build command"), "{log}");

    // The documented patch: upstream's name, from the registry.
    let patched = tmp.0.join("patched");
    let patch = format!("[patch.crates-io]\ncandle-kernels = {{ version = \"{}\", registry = \"kiln\" }}\n", version_req(&shim.version));
    consumer_crate(&patched, "patched-consumer", upstream, &patch, &main_rs);
    let out = build_run_check(&c, &patched, "patched-consumer");
    eprintln!("{out}");
    let tree = c.cargo(&patched, &["tree", "--edges", "normal,build"]);
    let tree = String::from_utf8_lossy(&tree.stdout).into_owned();
    assert!(tree.contains(&format!("candle-kernels v{} (registry `kiln`)", shim.version)), "{tree}");
    assert!(tree.contains(&format!("kiln-candle-kernels v{} (registry `kiln`)", shim.version)), "{tree}");
    assert!(!tree.contains("cudaforge") && !tree.contains("candle-kernels v0.11.1\n"), "upstream's crate is still in the graph:\n{tree}");

    // The same patch by path, at the generated sources dist keeps.
    let vendored = tmp.0.join("vendored");
    let sources = dist.join("crates/src/shim");
    assert!(sources.join("Cargo.toml").is_file(), "dist keeps no generated sources at {}", sources.display());
    let patch = format!("[patch.crates-io]\ncandle-kernels = {{ path = \"{}\" }}\n", sources.display());
    consumer_crate(&vendored, "vendored-consumer", upstream, &patch, &main_rs);
    build_run_check(&c, &vendored, "vendored-consumer");
    let tree = c.cargo(&vendored, &["tree", "--prefix", "none"]);
    let tree = String::from_utf8_lossy(&tree.stdout).into_owned();
    assert!(tree.contains(&format!("candle-kernels v{} ({})", shim.version, sources.display())), "{tree}");

    // The .crate files alone, unpacked: their manifests name each other by
    // version (as if on crates.io), so every one of them is patched in.
    let unpacked = tmp.0.join("unpacked");
    let vendor = unpacked.join("vendor");
    let mut patch = String::from("[patch.crates-io]\n");
    let recs: Vec<&Record> = recs.iter().filter(|r| r.name != CUDART).collect();
    for r in &recs {
        let bytes = fs::read(dist.join(&r.file)).unwrap();
        tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..])).unpack(&vendor).unwrap();
        patch.push_str(&format!("{} = {{ path = \"vendor/{}-{}\" }}\n", r.name, r.name, r.version));
    }
    touch_all(&vendor);
    consumer_crate(&unpacked, "unpacked-consumer", upstream, &patch, &main_rs);
    build_run_check(&c, &unpacked, "unpacked-consumer");
    let tree = c.cargo(&unpacked, &["tree", "--prefix", "none"]);
    let tree = String::from_utf8_lossy(&tree.stdout).into_owned();
    for r in recs.iter().filter(|r| !another_cpus_part(&r.name)) {
        assert!(
            tree.contains(&format!("{} v{} ({}/{}-{})", r.name, r.version, vendor.display(), r.name, r.version)),
            "{} is not from vendor/:\n{tree}",
            r.name
        );
    }
}

/// Sets every file below `dir` to now. Unpacked `.crate` files all carry
/// cargo package's fixed 2006 mtime, and cargo names a path crate's build by
/// its path relative to the workspace (`vendor/<name>-<version>`), the same in
/// every run: without this, the shared consumer target would take an earlier
/// run's build of another dist's crates of the same version as fresh.
fn touch_all(dir: &Path) {
    for e in fs::read_dir(dir).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() {
            touch_all(&e.path());
        } else {
            fs::File::options().write(true).open(e.path()).unwrap().set_modified(std::time::SystemTime::now()).unwrap();
        }
    }
}

/// A copy of the dist's crates (and manifest) to change, in `to`.
fn copy_dist(to: &Path) -> Vec<Record> {
    let dist = dist();
    fs::create_dir_all(to.join("crates")).unwrap();
    let recs = records(&dist);
    for r in &recs {
        fs::copy(dist.join(&r.file), to.join(&r.file)).unwrap();
    }
    fs::copy(dist.join("crates/crates.json"), to.join("crates/crates.json")).unwrap();
    recs
}

fn write_records(dist: &Path, recs: &[Record]) {
    let json: Vec<serde_json::Value> = recs
        .iter()
        .map(|r| serde_json::json!({ "name": r.name, "version": r.version, "file": r.file, "size": r.size, "sha256": r.sha256 }))
        .collect();
    fs::write(dist.join("crates/crates.json"), serde_json::to_string_pretty(&json).unwrap()).unwrap();
}

/// `crate_file` rebuilt with one more file at `extra` (a real, consistent
/// package that differs from what dist made).
fn repack(crate_file: &Path, extra: &str, bytes: &[u8]) {
    let original = fs::read(crate_file).unwrap();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&original[..]));
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default()));
    let mut prefix = String::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().into_owned();
        prefix = path.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
        let mut header = entry.header().clone();
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut data).unwrap();
        builder.append_data(&mut header, &path, &data[..]).unwrap();
    }
    let mut header = tar::Header::new_gnu();
    header.set_size(bytes.len() as u64);
    header.set_mode(0o644);
    builder.append_data(&mut header, format!("{prefix}/{extra}"), bytes).unwrap();
    fs::write(crate_file, builder.into_inner().unwrap().finish().unwrap()).unwrap();
}

fn update_record(dist: &Path, recs: &mut [Record], name: &str) {
    let r = recs.iter_mut().find(|r| r.name == name).unwrap();
    let bytes = fs::read(dist.join(&r.file)).unwrap();
    r.size = bytes.len() as u64;
    r.sha256 = kiln_publish::packaged::sha256_hex(&bytes);
    write_records(dist, recs);
}

fn uploads(registry: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![registry.join("crates"), registry.join("index")];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                found.push(e.path().strip_prefix(registry).unwrap().display().to_string());
            }
        }
    }
    found
}

/// Bytes that zstd and gzip cannot shrink.
fn noise(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e3779b97f4a7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn dry_run_uploads_nothing_and_refusals_are_clear() {
    let tmp = Temp::new("refusals");
    let reg_dir = tmp.0.join("registry");
    let server = Server::start(&reg_dir, "127.0.0.1:0", server::Options { token: Some(TOKEN.into()), ..Default::default() }).unwrap();
    let dist = dist();
    let recs = records(&dist);

    // The dry run: every crate with its size, sha256 and dependencies, in
    // dependency order; nothing sent (no token needed either).
    let out = publish(&server, &[], None);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    assert!(log.contains(&format!("dry run: would publish to registry `kiln` ({}", server.index_url())), "{log}");
    assert!(log.contains("dry run: nothing uploaded; pass --execute to upload"), "{log}");
    let position =
        |name: &str, version: &str| log.find(&format!(". {name} {version} ")).unwrap_or_else(|| panic!("{name} is not in the plan:\n{log}"));
    for r in &recs {
        let line = log.lines().find(|l| l.contains(&format!(". {} {} ", r.name, r.version))).unwrap();
        assert!(line.contains(&format!("{} bytes  sha256 {}  [new]", r.size, r.sha256)), "{line}");
    }
    let v = &record(&recs, "kiln-candle-kernels").version;
    let m = &record(&recs, "kiln-manifest").version;
    assert!(position("kiln-manifest", m) < position("kiln-candle-kernels", v));
    assert!(position("kiln-candle-kernels-ffi-0", v) < position("kiln-candle-kernels", v));
    assert!(position("kiln-candle-kernels-sm90", v) < position("kiln-candle-kernels", v));
    assert!(position("kiln-candle-kernels", v) < position("candle-kernels", v));
    assert!(log.contains("licence file LICENSE-NVIDIA; deps: (build) ruzstd ^0.9, (build) sha2 ^0.10"), "{log}");
    assert!(log.contains(&format!("kiln-manifest ={m} (this registry)")), "{log}");
    assert_eq!(uploads(&reg_dir), Vec::<String>::new(), "the dry run uploaded");

    // --execute without a token: refused before anything is sent.
    let out = publish(&server, &["--execute"], None);
    assert!(!out.status.success() && text(&out).contains("no token for registry `kiln`: set CARGO_REGISTRIES_KILN_TOKEN"), "{}", text(&out));
    // A token the registry does not accept: its answer, and nothing stored.
    let out = publish(&server, &["--execute"], Some("wrong"));
    let log = text(&out);
    assert!(!out.status.success() && log.contains("HTTP 403") && log.contains("nothing was uploaded"), "{log}");
    assert_eq!(uploads(&reg_dir), Vec::<String>::new());

    // A tampered .crate: named, with both hashes, nothing uploaded.
    let tampered = tmp.0.join("tampered");
    copy_dist(&tampered);
    let victim = record(&recs, "kiln-candle-kernels-sm80");
    let path = tampered.join(&victim.file);
    let mut bytes = fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    fs::write(&path, &bytes).unwrap();
    let out = publish(&server, &["--execute", "--dist", tampered.to_str().unwrap()], Some(TOKEN));
    let log = text(&out);
    assert!(!out.status.success(), "{log}");
    assert!(
        log.contains(&format!(
            "{}: sha256 is {}, but crates.json records {}",
            path.display(),
            kiln_publish::packaged::sha256_hex(&bytes),
            victim.sha256
        )),
        "{log}"
    );
    assert!(log.contains("refusing to publish") && log.contains("rerun `cargo xtask dist`"), "{log}");
    assert_eq!(uploads(&reg_dir), Vec::<String>::new());

    // A .crate over the limit, consistent with its record: refused by the
    // plan, dry run or not; and by the registry, when sent anyway.
    let big = tmp.0.join("big");
    let mut big_recs = copy_dist(&big);
    let small = record(&recs, "kiln-manifest").clone();
    repack(&big.join(&small.file), "padding.bin", &noise(kiln_publish::UPLOAD_LIMIT as usize + 1024));
    update_record(&big, &mut big_recs, "kiln-manifest");
    let size = record(&big_recs, "kiln-manifest").size;
    assert!(size > kiln_publish::UPLOAD_LIMIT);
    for args in [vec![], vec!["--execute"]] {
        let mut args = args;
        args.extend(["--dist", big.to_str().unwrap()]);
        let out = publish(&server, &args, Some(TOKEN));
        let log = text(&out);
        assert!(!out.status.success(), "{log}");
        assert!(log.contains(&format!("kiln-manifest {}: {size} bytes, over the 10485760-byte upload limit of crates.io", small.version)), "{log}");
        assert!(log.contains("nothing uploaded"), "{log}");
    }
    assert_eq!(uploads(&reg_dir), Vec::<String>::new());
    let packaged = kiln_publish::packaged::load(&big).unwrap();
    let p = packaged.iter().find(|p| p.name() == "kiln-manifest").unwrap();
    let family = [p.name().to_string()].into();
    let sources = kiln_publish::metadata::Sources { family: &family, target_index: "http://x/", target_is_crates_io: false };
    let body = kiln_publish::metadata::encode(&kiln_publish::metadata::new_crate(p, &sources).unwrap(), &p.bytes).unwrap();
    let r = kiln_publish::http::put(&format!("http://{}/api/v1/crates/new", server.addr()), &body, Some(TOKEN)).unwrap();
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(r.text().contains("max upload size is: 10485760"), "{}", r.text());
    assert_eq!(uploads(&reg_dir), Vec::<String>::new());

    // Published for real, a rerun uploads nothing; a different crate under
    // a version already there is refused before anything is sent.
    let out = publish(&server, &["--execute"], Some(TOKEN));
    assert!(out.status.success(), "{}", text(&out));
    let stored = uploads(&reg_dir).len();
    let out = publish(&server, &["--execute"], Some(TOKEN));
    let log = text(&out);
    assert!(out.status.success() && log.contains(&format!("done: 0 uploaded, {} already there, 0 skipped", recs.len())), "{log}");
    let changed = tmp.0.join("changed");
    let mut changed_recs = copy_dist(&changed);
    repack(&changed.join(&small.file), "NOTES.txt", b"a different build of the same version\n");
    update_record(&changed, &mut changed_recs, "kiln-manifest");
    let out = publish(&server, &["--execute", "--dist", changed.to_str().unwrap()], Some(TOKEN));
    let log = text(&out);
    assert!(!out.status.success(), "{log}");
    assert!(
        log.contains(&format!("kiln-manifest {}: the registry already has kiln-manifest {} with other contents", small.version, small.version)),
        "{log}"
    );
    assert!(log.contains("a new revision needs a new version"), "{log}");
    assert_eq!(uploads(&reg_dir).len(), stored, "something was uploaded");
}

/// A dry run against a registry that cannot be read still prints its plan,
/// and its last line (where a reader looks) says so: it is no all-clear.
#[test]
fn dry_run_against_an_unreachable_registry_says_so_on_its_summary_line() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let index = format!("sparse+http://{closed}/index/");
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["publish", "--registry", "kiln", "--dist"])
        .arg(dist())
        .env("CARGO_REGISTRIES_KILN_INDEX", &index)
        .env_remove("CARGO_REGISTRIES_KILN_TOKEN")
        .output()
        .unwrap();
    let log = text(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
    assert!(last.starts_with("dry run: nothing uploaded; registry `kiln` could not be read ("), "{log}");
    assert!(last.contains(&closed.to_string()) && last.contains("--execute will stop"), "{last}");
    assert!(log.contains("[?]"), "the plan is still printed, each crate's state unknown:\n{log}");
}

// ---- the quick start -------------------------------------------------------

fn quick_start(which: &str) -> PathBuf {
    repo().join("examples/quick-start").join(which)
}

/// A copy of an example project (its files only, no build output) in `to`.
fn copy_example(which: &str, to: &Path) {
    for rel in ["Cargo.toml", ".cargo/config.toml", "src/main.rs"] {
        let dest = to.join(rel);
        fs::create_dir_all(dest.parent().unwrap()).unwrap();
        fs::copy(quick_start(which).join(rel), &dest).unwrap();
    }
}

/// Where the drop-in's first link crate's build script made its stand-ins.
fn stand_ins(target: &Path) -> PathBuf {
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = fs::read_dir(target.join("debug/build"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("kiln-candle-kernels-ffi-0-"))
        .map(|e| e.path().join("out/kiln-cuda-stubs/run"))
        .filter(|d| d.join("libcuda.so.1").is_file())
        .map(|d| (fs::metadata(d.join("libcuda.so.1")).unwrap().modified().unwrap(), d))
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| panic!("no kiln-cuda-stubs folder under {}/debug/build", target.display())).1
}

fn needed(exe: &Path) -> Vec<String> {
    use object::read::elf::{Dyn, FileHeader, SectionTable};
    let data = fs::read(exe).unwrap();
    let header = object::elf::FileHeader64::<object::Endianness>::parse(&*data).unwrap();
    let endian = header.endian().unwrap();
    let sections: SectionTable<'_, object::elf::FileHeader64<object::Endianness>> = header.sections(endian, &*data).unwrap();
    let (dynamic, link) = sections.dynamic(endian, &*data).unwrap().expect("a dynamically linked executable");
    let strings = sections.strings(endian, &*data, link).unwrap();
    dynamic
        .iter()
        .filter(|d| d.tag32(endian) == Some(object::elf::DT_NEEDED))
        .map(|d| String::from_utf8_lossy(d.string(endian, strings).unwrap()).into_owned())
        .collect()
}

/// docs/consuming.md's quick start, as a user follows it on a machine with no
/// CUDA toolkit, nvcc, ROCm or hipcc: the example project (candle-core with
/// `cuda`, kiln's drop-in, the registry) builds from the registry with only
/// its own two files of settings, links against the stand-ins kiln's CUDA
/// runtime crate makes, and runs (no GPU here: it says so and computes on the
/// CPU). Without the stand-ins nothing here provides libcuda: they are what
/// makes it link. The ROCm example builds and prints
/// what a HIP host would load, checked against the dist.
#[test]
fn quick_start_examples_build_and_run_with_no_gpu_sdk() {
    let dist = dist();
    let m = manifest(&dist);
    let tmp = Temp::new("quick-start");
    let server = registry_with_everything(&tmp.0.join("registry"));
    let (c, _lock) = Consumer::new("quick-start", &server.index_url());
    // As the user would: the example's own settings, with its registry line
    // pointing where this registry is (the environment beats config files).
    let cargo = |dir: &Path, args: &[&str]| {
        let start = Instant::now();
        let mut cmd = c.command("cargo", dir);
        cmd.args(args).env("CARGO_REGISTRIES_KILN_INDEX", server.index_url()).env_remove("CUDARC_CUDA_VERSION");
        let out = cmd.output().unwrap();
        eprintln!("cargo {} in {}: {:.1?}", args.join(" "), dir.display(), start.elapsed());
        out
    };

    let cuda = tmp.0.join("cuda");
    copy_example("cuda", &cuda);
    let build = cargo(&cuda, &["build"]);
    assert!(build.status.success(), "the quick start did not build:\n{}", text(&build));
    let log = String::from_utf8_lossy(&build.stderr);
    assert!(!log.contains("was not used in the crate graph"), "the patch was left unused:\n{log}");
    eprintln!("not narrowed, downloaded from kiln's registry: {}", download_summary(&kiln_downloads(&c, &records(&dist))));
    let exe = c.target.join("debug/quick-start-cuda");
    let needed = needed(&exe);
    // As linked against NVIDIA's libraries: their sonames (those the program calls; the linker drops the rest).
    let sonames = ["libcuda.so.1", "libnvrtc.so.12", "libcurand.so.10", "libcublas.so.12", "libcublasLt.so.12"];
    assert!(needed.iter().any(|n| n == "libcuda.so.1"), "{} should need libcuda.so.1: {needed:?}", exe.display());
    for n in needed.iter().filter(|n| ["cuda", "nvrtc", "curand", "cublas"].iter().any(|w| n.contains(w))) {
        assert!(sonames.contains(&n.as_str()), "{} needs {n}, not a soname of NVIDIA's CUDA 12 libraries: {needed:?}", exe.display());
    }
    let stubs = stand_ins(&c.target);
    let run = c.command(exe.to_str().unwrap(), &cuda).env("LD_LIBRARY_PATH", &stubs).output().unwrap();
    let out = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(run.status.success(), "the quick start failed:\n{}", text(&run));
    assert!(out.contains(&format!("kiln kernels: {} artifacts, toolchain {}", m.artifacts.len(), m.toolchain.identity)), "{out}");
    assert!(out.contains("no CUDA device (") && out.contains("kiln link stand-in"), "{out}");
    assert!(out.contains("Cpu: sum((2x+1)^2) for x in 0..6 = 286"), "{out}");

    // Without the stand-ins there is nothing to link against here: the C
    // compiler (the linker rustc calls) finds no libcuda on its own.
    let probe = tmp.0.join("probe.c");
    fs::write(&probe, "int cuInit(unsigned);\nint main(void) { return cuInit(0); }\n").unwrap();
    let linked = c.command("cc", &tmp.0).arg(&probe).arg("-lcuda").arg("-o").arg(tmp.0.join("probe")).output().unwrap();
    assert!(!linked.status.success(), "this machine links -lcuda without kiln's stand-ins: the test proves nothing here");

    build_and_check_rocm_example(&c, &tmp.0.join("rocm"), &server.index_url());
}

/// The `.crate` files the consumer's cargo downloaded from kiln's registry
/// (its CARGO_HOME's cache, which [`Consumer::new`] empties of loopback
/// registries): each record's name with its bytes.
fn kiln_downloads(c: &Consumer, recs: &[Record]) -> BTreeMap<String, u64> {
    let mut found = BTreeMap::new();
    for dir in fs::read_dir(c.home.join("registry/cache")).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with("127.0.0.1-")) {
        for f in fs::read_dir(dir.path()).unwrap().flatten() {
            let file = f.file_name().to_string_lossy().into_owned();
            let r = recs
                .iter()
                .find(|r| file == format!("{}-{}.crate", r.name, r.version))
                .unwrap_or_else(|| panic!("{file} is not a crate of the dist"));
            found.insert(r.name.clone(), f.metadata().unwrap().len());
        }
    }
    found
}

/// "N crates, B bytes: the static library's ffi pieces F bytes (k crates), the rest R bytes".
fn download_summary(downloads: &BTreeMap<String, u64>) -> String {
    let (ffi, rest): (BTreeMap<&String, &u64>, BTreeMap<&String, &u64>) = downloads.iter().partition(|(n, _)| n.contains("-ffi-"));
    let sum = |v: &BTreeMap<&String, &u64>| v.values().copied().sum::<u64>();
    format!(
        "{} crates, {} bytes: the static library's ffi pieces {} bytes ({} crates), the rest {} bytes ({} crates: {})",
        downloads.len(),
        sum(&ffi) + sum(&rest),
        sum(&ffi),
        ffi.len(),
        sum(&rest),
        rest.len(),
        rest.keys().map(|n| n.as_str()).collect::<Vec<_>>().join(", ")
    )
}

/// The optional part crates of GPUs (one per sm and gfx arch) and of the HIP
/// bundles, by name, each with its `kiln_gpu` value (`hip` for the bundles).
fn gpu_parts(m: &Manifest) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = vec![("kiln-candle-kernels-hip".into(), "hip".into())];
    for a in m.artifacts.iter().filter(|a| matches!(a.kind, Kind::Cubin | Kind::Hsaco)) {
        let value = a.arch.replace('_', "");
        if !v.iter().any(|(_, x)| *x == value) {
            v.push((format!("kiln-candle-kernels-{value}"), value));
        }
    }
    v
}

/// The quick start narrowed to an H100 as docs/consuming.md says (its
/// `.cargo/config.toml`'s commented `rustflags` line made a line), from a
/// CARGO_HOME that has nothing of kiln's registry: cargo builds the sm_90
/// part and no other GPU's, and downloads none of them either (the HIP
/// bundles included); the program carries the PTX, sm_90's SASS and the
/// static library, and runs. What it downloaded is printed (docs/packaging.md).
#[test]
fn a_quick_start_narrowed_to_one_gpu_builds_and_downloads_no_other() {
    let dist = dist();
    let m = manifest(&dist);
    let recs = records(&dist);
    let tmp = Temp::new("narrowed");
    let server = registry_with_everything(&tmp.0.join("registry"));
    let (c, _lock) = Consumer::new("narrowed", &server.index_url());
    let cuda = tmp.0.join("cuda");
    copy_example("cuda", &cuda);
    let config_path = cuda.join(".cargo/config.toml");
    let config = fs::read_to_string(&config_path).unwrap();
    let commented = "# rustflags = [\"--cfg\", 'kiln_gpu=\"sm90\"']\n";
    assert!(config.contains(commented), "examples/quick-start/cuda/.cargo/config.toml lacks `{}`:\n{config}", commented.trim());
    fs::write(&config_path, config.replace(commented, &commented[2..])).unwrap();
    // Its own executable: the quick start above shares the target folder (the
    // rustflags give every unit its own files there, but not the program).
    let manifest_path = cuda.join("Cargo.toml");
    let toml = fs::read_to_string(&manifest_path).unwrap().replace("name = \"quick-start-cuda\"", "name = \"quick-start-cuda-sm90\"");
    fs::write(&manifest_path, toml).unwrap();

    let start = Instant::now();
    let build = c
        .command("cargo", &cuda)
        .args(["build", "--message-format=json-render-diagnostics"])
        .env("CARGO_REGISTRIES_KILN_INDEX", server.index_url())
        .env_remove("CUDARC_CUDA_VERSION")
        .output()
        .unwrap();
    eprintln!("cargo build of the narrowed quick start: {:.1?}", start.elapsed());
    assert!(build.status.success(), "the narrowed quick start did not build:\n{}", text(&build));
    let built = built_packages(&build.stdout);
    let downloads = kiln_downloads(&c, &recs);
    for (name, value) in gpu_parts(&m) {
        let wanted = value == "sm90";
        assert_eq!(built.contains(&name), wanted, "{name} built: {} (narrowed to sm90); built: {built:?}", !wanted);
        assert_eq!(downloads.contains_key(&name), wanted, "{name} downloaded: {} (narrowed to sm90); downloaded: {downloads:?}", !wanted);
    }
    for always in ["kiln-candle-kernels", "candle-kernels", "kiln-candle-kernels-ffi-0"] {
        assert!(downloads.contains_key(always) && built.contains(&always.to_string()), "{always} is missing: {downloads:?}");
    }
    // The static library's launchers run on the drop-in's own runtime: NVIDIA's is neither fetched nor linked.
    assert!(!downloads.contains_key(CUDART), "NVIDIA's runtime crate was downloaded: {downloads:?}");
    eprintln!("narrowed to sm90, downloaded from kiln's registry: {}", download_summary(&downloads));

    let exe = c.target.join("debug/quick-start-cuda-sm90");
    let run = c.command(exe.to_str().unwrap(), &cuda).env("LD_LIBRARY_PATH", stand_ins(&c.target)).output().unwrap();
    let out = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(run.status.success(), "the narrowed quick start failed:\n{}", text(&run));
    let carried =
        m.artifacts.iter().filter(|a| matches!(a.kind, Kind::Ptx | Kind::Staticlib) || (a.kind == Kind::Cubin && a.arch == "sm_90")).count();
    assert!(out.contains(&format!("kiln kernels: {carried} artifacts, toolchain {}", m.toolchain.identity)), "{out}");
    assert!(out.contains("Cpu: sum((2x+1)^2) for x in 0..6 = 286"), "{out}");
}

/// Issue 33, "any host": the quick start narrowed to sm_90 and built for
/// `aarch64-unknown-linux-gnu` (Debian's cross gcc as the linker, as
/// docs/consuming.md says) takes the static library's aarch64 part and not the
/// x86_64 one, links (against aarch64 stand-ins the part's build script makes
/// with the target's C compiler), and its aarch64 executable runs under
/// qemu-user: no GPU, so it says so and computes on the CPU. No Arm machine or
/// Arm GPU is involved: this proves the build and the host code's start, not a
/// kernel on Arm hardware.
#[test]
fn the_quick_start_built_for_aarch64_links_and_runs_under_qemu() {
    const TARGET: &str = "aarch64-unknown-linux-gnu";
    let dist = dist();
    let recs = records(&dist);
    let tmp = Temp::new("aarch64");
    let server = registry_with_everything(&tmp.0.join("registry"));
    let (c, _lock) = Consumer::new("aarch64", &server.index_url());
    for (tool, install) in [("aarch64-linux-gnu-gcc", "apt-get install gcc-aarch64-linux-gnu"), ("qemu-aarch64", "apt-get install qemu-user")] {
        let found = c.command("sh", Path::new("/")).args(["-c", &format!("command -v {tool}")]).output().unwrap();
        assert!(found.status.success(), "{tool} is missing: {install} (.ci/setup installs it)");
    }
    let cuda = tmp.0.join("cuda");
    copy_example("cuda", &cuda);
    let config_path = cuda.join(".cargo/config.toml");
    let config = fs::read_to_string(&config_path).unwrap();
    // As docs/consuming.md's "Any host" says: the example's commented [target] table made
    // lines (the target's linker, and its rustflags: candle-core's gemm needs the half
    // precision instructions every NVIDIA Arm CPU has; the GPUs named there too).
    let commented = format!(
        "# [target.{TARGET}]\n# linker = \"aarch64-linux-gnu-gcc\"\n# rustflags = [\"-C\", \"target-feature=+fp16\", \"--cfg\", 'kiln_gpu=\"sm90\"']\n"
    );
    assert!(config.contains(&commented), "examples/quick-start/cuda/.cargo/config.toml lacks:\n{commented}\nin:\n{config}");
    let uncommented: String = commented.lines().map(|l| format!("{}\n", &l[2..])).collect();
    fs::write(&config_path, config.replace(&commented, &uncommented)).unwrap();
    let build = c
        .command("cargo", &cuda)
        .args(["build", "--target", TARGET, "--message-format=json-render-diagnostics"])
        .env("CARGO_REGISTRIES_KILN_INDEX", server.index_url())
        .env_remove("CUDARC_CUDA_VERSION")
        .output()
        .unwrap();
    assert!(
        build.status.success(),
        "the quick start did not build for {TARGET} (is its std installed? rustup target add {TARGET}):\n{}",
        text(&build)
    );
    let built = built_packages(&build.stdout);
    assert!(built.iter().any(|b| b == "kiln-candle-kernels-ffi-aarch64-0"), "the aarch64 part was not built: {built:?}");
    assert!(!built.iter().any(|b| b == "kiln-candle-kernels-ffi-0"), "the x86_64 part was built for an aarch64 program: {built:?}");
    // A cross build downloads what the build machine's own platform would take too:
    // cargo evaluates target-specific dependencies for the host as well (docs/consuming.md).
    eprintln!("built for {TARGET}, downloaded from kiln's registry: {}", download_summary(&kiln_downloads(&c, &recs)));

    let exe = c.target.join(TARGET).join("debug/quick-start-cuda");
    let elf = fs::read(&exe).unwrap();
    assert_eq!(u16::from_le_bytes([elf[18], elf[19]]), 183, "{} is not an aarch64 executable", exe.display());
    let stubs = fs::read_dir(c.target.join(TARGET).join("debug/build"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("kiln-candle-kernels-ffi-aarch64-0-"))
        .map(|e| e.path().join("out/kiln-cuda-stubs/run"))
        .find(|d| d.join("libcuda.so.1").is_file())
        .expect("the aarch64 part's build script made its stand-ins");
    let stand_in = fs::read(stubs.join("libcuda.so.1")).unwrap();
    assert_eq!(u16::from_le_bytes([stand_in[18], stand_in[19]]), 183, "the stand-ins were not made for aarch64");
    // qemu-user runs the aarch64 program on this machine, with Debian's aarch64 glibc as its root.
    let run = c
        .command("qemu-aarch64", &cuda)
        .args(["-L", "/usr/aarch64-linux-gnu"])
        .arg(&exe)
        .env("QEMU_SET_ENV", format!("LD_LIBRARY_PATH={}", stubs.display()))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(run.status.success(), "the aarch64 quick start failed under qemu:\n{}", text(&run));
    assert!(out.contains("no CUDA device (") && out.contains("kiln link stand-in"), "{out}");
    assert!(out.contains("Cpu: sum((2x+1)^2) for x in 0..6 = 286"), "{out}");
}

/// A `kiln_gpu` value kiln does not carry (a typo, a GPU of a later release)
/// stops the build in the main crate's build script, naming the value, the
/// near one it may mean, and every GPU this release carries; nothing is
/// silently built for every GPU instead.
#[test]
fn a_gpu_kiln_does_not_carry_stops_the_build_naming_it_and_the_carried_ones() {
    let dist = dist();
    let m = manifest(&dist);
    let recs = records(&dist);
    let main = record(&recs, "kiln-candle-kernels");
    let tmp = Temp::new("unknown-gpu");
    let server = registry_with_everything(&tmp.0.join("registry"));
    let (c, _lock) = Consumer::new("unknown-gpu", &server.index_url());
    let dir = tmp.0.join("consumer");
    let deps = format!("kiln-candle-kernels = {{ version = \"{}\", registry = \"kiln\" }}", version_req(&main.version));
    consumer_crate(&dir, "unknown-gpu-consumer", &deps, "", "fn main() { println!(\"{}\", kiln_candle_kernels::ALL_IDS.len()); }\n");
    fs::create_dir_all(dir.join(".cargo")).unwrap();
    fs::write(dir.join(".cargo/config.toml"), "[build]\nrustflags = [\"--cfg\", 'kiln_gpu=\"sm91\"', \"--cfg\", 'kiln_gpu=\"sm_90\"']\n").unwrap();
    let build = c.cargo(&dir, &["build"]);
    let log = text(&build);
    assert!(!build.status.success(), "a consumer naming sm91 built:\n{log}");
    assert!(log.contains("failed to run custom build command for `kiln-candle-kernels"), "{log}");
    assert!(log.contains("`kiln_gpu=\"sm91\"` names a GPU this release does not carry\n"), "{log}");
    assert!(log.contains("`kiln_gpu=\"sm_90\"` names a GPU this release does not carry (did you mean `sm90`?)"), "{log}");
    let values = |v: &[String]| v.iter().map(|t| t.replace('_', "")).collect::<Vec<_>>().join(", ");
    let carried = format!("This release carries NVIDIA {} and AMD {}.", values(&m.targets.cuda_sass), values(&m.targets.hip));
    assert!(log.contains(&carried), "expected `{carried}` in:\n{log}");
    assert!(log.contains("rustflags = [\"--cfg\", 'kiln_gpu=\""), "the message shows the line to write:\n{log}");
}

/// The ROCm quick start built from the registry at `index` and run for gfx1100:
/// each module's bundle and selected code object as the dist has them.
fn build_and_check_rocm_example(c: &Consumer, rocm: &Path, index: &str) {
    let dist = dist();
    let m = manifest(&dist);
    copy_example("rocm", rocm);
    let build = c.command("cargo", rocm).arg("build").env("CARGO_REGISTRIES_KILN_INDEX", index).output().unwrap();
    assert!(build.status.success(), "the ROCm quick start did not build:\n{}", text(&build));
    let run = c.command(c.target.join("debug/quick-start-rocm").to_str().unwrap(), rocm).arg("gfx1100").output().unwrap();
    let out = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(run.status.success(), "{}", text(&run));
    for module in ["affine", "unary", "quantized"] {
        let bundle = fs::metadata(dist.join(format!("hip/bundle/{module}.hipfb"))).unwrap().len();
        let a = m.artifacts.iter().find(|a| a.path == format!("hip/gfx1100/{module}.hsaco")).unwrap();
        let line = format!("{module}: bundle {bundle} bytes; for gfx1100: {} ({} bytes, sha256 {})", a.path, a.size, a.sha256);
        assert!(out.contains(&line), "expected `{line}` in:\n{out}");
    }
}

/// docs/consuming.md shows the quick start's settings as they are in
/// examples/quick-start: the files a user copies from the page are the ones
/// the test above builds.
#[test]
fn the_quick_start_in_the_docs_is_the_example_the_tests_build() {
    let doc = fs::read_to_string(repo().join("docs/consuming.md")).unwrap();
    for rel in ["cuda/Cargo.toml", "cuda/.cargo/config.toml", "cuda/src/main.rs"] {
        let file = fs::read_to_string(repo().join("examples/quick-start").join(rel)).unwrap();
        assert!(doc.contains(&file), "docs/consuming.md does not show examples/quick-start/{rel} as it is:\n{file}");
    }
}

// ---- a registry others maintain --------------------------------------------

/// ferro-cargo-registry-server (crates.io, Apache-2.0; docs/registry.md says
/// why this one), started on loopback by kiln-publish's `serve` (what
/// `registry serve` runs) with its own data folder; stopped on drop.
fn start_ferro(data: &Path) -> Ferro {
    let exe = serve::find(std::env::var_os("PATH").as_deref(), Some(&real_cargo_home())).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    Ferro::start(&exe, data, port).unwrap()
}

/// Publishing and consuming against a registry kiln did not write: every
/// crate of the dist uploaded by `cargo xtask publish` to ferro on loopback,
/// a second run uploading nothing, and the ROCm quick start built by cargo
/// from it (the CUDA one needs the same crates, and kiln's loopback registry
/// builds it above).
#[test]
fn publish_and_consume_through_a_registry_others_maintain() {
    let recs = records(&dist());
    let tmp = Temp::new("ferro");
    let ferro = start_ferro(&tmp.0.join("data"));
    let index = ferro.index_url();
    let publish = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_xtask"));
        cmd.arg("publish").args(["--registry", "ferro"]).args(args).arg("--dist").arg(dist());
        // ferro asks no login (its config.json: auth-required false); cargo's publish protocol sends a token anyway.
        cmd.env("CARGO_REGISTRIES_FERRO_INDEX", &index).env("CARGO_REGISTRIES_FERRO_TOKEN", "unused");
        cmd.output().unwrap()
    };
    let out = publish(&["--execute"]);
    let log = text(&out);
    assert!(out.status.success() && log.contains(&format!("done: {} uploaded, 0 already there, 0 skipped", recs.len())), "{log}");
    let out = publish(&["--execute"]);
    let log = text(&out);
    assert!(out.status.success() && log.contains(&format!("done: 0 uploaded, {} already there, 0 skipped", recs.len())), "{log}");

    let (c, _lock) = Consumer::new("ferro", &index);
    build_and_check_rocm_example(&c, &tmp.0.join("rocm"), &index);
}

// ---- `cargo xtask registry serve` -------------------------------------------

/// `cargo xtask registry serve` (the real binary) on a free port: each
/// printed line is stopped at `stop it with Ctrl-C`; then what it says is
/// used as printed. Stopped by SIGTERM to kiln alone on drop.
struct Serving {
    xtask: std::process::Child,
    lines: Vec<String>,
}

impl Serving {
    fn start(dir: &Path) -> Serving {
        let mut xtask = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(["registry", "serve", "--port", "0", "--dir"])
            .arg(dir)
            .env("CARGO_HOME", real_cargo_home())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = xtask.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut serving = Serving { xtask, lines: Vec::new() };
        while serving.lines.last().map(String::as_str) != Some("stop it with Ctrl-C") {
            match rx.recv_timeout(std::time::Duration::from_secs(30)) {
                Ok(line) => serving.lines.push(line),
                Err(e) => panic!("registry serve printed no `stop it with Ctrl-C` line ({e}); it printed:\n{}", serving.lines.join("\n")),
            }
        }
        serving
    }

    /// The line after `label`, trimmed.
    fn after(&self, label: &str) -> &str {
        let at = self.lines.iter().position(|l| l == label).unwrap_or_else(|| panic!("no `{label}` line in:\n{}", self.lines.join("\n")));
        self.lines[at + 1].trim()
    }

    /// ferro's pid, as the line saying what it serves names it.
    fn ferro_pid(&self) -> Option<u32> {
        self.lines.iter().find(|l| l.contains(") serves "))?.split("pid ").nth(1)?.split(')').next()?.parse().ok()
    }

    /// SIGTERM to kiln alone (as `kill` would); its status.
    fn stop(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill").args(["-TERM", &self.xtask.id().to_string()]).status();
        self.xtask.wait().unwrap()
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if matches!(self.xtask.try_wait(), Ok(None)) {
            self.stop();
        }
        // After a failed check: no ferro left behind holding the test's output open.
        if let Some(ferro) = self.ferro_pid().filter(|p| running(*p)) {
            let _ = Command::new("kill").args(["-KILL", &ferro.to_string()]).status();
        }
    }
}

/// Whether a process is running (a zombie, dead but not yet reaped by its new parent, is not).
fn running(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])))
}

/// The lines `registry serve` prints work when copied: its `[registries.kiln]`
/// index and its publish command (run as printed, but for `cargo xtask`, the
/// built binary here, and the dist folder) upload the dist to ferro, whose
/// index then lists each crate with its sha256; it says which tokens it
/// takes; and ferro stops with kiln, even when only kiln is signalled.
#[test]
fn registry_serve_starts_ferro_and_its_printed_lines_publish_then_it_stops_with_kiln() {
    let dist = dist();
    let recs = records(&dist);
    let tmp = Temp::new("serve");
    let started = Instant::now();
    let mut serving = Serving::start(&tmp.0.join("registry"));
    eprintln!("registry serve answered in {:.2?}:\n{}", started.elapsed(), serving.lines.join("\n"));
    let text = serving.lines.join("\n");
    // Its first line, at once, before ferro answers: what it starts, and where.
    let first = format!("starting {} {} (", serve::FERRO, serve::FERRO_VERSION);
    assert!(serving.lines[0].starts_with(&first) && serving.lines[0].contains(&tmp.0.join("registry").display().to_string()), "{text}");
    assert!(text.contains("accepts any token (it has no authentication)"), "{text}");
    assert_eq!(serving.after("in .cargo/config.toml:"), "[registries.kiln]", "{text}");
    let config_index =
        serving.lines.iter().find_map(|l| l.trim().strip_prefix("index = \"")?.strip_suffix('"')).unwrap_or_else(|| panic!("{text}")).to_string();

    // The quick start's projects name the index `registry serve --port 8787` prints.
    let port = config_index.rsplit_once(':').and_then(|(_, p)| p.strip_suffix('/')).unwrap_or_else(|| panic!("no port in {config_index}"));
    for which in ["cuda", "rocm"] {
        let config = fs::read_to_string(quick_start(which).join(".cargo/config.toml")).unwrap();
        let want = format!("index = \"{}\"", config_index.replace(&format!(":{port}/"), ":8787/"));
        assert!(config.contains(&want), "examples/quick-start/{which}/.cargo/config.toml lacks `{want}`:\n{config}");
    }

    // The publish line: VAR=VALUE ... cargo xtask ARGS, nothing else.
    let command = serving.after("publish to it with:");
    let (vars, args) = command.split_once(" cargo xtask ").unwrap_or_else(|| panic!("not a `cargo xtask` line: {command}"));
    let vars: Vec<(&str, &str)> = vars.split(' ').map(|v| v.split_once('=').unwrap_or_else(|| panic!("not VAR=VALUE: {v}"))).collect();
    let env: BTreeMap<&str, &str> = vars.iter().copied().collect();
    assert_eq!(env.get("CARGO_REGISTRIES_KILN_INDEX"), Some(&config_index.as_str()), "the publish line and the config name other indexes: {text}");
    let mut publish = Command::new(env!("CARGO_BIN_EXE_xtask"));
    publish.args(args.split(' ')).arg("--dist").arg(&dist).current_dir(repo()).envs(vars).env_remove("CARGO_REGISTRY_TOKEN");
    let out = publish.output().unwrap();
    let log = self::text(&out);
    assert!(out.status.success() && log.contains(&format!("done: {} uploaded, 0 already there, 0 skipped", recs.len())), "{log}");

    // ferro's index, read where the config line says, lists what was packaged.
    for r in recs.iter().take(3) {
        let url = format!("{}{}", config_index.trim_start_matches("sparse+"), kiln_publish::registry::index_path(&r.name));
        let body = kiln_publish::http::get(&url, None).unwrap();
        assert_eq!(body.status, 200, "{url}");
        let entry: serde_json::Value = serde_json::from_slice(body.body.split(|b| *b == b'\n').next().unwrap()).unwrap();
        assert_eq!((entry["vers"].as_str(), entry["cksum"].as_str()), (Some(r.version.as_str()), Some(r.sha256.as_str())), "{url}");
    }

    let ferro = serving.ferro_pid().unwrap_or_else(|| panic!("no `(..., pid N) serves` line: {text}"));
    assert!(running(ferro), "ferro (pid {ferro}) is not running while kiln serves");
    let status = serving.stop();
    let end = Instant::now() + std::time::Duration::from_secs(10);
    while running(ferro) && Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!running(ferro), "ferro (pid {ferro}) outlived kiln ({status})");
    assert!(
        kiln_publish::http::get(&format!("{}config.json", config_index.trim_start_matches("sparse+")), None).is_err(),
        "something still answers {config_index}"
    );
    // What ferro wrote is in the folder kiln claimed for it.
    assert!(tmp.0.join("registry/.kiln-owned").is_file() && tmp.0.join("registry/index-state.json").is_file());
}

/// Without ferro (not on PATH, nor in cargo's bin folder), `registry serve`
/// says exactly how to install it, the version `.ci/setup` installs, and
/// touches no folder.
#[test]
fn registry_serve_without_ferro_says_how_to_install_it() {
    let tmp = Temp::new("no-ferro");
    fs::create_dir_all(tmp.0.join("home")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["registry", "serve", "--port", "0", "--dir"])
        .arg(tmp.0.join("registry"))
        .env("PATH", tmp.0.join("home"))
        .env("HOME", tmp.0.join("home"))
        .env_remove("CARGO_HOME")
        .output()
        .unwrap();
    let log = text(&out);
    assert!(!out.status.success(), "{log}");
    assert!(log.contains("ferro-cargo-registry-server (the cargo registry `registry serve` starts) is not installed"), "{log}");
    assert!(log.contains(&format!("  {}\n", serve::install_command())), "{log}");
    assert!(log.contains(&format!("in {}", tmp.0.join("home/.cargo/bin").display())), "{log}");
    assert!(!tmp.0.join("registry").exists(), "a folder was made for a server that never started");
}

/// `.ci/setup` installs the version kiln names (kiln-publish's FERRO_VERSION, the one place it is written).
#[test]
fn ci_setup_installs_the_ferro_version_kiln_names() {
    let setup = fs::read_to_string(repo().join(".ci/setup")).unwrap();
    assert!(setup.contains(&format!("\n  {}\n", serve::install_command())), ".ci/setup does not run `{}`", serve::install_command());
    assert_eq!(setup.matches("ferro-cargo-registry-server --version").count(), 1, ".ci/setup names a ferro version twice");
}

/// `--token` is refused, saying why (ferro checks none), before anything
/// starts; `--help` explains every flag and which tokens the server takes.
#[test]
fn registry_serve_refuses_a_token_it_cannot_check_and_its_help_says_so() {
    let tmp = Temp::new("serve-token");
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["registry", "serve", "--token", "s3cret", "--port", "0", "--dir"])
        .arg(tmp.0.join("registry"))
        .output()
        .unwrap();
    let log = text(&out);
    assert!(!out.status.success() && log.contains("--token: ferro-cargo-registry-server checks no token"), "{log}");
    assert!(!log.contains("s3cret") && !tmp.0.join("registry").exists(), "{log}");
    let help = Command::new(env!("CARGO_BIN_EXE_xtask")).args(["registry", "serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for want in [
        "--dir <DIR>",
        "ferro's blobs and index-state.json",
        "--port <PORT>",
        "0 picks a free one",
        "It accepts every upload, whatever token",
        &serve::install_command(),
    ] {
        assert!(help.contains(want), "`registry serve --help` lacks {want:?}:\n{help}");
    }
}

/// A port already taken is named before ferro starts, and nothing is left running.
#[test]
fn registry_serve_on_a_taken_port_says_so() {
    let tmp = Temp::new("serve-port");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["registry", "serve", "--port", &port, "--dir"])
        .arg(tmp.0.join("registry"))
        .env("CARGO_HOME", real_cargo_home())
        .output()
        .unwrap();
    let log = text(&out);
    assert!(!out.status.success() && log.contains(&format!("cannot listen on 127.0.0.1:{port} (another server on that port? try --port)")), "{log}");
    assert!(!tmp.0.join("registry").exists(), "a folder was made for a server that never started");
}

/// A folder kiln's own server filled before (`registry serve` started it
/// then; same marker): ferro serves it, and kiln says its old crates are not
/// read, so publish again.
#[test]
fn registry_serve_on_a_folder_of_kilns_old_server_says_to_publish_again() {
    let tmp = Temp::new("serve-old");
    let dir = tmp.0.join("registry");
    drop(Server::start(&dir, "127.0.0.1:0", server::Options::default()).unwrap());
    let mut serving = Serving::start(&dir);
    let note = format!("note: {} also holds index/ and crates/ from kiln's own server", dir.display());
    assert!(serving.lines.iter().any(|l| l.starts_with(&note)), "no `{note}` in:\n{}", serving.lines.join("\n"));
    serving.stop();
}
