//! kiln's toolchain: the pinned Debian packages that hold nvcc and clang/HIP,
//! downloaded and verified ([`fetch`]), unpacked into a sysroot ([`sysroot`]),
//! resolved from the pins when they are bumped ([`resolve`]), and run in a
//! sandbox with fixed paths ([`exec`]); tools from pinned PyPI wheels ([`wheel`]).

pub mod cache;
pub mod exec;
pub mod fetch;
pub mod resolve;
pub mod sysroot;
pub mod wheel;

pub use cache::Cache;
pub use exec::{Mount, Runner};
pub use sysroot::{Mode, Sysroot};
