//! NVIDIA fatbinaries, written in-process: one image holding SASS for
//! several sms and PTX, handed to `cuModuleLoadData`, which picks per device
//! the SASS it can run, else JIT-compiles the best PTX. The container is not
//! documented by NVIDIA; the layout below is the one CUDA 12.4's
//! `fatbinary --compress=false` writes (kiln's tests compare the two byte
//! for byte for SASS entries, and read the result back with `cuobjdump`).
//!
//! ```text
//! header   u32 magic 0xBA55ED50, u16 version 1, u16 header size 16, u64 size of what follows
//! entry    u16 kind (1 PTX, 2 ELF), u16 0x0101, u32 entry header size (72 ELF, 88 PTX),
//!          u64 payload size (padded to 8), u32 compressed size (0), u32 options offset
//!          (PTX: 72), u16 minor, u16 major (ELF: e_ident ABI version, 1; PTX: its .version),
//!          u32 sm, u32 name offset, u32 name size, u64 flags (0x11: 64-bit, Linux),
//!          u64 0, u64 uncompressed size (0: stored as is), u64 0,
//!          PTX only: the options string record (u64 offset 80, u64 size 0: none)
//! payload  the ELF, or the PTX text with its NUL; zero-padded to 8 bytes
//! ```

const MAGIC: u32 = 0xba55_ed50;
const FLAGS_64BIT_LINUX: u64 = 0x11;

/// One image of a fatbinary.
pub enum Entry<'a> {
    /// A cubin for `sm` (e.g. 90).
    Sass { sm: u32, elf: &'a [u8] },
    /// PTX text for `compute_<level>`.
    Ptx { level: u32, text: &'a str },
}

fn pad8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// The `.version X.Y` of PTX text, as (major, minor).
fn ptx_version(text: &str) -> (u16, u16) {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(".version"))
        .and_then(|v| {
            let (major, minor) = v.trim().split_once('.')?;
            Some((major.trim().parse().ok()?, minor.trim().parse().ok()?))
        })
        .unwrap_or((0, 0))
}

/// A fatbinary holding `entries` in the order given.
pub fn write(entries: &[Entry]) -> Vec<u8> {
    let mut body = Vec::new();
    for e in entries {
        let (kind, header, payload, arch, (major, minor)): (u16, usize, Vec<u8>, u32, (u16, u16)) = match e {
            Entry::Sass { sm, elf } => (2, 72, elf.to_vec(), *sm, (1, elf.get(8).copied().unwrap_or(0) as u16)),
            Entry::Ptx { level, text } => {
                let mut p = text.as_bytes().to_vec();
                p.push(0);
                (1, 88, p, *level, ptx_version(text))
            }
        };
        let padded = pad8(payload.len());
        let put16 = |b: &mut Vec<u8>, v: u16| b.extend_from_slice(&v.to_le_bytes());
        let put32 = |b: &mut Vec<u8>, v: u32| b.extend_from_slice(&v.to_le_bytes());
        let put64 = |b: &mut Vec<u8>, v: u64| b.extend_from_slice(&v.to_le_bytes());
        put16(&mut body, kind);
        put16(&mut body, 0x0101);
        put32(&mut body, header as u32);
        put64(&mut body, padded as u64);
        put32(&mut body, 0);
        put32(&mut body, if kind == 1 { 72 } else { 0 });
        put16(&mut body, minor);
        put16(&mut body, major);
        put32(&mut body, arch);
        put32(&mut body, 0);
        put32(&mut body, 0);
        put64(&mut body, FLAGS_64BIT_LINUX);
        put64(&mut body, 0);
        put64(&mut body, 0);
        put64(&mut body, 0);
        if kind == 1 {
            put64(&mut body, 80);
            put64(&mut body, 0);
        }
        body.extend_from_slice(&payload);
        body.resize(body.len() + padded - payload.len(), 0);
    }
    let mut out = Vec::with_capacity(16 + body.len());
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&body);
    out
}
