//! kiln never deletes or overwrites what it did not create. Every folder kiln
//! fills and later replaces whole (the dist folder, the container output, a
//! loopback registry) carries a marker file naming the task that wrote it;
//! before touching such a folder kiln asks [`claim`], which accepts only a
//! missing folder, an empty one, or one with that task's marker. Anything
//! else (a user's folder, a repository, a home folder, a regular file, a
//! symbolic link) is refused before any work starts, with nothing changed.

use std::{
    fs, io,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};

/// The marker's file name, inside the folder it marks.
pub const MARKER: &str = ".kiln-owned";

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

/// What [`claim`] found at the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    Absent,
    Empty,
    /// A folder this owner wrote before (its marker, or `recognise` said so).
    Ours,
}

impl Owner {
    /// The marker's first line: what [`Owner::claim`] recognises (the rest is for people).
    fn marker_line(&self) -> String {
        format!("written by `{}`", self.command)
    }

    fn marker_text(&self) -> String {
        let what = match self.reuse {
            Reuse::ReplacedWhole => "kiln replaces this folder whole when that command runs again",
            Reuse::FilledInPlace => "kiln writes its own files here again when that command runs again, and removes\nnothing else",
        };
        format!("{}\n\n{what}. Remove this file to keep kiln from ever writing here (it will then\nrefuse to use the folder).\n", self.marker_line())
    }

    /// Whether `path` may be created, filled or replaced by this owner.
    /// `recognise` accepts folders written before markers existed (for the
    /// dist folder: a `manifest.json` that parses as kiln's).
    pub fn claim(&self, path: &Path, recognise: impl Fn(&Path) -> bool) -> Result<Found> {
        let meta = match fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Found::Absent),
            Err(e) => return Err(e).with_context(|| format!("cannot look at {} ({})", path.display(), self.flag)),
        };
        let refuse = |what: &str| -> Result<Found> {
            bail!(
                "refusing to use {} as {} of `{}`: {what}. kiln replaces only a folder it wrote itself \
                 (one holding its {MARKER} file) or an empty one; nothing was changed. Give {} a new or \
                 empty folder, or move what is there out of the way first.",
                path.display(),
                self.flag,
                self.command,
                self.flag
            )
        };
        if meta.file_type().is_symlink() {
            return refuse("it is a symbolic link (give the folder it points to, if that is what you mean)");
        }
        if !meta.is_dir() {
            return refuse("it is a file, not a folder");
        }
        if let Ok(text) = fs::read_to_string(path.join(MARKER)) {
            let first = text.lines().next().unwrap_or("");
            // The first line only: the explanation below it may change between kiln versions.
            if first == self.marker_line() {
                return Ok(Found::Ours);
            }
            return refuse(&format!("its {MARKER} says \"{first}\", another kiln command's folder"));
        }
        let mut entries = fs::read_dir(path).with_context(|| format!("cannot list {} ({})", path.display(), self.flag))?;
        if entries.next().is_none() {
            return Ok(Found::Empty);
        }
        if recognise(path) {
            return Ok(Found::Ours);
        }
        refuse("it holds files kiln did not write")
    }

    /// Writes this owner's marker into `dir`.
    pub fn mark(&self, dir: &Path) -> Result<()> {
        let path = dir.join(MARKER);
        fs::write(&path, self.marker_text()).with_context(|| format!("cannot write {}", path.display()))
    }

    /// [`Owner::claim`]s `dir`, creates it if missing and marks it: for folders
    /// kiln fills in place (a registry, the container output) rather than swaps whole.
    pub fn claim_and_mark(&self, dir: &Path, recognise: impl Fn(&Path) -> bool) -> Result<PathBuf> {
        self.claim(dir, recognise)?;
        fs::create_dir_all(dir).with_context(|| format!("cannot create {} ({})", dir.display(), self.flag))?;
        self.mark(dir)?;
        Ok(dir.to_path_buf())
    }
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

    #[test]
    fn accepts_only_missing_empty_or_marked_folders() {
        let d = scratch("claim");
        assert_eq!(DIST.claim(&d.join("new"), |_| false).unwrap(), Found::Absent);
        fs::create_dir(d.join("empty")).unwrap();
        assert_eq!(DIST.claim(&d.join("empty"), |_| false).unwrap(), Found::Empty);

        let user = d.join("user");
        fs::create_dir_all(user.join("sub")).unwrap();
        fs::write(user.join("sub/file.txt"), "mine").unwrap();
        let err = format!("{:#}", DIST.claim(&user, |_| false).unwrap_err());
        assert!(err.contains(&user.display().to_string()) && err.contains("did not write") && err.contains("--out"), "{err}");
        assert!(user.join("sub/file.txt").exists());
        // A legacy folder that the caller recognises.
        assert_eq!(DIST.claim(&user, |p| p.join("sub").is_dir()).unwrap(), Found::Ours);

        DIST.mark(&user).unwrap();
        assert_eq!(DIST.claim(&user, |_| false).unwrap(), Found::Ours);
        // Another command's folder is not this one's to replace.
        let err = format!("{:#}", OTHER.claim(&user, |_| false).unwrap_err());
        assert!(err.contains("cargo xtask dist"), "{err}");

        fs::write(d.join("file"), "x").unwrap();
        assert!(format!("{:#}", DIST.claim(&d.join("file"), |_| true).unwrap_err()).contains("is a file"));
        std::os::unix::fs::symlink(&user, d.join("link")).unwrap();
        assert!(format!("{:#}", DIST.claim(&d.join("link"), |_| true).unwrap_err()).contains("symbolic link"));
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn claim_and_mark_creates_and_refuses_foreign_folders() {
        let d = scratch("mark");
        let reg = d.join("registry");
        OTHER.claim_and_mark(&reg, |_| false).unwrap();
        assert!(reg.join(MARKER).is_file());
        OTHER.claim_and_mark(&reg, |_| false).unwrap();
        fs::write(d.join("notes.txt"), "x").unwrap();
        assert!(OTHER.claim_and_mark(&d, |_| false).is_err());
        assert!(!d.join(MARKER).exists(), "a refused folder gets no marker");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_marker_says_what_its_command_does_and_older_explanations_still_count() {
        let d = scratch("text");
        let (whole, in_place) = (d.join("whole"), d.join("in-place"));
        DIST.claim_and_mark(&whole, |_| false).unwrap();
        OTHER.claim_and_mark(&in_place, |_| false).unwrap();
        let whole_text = fs::read_to_string(whole.join(MARKER)).unwrap();
        let in_place_text = fs::read_to_string(in_place.join(MARKER)).unwrap();
        assert!(whole_text.starts_with("written by `cargo xtask dist`\n") && whole_text.contains("replaces this folder whole"), "{whole_text}");
        assert!(in_place_text.contains("removes\nnothing else") && !in_place_text.contains("whole"), "{in_place_text}");
        // A marker written by an older kiln, with another explanation, is still this command's.
        fs::write(in_place.join(MARKER), "written by `cargo xtask container`\n\nkiln replaces this folder whole.\n").unwrap();
        assert_eq!(OTHER.claim(&in_place, |_| false).unwrap(), Found::Ours);
        fs::write(in_place.join(MARKER), "written by `cargo xtask container --x`\n").unwrap();
        assert!(OTHER.claim(&in_place, |_| false).is_err(), "only the exact first line counts");
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
        DIST.claim_and_mark(&d.join("dist"), |_| false).unwrap();
        assert!(format!("{:#}", CACHE.adopt(&d.join("dist")).unwrap_err()).contains("cargo xtask dist"));
        assert!(!CACHE.open(&d.join("dist")).unwrap());
        assert!(DIST.claim(&d.join("new"), |_| false).is_err());
        fs::remove_dir_all(&d).unwrap();
    }
}
