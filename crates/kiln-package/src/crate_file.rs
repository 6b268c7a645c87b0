//! The one reader of `.crate` files (gzipped tars whose every path starts
//! with `<name>-<version>/`), for every place kiln opens one: `verify-crate`,
//! `verify`'s and `--locked`'s payload digests, `publish`, and the source
//! crate a set is built from. What it reads is bounded before it is believed:
//!
//! - the `.crate` itself must be a regular file (not a link, a FIFO that would
//!   block for ever, nor a device such as `/dev/zero` that never ends) of at
//!   most [`Limits::compressed`] bytes;
//! - inside it, only folders and regular files (no link, device, FIFO or
//!   sparse file), each a plain path inside the one package folder
//!   ([`kiln_manifest::path_inside`]), named once;
//! - at most [`Limits::entries`] entries, each inflating to at most
//!   [`Limits::file`] bytes, all together to at most [`Limits::total`]:
//!   a 2 MB gzip of zeros claiming a 60 GiB file stops at the limit, never
//!   reaches memory whole.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    io::Read,
    os::unix::fs::{FileTypeExt, OpenOptionsExt},
    path::Path,
};

use anyhow::{bail, Context, Result};
use kiln_manifest::shown;

/// How much a `.crate` may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The `.crate` file's own size (gzip-compressed).
    pub compressed: u64,
    /// Tar entries, folders included.
    pub entries: usize,
    /// One file, inflated.
    pub file: u64,
    /// Every file together, inflated.
    pub total: u64,
}

/// kiln's limits: crates.io takes at most 10 MiB per `.crate` and kiln's own
/// crates stay under it; these leave room for crates from elsewhere (the
/// source crates, a registry without that limit) while bounding what a
/// hostile one costs.
pub const LIMITS: Limits = Limits { compressed: 512 << 20, entries: 65_536, file: 256 << 20, total: 512 << 20 };

/// What a file system object is, for a message.
fn kind(t: fs::FileType) -> &'static str {
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a folder"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "a regular file"
    }
}

/// The bytes of the `.crate` at `path`: a regular file (looked at without
/// following a link, opened without following one either and checked again
/// once open), at most [`Limits::compressed`] bytes.
pub fn read(path: &Path) -> Result<Vec<u8>> {
    read_within(path, LIMITS)
}

/// [`read`] within `limits`.
pub fn read_within(path: &Path, limits: Limits) -> Result<Vec<u8>> {
    let meta = fs::symlink_metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if !meta.file_type().is_file() {
        let target = fs::read_link(path).map(|t| format!(" to {}", shown(&t.to_string_lossy()))).unwrap_or_default();
        bail!(
            "{} is {}{target}, not a regular file: kiln reads a .crate only from a regular file (give the file itself)",
            path.display(),
            kind(meta.file_type())
        );
    }
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let meta = file.metadata().with_context(|| format!("cannot read {}", path.display()))?;
    if !meta.file_type().is_file() {
        bail!("{} is {} now, not a regular file: refused", path.display(), kind(meta.file_type()));
    }
    if meta.len() > limits.compressed {
        bail!("{} is {} bytes, more than the {} kiln reads as a .crate: refused", path.display(), meta.len(), limits.compressed);
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limits.compressed + 1).read_to_end(&mut bytes).with_context(|| format!("cannot read {}", path.display()))?;
    if bytes.len() as u64 > limits.compressed {
        bail!("{} grew past the {} bytes kiln reads as a .crate while it was read: refused", path.display(), limits.compressed);
    }
    Ok(bytes)
}

/// One file of a `.crate`.
#[derive(Debug)]
pub struct Entry<'a> {
    /// The package folder (`<name>-<version>`), the same for every entry.
    pub top: &'a str,
    /// The path inside it.
    pub rel: &'a str,
}

/// Calls `f` with every regular file of the `.crate` read from `bytes`
/// (`what` names it in errors), in archive order, within `limits`. Folder
/// entries are checked and skipped.
pub fn for_each(bytes: impl Read, what: &str, limits: Limits, mut f: impl FnMut(Entry<'_>, Vec<u8>) -> Result<()>) -> Result<()> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    let (mut entries, mut total) = (0usize, 0u64);
    let mut top: Option<String> = None;
    let mut seen = BTreeSet::new();
    for entry in archive.entries().with_context(|| format!("{what}: not a gzipped tar archive (a .crate file)"))? {
        let mut entry = entry.with_context(|| format!("{what}: a damaged tar archive (or not a gzipped tar)"))?;
        entries += 1;
        if entries > limits.entries {
            bail!("{what}: more than {} entries; kiln reads no .crate that large: refused", limits.entries);
        }
        let raw = entry.path_bytes().into_owned();
        let Ok(path) = String::from_utf8(raw.clone()) else {
            bail!("{what}: the entry `{}` is not named in UTF-8: refused", shown(&String::from_utf8_lossy(&raw)));
        };
        let t = entry.header().entry_type();
        let trimmed = if t.is_dir() { path.trim_end_matches('/') } else { path.as_str() };
        let (dir, rel) = trimmed.split_once('/').unwrap_or((trimmed, ""));
        match &top {
            None => top = Some(dir.to_string()),
            Some(top) if top != dir => {
                bail!("{what}: the entry `{}` is outside the package folder `{}`: refused", shown(&path), shown(top))
            }
            Some(_) => {}
        }
        if kiln_manifest::path_inside(Path::new(""), dir).is_err() {
            bail!("{what}: the entry `{}` is not inside a package folder: refused", shown(&path));
        }
        if t.is_dir() && rel.is_empty() {
            continue;
        }
        if let Err(why) = kiln_manifest::path_inside(Path::new(dir), rel) {
            bail!("{what}: the entry `{}` is {why}: refused", shown(&path));
        }
        if t.is_dir() {
            continue;
        }
        if !t.is_file() {
            let kind = match t {
                tar::EntryType::Symlink => "a symbolic link",
                tar::EntryType::Link => "a hard link",
                tar::EntryType::Char => "a character device",
                tar::EntryType::Block => "a block device",
                tar::EntryType::Fifo => "a FIFO",
                tar::EntryType::GNUSparse => "a sparse file",
                _ => "not a regular file",
            };
            bail!("{what}: the entry `{}` is {kind}; a .crate holds only regular files: refused", shown(&path));
        }
        if !seen.insert(rel.to_string()) {
            bail!("{what}: the entry `{}` is in the archive twice: refused", shown(&path));
        }
        let mut data = Vec::new();
        (&mut entry).take(limits.file + 1).read_to_end(&mut data).with_context(|| format!("{what}: cannot read the entry `{}`", shown(&path)))?;
        if data.len() as u64 > limits.file {
            bail!("{what}: the entry `{}` inflates to more than {} bytes, the most kiln reads of one file: refused", shown(&path), limits.file);
        }
        total += data.len() as u64;
        if total > limits.total {
            bail!("{what}: its files inflate to more than {} bytes, the most kiln reads of one .crate: refused", limits.total);
        }
        f(Entry { top: dir, rel }, data)?;
    }
    if top.is_none() {
        bail!("{what}: an empty archive, not a .crate");
    }
    Ok(())
}

/// Every regular file of the `.crate` `bytes` by its path inside the package
/// folder, within [`LIMITS`].
pub fn files(bytes: &[u8], what: &str) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut out = BTreeMap::new();
    for_each(bytes, what, LIMITS, |e, data| {
        out.insert(e.rel.to_string(), data);
        Ok(())
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default()));
        for (path, t, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*t);
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            if *t == tar::EntryType::Symlink {
                h.set_link_name("/etc/passwd").unwrap();
            }
            // Raw names: the tar crate's own checks would refuse `..`.
            h.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
            h.set_cksum();
            b.append(&h, *data).unwrap();
        }
        b.into_inner().unwrap().finish().unwrap()
    }

    #[test]
    fn a_crate_within_the_limits_reads_back() {
        let bytes = tar_of(&[
            ("c-1.0.0/", tar::EntryType::Directory, b""),
            ("c-1.0.0/Cargo.toml", tar::EntryType::Regular, b"[package]"),
            ("c-1.0.0/src/lib.rs", tar::EntryType::Regular, b"//"),
        ]);
        let files = files(&bytes, "c.crate").unwrap();
        assert_eq!(files.keys().collect::<Vec<_>>(), ["Cargo.toml", "src/lib.rs"]);
    }

    #[test]
    fn entries_that_are_not_plain_files_inside_the_package_are_refused_by_name() {
        for (entries, want) in [
            (vec![("c-1.0.0/a", tar::EntryType::Symlink, &b""[..])], "`c-1.0.0/a` is a symbolic link"),
            (vec![("c-1.0.0/a", tar::EntryType::Fifo, &b""[..])], "`c-1.0.0/a` is a FIFO"),
            (vec![("c-1.0.0/a", tar::EntryType::Char, &b""[..])], "`c-1.0.0/a` is a character device"),
            (vec![("c-1.0.0/../x", tar::EntryType::Regular, &b""[..])], "`c-1.0.0/../x` is not a path inside"),
            (vec![("c-1.0.0/a", tar::EntryType::Regular, &b""[..]), ("d-1/b", tar::EntryType::Regular, &b""[..])], "outside the package folder"),
            (vec![("c-1.0.0/a", tar::EntryType::Regular, &b""[..]), ("c-1.0.0/a", tar::EntryType::Regular, &b""[..])], "twice"),
            (vec![("c-1.0.0/\x1b[2Ja", tar::EntryType::Symlink, &b""[..])], "`c-1.0.0/\\u{1b}[2Ja` is a symbolic link"),
        ] {
            let e = files(&tar_of(&entries), "x.crate").unwrap_err().to_string();
            assert!(e.starts_with("x.crate: ") && e.contains(want) && !e.contains('\x1b'), "{want}: {e}");
        }
    }

    #[test]
    fn a_gzip_bomb_stops_at_the_limit_without_inflating_it_whole() {
        // One entry claiming 60 GiB of zeros: the gzip stream is small, the
        // tar header's size is believed by nobody.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let mut h = tar::Header::new_gnu();
        h.set_path("c-1.0.0/bomb").unwrap();
        h.set_size(60 << 30);
        h.set_cksum();
        std::io::Write::write_all(&mut gz, h.as_bytes()).unwrap();
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..64 {
            std::io::Write::write_all(&mut gz, &zeros).unwrap();
        }
        let bytes = gz.finish().unwrap();
        let small = Limits { compressed: 1 << 20, entries: 10, file: 8 << 20, total: 16 << 20 };
        let e = for_each(&bytes[..], "bomb.crate", small, |_, _| Ok(())).unwrap_err().to_string();
        assert!(e.contains("`c-1.0.0/bomb` inflates to more than 8388608 bytes"), "{e}");
        // Many small files: the total.
        let many: Vec<(String, Vec<u8>)> = (0..4).map(|i| (format!("c-1.0.0/f{i}"), vec![0u8; 5 << 20])).collect();
        let many: Vec<_> = many.iter().map(|(p, d)| (p.as_str(), tar::EntryType::Regular, &d[..])).collect();
        let e = for_each(&tar_of(&many)[..], "many.crate", small, |_, _| Ok(())).unwrap_err().to_string();
        assert!(e.contains("inflate to more than 16777216 bytes"), "{e}");
        let tiny = Limits { entries: 2, ..small };
        let e = for_each(&tar_of(&many)[..], "many.crate", tiny, |_, _| Ok(())).unwrap_err().to_string();
        assert!(e.contains("more than 2 entries"), "{e}");
    }

    #[test]
    fn only_a_regular_file_is_read_as_a_crate() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("zero.crate");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let e = read(&link).unwrap_err().to_string();
        assert!(e.contains("is a symbolic link to /dev/zero, not a regular file"), "{e}");
        let e = read(Path::new("/dev/zero")).unwrap_err().to_string();
        assert!(e.contains("is a character device"), "{e}");
        let fifo = dir.path().join("fifo.crate");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read(&fifo).unwrap_err().to_string();
        assert!(e.contains("is a FIFO"), "{e}");
        let big = dir.path().join("big.crate");
        fs::write(&big, vec![0u8; 2048]).unwrap();
        let e = read_within(&big, Limits { compressed: 1024, ..LIMITS }).unwrap_err().to_string();
        assert!(e.contains("2048 bytes, more than the 1024"), "{e}");
    }
}
