//! Publishing the dist folder: everything is written into a fresh sibling
//! folder first and swapped in with one atomic rename, so readers (and a run
//! that fails half-way) only ever see the old folder or the whole new one.
//! The folder replaced must be one a dist wrote, or empty ([`OWNER`]): its
//! marker lists every file with its sha256 (sealed just before the swap), and
//! only a folder holding nothing else is replaced. `--out` pointing at a
//! user's folder (even one holding a copied `manifest.json` or marker) is
//! refused before anything is built.

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use kiln_manifest::FILE_NAME;

use crate::collect::Collected;

/// The dist folder's owner: `--out` may name only a folder a dist wrote, or an empty one.
pub const OWNER: kiln_fs::Owner = kiln_fs::Owner { command: "cargo xtask dist", flag: "--out", reuse: kiln_fs::Reuse::ReplacedWhole };

/// Fails, naming `out` and the first file a dist did not write there,
/// unless a dist may replace it ([`kiln_fs::Owner::claim`]).
pub fn check(out: &Path) -> Result<kiln_fs::Found> {
    OWNER.claim(out)
}

/// A folder being written beside the one it will replace; removed unless committed.
pub struct Staged {
    pub dir: PathBuf,
    committed: bool,
    owner: kiln_fs::Owner,
}

impl Staged {
    /// A fresh, empty folder beside `out` (created with its parents), to be
    /// filled and then [`Staged::commit`]ted in place of `out`, which `owner` must own.
    pub fn begin(out: &Path, owner: kiln_fs::Owner) -> Result<Staged> {
        let parent = out.parent().context("the output folder has no parent")?;
        fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        Ok(Staged { dir: sibling(out, "new")?, committed: false, owner })
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
    let staged = Staged::begin(out, OWNER)?;
    for c in collected {
        let dest = staged.dir.join(&c.artifact.path);
        fs::create_dir_all(dest.parent().unwrap())?;
        // A copy, not a link: nothing done to the dist folder may reach the cache.
        fs::copy(&c.file, &dest).with_context(|| format!("cannot copy {} to {}", c.file.display(), dest.display()))?;
    }
    fs::write(staged.dir.join(FILE_NAME), manifest_json)?;
    Ok(staged)
}

impl Staged {
    /// Seals the staged folder (its marker lists every file in it, with its
    /// sha256) and replaces `out` with it in one step, checking again that
    /// `out` holds nothing but what this owner wrote (the build may have
    /// taken minutes).
    pub fn commit(mut self, out: &Path) -> Result<()> {
        self.owner.claim(out)?;
        self.owner.seal(&self.dir)?;
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
        OWNER.seal(&out).unwrap();
        let staged = Staged::begin(&out, OWNER).unwrap();
        fs::write(staged.dir.join("new.txt"), "new").unwrap();
        staged.commit(&out).unwrap();
        assert!(out.join("new.txt").exists() && !out.join("old.txt").exists());
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1, "only the dist folder is left");
        // A staged folder that is dropped (a failed run) leaves nothing behind.
        let abandoned = Staged::begin(&out, OWNER).unwrap();
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
        let staged = Staged::begin(&mine, OWNER).unwrap();
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
        // An empty folder may be replaced; a manifest.json alone (kiln's or not) makes no folder a dist's.
        fs::create_dir(dir.join("empty")).unwrap();
        assert_eq!(check(&dir.join("empty")).unwrap(), kiln_fs::Found::Empty);
        let legacy = dir.join("legacy");
        fs::create_dir(&legacy).unwrap();
        fs::write(legacy.join(FILE_NAME), "not a manifest").unwrap();
        assert!(check(&legacy).is_err(), "a manifest.json that is not kiln's does not make a folder ours");
        fs::remove_dir_all(dir).unwrap();
    }

    /// Issue 34: a folder of the user's (photos, a thesis) holding a kiln
    /// `manifest.json` copied from target/dist, or the whole of target/dist
    /// copied in (`cp -r`, its marker too), is not a dist folder: refused,
    /// naming the user's file, which stays (before: replaced whole, rc 0).
    #[test]
    fn a_copied_manifest_or_marker_does_not_make_a_users_folder_a_dist() {
        let dir = std::env::temp_dir().join(format!("kiln-output-copied-{}", std::process::id()));
        fs::remove_dir_all(&dir).ok();
        let manifest = format!(
            r#"{{"schema":{},"kiln":"0.1.0","source":{{"crate":"candle-kernels","version":"0.11.1","sha256":"{}"}},"toolchain":{{"identity":"{}","distribution":"debian","suite":"trixie","packages":{{}},"reported":{{}}}},"targets":{{"hip":[],"code_object_version":5,"cuda_ptx":[],"cuda_sass":[]}},"artifacts":[]}}"#,
            kiln_manifest::SCHEMA,
            "ab".repeat(32),
            "cd".repeat(32)
        );
        // A real dist folder, as a dist writes it.
        let dist = dir.join("dist");
        stage(&dist, &manifest, &[]).unwrap().commit(&dist).unwrap();
        assert_eq!(check(&dist).unwrap(), kiln_fs::Found::Ours);
        let with_manifest = dir.join("with-manifest");
        let with_marker = dir.join("with-marker");
        for user in [&with_manifest, &with_marker] {
            fs::create_dir_all(user.join("photos")).unwrap();
            fs::write(user.join("photos/beach.jpg"), "the user's photo").unwrap();
            fs::write(user.join("thesis.tex"), "the user's thesis").unwrap();
        }
        fs::copy(dist.join(FILE_NAME), with_manifest.join(FILE_NAME)).unwrap();
        for e in fs::read_dir(&dist).unwrap().flatten() {
            fs::copy(e.path(), with_marker.join(e.file_name())).unwrap();
        }
        for user in [&with_manifest, &with_marker] {
            let err = format!("{:#}", check(user).expect_err("a user's folder with a copied manifest or marker is not a dist"));
            assert!(err.contains(&user.display().to_string()) && (err.contains("did not write") || err.contains("not in the listing")), "{err}");
            let staged = Staged::begin(user, OWNER).unwrap();
            assert!(staged.commit(user).is_err());
            assert_eq!(fs::read_to_string(user.join("thesis.tex")).unwrap(), "the user's thesis");
            assert_eq!(fs::read_to_string(user.join("photos/beach.jpg")).unwrap(), "the user's photo");
        }
        fs::remove_dir_all(dir).unwrap();
    }
}
