//! The drop-in's runtime for a per-target static library (the template's
//! `main/src/launch.rs`) answers exactly the calls kiln-build renames in the
//! library's host objects (`kiln_target::host_object::RUNTIME_CALLS`): a
//! function missing here would be an undefined symbol in every consumer's
//! link; one the build no longer renames is dead code.

use std::path::Path;

use kiln_manifest::kiln_target::host_object::{renamed, RUNTIME_CALLS};
use kiln_package::generate::RUNTIME_LIBRARY;

/// The `kiln_<lib>_*` functions a Rust file defines for the C side.
fn defined(rust: &str, prefix: &str) -> Vec<String> {
    let mut out: Vec<String> = rust
        .lines()
        .filter_map(|l| l.split_once(&format!("extern \"C\" fn {prefix}")).map(|(_, rest)| rest))
        .map(|rest| rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect())
        .collect();
    out.sort();
    out
}

#[test]
fn the_runtime_defines_every_call_the_build_renames_and_no_other() {
    let launch = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("template/main/src/launch.rs")).unwrap();
    let prefix = renamed(RUNTIME_LIBRARY, "");
    let got = defined(&launch, &prefix);
    let want: Vec<String> = RUNTIME_CALLS.iter().map(|s| s.to_string()).collect();
    assert_eq!(got, want, "template main/src/launch.rs against kiln_target::host_object::RUNTIME_CALLS");
    // Each is exported under that name (no mangling), or the host objects could not reach it.
    for name in RUNTIME_CALLS {
        let at = launch.find(&format!("extern \"C\" fn {prefix}{name}(")).unwrap();
        assert!(launch[..at].trim_end().rsplit('\n').take(2).any(|l| l.contains("#[unsafe(no_mangle)]")), "{prefix}{name} is not #[no_mangle]");
    }
}

#[test]
fn the_check_reads_definitions_and_can_fail() {
    let src = "#[unsafe(no_mangle)]\npub unsafe extern \"C\" fn kiln_moe_cudaMalloc(p: *mut u8) -> i32 { 0 }\nfn kiln_moe_cudaFree() {}\n";
    assert_eq!(defined(src, "kiln_moe_"), ["cudaMalloc"]);
    let all: Vec<String> = RUNTIME_CALLS.iter().map(|s| s.to_string()).collect();
    assert_ne!(defined(src, "kiln_moe_"), all, "a runtime missing functions must not pass");
}
