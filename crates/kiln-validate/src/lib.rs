//! What a GPU artifact says about itself, read without a GPU.
//!
//! Nothing of AMD's can run on kiln's machines, so these checks are what
//! stands between a compiler mistake and a shipped artifact: the code object
//! is for the arch and ABI it claims ([`hsaco`], [`cubin`], [`ptx`]), and
//! every module carries the same kernels on every target ([`compare`]).

pub mod ar;
pub mod bundle;
pub mod compare;
pub mod cubin;
pub mod fatbin;
pub mod hsaco;
pub mod ptx;
pub mod shared_lib;
