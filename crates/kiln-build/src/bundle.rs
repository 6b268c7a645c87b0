//! Clang offload bundles of AMD code objects: one file holding a module's
//! code objects for several gfx archs, which `hipModuleLoadData` accepts as
//! is. The drop-in's `Module::hsaco()` returns one per module.
//!
//! The layout is what `clang-offload-bundler -type=o -bundle-align=4096`
//! writes for HIP device code, uncompressed; kiln's tests compare the two byte
//! for byte (`crates/kiln-dist/tests/hip_bundle.rs`, against Debian's
//! clang-offload-bundler 15):
//!
//! ```text
//! "__CLANG_OFFLOAD_BUNDLE__"  u64 entry count
//! per entry: u64 offset, u64 size, u64 id length, id (no NUL)
//!            ("host-x86_64-unknown-linux-gnu" with no bytes, then
//!             "hipv4-amdgcn-amd-amdhsa--<gfx target id>" per code object)
//! payloads at offsets aligned to 4096, zero-filled between
//! ```
//!
//! Facts behind it (LLVM `clang/lib/Driver/OffloadBundler.cpp`,
//! `BinaryFileHandler::WriteHeader`; `clang/tools/clang-offload-bundler`):
//! - Entries are written in `-targets` order, each offset being the running
//!   end aligned up to `-bundle-align`. That option defaults to 1; clang's HIP
//!   driver always passes `-bundle-align=4096` (`HIPCodeObjectAlign`, in
//!   clang 15's and clang 17's HIP toolchain alike), so kiln aligns to 4096.
//! - The host entry is the dummy clang's HIP driver adds (`-input=/dev/null`):
//!   size 0, its offset the next payload's. kiln writes it first.
//! - The bundler's ids: clang 15 writes the `-targets` strings verbatim.
//!   clang 17 and later rewrite each through `OffloadTargetInfo::str()`
//!   (LLVM D145770: a 4-part triple, then `-` and the target id), so
//!   `host-x86_64-unknown-linux-gnu` comes out as
//!   `host-x86_64-unknown-linux-gnu-`, and clang 17's driver (which passes
//!   `host-x86_64-unknown-linux`) gets `host-x86_64-unknown-linux--`; the HIP
//!   ids come out unchanged. Only the host id's bytes differ (the payloads sit
//!   at 4096 either way), and every runtime skips the host entry, so kiln
//!   keeps clang 15's spelling.
//!
//! Since issue 36 a bundle also holds the LLVM generic targets' code objects
//! (`hipv4-amdgcn-amd-amdhsa--gfx11-generic`, ...). HIP from ROCm 6.4 on
//! asks comgr for the device's processor and for its generic target, and
//! loads the former's entry, else the latter's, whatever their order (clr
//! `ExtractFatBinaryUsingCOMGR`; kiln-validate's `bundle::hip_runtime_pick`
//! models it, and kiln-dist's `tests/hip_selection.rs` holds `kiln::select`
//! to it); older runtimes compare the processor only, so to them a generic
//! entry is one for no device.
//!
//! kiln's own choices: the HIP entries sorted by id (so the same code objects
//! always give the same bytes, whatever order they are passed in), and no
//! compression: compressed (`CCOB`) bundles are read only by ROCm 6.2 and later.
//!
//! What the HIP runtime (ROCm clr) does with it in `hipModuleLoadData`
//! (`hip_module.cpp` -> `DynCO::loadCodeObject` -> `FatBinaryInfo::ExtractFatBinary`
//! in `hip_fatbin.cpp`; ROCm 5.7 walks the bundle itself, 6.x asks comgr's
//! `lookUpCodeObject`, by the same rules): it recognises the magic, skips every
//! entry whose kind is not `hip`/`hipv4`/`hcc` (`hip_code_object.cpp`; the host
//! entry), and takes the first entry whose target id is compatible with the
//! device's ISA name (e.g. `amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-`): the
//! same processor, and `xnack`/`sramecc` equal wherever the entry's id names
//! them (an id without them matches either setting; `isCompatibleIsaName`). No
//! such entry: `hipErrorNoBinaryForGpu`, whose `hipGetErrorString` is "no
//! kernel image is available for execution on the device". For an image not
//! backed by a file it reads only the first 4096 bytes for the header, which
//! kiln-validate's `bundle::read` checks.

pub const MAGIC: &[u8; 24] = b"__CLANG_OFFLOAD_BUNDLE__";
/// The empty host entry clang writes first (its offset is the first payload's).
pub const HOST_ID: &str = "host-x86_64-unknown-linux-gnu";
/// The id prefix of a HIP code object entry; the gfx target id follows.
pub const HIP_ID_PREFIX: &str = "hipv4-amdgcn-amd-amdhsa--";
pub const ALIGN: u64 = 4096;
/// Bump when [`write`] makes other bytes from the same code objects: the
/// dist's bundle jobs are cached by their inputs and this.
pub const VERSION: u32 = 1;

/// The bundle id of the code object for a gfx target id (`gfx90a`, `gfx90a:xnack-`).
pub fn hip_id(gfx: &str) -> String {
    format!("{HIP_ID_PREFIX}{gfx}")
}

/// The ids in the order [`write`] puts them: the host, then the code objects by id.
pub fn ids<'a>(gfx: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut hip: Vec<String> = gfx.into_iter().map(hip_id).collect();
    hip.sort();
    std::iter::once(HOST_ID.to_string()).chain(hip).collect()
}

/// A bundle of `objects` (gfx target id such as `gfx90a` or `gfx90a:xnack-`,
/// code object ELF): the empty host entry, then one entry per object, sorted
/// by id. Panics if a target id is given twice (the runtime would take
/// whichever comes first).
pub fn write(objects: &[(&str, &[u8])]) -> Vec<u8> {
    let mut sorted: Vec<(String, &[u8])> = objects.iter().map(|(gfx, bytes)| (hip_id(gfx), *bytes)).collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(w) = sorted.windows(2).find(|w| w[0].0 == w[1].0) {
        panic!("a code-object bundle names each target once, but {} was given twice", w[0].0);
    }
    let entries: Vec<(&str, &[u8])> = std::iter::once((HOST_ID, &[][..])).chain(sorted.iter().map(|(id, b)| (id.as_str(), *b))).collect();

    let header = MAGIC.len() as u64 + 8 + entries.iter().map(|(id, _)| 24 + id.len() as u64).sum::<u64>();
    let mut offsets = Vec::with_capacity(entries.len());
    let mut at = header;
    for (_, bytes) in &entries {
        at = at.div_ceil(ALIGN) * ALIGN;
        offsets.push(at);
        at += bytes.len() as u64;
    }
    let mut out = Vec::with_capacity(at as usize);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for ((id, bytes), off) in entries.iter().zip(&offsets) {
        out.extend_from_slice(&off.to_le_bytes());
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(&(id.len() as u64).to_le_bytes());
        out.extend_from_slice(id.as_bytes());
    }
    for ((_, bytes), off) in entries.iter().zip(&offsets) {
        out.resize(*off as usize, 0);
        out.extend_from_slice(bytes);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn layout_host_first_then_sorted_and_aligned() {
        let a = vec![0xaa; 5000];
        let b = vec![0xbb; 3];
        let bundle = write(&[("gfx90a", &a), ("gfx1030", &b)]);
        assert_eq!(bundle, write(&[("gfx1030", &b), ("gfx90a", &a)]), "the order given must not matter");
        assert_eq!(&bundle[..24], MAGIC);
        assert_eq!(u64_at(&bundle, 24), 3);
        let mut at = 32;
        let mut seen = Vec::new();
        for _ in 0..3 {
            let (off, size, len) = (u64_at(&bundle, at), u64_at(&bundle, at + 8), u64_at(&bundle, at + 16) as usize);
            seen.push((String::from_utf8(bundle[at + 24..at + 24 + len].to_vec()).unwrap(), off, size));
            at += 24 + len;
        }
        assert_eq!(
            seen,
            [
                (HOST_ID.to_string(), 4096, 0),
                ("hipv4-amdgcn-amd-amdhsa--gfx1030".to_string(), 4096, 3),
                ("hipv4-amdgcn-amd-amdhsa--gfx90a".to_string(), 8192, 5000),
            ]
        );
        assert!(bundle[at..4096].iter().all(|&x| x == 0) && bundle[4099..8192].iter().all(|&x| x == 0));
        assert_eq!(&bundle[4096..4099], &b[..]);
        assert_eq!(&bundle[8192..], &a[..]);
        assert_eq!(ids(["gfx90a", "gfx1030"]), seen.iter().map(|s| s.0.clone()).collect::<Vec<_>>());
    }

    #[test]
    #[should_panic(expected = "gfx90a was given twice")]
    fn a_target_twice_is_refused() {
        write(&[("gfx90a", b"x"), ("gfx90a", b"y")]);
    }
}
