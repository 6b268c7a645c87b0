//! kiln's toolchain: the pinned Debian packages that hold nvcc and clang/HIP,
//! downloaded and verified ([`fetch`]), unpacked into a sysroot ([`sysroot`]),
//! resolved from the pins when they are bumped ([`resolve`]), and run in a
//! sandbox with fixed paths ([`exec`]); tools from pinned PyPI wheels ([`wheel`]).
//! [`remote`] is the optional shared cache on an HTTP server that the local
//! [`Cache`] reads through to.

pub mod cache;
pub mod exec;
pub mod fetch;
pub mod remote;
pub mod resolve;
pub mod sysroot;
pub mod wheel;

pub use cache::Cache;
pub use exec::{Mount, Runner};
pub use sysroot::{Mode, Sysroot};
