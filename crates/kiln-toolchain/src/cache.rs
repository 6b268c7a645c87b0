//! Where kiln keeps what it downloads and builds: outside the repository, so
//! that clones share it and `git clean` never throws away hours of compiling.

use std::{
    fs,
    path::{Path, PathBuf},
    sync::Arc,
};

use anyhow::{Context, Result};

/// The environment variable that moves the cache.
pub const ENV: &str = "KILN_CACHE_DIR";

/// The cache's folders, relative to its root (`cargo xtask cache` names them so).
pub const DEBS: &str = "debs";
pub const WHEELS: &str = "wheels";
pub const TOOLS: &str = "tools";
pub const TOOLCHAINS: &str = "toolchains";
pub const SOURCES: &str = "sources";
pub const OBJECTS: &str = "objects";
/// Packaged crate sets, one folder per key, among the objects.
pub const PACKAGES: &str = "objects/packages";
pub const TMP: &str = "tmp";

/// The file a downloaded package is kept in: named by its sha256.
pub fn deb_file(sha256: &str) -> String {
    format!("{sha256}.deb")
}

/// The cache root: `$KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln`, else `~/.cache/kiln`;
/// optionally backed by a remote cache that many machines share ([`crate::remote`]).
#[derive(Clone, Debug)]
pub struct Cache {
    root: PathBuf,
    remote: Option<Arc<crate::remote::Remote>>,
}

impl Cache {
    pub fn from_env() -> Result<Cache> {
        let root = match std::env::var_os(ENV) {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => match std::env::var_os("XDG_CACHE_HOME") {
                Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("kiln"),
                _ => PathBuf::from(std::env::var_os("HOME").context("neither KILN_CACHE_DIR nor HOME is set")?).join(".cache/kiln"),
            },
        };
        Cache::at(root)
    }

    pub fn at(root: PathBuf) -> Result<Cache> {
        fs::create_dir_all(&root).with_context(|| format!("cannot create the kiln cache at {}", root.display()))?;
        // Absolute, so that sandbox bind mounts and messages never depend on the cwd.
        let root = root.canonicalize()?;
        Ok(Cache { root, remote: None })
    }

    /// This cache, read through to and written back to `remote` (none: local only).
    pub fn with_remote(mut self, remote: Option<crate::remote::Config>) -> Cache {
        self.remote = remote.map(|c| Arc::new(crate::remote::Remote::new(c)));
        self
    }

    /// The remote cache behind this one, if any.
    pub fn remote(&self) -> Option<&crate::remote::Remote> {
        self.remote.as_deref()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    /// Downloaded packages, named by their sha256.
    pub fn debs(&self) -> PathBuf {
        self.root.join(DEBS)
    }
    /// Downloaded wheels (PyPI), named by their sha256.
    pub fn wheels(&self) -> PathBuf {
        self.root.join(WHEELS)
    }
    /// Files taken out of wheels (`<name>-<wheel sha256 prefix>/`).
    pub fn tools(&self) -> PathBuf {
        self.root.join(TOOLS)
    }
    /// Unpacked toolchains, one folder per toolchain identity.
    pub fn toolchains(&self) -> PathBuf {
        self.root.join(TOOLCHAINS)
    }
    /// Unpacked kernel source crates.
    pub fn sources(&self) -> PathBuf {
        self.root.join(SOURCES)
    }
    /// Compiled artifacts, by cache key.
    pub fn objects(&self) -> PathBuf {
        self.root.join(OBJECTS)
    }
    /// Packaged crate sets ([`PACKAGES`]).
    pub fn packages(&self) -> PathBuf {
        self.root.join(PACKAGES)
    }
    /// Scratch space; everything here is disposable.
    pub fn tmp(&self) -> PathBuf {
        self.root.join(TMP)
    }

    /// A fresh, empty scratch folder that no other process is using.
    pub fn scratch(&self, label: &str) -> Result<PathBuf> {
        let tmp = self.tmp();
        fs::create_dir_all(&tmp)?;
        for n in 0u32.. {
            let dir = tmp.join(format!("{label}.{}.{n}", std::process::id()));
            match fs::create_dir(&dir) {
                Ok(()) => return Ok(dir),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).with_context(|| format!("cannot create {}", dir.display())),
            }
        }
        unreachable!()
    }
}

impl Cache {
    /// Removes scratch folders (`tmp/<label>.<pid>.<n>`) whose process is
    /// gone: what a run killed with SIGKILL left behind. A folder whose pid is
    /// alive (or any name kiln does not write) is left alone. Returns how many
    /// folders and bytes were freed.
    pub fn remove_stale_scratch(&self) -> Result<(usize, u64)> {
        let Ok(entries) = fs::read_dir(self.tmp()) else { return Ok((0, 0)) };
        let (mut n, mut bytes) = (0, 0);
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let mut parts = name.rsplitn(3, '.');
            let (Some(_n), Some(pid), Some(_label)) = (parts.next(), parts.next(), parts.next()) else { continue };
            let Ok(pid) = pid.parse::<u32>() else { continue };
            if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
                continue;
            }
            let size = dir_size(&e.path());
            if fs::remove_dir_all(e.path()).is_ok() {
                n += 1;
                bytes += size;
            }
        }
        Ok((n, bytes))
    }
}

/// Bytes under `p` (a file's size, or a folder's files' sizes summed; links not followed).
pub fn dir_size(p: &Path) -> u64 {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => fs::read_dir(p).map(|rd| rd.flatten().map(|e| dir_size(&e.path())).sum()).unwrap_or(0),
        Ok(m) => m.len(),
        Err(_) => 0,
    }
}

/// Moves a finished `tmp` into place at `dest` unless another process got
/// there first (then `tmp` is discarded). Readers see a whole entry or none.
pub fn publish_dir(tmp: &Path, dest: &Path) -> Result<()> {
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent)?;
    }
    match fs::rename(tmp, dest) {
        Ok(()) => Ok(()),
        Err(_) if dest.exists() => {
            fs::remove_dir_all(tmp).ok();
            Ok(())
        }
        Err(e) => Err(e).with_context(|| format!("cannot move {} to {}", tmp.display(), dest.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_scratch_of_dead_runs_is_removed_and_live_or_foreign_folders_kept() {
        let root = std::env::temp_dir().join(format!("kiln-scratch-{}", std::process::id()));
        let cache = Cache::at(root.clone()).unwrap();
        let mine = cache.scratch("job").unwrap();
        // pid 0 is never a process of ours; /proc/0 does not exist.
        let dead = cache.tmp().join("job.0.3");
        fs::create_dir_all(dead.join("sub")).unwrap();
        fs::write(dead.join("sub/half.o"), vec![0u8; 1000]).unwrap();
        let foreign = cache.tmp().join("notes");
        fs::create_dir_all(&foreign).unwrap();
        assert_eq!(cache.remove_stale_scratch().unwrap(), (1, 1000));
        assert!(!dead.exists() && mine.exists() && foreign.exists());
        fs::remove_dir_all(root).unwrap();
    }
}
