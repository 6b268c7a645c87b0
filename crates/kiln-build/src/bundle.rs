//! Clang offload bundles of AMD code objects: one file holding a module's
//! code objects for several gfx archs, which `hipModuleLoadData` accepts as
//! is (the HIP runtime reads the bundle, takes the entry whose ISA is the
//! device's, and fails with `hipErrorNoBinaryForGpu` when there is none).
//! The drop-in's `Module::hsaco()` returns one per module.
//!
//! The layout is what `clang-offload-bundler -type=o -bundle-align=4096`
//! writes for HIP (the alignment clang's HIP driver asks for), uncompressed;
//! kiln's tests compare the two byte for byte:
//!
//! ```text
//! "__CLANG_OFFLOAD_BUNDLE__"  u64 entry count
//! per entry: u64 offset, u64 size, u64 id length, id
//!            ("host-x86_64-unknown-linux-gnu" with no bytes, then
//!             "hipv4-amdgcn-amd-amdhsa--<gfx>" per code object)
//! payloads at offsets aligned to 4096, zero-filled between
//! ```
//!
//! Uncompressed on purpose: compressed (`CCOB`) bundles are read only by ROCm
//! 6.2 and later. ROCm's runtime (clr, via comgr) skips the host entry, takes
//! the entry whose processor is the device's (xnack/sramecc must match where
//! the id names them), and fails with `hipErrorNoBinaryForGpu` ("no kernel
//! image is available for execution on the device") when none is; it reads
//! only the first 4096 bytes of an in-memory image for the header, which
//! kiln-validate checks. Newer bundlers write the host id with a trailing
//! `-`; the runtime ignores host entries either way.

pub const MAGIC: &[u8; 24] = b"__CLANG_OFFLOAD_BUNDLE__";
/// The empty host entry clang writes first (its offset is the first payload's).
pub const HOST_ID: &str = "host-x86_64-unknown-linux-gnu";
/// The id prefix of a HIP code object entry; the gfx target id follows.
pub const HIP_ID_PREFIX: &str = "hipv4-amdgcn-amd-amdhsa--";
pub const ALIGN: u64 = 4096;

/// A bundle of `objects` (gfx target id such as `gfx90a`, code object ELF),
/// in the order given after the host entry.
pub fn write(objects: &[(&str, &[u8])]) -> Vec<u8> {
    let ids: Vec<String> = std::iter::once(HOST_ID.to_string()).chain(objects.iter().map(|(gfx, _)| format!("{HIP_ID_PREFIX}{gfx}"))).collect();
    let sizes: Vec<u64> = std::iter::once(0).chain(objects.iter().map(|(_, b)| b.len() as u64)).collect();
    let header = MAGIC.len() as u64 + 8 + ids.iter().map(|id| 24 + id.len() as u64).sum::<u64>();
    let mut offsets = Vec::new();
    let mut at = header;
    for size in &sizes {
        at = at.div_ceil(ALIGN) * ALIGN;
        offsets.push(at);
        at += size;
    }
    let mut out = Vec::with_capacity(at as usize);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(ids.len() as u64).to_le_bytes());
    for ((id, off), size) in ids.iter().zip(&offsets).zip(&sizes) {
        out.extend_from_slice(&off.to_le_bytes());
        out.extend_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&(id.len() as u64).to_le_bytes());
        out.extend_from_slice(id.as_bytes());
    }
    for ((_, bytes), off) in objects.iter().zip(&offsets[1..]) {
        out.resize(*off as usize, 0);
        out.extend_from_slice(bytes);
    }
    out
}
