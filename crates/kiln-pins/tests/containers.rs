//! `[containers]` in the pin file: the repository's table, its mistakes (each
//! named by line), and the generated part surviving a toolchain update.

use std::path::{Path, PathBuf};

use kiln_pins::Pins;

fn real() -> (PathBuf, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../pins.toml");
    let text = std::fs::read_to_string(&path).expect("the repository's pins.toml");
    (path, text)
}

fn broken(from: &str, to: &str) -> kiln_pins::PinError {
    let (_, text) = real();
    assert!(text.contains(from), "the fixture edit `{from}` no longer applies to pins.toml");
    Pins::parse(Path::new("pins.toml"), &text.replacen(from, to, 1)).expect_err("the edited pin file must be refused")
}

fn line_of(needle: &str) -> usize {
    let (_, text) = real();
    text[..text.find(needle).unwrap()].matches('\n').count() + 1
}

#[test]
fn the_repository_table_is_complete() {
    let (path, _) = real();
    let pins = Pins::load(&path).unwrap();
    let c = pins.containers.as_ref().expect("pins.toml has [containers]");
    let names: Vec<&str> = std::iter::once(&c.builder.name).chain(c.runners.iter().map(|r| &r.name)).map(String::as_str).collect();
    assert_eq!(names, ["kiln-builder", "kiln-runner-rocm", "kiln-runner-rocm7", "kiln-runner-cuda"]);
    assert!(c.base.digest.starts_with("sha256:") && c.base.pinned().contains('@'));
    let closures = c.closures(&path).expect("the generated container closures are there");
    let toolchain = pins.closure().unwrap();
    // The builder's packages sit on the toolchain: none of them is one of its packages.
    for d in &closures.builder.debs {
        assert!(toolchain.find(&d.name).is_none(), "{} is in both", d.name);
    }
    assert!(closures.builder.find("bubblewrap").is_some());
    assert_eq!(closures.rust.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["rustc", "cargo", "rust-std"]);
    // The ROCm runner's HIP runtime is the version the HIP headers in the toolchain are.
    let rocm = closures.runner("rocm").unwrap();
    assert_eq!(rocm.packages.find("libamdhip64-5").unwrap().version, pins.toolchain.hip.version);
    // The second one's is HIP 7, from experimental, with everything else from the toolchain's suite
    // where that suite has it: the two images differ only in the ROCm stack.
    let rocm7 = closures.runner("rocm7").unwrap();
    assert!(rocm7.packages.find("libamdhip64-7").unwrap().version.starts_with("7."));
    assert_eq!(c.runner("rocm7").unwrap().suites, ["forky", "experimental"]);
    let libc = |r: &kiln_pins::RunnerClosure| r.packages.find("libc6").unwrap().version.clone();
    assert_eq!(libc(rocm7), libc(rocm), "one glibc in both AMD runners: trixie's");
    // Each pins its runtime's own headers beside it.
    assert_eq!(
        rocm.headers.iter().map(|d| (d.name.as_str(), d.version.as_str())).collect::<Vec<_>>(),
        [("libamdhip64-dev", pins.toolchain.hip.version.as_str())]
    );
    assert_eq!(rocm7.headers[0].version, rocm7.packages.find("libamdhip64-7").unwrap().version);
}

#[test]
fn a_runner_suite_and_header_pins_are_checked() {
    let e = broken("suites = [\"forky\", \"experimental\"]", "suites = [\"trixie\", \"experimental\"]");
    assert!(e.message.contains("`trixie` is not a Debian suite beyond [toolchain].suite"), "{e}");
    assert_eq!(e.line, line_of("suites = [\"forky\""), "{e}");
    let e = broken("headers = [\"libamdhip64-dev=7.2.4-1~exp2\"]", "headers = [\"libamdhip64-dev\"]");
    assert!(e.message.contains("`libamdhip64-dev` in containers.rocm7.headers has no version"), "{e}");
    let e = broken("headers = [\"libamdhip64-dev=7.2.4-1~exp2\"]", "headers = [\"libamdhip64-dev=7.2.4-1~exp3\"]");
    assert!(e.message.contains("containers.rocm7.headers has `libamdhip64-dev=7.2.4-1~exp3` but the generated closure's headers do not"), "{e}");
    assert_eq!(e.line, line_of("[containers.rocm7.closure]"), "{e}");
    assert!(e.help.as_deref().unwrap_or("").contains("cargo xtask container --update"), "{e}");
}

#[test]
fn a_base_image_without_a_digest_is_refused_on_its_line() {
    let (_, text) = real();
    let base = text.lines().find(|l| l.starts_with("base = ")).unwrap();
    let tag_only = base.split('@').next().unwrap().to_string() + "\"";
    let e = broken(base, &tag_only);
    assert_eq!(e.line, line_of("base = "), "{e}");
    assert!(e.message.contains("not pinned by digest"), "{e}");
    assert!(e.help.as_deref().unwrap_or("").contains("@sha256:"), "{e}");
}

#[test]
fn unknown_keys_in_the_image_tables_are_refused() {
    let e = broken("name = \"kiln-runner-rocm\"", "name = \"kiln-runner-rocm\"\ninclde = []");
    assert!(e.message.contains("inclde"), "{e}");
    assert_eq!(e.line, line_of("name = \"kiln-runner-rocm\"") + 1, "{e}");
}

#[test]
fn a_root_bumped_without_update_is_refused() {
    let e = broken("\"libamdhip64-5=5.7.1-6+deb13u1\"", "\"libamdhip64-5=5.7.1-9\"");
    assert!(e.message.contains("libamdhip64-5 is pinned to 5.7.1-9") && e.message.contains("has 5.7.1-6+deb13u1"), "{e}");
    assert!(e.help.as_deref().unwrap_or("").contains("cargo xtask container --update"), "{e}");
    assert_eq!(e.line, line_of("[containers.rocm.closure]"), "{e}");
}

#[test]
fn a_rust_bump_without_update_is_refused() {
    let e = broken("rust = \"1.95.0\"", "rust = \"1.96.0\"");
    assert!(e.message.contains("containers.builder.rust is 1.96.0 but the generated rustc archive is 1.95.0"), "{e}");
    let e = broken("rust = \"1.95.0\"", "rust = \"stable\"");
    assert!(e.message.contains("not a Rust release"), "{e}");
}

#[test]
fn the_builder_cannot_carry_a_second_copy_of_a_toolchain_package() {
    let (_, text) = real();
    // Move the toolchain's first package into the builder's closure as well.
    let deb = text.lines().find(|l| l.starts_with("  { name = \"base-files\"")).unwrap().to_string();
    let at = text.find("[containers.builder.closure]").unwrap();
    let debs = at + text[at..].find("debs = [\n").unwrap() + "debs = [\n".len();
    let edited = format!("{}{deb}\n{}", &text[..debs], &text[debs..]);
    let e = Pins::parse(Path::new("pins.toml"), &edited).unwrap_err();
    assert!(e.message.contains("`base-files") && e.message.contains("[toolchain.closure] already has"), "{e}");
}

#[test]
fn bad_names_and_patterns_name_their_line() {
    let e = broken("include = [\"bubblewrap\"", "include = [\"Bubble Wrap\"");
    assert!(e.message.contains("not a Debian package name"), "{e}");
    assert_eq!(e.line, line_of("include = [\"bubblewrap\""), "{e}");
    let e = broken("name = \"kiln-builder\"", "name = \"Kiln Builder\"");
    assert!(e.message.contains("not an image name"), "{e}");
    let e = broken("source_date_epoch = ", "source_date_epoch = -");
    assert!(e.message.contains("not a time"), "{e}");
}

#[test]
fn a_toolchain_update_keeps_the_container_closures_and_regenerating_is_stable() {
    let (path, text) = real();
    let pins = Pins::load(&path).unwrap();
    // `pins update` rewrites only the toolchain closure; the container tables below it survive.
    assert_eq!(kiln_pins::with_closure(&text, pins.closure().unwrap()), text);
    let closures = pins.containers.as_ref().unwrap().closures(&path).unwrap();
    assert_eq!(kiln_pins::with_generated(&text, pins.closure().unwrap(), Some(&closures)), text);
    // Without them, the file still loads (the table's closures are then missing, and say how to make them).
    let bare = kiln_pins::with_generated(&text, pins.closure().unwrap(), None);
    let p = Pins::parse(Path::new("pins.toml"), &bare).unwrap();
    let e = p.containers.as_ref().unwrap().closures(Path::new("pins.toml")).unwrap_err();
    assert!(e.to_string().contains("cargo xtask container --update"), "{e}");
}

#[test]
fn an_edited_table_is_refused_until_updated_and_the_update_can_read_it() {
    let (_, text) = real();
    let from = "include = [\"bubblewrap\", ";
    assert!(text.contains(from), "the fixture edit no longer applies to pins.toml");
    let edited = text.replacen(from, "include = [\"hello\", \"bubblewrap\", ", 1);
    let e = Pins::parse(Path::new("pins.toml"), &edited).expect_err("a root its closure lacks");
    assert!(e.message.contains("includes `hello` but its generated closure is missing it"), "{e}");
    assert!(e.to_string().contains("cargo xtask container --update"), "{e}");
    // What `container --update` reads: the same file less the stale closures, which loads.
    let bare = kiln_pins::without_container_closures(&edited);
    let p = Pins::parse(Path::new("pins.toml"), &bare).unwrap();
    let c = p.containers.as_ref().unwrap();
    assert!(c.builder.packages.include.iter().any(|r| r.package == "hello") && c.builder.packages.closure.is_none());
    assert_eq!(p.closure().unwrap().debs.len(), Pins::parse(Path::new("pins.toml"), &text).unwrap().closure().unwrap().debs.len());
    assert_eq!(kiln_pins::without_container_closures(&bare), bare, "nothing more to cut");
}

#[test]
fn a_pin_file_without_the_table_still_loads() {
    let (_, text) = real();
    let start = text.find("\n[containers]\n").unwrap();
    let end = text.find(kiln_pins::GENERATED_MARKER).unwrap();
    let head = format!("{}\n{}", &text[..start], &text[end..]);
    let cut = head.find("\n[containers.builder.closure]").unwrap();
    let p = Pins::parse(Path::new("pins.toml"), &head[..cut]).unwrap();
    assert!(p.containers.is_none());
}

/// The cross compilers' generated closures (`[toolchain.cross.<cpu>.closure]`,
/// `pins update --cross-only`) render back to the pin file's own text; the
/// other generators keep them; and a pin file without them gains them in
/// their place, between the toolchain's closure and the containers'.
#[test]
fn cross_closures_round_trip_and_survive_the_other_generators() {
    let (path, text) = real();
    let pins = Pins::parse(&path, &text).unwrap();
    let cross: Vec<(String, kiln_pins::Closure)> =
        pins.toolchain.cross.iter().map(|c| (c.cpu.clone(), c.closure.clone().expect("generated"))).collect();
    assert!(!cross.is_empty(), "pins.toml pins a cross compiler");
    assert_eq!(kiln_pins::with_cross(&text, &cross), text);
    assert_eq!(kiln_pins::with_closure(&text, pins.closure().unwrap()), text, "pins update keeps them");
    let bare = kiln_pins::with_cross(&text, &[]);
    assert!(!bare.contains("[toolchain.cross.aarch64.closure]") && bare.contains("[containers.builder.closure]"), "{bare}");
    assert_eq!(kiln_pins::with_cross(&bare, &cross), text, "added back in their place");
    // A cross host the toolchain does not know is refused where it is written.
    let e = Pins::parse(Path::new("pins.toml"), &text.replace("[toolchain.cross.aarch64", "[toolchain.cross.riscv64")).unwrap_err();
    assert!(e.message.contains("`riscv64` is not a host CPU kiln builds cross host code for"), "{e}");
}
