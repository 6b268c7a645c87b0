//! A dist part: what one `dist --shard K/N` built, as a folder that travels
//! between machines (a CI artifact). `part.json` says which shard of which
//! plan it is and lists every job it built with its cache key, size and
//! sha256; the outputs lie under `jobs/<key>/`. `dist merge` reads parts.

use std::{
    fmt, fs,
    path::{Path, PathBuf},
    str::FromStr,
};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// The partial manifest's file name in a part folder.
pub const FILE_NAME: &str = "part.json";
/// The folder of the outputs, one `<key>/<output>` per job.
pub const JOBS_DIR: &str = "jobs";
const KIND: &str = "kiln-dist-part";
const SCHEMA: u32 = 1;
/// More shards than this is a typo, not a plan (a full dist is ~115 jobs).
pub const MAX_SHARDS: u32 = 256;

/// A part folder's owner: `dist --shard --out` replaces only a folder a shard wrote, or an empty one.
pub const OWNER: kiln_fs::Owner = kiln_fs::Owner { command: "cargo xtask dist --shard", flag: "--out", reuse: kiln_fs::Reuse::ReplacedWhole };

/// `K/N`: the K-th of N shards, counted from 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Spec {
    pub k: u32,
    pub n: u32,
}

impl FromStr for Spec {
    type Err = String;
    fn from_str(s: &str) -> Result<Spec, String> {
        let usage = "give K/N, the K-th of N shards counted from 1, e.g. --shard 2/4";
        let Some((k, n)) = s.split_once('/') else {
            return Err(format!("shard `{}` is not K/N: {usage}", s.escape_default()));
        };
        let num = |x: &str| x.trim().parse::<u32>().ok();
        let (Some(k), Some(n)) = (num(k), num(n)) else {
            return Err(format!("shard `{}`: K and N must be whole numbers; {usage}", s.escape_default()));
        };
        if n == 0 {
            return Err(format!("shard {k}/0: there must be at least one shard; {usage}"));
        }
        if n > MAX_SHARDS {
            return Err(format!("shard {k}/{n}: at most {MAX_SHARDS} shards"));
        }
        if k == 0 {
            return Err(format!("shard 0/{n}: shards are counted from 1, so K is 1 to {n}"));
        }
        if k > n {
            return Err(format!("shard {k}/{n}: there are only {n} shards, so K is 1 to {n}"));
        }
        Ok(Spec { k, n })
    }
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.k, self.n)
    }
}

/// Which plan a part belongs to. Two parts merge only if these are equal;
/// `id` hashes everything else and every job's cache key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanIdentity {
    pub id: String,
    /// The kernel set, for a set other than the main one (`flash-attn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set: Option<String>,
    /// The toolchain identity (every pinned package's sha256).
    pub toolchain: String,
    /// `candle-kernels 0.11.1 <sha256>`.
    pub source: String,
    /// Every pinned target, in pin order.
    pub targets: Vec<String>,
    /// `--module` and `--arch` of the run (empty: everything).
    pub modules: Vec<String>,
    pub archs: Vec<String>,
    /// The sha256 of job-costs.toml, which decides the partition.
    pub costs: String,
    /// How many compile jobs the whole plan has.
    pub jobs: usize,
}

impl PlanIdentity {
    /// Every way `other` is a different plan, most telling first.
    pub fn differences(&self, other: &PlanIdentity) -> Vec<String> {
        let mut out = Vec::new();
        let short = |s: &str| s.chars().take(16).collect::<String>();
        if self.set != other.set {
            let name = |s: &Option<String>| s.clone().unwrap_or_else(|| "the main set".into());
            out.push(format!("set {} vs {}", name(&self.set), name(&other.set)));
        }
        if self.toolchain != other.toolchain {
            out.push(format!("toolchain {} vs {} (pins.toml [toolchain] differs)", short(&self.toolchain), short(&other.toolchain)));
        }
        if self.source != other.source {
            out.push(format!("source `{}` vs `{}`", self.source, other.source));
        }
        if self.targets != other.targets {
            out.push(format!("targets [{}] vs [{}]", self.targets.join(", "), other.targets.join(", ")));
        }
        if self.modules != other.modules || self.archs != other.archs {
            out.push(format!(
                "selection --module [{}] --arch [{}] vs --module [{}] --arch [{}]",
                self.modules.join(","),
                self.archs.join(","),
                other.modules.join(","),
                other.archs.join(",")
            ));
        }
        if self.costs != other.costs {
            out.push(format!("job-costs.toml {} vs {} (so the shards were cut differently)", short(&self.costs), short(&other.costs)));
        }
        if out.is_empty() && self.id != other.id {
            out.push(format!(
                "the jobs' cache keys ({} vs {} jobs): kiln's inputs differ (kernels/hip, pins.toml [flags], kiln's own version)",
                self.jobs, other.jobs
            ));
        }
        out
    }
}

/// One job a part built.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartJob {
    /// The job as the cost table names it (`cubin sm_90 binary`).
    pub job: String,
    /// Its cache key (kiln-build's `Job::key` of its recipe).
    pub key: String,
    /// The output, relative to the part folder.
    pub file: String,
    pub size: u64,
    pub sha256: String,
    /// Where the artifact goes in the dist folder (none for static-library objects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dist_path: Option<String>,
    /// How long it took where it was built (none: it came from a cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
}

/// `part.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Part {
    pub kind: String,
    pub schema: u32,
    /// The kiln that wrote it.
    pub kiln: String,
    pub shard: Spec,
    pub plan: PlanIdentity,
    /// The estimated milliseconds of this shard's jobs (job-costs.toml).
    pub estimated_ms: u64,
    pub jobs: Vec<PartJob>,
}

impl Part {
    pub fn new(shard: Spec, plan: PlanIdentity, estimated_ms: u64, jobs: Vec<PartJob>) -> Part {
        Part { kind: KIND.into(), schema: SCHEMA, kiln: env!("CARGO_PKG_VERSION").into(), shard, plan, estimated_ms, jobs }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a part serialises") + "\n"
    }

    /// Reads `dir`'s part.json, saying what is wrong with a folder that is not a part.
    pub fn read(dir: &Path) -> Result<Part> {
        if !dir.is_dir() {
            bail!("{} is not a folder: give the folders `cargo xtask dist --shard K/N` wrote", dir.display());
        }
        let path = dir.join(FILE_NAME);
        let text = fs::read_to_string(&path)
            .with_context(|| format!("{} is not a dist part: it has no {FILE_NAME} (an interrupted or failed shard writes none)", dir.display()))?;
        let part: Part = serde_json::from_str(&text).with_context(|| format!("{} does not parse as a dist part", path.display()))?;
        if part.kind != KIND || part.schema != SCHEMA {
            bail!("{}: a `{}` of schema {}; this kiln reads `{KIND}` schema {SCHEMA}", path.display(), part.kind, part.schema);
        }
        for j in &part.jobs {
            let file = Path::new(&j.file);
            if file.is_absolute() || file.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
                bail!("{}: job `{}` names the file `{}`, which is not inside the part", path.display(), j.job, j.file);
            }
        }
        Ok(part)
    }

    /// Where job `j`'s output is in the part folder `dir`.
    pub fn file(dir: &Path, j: &PartJob) -> PathBuf {
        dir.join(&j.file)
    }
}

/// A part folder may be replaced by a shard run if it is empty, missing, or
/// holds nothing but what a shard wrote there (its marker's listing).
pub fn check_out(out: &Path) -> Result<kiln_fs::Found> {
    OWNER.claim(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_specs_are_checked_with_a_reason() {
        assert_eq!("2/4".parse::<Spec>(), Ok(Spec { k: 2, n: 4 }));
        assert_eq!("1/1".parse::<Spec>(), Ok(Spec { k: 1, n: 1 }));
        let err = |s: &str| s.parse::<Spec>().unwrap_err();
        assert!(err("0/4").contains("counted from 1"), "{}", err("0/4"));
        assert!(err("5/4").contains("only 4 shards"), "{}", err("5/4"));
        assert!(err("a/b").contains("whole numbers"), "{}", err("a/b"));
        assert!(err("3").contains("not K/N"), "{}", err("3"));
        assert!(err("1/0").contains("at least one"), "{}", err("1/0"));
        assert!(err("-1/4").contains("whole numbers"), "{}", err("-1/4"));
        assert!(err("1/1000").contains("at most"), "{}", err("1/1000"));
    }

    #[test]
    fn a_part_naming_a_file_outside_itself_is_refused() {
        let dir = std::env::temp_dir().join(format!("kiln-part-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let plan = PlanIdentity {
            id: "x".into(),
            set: None,
            toolchain: "t".into(),
            source: "s".into(),
            targets: vec![],
            modules: vec![],
            archs: vec![],
            costs: String::new(),
            jobs: 1,
        };
        let job = PartJob {
            job: "cubin sm_90 affine".into(),
            key: "k".into(),
            file: "../../etc/passwd".into(),
            size: 1,
            sha256: "00".into(),
            dist_path: None,
            seconds: None,
        };
        fs::write(dir.join(FILE_NAME), Part::new(Spec { k: 1, n: 1 }, plan, 0, vec![job]).to_json()).unwrap();
        let e = format!("{:#}", Part::read(&dir).unwrap_err());
        assert!(e.contains("not inside the part"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
