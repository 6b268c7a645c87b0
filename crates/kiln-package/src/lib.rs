//! The kernel-artifact crates: what consumers depend on instead of
//! compiling kernels.
//!
//! [`parts::plan`] splits the dist manifest's artifacts into crates that stay
//! under the crates.io upload limit (PTX in the main crate, SASS per sm,
//! HSACO per gfx arch, the static library in pieces), [`generate`] writes
//! them from the template in `template/` with zstd-compressed payloads, and
//! [`cargo`] packages them exactly as `cargo publish` would upload them.

pub mod cargo;
pub mod compress;
pub mod generate;
pub mod parts;
pub mod record;

/// crates.io refuses larger `.crate` files.
pub const CRATES_IO_LIMIT: u64 = 10_485_760;
