//! The artifacts are stored zstd-compressed (the crates.io size limit), and
//! inflated on first use with a pure-Rust decoder: no C toolchain needed.

use std::io::Read;

/// Every (dist path, zstd bytes) this build carries: the main crate's own
/// (the PTX) plus those of the part crates whose features are enabled.
pub(crate) fn tables() -> Vec<&'static [(&'static str, &'static [u8])]> {
    crate::part_tables()
}

pub(crate) fn find(path: &str) -> Option<&'static [u8]> {
    tables().into_iter().flat_map(|t| t.iter()).find(|(p, _)| *p == path).map(|(_, b)| *b)
}

pub(crate) fn inflate(path: &str, compressed: &[u8]) -> Result<Vec<u8>, String> {
    let mut reader = compressed;
    let mut decoder = ruzstd::decoding::StreamingDecoder::new(&mut reader)
        .map_err(|e| format!("{path}: the packaged payload is not zstd: {e}"))?;
    let mut out = Vec::new();
    decoder.read_to_end(&mut out).map_err(|e| format!("{path}: the packaged payload is damaged: {e}"))?;
    Ok(out)
}
