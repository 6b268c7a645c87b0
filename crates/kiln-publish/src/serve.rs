//! `cargo xtask registry serve`: ferro-cargo-registry-server (crates.io,
//! Apache-2.0), a sparse cargo registry others maintain, started on
//! 127.0.0.1 with its data in a folder kiln claimed (docs/registry.md says
//! why this one). It has no authentication: it accepts any upload with any
//! token, so it is only ever bound to loopback. The child never outlives
//! kiln: it is stopped when [`Ferro`] is dropped, and the kernel sends it
//! SIGTERM if kiln dies first (`PR_SET_PDEATHSIG`), Ctrl-C or `kill -9`.

use std::{
    ffi::OsStr,
    fmt::Write as _,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

/// The registry others maintain that `registry serve` starts.
pub const FERRO: &str = "ferro-cargo-registry-server";
/// Its version: what `.ci/setup` installs and the message names (a test
/// holds `.ci/setup` to it).
pub const FERRO_VERSION: &str = "1.0.0";

/// The command that installs it, as `.ci/setup` runs it.
pub fn install_command() -> String {
    format!("cargo install --locked {FERRO} --version {FERRO_VERSION}")
}

/// The registry folder's owner: ferro's data (its blobs and index snapshot)
/// lives only in a folder `registry serve` made, or an empty one.
pub const OWNER: kiln_fs::Owner = kiln_fs::Owner { command: "cargo xtask registry serve", flag: "--dir", reuse: kiln_fs::Reuse::FilledInPlace };

/// The names a registry folder may hold at its top, which its marker lists:
/// ferro 1.0.0's blob store (`sha256/`) and index snapshot
/// (`index-state.json`, written through `index-state.json.tmp.<pid>.<n>`),
/// and the `index/` and `crates/` of kiln's own test server. What ferro
/// writes below them is ferro's: kiln does not list it, cannot prove who
/// wrote it, and never removes any of it (docs/registry.md).
pub const NAMES: &[&str] = &["sha256", "index-state.json", "index-state.json.tmp.*", "index", "crates"];

/// How long ferro may take to answer its `config.json` (it takes well
/// under a second here).
const START_WAIT: Duration = Duration::from_secs(20);

/// How often [`Ferro::start_reporting`] says it is still waiting.
pub const WAIT_REPORT: Duration = Duration::from_secs(2);

/// ferro's binary: on `path` (a PATH value), else in cargo's bin folder
/// (`cargo_home`, i.e. $CARGO_HOME or ~/.cargo), where `cargo install` puts it.
pub fn find(path: Option<&OsStr>, cargo_home: Option<&Path>) -> Result<PathBuf> {
    let dirs: Vec<PathBuf> = path.map(|p| std::env::split_paths(p).collect()).unwrap_or_default();
    let cargo_bin = cargo_home.map(|h| h.join("bin"));
    if let Some(exe) = dirs.iter().chain(cargo_bin.iter()).map(|d| d.join(FERRO)).find(|p| p.is_file()) {
        return Ok(exe);
    }
    let mut looked = "on PATH".to_string();
    if let Some(b) = &cargo_bin {
        let _ = write!(looked, " and in {}", b.display());
    }
    bail!(
        "{FERRO} (the cargo registry `registry serve` starts) is not installed: not found {looked}. Install it with\n  \
         {}\n(what `bash .ci/setup` runs; about 3 CPU-minutes to build, once), then run this again",
        install_command()
    )
}

/// $CARGO_HOME, else ~/.cargo: where `cargo install` puts binaries.
pub fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME").map(PathBuf::from).or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
}

/// A running ferro; stopped (SIGTERM, then SIGKILL after 5 s) when dropped.
pub struct Ferro {
    child: Child,
    port: u16,
    /// From spawning it to its first answer.
    pub started_in: Duration,
}

impl Ferro {
    /// Starts `exe` on 127.0.0.1:`port` with its data in `dir` (claimed first:
    /// missing, empty, or holding nothing but its marker and the [`NAMES`] it
    /// lists), and waits until it
    /// answers its `config.json`.
    pub fn start(exe: &Path, dir: &Path, port: u16) -> Result<Ferro> {
        Ferro::start_reporting(exe, dir, port, &mut |_| {})
    }

    /// [`Ferro::start`], telling `report` every [`WAIT_REPORT`] while ferro has not answered yet
    /// (a busy machine can take seconds).
    pub fn start_reporting(exe: &Path, dir: &Path, port: u16, report: &mut dyn FnMut(String)) -> Result<Ferro> {
        let listen = format!("127.0.0.1:{port}");
        // Said here, not by ferro after it started: a port in use is the common failure.
        drop(std::net::TcpListener::bind(&listen).with_context(|| format!("cannot listen on {listen} (another server on that port? try --port)"))?);
        OWNER.claim_and_mark(dir, NAMES)?;
        let dir = std::fs::canonicalize(dir).with_context(|| format!("cannot resolve {}", dir.display()))?;
        let parent = std::process::id();
        let mut cmd = Command::new(exe);
        cmd.env("FERRO_CARGO_REGISTRY_DATA", &dir)
            .env("FERRO_CARGO_REGISTRY_LISTEN", &listen)
            .env_remove("FERRO_CARGO_REGISTRY_API")
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdin(std::process::Stdio::null());
        // SAFETY: between fork and exec only async-signal-safe calls (prctl, getppid, _exit).
        unsafe {
            cmd.pre_exec(move || {
                // Stopped by the kernel when kiln dies, however it dies.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 || libc::getppid() as u32 != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let start = Instant::now();
        let child = cmd.spawn().with_context(|| format!("cannot start {}", exe.display()))?;
        let mut ferro = Ferro { child, port, started_in: Duration::ZERO };
        let config = format!("{}config.json", ferro.index_url().trim_start_matches("sparse+"));
        let mut next_report = WAIT_REPORT;
        while start.elapsed() < START_WAIT {
            if start.elapsed() >= next_report {
                report(format!(
                    "waiting for {FERRO} (pid {}) to answer {config}: {} s so far, at most {} s",
                    ferro.pid(),
                    next_report.as_secs(),
                    START_WAIT.as_secs()
                ));
                next_report += WAIT_REPORT;
            }
            if let Some(status) = ferro.child.try_wait()? {
                bail!("{} exited ({status}) before answering {config}; its messages are above", exe.display());
            }
            if kiln_http_ok(&config) {
                ferro.started_in = start.elapsed();
                return Ok(ferro);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!("{} did not answer {config} within {START_WAIT:?}; stopped it", exe.display())
    }

    /// What `[registries.NAME] index = ...` takes: ferro serves its index at the root.
    pub fn index_url(&self) -> String {
        format!("sparse+http://127.0.0.1:{}/", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Serves until ferro exits (on Ctrl-C it does, cleanly).
    pub fn wait(mut self) -> Result<ExitStatus> {
        Ok(self.child.wait()?)
    }
}

fn kiln_http_ok(url: &str) -> bool {
    crate::http::get(url, None).is_ok_and(|r| r.status == 200)
}

impl Drop for Ferro {
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        // SAFETY: a signal to our own child, which has not been reaped (try_wait said it runs).
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// Issue 34: a registry folder copied with its marker (`cp -r`) into a
    /// folder of the user's is not a registry folder: refused before ferro
    /// starts, naming the user's file, which stays (before: the copied
    /// marker was trusted and ferro started writing there).
    #[test]
    fn a_copied_registry_marker_next_to_a_users_files_is_refused() {
        let tmp = std::env::temp_dir().join(format!("kiln-serve-copied-{}", std::process::id()));
        std::fs::remove_dir_all(&tmp).ok();
        let (reg, user) = (tmp.join("registry"), tmp.join("user"));
        OWNER.claim_and_mark(&reg, NAMES).unwrap();
        std::fs::create_dir_all(&user).unwrap();
        std::fs::copy(reg.join(kiln_fs::MARKER), user.join(kiln_fs::MARKER)).unwrap();
        std::fs::write(user.join("tax-return.pdf"), "the user's").unwrap();
        let err = format!("{:#}", Ferro::start(Path::new("/nonexistent/ferro"), &user, 0).err().expect("refused"));
        assert!(err.contains("tax-return.pdf") && err.contains("--dir"), "{err}");
        assert_eq!(std::fs::read_to_string(user.join("tax-return.pdf")).unwrap(), "the user's");
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    /// A server that is slow to answer is reported while kiln waits (here one
    /// that never answers and exits after a little longer than one report).
    #[test]
    fn a_slow_start_is_reported_while_waiting() {
        let tmp = tempfile::tempdir().unwrap();
        let exe = tmp.path().join("slow-server");
        let nap = WAIT_REPORT.as_secs_f64() + 0.5;
        std::fs::write(&exe, format!("#!/bin/sh\nsleep {nap}\n")).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut lines = Vec::new();
        let result = Ferro::start_reporting(&exe, &tmp.path().join("data"), port, &mut |l| lines.push(l));
        let err = format!("{:#}", result.err().expect("a server that never answers is an error"));
        assert!(err.contains("exited") && err.contains("before answering"), "{err}");
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with(&format!("waiting for {FERRO} (pid ")) && lines[0].contains(&format!("127.0.0.1:{port}/config.json")),
            "{lines:?}"
        );
    }
}
