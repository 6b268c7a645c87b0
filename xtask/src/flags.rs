//! The command line. `cargo xtask --help` and `cargo xtask <task> --help` print this.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use kiln_publish::serve::{FERRO, FERRO_VERSION};

#[derive(Parser, Debug)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "kiln: candle's GPU kernels as reproducible, prebuilt, multi-arch artifacts",
    long_about = "kiln: candle's GPU kernels as reproducible, prebuilt, multi-arch artifacts.\n\n\
        Everything kiln downloads or targets is pinned in pins.toml. Downloads, unpacked \
        toolchains and compiled kernels are cached in $KILN_CACHE_DIR (default ~/.cache/kiln).",
    after_help = "Start with `cargo xtask dist`; `cargo xtask doctor` says what kiln finds on this machine."
)]
pub struct Xtask {
    /// The pin file to use.
    #[arg(long, global = true, default_value = kiln_pins::FILE_NAME, value_name = "FILE")]
    pub pins: PathBuf,
    #[command(subcommand)]
    pub task: Task,
}

#[derive(Subcommand, Debug)]
pub enum Task {
    /// Build every kernel module of the default kernel sets for every pinned target into target/dist/ (with manifest.json).
    #[command(
        long_about = "Build every kernel module of the default kernel sets for every pinned target into target/dist/.\n\n\
        Provisions the pinned toolchain and the pinned sources (of candle-kernels, and of every \
        other set built) first (cached in $KILN_CACHE_DIR), compiles in parallel with a \
        content-addressed cache (a no-op rerun takes seconds), reads every artifact back to \
        validate it, and only then replaces target/dist/ in one atomic step: a failed or \
        interrupted run leaves the previous dist folder as it was. A set other than the pin \
        file's first goes to target/dist-<set> and is checked against artifacts.<set>.lock; \
        an opt-in set (candle-flash-attn: hours of nvcc) is built only with --set \
        (docs/kernel-sets.md).\n\n\
        Beyond one machine (docs/distributed.md): `--shard K/N` builds the K-th of N parts of the \
        main set's plan (or of the one `--set` names: `--set flash-attn --shard 2/4`) into a part folder, \
        and `dist merge DIR...` assembles the parts into that set's dist folder as one machine would \
        write it. `--remote-cache URL` shares compiled objects with other machines \
        through an HTTP cache server (Bazel's /cas/ and /ac/ layout).",
        args_conflicts_with_subcommands = true,
        subcommand_negates_reqs = true
    )]
    Dist(Dist),
    /// Check target/dist/ against its manifest and artifacts.lock, naming every file that differs.
    Verify(Verify),
    /// Rebuild a kiln crate from its provenance record and compare it byte for byte (a `.crate` file, or NAME@VERSION from a registry).
    #[command(long_about = "Check a kiln crate by rebuilding it. The crate's kiln-provenance.cdx.json names what made \
        it: the pin file's sha256, kiln's commit, every toolchain package. This checkout must hold the same pins \
        (else the command names the commit to check out); the crate's kernel set is rebuilt (from kiln's cache \
        where it has the jobs, pinned downloads otherwise) into a temporary folder, and the rebuilt .crate is \
        compared with the given one byte for byte, then file by file, each difference named with its likely \
        cause. A crate changed after packaging (a file whose sha256 is not its record's) is reported without a \
        rebuild. With --trusted-key KEY.pub the crate must first be signed by that key: a statement of \
        --attestation FILE (default: attestation.intoto.jsonl beside the .crate, as `cargo xtask sign` writes it) \
        that verifies with the key and names the crate's sha256 (docs/signing.md). Exit status 0 only when the \
        crate is reproduced (and, with --trusted-key, signed).")]
    VerifyCrate(VerifyCrate),
    /// Run `dist --locked` (the reproducibility check the tests build on), the lint gate (rustfmt, clippy -D warnings), then the test suite (nextest).
    Test {
        /// Skip building target/dist (tests that need it will fail and say so).
        #[arg(long)]
        no_dist: bool,
        /// Passed on to `cargo nextest run` (e.g. a filter, or `--profile ci`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Run the GPU test legs of ci/matrix.yaml this machine has a GPU for; print leg × module and write target/test-matrix/report.md.
    #[command(long_about = "Run the GPU kernel tests (crates/kiln-kernel-tests) for every leg of ci/matrix.yaml \
        whose GPU this machine has (NVIDIA: the driver's compute capability; AMD: the KFD topology's \
        gfx_target_version, or rocminfo), with KILN_TEST_ARCH set as in CI, from a nextest archive \
        (--archive-file, no cargo needed) or built from this checkout. Every other leg is reported as \
        skipped. Prints a leg × module table (pass / FAIL / skip) and writes target/test-matrix/report.md; \
        fails if a leg that ran has a failure.\n\n\
        With --from-junit ARCH=FILE nothing runs: the results of a run elsewhere (a GPU runner's JUnit, \
        with --list ARCH=FILE from `cargo nextest list --message-format json` for its skipped tests) \
        are reported instead. docs/gpu-tests.md.")]
    TestMatrix(TestMatrix),
    /// Generate .github/workflows/ from the GPU runner matrix (ci/matrix.yaml).
    Ci {
        /// Write nothing; fail if the checked-in workflows differ from the generated ones.
        #[arg(long)]
        check: bool,
    },
    /// Provision the pinned toolchain: download every package, verify its sha256, unpack.
    Toolchain,
    /// Print what kiln finds on a builder's machine: pins, cache, toolchain, sandbox, compilers.
    /// A consumer of kiln's crates needs none of these (docs/consuming.md).
    Doctor,
    /// Build the container images (builder root filesystem and OCI image; Containerfiles) from pins.toml.
    Container(Container),
    /// Work on the pin file.
    Pins {
        #[command(subcommand)]
        action: PinsAction,
    },
    /// Publish the packaged crates (target/dist/crates) to a cargo registry: a dry run unless --execute.
    #[command(long_about = "Publish the packaged crates (target/dist/crates) to a cargo registry.\n\n\
        Uploads the exact .crate files `cargo xtask dist` packaged (each checked against the sha256 in \
        crates.json) in dependency order through the registry's web API, as `cargo publish` would. \
        The registry is looked up as cargo does: CARGO_REGISTRIES_<NAME>_INDEX, or [registries.NAME] \
        in .cargo/config.toml; sparse indexes only. The token: CARGO_REGISTRIES_<NAME>_TOKEN (crates-io: \
        CARGO_REGISTRY_TOKEN) or `cargo login --registry NAME`. Without --execute it prints what would be \
        uploaded and checks it (size limit, description, licence texts), uploading nothing. Versions \
        already in the registry with the same sha256 are skipped. docs/consuming.md.")]
    Publish(Publish),
    /// Sign the packaged crates (target/dist/crates) with an ed25519 key: one in-toto statement in a DSSE envelope.
    #[command(long_about = "Sign the packaged crates (target/dist/crates) with a local ed25519 key.\n\n\
        Writes crates/attestation.intoto.jsonl: one in-toto statement (SLSA provenance v1) naming every .crate \
        of crates.json (file name and sha256; each first checked against crates.json), in a DSSE envelope \
        signed with the key, the shape GitHub's attest-build-provenance signs with Sigstore instead. \
        `cargo xtask verify-crate FILE --trusted-key KEY.pub` checks it. `--generate-key FILE` makes a key pair \
        (FILE, mode 0600, and FILE.pub) and signs nothing. docs/signing.md.")]
    Sign(Sign),
    /// Inspect kiln's cache ($KILN_CACHE_DIR, default ~/.cache/kiln): sizes, verify, gc.
    #[command(long_about = "Inspect kiln's cache ($KILN_CACHE_DIR, default ~/.cache/kiln).\n\n\
        `size` prints the bytes of each area. `verify` checks every compiled entry against the sha256 it \
        recorded, every download and bundle against the sha256 it is named by, and every cached set of \
        packaged crates against crates.json; `--repair` removes what is damaged (the next dist rebuilds or \
        downloads it). `gc` removes scratch folders of interrupted runs, moved-aside damaged entries, failed \
        jobs' logs, and every entry, download, toolchain and source that no checkout's last full dist used \
        (each full dist records what it used). dist itself verifies each entry it reads, so none of this is \
        needed for correctness.\n\n\
        kiln removes things only from a cache carrying its marker (.kiln-owned), which it writes when it \
        creates the cache or finds the folder empty: a folder without it (one of yours, or a cache an older \
        kiln made) is used, but `gc` and `verify --repair` refuse it and dist does not clean it. \
        `mark` says a folder is kiln's cache. docs/containers.md: sharing one cache between containers.")]
    Cache {
        #[command(subcommand)]
        action: CacheAction,
    },
    /// Start a cargo registry on loopback (ferro-cargo-registry-server) to try publishing and consuming locally.
    Registry {
        #[command(subcommand)]
        action: RegistryAction,
    },
}

#[derive(clap::Args, Debug)]
pub struct Publish {
    /// The registry, as in `cargo publish --registry NAME` (`crates-io` for crates.io).
    #[arg(long, value_name = "NAME")]
    pub registry: String,
    /// Upload. Without it, a dry run: the plan is printed and checked, nothing is sent.
    #[arg(long)]
    pub execute: bool,
    /// The dist folder whose crates/ to publish.
    #[arg(long, default_value = kiln_dist::DIST_DIR, value_name = "DIR")]
    pub dist: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct Sign {
    /// The ed25519 private key to sign with (PKCS#8 PEM, as `--generate-key` or `openssl genpkey -algorithm ed25519` writes).
    #[arg(long, value_name = "FILE", required_unless_present = "generate_key", conflicts_with = "generate_key")]
    pub key: Option<PathBuf>,
    /// Write a new key pair, FILE (private, mode 0600) and FILE.pub (public), and sign nothing. Never replaces a file.
    #[arg(long, value_name = "FILE")]
    pub generate_key: Option<PathBuf>,
    /// The dist folder whose crates/ to sign.
    #[arg(long, default_value = kiln_dist::DIST_DIR, value_name = "DIR")]
    pub dist: PathBuf,
}

#[derive(Subcommand, Debug)]
pub enum RegistryAction {
    /// Start ferro-cargo-registry-server, a sparse cargo registry others maintain, on 127.0.0.1 until Ctrl-C (data in DIR).
    #[command(long_about = serve_about())]
    Serve {
        /// The registry's data folder (ferro's blobs and index-state.json): made if missing; else it
        /// must be empty or one an earlier `registry serve` made (its .kiln-owned marker), never a
        /// folder of yours. Published crates are kept there across runs.
        #[arg(long, default_value = "target/registry", value_name = "DIR")]
        dir: PathBuf,
        /// The port to listen on, on 127.0.0.1 only (never another interface); 0 picks a free one
        /// (the printed lines name it).
        #[arg(long, default_value_t = 8787)]
        port: u16,
        /// Refused: the registry this starts checks no token (it accepts any upload), so a --token
        /// would promise a check nobody makes.
        #[arg(long, value_name = "TOKEN", hide = true)]
        token: Option<String>,
    },
}

fn serve_about() -> String {
    format!(
        "Start {FERRO} {FERRO_VERSION} (crates.io, Apache-2.0: a sparse cargo registry others maintain) on \
         127.0.0.1 with its data in DIR, wait until it answers, and print what to put in .cargo/config.toml and a \
         publish command that works as printed. It serves until Ctrl-C (or until kiln is stopped any other way: \
         it never outlives kiln).\n\n\
         Tokens: {FERRO} has no authentication. It accepts every upload, whatever token comes with it (cargo \
         and `cargo xtask publish` send one anyway, so the printed command sets CARGO_REGISTRIES_KILN_TOKEN=any). \
         That is why it listens on 127.0.0.1 only: never expose it. To try a registry that checks tokens, \
         publish to the one your team runs.\n\n\
         Install it once with `{}` (what `bash .ci/setup` runs); it is looked for on PATH, then in \
         $CARGO_HOME/bin (~/.cargo/bin). docs/registry.md: why this server, and what kiln's tests check with their own.",
        kiln_publish::serve::install_command()
    )
}

#[derive(Subcommand, Debug)]
pub enum CacheAction {
    /// Bytes per area of the cache.
    Size,
    /// Check every entry and download against its sha256; list what is damaged.
    Verify {
        /// Remove the damaged ones.
        #[arg(long)]
        repair: bool,
    },
    /// Remove what no checkout's last full dist used, and leftovers of interrupted runs.
    /// Only in a cache carrying kiln's marker (.kiln-owned): see `mark`.
    Gc,
    /// Say that this folder is kiln's cache: marks it (.kiln-owned) so that `gc`, `verify --repair`
    /// and dist's cleaning of interrupted runs' scratch may remove things from it. kiln marks a cache
    /// it creates or finds empty itself; this is for one an older kiln made. Refused for a folder
    /// holding anything kiln does not write at a cache's root.
    Mark,
}

#[derive(Subcommand, Debug)]
pub enum PinsAction {
    /// Check the pin file and print a summary.
    Check,
    /// Resolve [toolchain] into the exact package closure and rewrite its generated part.
    Update {
        /// Resolve only the cross host compilers ([toolchain.cross.<cpu>]) on top of the closure as it
        /// stands, which stays byte for byte (and with it the toolchain's identity and every cached job).
        #[arg(long)]
        cross_only: bool,
    },
    /// Print what scripts need from the pin file (bench/lib.sh reads it): each set's source crate,
    /// pinned inputs, targets and crate version; the global targets; the toolchain's compilers,
    /// ptxas wheel and sysroot identity.
    Show {
        /// As one JSON object on stdout (the only format).
        #[arg(long, required = true)]
        json: bool,
    },
}

/// The remote cache options of `dist` and `dist merge`.
#[derive(clap::Args, Debug, Default)]
pub struct Remote {
    /// Share compiled objects through the HTTP cache server at URL: a local miss is fetched from it
    /// (checked by sha256; a damaged object is a miss) and what is built here is stored on it.
    /// Default: $KILN_REMOTE_CACHE. Credentials: a netrc file ($KILN_REMOTE_CACHE_NETRC, else
    /// ~/.netrc) or $KILN_REMOTE_CACHE_TOKEN (a bearer token), never the URL. Time-out per request:
    /// $KILN_REMOTE_CACHE_TIMEOUT seconds (default 10); after one failure to reach it, it is not asked again.
    #[arg(long = "remote-cache", value_name = "URL")]
    pub url: Option<String>,
    /// Read from the remote cache, never write to it (pull requests). Also $KILN_REMOTE_CACHE_READ_ONLY=1.
    #[arg(long = "remote-cache-read-only")]
    pub read_only: bool,
}

#[derive(Subcommand, Debug)]
pub enum DistCommand {
    /// Assemble the parts that `dist --shard K/N` wrote into target/dist/, as a single-machine dist writes it.
    #[command(long_about = "Assemble the parts that `cargo xtask dist --shard K/N` wrote into target/dist/, \
        exactly as a single-machine dist writes it (manifest, HIP bundles, static library, crates).\n\n\
        Refuses, naming each, parts of different plans (pins, sources, targets, selection, job-costs.toml), \
        a shard given twice or missing, a job missing or in two parts, a file that is missing or not the \
        bytes its part.json names, and an artifact whose sha256 differs from artifacts.lock. Then every \
        compiled object is taken from the parts (nothing is compiled here) and the assembling steps run \
        on this machine. Nothing is written unless all of it succeeds.")]
    Merge(Merge),
}

#[derive(clap::Args, Debug)]
pub struct Merge {
    /// The part folders, one per shard (what `dist --shard K/N --out DIR` wrote).
    #[arg(value_name = "DIR", required = true)]
    pub parts: Vec<PathBuf>,
    /// Fail, and leave the dist folder untouched, unless every artifact matches the set's lock
    /// (artifacts.lock, artifacts.<set>.lock for the set the parts name); then read the written folder back (every file against the manifest, the crates against crates.json).
    #[arg(long)]
    pub locked: bool,
    /// Skip packaging the kernel-artifact crates.
    #[arg(long)]
    pub no_package: bool,
    /// Jobs to run at once (the assembling steps), at least 1 (default: the number of cores).
    #[arg(long, short = 'j', value_name = "N", value_parser = at_least_one)]
    pub jobs: Option<usize>,
    /// The main set's dist folder (relative to the repository root; another set's parts go to
    /// DIR-<set>); as for `dist --out`.
    #[arg(long, default_value = kiln_dist::DIST_DIR, value_name = "DIR")]
    pub out: PathBuf,
    /// Also print a line for each cache hit.
    #[arg(long, short)]
    pub verbose: bool,
    #[command(flatten)]
    pub remote: Remote,
}

#[derive(clap::Args, Debug)]
pub struct Dist {
    #[command(subcommand)]
    pub command: Option<DistCommand>,
    /// Only this kernel set (repeatable): candle, flash-attn, ...; default: every default set of pins.toml.
    /// With --shard, the one set the part is of (default: the main set).
    #[arg(long = "set", value_name = "NAME")]
    pub sets: Vec<String>,
    /// Only this module (repeatable): affine, binary, ..., or the static library `moe`.
    #[arg(long = "module", value_name = "NAME")]
    pub modules: Vec<String>,
    /// Only this target (repeatable): gfx1030, gfx90a, compute_80, sm_90, ...
    #[arg(long = "arch", value_name = "ARCH")]
    pub archs: Vec<String>,
    /// Fail, and leave target/dist untouched, unless every artifact matches artifacts.lock.
    #[arg(long, conflicts_with = "update_lock")]
    pub locked: bool,
    /// Write the built artifacts' hashes into artifacts.lock.
    #[arg(long)]
    pub update_lock: bool,
    /// Skip packaging the kernel-artifact crates (target/dist/crates/).
    #[arg(long)]
    pub no_package: bool,
    /// Compile jobs to run at once, at least 1 (default: the number of cores).
    #[arg(long, short = 'j', value_name = "N", value_parser = at_least_one)]
    pub jobs: Option<usize>,
    /// Where to put the dist folder (relative to the repository root; default target/dist, with
    /// --shard K/N target/dist-part-K-of-N). DIR must be new, empty, or a folder an earlier dist
    /// (or shard) wrote: kiln refuses to replace anything else.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
    /// Also print a line for each cache hit.
    #[arg(long, short)]
    pub verbose: bool,
    /// Build only the K-th of N parts of the plan (1 <= K <= N) of the main set or the one --set
    /// names, cut by the seconds in job-costs.toml so that every machine cuts it the same way, into a
    /// part folder for `dist merge` (default target/dist-part-K-of-N, target/dist-<set>-part-K-of-N).
    #[arg(long, value_name = "K/N", value_parser = parse_shard, conflicts_with_all = ["update_lock", "update_costs"])]
    pub shard: Option<kiln_dist::part::Spec>,
    /// Fail instead of compiling: every kernel and object must come from the local or remote cache
    /// (the static library's `ar`, the bundles and the crates may still be made here).
    #[arg(long)]
    pub no_compile: bool,
    /// Write the seconds each compile job took (as its cache entry recorded) into job-costs.toml,
    /// which --shard balances by.
    #[arg(long)]
    pub update_costs: bool,
    #[command(flatten)]
    pub remote: Remote,
}

fn parse_shard(s: &str) -> Result<kiln_dist::part::Spec, String> {
    s.parse()
}

#[derive(clap::Args, Debug)]
pub struct Verify {
    /// The dist folder to check.
    #[arg(long, default_value = kiln_dist::DIST_DIR, value_name = "DIR")]
    pub dist: std::path::PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct VerifyCrate {
    /// A `.crate` file, or NAME@VERSION to download from --registry (e.g. kiln-candle-kernels-sm90@0.11.1+kiln.1).
    #[arg(value_name = "CRATE")]
    pub krate: String,
    /// The registry NAME@VERSION comes from, as cargo names it (`[registries.NAME]`, CARGO_REGISTRIES_NAME_INDEX).
    #[arg(long, value_name = "NAME", default_value = "crates-io")]
    pub registry: String,
    /// Require the crate to be signed by this ed25519 public key (PEM): a statement of --attestation
    /// (default: attestation.intoto.jsonl beside a .crate file) signed by it must name the crate's sha256.
    #[arg(long, value_name = "KEY.pub")]
    pub trusted_key: Option<PathBuf>,
    /// The signed statements to check the crate against (what `cargo xtask sign` wrote).
    #[arg(long, value_name = "FILE")]
    pub attestation: Option<PathBuf>,
    /// Rebuild a crate of an opt-in kernel set (`default = false` in pins.toml, e.g. flash-attn: hours
    /// of nvcc). Without it such a crate is refused before anything is built. Which set is rebuilt
    /// is decided by the crate's name and version against this checkout's pins, never by its record.
    #[arg(long)]
    pub rebuild_opt_in_set: bool,
}

#[derive(clap::Args, Debug)]
pub struct TestMatrix {
    /// Run the tests from this nextest archive (`cargo nextest archive -p kiln-kernel-tests`) instead of building them.
    #[arg(long, value_name = "FILE", conflicts_with = "from_junit")]
    pub archive_file: Option<PathBuf>,
    /// Only this leg (repeatable): sm_90, gfx90a, ...
    #[arg(long = "arch", value_name = "ARCH")]
    pub archs: Vec<String>,
    /// Report the results of a run elsewhere instead of running (repeatable): sm_90=junit.xml.
    #[arg(long = "from-junit", value_name = "ARCH=FILE")]
    pub from_junit: Vec<String>,
    /// That run's `nextest list --message-format json` output, which knows its skipped tests (repeatable).
    #[arg(long = "list", value_name = "ARCH=FILE", requires = "from_junit")]
    pub lists: Vec<String>,
    /// KILN_DIST_DIR for the tests (default: theirs, target/dist).
    #[arg(long, value_name = "DIR")]
    pub dist: Option<PathBuf>,
    /// The cargo-nextest binary (default: cargo-nextest on PATH, then ~/.cargo/bin).
    #[arg(long, value_name = "PATH")]
    pub nextest: Option<PathBuf>,
    /// Where the report and each leg's JUnit go.
    #[arg(long, default_value = "target/test-matrix", value_name = "DIR")]
    pub out: PathBuf,
}

fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("0 jobs would run nothing; give 1 or more (leave -j out for one per core)".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e}: give a whole number of jobs, 1 or more")),
    }
}

// `cargo xtask container` (its about line is the `Task::Container` variant's).
#[derive(clap::Args, Debug)]
#[command(long_about = "Build kiln's container images from pins.toml [containers].\n\n\
    Without flags: regenerate containers/*/ (Containerfiles and package lists) and write the \
    builder image as an OCI layout in target/containers/kiln-builder.oci, without any container \
    engine: the pinned toolchain closure unpacked as the root filesystem, plus the builder's \
    packages and Rust, as one deterministic layer. Two builds give the same digest. Publish it with \
    `skopeo copy oci:target/containers/kiln-builder.oci:latest docker://REGISTRY/kiln-builder`.")]
pub struct Container {
    /// Re-resolve [containers] (on top of the pinned toolchain, which stays as it is) into
    /// pins.toml's generated part, then regenerate containers/*/.
    #[arg(long)]
    pub update: bool,
    /// Write containers/*/ (Containerfiles, package lists) from pins.toml.
    #[arg(long)]
    pub regenerate: bool,
    /// Write nothing; fail if containers/*/ differ from what pins.toml generates.
    #[arg(long, conflicts_with_all = ["update", "regenerate"])]
    pub check: bool,
    /// Write the builder's root filesystem as a tar (OUT/kiln-builder.rootfs.tar).
    #[arg(long)]
    pub rootfs: bool,
    /// Write the builder image as an OCI image layout (OUT/kiln-builder.oci).
    #[arg(long)]
    pub oci: bool,
    /// Where --rootfs and --oci write.
    #[arg(long, default_value = "target/containers", value_name = "OUT")]
    pub out: PathBuf,
}
