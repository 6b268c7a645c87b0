//! zstd at level 19: measured on these artifacts it packs within 20% of xz
//! while a pure-Rust decoder inflates it fast enough for first load (see
//! docs/packaging.md for the size/first-load table).

use std::io::Read;

use anyhow::{bail, Context, Result};

pub const LEVEL: i32 = 19;

/// Deterministic: one thread, fixed level, no dictionary, no checksum flag changes.
pub fn zstd(bytes: &[u8]) -> Result<Vec<u8>> {
    zstd::bulk::compress(bytes, LEVEL).context("zstd compression failed")
}

/// Everything [`zstd`]'s output depends on besides its input: the level and
/// the zstd library's version (part of a cache key).
pub fn recipe() -> String {
    format!("zstd level {LEVEL} libzstd {}", zstd::zstd_safe::version_string())
}

/// Checks that `compressed` inflates to exactly `size` bytes with sha256
/// `sha256` (what the manifest, or kiln itself, says its content is),
/// inflating at most `size` + 1 bytes: a payload from a cache (local,
/// remote, a part) is never put into a crate, nor inflated without limit,
/// on its word alone.
pub fn check(compressed: &[u8], size: u64, sha256: &str) -> Result<()> {
    let decoder = zstd::stream::read::Decoder::new(compressed).context("not a zstd stream")?;
    let mut out = Vec::with_capacity(size.min(1 << 30) as usize);
    decoder.take(size.saturating_add(1)).read_to_end(&mut out).context("does not inflate: not zstd, or damaged")?;
    if out.len() as u64 > size {
        bail!("inflates to more than the {size} bytes expected (stopped there)");
    }
    let sha = kiln_manifest::sha256_hex(&out);
    if out.len() as u64 != size || sha != sha256 {
        bail!(
            "inflates to {} bytes with sha256 {}, not the {size} bytes with sha256 {} expected",
            out.len(),
            kiln_manifest::short(&sha, 16),
            kiln_manifest::short(sha256, 16)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_is_checked_against_the_size_and_sha256_it_must_inflate_to() {
        let data = b"a kernel".repeat(64);
        let sha = kiln_manifest::sha256_hex(&data);
        check(&zstd(&data).unwrap(), data.len() as u64, &sha).unwrap();
        let other = zstd(&b"another!".repeat(64)).unwrap();
        let e = format!("{:#}", check(&other, data.len() as u64, &sha).unwrap_err());
        assert!(e.contains("not the 512 bytes"), "{e}");
        let big = zstd(&vec![0u8; 8 << 20]).unwrap();
        let e = format!("{:#}", check(&big, 512, &sha).unwrap_err());
        assert!(e.contains("more than the 512 bytes"), "{e}");
        assert!(check(b"plain text", 1, &sha).is_err());
    }
}
