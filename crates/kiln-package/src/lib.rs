//! The kernel-artifact crates: what consumers depend on instead of
//! compiling kernels.
//!
//! [`parts::tables`] splits the dist manifest's artifacts into crates that
//! stay under the crates.io upload limit (PTX in the main crate, SASS per sm,
//! HSACO per gfx arch, the HIP bundles), [`slices`] cuts the static library
//! into link crates, [`compress`] is the one zstd setting of every payload,
//! [`generate`] writes the crates from the template in `template/` (paths in
//! [`sources`]) around the compressed payloads, and [`cargo`] packages them
//! exactly as `cargo publish` would upload them. The dist's job graph
//! compresses and slices as soon as each artifact exists; generating and
//! packaging need the manifest, so they come last.

pub mod cargo;
pub mod compress;
pub mod crate_file;
pub mod generate;
pub use generate::LicenseText;
pub mod link_stubs;
pub mod parts;
pub mod provenance;
pub mod record;
pub mod slices;
pub mod sources;

/// crates.io refuses larger `.crate` files.
pub const CRATES_IO_LIMIT: u64 = 10_485_760;

/// Compressed payload per crate stays under this, leaving room for the
/// tarball's own overhead below crates.io's limit.
pub const PAYLOAD_BUDGET: u64 = CRATES_IO_LIMIT * 8 / 10;
