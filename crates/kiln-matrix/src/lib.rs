//! The GPU runner matrix (`ci/matrix.yaml`) and the GitHub Actions workflow
//! generated from it (`cargo xtask ci`).
//!
//! [`Matrix::parse`] turns the YAML into typed legs, checking every key, every
//! arch against kiln's known archs and against what pins.toml builds, and
//! refusing duplicates; each error names `file:line:column`. [`workflow`]
//! writes the workflow text; [`workflow::drift`] compares it with the
//! checked-in files. docs/runners.md is the operator's side of this.

mod parse;
pub mod workflow;

use std::{
    fmt,
    path::{Path, PathBuf},
};

use kiln_pins::{HipArch, Sm};

/// A problem in the matrix file: the pin file's kind of error, located to
/// `file:line:column` (1-based) and rendered the same way.
pub type MatrixError = kiln_pins::PositionedError;

/// Where the matrix lives, relative to the repository root.
pub const FILE: &str = "ci/matrix.yaml";

/// The schema this crate reads (`schema:` in the file).
pub const SCHEMA: i64 = 1;

/// Set in every GPU job's test container: the arch of the leg (`gfx90a`,
/// `sm_90`; [`Arch::parse`] reads it). Tests that see it must fail, not skip,
/// when there is no device of that arch: a runner with the wrong GPU, or none,
/// is a broken leg, not a green one.
pub const TEST_ARCH_ENV: &str = "KILN_TEST_ARCH";
/// Set in every GPU job's test container: the absolute path of the dist folder
/// the build job made (its manifest.json is at the top).
pub const DIST_DIR_ENV: &str = "KILN_DIST_DIR";

/// The digest that stands for "this image is not published yet". Legs whose
/// image carries it must be `awaiting-runner`: their jobs fail in the
/// preflight step, naming the matrix, instead of failing to pull.
pub const PLACEHOLDER_DIGEST: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The whole matrix file.
#[derive(Clone, Debug)]
pub struct Matrix {
    pub file: PathBuf,
    pub build: Build,
    pub dist: Dist,
    pub actions: Actions,
    pub tests: Tests,
    pub legs: Vec<Leg>,
}

/// The CPU job that builds the dist folder and the test archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Build {
    /// A GitHub-hosted runner image, e.g. `ubuntu-24.04`.
    pub runs_on: String,
    /// The Rust toolchain, `x.y.z`.
    pub rust: String,
    /// The cargo-nextest version, `x.y.z`; the GPU jobs run the same binary.
    pub nextest: String,
    pub timeout_minutes: u32,
}

/// The dist, fanned out: `shards` jobs that each build a part of the plan
/// (`cargo xtask dist --shard K/N`) and one that merges them (`dist merge`),
/// on CPU runners; the merged dist is what the GPU legs test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dist {
    pub shards: u32,
    /// The shard and merge jobs' `runs-on` labels.
    pub runs_on: Vec<String>,
    pub timeout_minutes: u32,
    pub remote_cache: Option<RemoteCache>,
}

impl Dist {
    /// Whether the jobs run on self-hosted runners (which never get a fork's code).
    pub fn self_hosted(&self) -> bool {
        self.runs_on.iter().any(|l| l == "self-hosted")
    }
}

/// Where the shard jobs find the shared remote cache: names in the
/// repository's settings, never values in the repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteCache {
    /// The repository variable holding the cache's URL (`vars.<name>`).
    pub url_variable: String,
    /// The secret holding its bearer token (`secrets.<name>`), if it needs one.
    pub token_secret: Option<String>,
}

/// The actions the workflow uses, each pinned to a full commit SHA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Actions {
    pub checkout: Action,
    pub cache: Action,
    pub upload_artifact: Action,
    pub download_artifact: Action,
    /// Signs the published crates' provenance (the `publish` job).
    pub attest_build_provenance: Action,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Action {
    /// `owner/name`.
    pub repo: String,
    /// 40 lowercase hex digits.
    pub sha: String,
    /// The release that SHA is, for people reading the workflow (`v6.0.2`).
    pub tag: String,
}

impl Action {
    /// The `uses:` value.
    pub fn uses(&self) -> String {
        format!("{}@{}", self.repo, self.sha)
    }
}

/// What every GPU job runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tests {
    /// A nextest filterset (`-E`); `None` runs every test in the archive.
    pub filter: Option<String>,
}

pub use kiln_target::Backend;

/// The GPU a leg tests on: an AMD ISA or an NVIDIA compute capability (SASS).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Arch {
    Hip(HipArch),
    Cuda(Sm),
}

impl Arch {
    /// `gfx90a` or `sm_90`, if kiln knows it (as [`TEST_ARCH_ENV`] names it).
    pub fn parse(s: &str) -> Result<Arch, String> {
        if s.starts_with("gfx") {
            HipArch::parse(s).map(Arch::Hip)
        } else if s.starts_with("sm_") {
            Sm::parse_prefixed(s, "sm_").map(Arch::Cuda)
        } else {
            Err(format!("`{s}` is neither an AMD arch (gfx...) nor an NVIDIA one (sm_XX)"))
        }
    }

    /// `gfx90a`, `sm_90`: the runner label, the job id's suffix and `KILN_TEST_ARCH`.
    pub fn name(&self) -> String {
        match self {
            Arch::Hip(a) => a.as_str().to_string(),
            Arch::Cuda(sm) => sm.sass(),
        }
    }

    pub fn backend(&self) -> Backend {
        match self {
            Arch::Hip(_) => Backend::Hip,
            Arch::Cuda(_) => Backend::Cuda,
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// A container image pinned by digest: `name@sha256:<64 hex>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    pub name: String,
    pub digest: String,
}

impl Image {
    pub fn reference(&self) -> String {
        format!("{}@sha256:{}", self.name, self.digest)
    }

    /// True while the image is not published yet (see [`PLACEHOLDER_DIGEST`]).
    pub fn is_placeholder(&self) -> bool {
        self.digest == PLACEHOLDER_DIGEST
    }
}

/// Whether a leg's runners exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Runs on every push to main and every same-repository pull request.
    Active,
    /// No runner is registered yet: the job is generated but only runs when a
    /// maintainer dispatches the workflow by hand (to bring a runner up), so
    /// that pushes do not queue for a runner that does not exist.
    AwaitingRunner,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::AwaitingRunner => "awaiting-runner",
        }
    }
}

/// One entry of `legs:`: one GPU arch, one job (times its partitions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leg {
    pub arch: Arch,
    pub status: Status,
    /// Labels beyond the ones every leg gets (see [`Leg::runs_on`]).
    pub labels: Vec<String>,
    pub image: Image,
    /// The `images` entry `image` came from (`hip`, `rocm7`), or `None` when the leg writes it out.
    pub image_key: Option<String>,
    /// nextest `--partition count:K/N` with N = this.
    pub partitions: u32,
    pub timeout_minutes: u32,
    /// Extra environment for the test container, in file order.
    pub env: Vec<(String, String)>,
    /// Where the leg starts in the matrix file.
    pub line: usize,
}

/// Labels every GPU job asks for before its arch: a runner set up as
/// docs/runners.md says carries `kiln-gpu`.
pub const BASE_LABELS: &[&str] = &["self-hosted", "linux", "x64", "kiln-gpu"];

impl Leg {
    pub fn backend(&self) -> Backend {
        self.arch.backend()
    }

    /// The job id in the workflow: `gpu-gfx90a`, `gpu-sm_90`.
    pub fn job_id(&self) -> String {
        format!("gpu-{}", self.arch.name())
    }

    /// `runs-on`: the base labels, the arch, then the leg's own labels.
    pub fn runs_on(&self) -> Vec<String> {
        let mut labels: Vec<String> = BASE_LABELS.iter().map(|s| s.to_string()).collect();
        labels.push(self.arch.name());
        labels.extend(self.labels.iter().cloned());
        labels
    }
}

/// Every leg's image is a runner image of the pin file's `[containers]`
/// (`<registry>/<name>`), and a leg for an LLVM generic target runs in one
/// whose HIP runtime loads code object v6 (kiln-target's `GENERIC_ROCM`).
fn check_images(path: &Path, matrix: &Matrix, containers: &kiln_pins::Containers, pins_file: &Path) -> Result<(), MatrixError> {
    let closures = containers.closures(pins_file).ok();
    for leg in &matrix.legs {
        let runner = containers.runners.iter().find(|r| format!("{}/{}", containers.registry, r.name) == leg.image.name);
        let Some(runner) = runner else {
            let known: Vec<String> = containers.runners.iter().map(|r| format!("{}/{}", containers.registry, r.name)).collect();
            return Err(MatrixError::new(
                path,
                leg.line,
                1,
                format!("the `{}` leg's image `{}` is not a runner image of [containers]", leg.arch, leg.image.name),
            )
            .help(format!("the runner images are {} (docs/containers.md)", known.join(", "))));
        };
        let generic = matches!(&leg.arch, Arch::Hip(a) if kiln_target::gfx(a.as_str()).is_some_and(|g| g.is_generic()));
        let rocm = closures.as_ref().and_then(|c| c.runner(runner.key)).and_then(|c| c.packages.hip_rocm());
        if let (true, Some(rocm)) = (generic, rocm) {
            let need = kiln_target::GENERIC_ROCM;
            if rocm < need {
                return Err(MatrixError::new(
                    path,
                    leg.line,
                    1,
                    format!(
                        "the `{}` leg runs in {} (HIP {}.{}), which cannot load a generic target's code object v6 (ROCm >= {}.{})",
                        leg.arch, runner.name, rocm.0, rocm.1, need.0, need.1
                    ),
                )
                .help("give it an image whose HIP runtime is new enough (`image: rocm7`; docs/runners.md)"));
            }
        }
    }
    Ok(())
}

impl Matrix {
    /// Reads `path` and checks it against the pin file's targets.
    pub fn load(path: &Path, pins: &kiln_pins::Pins) -> Result<Matrix, MatrixError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            MatrixError::whole(path, format!("cannot read the runner matrix: {e}"))
                .help(format!("kiln expects it at `{FILE}` in the repository root"))
        })?;
        let matrix = Matrix::parse(path, &text, &pins.file, &pins.targets)?;
        if let Some(containers) = &pins.containers {
            check_images(path, &matrix, containers, &pins.file)?;
        }
        Ok(matrix)
    }

    /// Parses matrix text. `path` and `pins_file` are only used in messages;
    /// `targets` is what `cargo xtask dist` builds, which every leg must be in.
    pub fn parse(path: &Path, text: &str, pins_file: &Path, targets: &kiln_pins::Targets) -> Result<Matrix, MatrixError> {
        parse::parse(path, text, pins_file, targets)
    }

    /// Targets that pins.toml builds and that no leg tests on a GPU.
    pub fn untested_targets(&self, targets: &kiln_pins::Targets) -> Vec<String> {
        let tested: Vec<String> = self.legs.iter().map(|l| l.arch.name()).collect();
        targets
            .hip
            .iter()
            .map(|a| a.as_str().to_string())
            .chain(targets.cuda_sass.iter().map(|s| s.sass()))
            .filter(|name| !tested.contains(name))
            .collect()
    }
}
