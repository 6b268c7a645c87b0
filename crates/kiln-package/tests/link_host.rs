//! A link crate's build script refuses, before anything links, a build for another
//! CPU than its static library's code is for (template `link/host.rs`): the CPU is
//! read from the library itself, here from an archive this machine's C compiler
//! and `ar` make, and from an aarch64 object header.

use std::{fs, path::PathBuf, process::Command};

include!("../template/link/host.rs");
include!("../template/main/src/hosts.rs");

fn temp(label: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("link-host-{label}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// An `ar` archive of one member, as `ar` writes one.
fn archive_of(name: &str, data: &[u8]) -> Vec<u8> {
    let mut a = b"!<arch>\n".to_vec();
    a.extend_from_slice(format!("{:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n", format!("{name}/"), 0, 0, 0, 644, data.len()).as_bytes());
    a.extend_from_slice(data);
    if data.len() % 2 == 1 {
        a.push(b'\n');
    }
    a
}

#[test]
fn the_library_of_this_machines_compiler_is_read_as_this_machines_cpu_and_links_here() {
    let dir = temp("native");
    fs::write(dir.join("f.c"), "int kiln_f(void) { return 1; }\n").unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    assert!(Command::new(&cc).args(["-c", "f.c", "-o", "f.o"]).current_dir(&dir).status().unwrap().success(), "{cc} -c");
    assert!(Command::new("ar").args(["rcs", "libf.a", "f.o"]).current_dir(&dir).status().unwrap().success(), "ar");
    let lib = fs::read(dir.join("libf.a")).unwrap();
    let arch = library_arch(&lib).unwrap();
    assert_eq!(arch, std::env::consts::ARCH, "the archive's CPU as cargo names it");
    assert_eq!(host_mismatch("kiln-x-ffi-0", "f", &arch, std::env::consts::ARCH, "this-target"), None);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn an_x86_64_library_in_an_aarch64_build_is_refused_naming_both_and_what_to_do() {
    // An ELF64 little-endian relocatable header whose e_machine is x86_64 (62), as nvcc's host objects are.
    let mut elf = vec![0u8; 64];
    elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
    elf[16] = 1;
    elf[18] = 62;
    let lib = archive_of("mmvq_gguf.o", &elf);
    let arch = library_arch(&lib).unwrap();
    assert_eq!(arch, "x86_64");
    let why = host_mismatch("kiln-candle-kernels-ffi-0", "kiln_candle_kernels_ffi_0", &arch, "aarch64", "aarch64-unknown-linux-gnu")
        .expect("an aarch64 build of x86_64 code is refused");
    for part in
        ["kiln-candle-kernels-ffi-0", "libkiln_candle_kernels_ffi_0.a", "x86_64 code only", "aarch64-unknown-linux-gnu", "docs/static-library.md"]
    {
        assert!(why.contains(part), "{part:?} missing from: {why}");
    }
    // And the other way round: aarch64 code (183) in an x86_64 build.
    elf[18] = 183;
    let arch = library_arch(&archive_of("a.o", &elf)).unwrap();
    assert_eq!(arch, "aarch64");
    assert!(host_mismatch("k", "l", &arch, "x86_64", "x86_64-unknown-linux-gnu").is_some());
}

#[test]
fn bytes_that_are_not_an_archive_of_elf_objects_are_named_not_guessed() {
    assert_eq!(library_arch(b"PK\x03\x04"), Err("not an ar archive".into()));
    assert_eq!(library_arch(&archive_of("README", b"hello")), Err("no ELF member".into()));
    let mut cut = archive_of("a.o", &[0x7f; 40]);
    cut.truncate(70);
    assert!(library_arch(&cut).unwrap_err().contains("runs past the end"));
}

/// The main crate's build script refuses a CPU its static library has no host
/// code for, naming the CPUs it has (issue 33: "a host kiln built no code for").
#[test]
fn the_main_crate_refuses_a_cpu_its_library_has_no_host_code_for() {
    let hosts = ["x86_64", "aarch64"];
    assert_eq!(host_refusal("kiln-x 1.0", "x86_64-unknown-linux-gnu", "x86_64", &hosts), None);
    assert_eq!(host_refusal("kiln-x 1.0", "aarch64-unknown-linux-gnu", "aarch64", &hosts), None);
    let why = host_refusal("kiln-x 1.0", "riscv64gc-unknown-linux-gnu", "riscv64", &hosts).expect("riscv64 refused");
    assert!(why.starts_with("kiln-x 1.0: this build is for riscv64gc-unknown-linux-gnu (riscv64)"), "{why}");
    assert!(why.contains("has host code for x86_64 and aarch64 Linux only"), "{why}");
    assert_eq!(host_refusal("kiln-x 1.0", "riscv64gc-unknown-linux-gnu", "riscv64", &[]), None, "no library: nothing to refuse");
}
