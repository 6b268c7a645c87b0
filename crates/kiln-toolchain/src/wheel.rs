//! Tools that come as Python wheels from PyPI (today: a newer `ptxas` for
//! Blackwell, which Debian's CUDA lacks). A wheel is a zip file; kiln takes
//! one file out of it, after the wheel matched its pinned sha256 and the file
//! matched the hash the wheel's own `RECORD` lists for it, and checks the
//! extracted file against that hash again before every use.

use std::{fs, io::Read, os::unix::fs::PermissionsExt, path::PathBuf};

use anyhow::{bail, Context, Result};
use kiln_pins::WheelPin;
use xshell::Shell;

use crate::{
    cache::{publish_dir, Cache},
    fetch::{self, download_verified, sha256_bytes, sha256_file, HashMismatch},
};

/// A file taken out of a pinned wheel, with the sha256 it must have.
#[derive(Clone, Debug)]
pub struct Tool {
    pub path: PathBuf,
    pub sha256: String,
    /// `nvidia-cuda-nvcc-cu12 12.9.86`, for messages and the manifest.
    pub origin: String,
}

fn unpacked_dir(cache: &Cache, pin: &WheelPin, name: &str) -> PathBuf {
    cache.tools().join(format!("{name}-{}", &pin.sha256[..16]))
}

/// Whether `member` of the wheel is in the cache already (not checked: [`tool`] does that).
pub fn is_unpacked(cache: &Cache, pin: &WheelPin, member: &str) -> bool {
    let name = member.rsplit('/').next().unwrap_or(member);
    unpacked_dir(cache, pin, name).join(name).is_file()
}

/// `member` (e.g. `nvidia/cuda_nvcc/bin/ptxas`) of the pinned wheel,
/// downloading and unpacking it into the cache the first time.
pub fn tool(sh: &Shell, cache: &Cache, pin: &WheelPin, member: &str) -> Result<Tool> {
    let name = member.rsplit('/').next().unwrap_or(member);
    let dir = unpacked_dir(cache, pin, name);
    let path = dir.join(name);
    let record = dir.join(format!("{name}.sha256"));
    let origin = format!("{} {}", pin.package, pin.version);
    if let (true, Ok(sha256)) = (path.is_file(), fs::read_to_string(&record)) {
        let sha256 = sha256.trim().to_string();
        match sha256_file(&path) {
            Ok(actual) if actual == sha256 => return Ok(Tool { path, sha256, origin }),
            Ok(actual) => eprintln!(
                "warning: the cached {name} of {origin} at {} has sha256 {actual}, not {sha256} (the wheel's RECORD): unpacking it again",
                path.display()
            ),
            Err(e) => eprintln!("warning: the cached {name} of {origin} at {} cannot be read ({e:#}): unpacking it again", path.display()),
        }
        let aside = cache.root().join("damaged").join(format!("{name}-{}.{}", &pin.sha256[..16], std::process::id()));
        fs::create_dir_all(aside.parent().unwrap())?;
        fs::rename(&dir, &aside).with_context(|| format!("cannot move the damaged {} aside", dir.display()))?;
    }
    let wheel = fetch_wheel(sh, cache, pin)?;
    let bytes = fs::read(&wheel).with_context(|| format!("cannot read {}", wheel.display()))?;
    let what = format!("{origin} ({})", pin.file_name());
    let record_text = String::from_utf8(read_member(&bytes, &record_path(pin)).with_context(|| format!("{what} is not a wheel kiln can read"))?)
        .with_context(|| format!("{what}: RECORD is not UTF-8"))?;
    let sha256 = recorded_sha256(&record_text, member).with_context(|| format!("{what}: RECORD lists no sha256 for {member}"))?;
    let data = read_member(&bytes, member).with_context(|| format!("{what} has no {member}"))?;
    let actual = sha256_bytes(&data);
    if actual != sha256 {
        bail!("{what}: {member} has sha256 {actual}, but the wheel's RECORD says {sha256}: the wheel is damaged");
    }
    let tmp = cache.scratch(&format!("tool-{name}"))?;
    let result = (|| -> Result<()> {
        fs::write(tmp.join(name), &data)?;
        fs::set_permissions(tmp.join(name), fs::Permissions::from_mode(0o755))?;
        fs::write(tmp.join(format!("{name}.sha256")), format!("{sha256}\n"))?;
        publish_dir(&tmp, &dir)
    })();
    if result.is_err() {
        let _ = fs::remove_dir_all(&tmp);
    }
    result.with_context(|| format!("cannot unpack {member} of {what} into {}", dir.display()))?;
    Ok(Tool { path, sha256, origin })
}

/// The cached wheel, checked against its pin before every use; a damaged one
/// is fetched again, and a download with other bytes fails closed.
pub fn fetch_wheel(sh: &Shell, cache: &Cache, pin: &WheelPin) -> Result<PathBuf> {
    let dir = cache.wheels();
    fs::create_dir_all(&dir)?;
    let dest = dir.join(format!("{}.whl", pin.sha256));
    let what = format!("{} {} ({})", pin.package, pin.version, pin.file_name());
    if dest.exists() {
        match sha256_file(&dest) {
            Ok(actual) if actual == pin.sha256 => return Ok(dest),
            Ok(actual) => {
                eprintln!("warning: the cached {what} at {} has sha256 {actual}, not the pinned {}: downloading it again", dest.display(), pin.sha256)
            }
            Err(e) => eprintln!("warning: the cached {what} at {} cannot be read ({e:#}): downloading it again", dest.display()),
        }
        fs::remove_file(&dest).with_context(|| format!("cannot remove the damaged {}", dest.display()))?;
    }
    download_verified(sh, &pin.url, &pin.sha256, &what, &dest).map_err(|e| match e.downcast::<HashMismatch>() {
        Ok(m) => anyhow::anyhow!(m),
        Err(e) => e.context(format!("pins.toml [toolchain].ptxas ({})", pin.url)),
    })?;
    Ok(dest)
}

fn record_path(pin: &WheelPin) -> String {
    // `<name>-<version>.dist-info/RECORD`, the distribution name with `-` as `_`.
    format!("{}-{}.dist-info/RECORD", pin.package.replace('-', "_"), pin.version)
}

/// The sha256 (hex) that a wheel's RECORD lists for `member`
/// (`path,sha256=<urlsafe base64, unpadded>,size`).
fn recorded_sha256(record: &str, member: &str) -> Option<String> {
    let line = record.lines().find(|l| l.split(',').next() == Some(member))?;
    let b64 = line.split(',').nth(1)?.strip_prefix("sha256=")?;
    let raw = base64_urlsafe(b64)?;
    (raw.len() == 32).then(|| fetch::hex(&raw))
}

fn base64_urlsafe(s: &str) -> Option<Vec<u8>> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'-' => Some(62),
        b'_' => Some(63),
        _ => None,
    };
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.trim_end_matches('=').bytes() {
        acc = (acc << 6) | value(c)? as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

fn u16_at(b: &[u8], at: usize) -> Option<usize> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?) as usize)
}

fn u32_at(b: &[u8], at: usize) -> Option<usize> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?) as usize)
}

/// One member of a zip file (stored or deflated), found through the central
/// directory, its CRC-32 checked.
pub fn read_member(zip: &[u8], name: &str) -> Result<Vec<u8>> {
    const EOCD: &[u8] = b"PK\x05\x06";
    let search_from = zip.len().saturating_sub(22 + 65_535);
    let eocd =
        (search_from..zip.len().saturating_sub(21)).rev().find(|&i| &zip[i..i + 4] == EOCD).context("no end of central directory: not a zip file")?;
    let (count, dir_at) = (u16_at(zip, eocd + 10).context("truncated")?, u32_at(zip, eocd + 16).context("truncated")?);
    let mut at = dir_at;
    for _ in 0..count {
        if zip.get(at..at + 4) != Some(b"PK\x01\x02") {
            bail!("damaged central directory at byte {at}");
        }
        let method = u16_at(zip, at + 10).context("truncated")?;
        let crc = u32_at(zip, at + 16).context("truncated")? as u32;
        let (packed, size) = (u32_at(zip, at + 20).context("truncated")?, u32_at(zip, at + 24).context("truncated")?);
        let (name_len, extra_len, comment_len) =
            (u16_at(zip, at + 28).context("truncated")?, u16_at(zip, at + 30).context("truncated")?, u16_at(zip, at + 32).context("truncated")?);
        let local = u32_at(zip, at + 42).context("truncated")?;
        let entry = zip.get(at + 46..at + 46 + name_len).context("truncated")?;
        at += 46 + name_len + extra_len + comment_len;
        if entry != name.as_bytes() {
            continue;
        }
        if packed == 0xffff_ffff || size == 0xffff_ffff || local == 0xffff_ffff {
            bail!("{name}: zip64 entries are not supported");
        }
        if zip.get(local..local + 4) != Some(b"PK\x03\x04") {
            bail!("{name}: damaged local header at byte {local}");
        }
        let start = local + 30 + u16_at(zip, local + 26).context("truncated")? + u16_at(zip, local + 28).context("truncated")?;
        let data = zip.get(start..start + packed).with_context(|| format!("{name}: truncated data"))?;
        let out = match method {
            0 => data.to_vec(),
            8 => {
                let mut out = Vec::with_capacity(size);
                flate2::read::DeflateDecoder::new(data).read_to_end(&mut out).with_context(|| format!("{name}: cannot inflate"))?;
                out
            }
            m => bail!("{name}: compression method {m} is not supported"),
        };
        if out.len() != size || crc32(&out) != crc {
            bail!("{name}: size or CRC-32 does not match the zip directory: the file is damaged");
        }
        return Ok(out);
    }
    bail!("no member {name}")
}

fn crc32(data: &[u8]) -> u32 {
    let mut h = flate2::Crc::new();
    h.update(data);
    h.sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_hashes_are_read_as_pip_writes_them() {
        // sha256("hello\n"), as RECORD writes it.
        let record = "pkg/a.txt,sha256=WJG1tSLV3whtD_CxEPvZ0hu0_HFjrzTQgoai6Eb2vgM,6\npkg-1.0.dist-info/RECORD,,\n";
        assert_eq!(recorded_sha256(record, "pkg/a.txt").as_deref(), Some(sha256_bytes(b"hello\n").as_str()));
        assert_eq!(recorded_sha256(record, "pkg-1.0.dist-info/RECORD"), None);
        assert_eq!(recorded_sha256(record, "missing"), None);
    }

    #[test]
    fn members_are_read_stored_or_deflated_and_damage_is_caught() {
        let text = b"kiln reads one member of a wheel\n".repeat(50);
        for method in [0u16, 8] {
            let zip = tiny_zip("dir/f.txt", &text, method);
            assert_eq!(read_member(&zip, "dir/f.txt").unwrap(), text);
            assert!(read_member(&zip, "dir/other").unwrap_err().to_string().contains("no member"));
            let mut bad = zip.clone();
            bad[60] ^= 1; // inside the data
            assert!(read_member(&bad, "dir/f.txt").is_err());
        }
        assert!(read_member(b"not a zip", "x").unwrap_err().to_string().contains("not a zip"));
    }

    /// A one-member zip file as the format defines it.
    fn tiny_zip(name: &str, data: &[u8], method: u16) -> Vec<u8> {
        let packed = if method == 8 {
            let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
            std::io::Write::write_all(&mut e, data).unwrap();
            e.finish().unwrap()
        } else {
            data.to_vec()
        };
        let crc = crc32(data);
        let mut z = Vec::new();
        let common = |z: &mut Vec<u8>| {
            z.extend(20u16.to_le_bytes());
            z.extend(0u16.to_le_bytes());
            z.extend(method.to_le_bytes());
            z.extend([0u8; 4]);
            z.extend(crc.to_le_bytes());
            z.extend((packed.len() as u32).to_le_bytes());
            z.extend((data.len() as u32).to_le_bytes());
            z.extend((name.len() as u16).to_le_bytes());
            z.extend(0u16.to_le_bytes());
        };
        z.extend(b"PK\x03\x04");
        common(&mut z);
        z.extend(name.as_bytes());
        z.extend(&packed);
        let dir_at = z.len();
        z.extend(b"PK\x01\x02");
        z.extend(20u16.to_le_bytes());
        common(&mut z);
        z.extend([0u8; 10]);
        z.extend(0u32.to_le_bytes());
        z.extend(name.as_bytes());
        let dir_len = z.len() - dir_at;
        z.extend(b"PK\x05\x06");
        z.extend([0u8; 4]);
        z.extend(1u16.to_le_bytes());
        z.extend(1u16.to_le_bytes());
        z.extend((dir_len as u32).to_le_bytes());
        z.extend((dir_at as u32).to_le_bytes());
        z.extend(0u16.to_le_bytes());
        z
    }
}
