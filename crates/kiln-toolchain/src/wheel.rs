//! Inputs that come as Python wheels from PyPI: a newer `ptxas` for
//! Blackwell, which Debian's CUDA lacks ([`tool`]), and folders of headers
//! such as CUTLASS's ([`tree`]). A wheel is a zip file; kiln takes files out
//! of it only after the wheel matched its pinned sha256 and each file matched
//! the hash the wheel's own `RECORD` lists for it, and checks the extracted
//! files against those hashes again before every use.

use std::{
    fs,
    io::Read,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use kiln_manifest::sha256_hex;
use kiln_pins::WheelPin;

use crate::{
    cache::{publish_dir, Cache},
    fetch::{self, download_verified, sha256_file, HashMismatch, Limit},
    http_tier,
    tiers::{Local, Lookup},
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
pub fn tool(cache: &Cache, pin: &WheelPin, member: &str) -> Result<Tool> {
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
        move_aside(cache, &dir)?;
    }
    let w = Wheel::open(cache, pin)?;
    let (data, sha256) = w.checked(member, || read_member(&w.bytes, member).with_context(|| format!("{} has no {member}", w.what)))?;
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
    result.with_context(|| format!("cannot unpack {member} of {} into {}", w.what, dir.display()))?;
    Ok(Tool { path, sha256, origin })
}

/// A read-only folder of pinned wheels (`<sha256>.whl`) that an image carries:
/// kiln's builder image sets it to its `/.kiln/wheels`, so that a dist in it
/// needs no download for any pinned wheel: the toolchain's
/// (ptxas) and each set's wheel inputs (CUTLASS).
pub const SEED_ENV: &str = "KILN_WHEELS";

/// The cached wheel, checked against its pin before every use; else (or a
/// damaged one) read through the cache's tiers as a toolchain package is (a
/// shared remote cache's copy, checked against the pin), else copied from
/// [`SEED_ENV`]'s folder when it holds the wheel, else downloaded from its
/// URL, and then written back to the tiers; other bytes fail closed.
pub fn fetch_wheel(cache: &Cache, pin: &WheelPin) -> Result<PathBuf> {
    let seeds = std::env::var_os(SEED_ENV).filter(|d| !d.is_empty()).map(PathBuf::from);
    fetch_wheel_seeded(cache, pin, seeds.as_deref())
}

fn fetch_wheel_seeded(cache: &Cache, pin: &WheelPin, seeds: Option<&Path>) -> Result<PathBuf> {
    let dir = cache.wheels();
    fs::create_dir_all(&dir)?;
    let what = format!("{} {} ({})", pin.package, pin.version, pin.file_name());
    // The cache's tiers, as for a toolchain package: this machine's, then a
    // shared remote cache (the same bytes, checked against the same pin).
    let local = Local::new(cache, dir.clone(), ".whl");
    let dest = local.blob(&pin.sha256);
    let tiers = http_tier::tiers(cache, local);
    if let Lookup::Hit(path) = tiers.get_blob(&pin.sha256, None, &what, "downloading it again")? {
        return Ok(path);
    }
    if let Some(seed) = seeds.map(|d| d.join(format!("{}.whl", pin.sha256))).filter(|f| f.is_file()) {
        // Checked as copied: the copy is what kiln then uses.
        let part = dest.with_extension("whl.part");
        fs::copy(&seed, &part).with_context(|| format!("cannot copy {} into {}", seed.display(), dir.display()))?;
        let actual = sha256_file(&part)?;
        if actual != pin.sha256 {
            let _ = fs::remove_file(&part);
            bail!(
                "{} ({SEED_ENV}) is not the pinned {what}: its sha256 is {actual}, pins.toml says {}\n  \
                 That folder holds the wheels an image was built with: rebuild the image from this pins.toml, \
                 or unset {SEED_ENV} to download the wheel",
                seed.display(),
                pin.sha256
            );
        }
        fs::rename(&part, &dest)?;
        return tiers.put_blob(&pin.sha256, &dest);
    }
    download_verified(&pin.url, &pin.sha256, Limit::AtMost(fetch::UNPINNED_SIZE_CAP), &what, &dest).map_err(|e| {
        match e.downcast::<HashMismatch>() {
            Ok(m) => anyhow::anyhow!(m),
            Err(e) => e.context(format!("the pinned wheel {} {} ({})", pin.package, pin.version, pin.url)),
        }
    })?;
    tiers.put_blob(&pin.sha256, &dest)
}

/// A folder taken out of a pinned wheel, every file checked.
#[derive(Clone, Debug)]
pub struct Tree {
    /// The folder's root (what `-I` names).
    pub path: PathBuf,
    /// How many files it holds.
    pub files: usize,
    /// `nvidia-cutlass 3.5.0.0`, for messages.
    pub origin: String,
}

/// The list of a tree's files and their sha256 (from the wheel's RECORD), beside the files.
const TREE_LIST: &str = "tree.sha256";

fn tree_dir(cache: &Cache, pin: &WheelPin, tree: &str) -> PathBuf {
    let which = &sha256_hex(tree.as_bytes())[..8];
    cache.tools().join(format!("{}-{}-{which}", pin.package, &pin.sha256[..16]))
}

/// Folder `tree` of the pinned wheel (e.g. `cutlass_library/source/include`),
/// unpacked into the cache the first time, every file matched against the
/// sha256 the wheel's RECORD lists for it; on every later use every file is
/// hashed again against that list (and the folder must hold nothing else).
/// A damaged folder is moved aside and unpacked again.
pub fn tree(cache: &Cache, pin: &WheelPin, tree: &str) -> Result<Tree> {
    let dir = tree_dir(cache, pin, tree);
    let origin = format!("{} {}", pin.package, pin.version);
    let root = dir.join("files");
    if dir.join(TREE_LIST).is_file() {
        match verify_tree(&dir) {
            Ok(files) => return Ok(Tree { path: root, files, origin }),
            Err(e) => eprintln!("warning: the cached `{tree}` of {origin} at {} is damaged ({e:#}): unpacking it again", dir.display()),
        }
        move_aside(cache, &dir)?;
    }
    let w = Wheel::open(cache, pin)?;
    let (bytes, record_text, what) = (&w.bytes, &w.record, &w.what);
    let prefix = format!("{}/", tree.trim_end_matches('/'));
    let tmp = cache.scratch("tree")?;
    let result = (|| -> Result<usize> {
        let mut list = String::new();
        let mut n = 0;
        for entry in entries(bytes)?.iter().filter(|e| e.name.starts_with(&prefix) && !e.name.ends_with('/')) {
            let rel = &entry.name[prefix.len()..];
            let Ok(dest) = kiln_manifest::path_inside(&tmp.join("files"), rel) else {
                bail!("{what}: {} is not a plain path inside {tree}", entry.name);
            };
            let (data, sha256) = w.checked(&entry.name, || read_entry(bytes, entry))?;
            fs::create_dir_all(dest.parent().expect("below files/"))?;
            fs::write(&dest, &data)?;
            list.push_str(&format!("{sha256}  {rel}\n"));
            n += 1;
        }
        // A file RECORD promises under the folder but the zip lacks is a damaged wheel too.
        for line in record_text.lines() {
            let name = line.split(',').next().unwrap_or("");
            if name.starts_with(&prefix) && !list.lines().any(|l| l.split_once("  ").is_some_and(|(_, r)| format!("{prefix}{r}") == name)) {
                bail!("{what}: RECORD lists {name}, which the wheel does not hold");
            }
        }
        if n == 0 {
            bail!("{what} has no files under {tree}/");
        }
        let mut lines: Vec<&str> = list.lines().collect();
        lines.sort_by(|a, b| a[66..].cmp(&b[66..]));
        fs::write(tmp.join(TREE_LIST), lines.join("\n") + "\n")?;
        Ok(n)
    })();
    let files = match result {
        Ok(n) => n,
        Err(e) => {
            let _ = fs::remove_dir_all(&tmp);
            return Err(e);
        }
    };
    publish_dir(&tmp, &dir).with_context(|| format!("cannot unpack {tree} of {what} into {}", dir.display()))?;
    verify_tree(&dir).with_context(|| format!("the unpacked {tree} of {what} does not read back"))?;
    Ok(Tree { path: root, files, origin })
}

/// One file of the pinned wheel (a licence text, say), read out of the
/// checked wheel and matched against the sha256 its RECORD lists.
pub fn member(cache: &Cache, pin: &WheelPin, name: &str) -> Result<Vec<u8>> {
    let w = Wheel::open(cache, pin)?;
    let entry = entries(&w.bytes)?.into_iter().find(|e| e.name == name).with_context(|| format!("{} holds no {name}", w.what))?;
    Ok(w.checked(name, || read_entry(&w.bytes, &entry))?.0)
}

/// Hashes every file of an unpacked tree against its list; returns how many there are.
fn verify_tree(dir: &Path) -> Result<usize> {
    let list = fs::read_to_string(dir.join(TREE_LIST)).with_context(|| format!("cannot read {}", dir.join(TREE_LIST).display()))?;
    let mut expected = std::collections::BTreeMap::new();
    for line in list.lines() {
        let (sha, rel) = line.split_once("  ").with_context(|| format!("{TREE_LIST}: bad line `{line}`"))?;
        expected.insert(rel.to_string(), sha.to_string());
    }
    let root = dir.join("files");
    let mut found = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).with_context(|| format!("cannot read {}", d.display()))? {
            let e = e?;
            let t = e.file_type()?;
            if t.is_dir() {
                stack.push(e.path());
            } else {
                found.push(e.path());
            }
        }
    }
    for path in &found {
        let rel = path.strip_prefix(&root).expect("below the root").to_string_lossy().into_owned();
        match expected.get(&rel) {
            None => bail!("{rel} is not one of the wheel's files"),
            Some(sha) => {
                let actual = sha256_file(path)?;
                if &actual != sha {
                    bail!("{rel} has sha256 {actual}, not {sha} (the wheel's RECORD)");
                }
            }
        }
    }
    if found.len() != expected.len() {
        let present: std::collections::BTreeSet<String> =
            found.iter().map(|p| p.strip_prefix(&root).expect("below the root").to_string_lossy().into_owned()).collect();
        let missing: Vec<&String> = expected.keys().filter(|k| !present.contains(*k)).take(3).collect();
        bail!(
            "{} of the wheel's files are missing (e.g. {})",
            expected.len() - found.len(),
            missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        );
    }
    Ok(found.len())
}

/// A cached damaged folder, moved to `damaged/` under a fresh name (one run
/// may find the same folder damaged twice), so that it is unpacked again.
fn move_aside(cache: &Cache, dir: &std::path::Path) -> Result<()> {
    let name = dir.file_name().expect("a tools/ folder").to_string_lossy().into_owned();
    cache.move_aside(dir, &name).map(drop)
}

/// The pinned wheel's bytes (checked against the pin) and its RECORD.
struct Wheel {
    bytes: Vec<u8>,
    record: String,
    /// `nvidia-cutlass 3.5.0.0 (<file>)`, for messages.
    what: String,
}

impl Wheel {
    fn open(cache: &Cache, pin: &WheelPin) -> Result<Wheel> {
        let path = fetch_wheel(cache, pin)?;
        let bytes = fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let what = format!("{} {} ({})", pin.package, pin.version, pin.file_name());
        let record = String::from_utf8(read_member(&bytes, &record_path(pin)).with_context(|| format!("{what} is not a wheel kiln can read"))?)
            .with_context(|| format!("{what}: RECORD is not UTF-8"))?;
        Ok(Wheel { bytes, record, what })
    }

    /// `member`'s bytes (from `read`) and the sha256 RECORD lists for it,
    /// which they must have; a member RECORD does not list is not read.
    fn checked(&self, member: &str, read: impl FnOnce() -> Result<Vec<u8>>) -> Result<(Vec<u8>, String)> {
        let what = &self.what;
        let sha256 = recorded_sha256(&self.record, member).with_context(|| format!("{what}: RECORD lists no sha256 for {member}"))?;
        let data = read()?;
        let actual = sha256_hex(&data);
        if actual != sha256 {
            bail!("{what}: {member} has sha256 {actual}, but the wheel's RECORD says {sha256}: the wheel is damaged");
        }
        Ok((data, sha256))
    }
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

/// A member of a zip file, as its central directory describes it.
#[derive(Clone, Debug)]
pub struct Entry {
    pub name: String,
    method: u16,
    crc: u32,
    packed: usize,
    size: usize,
    local: usize,
}

/// Every member of a zip file, from its central directory.
pub fn entries(zip: &[u8]) -> Result<Vec<Entry>> {
    const EOCD: &[u8] = b"PK\x05\x06";
    let search_from = zip.len().saturating_sub(22 + 65_535);
    let eocd =
        (search_from..zip.len().saturating_sub(21)).rev().find(|&i| &zip[i..i + 4] == EOCD).context("no end of central directory: not a zip file")?;
    let (count, dir_at) = (u16_at(zip, eocd + 10).context("truncated")?, u32_at(zip, eocd + 16).context("truncated")?);
    let mut at = dir_at;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        if zip.get(at..at + 4) != Some(b"PK\x01\x02") {
            bail!("damaged central directory at byte {at}");
        }
        let method = u16_at(zip, at + 10).context("truncated")? as u16;
        let crc = u32_at(zip, at + 16).context("truncated")? as u32;
        let (packed, size) = (u32_at(zip, at + 20).context("truncated")?, u32_at(zip, at + 24).context("truncated")?);
        let (name_len, extra_len, comment_len) =
            (u16_at(zip, at + 28).context("truncated")?, u16_at(zip, at + 30).context("truncated")?, u16_at(zip, at + 32).context("truncated")?);
        let local = u32_at(zip, at + 42).context("truncated")?;
        let name = zip.get(at + 46..at + 46 + name_len).context("truncated")?;
        let name = String::from_utf8(name.to_vec()).with_context(|| format!("a member name at byte {at} is not UTF-8"))?;
        at += 46 + name_len + extra_len + comment_len;
        out.push(Entry { name, method, crc, packed, size, local });
    }
    Ok(out)
}

/// One member's bytes (stored or deflated), its CRC-32 checked.
pub fn read_entry(zip: &[u8], e: &Entry) -> Result<Vec<u8>> {
    let name = &e.name;
    if e.packed == 0xffff_ffff || e.size == 0xffff_ffff || e.local == 0xffff_ffff {
        bail!("{name}: zip64 entries are not supported");
    }
    if zip.get(e.local..e.local + 4) != Some(b"PK\x03\x04") {
        bail!("{name}: damaged local header at byte {}", e.local);
    }
    let start = e.local + 30 + u16_at(zip, e.local + 26).context("truncated")? + u16_at(zip, e.local + 28).context("truncated")?;
    let data = zip.get(start..start + e.packed).with_context(|| format!("{name}: truncated data"))?;
    let out = match e.method {
        0 => data.to_vec(),
        8 => {
            // The sizes are the zip's claims: memory is reserved for what the
            // data can hold at most, and inflating stops one byte past the claim.
            let mut out = Vec::with_capacity(e.size.min(data.len().saturating_mul(4)));
            flate2::read::DeflateDecoder::new(data)
                .take(e.size as u64 + 1)
                .read_to_end(&mut out)
                .with_context(|| format!("{name}: cannot inflate"))?;
            out
        }
        m => bail!("{name}: compression method {m} is not supported"),
    };
    if out.len() != e.size || crc32(&out) != e.crc {
        bail!("{name}: size or CRC-32 does not match the zip directory: the file is damaged");
    }
    Ok(out)
}

/// One member of a zip file (stored or deflated), found through the central
/// directory, its CRC-32 checked.
pub fn read_member(zip: &[u8], name: &str) -> Result<Vec<u8>> {
    let all = entries(zip)?;
    let e = all.iter().find(|e| e.name == name).with_context(|| format!("no member {name}"))?;
    read_entry(zip, e)
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
        assert_eq!(recorded_sha256(record, "pkg/a.txt").as_deref(), Some(sha256_hex(b"hello\n").as_str()));
        assert_eq!(recorded_sha256(record, "pkg-1.0.dist-info/RECORD"), None);
        assert_eq!(recorded_sha256(record, "missing"), None);
    }

    #[test]
    fn members_are_read_stored_or_deflated_and_damage_is_caught() {
        let text = b"kiln reads one member of a wheel\n".repeat(50);
        for method in [0u16, 8] {
            let zip = zip_file(&[("dir/f.txt", &text)], method);
            assert_eq!(read_member(&zip, "dir/f.txt").unwrap(), text);
            assert!(read_member(&zip, "dir/other").unwrap_err().to_string().contains("no member"));
            let mut bad = zip.clone();
            bad[60] ^= 1; // inside the data
            assert!(read_member(&bad, "dir/f.txt").is_err());
        }
        assert!(read_member(b"not a zip", "x").unwrap_err().to_string().contains("not a zip"));
    }

    /// Serves `file` (read at each request) to every GET on 127.0.0.1: a mirror for the test.
    fn serve_file(file: &Path) -> String {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/{}", listener.local_addr().unwrap(), file.file_name().unwrap().to_string_lossy());
        let file = file.to_path_buf();
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let body = fs::read(&file).unwrap_or_default();
                let _ = write!(stream, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
                let _ = stream.write_all(&body);
            }
        });
        url
    }

    #[test]
    fn a_tool_is_taken_out_checked_and_replaced_when_damaged() {
        let root = std::env::temp_dir().join(format!("kiln-wheel-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        let cache = Cache::at(root.join("cache")).unwrap();
        let tool_bytes = b"#!/bin/sh\necho a tool\n".to_vec();
        // RECORD as pip writes it: urlsafe base64 of the sha256, unpadded.
        let b64 = {
            let raw = <sha2::Sha256 as sha2::Digest>::digest(&tool_bytes);
            const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
            let mut out = String::new();
            for chunk in raw.chunks(3) {
                let n = chunk.iter().fold(0u32, |a, &b| (a << 8) | b as u32) << (8 * (3 - chunk.len()));
                for i in 0..=chunk.len() {
                    out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
                }
            }
            out
        };
        let record = format!("pkg/bin/tool,sha256={b64},{}\npkg-1.0.dist-info/RECORD,,\n", tool_bytes.len());
        let wheel = zip_file(&[("pkg/bin/tool", &tool_bytes), ("pkg-1.0.dist-info/RECORD", record.as_bytes())], 0);
        let file = root.join("pkg-1.0-py3-none-any.whl");
        fs::write(&file, &wheel).unwrap();
        let pin = WheelPin { package: "pkg".into(), version: "1.0".into(), url: serve_file(&file), sha256: sha256_hex(&wheel) };

        let t = tool(&cache, &pin, "pkg/bin/tool").unwrap();
        assert_eq!(fs::read(&t.path).unwrap(), tool_bytes);
        assert_eq!(t.sha256, sha256_hex(&tool_bytes));
        assert!(is_unpacked(&cache, &pin, "pkg/bin/tool"));
        // A byte flipped in the unpacked tool: moved aside and unpacked again, never used.
        let mut bad = tool_bytes.clone();
        bad[3] ^= 1;
        fs::write(&t.path, &bad).unwrap();
        let again = tool(&cache, &pin, "pkg/bin/tool").unwrap();
        assert_eq!(fs::read(&again.path).unwrap(), tool_bytes);
        assert!(fs::read_dir(cache.root().join("damaged")).unwrap().count() == 1, "the damaged copy is kept aside");
        // A damaged cached wheel is fetched again; a source with other bytes fails closed.
        fs::write(cache.wheels().join(format!("{}.whl", pin.sha256)), b"not the wheel").unwrap();
        fetch_wheel(&cache, &pin).unwrap();
        let wrong = WheelPin { sha256: "ab".repeat(32), ..pin.clone() };
        let e = fetch_wheel(&cache, &wrong).unwrap_err();
        assert!(e.to_string().contains("sha256 mismatch") && e.to_string().contains("pkg 1.0"), "{e:#}");
        assert!(!cache.wheels().join(format!("{}.whl", wrong.sha256)).exists());
        // A member the RECORD does not vouch for is refused.
        let e = tool(&cache, &pin, "pkg/bin/other").unwrap_err();
        assert!(format!("{e:#}").contains("RECORD lists no sha256 for pkg/bin/other"), "{e:#}");
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_seeded_wheel_is_used_without_a_download_and_a_wrong_one_stops() {
        let root = tempfile::Builder::new().prefix("kiln-wheel-seed-").tempdir().unwrap();
        let root = root.path();
        let wheel = zip_file(&[("pkg/bin/tool", b"tool")], 0);
        // A URL nothing answers: the wheel can only come from the seed folder.
        let pin =
            WheelPin { package: "pkg".into(), version: "1.0".into(), url: format!("file://{}/gone.whl", root.display()), sha256: sha256_hex(&wheel) };
        let seeds = root.join("seeds");
        fs::create_dir_all(&seeds).unwrap();
        fs::write(seeds.join(format!("{}.whl", pin.sha256)), &wheel).unwrap();

        let cache = Cache::at(root.join("cache")).unwrap();
        let got = fetch_wheel_seeded(&cache, &pin, Some(&seeds)).unwrap();
        assert_eq!(fs::read(&got).unwrap(), wheel);
        // Without the seed (or with another wheel's), it is a download, which fails here.
        let empty = Cache::at(root.join("cache2")).unwrap();
        assert!(fetch_wheel_seeded(&empty, &pin, None).is_err());
        // A seed with other bytes under the pinned name stops, naming it, and leaves nothing.
        fs::write(seeds.join(format!("{}.whl", pin.sha256)), b"not the wheel").unwrap();
        let e = format!("{:#}", fetch_wheel_seeded(&empty, &pin, Some(&seeds)).unwrap_err());
        assert!(e.contains(&seeds.display().to_string()) && e.contains(SEED_ENV) && e.contains("is not the pinned pkg 1.0"), "{e}");
        assert_eq!(fs::read_dir(empty.wheels()).unwrap().count(), 0, "no wheel and no .part left");
    }

    /// A RECORD line for `data` at `name`, as pip writes it.
    fn record_line(name: &str, data: &[u8]) -> String {
        let raw = <sha2::Sha256 as sha2::Digest>::digest(data);
        const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut b64 = String::new();
        for chunk in raw.chunks(3) {
            let n = chunk.iter().fold(0u32, |a, &b| (a << 8) | b as u32) << (8 * (3 - chunk.len()));
            for i in 0..=chunk.len() {
                b64.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        format!("{name},sha256={b64},{}\n", data.len())
    }

    #[test]
    fn a_tree_is_taken_out_file_by_file_against_record_and_damage_is_repaired() {
        let root = std::env::temp_dir().join(format!("kiln-wheel-tree-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        let cache = Cache::at(root.join("cache")).unwrap();
        let (a, b) = (b"#pragma once\n#include \"sub/b.h\"\n".to_vec(), b"#define B 1\n".to_vec());
        let wheel_with = |record: &str, members: &[(&str, &[u8])], label: &str| {
            let mut all: Vec<(&str, &[u8])> = members.to_vec();
            all.push(("pkg-1.0.dist-info/RECORD", record.as_bytes()));
            let wheel = zip_file(&all, 8);
            let file = root.join(format!("{label}.whl"));
            fs::write(&file, &wheel).unwrap();
            WheelPin { package: "pkg".into(), version: "1.0".into(), url: serve_file(&file), sha256: sha256_hex(&wheel) }
        };
        let good = record_line("pkg/include/a.h", &a) + &record_line("pkg/include/sub/b.h", &b) + &record_line("pkg/other.py", b"x");
        let pin = wheel_with(&good, &[("pkg/include/a.h", &a), ("pkg/include/sub/b.h", &b), ("pkg/other.py", b"x")], "good");

        let t = tree(&cache, &pin, "pkg/include").unwrap();
        assert_eq!(t.files, 2, "only the folder asked for");
        assert_eq!(fs::read(t.path.join("sub/b.h")).unwrap(), b);
        // A changed file, a file added, a file removed: each is found, moved aside, unpacked again.
        fs::write(t.path.join("a.h"), b"#pragma once\n").unwrap();
        assert_eq!(fs::read(tree(&cache, &pin, "pkg/include").unwrap().path.join("a.h")).unwrap(), a);
        fs::write(t.path.join("extra.h"), b"").unwrap();
        assert!(!tree(&cache, &pin, "pkg/include").unwrap().path.join("extra.h").exists());
        fs::remove_file(t.path.join("sub/b.h")).unwrap();
        assert_eq!(tree(&cache, &pin, "pkg/include").unwrap().files, 2);
        assert_eq!(fs::read_dir(cache.root().join("damaged")).unwrap().count(), 3, "each damaged copy is kept aside");

        // A wheel whose file is not what its RECORD says, or that lacks a file RECORD lists, is refused.
        let lying = wheel_with(&good, &[("pkg/include/a.h", b"other"), ("pkg/include/sub/b.h", &b)], "lying");
        let e = format!("{:#}", tree(&cache, &lying, "pkg/include").unwrap_err());
        assert!(e.contains("pkg/include/a.h has sha256") && e.contains("the wheel's RECORD says"), "{e}");
        let short = wheel_with(&good, &[("pkg/include/a.h", &a)], "short");
        let e = format!("{:#}", tree(&cache, &short, "pkg/include").unwrap_err());
        assert!(e.contains("RECORD lists pkg/include/sub/b.h, which the wheel does not hold"), "{e}");
        let unlisted = wheel_with(&record_line("pkg/include/a.h", &a), &[("pkg/include/a.h", &a), ("pkg/include/sub/b.h", &b)], "unlisted");
        let e = format!("{:#}", tree(&cache, &unlisted, "pkg/include").unwrap_err());
        assert!(e.contains("RECORD lists no sha256 for pkg/include/sub/b.h"), "{e}");
        let e = format!("{:#}", tree(&cache, &pin, "pkg/nothing").unwrap_err());
        assert!(e.contains("no files under pkg/nothing/"), "{e}");
        assert!(fs::read_dir(cache.tmp()).map_or(true, |mut d| d.next().is_none()), "no scratch is left behind");
        fs::remove_dir_all(&root).unwrap();
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(256), failure_persistence: None, ..Default::default() })]

        /// A wheel (zip) and its RECORD, cut or with bytes changed anywhere:
        /// an error or a member whose CRC-32 and size match, never a panic.
        #[test]
        fn crafted_wheels_and_records_are_errors_not_panics(
            method in proptest::sample::select(vec![0u16, 8]),
            cut in proptest::prelude::any::<proptest::sample::Index>(),
            flips in proptest::collection::vec((proptest::prelude::any::<proptest::sample::Index>(), proptest::prelude::any::<u8>()), 0..4),
            record in proptest::prelude::any::<String>(),
        ) {
            let text = b"kiln reads one member of a wheel\n".repeat(20);
            let mut zip = zip_file(&[("pkg/a.txt", &text), ("pkg-1.0.dist-info/RECORD", b"pkg/a.txt,sha256=WJG1tSLV3whtD_CxEPvZ0hu0_HFjrzTQgoai6Eb2vgM,6\n")], method);
            for (at, b) in flips {
                let i = at.index(zip.len());
                zip[i] = b;
            }
            zip.truncate(cut.index(zip.len() + 1));
            if let Ok(all) = entries(&zip) {
                for e in &all {
                    if let Ok(bytes) = read_entry(&zip, e) {
                        proptest::prop_assert_eq!(bytes.len(), e.size);
                    }
                }
            }
            let _ = read_member(&zip, "pkg/a.txt");
            let _ = recorded_sha256(&record, "pkg/a.txt");
            let _ = recorded_sha256(&format!("pkg/a.txt,sha256={record},1"), "pkg/a.txt");
        }
    }

    #[test]
    fn a_claimed_size_reserves_no_memory_beyond_what_the_data_can_hold() {
        // A deflated member claiming 4 GiB - 2: an error (size mismatch), not a 4 GiB allocation.
        let mut zip = zip_file(&[("a", b"small")], 8);
        let claim = 0xffff_fffeu32.to_le_bytes();
        let dir = zip.windows(4).rposition(|w| w == b"PK\x01\x02").unwrap();
        zip[dir + 24..dir + 28].copy_from_slice(&claim);
        let e = read_member(&zip, "a").unwrap_err().to_string();
        assert!(e.contains("size or CRC-32"), "{e}");
    }

    /// A zip file of `members` (stored, or deflated with `method` 8), as the format defines it.
    fn zip_file(members: &[(&str, &[u8])], method: u16) -> Vec<u8> {
        let (mut z, mut dir) = (Vec::new(), Vec::new());
        for &(name, data) in members {
            let packed = if method == 8 {
                let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
                std::io::Write::write_all(&mut e, data).unwrap();
                e.finish().unwrap()
            } else {
                data.to_vec()
            };
            let local = z.len() as u32;
            let head = |z: &mut Vec<u8>| {
                z.extend(20u16.to_le_bytes());
                z.extend(0u16.to_le_bytes());
                z.extend(method.to_le_bytes());
                z.extend([0u8; 4]);
                z.extend(crc32(data).to_le_bytes());
                z.extend((packed.len() as u32).to_le_bytes());
                z.extend((data.len() as u32).to_le_bytes());
                z.extend((name.len() as u16).to_le_bytes());
                z.extend(0u16.to_le_bytes());
            };
            z.extend(b"PK\x03\x04");
            head(&mut z);
            z.extend(name.as_bytes());
            z.extend(&packed);
            dir.extend(b"PK\x01\x02");
            dir.extend(20u16.to_le_bytes());
            head(&mut dir);
            dir.extend([0u8; 10]);
            dir.extend(local.to_le_bytes());
            dir.extend(name.as_bytes());
        }
        let dir_at = z.len() as u32;
        z.extend(&dir);
        z.extend(b"PK\x05\x06");
        z.extend([0u8; 4]);
        z.extend((members.len() as u16).to_le_bytes());
        z.extend((members.len() as u16).to_le_bytes());
        z.extend((dir.len() as u32).to_le_bytes());
        z.extend(dir_at.to_le_bytes());
        z.extend(0u16.to_le_bytes());
        z
    }
}
