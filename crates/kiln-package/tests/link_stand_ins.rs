//! The CUDA link stand-ins a consumer without the CUDA toolkit links against
//! (`KILN_CUDA_LINK_STUBS=1`, template `link/stubs.rs`), made here as the CUDA
//! runtime crate's build script makes them, from a small table of the shape
//! kiln generates, with this machine's C compiler: which major they are for,
//! what is refused, that one never passes for "no GPU" where the NVIDIA driver
//! is, and that `cargo run` never loads one ahead of the real library.

#![allow(dead_code)] // the build script's entry, `link_stubs`, runs in the cargo test only

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use kiln_package::link_stubs::{rust_table, StubLib};

// The table's shape is the generated src/link.rs's (checked against
// `rust_table` below); the functions are the build script's own.
const LINK_STUBS: &[StubRow] = &[
    (12, "cublas", "libcublas.so.12", "libcublas.so.12", 1, "pip install nvidia-cublas-cu12", &["cublasCreate_v2", "cublasGetStatusString"]),
    (12, "cuda", "libcuda.so.1", "", 3, "install the NVIDIA driver's libraries", &["cuInit", "cuGetErrorString"]),
    (13, "cublas", "libcublas.so.13", "libcublas.so.13", 1, "pip install 'nvidia-cublas==13.*'", &["cublasCreate_v2", "cublasGetStatusString"]),
];
include!("../template/link/stubs.rs");

fn table() -> Vec<StubLib> {
    LINK_STUBS
        .iter()
        .map(|&(major, lib, soname, node, status, _, functions)| StubLib {
            major,
            lib: lib.into(),
            soname: soname.into(),
            version_node: Some(node.into()),
            status,
            functions: functions.iter().map(|f| f.to_string()).collect(),
        })
        .collect()
}

struct Temp(PathBuf);

impl Temp {
    fn new(label: &str) -> Temp {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("link-stand-ins-{label}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Temp(dir)
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn text(o: &Output) -> String {
    format!("status {:?}\nstdout:\n{}\nstderr:\n{}", o.status.code(), String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn soname_of(path: &Path) -> String {
    let out = Command::new("readelf").arg("-d").arg(path).output().unwrap();
    let s = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = s.lines().find(|l| l.contains("(SONAME)")).unwrap_or_else(|| panic!("{} has no soname:\n{s}", path.display()));
    line.split('[').nth(1).unwrap().trim_end_matches(']').to_string()
}

/// A program calling `cublasCreate_v2`, linked as rustc links candle-core's
/// (`-L<link folder> -lcublas`).
fn program(dir: &Path, link: &Path) -> PathBuf {
    let c = dir.join("prog.c");
    fs::write(
        &c,
        "#include <stdio.h>\nint cublasCreate_v2(void *h);\nint main(void) { printf(\"cublasCreate_v2: %d\\n\", cublasCreate_v2(0)); return 0; }\n",
    )
    .unwrap();
    let exe = dir.join("prog");
    let out = Command::new("cc").arg(&c).arg("-o").arg(&exe).arg("-L").arg(link).arg("-lcublas").output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    exe
}

/// NVIDIA's library as the loader would find it: same soname and version
/// node, and a `cublasCreate_v2` that says it is the real one.
fn fake_real_cublas(dir: &Path, major: u32) -> PathBuf {
    let real = dir.join("real");
    fs::create_dir_all(&real).unwrap();
    let node = format!("libcublas.so.{major}");
    fs::write(real.join("c.c"), "#include <stdio.h>\nint cublasCreate_v2(void *h) { (void)h; puts(\"the real libcublas\"); return 0; }\n").unwrap();
    fs::write(real.join("v.map"), format!("{node} {{ global: *; }};\n")).unwrap();
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", &format!("-Wl,-soname,{node}"), &format!("-Wl,--version-script={}", real.join("v.map").display()), "-o"])
        .arg(real.join(&node))
        .arg(real.join("c.c"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    real
}

#[test]
fn the_table_kiln_generates_has_the_shape_the_build_script_reads() {
    let generated = rust_table(&table());
    assert!(generated.starts_with("pub const LINK_STUBS: &[(u32, &str, &str, &str, i32, &str, &[&str])] = &[\n"), "{generated}");
}

/// Rule 1: the stand-ins are the major CUDARC_CUDA_VERSION names: CUDA 13's
/// sonames for 13000, CUDA 12's for 12040.
#[test]
fn cudarc_cuda_version_picks_the_major_of_the_stand_ins() {
    for (version, soname) in [("13000", "libcublas.so.13"), ("12040", "libcublas.so.12"), ("13020", "libcublas.so.13")] {
        let t = Temp::new(&format!("major-{version}"));
        let s = make_stand_ins(&t.0, LINK_STUBS, Some("1"), Some(version), "cc").unwrap().expect("asked for");
        assert_eq!(soname_of(&s.link.join("libcublas.so")), soname, "CUDARC_CUDA_VERSION={version}");
        assert!(s.run.join(soname).exists(), "CUDARC_CUDA_VERSION={version}: no {soname} in {}", s.run.display());
        let needed = Command::new("readelf").arg("-d").arg(program(&t.0, &s.link)).output().unwrap();
        assert!(String::from_utf8_lossy(&needed.stdout).contains(&format!("[{soname}]")), "{}", text(&needed));
    }
    let t = Temp::new("off");
    assert!(make_stand_ins(&t.0, LINK_STUBS, None, Some("13000"), "cc").unwrap().is_none());
    assert!(make_stand_ins(&t.0, LINK_STUBS, Some("0"), Some("13000"), "cc").unwrap().is_none());
}

/// The libraries are compiled at once; a C compiler that is missing or fails
/// is an error naming it (and the library it was making), never a panic, and
/// leaves no stand-in under its soname for a program to load.
#[test]
fn a_missing_or_failing_c_compiler_is_named() {
    let t = Temp::new("no-cc");
    let e = make_stand_ins(&t.0, LINK_STUBS, Some("1"), Some("12040"), "/nonexistent/kiln-cc").err().expect("a missing cc accepted");
    assert!(e.contains("cannot run the C compiler `/nonexistent/kiln-cc`") && e.contains("set CC"), "{e}");
    let t = Temp::new("false-cc");
    let e = make_stand_ins(&t.0, LINK_STUBS, Some("1"), Some("12040"), "false").err().expect("a failing cc accepted");
    assert!(e.contains("`false` failed (exit status: 1) making ") && e.contains("kiln-cuda-stubs/link/lib"), "{e}");
    let run = t.0.join("kiln-cuda-stubs/run");
    assert_eq!(std::fs::read_dir(&run).unwrap().count(), 0, "stand-ins under their sonames in {}", run.display());
}

/// Rule 2: a major kiln has no stand-ins for is refused at build time, naming
/// those it has; so is a missing or malformed CUDARC_CUDA_VERSION.
#[test]
fn a_cuda_major_without_stand_ins_is_refused_naming_the_majors_there_are() {
    let t = Temp::new("refused");
    for version in ["11080", "14000"] {
        let e = make_stand_ins(&t.0, LINK_STUBS, Some("1"), Some(version), "cc").err().unwrap_or_else(|| panic!("{version} accepted"));
        let major = &version[..2];
        assert!(
            e.contains(&format!("CUDARC_CUDA_VERSION={version} is CUDA {major}"))
                && e.contains("for CUDA 12 and 13 only")
                && e.contains("12xxx or 13xxx"),
            "{e}"
        );
    }
    let e = make_stand_ins(&t.0, LINK_STUBS, Some("1"), None, "cc").err().expect("no version accepted");
    assert!(e.contains("for CUDA 12 and 13") && e.contains("12xxx or 13xxx"), "{e}");
    let e = make_stand_ins(&t.0, LINK_STUBS, Some("1"), Some("12.4"), "cc").err().expect("12.4 accepted");
    assert!(e.contains("CUDARC_CUDA_VERSION=\"12.4\" is not a CUDA version"), "{e}");
    let e = make_stand_ins(&t.0, LINK_STUBS, Some("maybe"), Some("12040"), "cc").err().expect("maybe accepted");
    assert!(e.contains("KILN_CUDA_LINK_STUBS=\"maybe\""), "{e}");
    assert!(!t.0.join("kiln-cuda-stubs").exists(), "a refused build made stand-ins");
}

/// Rule 3: where the NVIDIA driver is (here: the files the check looks for,
/// injected), a process that loaded a stand-in stops before main, naming the
/// stand-in's path and what to install; without the driver it runs and every
/// call returns "not initialised" (candle's "no CUDA device" path).
#[test]
fn a_stand_in_loaded_where_the_nvidia_driver_is_stops_the_process_naming_itself() {
    let t = Temp::new("driver");
    let s = make_stand_ins(&t.0, LINK_STUBS, Some("1"), Some("12040"), "cc").unwrap().unwrap();
    let exe = program(&t.0, &s.link);
    let driver = t.0.join("nvidiactl");
    fs::write(&driver, "").unwrap();
    let run = |files: &Path| Command::new(&exe).env("LD_LIBRARY_PATH", &s.run).env(DRIVER_FILES_ENV, files).output().unwrap();

    let stopped = run(&driver);
    let err = String::from_utf8_lossy(&stopped.stderr);
    let stand_in = s.run.join("libcublas.so.12");
    assert_eq!(stopped.status.code(), Some(1), "{}", text(&stopped));
    assert!(stopped.stdout.is_empty(), "main ran: {}", text(&stopped));
    assert!(err.contains(&format!("kiln: {} is kiln's link stand-in for libcublas.so.12 (CUDA 12)", stand_in.display())), "{err}");
    assert!(err.contains(&format!("NVIDIA driver ({})", driver.display())) && err.contains("pip install nvidia-cublas-cu12"), "{err}");
    // One whole line (on an H200 the message ended in a `?` where its newline was).
    assert!(err.ends_with("CUDA 12's libraries)\n") && !err.contains('?'), "{err:?}");

    let no_driver = run(&t.0.join("absent"));
    assert!(no_driver.status.success(), "{}", text(&no_driver));
    assert_eq!(String::from_utf8_lossy(&no_driver.stdout), "cublasCreate_v2: 1\n", "{}", text(&no_driver));

    // The error-text functions give the stand-in's message (each function is an alias of one of three bodies).
    let c = t.0.join("text.c");
    fs::write(
        &c,
        "#include <stdio.h>\nint cuGetErrorString(int e, const char **s);\nconst char *cublasGetStatusString(void);\n\
         int main(void) { const char *s = 0; int r = cuGetErrorString(3, &s); printf(\"%d %s|%s\\n\", r, s, cublasGetStatusString()); return 0; }\n",
    )
    .unwrap();
    let text_exe = t.0.join("text");
    let out = Command::new("cc").arg(&c).arg("-o").arg(&text_exe).arg("-L").arg(&s.link).args(["-lcuda", "-lcublas"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let texts = Command::new(&text_exe).env("LD_LIBRARY_PATH", &s.run).env(DRIVER_FILES_ENV, t.0.join("absent")).output().unwrap();
    let message = "kiln link stand-in: the real CUDA library is not installed here";
    assert_eq!(String::from_utf8_lossy(&texts.stdout), format!("0 {message}|{message}\n"), "{}", text(&texts));

    // Without the variable, the driver's own files are looked for.
    let plain = Command::new(&exe).env("LD_LIBRARY_PATH", &s.run).env_remove(DRIVER_FILES_ENV).output().unwrap();
    let has_driver = DRIVER_FILES.split(':').any(|f| Path::new(f).exists());
    assert_eq!(plain.status.code(), Some(if has_driver { 1 } else { 0 }), "driver here: {has_driver}; {}", text(&plain));
}

/// Rule 3: the folder on the link path (which cargo puts on `cargo run`'s
/// library path) never serves a stand-in at run time: the real library is
/// loaded where it is installed, and nothing kiln made is, where it is not.
#[test]
fn the_link_folder_never_serves_a_stand_in_at_run_time() {
    let t = Temp::new("link-folder");
    let s = make_stand_ins(&t.0, LINK_STUBS, Some("1"), Some("12040"), "cc").unwrap().unwrap();
    let mut names: Vec<String> = fs::read_dir(&s.link).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["libcublas.so", "libcuda.so"], "{}", s.link.display());
    let exe = program(&t.0, &s.link);
    let real = fake_real_cublas(&t.0, 12);
    let path = std::env::join_paths([&s.link, &real]).unwrap();
    let run = Command::new(&exe).env("LD_LIBRARY_PATH", &path).output().unwrap();
    assert!(run.status.success(), "{}", text(&run));
    assert_eq!(String::from_utf8_lossy(&run.stdout), "the real libcublas\ncublasCreate_v2: 0\n");
    let alone = Command::new(&exe).env("LD_LIBRARY_PATH", &s.link).output().unwrap();
    assert_eq!(alone.status.code(), Some(127), "{}", text(&alone));
    assert!(String::from_utf8_lossy(&alone.stderr).contains("libcublas.so.12: cannot open shared object file"), "{}", text(&alone));
}

/// Rule 3, through cargo itself: a crate whose build script makes the
/// stand-ins as the CUDA runtime crate's does and whose `main` calls cuBLAS;
/// `cargo run` (which puts the build scripts' link folders on the library
/// path) loads the real library found on LD_LIBRARY_PATH, not the stand-in.
#[test]
fn cargo_run_loads_the_real_library_not_the_stand_in() {
    let t = Temp::new("cargo-run");
    let p = t.0.join("consumer");
    fs::create_dir_all(p.join("src")).unwrap();
    fs::write(
        p.join("Cargo.toml"),
        "[package]\nname = \"stand-in-consumer\"\nversion = \"0.1.0\"\nedition = \"2021\"\nbuild = \"build.rs\"\nlinks = \"stand_in_consumer\"\n\n[workspace]\n",
    )
    .unwrap();
    let stubs = Path::new(env!("CARGO_MANIFEST_DIR")).join("template/link/stubs.rs");
    fs::write(
        p.join("build.rs"),
        format!(
            "{}\ninclude!({:?});\nfn main() {{ link_stubs(std::path::Path::new(&std::env::var(\"OUT_DIR\").unwrap())); }}\n",
            rust_table(&table()),
            stubs.display().to_string()
        ),
    )
    .unwrap();
    fs::write(
        p.join("src/main.rs"),
        "#[link(name = \"cublas\")]\nextern \"C\" { fn cublasCreate_v2(h: *mut u8) -> i32; }\nfn main() { println!(\"cublasCreate_v2: {}\", unsafe { cublasCreate_v2(std::ptr::null_mut()) }); }\n",
    )
    .unwrap();
    let real = fake_real_cublas(&t.0, 12);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let cargo_run = |ld: Option<&Path>| {
        let mut cmd = Command::new(&cargo);
        cmd.args(["run", "--quiet", "--offline"]).current_dir(&p).env("CARGO_TARGET_DIR", t.0.join("target"));
        cmd.env("KILN_CUDA_LINK_STUBS", "1").env("CUDARC_CUDA_VERSION", "12040").env(DRIVER_FILES_ENV, t.0.join("absent"));
        match ld {
            Some(d) => cmd.env("LD_LIBRARY_PATH", d),
            None => cmd.env_remove("LD_LIBRARY_PATH"),
        };
        cmd.output().unwrap()
    };
    let with_real = cargo_run(Some(&real));
    assert!(with_real.status.success(), "{}", text(&with_real));
    // (C's stdout and Rust's are buffered apart: the order of the two lines is not fixed.)
    let out = String::from_utf8_lossy(&with_real.stdout);
    assert!(out.contains("the real libcublas\n") && out.contains("cublasCreate_v2: 0\n"), "{}", text(&with_real));
    // No real library: the loader says which is missing; no stand-in answers.
    let without = cargo_run(None);
    assert!(!without.status.success(), "{}", text(&without));
    assert!(String::from_utf8_lossy(&without.stderr).contains("libcublas.so.12: cannot open shared object file"), "{}", text(&without));
}

/// The stand-ins are made with the build target's C compiler, found as the
/// `cc` crate finds it: a cross build for aarch64 gets Debian's cross gcc
/// (x86_64 stand-ins would not link into an aarch64 program).
#[test]
fn stand_ins_are_made_with_the_targets_c_compiler() {
    let none = |_: &str| None;
    assert_eq!(target_cc("x86_64-unknown-linux-gnu", "x86_64-unknown-linux-gnu", &none), "cc");
    assert_eq!(target_cc("aarch64-unknown-linux-gnu", "x86_64-unknown-linux-gnu", &none), "aarch64-linux-gnu-gcc");
    let cc = |k: &str| (k == "CC").then(|| "clang".to_string());
    assert_eq!(target_cc("x86_64-unknown-linux-gnu", "x86_64-unknown-linux-gnu", &cc), "clang");
    assert_eq!(target_cc("aarch64-unknown-linux-gnu", "x86_64-unknown-linux-gnu", &cc), "aarch64-linux-gnu-gcc", "CC is the host's");
    let named = |k: &str| (k == "CC_aarch64_unknown_linux_gnu").then(|| "my-gcc".to_string());
    assert_eq!(target_cc("aarch64-unknown-linux-gnu", "x86_64-unknown-linux-gnu", &named), "my-gcc");
}
