//! The matrix report: one row per leg (GPU arch), one column per kernel
//! module, each cell the leg's own-backend kernel tests by outcome.

use std::fmt::Write as _;

use kiln_loader::Backend;

use crate::results::{by_module, Counts, Outcome, TestResult};

/// What happened to one leg.
#[derive(Clone, Debug)]
pub enum LegState {
    /// Its tests ran (or their results were read); see the results.
    Ran { how: String },
    /// Not run here, and why (no such GPU on this machine, ...).
    Skipped(String),
    /// It should have run but could not (nextest missing, the run crashed, ...).
    Error(String),
}

#[derive(Clone, Debug)]
pub struct LegReport {
    /// `sm_90`, `gfx90a`.
    pub arch: String,
    pub backend: Backend,
    pub state: LegState,
    /// The tests (a listing) or their results.
    pub results: Vec<TestResult>,
}

impl LegReport {
    /// The results of this leg's own backend's kernel tests, and of everything else.
    fn own(&self) -> Vec<TestResult> {
        self.results.iter().filter(|r| crate::names::parse(&r.name).is_some_and(|(b, _, _)| b == self.backend)).cloned().collect()
    }

    /// Whether this leg makes the matrix fail: a failure, a missing result, or an error.
    pub fn failed(&self) -> bool {
        match &self.state {
            LegState::Error(_) => true,
            LegState::Skipped(_) => false,
            LegState::Ran { .. } => self.results.iter().any(|r| matches!(r.outcome, Outcome::Fail | Outcome::Missing)),
        }
    }
}

fn cell(c: &Counts, skipped_leg: bool) -> String {
    if skipped_leg {
        return if c.total() > 0 { format!("skipped ({})", c.total()) } else { "skipped".into() };
    }
    if c.total() == 0 {
        return "—".into();
    }
    let bad = c.fail + c.missing;
    if bad > 0 {
        let mut s = format!("FAIL {bad}/{}", c.total());
        if c.missing > 0 {
            let _ = write!(s, " ({} missing)", c.missing);
        }
        return s;
    }
    match (c.pass, c.skip) {
        (p, 0) => format!("pass {p}"),
        (0, s) => format!("skip {s}"),
        (p, s) => format!("pass {p}, skip {s}"),
    }
}

fn status(leg: &LegReport) -> String {
    match &leg.state {
        LegState::Ran { .. } if leg.failed() => "FAILED".into(),
        LegState::Ran { .. } => "passed".into(),
        LegState::Skipped(_) => "skipped".into(),
        LegState::Error(_) => "ERROR".into(),
    }
}

fn rows(legs: &[LegReport]) -> (Vec<String>, Vec<Vec<String>>) {
    let mut header = vec!["leg".to_string(), "status".to_string()];
    header.extend(crate::MODULES.iter().map(|m| m.to_string()));
    header.push("all".into());
    let rows = legs
        .iter()
        .map(|leg| {
            let own = leg.own();
            let (modules, _) = by_module(&own);
            let skipped = !matches!(leg.state, LegState::Ran { .. });
            let mut total = Counts::default();
            let mut row = vec![format!("{} ({})", leg.arch, leg.backend.as_str()), status(leg)];
            for m in crate::MODULES {
                let c = modules[m];
                total.pass += c.pass;
                total.fail += c.fail;
                total.skip += c.skip;
                total.missing += c.missing;
                row.push(cell(&c, skipped));
            }
            row.push(cell(&total, skipped));
            row
        })
        .collect();
    (header, rows)
}

/// The table for a terminal.
pub fn table(legs: &[LegReport]) -> String {
    let (header, rows) = rows(legs);
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String]| cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect::<Vec<_>>().join("  ").trim_end().to_string();
    let mut out = line(&header) + "\n";
    out += &(widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("  ") + "\n");
    for r in &rows {
        out += &(line(r) + "\n");
    }
    out
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The markdown report (target/test-matrix/report.md).
pub fn markdown(title: &str, preamble: &[String], legs: &[LegReport]) -> String {
    let mut md = format!("# {title}\n\n");
    for p in preamble {
        md += p;
        md += "\n";
    }
    md += "\nEach cell counts the leg's own-backend kernel tests of that module \
           (`<backend>::<module>::<case>`, crates/kiln-kernel-tests): pass, FAIL (failed or \
           missing / total), skip. docs/gpu-tests.md says what each module's tests cover.\n\n";
    let (header, rows) = rows(legs);
    md += &format!("| {} |\n", header.join(" | "));
    md += &format!("|{}\n", "---|".repeat(header.len()));
    for r in &rows {
        md += &format!("| {} |\n", r.iter().map(|c| md_escape(c)).collect::<Vec<_>>().join(" | "));
    }
    for leg in legs {
        md += &format!("\n## {} ({})\n\n", leg.arch, leg.backend.as_str());
        match &leg.state {
            LegState::Ran { how } => md += &format!("Ran: {}\n", md_escape(how)),
            LegState::Skipped(why) => md += &format!("**Skipped**: {}\n", md_escape(why)),
            LegState::Error(why) => md += &format!("**Error**: {}\n", md_escape(why)),
        }
        let own = leg.own();
        let mut counts = Counts::default();
        own.iter().for_each(|r| counts.add(r.outcome));
        let other: Vec<&TestResult> = leg.results.iter().filter(|r| crate::names::parse(&r.name).is_none_or(|(b, _, _)| b != leg.backend)).collect();
        if matches!(leg.state, LegState::Ran { .. }) {
            md += &format!(
                "\n{} {} kernel tests: {} passed, {} failed, {} skipped, {} missing.\n",
                counts.total(),
                leg.backend.as_str(),
                counts.pass,
                counts.fail,
                counts.skip,
                counts.missing
            );
            if !other.is_empty() {
                let mut oc = Counts::default();
                other.iter().for_each(|r| oc.add(r.outcome));
                md += &format!(
                    "Other tests in the run (the other backend's kernel tests, other crates): {} passed, {} failed, {} skipped, {} missing.\n",
                    oc.pass, oc.fail, oc.skip, oc.missing
                );
            }
        }
        let bad: Vec<&TestResult> = leg.results.iter().filter(|r| matches!(r.outcome, Outcome::Fail | Outcome::Missing)).collect();
        if matches!(leg.state, LegState::Ran { .. }) && !bad.is_empty() {
            md += "\n| failed test | why |\n|---|---|\n";
            for r in bad {
                md += &format!("| `{}` | {} |\n", r.name, md_escape(r.message.as_deref().unwrap_or("")));
            }
        }
        let mut reasons: Vec<String> = leg.results.iter().filter(|r| r.outcome == Outcome::Skip).filter_map(|r| r.message.clone()).collect();
        reasons.sort();
        reasons.dedup();
        if matches!(leg.state, LegState::Ran { .. }) && !reasons.is_empty() {
            md += "\nSkipped, because:\n\n";
            for r in reasons {
                md += &format!("- {}\n", md_escape(&r));
            }
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(name: &str, outcome: Outcome) -> TestResult {
        TestResult { binary: "kiln-kernel-tests::kernels".into(), name: name.into(), outcome, message: Some("m".into()) }
    }

    #[test]
    fn cells_and_status() {
        let ran = LegReport {
            arch: "sm_90".into(),
            backend: Backend::Cuda,
            state: LegState::Ran { how: "archive".into() },
            results: vec![
                r("cuda::affine::a", Outcome::Pass),
                r("cuda::affine::b", Outcome::Pass),
                r("cuda::unary::a", Outcome::Fail),
                r("hip::affine::a", Outcome::Skip),
            ],
        };
        let skipped = LegReport {
            arch: "gfx90a".into(),
            backend: Backend::Hip,
            state: LegState::Skipped("no gfx90a GPU here".into()),
            results: vec![r("hip::affine::a", Outcome::Skip)],
        };
        assert!(ran.failed());
        assert!(!skipped.failed());
        let t = table(&[ran.clone(), skipped.clone()]);
        let words = |line: &str| line.split("  ").map(str::trim).filter(|c| !c.is_empty()).map(String::from).collect::<Vec<_>>();
        let lines: Vec<&str> = t.lines().collect();
        let sm90 = words(lines[2]);
        assert_eq!(&sm90[..3], ["sm_90 (cuda)", "FAILED", "pass 2"], "{t}");
        assert_eq!(sm90[12], "FAIL 1/1", "unary: {t}");
        assert_eq!(sm90[13], "FAIL 1/3", "all: {t}");
        assert_eq!(&words(lines[3])[..3], ["gfx90a (hip)", "skipped", "skipped (1)"], "{t}");
        let md = markdown("m", &[], &[ran, skipped]);
        assert!(md.contains("| `cuda::unary::a` | m |"), "{md}");
        assert!(md.contains("**Skipped**: no gfx90a GPU here"), "{md}");
    }
}
