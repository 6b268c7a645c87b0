//! Publishing the dist folder: everything is written into a fresh sibling
//! folder first and swapped in with one atomic rename, so readers (and a run
//! that fails half-way) only ever see the old folder or the whole new one.
//! The folder replaced must be one a dist wrote, or empty ([`OWNER`]): `--out`
//! pointing at a user's folder is refused before anything is built.

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use kiln_manifest::{Manifest, FILE_NAME};

use crate::collect::Collected;

/// The dist folder's owner: `--out` may name only a folder a dist wrote, or an empty one.
pub const OWNER: kiln_fs::Owner = kiln_fs::Owner { command: "cargo xtask dist", flag: "--out", reuse: kiln_fs::Reuse::ReplacedWhole };

/// Fails, naming `out`, unless a dist may replace it. Dist folders written
/// before the marker existed are recognised by their kiln manifest.
pub fn check(out: &Path) -> Result<kiln_fs::Found> {
    OWNER.claim(out, is_dist)
}

fn is_dist(dir: &Path) -> bool {
    let path = dir.join(FILE_NAME);
    fs::read_to_string(&path).is_ok_and(|text| Manifest::from_json(&text, &path.display().to_string()).is_ok())
}

/// A folder being written beside the one it will replace; removed unless committed.
pub struct Staged {
    pub dir: PathBuf,
    committed: bool,
    owner: kiln_fs::Owner,
    /// Folders of this owner written before markers existed.
    recognise: fn(&Path) -> bool,
}

impl Staged {
    /// A fresh, empty folder beside `out` (created with its parents), to be
    /// filled and then [`Staged::commit`]ted in place of `out`, which `owner` must own.
    pub fn begin(out: &Path, owner: kiln_fs::Owner, recognise: fn(&Path) -> bool) -> Result<Staged> {
        let parent = out.parent().context("the output folder has no parent")?;
        fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        Ok(Staged { dir: sibling(out, "new")?, committed: false, owner, recognise })
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            fs::remove_dir_all(&self.dir).ok();
        }
    }
}

/// Writes `collected` and the manifest (`manifest_json`) into a fresh folder beside `out`.
pub fn stage(out: &Path, manifest_json: &str, collected: &[Collected]) -> Result<Staged> {
    let staged = Staged::begin(out, OWNER, is_dist)?;
    for c in collected {
        let dest = staged.dir.join(&c.artifact.path);
        fs::create_dir_all(dest.parent().unwrap())?;
        // A copy, not a link: nothing done to the dist folder may reach the cache.
        fs::copy(&c.file, &dest).with_context(|| format!("cannot copy {} to {}", c.file.display(), dest.display()))?;
    }
    fs::write(staged.dir.join(FILE_NAME), manifest_json)?;
    OWNER.mark(&staged.dir)?;
    Ok(staged)
}

impl Staged {
    /// Replaces `out` with the staged folder in one step, checking again that
    /// `out` is still this owner's folder (the build may have taken minutes).
    pub fn commit(mut self, out: &Path) -> Result<()> {
        self.owner.claim(out, self.recognise)?;
        failpoint("before-swap");
        swap_in(&self.dir, out)?;
        self.committed = true;
        Ok(())
    }
}

/// Removes what runs killed mid-publish left beside `out`: staging folders
/// `.<name>.new-<pid>-<n>` (and the previous dist a swap had not yet removed,
/// which carries the same name after the exchange) whose process is gone.
/// Returns how many it removed.
pub fn remove_stale_siblings(out: &Path) -> usize {
    let (Some(parent), Some(name)) = (out.parent(), out.file_name()) else { return 0 };
    let prefix = format!(".{}.new-", name.to_string_lossy());
    let Ok(entries) = fs::read_dir(parent) else { return 0 };
    let mut n = 0;
    for e in entries.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = file.strip_prefix(&prefix) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() && fs::remove_dir_all(e.path()).is_ok() {
            n += 1;
        }
    }
    n
}

/// Test hook: `KILN_FAILPOINT=<name>` aborts the process at that point, as a
/// `kill -9` would (no destructors, nothing cleaned up), so the reliability
/// tests can stop a dist where timing alone cannot.
pub fn failpoint(name: &str) {
    if std::env::var("KILN_FAILPOINT").is_ok_and(|v| v == name) {
        eprintln!("KILN_FAILPOINT={name}: aborting here");
        std::process::abort();
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
    failpoint("after-swap");
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
        OWNER.mark(&out).unwrap();
        let staged = Staged::begin(&out, OWNER, is_dist).unwrap();
        fs::write(staged.dir.join("new.txt"), "new").unwrap();
        staged.commit(&out).unwrap();
        assert!(out.join("new.txt").exists() && !out.join("old.txt").exists());
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1, "only the dist folder is left");
        // A staged folder that is dropped (a failed run) leaves nothing behind.
        let abandoned = Staged::begin(&out, OWNER, is_dist).unwrap();
        fs::write(abandoned.dir.join("half.txt"), "half").unwrap();
        drop(abandoned);
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn never_replaces_what_a_dist_did_not_write() {
        let dir = std::env::temp_dir().join(format!("kiln-output-foreign-{}", std::process::id()));
        fs::remove_dir_all(&dir).ok();
        let mine = dir.join("mydir");
        fs::create_dir_all(mine.join("sub")).unwrap();
        fs::write(mine.join("sub/file.txt"), "the user's").unwrap();
        let staged = Staged::begin(&mine, OWNER, is_dist).unwrap();
        fs::write(staged.dir.join("manifest.json"), "{}").unwrap();
        let err = format!("{:#}", staged.commit(&mine).unwrap_err());
        assert!(err.contains(&mine.display().to_string()) && err.contains("--out"), "{err}");
        assert_eq!(fs::read_to_string(mine.join("sub/file.txt")).unwrap(), "the user's");
        assert_eq!(fs::read_dir(&mine).unwrap().count(), 1, "nothing was added to the user's folder");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1, "the refused staging folder is gone");
        // A regular file is no folder to replace.
        let file = dir.join("notes.txt");
        fs::write(&file, "keep").unwrap();
        assert!(format!("{:#}", check(&file).unwrap_err()).contains("is a file"));
        assert_eq!(fs::read_to_string(&file).unwrap(), "keep");
        // An empty folder, or a dist folder from before markers (a kiln manifest), may be replaced.
        fs::create_dir(dir.join("empty")).unwrap();
        assert_eq!(check(&dir.join("empty")).unwrap(), kiln_fs::Found::Empty);
        let legacy = dir.join("legacy");
        fs::create_dir(&legacy).unwrap();
        fs::write(legacy.join(FILE_NAME), "not a manifest").unwrap();
        assert!(check(&legacy).is_err(), "a manifest.json that is not kiln's does not make a folder ours");
        fs::remove_dir_all(dir).unwrap();
    }
}
