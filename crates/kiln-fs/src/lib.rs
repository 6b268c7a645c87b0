//! kiln never deletes or overwrites what it did not create, and it proves
//! that by content, not by a token. Every folder kiln replaces whole (the
//! dist folder, a shard's part) or fills in place (the container output, a
//! loopback registry) carries a marker file ([`MARKER`]) naming the command
//! that wrote it and listing what kiln put there: for a folder replaced
//! whole every file with its size and sha256 and every folder ([`Owner::seal`],
//! written last, once the folder is complete); for one filled in place the
//! names kiln's command writes at its top ([`Owner::claim_and_mark`]).
//! Before touching such a folder kiln asks [`Owner::claim`], which accepts a
//! missing folder, an empty one, or one whose every entry is what its marker
//! lists (same name, kind, size and sha256). A marker alone proves nothing: a
//! marker copied along with `cp -r`, next to a user's files, is refused,
//! naming the first file kiln did not write. A user's folder, a repository,
//! a regular file or a symbolic link is refused too, before any work starts,
//! with nothing changed. [`Kept`] is the cache's kind: a folder kiln keeps
//! and cleans in place, name by name.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs, io,
    io::Read,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};

/// The marker's file name, inside the folder it marks.
pub const MARKER: &str = ".kiln-owned";

/// The line of a marker after which its listing starts.
const LISTING: &str = "listing:";

/// A kind of folder kiln writes, named by the command that writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The command that writes it, e.g. `cargo xtask dist`.
    pub command: &'static str,
    /// The option that names the folder, e.g. `--out`.
    pub flag: &'static str,
    /// What that command does to the folder when it runs again, for the
    /// marker's text: what the user reads there must be true.
    pub reuse: Reuse,
}

/// What an [`Owner`]'s command does to a folder it wrote, when it runs again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reuse {
    /// Builds the new content beside it and swaps it in: the whole folder is replaced.
    ReplacedWhole,
    /// Writes its own files in place (adds and replaces them); removes nothing else.
    FilledInPlace,
}

/// What [`Owner::claim`] found at the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    Absent,
    Empty,
    /// A folder this owner wrote: everything in it is what its marker lists.
    Ours,
}

/// One line of a marker's listing.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Listed {
    /// A regular file kiln wrote: its size and sha256.
    File { size: u64, sha256: String },
    /// A folder kiln made.
    Dir,
    /// A name at the folder's top that kiln's command (or the program it
    /// runs) fills with content kiln does not list; a trailing `*` makes it a
    /// prefix (`index-state.json.tmp.*`).
    Name,
}

/// A marker's listing: relative paths (`/`-separated) to what kiln wrote there.
#[derive(Debug, Default)]
struct Listing {
    entries: BTreeMap<String, Listed>,
}

impl Listing {
    fn parse(text: &str, marker: &Path) -> Result<Option<Listing>> {
        let mut lines = text.lines().enumerate();
        if !lines.by_ref().any(|(_, l)| l == LISTING) {
            return Ok(None);
        }
        let mut out = Listing::default();
        for (i, line) in lines {
            let bad =
                || anyhow::anyhow!("{}:{}: not a line of kiln's listing: {:?}", marker.display(), i + 1, line.chars().take(200).collect::<String>());
            let (kind, rest) = line.split_once(' ').ok_or_else(bad)?;
            let (path, listed) = match kind {
                "file" => {
                    let mut f = rest.splitn(3, ' ');
                    let (sha256, size, path) = (f.next().ok_or_else(bad)?, f.next().ok_or_else(bad)?, f.next().ok_or_else(bad)?);
                    if !kiln_manifest::is_sha256_hex(sha256) {
                        return Err(bad());
                    }
                    (path, Listed::File { size: size.parse().map_err(|_| bad())?, sha256: sha256.to_string() })
                }
                "dir" => (rest, Listed::Dir),
                "name" => (rest, Listed::Name),
                _ => return Err(bad()),
            };
            if path.is_empty() {
                return Err(bad());
            }
            out.entries.insert(path.to_string(), listed);
        }
        Ok(Some(out))
    }

    fn render(&self) -> String {
        let mut s = format!("{LISTING}\n");
        for (path, listed) in &self.entries {
            match listed {
                Listed::File { size, sha256 } => s.push_str(&format!("file {sha256} {size} {path}\n")),
                Listed::Dir => s.push_str(&format!("dir {path}\n")),
                Listed::Name => s.push_str(&format!("name {path}\n")),
            }
        }
        s
    }

    /// Whether `path` (at the top) is one of the names kiln fills without listing.
    fn names(&self, top: &str) -> bool {
        self.entries.iter().any(|(p, l)| *l == Listed::Name && (p == top || p.strip_suffix('*').is_some_and(|prefix| top.starts_with(prefix))))
    }

    /// Every entry of `dir` (the marker aside) against this listing: the
    /// first that it does not list, or lists otherwise, and why.
    fn first_foreign(&self, dir: &Path) -> Result<Option<(PathBuf, String)>> {
        self.first_foreign_but(dir, &[])
    }

    /// [`Listing::first_foreign`], the relative paths `skip` aside.
    fn first_foreign_but(&self, dir: &Path, skip: &[&str]) -> Result<Option<(PathBuf, String)>> {
        let parents: BTreeSet<String> = self
            .entries
            .keys()
            .flat_map(|p| {
                let parts: Vec<&str> = p.split('/').collect();
                (1..parts.len()).map(move |n| parts[..n].join("/"))
            })
            .collect();
        let mut stack = vec![(dir.to_path_buf(), String::new())];
        while let Some((folder, rel)) = stack.pop() {
            let mut names: Vec<_> = fs::read_dir(&folder)
                .with_context(|| format!("cannot list {}", folder.display()))?
                .map(|e| e.map(|e| e.file_name()))
                .collect::<io::Result<_>>()
                .with_context(|| format!("cannot list {}", folder.display()))?;
            names.sort();
            for name in names {
                let path = folder.join(&name);
                let Some(name) = name.to_str() else { return Ok(Some((path, "its name is not UTF-8: kiln never writes such a name".into()))) };
                let child = if rel.is_empty() { name.to_string() } else { format!("{rel}/{name}") };
                if rel.is_empty() && (name == MARKER || is_marker_tmp(name) || self.names(name)) || skip.contains(&child.as_str()) {
                    continue;
                }
                let meta = fs::symlink_metadata(&path).with_context(|| format!("cannot look at {}", path.display()))?;
                match (self.entries.get(&child), meta.file_type()) {
                    (_, t) if t.is_symlink() => return Ok(Some((path, "a symbolic link: kiln never writes one".into()))),
                    (Some(Listed::Dir), t) if t.is_dir() => stack.push((path, child)),
                    (None, t) if t.is_dir() && parents.contains(&child) => stack.push((path, child)),
                    (Some(Listed::File { size, sha256 }), t) if t.is_file() => {
                        if meta.len() != *size {
                            return Ok(Some((path, format!("{} bytes, kiln wrote {size}: it was changed since", meta.len()))));
                        }
                        let got = sha256_file(&path)?;
                        if got != *sha256 {
                            return Ok(Some((path, format!("sha256 {got}, kiln wrote {sha256}: it was changed since",))));
                        }
                    }
                    (Some(_), _) => return Ok(Some((path, "not what kiln wrote under that name (another kind of file)".into()))),
                    (None, _) => return Ok(Some((path, "not in the listing of what kiln wrote there".into()))),
                }
            }
        }
        Ok(None)
    }
}

/// `<MARKER>.tmp.<pid>`: a marker being written (or one a killed run left).
fn is_marker_tmp(name: &str) -> bool {
    name.strip_prefix(MARKER).and_then(|r| r.strip_prefix(".tmp.")).is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

/// The sha256 of a regular file, read in pieces.
fn sha256_file(path: &Path) -> Result<String> {
    use sha2::Digest;
    let mut f = fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).with_context(|| format!("cannot read {}", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(kiln_manifest::hex(&h.finalize()))
}

/// Every file (size, sha256) and folder below `dir`, the marker aside; a
/// link, a special file or a name kiln could not list back is an error.
fn list_tree(dir: &Path) -> Result<Listing> {
    let mut out = Listing::default();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((folder, rel)) = stack.pop() {
        for e in fs::read_dir(&folder).with_context(|| format!("cannot list {}", folder.display()))? {
            let e = e.with_context(|| format!("cannot list {}", folder.display()))?;
            let path = e.path();
            let name = e.file_name();
            let name = match name.to_str() {
                Some(n) if !n.contains(['\n', '\r']) => n.to_string(),
                _ => bail!("cannot list {}: its name is not one line of UTF-8", path.display()),
            };
            if rel.is_empty() && name == MARKER {
                continue;
            }
            let child = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            let meta = fs::symlink_metadata(&path).with_context(|| format!("cannot look at {}", path.display()))?;
            if meta.is_dir() {
                out.entries.insert(child.clone(), Listed::Dir);
                stack.push((path, child));
            } else if meta.is_file() {
                out.entries.insert(child, Listed::File { size: meta.len(), sha256: sha256_file(&path)? });
            } else {
                bail!("{} is not a regular file or folder: kiln does not list it as its own", path.display());
            }
        }
    }
    Ok(out)
}

impl Owner {
    /// The marker's first line: what [`Owner::claim`] recognises (the rest is for people, then the listing).
    fn marker_line(&self) -> String {
        format!("written by `{}`", self.command)
    }

    fn marker_text(&self, listing: &Listing) -> String {
        let what = match self.reuse {
            Reuse::ReplacedWhole => "kiln replaces this folder whole when that command runs again, but only while it\nholds nothing but what is listed below (same names, sizes and sha256)",
            Reuse::FilledInPlace => "kiln writes its own files here again when that command runs again, and removes\nnothing else; it does so only while the folder holds nothing but the names listed below",
        };
        format!(
            "{}\n\n{what}.\nRemove this file to keep kiln from ever writing here (it will then refuse to use\nthe folder).\n\n{}",
            self.marker_line(),
            listing.render()
        )
    }

    fn refusal(&self, path: &Path, what: &str, todo: &str) -> anyhow::Error {
        anyhow::anyhow!(
            "refusing to use {} as {} of `{}`: {what}. kiln replaces or fills only a folder holding nothing but what it \
             wrote there itself (what its {MARKER} file lists), or an empty one; nothing was changed. {todo}",
            path.display(),
            self.flag,
            self.command,
        )
    }

    /// Whether `path` may be created, filled or replaced by this owner: it is
    /// missing, empty, or a folder holding nothing but what its marker (this
    /// owner's) lists. Else an error naming the first file kiln did not write
    /// there (or changed since) and what to do; a marker alone proves nothing.
    pub fn claim(&self, path: &Path) -> Result<Found> {
        let meta = match fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Found::Absent),
            Err(e) => return Err(e).with_context(|| format!("cannot look at {} ({})", path.display(), self.flag)),
        };
        let elsewhere = format!("Give {} a new or empty folder, or move what is there out of the way first.", self.flag);
        if meta.file_type().is_symlink() {
            return Err(self.refusal(path, "it is a symbolic link (give the folder it points to, if that is what you mean)", &elsewhere));
        }
        if !meta.is_dir() {
            return Err(self.refusal(path, "it is a file, not a folder", &elsewhere));
        }
        let marker = path.join(MARKER);
        let text = match fs::symlink_metadata(&marker) {
            Ok(m) if m.is_file() => Some(fs::read_to_string(&marker).with_context(|| format!("cannot read {}", marker.display()))?),
            Ok(_) => return Err(self.refusal(path, &format!("its {MARKER} is not a regular file"), &elsewhere)),
            Err(_) => None,
        };
        let Some(text) = text else {
            let mut names: Vec<_> = fs::read_dir(path)
                .with_context(|| format!("cannot list {} ({})", path.display(), self.flag))?
                .map(|e| e.map(|e| e.file_name()))
                .collect::<io::Result<_>>()
                .with_context(|| format!("cannot list {} ({})", path.display(), self.flag))?;
            names.sort();
            let Some(first) = names.first() else { return Ok(Found::Empty) };
            return Err(self.refusal(
                path,
                &format!("it holds files kiln did not write ({} first; it has no {MARKER} listing what kiln wrote)", path.join(first).display()),
                &elsewhere,
            ));
        };
        let first = text.lines().next().unwrap_or("");
        // The first line only: the explanation below it may change between kiln versions.
        if first != self.marker_line() {
            return Err(self.refusal(path, &format!("its {MARKER} says \"{first}\", another kiln command's folder"), &elsewhere));
        }
        let Some(listing) = Listing::parse(&text, &marker).map_err(|e| self.refusal(path, &format!("{e:#}"), &elsewhere))? else {
            return Err(self.refusal(
                path,
                &format!("its {MARKER}, written by a kiln from before markers listed what they cover, lists no files, so kiln cannot tell its files from others"),
                &format!("If it holds only an earlier output of `{}`, remove it yourself (`rm -r {}`) and run again; else {}", self.command, path.display(), elsewhere),
            ));
        };
        match listing.first_foreign(path)? {
            None => Ok(Found::Ours),
            Some((file, why)) => Err(self.refusal(
                path,
                &format!("{} is {why}", file.display()),
                &format!(
                    "Move {} (and anything else of yours) out of {}, or give {} a new or empty folder.",
                    file.display(),
                    path.display(),
                    self.flag
                ),
            )),
        }
    }

    /// Writes this owner's marker into `dir`, listing every file (its size
    /// and sha256) and folder there: for a folder [`Reuse::ReplacedWhole`],
    /// once it is complete, just before it is put in place.
    pub fn seal(&self, dir: &Path) -> Result<()> {
        let listing = list_tree(dir)?;
        write_whole(&dir.join(MARKER), &self.marker_text(&listing))
    }

    /// [`Owner::claim`]s `dir`, creates it if missing and marks it as this
    /// owner's, listing `names`: the names at its top that the command (or
    /// the program it runs) writes and fills ([`Reuse::FilledInPlace`]; a
    /// trailing `*` names a prefix). What is below them is not listed, so
    /// kiln never removes it.
    pub fn claim_and_mark(&self, dir: &Path, names: &[&str]) -> Result<PathBuf> {
        self.claim(dir)?;
        fs::create_dir_all(dir).with_context(|| format!("cannot create {} ({})", dir.display(), self.flag))?;
        let listing = Listing { entries: names.iter().map(|n| (n.to_string(), Listed::Name)).collect() };
        write_whole(&dir.join(MARKER), &self.marker_text(&listing))?;
        Ok(dir.to_path_buf())
    }
}

/// Copies the folder `from` into `to` (made if missing), file by file and
/// folder by folder: the one folder copy (a dist moved across filesystems,
/// the tests' fixtures).
pub fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to)?;
    for e in fs::read_dir(from)? {
        let e = e?;
        let dest = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_tree(&e.path(), &dest)?;
        } else {
            fs::copy(e.path(), &dest).with_context(|| format!("cannot copy {}", e.path().display()))?;
        }
    }
    Ok(())
}

/// Adds `added` (paths relative to `dir`, just written there by a kiln
/// command: `sign`'s attestation) to the listing of `dir`, a folder sealed
/// by [`Owner::seal`], so that the command that replaces it still finds it
/// whole. Only when everything else in `dir` is what its marker lists;
/// returns whether it did (a folder kiln cannot prove is its own is left
/// as it is: nothing of a user's is ever added to a listing).
pub fn reseal(dir: &Path, added: &[&str]) -> Result<bool> {
    let marker = dir.join(MARKER);
    if !fs::symlink_metadata(&marker).is_ok_and(|m| m.is_file()) {
        return Ok(false);
    }
    let text = fs::read_to_string(&marker).with_context(|| format!("cannot read {}", marker.display()))?;
    let Ok(Some(listing)) = Listing::parse(&text, &marker) else { return Ok(false) };
    if listing.entries.values().any(|l| *l == Listed::Name) || listing.first_foreign_but(dir, added)?.is_some() {
        return Ok(false);
    }
    let head = &text[..text.find(&format!("\n{LISTING}\n")).map_or(0, |at| at + 1)];
    write_whole(&marker, &format!("{head}{}", list_tree(dir)?.render()))?;
    Ok(true)
}

/// Writes `path` whole or not at all: a new file beside it (created
/// exclusively, never through a link) renamed over it.
fn write_whole(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let tmp = path.with_file_name(format!("{MARKER}.tmp.{}", std::process::id()));
    fs::remove_file(&tmp).ok();
    let mut f = fs::OpenOptions::new().write(true).create_new(true).open(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
    let written = f.write_all(text.as_bytes()).and_then(|()| f.sync_all()).and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = written {
        fs::remove_file(&tmp).ok();
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(())
}

/// A folder kiln keeps over many runs and cleans in place (the cache), rather
/// than replaces whole. kiln removes things from it only when it carries this
/// kind's marker (the same [`MARKER`] file): written when kiln creates the
/// folder or finds it empty, or by an explicit command once the user says an
/// existing folder is kiln's ([`Kept::adopt`]). A folder without it (a user's
/// folder, or one an older kiln made) is used, but nothing in it is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kept {
    /// What the folder is, e.g. `kiln's cache`.
    pub what: &'static str,
    /// How the user names the folder, e.g. `KILN_CACHE_DIR`.
    pub named_by: &'static str,
    /// The command that marks an existing folder as this kind's.
    pub adopt_command: &'static str,
}

impl Kept {
    /// The marker's first line: what [`Kept::marked`] recognises (the rest is for people).
    fn marker_line(&self) -> String {
        format!("{}, written by kiln", self.what)
    }

    fn marker_text(&self) -> String {
        format!(
            "{}\n\nkiln removes what it no longer needs from this folder. Remove this file to keep\nkiln from ever removing anything here (it will still use the folder).\n",
            self.marker_line()
        )
    }

    /// Whether `dir` carries this kind's marker (kiln may clean it).
    pub fn marked(&self, dir: &Path) -> bool {
        fs::read_to_string(dir.join(MARKER)).is_ok_and(|t| t.lines().next() == Some(&self.marker_line()))
    }

    /// Creates `dir` if it is missing and marks it if it is missing or empty;
    /// returns whether it carries the marker. Writing the marker leaves the
    /// folder holding nothing else for a moment, so two processes opening a
    /// new folder at once both find it marked.
    pub fn open(&self, dir: &Path) -> Result<bool> {
        fs::create_dir_all(dir).with_context(|| format!("cannot create {} ({})", dir.display(), self.named_by))?;
        if self.marked(dir) {
            return Ok(true);
        }
        let tmp_prefix = format!("{MARKER}.tmp.");
        let empty = fs::read_dir(dir)
            .with_context(|| format!("cannot list {} ({})", dir.display(), self.named_by))?
            .flatten()
            .all(|e| e.file_name().to_string_lossy().starts_with(&tmp_prefix));
        if !empty {
            return Ok(false);
        }
        self.write_marker(dir)?;
        Ok(self.marked(dir))
    }

    /// Marks `dir`, an existing folder the user says is this kind's. One
    /// marked by another kiln command is refused.
    pub fn adopt(&self, dir: &Path) -> Result<()> {
        if self.marked(dir) {
            return Ok(());
        }
        if let Ok(text) = fs::read_to_string(dir.join(MARKER)) {
            bail!(
                "refusing to mark {} as {}: its {MARKER} says \"{}\", another kiln command's folder",
                dir.display(),
                self.what,
                text.lines().next().unwrap_or("")
            );
        }
        self.write_marker(dir)
    }

    /// Why kiln does not clean `dir` (unmarked) and what the user can do.
    pub fn unmarked_reason(&self, dir: &Path) -> String {
        format!(
            "{} has no {MARKER} file, so kiln cannot tell it is {} (it may be a folder of yours, or one an older kiln \
             made): kiln uses it but removes nothing from it. If it is {}, `{}` marks it; else point {} at a new, empty folder",
            dir.display(),
            self.what,
            self.what,
            self.adopt_command,
            self.named_by
        )
    }

    /// The marker, written whole or not at all (a temporary file hard-linked into place).
    fn write_marker(&self, dir: &Path) -> Result<()> {
        let tmp = dir.join(format!("{MARKER}.tmp.{}", std::process::id()));
        fs::write(&tmp, self.marker_text()).with_context(|| format!("cannot write {}", tmp.display()))?;
        let linked = fs::hard_link(&tmp, dir.join(MARKER));
        fs::remove_file(&tmp).ok();
        match linked {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(e).with_context(|| format!("cannot write {}", dir.join(MARKER).display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIST: Owner = Owner { command: "cargo xtask dist", flag: "--out", reuse: Reuse::ReplacedWhole };
    const OTHER: Owner = Owner { command: "cargo xtask container", flag: "--out", reuse: Reuse::FilledInPlace };

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("kiln-fs-{name}-{}", std::process::id()));
        fs::remove_dir_all(&d).ok();
        fs::create_dir_all(&d).unwrap();
        d
    }

    /// A folder as a dist writes it, sealed.
    fn sealed_dist(dir: &Path) {
        fs::create_dir_all(dir.join("cuda/ptx")).unwrap();
        fs::create_dir_all(dir.join("crates/src/empty")).unwrap();
        fs::write(dir.join("manifest.json"), "{}").unwrap();
        fs::write(dir.join("cuda/ptx/affine.ptx"), "ptx").unwrap();
        DIST.seal(dir).unwrap();
    }

    #[test]
    fn accepts_only_missing_empty_or_folders_holding_just_what_their_marker_lists() {
        let d = scratch("claim");
        assert_eq!(DIST.claim(&d.join("new")).unwrap(), Found::Absent);
        fs::create_dir(d.join("empty")).unwrap();
        assert_eq!(DIST.claim(&d.join("empty")).unwrap(), Found::Empty);

        let user = d.join("user");
        fs::create_dir_all(user.join("sub")).unwrap();
        fs::write(user.join("sub/file.txt"), "mine").unwrap();
        let err = format!("{:#}", DIST.claim(&user).unwrap_err());
        assert!(err.contains(&user.display().to_string()) && err.contains("did not write") && err.contains("--out"), "{err}");
        assert!(user.join("sub/file.txt").exists());

        let dist = d.join("dist");
        sealed_dist(&dist);
        assert_eq!(DIST.claim(&dist).unwrap(), Found::Ours);
        // Another command's folder is not this one's to replace.
        let err = format!("{:#}", OTHER.claim(&dist).unwrap_err());
        assert!(err.contains("cargo xtask dist"), "{err}");

        fs::write(d.join("file"), "x").unwrap();
        assert!(format!("{:#}", DIST.claim(&d.join("file")).unwrap_err()).contains("is a file"));
        std::os::unix::fs::symlink(&dist, d.join("link")).unwrap();
        assert!(format!("{:#}", DIST.claim(&d.join("link")).unwrap_err()).contains("symbolic link"));
        fs::remove_dir_all(&d).unwrap();
    }

    /// Issue 34: a marker copied along with `cp -r target/dist` into a folder
    /// of the user's proves nothing; kiln names the first file it did not
    /// write, and a file kiln wrote but someone changed.
    #[test]
    fn a_copied_marker_next_to_a_users_files_is_refused_naming_the_first_one() {
        let d = scratch("copied");
        let dist = d.join("dist");
        sealed_dist(&dist);
        for (extra, name) in [("photos/2024/beach.jpg", "photos"), ("thesis.pdf", "thesis.pdf"), ("crates/src/empty/notes.txt", "notes.txt")] {
            let user = d.join(format!("user-{name}"));
            copy_tree(&dist, &user).unwrap();
            assert_eq!(DIST.claim(&user).unwrap(), Found::Ours, "a whole copy holds only what kiln wrote");
            fs::create_dir_all(user.join(extra).parent().unwrap()).unwrap();
            fs::write(user.join(extra), "the user's").unwrap();
            let err = format!("{:#}", DIST.claim(&user).unwrap_err());
            assert!(err.contains(name) && err.contains("not in the listing") && err.contains("Move "), "{err}");
            assert_eq!(fs::read_to_string(user.join(extra)).unwrap(), "the user's");
        }
        // A listed file changed since: not what kiln wrote any more.
        fs::write(dist.join("manifest.json"), "{\"mine\": 1}").unwrap();
        let err = format!("{:#}", DIST.claim(&dist).unwrap_err());
        assert!(err.contains("manifest.json") && err.contains("changed since"), "{err}");
        fs::write(dist.join("manifest.json"), "{]").unwrap();
        assert!(format!("{:#}", DIST.claim(&dist).unwrap_err()).contains("sha256"));
        fs::write(dist.join("manifest.json"), "{}").unwrap();
        // A link where kiln wrote a file is never kiln's.
        fs::remove_file(dist.join("cuda/ptx/affine.ptx")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dist.join("cuda/ptx/affine.ptx")).unwrap();
        assert!(format!("{:#}", DIST.claim(&dist).unwrap_err()).contains("symbolic link"));
        // A marker that lists nothing (an older kiln's) proves nothing either.
        let old = d.join("old");
        fs::create_dir_all(&old).unwrap();
        fs::write(old.join("thesis.pdf"), "x").unwrap();
        fs::write(old.join(MARKER), "written by `cargo xtask dist`\n\nkiln replaces this folder whole.\n").unwrap();
        let err = format!("{:#}", DIST.claim(&old).unwrap_err());
        assert!(err.contains("lists no files") && err.contains("rm -r"), "{err}");
        // A damaged listing is named with its line.
        fs::write(old.join(MARKER), "written by `cargo xtask dist`\nlisting:\nfile nothex 1 x\n").unwrap();
        assert!(format!("{:#}", DIST.claim(&old).unwrap_err()).contains(".kiln-owned:3"));
        assert!(old.join("thesis.pdf").exists());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_file_a_kiln_command_adds_to_a_sealed_folder_is_listed_but_never_a_users() {
        let d = scratch("reseal");
        let dist = d.join("dist");
        sealed_dist(&dist);
        fs::write(dist.join("cuda/attestation.jsonl"), "signed").unwrap();
        assert!(DIST.claim(&dist).is_err());
        assert!(reseal(&dist, &["cuda/attestation.jsonl"]).unwrap());
        assert_eq!(DIST.claim(&dist).unwrap(), Found::Ours);
        // A user's file next to it is never listed.
        fs::write(dist.join("thesis.pdf"), "x").unwrap();
        fs::write(dist.join("cuda/attestation.jsonl"), "signed again").unwrap();
        assert!(!reseal(&dist, &["cuda/attestation.jsonl"]).unwrap());
        assert!(format!("{:#}", DIST.claim(&dist).unwrap_err()).contains("thesis.pdf"));
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn claim_and_mark_creates_and_refuses_foreign_folders() {
        let d = scratch("mark");
        let reg = d.join("registry");
        OTHER.claim_and_mark(&reg, &["sha256", "index-state.json", "index-state.json.tmp.*"]).unwrap();
        assert!(reg.join(MARKER).is_file());
        fs::create_dir_all(reg.join("sha256/ab")).unwrap();
        fs::write(reg.join("sha256/ab/cdef"), "blob").unwrap();
        fs::write(reg.join("index-state.json.tmp.12.3"), "half").unwrap();
        OTHER.claim_and_mark(&reg, &["sha256", "index-state.json", "index-state.json.tmp.*"]).unwrap();
        fs::write(reg.join("thesis.pdf"), "x").unwrap();
        let err = format!("{:#}", OTHER.claim_and_mark(&reg, &["sha256"]).unwrap_err());
        assert!(err.contains("thesis.pdf"), "{err}");
        fs::write(d.join("notes.txt"), "x").unwrap();
        assert!(OTHER.claim_and_mark(&d, &[]).is_err());
        assert!(!d.join(MARKER).exists(), "a refused folder gets no marker");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_marker_says_what_its_command_does_and_older_explanations_still_count() {
        let d = scratch("text");
        let (whole, in_place) = (d.join("whole"), d.join("in-place"));
        fs::create_dir_all(&whole).unwrap();
        DIST.seal(&whole).unwrap();
        OTHER.claim_and_mark(&in_place, &["x.tar"]).unwrap();
        let whole_text = fs::read_to_string(whole.join(MARKER)).unwrap();
        let in_place_text = fs::read_to_string(in_place.join(MARKER)).unwrap();
        assert!(whole_text.starts_with("written by `cargo xtask dist`\n") && whole_text.contains("replaces this folder whole"), "{whole_text}");
        assert!(in_place_text.contains("removes\nnothing else") && !in_place_text.contains("whole"), "{in_place_text}");
        // A marker with another explanation above its listing is still this command's.
        fs::write(in_place.join(MARKER), "written by `cargo xtask container`\n\nkiln replaces this folder whole.\n\nlisting:\nname x.tar\n").unwrap();
        assert_eq!(OTHER.claim(&in_place).unwrap(), Found::Ours);
        fs::write(in_place.join(MARKER), "written by `cargo xtask container --x`\nlisting:\n").unwrap();
        assert!(OTHER.claim(&in_place).is_err(), "only the exact first line counts");
        fs::remove_dir_all(&d).unwrap();
    }

    const CACHE: Kept = Kept { what: "kiln's cache", named_by: "KILN_CACHE_DIR", adopt_command: "cargo xtask cache mark" };

    #[test]
    fn a_kept_folder_is_marked_only_when_new_or_empty_or_adopted() {
        let d = scratch("kept");
        assert!(CACHE.open(&d.join("new")).unwrap() && CACHE.marked(&d.join("new")));
        assert!(CACHE.open(&d.join("new")).unwrap(), "opening again keeps it marked");
        fs::create_dir(d.join("empty")).unwrap();
        assert!(CACHE.open(&d.join("empty")).unwrap());
        assert_eq!(fs::read_dir(d.join("empty")).unwrap().count(), 1, "only the marker is left");

        let user = d.join("user");
        fs::create_dir_all(user.join("tmp/photos.2023.12")).unwrap();
        assert!(!CACHE.open(&user).unwrap(), "a folder with things in it is used, not marked");
        assert!(!user.join(MARKER).exists());
        let why = CACHE.unmarked_reason(&user);
        assert!(why.contains(&user.display().to_string()) && why.contains("cargo xtask cache mark") && why.contains("KILN_CACHE_DIR"), "{why}");
        CACHE.adopt(&user).unwrap();
        assert!(CACHE.marked(&user) && CACHE.open(&user).unwrap());

        // A dist folder is not a cache, and a cache is not a dist folder.
        fs::create_dir_all(d.join("dist")).unwrap();
        DIST.seal(&d.join("dist")).unwrap();
        assert!(format!("{:#}", CACHE.adopt(&d.join("dist")).unwrap_err()).contains("cargo xtask dist"));
        assert!(!CACHE.open(&d.join("dist")).unwrap());
        assert!(DIST.claim(&d.join("new")).is_err());
        fs::remove_dir_all(&d).unwrap();
    }
}
