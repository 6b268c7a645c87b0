//! Reads clang offload bundles back (the layout kiln-build's `bundle` writes)
//! and checks one against the code objects it was made from: every entry
//! present once, byte-identical to its input, and its id naming the gfx arch
//! the code object's own metadata names.

use anyhow::{bail, Context, Result};

use crate::hsaco;

const MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// `host-x86_64-unknown-linux-gnu`, `hipv4-amdgcn-amd-amdhsa--gfx90a`, ...
    pub id: String,
    pub offset: u64,
    pub size: u64,
}

impl Entry {
    /// The gfx target id of a HIP entry (`gfx90a`, `gfx90a:xnack-`); `None` for the host.
    pub fn gfx(&self) -> Option<&str> {
        self.id.strip_prefix("hipv4-amdgcn-amd-amdhsa--").or_else(|| self.id.strip_prefix("hip-amdgcn-amd-amdhsa--"))
    }

    pub fn payload<'a>(&self, bundle: &'a [u8]) -> &'a [u8] {
        &bundle[self.offset as usize..(self.offset + self.size) as usize]
    }
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// The entries of an uncompressed bundle, in file order.
pub fn read(bytes: &[u8]) -> Result<Vec<Entry>> {
    if bytes.get(..MAGIC.len()) != Some(MAGIC) {
        bail!("not a clang offload bundle (no __CLANG_OFFLOAD_BUNDLE__ magic)");
    }
    let n = u64_at(bytes, MAGIC.len()).context("truncated bundle header")?;
    let mut at = MAGIC.len() + 8;
    let mut out: Vec<Entry> = Vec::new();
    for i in 0..n {
        let (Some(offset), Some(size), Some(len)) = (u64_at(bytes, at), u64_at(bytes, at + 8), u64_at(bytes, at + 16)) else {
            bail!("bundle entry {i} of {n}: truncated header");
        };
        let id = bytes.get(at + 24..at + 24 + len as usize).with_context(|| format!("bundle entry {i} of {n}: truncated id"))?;
        let id = String::from_utf8(id.to_vec()).with_context(|| format!("bundle entry {i}: id is not UTF-8"))?;
        at += 24 + len as usize;
        if offset.checked_add(size).is_none_or(|end| end > bytes.len() as u64) {
            bail!("bundle entry {id}: bytes {offset}..+{size} run past the end of the file ({} bytes)", bytes.len());
        }
        if out.iter().any(|e| e.id == id) {
            bail!("bundle entry {id} appears twice");
        }
        out.push(Entry { id, offset, size });
    }
    // ROCm's runtime hands its code-object reader only the first 4096 bytes of
    // an image that is not backed by a file (clr), so the whole header must fit.
    if at > 4096 {
        bail!("the bundle header is {at} bytes; the HIP runtime reads only the first 4096 of an in-memory image");
    }
    let mut spans: Vec<(u64, u64, &str)> = out.iter().filter(|e| e.size > 0).map(|e| (e.offset, e.offset + e.size, e.id.as_str())).collect();
    spans.sort();
    for w in spans.windows(2) {
        if w[1].0 < w[0].1 {
            bail!("bundle entries {} and {} overlap", w[0].2, w[1].2);
        }
        if w[0].0 < at as u64 {
            bail!("bundle entry {} overlaps the header", w[0].2);
        }
    }
    Ok(out)
}

/// Checks `bundle` against the `(gfx, code object)` pairs it was made from;
/// returns its entries.
pub fn verify(bundle: &[u8], inputs: &[(&str, &[u8])]) -> Result<Vec<Entry>> {
    let entries = read(bundle)?;
    let hip: Vec<&Entry> = entries.iter().filter(|e| e.gfx().is_some()).collect();
    for (gfx, object) in inputs {
        let Some(e) = hip.iter().find(|e| e.gfx() == Some(*gfx)) else {
            bail!("the bundle has no entry for {gfx}");
        };
        if e.payload(bundle) != *object {
            bail!("the bundle's {gfx} entry differs from the {gfx} code object it was made from");
        }
        let h = hsaco::read(e.payload(bundle)).with_context(|| format!("the bundle's {gfx} entry"))?;
        let named = h.target.rsplit("--").next().unwrap_or("").split(':').next().unwrap_or("");
        if named != gfx.split(':').next().unwrap_or(gfx) {
            bail!("the bundle's {} entry holds a code object for {named} (amdhsa.target {})", e.id, h.target);
        }
    }
    if let Some(extra) = hip.iter().find(|e| !inputs.iter().any(|(g, _)| e.gfx() == Some(*g))) {
        bail!("the bundle has an entry {} that nothing was bundled for", extra.id);
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(entries: &[(&str, u64, u64)], total: usize) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        for (id, off, size) in entries {
            b.extend_from_slice(&off.to_le_bytes());
            b.extend_from_slice(&size.to_le_bytes());
            b.extend_from_slice(&(id.len() as u64).to_le_bytes());
            b.extend_from_slice(id.as_bytes());
        }
        b.resize(total, 0);
        b
    }

    #[test]
    fn damaged_bundles_are_refused_with_the_reason() {
        let err = |b: &[u8]| format!("{:#}", read(b).unwrap_err());
        assert!(err(b"ELF....").contains("no __CLANG_OFFLOAD_BUNDLE__"));
        assert!(err(MAGIC).contains("truncated bundle header"));
        let past = bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx90a", 4096, 100)], 4100);
        assert!(err(&past).contains("gfx90a") && err(&past).contains("run past the end"));
        let twice = bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx90a", 200, 8), ("hipv4-amdgcn-amd-amdhsa--gfx90a", 300, 8)], 400);
        assert!(err(&twice).contains("appears twice"));
        let overlap = bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx90a", 200, 100), ("hipv4-amdgcn-amd-amdhsa--gfx1030", 250, 100)], 400);
        assert!(err(&overlap).contains("overlap"));
        let ids: Vec<String> = (0..80).map(|i| format!("hipv4-amdgcn-amd-amdhsa--gfx9{i:02}")).collect();
        let many: Vec<(&str, u64, u64)> = ids.iter().map(|id| (id.as_str(), 8192, 0)).collect();
        assert!(err(&bundle(&many, 8192)).contains("only the first 4096"));
        let ok = bundle(&[("host-x86_64-unknown-linux-gnu", 200, 0), ("hipv4-amdgcn-amd-amdhsa--gfx90a", 200, 8)], 208);
        let e = read(&ok).unwrap();
        assert_eq!(e[1].gfx(), Some("gfx90a"));
        assert_eq!(e[0].gfx(), None);
        // An input the bundle lacks, and an entry whose bytes are not the input's.
        assert!(format!("{:#}", verify(&ok, &[("gfx1030", &[0u8; 8])]).unwrap_err()).contains("no entry for gfx1030"));
        assert!(format!("{:#}", verify(&ok, &[("gfx90a", &[1u8; 8])]).unwrap_err()).contains("differs"));
    }
}
