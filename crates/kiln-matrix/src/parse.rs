//! YAML nodes (with their positions) to the typed [`Matrix`]. Every check that
//! can name a place in the file does so; nothing is defaulted silently except
//! the per-leg fields documented in ci/matrix.yaml.

use std::path::Path;

use kiln_pins::{HipArch, Sm, Targets};
use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, ScanError, YamlData};

use crate::{Action, Actions, Arch, Backend, Build, Dist, Image, Leg, Matrix, MatrixError, RemoteCache, Status, Tests, BASE_LABELS, SCHEMA};

type Node<'a> = MarkedYaml<'a>;

/// Variables the generated job sets itself, or that the runner owns.
const RESERVED_ENV: &[&str] = &[
    crate::DIST_DIR_ENV,
    crate::TEST_ARCH_ENV,
    "KILN_IMAGE",
    "KILN_PARTITION",
    "KILN_CONTAINER",
    "KILN_TEST_FILTER",
    "KILN_RENDER_NODE",
    "KILN_CUDA_DEVICE",
    "HOME",
    "TMPDIR",
    "PATH",
];
const RESERVED_ENV_PREFIXES: &[&str] = &["GITHUB_", "RUNNER_", "ACTIONS_"];

const MAX_PARTITIONS: u32 = 16;
/// A full dist is about 115 compile jobs; past this a shard holds one or two.
const MAX_SHARDS: u32 = 64;
/// GitHub's own ceiling for a job on a GitHub-hosted runner; a GPU job that
/// needs longer is a job to split, not to wait on.
const MAX_TIMEOUT_MINUTES: u32 = 360;
const DEFAULT_PARTITIONS: u32 = 1;
const DEFAULT_TIMEOUT_MINUTES: u32 = 60;

struct Cx<'f> {
    file: &'f Path,
}

impl Cx<'_> {
    fn at(&self, node: &Node, message: impl Into<String>) -> MatrixError {
        self.at_marker(node.span.start, message)
    }

    fn at_marker(&self, m: saphyr::Marker, message: impl Into<String>) -> MatrixError {
        // saphyr's columns are 0-based; editors and compilers count from 1.
        MatrixError::new(self.file, m.line(), m.col() + 1, message)
    }
}

/// A mapping whose keys have been checked against the ones allowed.
struct Fields<'y, 'a> {
    /// The mapping node itself, for "missing key" errors.
    node: &'y Node<'a>,
    what: String,
    entries: Vec<(&'y str, &'y Node<'a>, &'y Node<'a>)>,
}

impl<'y, 'a> Fields<'y, 'a> {
    fn new(cx: &Cx, node: &'y Node<'a>, what: &str, allowed: &[&str]) -> Result<Fields<'y, 'a>, MatrixError> {
        let YamlData::Mapping(map) = &node.data else {
            return Err(cx.at(node, format!("{what} must be a mapping (`key: value` lines), not {}", kind(node))));
        };
        let mut entries = Vec::new();
        for (k, v) in map.iter() {
            let key = match &k.data {
                YamlData::Value(Scalar::String(s)) => s.as_ref(),
                _ => return Err(cx.at(k, format!("keys in {what} are names, not {}", kind(k)))),
            };
            if !allowed.contains(&key) {
                let mut e = cx.at(k, format!("unknown key `{key}` in {what}; known keys: {}", allowed.join(", ")));
                if let Some(near) = allowed.iter().find(|a| edit_distance(a, key) <= 2) {
                    e = e.help(format!("did you mean `{near}`?"));
                }
                return Err(e);
            }
            entries.push((key, k, v));
        }
        Ok(Fields { node, what: what.to_string(), entries })
    }

    fn get(&self, key: &str) -> Option<&'y Node<'a>> {
        self.entries.iter().find(|(k, _, _)| *k == key).map(|(_, _, v)| *v)
    }

    fn require(&self, cx: &Cx, key: &str) -> Result<&'y Node<'a>, MatrixError> {
        self.get(key).ok_or_else(|| cx.at(self.node, format!("{} has no `{key}`", self.what)))
    }
}

fn kind(node: &Node) -> &'static str {
    match &node.data {
        YamlData::Value(Scalar::Null) => "empty (null)",
        YamlData::Value(Scalar::Boolean(_)) => "a boolean",
        YamlData::Value(Scalar::Integer(_)) => "an integer",
        YamlData::Value(Scalar::FloatingPoint(_)) => "a number",
        YamlData::Value(Scalar::String(_)) => "a string",
        YamlData::Sequence(_) => "a list",
        YamlData::Mapping(_) => "a mapping",
        YamlData::Tagged(..) => "a tagged node",
        YamlData::Alias(_) => "an alias",
        YamlData::Representation(..) | YamlData::BadValue => "an unreadable value",
    }
}

fn string(cx: &Cx, node: &Node, what: &str) -> Result<String, MatrixError> {
    match &node.data {
        YamlData::Value(Scalar::String(s)) => Ok(s.to_string()),
        YamlData::Value(Scalar::FloatingPoint(_)) => Err(cx
            .at(node, format!("{what} must be a string, but YAML reads this as a number"))
            .help("quote it, e.g. \"1.90\", so that no digit is lost")),
        _ => Err(cx.at(node, format!("{what} must be a string, not {}", kind(node)))),
    }
}

fn int(cx: &Cx, node: &Node, what: &str, range: std::ops::RangeInclusive<u32>) -> Result<u32, MatrixError> {
    match &node.data {
        YamlData::Value(Scalar::Integer(n)) => match u32::try_from(*n) {
            Ok(v) if range.contains(&v) => Ok(v),
            _ => Err(cx.at(node, format!("{what} is {n}; it must be between {} and {}", range.start(), range.end()))),
        },
        _ => Err(cx.at(node, format!("{what} must be a whole number, not {}", kind(node)))),
    }
}

fn seq<'y, 'a>(cx: &Cx, node: &'y Node<'a>, what: &str) -> Result<&'y [Node<'a>], MatrixError> {
    match &node.data {
        YamlData::Sequence(items) => Ok(items),
        _ => Err(cx.at(node, format!("{what} must be a list, not {}", kind(node)))),
    }
}

/// Letters, digits, `.`, `_`, `-`: what runner labels, runner images and
/// versions are made of, and nothing YAML or a shell would read specially.
fn plain(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn is_version(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() == 3 && parts.iter().all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
}

pub(crate) fn parse(path: &Path, text: &str, pins_file: &Path, targets: &Targets) -> Result<Matrix, MatrixError> {
    let cx = Cx { file: path };
    let docs = MarkedYaml::load_from_str(text).map_err(|e: ScanError| {
        cx.at_marker(*e.marker(), format!("not valid YAML: {}", e.info())).help("fix the syntax at that place; `cargo xtask ci` re-reads the file")
    })?;
    let root = match docs.as_slice() {
        [root] => root,
        [] => {
            return Err(MatrixError::whole(path, "the runner matrix is empty")
                .help("see the comments in ci/matrix.yaml's history, or docs/runners.md, for its shape"))
        }
        [_, second, ..] => return Err(cx.at(second, "the runner matrix must be one YAML document, not several")),
    };

    let top = Fields::new(&cx, root, "the runner matrix", &["schema", "build", "dist", "actions", "images", "tests", "legs"])?;

    let schema = top.require(&cx, "schema")?;
    match &schema.data {
        YamlData::Value(Scalar::Integer(n)) if *n == SCHEMA => {}
        _ => return Err(cx.at(schema, format!("this kiln reads matrix schema {SCHEMA}")).help(format!("write `schema: {SCHEMA}`"))),
    }

    let build = build(&cx, top.require(&cx, "build")?)?;
    let dist = match top.get("dist") {
        Some(node) => dist(&cx, node, &build)?,
        None => Dist { shards: 1, runs_on: vec![build.runs_on.clone()], timeout_minutes: build.timeout_minutes, remote_cache: None },
    };
    let actions = actions(&cx, top.require(&cx, "actions")?)?;
    let tests = match top.get("tests") {
        Some(node) => tests(&cx, node)?,
        None => Tests::default(),
    };
    let images = match top.get("images") {
        Some(node) => images(&cx, node)?,
        None => Vec::new(),
    };

    let legs_node = top.require(&cx, "legs")?;
    let mut legs: Vec<Leg> = Vec::new();
    for node in seq(&cx, legs_node, "`legs`")? {
        let leg = leg(&cx, node, &images, pins_file, targets)?;
        if let Some(first) = legs.iter().find(|l| l.arch == leg.arch) {
            let arch_node = Fields::new(&cx, node, "a leg", LEG_KEYS)?.require(&cx, "arch")?;
            return Err(cx
                .at(arch_node, format!("a second leg for `{}`; the first is at line {}", leg.arch, first.line))
                .help("one leg per arch: merge the two (more partitions, extra labels) or remove one"));
        }
        legs.push(leg);
    }
    // A named image no leg runs in (a backend's default may go unused).
    for (key, _, key_node) in images.iter().filter(|(k, _, _)| k != "hip" && k != "cuda") {
        if !legs.iter().any(|l| l.image_key.as_deref() == Some(key.as_str())) {
            return Err(cx
                .at(key_node, format!("`images.{key}` is the image of no leg"))
                .help("remove it, or name it in a leg's `image` (a misspelt key lands here too)"));
        }
    }
    if legs.is_empty() {
        return Err(cx.at(legs_node, "`legs` is empty: the workflow would test nothing on a GPU"));
    }

    Ok(Matrix { file: path.to_path_buf(), build, dist, actions, tests, legs })
}

fn build(cx: &Cx, node: &Node) -> Result<Build, MatrixError> {
    let f = Fields::new(cx, node, "`build`", &["runs-on", "rust", "nextest", "timeout-minutes"])?;
    let runs_on_node = f.require(cx, "runs-on")?;
    let runs_on = string(cx, runs_on_node, "`build.runs-on`")?;
    if !plain(&runs_on) {
        return Err(cx.at(runs_on_node, format!("`{runs_on}` is not a runner label")));
    }
    let version = |key: &str| -> Result<String, MatrixError> {
        let node = f.require(cx, key)?;
        let v = string(cx, node, &format!("`build.{key}`"))?;
        if !is_version(&v) {
            return Err(cx
                .at(node, format!("`build.{key}` is `{v}`; it must be an exact version, x.y.z"))
                .help("pin exact versions: the GPU jobs run what this job built"));
        }
        Ok(v)
    };
    let rust = version("rust")?;
    let nextest = version("nextest")?;
    let timeout_minutes = int(cx, f.require(cx, "timeout-minutes")?, "`build.timeout-minutes`", 1..=MAX_TIMEOUT_MINUTES)?;
    Ok(Build { runs_on, rust, nextest, timeout_minutes })
}

fn dist(cx: &Cx, node: &Node, build: &Build) -> Result<Dist, MatrixError> {
    let f = Fields::new(cx, node, "`dist`", &["shards", "runs-on", "timeout-minutes", "remote-cache"])?;
    let shards = int(cx, f.require(cx, "shards")?, "`dist.shards`", 1..=MAX_SHARDS)?;
    let runs_on = match f.get("runs-on") {
        None => vec![build.runs_on.clone()],
        Some(n) => {
            let items: Vec<&Node> = match &n.data {
                YamlData::Sequence(items) => items.iter().collect(),
                _ => vec![n],
            };
            let mut labels = Vec::new();
            for l in items {
                let label = string(cx, l, "a `dist.runs-on` label")?;
                if !plain(&label) {
                    return Err(cx.at(l, format!("`{label}` is not a runner label (letters, digits, `.`, `_`, `-`)")));
                }
                if labels.contains(&label) {
                    return Err(cx.at(l, format!("label `{label}` is listed twice")));
                }
                if label == "kiln-gpu" || parse_arch_name(&label).is_some() {
                    return Err(cx
                        .at(l, format!("`{label}` is a GPU runner's label; the dist needs no GPU"))
                        .help("give CPU runners' labels: a GPU runner's time is for the legs"));
                }
                labels.push(label);
            }
            if labels.is_empty() {
                return Err(cx.at(n, "`dist.runs-on` is empty"));
            }
            labels
        }
    };
    let timeout_minutes = match f.get("timeout-minutes") {
        Some(n) => int(cx, n, "`dist.timeout-minutes`", 1..=MAX_TIMEOUT_MINUTES)?,
        None => build.timeout_minutes,
    };
    let remote_cache = match f.get("remote-cache") {
        None => None,
        Some(n) => {
            let r = Fields::new(cx, n, "`dist.remote-cache`", &["url-variable", "token-secret"])?;
            let name = |key: &str, node: &Node| -> Result<String, MatrixError> {
                let v = string(cx, node, &format!("`dist.remote-cache.{key}`"))?;
                let ok = v.starts_with(|c: char| c.is_ascii_uppercase() || c == '_')
                    && v.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                    && !v.starts_with("GITHUB_");
                if !ok {
                    return Err(cx
                        .at(node, format!("`{v}` is not a name for a repository variable or secret (A-Z, 0-9, _; not GITHUB_)"))
                        .help("name the setting that holds it; the value itself never goes in the repository"));
                }
                Ok(v)
            };
            let url_variable = name("url-variable", r.require(cx, "url-variable")?)?;
            let token_secret = r.get("token-secret").map(|n| name("token-secret", n)).transpose()?;
            Some(RemoteCache { url_variable, token_secret })
        }
    };
    Ok(Dist { shards, runs_on, timeout_minutes, remote_cache })
}

fn actions(cx: &Cx, node: &Node) -> Result<Actions, MatrixError> {
    let keys = ["checkout", "cache", "upload-artifact", "download-artifact", "attest-build-provenance"];
    let f = Fields::new(cx, node, "`actions`", &keys)?;
    let one = |key: &str| -> Result<Action, MatrixError> {
        let node = f.require(cx, key)?;
        let a = Fields::new(cx, node, &format!("`actions.{key}`"), &["uses", "tag"])?;
        let uses_node = a.require(cx, "uses")?;
        let uses = string(cx, uses_node, &format!("`actions.{key}.uses`"))?;
        let expected_repo = format!("actions/{key}");
        let (repo, sha) = uses.split_once('@').unwrap_or((&uses, ""));
        if repo != expected_repo {
            return Err(cx.at(uses_node, format!("`actions.{key}` must be `{expected_repo}`, not `{repo}`")));
        }
        if !is_hex(sha, 40) {
            return Err(cx
                .at(uses_node, format!("`{uses}` is not pinned to a full commit SHA"))
                .help(format!("write `{expected_repo}@<40 lowercase hex>` and the release in `tag:`; a tag can be moved, a SHA cannot")));
        }
        let tag_node = a.require(cx, "tag")?;
        let tag = string(cx, tag_node, &format!("`actions.{key}.tag`"))?;
        if !plain(&tag) {
            return Err(cx.at(tag_node, format!("`{tag}` is not a release tag (like v6.0.2)")));
        }
        Ok(Action { repo: repo.to_string(), sha: sha.to_string(), tag })
    };
    Ok(Actions {
        checkout: one("checkout")?,
        cache: one("cache")?,
        upload_artifact: one("upload-artifact")?,
        download_artifact: one("download-artifact")?,
        attest_build_provenance: one("attest-build-provenance")?,
    })
}

fn tests(cx: &Cx, node: &Node) -> Result<Tests, MatrixError> {
    let f = Fields::new(cx, node, "`tests`", &["filter"])?;
    let filter = match f.get("filter") {
        None => None,
        Some(n) if matches!(n.data, YamlData::Value(Scalar::Null)) => None,
        Some(n) => {
            let s = string(cx, n, "`tests.filter`")?;
            if s.trim().is_empty() || s.contains('\n') || s.contains("${{") {
                return Err(cx
                    .at(n, "`tests.filter` must be one nextest filterset on one line, with no `${{`")
                    .help("e.g. `package(kiln-kernel-tests)`; leave it out to run every test in the archive"));
            }
            Some(s)
        }
    };
    Ok(Tests { filter })
}

/// `images:`: `hip` and `cuda`, each the default of its backend's legs, and
/// any other name a leg's `image` may name (`image: rocm7`), so that an
/// image's digest is written once however many legs run in it.
type Images<'y, 'a> = Vec<(String, Image, &'y Node<'a>)>;

fn images<'y, 'a>(cx: &Cx, node: &'y Node<'a>) -> Result<Images<'y, 'a>, MatrixError> {
    let YamlData::Mapping(map) = &node.data else {
        return Err(cx.at(node, format!("`images` must be a mapping (`name: image@sha256:...` lines), not {}", kind(node))));
    };
    let mut out: Images = Vec::new();
    for (k, v) in map.iter() {
        let key = match &k.data {
            YamlData::Value(Scalar::String(s)) => s.to_string(),
            _ => return Err(cx.at(k, format!("keys in `images` are names, not {}", kind(k)))),
        };
        if !(plain(&key) && key.starts_with(|c: char| c.is_ascii_lowercase())) || key.contains('@') {
            return Err(cx.at(k, format!("`{key}` is not an image's name in `images` (lowercase letters, digits, `.`, `_`, `-`)")));
        }
        let image = image(cx, v, &format!("`images.{key}`"))?;
        out.push((key, image, k));
    }
    Ok(out)
}

fn image(cx: &Cx, node: &Node, what: &str) -> Result<Image, MatrixError> {
    let s = string(cx, node, what)?;
    let bad = || {
        cx.at(node, format!("{what} is `{s}`; it must be `name@sha256:<64 lowercase hex>`")).help(
            "pin runner images by digest (a tag can be moved under a running CI); \
             docs/runners.md says where the digest comes from",
        )
    };
    let (name, digest) = s.split_once("@sha256:").ok_or_else(bad)?;
    if !is_hex(digest, 64) {
        return Err(bad());
    }
    // A registry host may carry a port (`host:5000/x`); a tag after the last
    // `/` would be a second, movable name for the same pin.
    let last = name.rsplit('/').next().unwrap_or(name);
    let name_ok = name
        .split('/')
        .all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-' | ':')))
        && !last.contains(':');
    if !name_ok {
        return Err(bad());
    }
    Ok(Image { name: name.to_string(), digest: digest.to_string() })
}

const LEG_KEYS: &[&str] = &["arch", "backend", "status", "labels", "image", "partitions", "timeout-minutes", "env"];

fn leg(cx: &Cx, node: &Node, images: &Images, pins_file: &Path, targets: &Targets) -> Result<Leg, MatrixError> {
    let f = Fields::new(cx, node, "a leg", LEG_KEYS)?;

    let arch_node = f.require(cx, "arch")?;
    let arch = arch(cx, arch_node, pins_file, targets)?;
    let name = arch.name();

    let backend_node = f.require(cx, "backend")?;
    let backend = match string(cx, backend_node, "`backend`")?.as_str() {
        "hip" => Backend::Hip,
        "cuda" => Backend::Cuda,
        other => return Err(cx.at(backend_node, format!("unknown backend `{other}`; known: hip, cuda"))),
    };
    if backend != arch.backend() {
        return Err(cx
            .at(backend_node, format!("`{name}` is a {} arch, but this leg says backend `{backend}`", arch.backend()))
            .help(format!("write `backend: {}`", arch.backend())));
    }

    let status_node = f.require(cx, "status")?;
    let status = match string(cx, status_node, "`status`")?.as_str() {
        "active" => Status::Active,
        "awaiting-runner" => Status::AwaitingRunner,
        other => {
            return Err(cx
                .at(status_node, format!("unknown status `{other}`; known: active, awaiting-runner"))
                .help("`awaiting-runner` until a runner for this arch is registered (docs/runners.md)"))
        }
    };

    let mut labels = Vec::new();
    if let Some(n) = f.get("labels") {
        for l in seq(cx, n, "`labels`")? {
            let label = string(cx, l, "a label")?;
            if !plain(&label) {
                return Err(cx.at(l, format!("`{label}` is not a runner label (letters, digits, `.`, `_`, `-`)")));
            }
            if BASE_LABELS.contains(&label.as_str()) || label == name {
                return Err(cx
                    .at(l, format!("`{label}` is a label every `{name}` job already asks for"))
                    .help(format!("leave it out: runs-on is {}, {name} and then the labels listed here", BASE_LABELS.join(", "))));
            }
            if parse_arch_name(&label).is_some() {
                return Err(cx
                    .at(l, format!("`{label}` names another arch; a `{name}` job would wait for a runner that has both"))
                    .help("arch labels come from the leg's `arch`, one per runner (docs/runners.md)"));
            }
            if labels.contains(&label) {
                return Err(cx.at(l, format!("label `{label}` is listed twice")));
            }
            labels.push(label);
        }
    }

    let named = |key: &str| images.iter().find(|(k, _, _)| k == key).map(|(_, i, _)| i.clone());
    let (image, image_key) = match f.get("image") {
        Some(n) if matches!(&n.data, YamlData::Value(Scalar::String(s)) if !s.contains('@')) => {
            let key = string(cx, n, "`image`")?;
            let image = named(&key).ok_or_else(|| {
                let known: Vec<&str> = images.iter().map(|(k, _, _)| k.as_str()).collect();
                cx.at(n, format!("`image: {key}` names no entry of `images` (it has: {})", known.join(", ")))
                    .help("name an entry of `images`, or write the image itself as `name@sha256:<digest>`")
            })?;
            (image, Some(key))
        }
        Some(n) => (image(cx, n, "`image`")?, None),
        None => {
            let key = backend.to_string();
            let default = named(&key);
            let image = default.ok_or_else(|| {
                cx.at(node, format!("the `{name}` leg has no `image`, and `images.{backend}` is not set"))
                    .help(format!("set `images.{backend}` (the default for every {backend} leg) or this leg's `image`"))
            })?;
            (image, Some(key))
        }
    };
    if status == Status::Active && image.is_placeholder() {
        let at = f.get("image").unwrap_or(status_node);
        return Err(cx
            .at(at, format!("the `{name}` leg is active, but its image `{}` has the placeholder digest", image.name))
            .help("pin the published runner image's digest (docs/runners.md, \"Runner images\") before activating the leg"));
    }

    let partitions = match f.get("partitions") {
        Some(n) => int(cx, n, "`partitions`", 1..=MAX_PARTITIONS)?,
        None => DEFAULT_PARTITIONS,
    };
    let timeout_minutes = match f.get("timeout-minutes") {
        Some(n) => int(cx, n, "`timeout-minutes`", 1..=MAX_TIMEOUT_MINUTES)?,
        None => DEFAULT_TIMEOUT_MINUTES,
    };

    let mut env = Vec::new();
    if let Some(n) = f.get("env") {
        let e = env_fields(cx, n)?;
        for (key, key_node, value_node) in e.entries {
            let valid_name = key.starts_with(|c: char| c.is_ascii_uppercase() || c == '_')
                && key.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            if !valid_name {
                return Err(cx.at(key_node, format!("`{key}` is not an environment variable name (A-Z, 0-9, _)")));
            }
            if RESERVED_ENV.contains(&key) || RESERVED_ENV_PREFIXES.iter().any(|p| key.starts_with(p)) {
                return Err(cx
                    .at(key_node, format!("`{key}` is set by the generated job or by the runner, not by a leg"))
                    .help("docs/runners.md lists the variables every GPU job sets"));
            }
            let value = match &value_node.data {
                YamlData::Value(Scalar::String(s)) => s.to_string(),
                YamlData::Value(Scalar::Integer(i)) => i.to_string(),
                YamlData::Value(Scalar::Boolean(b)) => b.to_string(),
                _ => return Err(cx.at(value_node, format!("`{key}` must be a string, not {}", kind(value_node)))),
            };
            if value.contains('\n') || value.contains("${{") {
                return Err(cx.at(value_node, format!("`{key}` must be one line with no `${{{{`: it is passed to the container as is")));
            }
            env.push((key.to_string(), value));
        }
    }

    Ok(Leg { arch, status, labels, image, image_key, partitions, timeout_minutes, env, line: node.span.start.line() })
}

/// `env:` is the one mapping whose keys are free, so [`Fields::new`] (which
/// checks keys against a list) does not read it.
fn env_fields<'y, 'a>(cx: &Cx, node: &'y Node<'a>) -> Result<Fields<'y, 'a>, MatrixError> {
    let YamlData::Mapping(map) = &node.data else {
        return Err(cx.at(node, format!("`env` must be a mapping (`NAME: value` lines), not {}", kind(node))));
    };
    let mut entries = Vec::new();
    for (k, v) in map.iter() {
        match &k.data {
            YamlData::Value(Scalar::String(s)) => entries.push((s.as_ref(), k, v)),
            _ => return Err(cx.at(k, format!("keys in `env` are variable names, not {}", kind(k)))),
        }
    }
    Ok(Fields { node, what: "`env`".into(), entries })
}

fn parse_arch_name(s: &str) -> Option<Arch> {
    Arch::parse(s).ok()
}

fn arch(cx: &Cx, node: &Node, pins_file: &Path, targets: &Targets) -> Result<Arch, MatrixError> {
    let s = string(cx, node, "`arch`")?;
    let pins = pins_file.display();
    let arch = if s.starts_with("gfx") {
        Arch::Hip(HipArch::parse(&s).map_err(|e| cx.at(node, e))?)
    } else if s.starts_with("sm_") {
        Arch::Cuda(Sm::parse_prefixed(&s, "sm_").map_err(|e| cx.at(node, e))?)
    } else if s.starts_with("compute_") {
        return Err(cx
            .at(node, format!("`{s}` is a virtual (PTX) arch; a leg runs on a real GPU"))
            .help("name the GPU's compute capability as sm_XX"));
    } else {
        let known: Vec<String> =
            kiln_target::buildable_gfx().map(|g| g.name.to_string()).chain(kiln_target::CUDA.iter().map(|c| format!("sm_{}", c.sm))).collect();
        return Err(cx.at(node, format!("unknown arch `{s}`; known: {}", known.join(", "))));
    };
    let built = match &arch {
        Arch::Hip(a) => targets.hip.contains(a),
        Arch::Cuda(sm) => targets.cuda_sass.contains(sm),
    };
    if !built {
        let (key, list) = match &arch {
            Arch::Hip(_) => ("hip", targets.hip.iter().map(|a| a.as_str().to_string()).collect::<Vec<_>>()),
            Arch::Cuda(_) => ("cuda_sass", targets.cuda_sass.iter().map(|s| s.sass()).collect()),
        };
        return Err(cx
            .at(node, format!("`{s}` is not built: {pins} [targets] {key} = [{}]", list.join(", ")))
            .help(format!("add `{s}` to [targets] {key} in {pins} (then `cargo xtask dist`), or remove this leg")));
    }
    Ok(arch)
}

/// Levenshtein distance, for "did you mean" on misspelt keys.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}
