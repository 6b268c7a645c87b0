//! `cargo xtask test-matrix`: run the CI legs this machine has a GPU for and
//! report every leg of ci/matrix.yaml (docs/gpu-tests.md).
//!
//! Legs come from crates/kiln-matrix's parser. A leg runs when a local GPU has
//! its arch ([`crate::gpu::detect`]); its kernel tests run under nextest's
//! `ci` profile with `KILN_TEST_ARCH=<arch>`, from a nextest archive
//! (`--archive-file`, no cargo needed) or built from this checkout. Results
//! are read from the JUnit file and completed by `nextest list` (nextest's
//! JUnit omits skipped tests). With `--junit ARCH=FILE` nothing runs: the
//! results of a run elsewhere (a GPU runner, a lent machine) are reported.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use kiln_loader::Backend;

use crate::report::{self, LegReport, LegState};
use crate::results::{self, Listed, TestResult};

/// The test binary of the kernel tests, as nextest names it.
pub const BINARY_ID: &str = "kiln-kernel-tests::kernels";

/// Where nextest's `ci` profile writes its JUnit, relative to the workspace
/// root (nextest's store is `<workspace>/target/nextest`; .config/nextest.toml).
pub const JUNIT_PATH: &str = "target/nextest/ci/junit.xml";

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The repository root (the workspace nextest runs in).
    pub root: PathBuf,
    pub pins: PathBuf,
    /// A nextest archive of this crate (or the workspace) to run instead of building.
    pub archive: Option<PathBuf>,
    /// Results of runs elsewhere: (arch, JUnit file); nothing runs.
    pub junit: Vec<(String, PathBuf)>,
    /// `nextest list --message-format json` output of those runs: (arch, file).
    pub lists: Vec<(String, PathBuf)>,
    /// Only these legs (default: all).
    pub archs: Vec<String>,
    /// `KILN_DIST_DIR` for the tests (default: theirs, i.e. target/dist).
    pub dist: Option<PathBuf>,
    /// The cargo-nextest binary (default: `cargo-nextest` on PATH, then ~/.cargo/bin).
    pub nextest: Option<PathBuf>,
    /// Where the report and each leg's files go.
    pub out: PathBuf,
}

/// What the caller prints and how it exits.
pub struct Outcome {
    pub table: String,
    pub report: PathBuf,
    pub failed: bool,
}

/// `ARCH=PATH`, as `--junit` and `--list` take it.
pub fn parse_arch_path(s: &str) -> Result<(String, PathBuf)> {
    match s.split_once('=') {
        Some((a, p)) if !a.is_empty() && !p.is_empty() => Ok((a.to_string(), PathBuf::from(p))),
        _ => bail!("expected ARCH=FILE (e.g. sm_90=junit.xml), got {s:?}"),
    }
}

struct Leg {
    arch: String,
    backend: Backend,
}

fn legs(opts: &Options) -> Result<Vec<Leg>> {
    let pins = kiln_pins::Pins::load(&opts.root.join(&opts.pins))?;
    let matrix = kiln_matrix::Matrix::load(&opts.root.join(kiln_matrix::FILE), &pins)?;
    let all: Vec<Leg> = matrix
        .legs
        .iter()
        .map(|l| Leg {
            arch: l.arch.name(),
            backend: match l.backend() {
                kiln_matrix::Backend::Cuda => Backend::Cuda,
                kiln_matrix::Backend::Hip => Backend::Hip,
            },
        })
        .collect();
    let wanted: Vec<&String> = opts.archs.iter().chain(opts.junit.iter().map(|(a, _)| a)).collect();
    for a in &wanted {
        if !all.iter().any(|l| &l.arch == *a) {
            let names: Vec<&str> = all.iter().map(|l| l.arch.as_str()).collect();
            bail!("{a} is not a leg of {} (legs: {})", kiln_matrix::FILE, names.join(", "));
        }
    }
    Ok(if opts.archs.is_empty() { all } else { all.into_iter().filter(|l| opts.archs.contains(&l.arch)).collect() })
}

fn skip_reason(leg: &Leg) -> impl Fn(&Listed) -> String + '_ {
    move |l| match crate::names::parse(&l.name) {
        Some((b, _, _)) if b != leg.backend => {
            format!("{} kernel tests: tested on the {} legs, not on {}", b.as_str(), b.as_str(), leg.arch)
        }
        Some(_) => format!("{} kernel tests: the harness found no {} device (the test output says why)", leg.backend.as_str(), leg.arch),
        None => "ignored by its test binary".into(),
    }
}

/// The nextest to run: `cargo-nextest` (which works without cargo, for archives).
fn nextest_binary(opts: &Options) -> Result<PathBuf> {
    if let Some(p) = &opts.nextest {
        return Ok(p.clone());
    }
    let on_path = std::env::var_os("PATH").into_iter().flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>()).map(|d| d.join("cargo-nextest"));
    let home = std::env::var_os("CARGO_HOME").map(PathBuf::from).or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    on_path
        .chain(home.map(|h| h.join("bin/cargo-nextest")))
        .find(|p| p.is_file())
        .context("cargo-nextest not found: install it (`cargo install --locked cargo-nextest`) or pass --nextest PATH")
}

/// `cargo-nextest nextest <sub> ...` for this crate's kernel tests, from the archive or a build.
fn nextest(opts: &Options, bin: &Path, sub: &str, arch: Option<&str>) -> Command {
    let mut c = Command::new(bin);
    c.current_dir(&opts.root).arg("nextest").arg(sub);
    match &opts.archive {
        Some(a) => {
            c.arg("--archive-file").arg(a).arg("--workspace-remap").arg(&opts.root);
        }
        None => {
            c.args(["--package", "kiln-kernel-tests", "--test", "kernels"]);
        }
    }
    c.args(["-E", &format!("binary_id({BINARY_ID})")]);
    match arch {
        Some(a) => c.env(crate::TEST_ARCH_ENV, a),
        None => c.env_remove(crate::TEST_ARCH_ENV),
    };
    if let Some(d) = &opts.dist {
        c.env(kiln_loader::DIST_DIR_ENV, d);
    }
    c
}

fn list(opts: &Options, bin: &Path, arch: Option<&str>) -> Result<Vec<Listed>> {
    let out = nextest(opts, bin, "list", arch).args(["--message-format", "json"]).output().context("running nextest list")?;
    if !out.status.success() {
        bail!("nextest list failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).lines().rev().take(5).collect::<Vec<_>>().join(" | "));
    }
    results::parse_list(&String::from_utf8_lossy(&out.stdout))
}

fn run_leg(opts: &Options, bin: &Path, leg: &Leg) -> Result<(LegState, Vec<TestResult>)> {
    let dir = opts.out.join(&leg.arch);
    std::fs::create_dir_all(&dir)?;
    let listed = list(opts, bin, Some(&leg.arch)).context("listing the kernel tests")?;
    std::fs::write(
        dir.join("list.txt"),
        listed.iter().map(|l| format!("{}{}\n", l.name, if l.ignored { " (ignored)" } else { "" })).collect::<String>(),
    )?;
    let junit = opts.root.join(JUNIT_PATH);
    let _ = std::fs::remove_file(&junit);
    let mut cmd = nextest(opts, bin, "run", Some(&leg.arch));
    cmd.args(["--profile", "ci", "--no-tests=fail"]);
    eprintln!("test-matrix: {} leg: {:?}", leg.arch, cmd);
    let status = cmd.status().context("running nextest")?;
    let xml = match std::fs::read_to_string(&junit) {
        Ok(x) => x,
        Err(e) => return Ok((LegState::Error(format!("nextest exited {status} and wrote no JUnit at {} ({e})", junit.display())), vec![])),
    };
    std::fs::write(dir.join("junit.xml"), &xml)?;
    let results = results::merge(results::parse_junit(&xml)?, Some(&listed), skip_reason(leg));
    let how = match &opts.archive {
        Some(a) => format!("nextest archive {} on this machine (nextest exit: {status})", a.display()),
        None => format!("built from this checkout (nextest exit: {status})"),
    };
    Ok((LegState::Ran { how }, results))
}

pub fn run(opts: &Options) -> Result<Outcome> {
    let legs = legs(opts)?;
    std::fs::create_dir_all(&opts.out)?;
    let mut preamble = Vec::new();
    let mut reports = Vec::new();
    if !opts.junit.is_empty() {
        preamble.push("Results read from files (`--junit`); nothing ran on this machine.\n".to_string());
        for leg in &legs {
            let Some((_, file)) = opts.junit.iter().find(|(a, _)| *a == leg.arch) else {
                let state = LegState::Skipped("no results given for this leg (no runner has reported it)".into());
                reports.push(LegReport { arch: leg.arch.clone(), backend: leg.backend, state, results: vec![] });
                continue;
            };
            let xml = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
            let listed = match opts.lists.iter().find(|(a, _)| *a == leg.arch) {
                Some((_, f)) => Some(results::parse_list(&std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?)?),
                None => None,
            };
            let results = results::merge(
                results::parse_junit(&xml).with_context(|| format!("reading {}", file.display()))?,
                listed.as_deref(),
                skip_reason(leg),
            );
            let how = match &listed {
                Some(_) => format!("results from {} (skips from the nextest list beside it)", file.display()),
                None => format!("results from {} (no nextest list given: skipped tests are not counted)", file.display()),
            };
            reports.push(LegReport { arch: leg.arch.clone(), backend: leg.backend, state: LegState::Ran { how }, results });
        }
    } else {
        let found = crate::gpu::detect();
        let mut lines: Vec<String> = found.gpus.iter().map(|g| format!("- GPU: {} ({})", g.arch, g.description)).collect();
        lines.extend(found.notes.iter().map(|n| format!("- {n}")));
        if found.gpus.is_empty() {
            lines.insert(0, "- no GPU found on this machine: every leg is skipped".into());
        }
        preamble.push(format!("This machine:\n\n{}\n", lines.join("\n")));
        let bin = nextest_binary(opts);
        // A plain listing, for the size of the legs that do not run here.
        let inventory =
            bin.as_ref().ok().and_then(|b| list(opts, b, None).map_err(|e| preamble.push(format!("(could not list the tests: {e:#})\n"))).ok());
        for leg in &legs {
            let report = if found.has(&leg.arch) {
                match &bin {
                    Err(e) => LegReport { arch: leg.arch.clone(), backend: leg.backend, state: LegState::Error(format!("{e:#}")), results: vec![] },
                    Ok(b) => match run_leg(opts, b, leg) {
                        Ok((state, results)) => LegReport { arch: leg.arch.clone(), backend: leg.backend, state, results },
                        Err(e) => {
                            LegReport { arch: leg.arch.clone(), backend: leg.backend, state: LegState::Error(format!("{e:#}")), results: vec![] }
                        }
                    },
                }
            } else {
                let results = inventory
                    .iter()
                    .flatten()
                    .map(|l| TestResult { binary: l.binary.clone(), name: l.name.clone(), outcome: results::Outcome::Skip, message: None })
                    .collect();
                LegReport {
                    arch: leg.arch.clone(),
                    backend: leg.backend,
                    state: LegState::Skipped(format!("no {} GPU on this machine", leg.arch)),
                    results,
                }
            };
            reports.push(report);
        }
    }
    let table = report::table(&reports);
    let md = report::markdown("kiln GPU test matrix", &preamble, &reports);
    let path = opts.out.join("report.md");
    std::fs::write(&path, md).with_context(|| format!("writing {}", path.display()))?;
    Ok(Outcome { table, report: path, failed: reports.iter().any(LegReport::failed) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_path_pairs() {
        assert_eq!(parse_arch_path("sm_90=out/junit.xml").unwrap(), ("sm_90".to_string(), PathBuf::from("out/junit.xml")));
        assert!(parse_arch_path("junit.xml").is_err());
        assert!(parse_arch_path("=x").is_err());
    }
}
