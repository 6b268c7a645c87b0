//! The pin file, good and bad: every problem names file:line:column.

use std::path::{Path, PathBuf};

use kiln_pins::Pins;

fn real() -> (PathBuf, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../pins.toml");
    let text = std::fs::read_to_string(&path).expect("the repository's pins.toml");
    (path, text)
}

/// Parses `text` with one replacement applied, expecting an error.
fn broken(from: &str, to: &str) -> kiln_pins::PinError {
    let (_, text) = real();
    assert!(text.contains(from), "the fixture edit `{from}` no longer applies to pins.toml");
    let text = text.replacen(from, to, 1);
    Pins::parse(Path::new("pins.toml"), &text).expect_err("the edited pin file must be refused")
}

fn line_of(needle: &str) -> usize {
    let (_, text) = real();
    text[..text.find(needle).unwrap()].matches('\n').count() + 1
}

#[test]
fn the_repository_pin_file_is_valid_and_complete() {
    let (path, _) = real();
    let pins = Pins::load(&path).unwrap();
    let candle = pins.main_set();
    assert_eq!(candle.name, "candle");
    assert!(matches!(&candle.source, kiln_pins::Source::Crate { name, .. } if name == "candle-kernels"));
    assert_eq!(candle.modules.len(), 11);
    assert_eq!(candle.staticlib.as_ref().unwrap().ffi.as_deref(), Some("src/ffi.rs"));
    // The main set has no targets or flags of its own: the global ones.
    assert_eq!(candle.targets.all(), pins.targets.all());
    assert_eq!(candle.flags.hip_max_threads_per_block.get("quantized"), Some(&256));
    assert_eq!(
        pins.targets.hip.iter().map(|a| a.as_str()).collect::<Vec<_>>(),
        [
            "gfx1030",
            "gfx1100",
            "gfx1101",
            "gfx1102",
            "gfx1103",
            "gfx1150",
            "gfx1151",
            "gfx1152",
            "gfx1153",
            "gfx1200",
            "gfx1201",
            "gfx90a",
            "gfx942",
            "gfx950",
            "gfx10-3-generic",
            "gfx11-generic",
            "gfx12-generic",
            "gfx9-4-generic"
        ]
    );
    // Each AMD arch is built by the first pinned clang that knows it: clang-17, else clang_next.
    let by = |gfx: &str| pins.hip_compiler(&kiln_pins::HipArch::parse(gfx).unwrap()).clang.package.clone();
    assert_eq!([by("gfx1030"), by("gfx1151"), by("gfx942")], ["clang-17", "clang-17", "clang-17"]);
    assert_eq!([by("gfx1200"), by("gfx1201"), by("gfx950")], ["clang-21", "clang-21", "clang-21"]);
    assert_eq!([by("gfx1152"), by("gfx1153"), by("gfx11-generic")], ["clang-21", "clang-21", "clang-21"]);
    // Generic targets' objects are code object v6, every other one the pinned v5.
    let cov = |gfx: &str| pins.targets.code_object_version_for(&kiln_pins::HipArch::parse(gfx).unwrap());
    assert_eq!([cov("gfx1030"), cov("gfx950"), cov("gfx10-3-generic"), cov("gfx9-4-generic")], [5, 5, 6, 6]);
    assert_eq!(pins.targets.cuda_ptx[0].ptx(), "compute_70");
    // Blackwell comes from the pinned ptxas, assembled from the highest PTX level.
    let by = |sm| pins.sass_by(&pins.targets, kiln_pins::Sm(sm));
    assert_eq!(by(90), kiln_pins::SassBy::Nvcc);
    assert_eq!(by(100), kiln_pins::SassBy::Ptxas { from: kiln_pins::Sm(89) });
    assert_eq!(by(120), kiln_pins::SassBy::Ptxas { from: kiln_pins::Sm(89) });
    let closure = pins.closure().unwrap();
    for (_, p) in pins.compilers() {
        assert_eq!(closure.find(&p.package).unwrap().version, p.version);
    }
    assert_eq!(candle.crate_version().as_deref(), Some("0.11.1+kiln.1"));
    assert_eq!(pins.default_sets().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["candle"]);
    // candle-flash-attn: opt-in, CUTLASS from its pinned wheel, upstream's API over its library.
    let fa = pins.set("flash-attn").unwrap();
    assert!(!fa.default && fa.modules.is_empty());
    assert_eq!(fa.include, [kiln_pins::IncludeRoot::Input("cutlass".into())]);
    assert_eq!(fa.input("cutlass").unwrap().wheel.version, "3.5.0.0");
    let lib = fa.staticlib.as_ref().unwrap();
    assert_eq!((lib.sources.len(), lib.sources[0].as_str()), (53, "kernels/flash_api.cu"));
    assert_eq!(lib.sass, [kiln_pins::Sm(80), kiln_pins::Sm(90)]);
    assert!(fa.flags.cuda_staticlib.iter().any(|f| f == "--expt-extended-lambda") && fa.flags.cuda == pins.flags.cuda);
    let c = fa.artifact_crate.as_ref().unwrap();
    assert_eq!((c.api, c.cudart.as_deref()), (kiln_pins::CrateApi::Upstream, Some("candle")));
}

#[test]
fn malformed_toml_names_the_line() {
    let e = broken("schema = 2", "schema = = 2");
    assert_eq!(e.line, line_of("schema = 2"), "{e}");
    assert!(e.to_string().starts_with("pins.toml:"), "{e}");
}

#[test]
fn unknown_keys_are_refused() {
    let e = broken("revision = 1", "revision = 1\nrevison = 2");
    assert!(e.message.contains("revison"), "{e}");
    assert_eq!(e.line, line_of("revision = 1") + 1, "{e}");
}

#[test]
fn unknown_and_duplicate_archs_are_refused_with_their_line() {
    let e = broken("hip = [\"gfx1030\"", "hip = [\"gfx9999\"");
    assert!(e.message.contains("unknown AMD arch `gfx9999`") && e.message.contains("gfx90a"), "{e}");
    assert_eq!(e.line, line_of("hip = [\"gfx1030\""), "{e}");
    let e = broken("\"sm_89\", \"sm_90\", \"sm_100\"", "\"sm_89\", \"sm_89\", \"sm_100\"");
    assert!(e.message.contains("listed twice"), "{e}");
    let e = broken("cuda_ptx = [\"compute_70\", \"compute_80\"", "cuda_ptx = [\"compute_80\", \"compute_70\"");
    assert!(e.message.contains("ascending"), "{e}");
}

#[test]
fn bad_hashes_and_stale_closures_are_refused() {
    let (_, text) = real();
    let sha = text.lines().find_map(|l| l.split_once("sha256 = \"")).unwrap().1.split('"').next().unwrap().to_string();
    let e = broken(&format!("sha256 = \"{sha}\""), "sha256 = \"xyz\"");
    assert!(e.message.contains("not a sha256"), "{e}");
    // A compiler bumped without `pins update`: the closure still has the old version.
    let e = broken("version = \"12.4.131~12.4.1-2\" }", "version = \"12.4.999~12.4.1-2\" }");
    assert!(e.message.contains("12.4.999") && e.message.contains("[toolchain.closure] has 12.4.131"), "{e}");
    assert!(e.help.as_deref().unwrap_or("").contains("pins update"), "{e}");
}

#[test]
fn a_missing_pin_file_says_where_kiln_looked() {
    let e = Pins::load(Path::new("/nonexistent/pins.toml")).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/pins.toml") && e.to_string().contains("cannot read"), "{e}");
}

#[test]
fn a_target_no_pinned_compiler_reaches_is_refused_naming_both() {
    // Without the newer ptxas, nvcc 12.4 cannot make Blackwell SASS.
    let (_, text) = real();
    let ptxas = text.lines().find(|l| l.starts_with("ptxas = {")).expect("the ptxas pin").to_string();
    let e = broken(&ptxas, "");
    assert!(e.message.contains("sm_100") && e.message.contains("nvidia-cuda-toolkit 12.4.131") && e.message.contains("none is pinned"), "{e}");
    assert!(e.help.as_deref().unwrap_or("").contains("CUDA 12.8"), "{e}");
    // A ptxas too old for the pinned sm.
    let e = broken("version = \"12.9.86\"", "version = \"12.6.85\"");
    assert!(e.message.contains("sm_100") && e.message.contains("nvidia-cuda-nvcc-cu12 12.6.85"), "{e}");
    // clang 17 does not know RDNA4: without clang_next, gfx1201 is refused, saying what to pin.
    let (_, text) = real();
    let next = text.lines().find(|l| l.starts_with("clang_next = {")).expect("the clang_next pin").to_string();
    let device_libs = text.lines().find(|l| l.starts_with("rocm_device_libs_next = {")).expect("its device libraries").to_string();
    let without_next = text.replacen(&next, "", 1).replacen(&device_libs, "", 1);
    let e = Pins::parse(Path::new("pins.toml"), &without_next).unwrap_err();
    assert!(
        e.message.contains("gfx1152") && e.message.contains("LLVM knows from version 19") && e.message.contains("the pinned clang is clang-17"),
        "{e}"
    );
    assert!(e.help.as_deref().unwrap_or("").contains("clang_next") && e.help.as_deref().unwrap_or("").contains("docs/toolchain.md"), "{e}");
    // A clang_next too old for gfx1153 (LLVM 21) is refused naming both clangs (the closure, made
    // for the real pins, left out: `pins update` resolves from the hand-written part alone).
    let old_next = kiln_pins::without_generated(&text.replacen(
        "package = \"clang-21\", version = \"1:21.1.8-3~bpo13+2\"",
        "package = \"clang-19\", version = \"1:19.1.7-3+b1\"",
        1,
    ));
    let e = Pins::parse(Path::new("pins.toml"), &old_next).unwrap_err();
    assert!(
        e.message.contains("gfx1153")
            && e.message.contains("from version 21")
            && e.message.contains("clang-17 1:17.0.6-22+b2 and clang-19 1:19.1.7-3+b1"),
        "{e}"
    );
    assert!(e.help.as_deref().unwrap_or("").contains("clang_next >= 21"), "{e}");
    // gfx1250: clang 21 knows it, but the pinned device libraries lack its bitcode.
    let e = broken("\"gfx9-4-generic\"]", "\"gfx9-4-generic\", \"gfx1250\"]");
    assert!(
        e.message.contains("targets.hip has gfx1250, which clang-21 1:21.1.8-3~bpo13+2 knows, but no pinned ROCm device library has its bitcode")
            && e.message.contains("oclc_isa_version_1250.bc is not in rocm-device-libs-21"),
        "{e}"
    );
    assert!(e.help.as_deref().unwrap_or("").contains("rocm_device_libs_next") && e.help.as_deref().unwrap_or("").contains("or drop the arch"), "{e}");
    // Half a second compiler is refused.
    let e = broken(&device_libs, "");
    assert!(e.message.contains("clang_next is pinned without rocm_device_libs_next"), "{e}");
    // The static library's objects are nvcc's alone.
    let e = broken("ptx = [\"compute_90\"]", "ptx = [\"compute_90\", \"compute_100\"]");
    assert!(e.help.as_deref().unwrap_or("").contains("sets.candle.staticlib.ptx"), "{e}");
    assert!(e.message.contains("compute_100") && e.message.contains("nvcc"), "{e}");
    assert_eq!(e.line, line_of("ptx = [\"compute_90\"]"), "{e}");
    // A SASS level below the PTX floor would get PTX above its capability.
    let e = broken("cuda_ptx = [\"compute_70\", ", "cuda_ptx = [");
    assert!(e.message.contains("sm_70 below the PTX floor compute_80"), "{e}");
}

/// The pin file with `extra` appended after the candle set (before `[targets]`).
fn with_set(extra: &str) -> Result<Pins, kiln_pins::PinError> {
    let (_, text) = real();
    let at = text.find("\n[targets]").expect("pins.toml has [targets]");
    let text = format!("{}\n{extra}\n{}", &text[..at], &text[at..]);
    Pins::parse(Path::new("pins.toml"), &text)
}

const FLASH: &str = r#"[sets.extra]
default = false
source = { crate = "some-kernels", version = "1.0.0", sha256 = "e8f233a5d78ac84fac2b097330faae4a26eae4c4009c54fdb0ec8b7b3c23a15b" }
include = ["input:headers", "kernels"]

[sets.extra.inputs.headers]
pypi = "some-headers"
version = "1.0"
url = "https://files.pythonhosted.org/packages/x/some_headers-1.0-py3-none-any.whl"
sha256 = "4ec3ab4820dd4ae3ebc2c5ddf23352b0dc90f779435284e7dce822006adc51f6"
tree = "pkg/include"
license = { file = "some_headers-1.0.dist-info/LICENSE.txt", spdx = "BSD-3-Clause" }

[sets.extra.staticlib]
name = "extralib"
sources = ["kernels/a.cu", "kernels/b.cu"]
sass = ["sm_80", "sm_90"]
ffi = "src/ffi.rs"

[sets.extra.flags]
cuda_staticlib = ["-O3", "-Xcompiler", "-fPIC"]
"#;

#[test]
fn a_second_set_has_its_own_inputs_includes_and_flags_and_the_rest_is_the_global_ones() {
    let pins = with_set(FLASH).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(pins.sets.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["candle", "flash-attn", "extra"], "file order, the main set first");
    let extra = pins.set("extra").unwrap();
    assert!(!extra.default);
    assert_eq!(pins.default_sets().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["candle"]);
    assert_eq!(extra.include, [kiln_pins::IncludeRoot::Input("headers".into()), kiln_pins::IncludeRoot::Source("kernels".into())]);
    assert_eq!(extra.input("headers").unwrap().tree, "pkg/include");
    let license = extra.input("headers").unwrap().license.clone().unwrap();
    assert_eq!((license.file.as_str(), license.spdx.as_str()), ("some_headers-1.0.dist-info/LICENSE.txt", "BSD-3-Clause"));
    assert_eq!(pins.set("flash-attn").unwrap().input("cutlass").unwrap().license.as_ref().unwrap().spdx, "BSD-3-Clause", "CUTLASS's licence");
    assert_eq!(extra.flags.cuda_staticlib, ["-O3", "-Xcompiler", "-fPIC"]);
    assert_eq!(extra.flags.cuda, pins.flags.cuda, "a key the set does not give is the global one");
    assert_eq!(extra.targets.all(), pins.targets.all());
    assert_eq!(extra.module_names(), ["extralib"]);
}

#[test]
fn sets_that_clash_or_do_not_add_up_are_refused_naming_the_set() {
    // Two sets of one name: TOML itself refuses the second table, at its line.
    let e = with_set(&FLASH.replace("[sets.extra]", "[sets.candle]")).unwrap_err();
    assert!(e.message.contains("duplicate key `candle`"), "{e}");
    assert!(e.line > line_of("[sets.candle]"), "{e}");
    // A module name in two sets.
    let e = with_set(&FLASH.replace("name = \"extralib\"", "name = \"moe\"")).unwrap_err();
    assert!(e.message.contains("module `moe` of set `extra` is also a module of set `candle`"), "{e}");
    // An include root naming an input the set lacks.
    let e = with_set(&FLASH.replace("\"input:headers\"", "\"input:cutlass\"")).unwrap_err();
    assert!(e.message.contains("names input `cutlass`") && e.message.contains("sets.extra.include"), "{e}");
    // A source that is neither a crate nor a folder.
    let e =
        with_set(&FLASH.replace("source = { crate = \"some-kernels\", version = \"1.0.0\",", "source = { crate = \"some-kernels\",")).unwrap_err();
    assert!(e.message.contains("sets.extra.source is neither a crate"), "{e}");
    // An input's licence must be a file of the wheel with an SPDX identifier.
    let e = with_set(&FLASH.replace("spdx = \"BSD-3-Clause\"", "spdx = \"BSD 3 clause\"")).unwrap_err();
    assert!(e.message.contains("`BSD 3 clause` is not an SPDX licence identifier"), "{e}");
    let e = with_set(&FLASH.replace("file = \"some_headers-1.0.dist-info/LICENSE.txt\"", "file = \"../LICENSE\"")).unwrap_err();
    assert!(e.message.contains("`../LICENSE` is not a file inside the wheel"), "{e}");
    // A bad sha256 of a set's source.
    let e = with_set(&FLASH.replace("e8f233a5", "E8F233A5")).unwrap_err();
    assert!(e.message.contains("is not a sha256"), "{e}");
    // The main set must be one a plain dist builds.
    let (_, text) = real();
    let e = Pins::parse(Path::new("pins.toml"), &text.replacen("[sets.candle]\n", "[sets.candle]\ndefault = false\n", 1)).unwrap_err();
    assert!(e.message.contains("first, its main set") && e.message.contains("`candle`"), "{e}");
    // A static library for an sm beyond the pinned nvcc.
    let e = with_set(&FLASH.replace("sass = [\"sm_80\", \"sm_90\"]", "sass = [\"sm_80\", \"sm_100\"]")).unwrap_err();
    assert!(e.message.contains("sm_100") && e.help.as_deref().unwrap_or("").contains("sets.extra.staticlib.ptx"), "{e}");
    // The old single-set layout says how to move.
    let e = Pins::parse(Path::new("pins.toml"), &text.replacen("schema = 2", "schema = 1", 1)).unwrap_err();
    assert!(e.message.contains("schema 1") && e.help.as_deref().unwrap_or("").contains("[sets.candle]"), "{e}");
}

#[test]
fn hip_forced_headers_come_from_the_flags_and_stay_inside_kernels_hip() {
    let (path, text) = real();
    let pins = Pins::load(&path).unwrap();
    assert_eq!(pins.main_set().flags.hip_force_include, ["candle_hip_compat.h"]);
    // A set's own [flags] keeps the global list unless it names its own.
    let flash = pins.sets.iter().find(|s| s.name == "flash-attn").unwrap();
    assert_eq!(flash.flags.hip_force_include, pins.flags.hip_force_include);
    let own = text.replacen("[sets.flash-attn.flags]\n", "[sets.flash-attn.flags]\nhip_force_include = [\"kiln_hip_warp.h\"]\n", 1);
    let own = Pins::parse(Path::new("pins.toml"), &own).unwrap();
    assert_eq!(own.sets.iter().find(|s| s.name == "flash-attn").unwrap().flags.hip_force_include, ["kiln_hip_warp.h"]);
    assert_eq!(own.main_set().flags.hip_force_include, ["candle_hip_compat.h"]);

    let line = "hip_force_include = [\"candle_hip_compat.h\"]";
    let e = broken(line, "hip_force_include = [\"../candle_hip_compat.h\"]");
    assert!(e.message.contains("`../candle_hip_compat.h` is not a header of kiln's kernels/hip"), "{e}");
    assert_eq!(e.line, line_of(line), "{e}");
    let e = broken(&format!("{line}\n"), "");
    assert!(e.message.contains("hip_force_include"), "{e}");
}

#[test]
fn a_set_described_in_code_is_held_to_the_pin_files_rules_in_the_same_words() {
    let (path, _) = real();
    let pins = Pins::load(&path).unwrap();
    // crate.cudart must name a set whose crates carry a CUDA runtime (kiln's crate API and a
    // static library): one rule, refused in the same words by the pin file and by code.
    let words = "crate.cudart = `flash-attn` names no set whose crates carry a CUDA runtime";
    let file = broken("cudart = \"candle\"", "cudart = \"flash-attn\"");
    assert!(file.message.contains(words), "{file}");
    let mut sets = pins.sets.clone();
    let fa = sets.iter_mut().find(|s| s.name == "flash-attn").unwrap();
    fa.artifact_crate.as_mut().unwrap().cudart = Some("flash-attn".into());
    let code = kiln_pins::check_sets(&pins, &sets).unwrap_err();
    assert!(code.contains(words), "{code}");
    // A launch bound out of range: at its line in the pin file, naming the set in code.
    let file = broken("quantized = 256", "quantized = 2048");
    assert!(file.message.contains("a launch bound of 2048 threads is outside 1..=1024"), "{file}");
    assert_eq!(file.line, line_of("quantized = 256"), "{file}");
    let mut bad = pins.main_set().clone();
    bad.flags.hip_max_threads_per_block.insert("quantized".into(), 2048);
    let e = bad.check(&pins).unwrap_err();
    assert!(e.contains("set `candle`") && e.contains("a launch bound of 2048 threads is outside 1..=1024"), "{e}");
    assert!(kiln_pins::check_sets(&pins, &pins.sets).is_ok(), "the pin file's own sets keep the rules");
}
