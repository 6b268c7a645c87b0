//! A root filesystem as one deterministic tar: the same inputs give the same
//! bytes on any machine, as any user, at any time.
//!
//! Entries are written in input order (each `.deb`'s own order, inputs in the
//! order given), never from the disk: no umask, owner, mtime or directory
//! order of the machine that builds it reaches the tar. Every entry is owned
//! by root and stamped with one time. A path that two inputs both ship is an
//! error rather than a silent "last one wins": no pinned package set has one
//! today, and one appearing is worth a look.

use std::{
    collections::{BTreeMap, HashMap},
    fs::File,
    io::{self, Read, Write},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use tar::{EntryType, Header};

use kiln_toolchain::fetch::hex;

/// Something unpacked into the root.
#[derive(Clone, Debug)]
pub enum Input {
    /// A Debian package: its data archive, as `dpkg-deb -x` would unpack it.
    Deb { path: PathBuf, what: String },
    /// A Rust dist archive (`rustc-1.95.0-x86_64-unknown-linux-gnu.tar.gz`):
    /// each component it lists, installed below `prefix` as its install.sh would.
    RustArchive { path: PathBuf, what: String, prefix: String },
}

/// Something kiln writes into the root after the inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Extra {
    Dir(String, u32),
    File(String, u32, Vec<u8>),
    Symlink(String, String),
    /// The CA bundle that `update-ca-certificates` would make: every
    /// `usr/share/ca-certificates/**.crt` from the inputs, in byte order of
    /// their paths, each ending in a newline.
    CaBundle(String),
}

/// Where [`Extra::CaBundle`] takes its certificates from.
pub const CA_DIR: &str = "usr/share/ca-certificates/";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// sha256 of the tar (the OCI layer's diff_id).
    pub sha256: String,
    pub bytes: u64,
    pub entries: usize,
}

/// Writes to two writers at once, either of which may be absent.
pub struct Tee<A, B>(pub Option<A>, pub Option<B>);

impl<A: Write, B: Write> Write for Tee<A, B> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(a) = &mut self.0 {
            a.write_all(buf)?;
        }
        if let Some(b) = &mut self.1 {
            b.write_all(buf)?;
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        if let Some(a) = &mut self.0 {
            a.flush()?;
        }
        if let Some(b) = &mut self.1 {
            b.flush()?;
        }
        Ok(())
    }
}

/// Counts and hashes what passes through.
pub struct Hashing<W> {
    pub inner: W,
    pub hasher: Sha256,
    pub bytes: u64,
}

impl<W: Write> Hashing<W> {
    pub fn new(inner: W) -> Self {
        Hashing { inner, hasher: Sha256::new(), bytes: 0 }
    }
    pub fn finish(self) -> (W, String, u64) {
        (self.inner, hex(&self.hasher.finalize()), self.bytes)
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Dir(u32),
    File,
    Symlink(String),
}

impl std::fmt::Display for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Seen::Dir(mode) => write!(f, "a directory, mode {mode:o}"),
            Seen::File => write!(f, "a file"),
            Seen::Symlink(target) => write!(f, "a symlink to {target}"),
        }
    }
}

struct Layout<'w, W: Write> {
    tar: tar::Builder<Hashing<&'w mut W>>,
    seen: HashMap<String, (Seen, String)>,
    epoch: u64,
    certs: BTreeMap<String, Vec<u8>>,
    entries: usize,
}

fn header(kind: EntryType, mode: u32, size: u64, epoch: u64) -> Result<Header> {
    let mut h = Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_username("root")?;
    h.set_groupname("root")?;
    h.set_mtime(epoch);
    h.set_size(size);
    Ok(h)
}

impl<W: Write> Layout<'_, W> {
    fn conflict(&self, path: &str, from: &str, now: Seen) -> anyhow::Error {
        let (was, by) = &self.seen[path];
        anyhow::anyhow!(
            "`/{path}` comes from both {by} ({was}) and {from} ({now}); kiln does not pick one silently.\n  \
             If the two packages really overlap, exclude one in pins.toml and run `cargo xtask container --update`."
        )
    }

    /// Creates the missing parents of `path` (0755); none may be a non-directory,
    /// since a container runtime would write through a symlinked parent.
    fn parents(&mut self, path: &str, from: &str) -> Result<()> {
        let mut at = 0;
        while let Some(i) = path[at..].find('/') {
            let parent = &path[..at + i];
            at += i + 1;
            match self.seen.get(parent) {
                Some((Seen::Dir(_), _)) => {}
                Some((other, by)) => {
                    bail!("`/{path}` from {from} lies below `/{parent}`, which {by} made {other}, not a directory")
                }
                None => self.dir(parent, 0o755, "kiln (a missing parent)")?,
            }
        }
        Ok(())
    }

    fn dir(&mut self, path: &str, mode: u32, from: &str) -> Result<()> {
        match self.seen.get(path) {
            Some((Seen::Dir(m), _)) if *m == mode => return Ok(()),
            Some(_) => return Err(self.conflict(path, from, Seen::Dir(mode))),
            None => {}
        }
        self.parents(path, from)?;
        let mut h = header(EntryType::Directory, mode, 0, self.epoch)?;
        self.tar.append_data(&mut h, format!("{path}/"), io::empty())?;
        self.seen.insert(path.to_string(), (Seen::Dir(mode), from.to_string()));
        self.entries += 1;
        Ok(())
    }

    fn file(&mut self, path: &str, mode: u32, size: u64, data: &mut dyn Read, from: &str) -> Result<()> {
        if self.seen.contains_key(path) {
            return Err(self.conflict(path, from, Seen::File));
        }
        self.parents(path, from)?;
        let mut h = header(EntryType::Regular, mode, size, self.epoch)?;
        if path.starts_with(CA_DIR) && path.ends_with(".crt") {
            let mut bytes = Vec::with_capacity(size as usize);
            data.read_to_end(&mut bytes)?;
            self.tar.append_data(&mut h, path, bytes.as_slice())?;
            self.certs.insert(path.to_string(), bytes);
        } else {
            self.tar.append_data(&mut h, path, data)?;
        }
        self.seen.insert(path.to_string(), (Seen::File, from.to_string()));
        self.entries += 1;
        Ok(())
    }

    fn symlink(&mut self, path: &str, target: &str, from: &str) -> Result<()> {
        match self.seen.get(path) {
            Some((Seen::Symlink(t), _)) if t == target => return Ok(()),
            Some(_) => return Err(self.conflict(path, from, Seen::Symlink(target.to_string()))),
            None => {}
        }
        self.parents(path, from)?;
        let mut h = header(EntryType::Symlink, 0o777, 0, self.epoch)?;
        self.tar.append_link(&mut h, path, target)?;
        self.seen.insert(path.to_string(), (Seen::Symlink(target.to_string()), from.to_string()));
        self.entries += 1;
        Ok(())
    }

    /// Copies one archive's entries, `map` turning each path into its place in
    /// the root (or `None` to leave it out).
    fn archive<R: Read>(
        &mut self,
        archive: &mut tar::Archive<R>,
        what: &str,
        strict_owner: bool,
        map: &dyn Fn(&str) -> Option<String>,
    ) -> Result<()> {
        for entry in archive.entries()? {
            let mut entry = entry?;
            let raw = entry.path()?.to_string_lossy().into_owned();
            let Some(path) = map(&raw) else { continue };
            let h = entry.header();
            let mode = h.mode()? & 0o7777;
            if strict_owner && (h.uid()? != 0 || h.gid()? != 0) {
                bail!("`{raw}` in {what} is owned by {}:{}; kiln's root filesystem keeps only root ownership", h.uid()?, h.gid()?);
            }
            match h.entry_type() {
                EntryType::Directory => {
                    if !path.is_empty() {
                        self.dir(&path, mode, what)?
                    }
                }
                EntryType::Regular | EntryType::Continuous => {
                    let size = entry.size();
                    self.file(&path, mode, size, &mut entry, what)?
                }
                EntryType::Symlink => {
                    let target = entry.link_name()?.context("a symlink without a target")?.to_string_lossy().into_owned();
                    self.symlink(&path, &target, what)?
                }
                other => bail!("`{raw}` in {what} is a {other:?}; kiln's root filesystem holds only directories, files and symlinks"),
            }
        }
        Ok(())
    }
}

/// `./usr/bin/x` → `usr/bin/x`; `./` → `` (the root, which is not an entry).
fn deb_path(raw: &str) -> Option<String> {
    let p = raw.strip_prefix("./").unwrap_or(raw).trim_end_matches('/');
    Some(p.to_string())
}

fn rust_components(path: &Path) -> Result<(String, Vec<String>)> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(File::open(path)?));
    for entry in archive.entries()? {
        let mut entry = entry?;
        let p = entry.path()?.to_string_lossy().into_owned();
        if let Some((top, "components")) = p.split_once('/') {
            let mut text = String::new();
            entry.read_to_string(&mut text)?;
            return Ok((top.to_string(), text.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect()));
        }
    }
    bail!("{} has no `<dir>/components` file: it is not a Rust dist archive", path.display())
}

/// Writes the root filesystem made of `inputs`, then `extras`, to `out`.
pub fn write<W: Write>(inputs: &[Input], extras: &[Extra], epoch: u64, out: &mut W, say: &dyn Fn(String)) -> Result<Summary> {
    let mut tar = tar::Builder::new(Hashing::new(out));
    tar.mode(tar::HeaderMode::Deterministic);
    let mut l = Layout { tar, seen: HashMap::new(), epoch, certs: BTreeMap::new(), entries: 0 };

    for (i, input) in inputs.iter().enumerate() {
        match input {
            Input::Deb { path, what } => {
                let mut child = Command::new("dpkg-deb")
                    .arg("--fsys-tarfile")
                    .arg(path)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .context("cannot run dpkg-deb (apt-get install dpkg)")?;
                let mut archive = tar::Archive::new(child.stdout.take().unwrap());
                let copied = l.archive(&mut archive, what, true, &deb_path);
                // Read to the end (the tar's record padding) so that dpkg-deb never
                // writes into a closed pipe; on an error, closing it stops dpkg-deb.
                let mut stdout = archive.into_inner();
                if copied.is_ok() {
                    io::copy(&mut stdout, &mut io::sink())?;
                }
                drop(stdout);
                let done = child.wait_with_output()?;
                copied.with_context(|| format!("cannot lay out {what} ({})", path.display()))?;
                if !done.status.success() {
                    bail!("dpkg-deb cannot read {what} ({}): {}", path.display(), String::from_utf8_lossy(&done.stderr).trim());
                }
            }
            Input::RustArchive { path, what, prefix } => {
                let (top, components) = rust_components(path)?;
                let map = |raw: &str| {
                    let rest = raw.strip_prefix(&top)?.strip_prefix('/')?;
                    let (component, inner) = rest.split_once('/').unwrap_or((rest, ""));
                    let inner = inner.trim_end_matches('/');
                    if !components.iter().any(|c| c == component) || inner == "manifest.in" {
                        return None;
                    }
                    Some(if inner.is_empty() { prefix.clone() } else { format!("{prefix}/{inner}") })
                };
                let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(File::open(path)?));
                // The archives are built by Rust's CI, whose uid is no one's business.
                l.archive(&mut archive, what, false, &map).with_context(|| format!("cannot lay out {what} ({})", path.display()))?;
            }
        }
        if (i + 1) % 25 == 0 || i + 1 == inputs.len() {
            say(format!("  laid out {}/{} inputs ({} entries)", i + 1, inputs.len(), l.entries));
        }
    }

    for extra in extras {
        match extra {
            Extra::Dir(p, mode) => l.dir(p, *mode, "kiln")?,
            Extra::File(p, mode, data) => l.file(p, *mode, data.len() as u64, &mut data.as_slice(), "kiln")?,
            Extra::Symlink(p, target) => l.symlink(p, target, "kiln")?,
            Extra::CaBundle(p) => {
                if l.certs.is_empty() {
                    bail!("no certificates below /{CA_DIR} for /{p}: is ca-certificates in [containers.builder].include?");
                }
                let mut bundle = Vec::new();
                for bytes in l.certs.values() {
                    bundle.extend_from_slice(bytes);
                    if !bytes.ends_with(b"\n") {
                        bundle.push(b'\n');
                    }
                }
                l.file(p, 0o644, bundle.len() as u64, &mut bundle.as_slice(), "kiln")?;
            }
        }
    }
    let entries = l.entries;
    let hashing = l.tar.into_inner()?;
    let (out, sha256, bytes) = hashing.finish();
    out.flush()?;
    Ok(Summary { sha256, bytes, entries })
}
