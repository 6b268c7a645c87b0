//! kiln's build as a library: from kernel sets to dist folders.
//!
//! [`Builder`] ([`builder`]) is the entry point, for `cargo xtask dist` and
//! for another project's xtask alike: it provisions the pinned toolchain and
//! checks it ([`compilers`]), fetches each set's sources and inputs
//! ([`sources`]), selects the jobs ([`select`]) and makes them one job graph
//! with the static libraries, the HIP bundles and the crates' payloads
//! ([`graph`]), runs it through kiln-build's cache, reads every output back
//! ([`collect`]), writes each set's manifest ([`set_manifest`]), packages the
//! crates ([`package`]), and only when all of that succeeded replaces each
//! set's dist folder in one step ([`output`]). [`lock`] compares the result
//! with the committed hashes. Beyond one machine: [`Builder::shard`]
//! ([`shard`]) builds a part of one set's compiles (balanced by [`costs`])
//! into a [`part`], and [`Builder::merge`] ([`merge`]) assembles parts into
//! the same dist folder a single machine writes, through the same stages.

pub mod builder;
pub mod cache_admin;
pub mod collect;
pub mod compilers;
pub mod costs;
pub mod graph;
pub mod lock;
pub mod merge;
pub mod output;
pub mod package;
pub mod part;
pub mod provenance;
pub mod select;
pub mod set_manifest;
pub mod set_output;
pub mod shard;
pub mod sources;
pub mod verify;
pub mod verify_crate;

pub use builder::{kiln_root, Builder, Dist, LockMode, Outcome};
pub use kiln_pins::{KernelSet, StaticLib};
pub use part::Spec;
pub use select::Selection;
pub use set_manifest::SetManifest;
pub use set_output::SetOutput;

/// The main set's dist folder, relative to the repository root (`dist --out`'s default).
pub use kiln_manifest::DIST_DIR;
/// Where kiln's HIP shims live, relative to kiln's repository root.
pub const SHIMS_DIR: &str = "kernels/hip";
/// Where kiln's CUDA headers live (force-included into static libraries' objects).
pub const CUDA_HEADERS_DIR: &str = "kernels/cuda";
