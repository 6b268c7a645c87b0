//! NVIDIA fatbins (the `.nv_fatbin` section of nvcc's host objects): a
//! header, then entries of PTX or SASS, each naming its sm.
//!
//! The layout is not documented by NVIDIA; this follows what `cuobjdump`
//! shows and is checked against real nvcc output in kiln's tests.

use anyhow::{bail, Result};

const MAGIC: u32 = 0xba55_ed50;

/// What a fatbin entry holds: PTX text or a SASS ELF (a cubin).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    Ptx,
    Elf,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub kind: EntryKind,
    /// e.g. 90 for sm_90 / compute_90.
    pub sm: u32,
    pub compressed: bool,
    pub payload_size: u64,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Reads every fatbin in `bytes` (a section may hold several back to back).
pub fn read(bytes: &[u8]) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at + 16 <= bytes.len() {
        let magic = u32_at(bytes, at).unwrap();
        if magic == 0 {
            at += 8; // alignment padding between fatbins
            continue;
        }
        if magic != MAGIC {
            bail!("no fatbin magic at offset {at}");
        }
        let header = u16_at(bytes, at + 6).unwrap() as usize;
        let size = u64_at(bytes, at + 8).unwrap() as usize;
        let end = at + header + size;
        if end > bytes.len() {
            bail!("fatbin at offset {at} runs past the section ({end} > {})", bytes.len());
        }
        let mut e = at + header;
        while e + 64 <= end {
            let (Some(kind), Some(eh), Some(padded), Some(sm), Some(flags)) =
                (u16_at(bytes, e), u32_at(bytes, e + 4), u64_at(bytes, e + 8), u32_at(bytes, e + 28), u64_at(bytes, e + 40))
            else {
                bail!("truncated fatbin entry at offset {e}");
            };
            let kind = match kind {
                1 => EntryKind::Ptx,
                2 => EntryKind::Elf,
                k => bail!("unknown fatbin entry kind {k} at offset {e}"),
            };
            // 0x2000: LZ4, 0x8000: zstd (CUDA 12.8+), per ZLUDA's reading of the format.
            out.push(Entry { kind, sm, compressed: flags & (0x2000 | 0x8000) != 0, payload_size: padded });
            e += eh as usize + padded as usize;
        }
        at = end;
    }
    Ok(out)
}
