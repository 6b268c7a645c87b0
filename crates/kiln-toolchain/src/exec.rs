//! Running a pinned compiler.
//!
//! Commands are written against fixed paths (`/kiln/src`, `/kiln/job`...), so
//! that nothing about the machine, the clone's location or the process ids
//! leaks into what the compilers write. The compilers always run in a
//! bubblewrap sandbox whose `/` is the sysroot and where those paths are bind
//! mounts; inside the builder container the sysroot is `/` itself
//! ([`Mode::Host`]) and the sandbox is the same, so the bytes are the same.

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
    /// One of [`sysroot::MOUNT_POINTS`], with a leading `/`, or a folder
    /// under `/tmp` (the sandbox's own tmpfs, where mount points can be made).
    pub at: String,
    pub writable: bool,
}

#[derive(Clone, Debug)]
pub struct Runner {
    sysroot: Sysroot,
    bwrap: PathBuf,
}

/// The environment every compiler sees: nothing from the caller's.
const ENV: &[(&str, &str)] = &[("PATH", "/usr/bin:/bin"), ("HOME", "/tmp"), ("TMPDIR", "/tmp"), ("LC_ALL", "C"), ("SOURCE_DATE_EPOCH", "0")];

impl Runner {
    /// A runner for `sysroot`, once a trivial command has run in its sandbox.
    ///
    /// There is no unsandboxed way to run the compilers, not even in the
    /// builder container ([`Mode::Host`]): only the sandbox gives every run the
    /// same paths, a fresh pid namespace (nvcc writes its pid into host
    /// objects) and the same environment, which is what makes artifacts
    /// bit-identical. Where bubblewrap cannot make namespaces this fails here,
    /// saying what to change, instead of failing in every compile job.
    pub fn new(sysroot: Sysroot) -> Result<Runner> {
        let bwrap = sysroot::which("bwrap", "apt-get install bubblewrap")?;
        let runner = Runner { sysroot, bwrap };
        runner.probe()?;
        Ok(runner)
    }

    fn probe(&self) -> Result<()> {
        let out = self
            .command(&[], "/", &["true".to_string()])
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("cannot start {}", self.bwrap.display()))?;
        if out.status.success() {
            return Ok(());
        }
        let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
        let inside = match self.sysroot.mode {
            Mode::Host => "kiln runs in the builder container, whose runtime must let bubblewrap make namespaces",
            Mode::Sandbox => "kiln needs unprivileged user namespaces (or root) for it",
        };
        anyhow::bail!(
            "bubblewrap cannot set up the compiler sandbox (sysroot {}): {why}\n  \
             kiln runs the pinned compilers only in that sandbox (fixed paths, fresh pid namespace), \
             and {inside}.\n  \
             In a container: podman run --security-opt unmask=/proc/* ..., or docker run \
             --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
             --security-opt systempaths=unconfined ... (or --privileged); on an Ubuntu 24.04 host: \
             sysctl kernel.apparmor_restrict_unprivileged_userns=0. See docs/containers.md.",
            self.sysroot.root.display()
        )
    }

    pub fn sysroot(&self) -> &Sysroot {
        &self.sysroot
    }

    /// The command that runs `argv` with `cwd` (a sandbox path) and `mounts`.
    pub fn command(&self, mounts: &[Mount], cwd: &str, argv: &[String]) -> Command {
        let mut c = Command::new(&self.bwrap);
        c.arg("--ro-bind").arg(&self.sysroot.root).arg("/");
        c.args(["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]);
        // A fresh pid namespace makes nvcc's temporary file names (which
        // embed its pid, and end up in host objects) the same every run.
        c.args(["--unshare-all", "--die-with-parent", "--clearenv"]);
        // As root (CI, the builder image) bubblewrap would otherwise leave the
        // compiler every capability, and a `mount -o remount,bind,rw` of a
        // read-only mount writes through to the host; no terminal either, so
        // nothing can push input into the caller's (TIOCSTI).
        c.args(["--cap-drop", "ALL", "--new-session"]);
        for (k, v) in ENV {
            c.args(["--setenv", k, v]);
        }
        for m in mounts {
            c.arg(if m.writable { "--bind" } else { "--ro-bind" }).arg(&m.host).arg(&m.at);
        }
        c.args(["--chdir", cwd, "--"]);
        c.args(argv);
        c
    }

    /// Runs to completion with stdout and stderr going to `log`.
    pub fn run(&self, mounts: &[Mount], cwd: &str, argv: &[String], log: &Path) -> Result<ExitStatus> {
        let out = File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
        let err = out.try_clone()?;
        let mut c = self.command(mounts, cwd, argv);
        c.stdin(Stdio::null()).stdout(out).stderr(err);
        c.status().with_context(|| format!("cannot start {}", argv[0]))
    }

    /// Runs a short command and returns its stdout (for `--version` and such).
    pub fn output(&self, argv: &[String]) -> Result<String> {
        let out = self.command(&[], "/", argv).stdin(Stdio::null()).output().with_context(|| format!("cannot start {}", argv[0]))?;
        if !out.status.success() {
            anyhow::bail!("`{}` failed: {}", argv.join(" "), String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}
