//! Test outcomes from nextest's output: the JUnit file of the `ci` profile
//! (what ran, and how it ended) and `nextest list --message-format json` (what
//! exists, and which tests the harness marked ignored, i.e. skipped).
//!
//! nextest's JUnit leaves out tests that were not run, skipped ones included
//! (its `skipped` attribute stays 0), so the skips come from the list: a test
//! listed as ignored is skipped; one listed as runnable but absent from the
//! JUnit did not report (the run was cut short) and counts as missing.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    Pass,
    Fail,
    Skip,
    /// Listed as runnable, but the run has no result for it.
    Missing,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestResult {
    /// nextest's binary id (`kiln-kernel-tests::kernels`).
    pub binary: String,
    pub name: String,
    pub outcome: Outcome,
    /// The failure message's first lines, or why it was skipped or missing.
    pub message: Option<String>,
}

/// The `<testcase>`s of a JUnit file, as nextest (or any JUnit writer) reports them.
pub fn parse_junit(xml: &str) -> Result<Vec<TestResult>> {
    let doc = roxmltree::Document::parse(xml).context("the JUnit file is not well-formed XML")?;
    let root = doc.root_element();
    if root.tag_name().name() != "testsuites" && root.tag_name().name() != "testsuite" {
        bail!("the JUnit file's root element is <{}>, not <testsuites>", root.tag_name().name());
    }
    let mut out = Vec::new();
    for case in root.descendants().filter(|n| n.has_tag_name("testcase")) {
        let name = case.attribute("name").context("a <testcase> without a name")?.to_string();
        let binary = case.attribute("classname").or_else(|| case.parent_element().and_then(|p| p.attribute("name"))).unwrap_or_default().to_string();
        let child = |tag: &str| case.children().find(|c| c.has_tag_name(tag));
        let (outcome, node) = if let Some(n) = child("failure").or_else(|| child("error")) {
            (Outcome::Fail, Some(n))
        } else if let Some(n) = child("skipped") {
            (Outcome::Skip, Some(n))
        } else {
            (Outcome::Pass, None)
        };
        let message = node.map(|n| {
            let output: String = case
                .children()
                .filter(|c| c.has_tag_name("system-out") || c.has_tag_name("system-err"))
                .filter_map(|c| c.text())
                .chain(n.text())
                .collect::<Vec<_>>()
                .join("\n");
            let how = n.attribute("message").or(n.attribute("type")).unwrap_or("failed");
            match failure_text(&output, &name) {
                Some(why) => why,
                None => how.to_string(),
            }
        });
        out.push(TestResult { binary, name, outcome, message });
    }
    Ok(out)
}

/// What a failed test said: libtest prints it under `---- <name> ----`
/// (a panic, or the harness's error), the first lines of it.
fn failure_text(output: &str, name: &str) -> Option<String> {
    let marker = format!("---- {name} ----");
    let after = &output[output.find(&marker)? + marker.len()..];
    let lines: Vec<&str> = after
        .lines()
        .map(str::trim)
        .skip_while(|l| l.is_empty())
        .take_while(|l| !l.is_empty() && *l != "failures:")
        .filter(|l| !l.starts_with("note: run with `RUST_BACKTRACE"))
        .take(4)
        .collect();
    (!lines.is_empty()).then(|| lines.join(" "))
}

/// One test of `nextest list --message-format json`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub binary: String,
    pub name: String,
    pub ignored: bool,
}

pub fn parse_list(json: &str) -> Result<Vec<Listed>> {
    let v: serde_json::Value = serde_json::from_str(json).context("the nextest list output is not JSON")?;
    let suites = v.get("rust-suites").and_then(|s| s.as_object()).context("no `rust-suites` in the nextest list output")?;
    let mut out = Vec::new();
    for (binary, suite) in suites {
        let Some(cases) = suite.get("testcases").and_then(|c| c.as_object()) else { continue };
        for (name, case) in cases {
            let ignored = case.get("ignored").and_then(|i| i.as_bool()).unwrap_or(false);
            // Ignored tests are listed as filtered out for the reason "ignored":
            // they are the skips. Tests filtered out by an expression are not in the run at all.
            let status = case.pointer("/filter-match/status").and_then(|s| s.as_str());
            let reason = case.pointer("/filter-match/reason").and_then(|s| s.as_str());
            if status.is_some_and(|s| s != "matches") && !(ignored && reason == Some("ignored")) {
                continue;
            }
            out.push(Listed { binary: binary.clone(), name: name.clone(), ignored });
        }
    }
    Ok(out)
}

/// The run's results completed by the listing: ignored tests become skipped
/// (with `skip_reason`'s words), runnable tests without a result become missing.
pub fn merge(junit: Vec<TestResult>, listed: Option<&[Listed]>, skip_reason: impl Fn(&Listed) -> String) -> Vec<TestResult> {
    let Some(listed) = listed else { return junit };
    let reported: BTreeSet<(String, String)> = junit.iter().map(|r| (r.binary.clone(), r.name.clone())).collect();
    let mut all = junit;
    for l in listed {
        if reported.contains(&(l.binary.clone(), l.name.clone())) {
            continue;
        }
        let (outcome, message) = if l.ignored {
            (Outcome::Skip, skip_reason(l))
        } else {
            (Outcome::Missing, "listed as runnable, but the run reported no result for it".to_string())
        };
        all.push(TestResult { binary: l.binary.clone(), name: l.name.clone(), outcome, message: Some(message) });
    }
    all
}

/// Counts by outcome.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub pass: usize,
    pub fail: usize,
    pub skip: usize,
    pub missing: usize,
}

impl Counts {
    pub fn add(&mut self, o: Outcome) {
        match o {
            Outcome::Pass => self.pass += 1,
            Outcome::Fail => self.fail += 1,
            Outcome::Skip => self.skip += 1,
            Outcome::Missing => self.missing += 1,
        }
    }

    pub fn total(&self) -> usize {
        self.pass + self.fail + self.skip + self.missing
    }
}

/// Kernel-test counts by module (names per [`crate::names`]), and everything
/// else (other crates' tests, when a whole archive ran) under `other`.
pub fn by_module(results: &[TestResult]) -> (BTreeMap<&'static str, Counts>, Counts) {
    let mut modules: BTreeMap<&'static str, Counts> = crate::MODULES.iter().map(|m| (*m, Counts::default())).collect();
    let mut other = Counts::default();
    for r in results {
        match crate::names::parse(&r.name).and_then(|(_, m, _)| crate::MODULES.iter().find(|x| **x == m)) {
            Some(m) => modules.get_mut(m).unwrap().add(r.outcome),
            None => other.add(r.outcome),
        }
    }
    (modules, other)
}

#[cfg(test)]
mod tests {
    use super::*;

    const JUNIT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="3" skipped="0" failures="1" errors="0">
    <testsuite name="kiln-kernel-tests::kernels" tests="3" skipped="0" errors="0" failures="1">
        <testcase name="cuda::affine::f32_contiguous" classname="kiln-kernel-tests::kernels" time="0.1"/>
        <testcase name="cuda::unary::exp_bf16_contiguous" classname="kiln-kernel-tests::kernels" time="0.1">
            <failure type="test failure with exit code 101"/>
            <system-out>
running 1 test
test cuda::unary::exp_bf16_contiguous ... FAILED

failures:

---- cuda::unary::exp_bf16_contiguous ----
uexp_bf16 on contig_1027: 3 of 1027 elements mismatch: [12] got NaN want 1.5

failures:
    cuda::unary::exp_bf16_contiguous
</system-out>
        </testcase>
        <testcase name="xtask::cli" classname="xtask::bin/xtask" time="0.1"/>
    </testsuite>
</testsuites>"#;

    #[test]
    fn junit_outcomes_and_messages() {
        let r = parse_junit(JUNIT).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].outcome, Outcome::Pass);
        assert_eq!(r[1].outcome, Outcome::Fail);
        assert_eq!(r[1].message.as_deref(), Some("uexp_bf16 on contig_1027: 3 of 1027 elements mismatch: [12] got NaN want 1.5"));
        let (m, other) = by_module(&r);
        assert_eq!(m["affine"], Counts { pass: 1, ..Counts::default() });
        assert_eq!(m["unary"], Counts { fail: 1, ..Counts::default() });
        assert_eq!(other.pass, 1);
        assert!(parse_junit("<html/>").is_err());
        assert!(parse_junit("<testsuites").is_err());
    }

    #[test]
    fn ignored_tests_in_the_list_are_skips_and_unreported_ones_missing() {
        let list = r#"{"rust-suites": {"kiln-kernel-tests::kernels": {"testcases": {
            "cuda::affine::f32_contiguous": {"ignored": false, "filter-match": {"status": "matches"}},
            "cuda::unary::exp_bf16_contiguous": {"ignored": false, "filter-match": {"status": "matches"}},
            "cuda::sort::asc_f32": {"ignored": false, "filter-match": {"status": "matches"}},
            "hip::affine::f32_contiguous": {"ignored": true, "filter-match": {"status": "mismatch", "reason": "ignored"}},
            "hip::unary::x": {"ignored": true, "filter-match": {"status": "mismatch", "reason": "expression"}}
        }}}}"#;
        let listed = parse_list(list).unwrap();
        assert_eq!(listed.len(), 4);
        let all = merge(parse_junit(JUNIT).unwrap(), Some(&listed), |_| "HIP: no device".to_string());
        let (m, _) = by_module(&all);
        assert_eq!(m["affine"], Counts { pass: 1, skip: 1, ..Counts::default() });
        assert_eq!(m["sort"], Counts { missing: 1, ..Counts::default() });
        let skipped = all.iter().find(|r| r.name == "hip::affine::f32_contiguous").unwrap();
        assert_eq!(skipped.message.as_deref(), Some("HIP: no device"));
    }
}
