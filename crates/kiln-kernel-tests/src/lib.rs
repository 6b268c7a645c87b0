//! GPU kernel correctness tests for kiln's artifacts, and `cargo xtask test-matrix`.
//!
//! The tests themselves are the `kernels` test target (tests/kernels/): every
//! kernel module's representative kernels run on a GPU through kiln-loader and
//! are compared with candle-core's CPU backend (docs/gpu-tests.md). This
//! library holds what they share with `cargo xtask test-matrix` and that needs
//! no candle: finding local GPUs ([`gpu`]), deciding per backend whether the
//! device tests run, are skipped or must fail ([`gate`]), the test naming
//! scheme ([`names`]), reading nextest's JUnit and list output ([`results`]),
//! and the matrix report ([`report`], [`matrix`]).

pub mod gate;
pub mod gpu;
pub mod matrix;
pub mod names;
pub mod report;
pub mod results;

/// The candle-kernels modules kiln builds and these tests cover, in report order.
pub const MODULES: [&str; 11] = ["affine", "binary", "cast", "conv", "fill", "indexing", "quantized", "reduce", "sort", "ternary", "unary"];

/// Which GPU arch a CI leg is (`sm_90`, `gfx90a`): set by the generated workflow.
pub const TEST_ARCH_ENV: &str = "KILN_TEST_ARCH";

/// Which device ordinal to test on when a machine has several (default: the
/// first one whose arch matches `KILN_TEST_ARCH`, or device 0).
pub const TEST_DEVICE_ENV: &str = "KILN_TEST_DEVICE";

/// Fixes the random inputs (printed by every test) to replay a failure.
pub const TEST_SEED_ENV: &str = "KILN_TEST_SEED";
