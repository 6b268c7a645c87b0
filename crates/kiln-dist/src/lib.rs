//! kiln's build as a library: from kernel sets to dist folders.
//!
//! [`Builder`] is the entry point, for `cargo xtask dist` and for another
//! project's xtask alike. Its settings (`builder.rs`, `settings.rs`) say what
//! to build; its stages (`stages.rs`) provision the pinned toolchain and
//! check it ([`compilers`]), fetch each set's sources and inputs
//! ([`sources`]), select the jobs (`select.rs`) and make them one job graph
//! with the static libraries, the HIP bundles and the crates' payloads
//! ([`graph`]), run it through kiln-build's cache, read every output back
//! ([`collect`]), write each set's manifest ([`set_manifest`]), package the
//! crates ([`package`]), and only when all of that succeeded replace each
//! set's dist folder in one step ([`output`]). [`lock`] compares the result
//! with the committed hashes. Beyond one machine: [`Builder::shard`] builds a
//! part of one set's compiles (balanced by [`costs`]) into a [`part`], and
//! [`Builder::merge`] assembles parts into the same dist folder a single
//! machine writes, through the same stages.

mod builder;
pub mod cache_admin;
pub mod collect;
pub mod compilers;
pub mod costs;
pub mod graph;
pub mod lock;
mod merge;
pub mod output;
pub mod package;
pub mod part;
mod provenance;
mod select;
pub mod set_manifest;
pub mod set_output;
mod settings;
mod shard;
pub mod sources;
mod stages;
pub mod verify;
pub mod verify_crate;

pub use builder::{kiln_root, Builder};
pub use kiln_pins::{KernelSet, StaticLib};
pub use part::Spec;
pub use select::Selection;
pub use set_manifest::SetManifest;
pub use set_output::SetOutput;
pub use settings::LockMode;
pub use shard::{PartOutcome, PlannedJob, PlannedUnit, PlannedWall};
pub use stages::{Dist, Outcome};

/// The main set's dist folder, relative to the repository root (`dist --out`'s default).
pub use kiln_manifest::DIST_DIR;
/// Where kiln's HIP shims live, relative to kiln's repository root.
pub const SHIMS_DIR: &str = "kernels/hip";
/// Where kiln's CUDA headers live (force-included into static libraries' objects).
pub const CUDA_HEADERS_DIR: &str = "kernels/cuda";
