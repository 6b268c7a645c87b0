//! The toolchain as a folder: every pinned .deb of the closure unpacked into
//! one root filesystem, which kiln runs the compilers in.
//!
//! Three places can provide it, tried in order (see [`locate`]):
//! `$KILN_SYSROOT` (what `nix develop` sets), `/` itself when kiln runs inside
//! the builder container, and the cache, where [`provision`] unpacks it.

use std::{
    fs,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Mutex,
    },
};

use anyhow::{bail, Context, Result};
use kiln_pins::{Closure, Deb, Pins};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use xshell::{cmd, Shell};

use crate::{
    cache::{publish_dir, Cache},
    fetch::{self, hex},
};

/// The environment variable naming a ready sysroot (set by `nix develop`).
pub const ENV: &str = "KILN_SYSROOT";
/// The record a sysroot carries of what it was made from.
pub const RECORD: &str = ".kiln/sysroot.json";
/// Where the sandbox sees a kernel set's sources.
pub const SRC_DIR: &str = "/kiln/src";
/// Where the sandbox sees kiln's HIP shims.
pub const HIP_DIR: &str = "/kiln/hip";
/// Where the sandbox sees kiln's CUDA headers.
pub const KERNELS_DIR: &str = "/kiln/kernels";
/// A job's own folder in the sandbox: its working directory, where its
/// inputs are copied and its output is written.
pub const JOB_DIR: &str = "/kiln/job";
/// Folders the sandbox mounts kiln's inputs and outputs on, relative to `/`.
pub const MOUNT_POINTS: &[&str] = &[relative(SRC_DIR), relative(HIP_DIR), relative(KERNELS_DIR), relative(JOB_DIR)];

/// `/kiln/job` as `kiln/job`.
const fn relative(path: &str) -> &str {
    path.split_at(1).1
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Run the compilers in a bubblewrap sandbox whose `/` is the sysroot.
    Sandbox,
    /// kiln already runs inside the sysroot (the builder container): the
    /// sandbox's `/` is this machine's `/`. Compilers still run through
    /// bubblewrap, exactly as in [`Mode::Sandbox`] (crate::exec).
    Host,
}

#[derive(Clone, Debug)]
pub struct Sysroot {
    pub root: PathBuf,
    pub identity: String,
    pub mode: Mode,
}

/// What a sysroot was made from; written into it as [`RECORD`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Record {
    pub identity: String,
    pub debs: Vec<RecordDeb>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RecordDeb {
    pub name: String,
    pub version: String,
    pub sha256: String,
}

/// The toolchain identity: a hash over every package of the closure. Two
/// sysroots with the same identity hold the same bytes.
pub fn identity(closure: &Closure) -> String {
    let mut debs: Vec<&Deb> = closure.debs.iter().collect();
    debs.sort();
    let mut h = Sha256::new();
    h.update(b"kiln-sysroot v1\n");
    for d in debs {
        h.update(format!("{} {} {} {}\n", d.name, d.version, d.arch, d.sha256));
    }
    hex(&h.finalize())
}

pub fn record(closure: &Closure) -> Record {
    let mut debs: Vec<RecordDeb> =
        closure.debs.iter().map(|d| RecordDeb { name: d.name.clone(), version: d.version.clone(), sha256: d.sha256.clone() }).collect();
    debs.sort_by(|a, b| a.name.cmp(&b.name));
    Record { identity: identity(closure), debs }
}

pub fn read_record(root: &Path) -> Result<Option<Record>> {
    let path = root.join(RECORD);
    match fs::read_to_string(&path) {
        Ok(text) => Ok(Some(serde_json::from_str(&text).with_context(|| format!("{} is damaged", path.display()))?)),
        Err(e) if fetch::is_not_found(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Why a sysroot is not the pinned one, package by package.
pub fn differences(found: &Record, expected: &Record) -> Vec<String> {
    let mut out = Vec::new();
    for e in &expected.debs {
        match found.debs.iter().find(|f| f.name == e.name) {
            None => out.push(format!("{}: missing (expected {})", e.name, e.version)),
            Some(f) if f.version != e.version => out.push(format!("{}: found {}, expected {}", e.name, f.version, e.version)),
            Some(f) if f.sha256 != e.sha256 => out.push(format!("{}: {} with another sha256", e.name, e.version)),
            Some(_) => {}
        }
    }
    for f in &found.debs {
        if !expected.debs.iter().any(|e| e.name == f.name) {
            out.push(format!("{}: {} present but not pinned", f.name, f.version));
        }
    }
    out
}

/// Finds a ready toolchain that matches the pins, or says why the one that is
/// offered does not. `Ok(None)`: nothing offered and nothing provisioned yet.
pub fn locate(cache: &Cache, pins: &Pins) -> Result<Option<Sysroot>> {
    let expected = record(pins.closure()?);
    let check = |root: &Path, origin: &str| -> Result<Option<Record>> {
        let Some(found) = read_record(root)? else { return Ok(None) };
        if found.identity != expected.identity {
            let diff = differences(&found, &expected);
            bail!(
                "the toolchain at {} ({origin}) is not the pinned one:\n  {}\n  \
                 Rebuild it from this pins.toml (nix develop / cargo xtask container), or unset {ENV} \
                 to let kiln provision its own.",
                root.display(),
                if diff.is_empty() { "its identity differs".to_string() } else { diff.join("\n  ") }
            );
        }
        Ok(Some(found))
    };

    if let Some(dir) = std::env::var_os(ENV).filter(|d| !d.is_empty()) {
        let root = PathBuf::from(dir);
        if check(&root, ENV)?.is_none() {
            bail!("{ENV}={} has no {RECORD}: it is not a kiln sysroot", root.display());
        }
        return Ok(Some(Sysroot { root, identity: expected.identity, mode: Mode::Sandbox }));
    }
    if check(Path::new("/"), "this machine's root: the builder container")?.is_some() {
        return Ok(Some(Sysroot { root: "/".into(), identity: expected.identity, mode: Mode::Host }));
    }
    let root = cache.toolchains().join(&expected.identity);
    if check(&root, "kiln cache")?.is_some() {
        return Ok(Some(Sysroot { root, identity: expected.identity, mode: Mode::Sandbox }));
    }
    Ok(None)
}

/// Downloads (verified) and unpacks the pinned closure into the cache, unless
/// a matching toolchain is already there. `say` receives progress lines.
pub fn provision(cache: &Cache, pins: &Pins, jobs: usize, say: &(dyn Fn(String) + Sync)) -> Result<Sysroot> {
    if let Some(found) = locate(cache, pins)? {
        return Ok(found);
    }
    let closure = pins.closure()?;
    let rec = record(closure);
    let what = format!("toolchain {}", &rec.identity[..12]);
    let dest = unpack(cache, pins, closure, &rec, &what, jobs, say)?;
    Ok(Sysroot { root: dest, identity: rec.identity, mode: Mode::Sandbox })
}

/// Downloads (verified) and unpacks `closure` into the cache as the root
/// named by `rec`'s identity, with `rec` and the sandbox's mount points in it.
fn unpack(cache: &Cache, pins: &Pins, closure: &Closure, rec: &Record, what: &str, jobs: usize, say: &(dyn Fn(String) + Sync)) -> Result<PathBuf> {
    which("dpkg-deb", "apt-get install dpkg")?;
    let total: u64 = closure.debs.iter().map(|d| d.size).sum();
    say(format!("{what}: fetching {} packages ({:.0} MB) from {}", closure.debs.len(), total as f64 / 1e6, pins.toolchain.mirrors[0]));
    let paths = fetch_all(cache, pins, &closure.debs, jobs.clamp(1, 4), say)?;

    let tmp = cache.scratch("sysroot")?;
    let result = (|| -> Result<()> {
        let sh = Shell::new()?;
        say(format!("{what}: unpacking into {}", cache.toolchains().display()));
        for (deb, path) in closure.debs.iter().zip(&paths) {
            cmd!(sh, "dpkg-deb -x {path} {tmp}").quiet().run().with_context(|| format!("cannot unpack {} {}", deb.name, deb.version))?;
        }
        for dir in MOUNT_POINTS {
            fs::create_dir_all(tmp.join(dir))?;
        }
        fs::create_dir_all(tmp.join(".kiln"))?;
        fs::write(tmp.join(RECORD), serde_json::to_string_pretty(rec)?)?;
        Ok(())
    })();
    if let Err(e) = result {
        fs::remove_dir_all(&tmp).ok();
        return Err(e);
    }
    let dest = cache.toolchains().join(&rec.identity);
    publish_dir(&tmp, &dest)?;
    say(format!("{what}: ready"));
    Ok(dest)
}

/// A cross host compiler's root (`[toolchain.cross.<cpu>]`): only the
/// packages it adds on top of the toolchain's closure, unpacked on their own.
/// The jobs that build host code for its CPU mount it at [`CrossRoot::at`]
/// inside the toolchain's sandbox; Debian's cross gcc finds its own parts
/// relative to where it is, and [`CrossRoot::env`] finds its binutils' libraries.
#[derive(Clone, Debug)]
pub struct CrossRoot {
    /// The CPU (kiln-target's host table).
    pub cpu: String,
    /// The compiler nvcc is given, by name (`aarch64-linux-gnu-g++-13`).
    pub cxx: String,
    pub root: PathBuf,
    /// A hash over its packages, as a toolchain's.
    pub identity: String,
}

impl CrossRoot {
    /// Where a job mounts it: a path naming its identity, so that a job's
    /// command (and with it the job's cache key) names exactly this root.
    pub fn at(&self) -> String {
        format!("/tmp/kiln-cross/{}", self.identity)
    }

    /// A program of its `usr/bin`, as the sandbox sees it.
    pub fn program(&self, name: &str) -> String {
        format!("{}/usr/bin/{name}", self.at())
    }

    /// The `LD_LIBRARY_PATH` its programs need: Debian's cross binutils keep
    /// their libbfd/libopcodes in the root's `usr/lib/x86_64-linux-gnu`.
    pub fn library_path(&self) -> String {
        format!("{}/usr/lib/x86_64-linux-gnu", self.at())
    }
}

/// The cross compiler's root for `cpu`, from the cache or downloaded (every
/// package checked against its pinned sha256) and unpacked into it.
pub fn provision_cross(cache: &Cache, pins: &Pins, cpu: &str, jobs: usize, say: &(dyn Fn(String) + Sync)) -> Result<CrossRoot> {
    let Some(cross) = pins.toolchain.cross(cpu) else {
        bail!("pins.toml has no [toolchain.cross.{cpu}]: no compiler is pinned for {cpu} host code");
    };
    let Some(closure) = &cross.closure else {
        bail!("pins.toml [toolchain.cross.{cpu}] has no generated closure: run `cargo xtask pins update --cross-only`");
    };
    let rec = record(closure);
    let root = cache.toolchains().join(&rec.identity);
    let done = match read_record(&root)? {
        Some(found) if found.identity == rec.identity => true,
        Some(found) => bail!(
            "{} is not the pinned cross root for {cpu}:\n  {}\n  Remove it with `cargo xtask cache gc` or by hand; kiln will unpack it again.",
            root.display(),
            differences(&found, &rec).join("\n  ")
        ),
        None => false,
    };
    if !done {
        unpack(cache, pins, closure, &rec, &format!("{cpu} cross compiler {}", &rec.identity[..12]), jobs, say)?;
    }
    let cxx = root.join("usr/bin").join(&cross.cxx);
    if !cxx.exists() {
        bail!("the cross root {} has no usr/bin/{}: [toolchain.cross.{cpu}] cxx names a program its packages do not hold", root.display(), cross.cxx);
    }
    Ok(CrossRoot { cpu: cpu.to_string(), cxx: cross.cxx.clone(), root, identity: rec.identity })
}

fn fetch_all(cache: &Cache, pins: &Pins, debs: &[Deb], workers: usize, say: &(dyn Fn(String) + Sync)) -> Result<Vec<PathBuf>> {
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<PathBuf>>>> = Mutex::new((0..debs.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= debs.len() {
                        break;
                    }
                    let r = fetch::fetch_deb(cache, &pins.toolchain.mirrors, &debs[i]);
                    let failed = r.is_err();
                    results.lock().unwrap()[i] = Some(r);
                    if failed {
                        // Stop handing out work; the error is reported below.
                        next.store(debs.len(), Ordering::SeqCst);
                        break;
                    }
                    let n = done.fetch_add(1, Ordering::SeqCst) + 1;
                    if n.is_multiple_of(25) || n == debs.len() {
                        say(format!("  fetched {n}/{} packages", debs.len()));
                    }
                }
            });
        }
    });
    let mut out = Vec::new();
    for r in results.into_inner().unwrap() {
        match r {
            Some(Ok(p)) => out.push(p),
            Some(Err(e)) => return Err(e),
            None => bail!("a download was abandoned after an earlier failure"),
        }
    }
    Ok(out)
}

/// The path of a program on PATH, or an error that says how to install it.
pub fn which(program: &str, install: &str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(program);
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    bail!("`{program}` is not on PATH; kiln needs it to provision the toolchain ({install})")
}
