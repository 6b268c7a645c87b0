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
/// Entries found damaged, moved aside as evidence until `cargo xtask cache gc` ([`Cache::move_aside`]).
pub const DAMAGED: &str = "damaged";
/// Failed jobs' logs ([`Cache::failed_log`]).
pub const FAILED: &str = "failed";
/// What each checkout's last full dist used (`cargo xtask cache gc` keeps it).
pub const PLANS: &str = "plans";
/// Every name kiln writes at the cache's root (`bundles` and `fetch` of older kilns included).
pub const AREAS: &[&str] = &[DEBS, WHEELS, TOOLS, TOOLCHAINS, SOURCES, OBJECTS, TMP, DAMAGED, FAILED, PLANS, "bundles", "fetch", kiln_fs::MARKER];

/// The cache's marker: kiln cleans only a cache that carries it (kiln-fs [`kiln_fs::Kept`]).
pub const KEPT: kiln_fs::Kept = kiln_fs::Kept { what: "kiln's cache", named_by: ENV, adopt_command: "cargo xtask cache mark" };

/// What follows a downloaded package's sha256 in its file's name ([`deb_file`]).
pub const DEB_SUFFIX: &str = ".deb";

/// The file a downloaded package is kept in: named by its sha256.
pub fn deb_file(sha256: &str) -> String {
    format!("{sha256}{DEB_SUFFIX}")
}

/// The cache root: `$KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln`, else `~/.cache/kiln`;
/// optionally backed by a remote cache that many machines share ([`crate::remote`]).
#[derive(Clone, Debug)]
pub struct Cache {
    root: PathBuf,
    remote: Option<Arc<crate::remote::Remote>>,
    /// Whether the root carries kiln's marker ([`KEPT`]): only then does kiln remove anything from it.
    marked: bool,
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

    /// The cache at `root`, created and marked as kiln's if it is missing or
    /// empty. An existing folder without the marker is used but never cleaned.
    pub fn at(root: PathBuf) -> Result<Cache> {
        fs::create_dir_all(&root).with_context(|| format!("cannot create the kiln cache at {}", root.display()))?;
        // Absolute, so that sandbox bind mounts and messages never depend on the cwd.
        let root = root.canonicalize()?;
        let marked = KEPT.open(&root)?;
        Ok(Cache { root, remote: None, marked })
    }

    /// Whether kiln may remove things from this cache: it carries kiln's marker.
    pub fn marked(&self) -> bool {
        self.marked
    }

    /// Fails, saying why and what to do, unless kiln may clean this cache.
    pub fn check_cleanable(&self) -> Result<()> {
        if !self.marked {
            anyhow::bail!("refusing to clean: {}", KEPT.unmarked_reason(&self.root));
        }
        Ok(())
    }

    /// Marks this cache as kiln's after the user said it is (`cargo xtask cache
    /// mark`): refused if its root holds anything kiln does not write there.
    pub fn mark(&mut self) -> Result<()> {
        let foreign: Vec<String> = fs::read_dir(&self.root)
            .with_context(|| format!("cannot list {}", self.root.display()))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !AREAS.contains(&n.as_str()))
            .collect();
        if !foreign.is_empty() {
            anyhow::bail!(
                "refusing to mark {} as kiln's cache: kiln never writes {} there. Point {ENV} at a new, empty folder instead",
                self.root.display(),
                foreign.join(", ")
            );
        }
        // Its top-level names being kiln's areas proves nothing: what is in them must be of kiln's forms too.
        if let Some(name) = self.first_foreign_name()? {
            anyhow::bail!(
                "refusing to mark {} as kiln's cache: {} is no name kiln gives there (it may be a file of yours), and a \
                 marked cache is cleaned name by name. Move it out, or point {ENV} at a new, empty folder instead",
                self.root.display(),
                self.root.join(name).display()
            );
        }
        KEPT.adopt(&self.root)?;
        self.marked = true;
        Ok(())
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

    /// The remote cache behind this one, if any, shared (the tier that reads it: `http_tier`).
    pub fn shared_remote(&self) -> Option<Arc<crate::remote::Remote>> {
        self.remote.clone()
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

    /// A fresh, empty scratch folder that no other process is using:
    /// `tmp/<label>.<pid>.<n>`, held for the life of the returned [`Scratch`]
    /// by a lock on its sibling `tmp/<label>.<pid>.<n>.lock`. The lock, not
    /// the pid, tells a live folder from a dead run's, so a cache shared
    /// between containers (each its own pid namespace) is safe.
    pub fn scratch(&self, label: &str) -> Result<Scratch> {
        // Letters, digits, '-' and '_' only, so that the name parses back ([`scratch_of_lock`]).
        let label: String = label.chars().map(|c| if scratch_label_char(c) { c } else { '-' }).collect();
        let label = if label.is_empty() { "scratch".to_string() } else { label };
        let tmp = self.tmp();
        fs::create_dir_all(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        for n in 0u32.. {
            let dir = tmp.join(format!("{label}.{}.{n}", std::process::id()));
            let lock_path = lock_path(&dir);
            // The lock first: a folder kiln makes always has its lock file while it exists.
            let lock = match fs::OpenOptions::new().write(true).create_new(true).open(&lock_path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).with_context(|| format!("cannot create {}", lock_path.display())),
            };
            lock.lock().with_context(|| format!("cannot lock {}", lock_path.display()))?;
            match fs::create_dir(&dir) {
                Ok(()) => {
                    on_signal::register(&dir, &lock_path);
                    return Ok(Scratch { dir, lock_path, _lock: lock });
                }
                Err(e) => {
                    fs::remove_file(&lock_path).ok();
                    if e.kind() == std::io::ErrorKind::AlreadyExists {
                        continue;
                    }
                    return Err(e).with_context(|| format!("cannot create {}", dir.display()));
                }
            }
        }
        unreachable!()
    }
}

fn scratch_label_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

fn lock_path(dir: &Path) -> PathBuf {
    let mut name = dir.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// The scratch folder `name.lock` locks, if `name` is exactly what
/// [`Cache::scratch`] names a lock (`<label>.<pid>.<n>.lock`).
fn scratch_of_lock(name: &str) -> Option<&str> {
    let dir = name.strip_suffix(".lock")?;
    let mut parts = dir.rsplitn(3, '.');
    let (n, pid, label) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(n) && digits(pid) && !label.is_empty() && label.chars().all(scratch_label_char)).then_some(dir)
}

/// A scratch folder of [`Cache::scratch`], locked while this lives; dropping
/// it removes what is left of the folder, then its lock file.
#[derive(Debug)]
pub struct Scratch {
    dir: PathBuf,
    lock_path: PathBuf,
    _lock: fs::File,
}

impl Scratch {
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.dir
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.dir
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.dir.as_os_str()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        on_signal::unregister(&self.dir);
        if fs::symlink_metadata(&self.dir).is_ok() {
            fs::remove_dir_all(&self.dir).ok();
        }
        // Still locked: no cleaner removes the folder of a new scratch of this name.
        fs::remove_file(&self.lock_path).ok();
    }
}

/// Scratch folders removed when the process is stopped by SIGINT or SIGTERM
/// ([`remove_scratch_on_signal`]), as they are on an error (their `Drop`).
mod on_signal {
    use std::{
        io::Read,
        os::fd::FromRawFd,
        path::{Path, PathBuf},
        sync::{
            atomic::{AtomicI32, Ordering},
            Mutex, Once,
        },
    };

    /// The live scratch folders of this process and their lock files.
    static LIVE: Mutex<Vec<(PathBuf, PathBuf)>> = Mutex::new(Vec::new());
    /// The write end of the pipe the handler tells the signal on.
    static PIPE: AtomicI32 = AtomicI32::new(-1);
    static INSTALL: Once = Once::new();

    pub fn register(dir: &Path, lock: &Path) {
        LIVE.lock().unwrap_or_else(|e| e.into_inner()).push((dir.to_path_buf(), lock.to_path_buf()));
    }

    pub fn unregister(dir: &Path) {
        LIVE.lock().unwrap_or_else(|e| e.into_inner()).retain(|(d, _)| d != dir);
    }

    extern "C" fn handler(sig: libc::c_int) {
        // Async-signal-safe: one write(2); the thread below does the rest.
        let byte = sig as u8;
        // SAFETY: PIPE holds an open pipe's write end once the handler is installed.
        unsafe { libc::write(PIPE.load(Ordering::SeqCst), (&byte as *const u8).cast(), 1) };
    }

    pub fn install() -> std::io::Result<()> {
        let mut result = Ok(());
        INSTALL.call_once(|| {
            let mut fds = [0; 2];
            // SAFETY: `fds` has room for the two descriptors pipe2 returns.
            if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
                result = Err(std::io::Error::last_os_error());
                return;
            }
            PIPE.store(fds[1], Ordering::SeqCst);
            // SAFETY: fds[0] is the pipe's read end, owned by this thread from now on.
            let mut read = unsafe { std::fs::File::from_raw_fd(fds[0]) };
            std::thread::spawn(move || {
                let mut sig = [0u8; 1];
                if read.read_exact(&mut sig).is_err() {
                    return;
                }
                for (dir, lock) in LIVE.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                    std::fs::remove_dir_all(dir).ok();
                    std::fs::remove_file(lock).ok();
                }
                // Die of the signal, as without the handler (the status says so).
                // SAFETY: restoring the default action and raising it again.
                unsafe {
                    libc::signal(libc::c_int::from(sig[0]), libc::SIG_DFL);
                    libc::raise(libc::c_int::from(sig[0]));
                }
            });
            for sig in [libc::SIGINT, libc::SIGTERM] {
                // SAFETY: `handler` only calls write(2).
                unsafe { libc::signal(sig, handler as extern "C" fn(libc::c_int) as libc::sighandler_t) };
            }
        });
        result
    }
}

/// From now on, SIGINT and SIGTERM remove this process's live scratch folders
/// ([`Cache::scratch`]) and their lock files before it dies of the signal: what
/// `Drop` does on an error. (SIGKILL leaves them to the next run and `cache gc`,
/// which tell them by their lock.) For commands that own the process: `verify-crate`.
pub fn remove_scratch_on_signal() -> Result<()> {
    on_signal::install().context("cannot set up the clean-up on SIGINT/SIGTERM")
}

impl Cache {
    /// Removes scratch folders that no live process holds: what a run killed
    /// with SIGKILL left behind. Only a `tmp/<label>.<pid>.<n>` whose lock
    /// file this process can lock is removed (with its lock file); a folder
    /// another process holds, in this container or another sharing the
    /// cache, or any name kiln does not write, is left alone, and nothing at
    /// all is removed from a cache without kiln's marker. Returns how many
    /// folders and bytes were freed.
    pub fn remove_stale_scratch(&self) -> Result<(usize, u64)> {
        if !self.marked {
            return Ok((0, 0));
        }
        let Ok(entries) = fs::read_dir(self.tmp()) else { return Ok((0, 0)) };
        let (mut n, mut bytes) = (0, 0);
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(dir) = scratch_of_lock(&name) else { continue };
            let (lock_path, dir) = (e.path(), self.tmp().join(dir));
            let Ok(lock) = fs::OpenOptions::new().write(true).open(&lock_path) else { continue };
            if lock.try_lock().is_err() {
                continue; // held: a live run's
            }
            // The file locked must still be the one at the path (its owner may
            // have removed it, and a new run made a new one, in between).
            use std::os::unix::fs::MetadataExt;
            let same = match (lock.metadata(), fs::symlink_metadata(&lock_path)) {
                (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino() && b.is_file(),
                _ => false,
            };
            if !same {
                continue;
            }
            let (gone, size) = match fs::symlink_metadata(&dir) {
                Ok(m) if m.is_dir() => {
                    let size = dir_size(&dir);
                    if fs::remove_dir_all(&dir).is_err() {
                        continue;
                    }
                    n += 1;
                    (true, size)
                }
                Ok(_) => (false, 0), // not a folder kiln made: left alone, and its lock file too
                Err(_) => (true, 0), // a run killed between its lock and its folder
            };
            if gone {
                fs::remove_file(&lock_path).ok();
                bytes += size;
            }
        }
        Ok((n, bytes))
    }
}

impl Cache {
    /// Moves a damaged `path` (an entry, a download, a folder of tools) to
    /// `damaged/<label>.<pid>.<n>`, kept as evidence until `cargo xtask cache
    /// gc`; `label` is made of letters, digits, '-', '_' and '.' only.
    pub fn move_aside(&self, path: &Path, label: &str) -> Result<PathBuf> {
        let damaged = self.root.join(DAMAGED);
        fs::create_dir_all(&damaged).with_context(|| format!("cannot create {}", damaged.display()))?;
        let label = plain_name(label);
        let aside = (0u32..)
            .map(|n| damaged.join(format!("{label}.{}.{n}", std::process::id())))
            .find(|p| fs::symlink_metadata(p).is_err())
            .expect("a free name");
        fs::rename(path, &aside).with_context(|| format!("cannot move the damaged {} aside to {}", path.display(), aside.display()))?;
        Ok(aside)
    }

    /// Where a failed job's log is kept: `failed/<name>.log`.
    pub fn failed_log(&self, name: &str) -> PathBuf {
        self.root.join(FAILED).join(format!("{}.log", plain_name(name)))
    }

    /// Whether `name`, in the cache's `area` (a name of [`AREAS`], or
    /// [`PACKAGES`]), is of a form kiln gives there: what [`Cache::move_aside`]
    /// and [`Cache::failed_log`] name in `damaged/` and `failed/`,
    /// `<sha256>.deb` (and a download's `.kiln-download-*`), a job or package
    /// key, a toolchain identity, `<crate>-<version>-<16 hex>` in `sources/`,
    /// a scratch folder or its lock in `tmp/`, a plan record. Cleaning
    /// (`cache gc`, `cache verify --repair`) removes only such names;
    /// `cache mark` refuses a folder holding any other name in an area kiln
    /// cleans. An area kiln never removes from (`wheels/`, `tools/`, the
    /// `fetch/` of older kilns) has no forms here.
    pub fn names_its_own(area: &str, name: &str) -> bool {
        let plain = |s: &str| !s.is_empty() && s.chars().all(plain_char);
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        let download = |s: &str| s.strip_prefix(".kiln-download-").is_some_and(plain);
        match area {
            DAMAGED => {
                let mut parts = name.rsplitn(3, '.');
                // What kiln moves aside: a store entry (its key), packaged crates (`packages-<key>`),
                // a tools/ folder (`<name>-<16 hex>...`), an unpacked source crate (`source-...`).
                let labelled = |label: &str| {
                    hex(label, 64)
                        || label.strip_prefix("packages-").is_some_and(|k| hex(k, 64))
                        || label.starts_with("source-")
                        || label.split('-').skip(1).any(|part| hex(part, 16))
                };
                matches!((parts.next(), parts.next(), parts.next()), (Some(n), Some(pid), Some(label)) if digits(n) && digits(pid) && plain(label) && labelled(label))
            }
            FAILED => name.strip_suffix(".log").is_some_and(plain),
            DEBS => name.strip_suffix(".deb").is_some_and(|h| hex(h, 64)) || download(name),
            "bundles" => name.strip_suffix(".hipfb").is_some_and(|h| hex(h, 64)),
            TOOLCHAINS | PACKAGES => hex(name, 64),
            SOURCES => name.rsplit_once('-').is_some_and(|(crate_version, h)| hex(h, 16) && plain(crate_version) && crate_version.contains('-')),
            OBJECTS => name == "packages" || hex(name, 2),
            TMP => scratch_of_lock(name).is_some() || scratch_of_lock(&format!("{name}.lock")).is_some(),
            PLANS => {
                let record = name.split_once(".json").map(|(id, rest)| (id, rest.strip_prefix('.').unwrap_or(rest)));
                record.is_some_and(|(id, pid)| hex(id, 16) && (pid.is_empty() || digits(pid)))
            }
            _ => false,
        }
    }

    /// The first name in an area kiln cleans that is of no form kiln gives
    /// there ([`Cache::names_its_own`]), as `area/name`: a folder holding one
    /// is not kiln's cache, whatever its top-level names.
    pub fn first_foreign_name(&self) -> Result<Option<String>> {
        for area in [DEBS, "bundles", TOOLCHAINS, PACKAGES, SOURCES, OBJECTS, TMP, PLANS, DAMAGED, FAILED] {
            let dir = self.root.join(area);
            let Ok(rd) = fs::read_dir(&dir) else { continue };
            let mut names: Vec<String> = rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
            names.sort();
            if let Some(n) = names.into_iter().find(|n| !Cache::names_its_own(area, n)) {
                return Ok(Some(format!("{area}/{n}")));
            }
        }
        Ok(None)
    }
}

fn plain_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

fn plain_name(name: &str) -> String {
    let s: String = name.chars().map(|c| if plain_char(c) { c } else { '-' }).collect();
    match s.trim_start_matches('.') {
        "" => "unnamed".to_string(),
        t => t.to_string(),
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

    fn lock_held_elsewhere(path: &Path) -> fs::File {
        // Another open file description: to flock, another process (in this
        // container or another one sharing the cache) holding the lock.
        let f = fs::OpenOptions::new().write(true).create(true).truncate(false).open(path).unwrap();
        f.try_lock().unwrap();
        f
    }

    #[test]
    fn stale_scratch_is_told_by_its_lock_not_its_pid() {
        let root = tempfile::tempdir().unwrap();
        let cache = Cache::at(root.path().join("cache")).unwrap();
        assert!(cache.marked(), "a new cache is marked");
        let mine = cache.scratch("job").unwrap();
        // A dead run's scratch: its lock file is there and nobody holds it.
        let dead = cache.tmp().join("job.4.3");
        fs::create_dir_all(dead.join("sub")).unwrap();
        fs::write(dead.join("sub/half.o"), vec![0u8; 1000]).unwrap();
        fs::write(cache.tmp().join("job.4.3.lock"), "").unwrap();
        // Another container's live scratch: its pid means nothing here (no such
        // process in this namespace), but it holds its lock.
        let other = cache.tmp().join("job.999999999.0");
        fs::create_dir_all(&other).unwrap();
        let _held = lock_held_elsewhere(&cache.tmp().join("job.999999999.0.lock"));
        // Names kiln does not write: a user's folder that looks like scratch, with or without a lock file.
        let foreign = [cache.tmp().join("photos.2023.12"), cache.tmp().join("notes"), cache.tmp().join("my files.1.2")];
        for f in &foreign {
            fs::create_dir_all(f).unwrap();
        }
        fs::write(cache.tmp().join("my files.1.2.lock"), "").unwrap();
        assert_eq!(cache.remove_stale_scratch().unwrap(), (1, 1000));
        assert!(!dead.exists() && !cache.tmp().join("job.4.3.lock").exists());
        assert!(mine.exists() && other.exists() && foreign.iter().all(|f| f.exists()));
        // Dropping a scratch removes it and its lock file.
        let path = mine.to_path_buf();
        drop(mine);
        assert!(!path.exists() && !lock_path(&path).exists());
    }

    /// Issue 34: a scratch folder (verify-crate's rebuild) is removed when
    /// the process is stopped by SIGTERM or SIGINT. The test runs itself as a
    /// child that makes a scratch folder and waits; the control child, which
    /// does not ask for the clean-up (what every command did before), leaves
    /// its folder behind.
    #[test]
    fn scratch_is_removed_when_the_process_is_stopped_by_a_signal() {
        if let Some(root) = std::env::var_os("KILN_TEST_SCRATCH_CHILD") {
            if std::env::var_os("KILN_TEST_SCRATCH_CLEAN").is_some() {
                remove_scratch_on_signal().unwrap();
            }
            let cache = Cache::at(PathBuf::from(root)).unwrap();
            let s = cache.scratch("verify-crate").unwrap();
            fs::write(s.join("half-built.rs"), "x").unwrap();
            println!("SCRATCH {}", s.display());
            std::thread::sleep(std::time::Duration::from_secs(30));
            return;
        }
        use std::io::BufRead;
        for (clean, sig) in [(true, libc::SIGTERM), (true, libc::SIGINT), (false, libc::SIGTERM)] {
            let root = tempfile::tempdir().unwrap();
            let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
            cmd.args(["--exact", "cache::tests::scratch_is_removed_when_the_process_is_stopped_by_a_signal", "--nocapture"])
                .env("KILN_TEST_SCRATCH_CHILD", root.path())
                .stdout(std::process::Stdio::piped());
            if clean {
                cmd.env("KILN_TEST_SCRATCH_CLEAN", "1");
            }
            let mut child = cmd.spawn().unwrap();
            let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
            let dir = loop {
                let line = lines.next().expect("the child printed its scratch folder").unwrap();
                if let Some(d) = line.strip_prefix("SCRATCH ") {
                    break PathBuf::from(d);
                }
            };
            assert!(dir.is_dir());
            // SAFETY: signalling the child this test started.
            assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
            let status = child.wait().unwrap();
            assert!(!status.success(), "the child dies of the signal");
            if clean {
                assert!(!dir.exists() && !lock_path(&dir).exists(), "signal {sig}: the scratch folder was left");
            } else {
                assert!(dir.exists(), "control: without the clean-up, the folder stays (the old behaviour)");
            }
        }
    }

    #[test]
    fn a_folder_without_the_marker_is_used_but_never_cleaned() {
        let root = tempfile::tempdir().unwrap();
        let user = root.path().join("photos");
        let dead = user.join("tmp/photos.2023.12");
        fs::create_dir_all(&dead).unwrap();
        fs::write(user.join("tmp/photos.2023.12.lock"), "").unwrap();
        let mut cache = Cache::at(user.clone()).unwrap();
        assert!(!cache.marked() && !user.join(kiln_fs::MARKER).exists());
        assert_eq!(cache.remove_stale_scratch().unwrap(), (0, 0));
        assert!(dead.exists());
        let err = format!("{:#}", cache.check_cleanable().unwrap_err());
        assert!(err.contains("refusing to clean") && err.contains("cargo xtask cache mark") && err.contains(ENV), "{err}");
        // Marking it takes the user's word, but not for a folder holding what kiln never writes.
        fs::write(user.join("holiday.jpg"), "x").unwrap();
        assert!(format!("{:#}", cache.mark().unwrap_err()).contains("holiday.jpg"));
        assert!(!user.join(kiln_fs::MARKER).exists());
        fs::remove_file(user.join("holiday.jpg")).unwrap();
        cache.mark().unwrap();
        assert!(cache.marked() && Cache::at(user.clone()).unwrap().marked());
        // Marked, its one dead scratch of kiln's own naming goes.
        assert_eq!(cache.remove_stale_scratch().unwrap().0, 1);
    }

    #[test]
    fn every_scratch_name_parses_back_as_kilns() {
        let root = tempfile::tempdir().unwrap();
        let cache = Cache::at(root.path().to_path_buf()).unwrap();
        for label in ["", "a.b", "../x", "a b", "tool-ptxas_1"] {
            let s = cache.scratch(label).unwrap();
            let lock = lock_path(&s).file_name().unwrap().to_string_lossy().into_owned();
            assert_eq!(scratch_of_lock(&lock), Some(s.file_name().unwrap().to_str().unwrap()), "{label:?}");
            assert_eq!(s.parent(), Some(cache.tmp().as_path()), "{label:?}");
        }
    }
}
