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
    assert_eq!(pins.candle.crate_name, "candle-kernels");
    assert_eq!(pins.candle.modules.len(), 11);
    assert_eq!(pins.targets.hip.iter().map(|a| a.as_str()).collect::<Vec<_>>(), ["gfx1030", "gfx1100", "gfx1101", "gfx1102", "gfx90a", "gfx942"]);
    assert_eq!(pins.targets.cuda_ptx[0].ptx(), "compute_70");
    // Blackwell comes from the pinned ptxas, assembled from the highest PTX level.
    let by = |sm| pins.sass_by(kiln_pins::Sm(sm));
    assert_eq!(by(90), kiln_pins::SassBy::Nvcc);
    assert_eq!(by(100), kiln_pins::SassBy::Ptxas { from: kiln_pins::Sm(89) });
    assert_eq!(by(120), kiln_pins::SassBy::Ptxas { from: kiln_pins::Sm(89) });
    let closure = pins.closure().unwrap();
    for (_, p) in pins.compilers() {
        assert_eq!(closure.find(&p.package).unwrap().version, p.version);
    }
    assert!(pins.crate_version().starts_with(&format!("{}+kiln.", pins.candle.version)));
}

#[test]
fn malformed_toml_names_the_line() {
    let e = broken("schema = 1", "schema = = 1");
    assert_eq!(e.line, line_of("schema = 1"), "{e}");
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
    let sha = text.lines().find_map(|l| l.strip_prefix("sha256 = \"")).unwrap().trim_end_matches('"').to_string();
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
    // clang 17 does not know RDNA4.
    let e = broken("\"gfx90a\", \"gfx942\"]", "\"gfx90a\", \"gfx942\", \"gfx1201\"]");
    assert!(e.message.contains("gfx1201") && e.message.contains("LLVM knows from version 18") && e.message.contains("clang-17"), "{e}");
    // The static library's objects are nvcc's alone.
    let e = broken("ptx = [\"compute_90\"]", "ptx = [\"compute_90\", \"compute_100\"]");
    assert!(e.message.contains("compute_100") && e.message.contains("nvcc"), "{e}");
    assert_eq!(e.line, line_of("ptx = [\"compute_90\"]"), "{e}");
    // A SASS level below the PTX floor would get PTX above its capability.
    let e = broken("cuda_ptx = [\"compute_70\", ", "cuda_ptx = [");
    assert!(e.message.contains("sm_70 below the PTX floor compute_80"), "{e}");
}
