//! `job-costs.toml`: the measured seconds of each compile job, committed
//! beside `artifacts.lock`, that `dist --shard` balances shards with.
//!
//! Why a committed table and not the cache's own timings: every shard
//! machine must cut the plan into exactly the same parts, or jobs go missing
//! or are built twice, so the partition may depend only on the commit. A
//! cache's timings depend on which machine built what (and an empty cache has
//! none); the byte-size estimate the scheduler orders by (`Job::cost`) ranks
//! jobs but says nothing of seconds. Seconds
//! measured once on a reference machine (`cargo xtask dist --update-costs`,
//! which reads the seconds every cache entry records) are right to within
//! the noise of the machine, and any machine reads the same numbers.

use std::{collections::BTreeMap, fs, path::Path};

use anyhow::{bail, Context, Result};
use kiln_build::Job;
use serde::{Deserialize, Serialize};

/// The table's file name at the repository root.
pub const FILE_NAME: &str = "job-costs.toml";

const HEADER: &str = "# Seconds each compile job of `cargo xtask dist` took, by job (kind, arch, module).\n\
# `cargo xtask dist --shard K/N` cuts the plan into N parts of about equal seconds from\n\
# these numbers, so every shard machine cuts it the same way. Written by\n\
# `cargo xtask dist --update-costs` from the seconds each cache entry recorded when it was\n\
# built; a job missing here is estimated from its module's other targets. docs/distributed.md.\n";

/// Used when neither the job nor anything like it was ever measured.
const UNKNOWN_MS: u64 = 10_000;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Costs {
    pub schema: u32,
    /// Where and how the seconds were measured, for readers.
    #[serde(default)]
    pub measured: String,
    /// Job label ([`label`]) → seconds.
    pub seconds: BTreeMap<String, f64>,
}

/// How a job is named in the table: `cubin sm_90 binary`, `hsaco gfx90a affine`,
/// `object sm_80+sm_86+sm_89+sm_90 moe/moe_gguf`.
pub fn label(job: &Job) -> String {
    format!("{} {} {}", job.kind.as_str(), job.arch, job.module)
}

impl Costs {
    /// The table at `path`; an absent file is an empty table (every job estimated).
    pub fn load(path: &Path) -> Result<Costs> {
        let text = match fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Costs { schema: 1, ..Default::default() }),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        let costs: Costs = toml::from_str(&text).map_err(|e| {
            let line = e.span().map_or(0, |s| kiln_pins::line_col(&text, s.start).0);
            anyhow::anyhow!("{}:{line}: {}", path.display(), e.message())
        })?;
        if costs.schema != 1 {
            bail!("{}: cost table schema {} is not 1", path.display(), costs.schema);
        }
        if let Some((job, s)) = costs.seconds.iter().find(|(_, s)| !kiln_build::store::is_job_seconds(**s)) {
            bail!("{}: `{job}` = {s} is not a number of seconds", path.display());
        }
        Ok(costs)
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        let body = toml::to_string(self)?;
        let tmp = path.with_extension("toml.tmp");
        fs::write(&tmp, format!("{HEADER}\n{body}")).with_context(|| format!("cannot write {}", tmp.display()))?;
        fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
    }

    /// The cost of each job in milliseconds: its measured seconds, else the
    /// mean of the same kind and module on other targets, else of the same
    /// kind, else a fixed guess. Integer milliseconds, summed in a fixed
    /// order: every machine computes the same numbers.
    pub fn estimate(&self, jobs: &[Job]) -> Vec<u64> {
        // A figure that is not a job's seconds (refused on load; a table built in code) counts as unknown.
        let ms = |s: f64| if kiln_build::store::is_job_seconds(s) { (s * 1000.0).round() as u64 } else { UNKNOWN_MS };
        let mean = |filter: &dyn Fn(&str) -> bool| -> Option<u64> {
            let v: Vec<u64> = self.seconds.iter().filter(|(l, _)| filter(l)).map(|(_, s)| ms(*s)).collect();
            (!v.is_empty()).then(|| v.iter().sum::<u64>() / v.len() as u64)
        };
        jobs.iter()
            .map(|j| {
                if let Some(s) = self.seconds.get(&label(j)) {
                    return ms(*s);
                }
                let kind = j.kind.as_str();
                let module = j.module.as_str();
                mean(&|l: &str| l.starts_with(&format!("{kind} ")) && l.ends_with(&format!(" {module}")))
                    .or_else(|| mean(&|l: &str| l.starts_with(&format!("{kind} "))))
                    .unwrap_or(UNKNOWN_MS)
            })
            .collect()
    }

    /// Sets each measured job's seconds (labels not measured keep theirs).
    pub fn update(&mut self, measured: impl IntoIterator<Item = (String, f64)>, note: &str) -> usize {
        let mut n = 0;
        for (label, s) in measured {
            self.seconds.insert(label, (s * 10.0).round() / 10.0);
            n += 1;
        }
        if n > 0 {
            self.schema = 1;
            self.measured = note.to_string();
        }
        n
    }

    /// Drops every entry of a job that is in no plan: one of a module or
    /// static library of `whole` (the module names of the sets whose whole
    /// plan is `planned`, every job label of them) that `planned` lacks.
    /// Entries of other sets' modules are kept: their plans were not made.
    /// Returns the labels dropped.
    pub fn prune(&mut self, whole: &[String], planned: &[String]) -> Vec<String> {
        let of_whole = |label: &str| {
            let module = label.splitn(3, ' ').nth(2).unwrap_or("");
            whole.iter().any(|m| module == m || module.strip_prefix(m.as_str()).is_some_and(|rest| rest.starts_with('/')))
        };
        let stale: Vec<String> = self.seconds.keys().filter(|l| of_whole(l) && !planned.contains(l)).cloned().collect();
        for l in &stale {
            self.seconds.remove(l);
        }
        stale
    }
}

/// What `--update-costs` did to the table.
pub struct Recorded {
    /// Jobs whose seconds were written.
    pub measured: usize,
    /// Entries dropped: jobs in no plan ([`Costs::prune`]).
    pub dropped: Vec<String>,
}

/// `--update-costs`: writes the seconds each compile job of `compiled` took
/// where its cache entry recorded them into the table at `path` (built with
/// `workers` jobs at once), and drops the entries of the sets built whole
/// (`whole`: their module names) that none of their jobs has.
pub fn record(path: &Path, compiled: &[(String, Option<f64>)], whole: &[String], workers: usize) -> Result<Recorded> {
    let mut costs = Costs::load(path)?;
    let measured: Vec<(String, f64)> = compiled.iter().filter_map(|(l, s)| s.map(|s| (l.clone(), s))).collect();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let note = format!("seconds per job as each cache entry recorded them; written with -j {workers} on a {cores}-core machine");
    let n = costs.update(measured, &note);
    let planned: Vec<String> = compiled.iter().map(|(l, _)| l.clone()).collect();
    let dropped = costs.prune(whole, &planned);
    costs.write(path)?;
    Ok(Recorded { measured: n, dropped })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_build::{Arch, JobKind};
    use kiln_manifest::Kind;
    use kiln_pins::Target;

    fn job(kind: Kind, arch: &str, module: &str) -> Job {
        Job {
            set: "candle".into(),
            module: module.into(),
            arch: Arch::One(Target::parse(arch).unwrap()),
            kind: JobKind::Artifact(kind),
            argv: vec![],
            output: String::new(),
            inputs: vec![],
            staged: vec![],
            mounts: vec![],
            cost: 0,
        }
    }

    #[test]
    fn measured_jobs_use_their_seconds_and_new_targets_are_estimated_from_their_module() {
        let mut c = Costs { schema: 1, ..Default::default() };
        c.update(
            [("cubin sm_80 binary".to_string(), 20.04), ("cubin sm_90 binary".to_string(), 30.0), ("ptx compute_80 affine".to_string(), 2.0)],
            "test",
        );
        assert_eq!(c.seconds["cubin sm_80 binary"], 20.0, "tenths of a second");
        let jobs = [
            job(Kind::Cubin, "sm_90", "binary"),
            job(Kind::Cubin, "sm_120", "binary"), // a new target: its module's other cubins
            job(Kind::Cubin, "sm_120", "cast"),   // a new module: every cubin
            job(Kind::Hsaco, "gfx90a", "cast"),   // nothing of its kind measured
        ];
        assert_eq!(c.estimate(&jobs), vec![30_000, 25_000, 25_000, UNKNOWN_MS]);
        assert_eq!(c.estimate(&jobs), c.estimate(&jobs), "the same on every call");
    }

    #[test]
    fn update_costs_drops_the_entries_of_jobs_in_no_plan_of_the_sets_built_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let mut c = Costs { schema: 1, ..Default::default() };
        c.update(
            [
                ("object sm_70+sm_90+compute_90 moe/mmq_instance_q8_0".to_string(), 185.3), // candle's old fat object: no longer planned
                ("cubin sm_90 moe/mmq_instance_q8_0".to_string(), 50.0),
                ("cubin sm_90 affine".to_string(), 3.0),
                ("cubin sm_89 affinex".to_string(), 3.0), // another module that merely starts alike
                ("object sm_80+sm_90 flashattention/flash_api".to_string(), 300.0), // a set not built: kept
            ],
            "before",
        );
        c.write(&path).unwrap();
        let compiled = [
            ("cubin sm_90 moe/mmq_instance_q8_0".to_string(), Some(40.0)),
            ("lib-ptx compute_90 moe/mmq_instance_q8_0".to_string(), Some(30.0)),
            ("cubin sm_90 affine".to_string(), None),
        ];
        let whole = ["affine".to_string(), "moe".to_string()];
        let r = record(&path, &compiled, &whole, 2).unwrap();
        assert_eq!((r.measured, r.dropped), (2, vec!["object sm_70+sm_90+compute_90 moe/mmq_instance_q8_0".to_string()]));
        let after = Costs::load(&path).unwrap();
        assert_eq!(
            after.seconds.keys().map(String::as_str).collect::<Vec<_>>(),
            [
                "cubin sm_89 affinex",
                "cubin sm_90 affine",
                "cubin sm_90 moe/mmq_instance_q8_0",
                "lib-ptx compute_90 moe/mmq_instance_q8_0",
                "object sm_80+sm_90 flashattention/flash_api"
            ]
        );
        assert_eq!(after.seconds["cubin sm_90 affine"], 3.0, "a job without a recorded time keeps its figure");
        // A run of part of a plan (no set whole) drops nothing.
        let r = record(&path, &compiled[..1], &[], 2).unwrap();
        assert!(r.dropped.is_empty());
        assert_eq!(Costs::load(&path).unwrap().seconds.len(), 5);
    }

    #[test]
    fn the_table_round_trips_and_bad_figures_are_refused() {
        let dir = std::env::temp_dir().join(format!("kiln-costs-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(FILE_NAME);
        assert_eq!(Costs::load(&path).unwrap().seconds.len(), 0, "no file: every job estimated");
        let mut c = Costs::load(&path).unwrap();
        c.update([("object sm_80+sm_90 moe/moe_gguf".to_string(), 120.5)], "2 cores");
        c.write(&path).unwrap();
        assert_eq!(Costs::load(&path).unwrap(), c);
        fs::write(&path, "schema = 1\n[seconds]\n\"cubin sm_90 x\" = -1.0\n").unwrap();
        assert!(format!("{:#}", Costs::load(&path).unwrap_err()).contains("not a number of seconds"));
        fs::write(&path, "schema = 1\n[seconds]\n\"cubin sm_90 x\" = \"fast\"\n").unwrap();
        assert!(format!("{:#}", Costs::load(&path).unwrap_err()).contains(&format!("{}:3", path.display())));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn seconds_no_job_takes_are_refused_before_they_overflow_an_estimate() {
        // Before: loaded, then estimating a new target of their module summed
        // two saturated u64 milliseconds and panicked (overflow).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job-costs.toml");
        fs::write(&path, "schema = 1\n[seconds]\n\"cubin sm_80 binary\" = 1e300\n\"cubin sm_90 binary\" = 1e300\n").unwrap();
        let e = format!("{:#}", Costs::load(&path).unwrap_err());
        assert!(e.contains("job-costs.toml") && e.contains("cubin sm_80 binary") && e.contains("not a number of seconds"), "{e}");
        let c =
            Costs { schema: 1, seconds: [("cubin sm_80 binary".into(), 1e300), ("cubin sm_90 binary".into(), 1e300)].into(), ..Default::default() };
        assert_eq!(c.estimate(&[job(Kind::Cubin, "sm_100", "binary")]), vec![UNKNOWN_MS]);
    }
}
