//! `crates/crates.json` in the dist folder: one record per packaged `.crate`.
//! Written by kiln-dist after packaging, read by kiln-publish (and the tests);
//! this is the one definition of it.

use serde::{Deserialize, Serialize};

/// The packaged crates' folder, relative to the dist folder.
pub const CRATES_DIR: &str = "crates";
/// The records' file name inside [`CRATES_DIR`].
pub const CRATES_JSON: &str = "crates.json";
/// The generated workspace the `.crate` files were packaged from, inside [`CRATES_DIR`].
pub const SOURCES_DIR: &str = "src";

/// One packaged crate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrateRecord {
    pub name: String,
    pub version: String,
    /// The `.crate` file, relative to the dist folder.
    pub file: String,
    pub size: u64,
    pub sha256: String,
    /// Artifact bytes carried, before and after zstd (0 for crates without payloads).
    #[serde(default)]
    pub raw_bytes: u64,
    #[serde(default)]
    pub payload_bytes: u64,
}
