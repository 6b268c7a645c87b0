//! kiln's toolchain: the pinned Debian packages that hold nvcc and clang/HIP,
//! downloaded and verified ([`fetch`]), unpacked into a sysroot ([`sysroot`]),
//! resolved from the pins when they are bumped ([`resolve`]), and run in a
//! sandbox with fixed paths ([`exec`]); tools from pinned PyPI wheels ([`wheel`]).
//! [`remote`] is the optional shared cache on an HTTP server that the local
//! [`Cache`] reads through to: [`tiers`] is the cache as levels behind one
//! trait (this machine's, [`http_tier`] the remote's) and the one
//! read-through over them, for job outputs and pinned downloads alike.

pub mod cache;
pub mod exec;
pub mod fetch;
pub mod http_tier;
pub mod remote;
pub mod resolve;
pub mod sysroot;
pub mod tiers;
pub mod wheel;

pub use cache::Cache;
pub use exec::{Mount, Runner};
pub use sysroot::{Mode, Sysroot};

/// How many jobs run at once unless told (`-j`): one per core this process
/// may use, 2 where that is unknown. The downloads, the job graph and the
/// builder all start from it.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}
