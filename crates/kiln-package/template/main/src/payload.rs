//! The artifacts are stored zstd-compressed (the crates.io size limit), and
//! inflated on first use with a pure-Rust decoder: no C toolchain needed.
//! Every artifact is inflated to at most the size the manifest gives it
//! ([`crate::inflate`]) and checked against its sha256 before anything hands
//! it to a driver: the size and sha256 kiln's manifest gives it, as the
//! crate's generated record of its payloads (`crate::RECORDED`) has them.

/// Every (dist path, zstd bytes) this build carries: the main crate's own
/// (the PTX) plus those of the part crates whose features are enabled.
pub(crate) fn tables() -> Vec<&'static [(&'static str, &'static [u8])]> {
    crate::part_tables()
}

pub(crate) fn find(path: &str) -> Option<&'static [u8]> {
    tables().into_iter().flat_map(|t| t.iter()).find(|(p, _)| *p == path).map(|(_, b)| *b)
}

/// The artifact at `path`, inflated and checked against the manifest's sha256.
pub(crate) fn verified(path: &str) -> Result<Vec<u8>, String> {
    let crate_name = env!("CARGO_PKG_NAME");
    let Some(compressed) = find(path) else {
        return Err(format!("{path} is not carried by this build of {crate_name}"));
    };
    let Some(artifact) = crate::RECORDED.iter().find(|a| a.path == path) else {
        return Err(format!("{path} is carried but not in the manifest's record of the payloads: this build of {crate_name} is damaged"));
    };
    checked(path, compressed, artifact.size, artifact.sha256, "the manifest")
}

/// `compressed`, the payload at `path`, inflated (at most `size` bytes, then
/// hashed) and checked against the size and sha256 that `said_by` gives it;
/// else why not, naming the file and what to do.
pub(crate) fn checked(path: &str, compressed: &[u8], size: u64, sha256: &str, said_by: &str) -> Result<Vec<u8>, String> {
    let crate_name = env!("CARGO_PKG_NAME");
    let damaged = format!(
        "the packaged payload of {crate_name} is damaged \
         (reinstall the crate: `cargo clean -p {crate_name}`, or check what replaced it in the registry cache)"
    );
    let bytes = crate::inflate::inflate_exactly(path, compressed, size).map_err(|e| format!("{e} ({said_by} says {size} bytes with sha256 {sha256}): {damaged}"))?;
    let sha = kiln_manifest::sha256_hex(&bytes);
    if sha != sha256 {
        return Err(format!("{path} inflates to bytes with sha256 {sha}, but {said_by} says {sha256}: {damaged}"));
    }
    Ok(bytes)
}
