//! kiln-target's `llvm` and `device_lib` columns against the pinned AMD
//! compilers themselves (no mocks): every processor of the table is in a
//! pinned clang's `--print-supported-cpus` exactly when the table says that
//! LLVM knows it, and that clang's device libraries carry its ISA bitcode
//! (`oclc_isa_version_<n>.bc`) exactly when the table says they do. This is
//! what lets `pins check` refuse an arch (gfx1250) from the table alone.

mod common;
use common::toolchain;

#[test]
fn the_table_says_what_each_pinned_clang_and_its_device_libraries_know() {
    let (pins, runner) = toolchain();
    let compilers = pins.hip_compilers();
    assert_eq!(compilers.iter().map(|c| c.major).collect::<Vec<_>>(), [17, 21], "the pinned clangs changed: check the table's columns");
    for c in &compilers {
        let m = c.major;
        // clang prints the list on stdout or stderr depending on its version: read both.
        let argv = [format!("/usr/lib/llvm-{m}/bin/clang"), "--target=amdgcn-amd-amdhsa".into(), "--print-supported-cpus".into()];
        let out = runner.command(&[], "/", &argv).output().unwrap();
        let listed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let known: Vec<&str> = listed.split_whitespace().collect();
        assert!(known.contains(&"gfx90a"), "clang-{m} lists no AMD processors: {listed}");
        let bitcode = runner.sysroot().root.join(c.bitcode_dir());
        for g in kiln_target_rows() {
            let knows = g.llvm <= m && g.llvm_until.is_none_or(|last| m <= last);
            assert_eq!(
                known.contains(&g.name),
                knows,
                "{}: the table says LLVM {} first knows it (last: {:?}); clang-{m} {}",
                g.name,
                g.llvm,
                g.llvm_until,
                if known.contains(&g.name) { "does" } else { "does not" }
            );
            if !knows {
                continue;
            }
            let file = bitcode.join(format!("oclc_isa_version_{}.bc", g.name.trim_start_matches("gfx")));
            assert_eq!(
                file.is_file(),
                g.device_lib.is_some_and(|d| d <= m),
                "{}: the table's device_lib is {:?}, and {} {} has {}",
                g.name,
                g.device_lib,
                c.rocm_device_libs.package,
                if file.is_file() { "it" } else { "no such file" },
                file.display()
            );
        }
    }
}

/// The processors kiln can build for (a known ELF machine value).
fn kiln_target_rows() -> impl Iterator<Item = &'static kiln_manifest::kiln_target::Gfx> {
    kiln_manifest::kiln_target::buildable_gfx()
}
