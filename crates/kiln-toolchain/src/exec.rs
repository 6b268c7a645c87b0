//! Running a pinned compiler.
//!
//! Commands are written against fixed paths (`/kiln/src`, `/kiln/job`...), so
//! that nothing about the machine, the clone's location or the process ids
//! leaks into what the compilers write. In a sandbox those paths are bind
//! mounts; inside the builder container they are rewritten to the real paths
//! and the compilers are told to map them back (`-ffile-prefix-map`).

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::{Command, ExitStatus, Stdio},
};

use anyhow::{Context, Result};

use crate::sysroot::{self, Mode, Sysroot};

/// A host folder made visible to the compiler at a fixed path.
#[derive(Clone, Debug)]
pub struct Mount {
    pub host: PathBuf,
    /// One of [`sysroot::MOUNT_POINTS`], with a leading `/`.
    pub at: &'static str,
    pub writable: bool,
}

/// How to tell a compiler that `host` should be written as `at` in its output.
pub type PrefixMap = fn(host: &str, at: &str) -> Vec<String>;

#[derive(Clone, Debug)]
pub struct Runner {
    sysroot: Sysroot,
    bwrap: Option<PathBuf>,
}

/// The environment every compiler sees: nothing from the caller's.
const ENV: &[(&str, &str)] = &[
    ("PATH", "/usr/bin:/bin"),
    ("HOME", "/tmp"),
    ("TMPDIR", "/tmp"),
    ("LC_ALL", "C"),
    ("SOURCE_DATE_EPOCH", "0"),
];

impl Runner {
    pub fn new(sysroot: Sysroot) -> Result<Runner> {
        let bwrap = match sysroot.mode {
            Mode::Sandbox => Some(sysroot::which("bwrap", "apt-get install bubblewrap")?),
            Mode::Host => None,
        };
        Ok(Runner { sysroot, bwrap })
    }

    pub fn sysroot(&self) -> &Sysroot {
        &self.sysroot
    }

    /// The command that runs `argv` with `cwd` (a sandbox path) and `mounts`.
    pub fn command(&self, mounts: &[Mount], cwd: &str, argv: &[String], prefix_map: PrefixMap) -> Command {
        match &self.bwrap {
            Some(bwrap) => {
                let mut c = Command::new(bwrap);
                c.arg("--ro-bind").arg(&self.sysroot.root).arg("/");
                c.args(["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]);
                // A fresh pid namespace makes nvcc's temporary file names (which
                // embed its pid, and end up in host objects) the same every run.
                c.args(["--unshare-all", "--die-with-parent", "--clearenv"]);
                for (k, v) in ENV {
                    c.args(["--setenv", k, v]);
                }
                for m in mounts {
                    c.arg(if m.writable { "--bind" } else { "--ro-bind" }).arg(&m.host).arg(m.at);
                }
                c.args(["--chdir", cwd, "--"]);
                c.args(argv);
                c
            }
            None => {
                let real = |s: &str| {
                    let mut s = s.to_string();
                    for m in mounts {
                        s = s.replace(m.at, &m.host.to_string_lossy());
                    }
                    s
                };
                let mut c = Command::new(real(&argv[0]));
                c.args(argv[1..].iter().map(|a| real(a)));
                for m in mounts {
                    c.args(prefix_map(&m.host.to_string_lossy(), m.at));
                }
                c.current_dir(real(cwd)).env_clear().envs(ENV.iter().copied());
                c
            }
        }
    }

    /// Runs to completion with stdout and stderr going to `log`.
    pub fn run(&self, mounts: &[Mount], cwd: &str, argv: &[String], prefix_map: PrefixMap, log: &Path) -> Result<ExitStatus> {
        let out = File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
        let err = out.try_clone()?;
        let mut c = self.command(mounts, cwd, argv, prefix_map);
        c.stdin(Stdio::null()).stdout(out).stderr(err);
        c.status().with_context(|| format!("cannot start {}", argv[0]))
    }

    /// Runs a short command and returns its stdout (for `--version` and such).
    pub fn output(&self, argv: &[String]) -> Result<String> {
        let out = self
            .command(&[], "/", argv, |_, _| Vec::new())
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("cannot start {}", argv[0]))?;
        if !out.status.success() {
            anyhow::bail!("`{}` failed: {}", argv.join(" "), String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}
