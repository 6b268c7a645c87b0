//! The fixture matrix the tests edit, and what its pins.toml builds.

#![allow(dead_code)] // each test file uses its own part of this

use kiln_pins::{HipArch, Sm, Targets};

/// What this fixture's pins.toml builds: the repository's targets at the
/// time of writing, fixed here so that these tests do not move with it.
pub fn targets() -> Targets {
    Targets {
        hip: ["gfx1030", "gfx1100", "gfx90a"].iter().map(|a| HipArch::parse(a).unwrap()).collect(),
        code_object_version: 5,
        cuda_ptx: vec![Sm(80), Sm(89)],
        cuda_sass: vec![Sm(80), Sm(86), Sm(89), Sm(90)],
    }
}

pub const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
pub const DIGEST: &str = "a3ed95caeb02ffe68cdd9fd84406680ae93d633cb16422d00e8a7c22955b46d4";

pub fn good() -> String {
    format!(
        "\
schema: 1
build:
  runs-on: ubuntu-24.04
  rust: 1.95.0
  nextest: 0.9.143
  timeout-minutes: 120
actions:
  checkout: {{ uses: actions/checkout@{SHA}, tag: v6.0.2 }}
  cache: {{ uses: actions/cache@{SHA}, tag: v5.0.5 }}
  upload-artifact: {{ uses: actions/upload-artifact@{SHA}, tag: v6.0.0 }}
  download-artifact: {{ uses: actions/download-artifact@{SHA}, tag: v7.0.0 }}
  attest-build-provenance: {{ uses: actions/attest-build-provenance@{SHA}, tag: v3.2.0 }}
images:
  hip: ghcr.io/kiln-gpu/kiln-runner-rocm@sha256:{DIGEST}
  cuda: ghcr.io/kiln-gpu/kiln-runner-cuda@sha256:{DIGEST}
legs:
  - arch: gfx1030
    backend: hip
    status: active
  - arch: gfx90a
    backend: hip
    status: awaiting-runner
    partitions: 2
    env:
      HSA_XNACK: 1
      KILN_LOG: debug
  - arch: sm_90
    backend: cuda
    status: active
    labels: [h100]
    timeout-minutes: 30
    image: registry.example:5000/kiln/runner-cuda@sha256:{DIGEST}
"
    )
}

pub fn matrix(text: &str) -> kiln_matrix::Matrix {
    kiln_matrix::Matrix::parse(std::path::Path::new("ci/matrix.yaml"), text, std::path::Path::new("pins.toml"), &targets())
        .unwrap_or_else(|e| panic!("{e}"))
}
