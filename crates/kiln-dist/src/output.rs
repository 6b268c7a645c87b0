//! Publishing the dist folder: everything is written into a fresh sibling
//! folder first and swapped in with one atomic rename, so readers (and a run
//! that fails half-way) only ever see the old folder or the whole new one.

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use kiln_manifest::{Manifest, FILE_NAME};

use crate::collect::Collected;

/// A dist folder being written beside the real one; removed unless committed.
pub struct Staged {
    pub dir: PathBuf,
    committed: bool,
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            fs::remove_dir_all(&self.dir).ok();
        }
    }
}

/// Writes `collected` and the manifest into a fresh folder beside `out`.
pub fn stage(out: &Path, manifest: &Manifest, collected: &[Collected]) -> Result<Staged> {
    let parent = out.parent().context("the dist folder has no parent")?;
    fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    let staged = Staged { dir: sibling(out, "new")?, committed: false };
    for c in collected {
        let dest = staged.dir.join(&c.artifact.path);
        fs::create_dir_all(dest.parent().unwrap())?;
        // A copy, not a link: nothing done to the dist folder may reach the cache.
        fs::copy(&c.file, &dest).with_context(|| format!("cannot copy {} to {}", c.file.display(), dest.display()))?;
    }
    fs::write(staged.dir.join(FILE_NAME), manifest.to_json())?;
    Ok(staged)
}

impl Staged {
    /// Replaces `out` with the staged folder in one step.
    pub fn commit(mut self, out: &Path) -> Result<()> {
        swap_in(&self.dir, out)?;
        self.committed = true;
        Ok(())
    }
}

/// A new, empty folder beside `out` (same file system, so renames are atomic).
pub fn sibling(out: &Path, what: &str) -> Result<PathBuf> {
    let name = out.file_name().context("the dist folder has no name")?.to_string_lossy().into_owned();
    for n in 0u32.. {
        let p = out.with_file_name(format!(".{name}.{what}-{}-{n}", std::process::id()));
        match fs::create_dir(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot create {}", p.display())),
        }
    }
    unreachable!()
}

/// Puts `staged` at `out`. With an existing `out` the two are exchanged
/// atomically (Linux `renameat2(RENAME_EXCHANGE)`) and the old one removed.
fn swap_in(staged: &Path, out: &Path) -> Result<()> {
    if !out.exists() {
        return fs::rename(staged, out).with_context(|| format!("cannot move {} to {}", staged.display(), out.display()));
    }
    exchange(staged, out).with_context(|| format!("cannot swap {} into {}", staged.display(), out.display()))?;
    // `staged` now holds the previous dist folder.
    fs::remove_dir_all(staged).ok();
    Ok(())
}

#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use std::{ffi::CString, os::unix::ffi::OsStrExt};
    let ca = CString::new(a.as_os_str().as_bytes())?;
    let cb = CString::new(b.as_os_str().as_bytes())?;
    // SAFETY: both are valid NUL-terminated paths; AT_FDCWD resolves them like rename(2).
    let rc = unsafe { libc::renameat2(libc::AT_FDCWD, ca.as_ptr(), libc::AT_FDCWD, cb.as_ptr(), libc::RENAME_EXCHANGE) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    // Not atomic: there is a moment with no `b`, but never a half-written one.
    let old = b.with_extension("old");
    fs::rename(b, &old)?;
    fs::rename(a, b)?;
    fs::rename(&old, a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swaps_whole_folders_and_cleans_up() {
        let dir = std::env::temp_dir().join(format!("kiln-output-{}", std::process::id()));
        let out = dir.join("dist");
        fs::create_dir_all(&out).unwrap();
        fs::write(out.join("old.txt"), "old").unwrap();
        let staged = Staged { dir: sibling(&out, "new").unwrap(), committed: false };
        fs::write(staged.dir.join("new.txt"), "new").unwrap();
        staged.commit(&out).unwrap();
        assert!(out.join("new.txt").exists() && !out.join("old.txt").exists());
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1, "only the dist folder is left");
        // A staged folder that is dropped (a failed run) leaves nothing behind.
        let abandoned = Staged { dir: sibling(&out, "new").unwrap(), committed: false };
        fs::write(abandoned.dir.join("half.txt"), "half").unwrap();
        drop(abandoned);
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        fs::remove_dir_all(dir).unwrap();
    }
}
