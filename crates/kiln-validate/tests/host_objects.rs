//! `ar::check_host`, the check every per-target static library passes before it
//! is shipped (docs/static-library.md), against real ELF objects made by this
//! machine's C compiler: one as kiln-build's host-object job leaves it (the
//! file's tag in `.nv_fatbin`, NVIDIA's runtime called under the renamed
//! names), and one of each way it can go wrong, each named in the error.

use std::{fs, path::Path, process::Command};

use kiln_manifest::kiln_target::host_object::{host, BUILD_HOST};
use kiln_validate::ar;

/// An archive of one object `<stem>.o` compiled from C `source`, in `dir`.
fn archive(dir: &Path, stem: &str, source: &str) -> Vec<u8> {
    let c = dir.join(format!("{stem}.c"));
    let o = dir.join(format!("{stem}.o"));
    let a = dir.join(format!("lib{stem}.a"));
    fs::write(&c, source).unwrap();
    let cc = Command::new("cc").args(["-c", "-fPIC", "-o"]).arg(&o).arg(&c).status().expect("a C compiler (cc)");
    assert!(cc.success(), "cc failed on {source}");
    let _ = fs::remove_file(&a);
    let ar = Command::new("ar").arg("rcsD").arg(&a).arg(&o).status().expect("ar");
    assert!(ar.success());
    fs::read(&a).unwrap()
}

/// C for a host object whose `.nv_fatbin` holds `section` and which calls `calls`.
fn object(section: &str, calls: &[&str]) -> String {
    let mut s = format!("__attribute__((section(\".nv_fatbin\"), used)) static const char tag[] = \"{section}\";\n");
    for f in calls {
        s.push_str(&format!("extern int {f}(void);\n"));
    }
    s.push_str("int launch_it(void) { int r = 0;\n");
    for f in calls {
        s.push_str(&format!("  r += {f}();\n"));
    }
    s.push_str("  return r; }\n");
    s
}

#[test]
fn a_host_object_passes_only_with_its_own_tag_and_the_renamed_runtime() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let required = vec!["launch_it".to_string()];
    let err = |bytes: &[u8]| format!("{:#}", ar::check_host(bytes, "moe", &required, BUILD_HOST).unwrap_err());

    // As the job leaves it: tagged with its file, calling kiln_moe_* only.
    let good = archive(dir, "mmq", &object("KILNMOD\\0mmq", &["kiln_moe_cudaLaunchKernel_ptsz", "kiln_moe___cudaRegisterFunction"]));
    let a = ar::check_host(&good, "moe", &required, BUILD_HOST).unwrap();
    assert_eq!(a.members[0].tag.as_deref(), Some("mmq"));

    // NVIDIA's runtime under its own name: the rename missed it.
    let e = err(&archive(dir, "mmq", &object("KILNMOD\\0mmq", &["cudaMalloc", "kiln_moe_cudaFree"])));
    assert!(e.contains("mmq.o calls NVIDIA's runtime under its own names") && e.contains("cudaMalloc"), "{e}");

    // A renamed function the crate's runtime does not define (a new candle release's call).
    let e = err(&archive(dir, "mmq", &object("KILNMOD\\0mmq", &["kiln_moe_cudaGraphLaunch"])));
    assert!(e.contains("does not define: cudaGraphLaunch"), "{e}");

    // Another file's tag, and no tag at all.
    let e = err(&archive(dir, "mmq", &object("KILNMOD\\0mmvq", &[])));
    assert!(e.contains("mmq.o is tagged as mmvq's host object"), "{e}");
    let e = err(&archive(dir, "mmq", "int launch_it(void) { return 0; }\n"));
    assert!(e.contains("mmq.o has no kiln tag"), "{e}");

    // A function the Rust side declares and no member defines.
    let e = format!("{:#}", ar::check_host(&good, "moe", &["launch_other".to_string()], BUILD_HOST).unwrap_err());
    assert!(e.contains("not defined: launch_other"), "{e}");

    // This machine's (x86_64) objects offered as another CPU's library.
    let aarch64 = host("aarch64").unwrap();
    let e = format!("{:#}", ar::check_host(&good, "moe", &required, aarch64).unwrap_err());
    assert!(e.contains("mmq.o holds x86_64 code, and this is the library for aarch64 hosts"), "{e}");
}
