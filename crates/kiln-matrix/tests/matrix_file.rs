//! ci/matrix.yaml, good and bad: every problem names file:line:column.

use std::path::Path;

mod common;

use common::{good, targets, DIGEST, SHA};
use kiln_matrix::{Arch, Backend, Matrix, MatrixError, Status};
use kiln_pins::{HipArch, Sm};

fn parse(text: &str) -> Result<Matrix, MatrixError> {
    Matrix::parse(Path::new("ci/matrix.yaml"), text, Path::new("pins.toml"), &targets())
}

/// The fixture with one edit applied, expecting an error.
fn broken(from: &str, to: &str) -> MatrixError {
    let text = good();
    assert!(text.contains(from), "the fixture edit `{from}` no longer applies");
    parse(&text.replacen(from, to, 1)).expect_err("the edited matrix must be refused")
}

/// 1-based line of the first occurrence of `needle` in `text`.
fn line_in(text: &str, needle: &str) -> usize {
    text[..text.find(needle).unwrap_or_else(|| panic!("`{needle}` not in the text"))].matches('\n').count() + 1
}

#[test]
fn the_dist_section_is_checked_and_defaults_to_one_shard_on_the_build_runner() {
    let m = parse(&good()).unwrap();
    assert_eq!((m.dist.shards, m.dist.runs_on.clone(), m.dist.timeout_minutes), (1, vec!["ubuntu-24.04".to_string()], 120));
    assert_eq!(m.dist.remote_cache, None);
    let with = |dist: &str| good().replacen("actions:\n", &format!("dist:\n{dist}actions:\n"), 1);
    let m = parse(&with("  shards: 4\n  runs-on: [self-hosted, kiln-cpu]\n  remote-cache:\n    url-variable: KILN_CACHE_URL\n")).unwrap();
    assert_eq!(m.dist.shards, 4);
    assert!(m.dist.self_hosted());
    assert_eq!(m.dist.remote_cache.unwrap().token_secret, None);
    for (dist, needle) in [
        ("  shards: 0\n", "between 1 and 64"),
        ("  shards: 65\n", "between 1 and 64"),
        ("  runs-on: ubuntu-24.04\n", "has no `shards`"),
        ("  shards: 2\n  runs-on: [self-hosted, kiln-gpu]\n", "a GPU runner's label"),
        ("  shards: 2\n  runs-on: [self-hosted, sm_90]\n", "a GPU runner's label"),
        ("  shards: 2\n  runs-on: 'a b'\n", "not a runner label"),
        ("  shards: 2\n  remote-cache:\n    url-variable: ${{ github.token }}\n", "not a name"),
        ("  shards: 2\n  remote-cache:\n    url-variable: GITHUB_TOKEN\n", "not GITHUB_"),
        ("  shards: 2\n  remote-cache:\n    url: http://cache\n", "unknown key `url`"),
    ] {
        let text = with(dist);
        let e = parse(&text).expect_err(dist);
        assert!(e.to_string().contains(needle), "{dist}: {e}");
        assert!(e.line > 0, "{dist}: {e}");
    }
}

#[test]
fn the_fixture_parses_into_typed_legs_with_defaults() {
    let m = parse(&good()).unwrap();
    assert_eq!(m.build.rust, "1.95.0");
    assert_eq!(m.build.nextest, "0.9.143");
    assert_eq!(m.actions.checkout.uses(), format!("actions/checkout@{SHA}"));
    assert_eq!(m.actions.checkout.tag, "v6.0.2");
    assert_eq!(m.tests.filter, None);
    let names: Vec<String> = m.legs.iter().map(|l| l.arch.name()).collect();
    assert_eq!(names, ["gfx1030", "gfx90a", "sm_90"]);

    let gfx1030 = &m.legs[0];
    assert_eq!(gfx1030.arch, Arch::Hip(HipArch::parse("gfx1030").unwrap()));
    assert_eq!(gfx1030.backend(), Backend::Hip);
    assert_eq!(gfx1030.status, Status::Active);
    assert_eq!((gfx1030.partitions, gfx1030.timeout_minutes), (1, 60), "the documented defaults");
    assert_eq!(gfx1030.image.reference(), format!("ghcr.io/kiln-gpu/kiln-runner-rocm@sha256:{DIGEST}"));
    assert_eq!(gfx1030.line, line_in(&good(), "- arch: gfx1030"));
    assert_eq!(gfx1030.runs_on(), ["self-hosted", "linux", "x64", "kiln-gpu", "gfx1030"]);

    let gfx90a = &m.legs[1];
    assert_eq!(gfx90a.status, Status::AwaitingRunner);
    assert_eq!(gfx90a.partitions, 2);
    assert_eq!(
        gfx90a.env,
        [("HSA_XNACK".to_string(), "1".to_string()), ("KILN_LOG".to_string(), "debug".to_string())],
        "env keeps file order; integers become their digits"
    );

    let sm90 = &m.legs[2];
    assert_eq!(sm90.arch, Arch::Cuda(Sm(90)));
    assert_eq!(sm90.timeout_minutes, 30);
    assert_eq!(sm90.image.name, "registry.example:5000/kiln/runner-cuda", "a registry port is not a tag");
    assert_eq!(sm90.runs_on().last().unwrap(), "h100");

    let untested = m.untested_targets(&targets());
    assert_eq!(untested, ["gfx1100", "sm_80", "sm_86", "sm_89"]);
}

#[test]
fn unknown_keys_name_their_line_and_column_and_suggest_the_near_one() {
    let e = broken("    partitions: 2\n", "    partitons: 2\n");
    assert_eq!(e.line, line_in(&good(), "    partitions: 2"), "{e}");
    assert_eq!(e.column, 5, "{e}");
    assert!(e.message.contains("unknown key `partitons` in a leg"), "{e}");
    assert!(e.help.as_deref().unwrap().contains("`partitions`"), "{e}");
    assert!(e.to_string().starts_with(&format!("ci/matrix.yaml:{}:5: ", e.line)), "{e}");

    let e = broken("legs:\n", "leggs:\n");
    assert!(e.message.contains("unknown key `leggs` in the runner matrix"), "{e}");
    assert_eq!(e.line, line_in(&good(), "legs:"), "{e}");

    let e = broken("  rust: 1.95.0\n", "  rust: 1.95.0\n  cargo: 1.95.0\n");
    assert!(e.message.contains("unknown key `cargo` in `build`"), "{e}");
    assert_eq!(e.line, line_in(&good(), "  rust: ") + 1, "{e}");
}

#[test]
fn unknown_archs_are_refused_with_the_known_ones() {
    let e = broken("arch: gfx90a", "arch: gfx9999");
    assert_eq!(e.line, line_in(&good(), "arch: gfx90a"), "{e}");
    assert!(e.message.contains("unknown AMD arch `gfx9999`") && e.message.contains("gfx1100"), "{e}");

    let e = broken("arch: sm_90", "arch: sm_91");
    assert!(e.message.contains("unknown NVIDIA arch `sm_91`"), "{e}");
    assert_eq!(e.line, line_in(&good(), "arch: sm_90"), "{e}");

    let e = broken("arch: sm_90", "arch: h100");
    assert!(e.message.contains("unknown arch `h100`") && e.message.contains("sm_90"), "{e}");

    let e = broken("arch: sm_90", "arch: compute_90");
    assert!(e.message.contains("virtual (PTX) arch"), "{e}");
}

#[test]
fn archs_that_pins_toml_does_not_build_are_refused_naming_both_files() {
    // Known to kiln (HIP_ARCHS), but not in [targets] hip.
    let e = broken("arch: gfx90a", "arch: gfx942");
    assert_eq!(e.line, line_in(&good(), "arch: gfx90a"), "{e}");
    assert!(e.message.contains("`gfx942` is not built: pins.toml [targets] hip = [gfx1030, gfx1100, gfx90a]"), "{e}");
    assert!(e.help.as_deref().unwrap().contains("add `gfx942` to [targets] hip in pins.toml"), "{e}");

    let e = broken("arch: sm_90", "arch: sm_75");
    assert!(e.message.contains("`sm_75` is not built: pins.toml [targets] cuda_sass"), "{e}");
}

#[test]
fn a_second_leg_for_one_arch_names_both_lines() {
    let text = good() + "  - arch: sm_90\n    backend: cuda\n    status: active\n";
    let e = parse(&text).unwrap_err();
    assert_eq!(e.line, text.matches('\n').count() - 2, "the second `arch: sm_90`: {e}");
    assert!(e.message.contains(&format!("the first is at line {}", line_in(&text, "- arch: sm_90"))), "{e}");
}

#[test]
fn a_key_given_twice_in_one_mapping_is_refused_at_the_second() {
    let e = broken("    status: active\n", "    status: active\n    status: awaiting-runner\n");
    assert_eq!(e.line, line_in(&good(), "    status: active") + 1, "{e}");
    assert!(e.message.contains("duplicated key"), "{e}");
}

#[test]
fn malformed_yaml_names_the_place() {
    let e = broken("    labels: [h100]\n", "    labels: [h100\n");
    assert!(e.message.starts_with("not valid YAML"), "{e}");
    assert!(e.line >= line_in(&good(), "labels: [h100]"), "{e}");

    let e = broken("  rust: 1.95.0\n", "  rust: 1.95.0\n rust2: x\n");
    assert!(e.message.starts_with("not valid YAML"), "{e}");
    assert_eq!(e.line, line_in(&good(), "  rust: ") + 1, "{e}");

    let e = parse("").unwrap_err();
    assert!(e.message.contains("empty"), "{e}");
    let e = parse("schema: 1\n---\nschema: 1\n").unwrap_err();
    assert!(e.message.contains("one YAML document"), "{e}");
}

#[test]
fn wrong_types_and_values_are_refused_where_they_are() {
    let e = broken("  rust: 1.95.0", "  rust: 1.90");
    assert!(e.message.contains("YAML reads this as a number"), "{e}");
    assert!(e.help.as_deref().unwrap().contains("quote it"), "{e}");

    let e = broken("  nextest: 0.9.143", "  nextest: latest");
    assert!(e.message.contains("exact version"), "{e}");

    let e = broken("schema: 1", "schema: 2");
    assert_eq!(e.line, 1, "{e}");

    let e = broken("    partitions: 2", "    partitions: 0");
    assert!(e.message.contains("between 1 and 16"), "{e}");
    let e = broken("    partitions: 2", "    partitions: two");
    assert!(e.message.contains("whole number"), "{e}");

    let e = broken("  - arch: gfx1030\n    backend: hip", "  - arch: gfx1030\n    backend: cuda");
    assert!(e.message.contains("`gfx1030` is a hip arch, but this leg says backend `cuda`"), "{e}");

    let e = broken("status: awaiting-runner", "status: paused");
    assert!(e.message.contains("unknown status `paused`"), "{e}");

    let e = broken("    status: active\n", "");
    assert!(e.message.contains("a leg has no `status`"), "{e}");
    assert_eq!(e.line, line_in(&good(), "- arch: gfx1030"), "{e}");
}

#[test]
fn images_must_be_pinned_by_digest_and_placeholders_only_on_waiting_legs() {
    let e = broken(&format!("kiln-runner-rocm@sha256:{DIGEST}"), "kiln-runner-rocm:latest");
    assert!(e.message.contains("`images.hip`") && e.message.contains("name@sha256:<64 lowercase hex>"), "{e}");
    assert_eq!(e.line, line_in(&good(), "  hip: "), "{e}");

    let e = broken(&format!("kiln-runner-rocm@sha256:{DIGEST}"), &format!("kiln-runner-rocm:6.4@sha256:{DIGEST}"));
    assert!(e.message.contains("name@sha256"), "a tag next to the digest: {e}");

    let e = broken(&format!("kiln-runner-rocm@sha256:{DIGEST}"), "kiln-runner-rocm@sha256:abc");
    assert!(e.message.contains("64 lowercase hex"), "{e}");

    let zeros = kiln_matrix::PLACEHOLDER_DIGEST;
    let text = good().replacen(&format!("kiln-runner-rocm@sha256:{DIGEST}"), &format!("kiln-runner-rocm@sha256:{zeros}"), 1);
    let e = parse(&text).unwrap_err();
    assert!(e.message.contains("the `gfx1030` leg is active, but its image") && e.message.contains("placeholder"), "{e}");
    // The same placeholder on an awaiting-runner leg alone is accepted.
    let text = text.replacen("    status: active\n", "    status: awaiting-runner\n", 1);
    let m = parse(&text).unwrap();
    assert!(m.legs[0].image.is_placeholder() && m.legs[1].image.is_placeholder());
    assert!(!m.legs[2].image.is_placeholder());

    // A misspelt default is a named image no leg uses.
    let text = good().replacen("images:\n  hip:", "images:\n  rocm:", 1);
    let e = parse(&text).unwrap_err();
    assert!(e.message.contains("the `gfx1030` leg has no `image`, and `images.hip` is not set"), "{e}");
    let text = good().replacen(&format!("  hip: ghcr.io/kiln-gpu/kiln-runner-rocm@sha256:{DIGEST}\n"), "", 1);
    let e = parse(&text).unwrap_err();
    assert!(e.message.contains("the `gfx1030` leg has no `image`, and `images.hip` is not set"), "{e}");
}

#[test]
fn a_leg_names_an_image_of_images_once_its_digest_is_written_there() {
    let other = format!("  rocm7: ghcr.io/kiln-gpu/kiln-runner-rocm7@sha256:{DIGEST}\n");
    let with_named = |leg_image: &str| {
        good().replacen("images:\n", &format!("images:\n{other}"), 1).replacen(
            "    backend: hip\n    status: active\n",
            &format!("    backend: hip\n    status: active\n    image: {leg_image}\n"),
            1,
        )
    };
    let m = parse(&with_named("rocm7")).unwrap();
    assert_eq!(m.legs[0].image.name, "ghcr.io/kiln-gpu/kiln-runner-rocm7");
    assert_eq!(m.legs[0].image_key.as_deref(), Some("rocm7"));
    assert_eq!(m.legs[1].image_key.as_deref(), Some(m.legs[1].arch.backend().to_string().as_str()), "the backend's default");

    let text = with_named("rocm8");
    let e = parse(&text).unwrap_err();
    assert!(e.message.contains("`image: rocm8` names no entry of `images` (it has: rocm7, hip, cuda)"), "{e}");
    assert_eq!(e.line, line_in(&text, "image: rocm8"), "{e}");

    // A named image no leg runs in is a mistake (a misspelt key, a leg that lost its `image`).
    let text = good().replacen("images:\n", &format!("images:\n{other}"), 1);
    let e = parse(&text).unwrap_err();
    assert!(e.message.contains("`images.rocm7` is the image of no leg"), "{e}");
    assert_eq!(e.line, line_in(&text, "  rocm7:"), "{e}");
}

#[test]
fn actions_must_be_pinned_to_a_full_commit_sha() {
    let e = broken(&format!("actions/checkout@{SHA}"), "actions/checkout@v6");
    assert!(e.message.contains("not pinned to a full commit SHA"), "{e}");
    assert_eq!(e.line, line_in(&good(), "  checkout:"), "{e}");
    let e = broken(&format!("actions/cache@{SHA}"), &format!("someone/cache@{SHA}"));
    assert!(e.message.contains("must be `actions/cache`"), "{e}");
    let e = broken("  upload-artifact: {", "  upload-artefact: {");
    assert!(e.help.as_deref().unwrap_or("").contains("upload-artifact"), "{e}");
}

#[test]
fn labels_and_env_cannot_undo_what_the_generator_sets() {
    let e = broken("labels: [h100]", "labels: [sm_80]");
    assert!(e.message.contains("names another arch"), "{e}");
    let e = broken("labels: [h100]", "labels: [self-hosted]");
    assert!(e.message.contains("already asks for"), "{e}");
    let e = broken("labels: [h100]", "labels: [\"h 100\"]");
    assert!(e.message.contains("not a runner label"), "{e}");

    let e = broken("      KILN_LOG: debug", "      KILN_DIST_DIR: /elsewhere");
    assert!(e.message.contains("`KILN_DIST_DIR` is set by the generated job"), "{e}");
    let e = broken("      KILN_LOG: debug", "      GITHUB_TOKEN: x");
    assert!(e.message.contains("`GITHUB_TOKEN`"), "{e}");
    let e = broken("      KILN_LOG: debug", "      kiln_log: debug");
    assert!(e.message.contains("not an environment variable name"), "{e}");
    let e = broken("      KILN_LOG: debug", "      KILN_LOG: ${{ secrets.X }}");
    assert!(e.message.contains("no `${{`"), "{e}");
}

#[test]
fn the_test_filter_is_one_plain_filterset() {
    let text = good().replacen("legs:\n", "tests:\n  filter: package(kiln-kernel-tests)\nlegs:\n", 1);
    assert_eq!(parse(&text).unwrap().tests.filter.as_deref(), Some("package(kiln-kernel-tests)"));
    let text = good().replacen("legs:\n", "tests:\n  filter: \"${{ github.head_ref }}\"\nlegs:\n", 1);
    assert!(parse(&text).unwrap_err().message.contains("`tests.filter`"));
}
