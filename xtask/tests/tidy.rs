//! docs/ARCHITECTURE.md's Architecture Invariants, each held by a test that
//! reads the workspace (rust-analyzer's tidy tests). Every checker is a
//! function of its input (cargo metadata, file texts) and has a test that
//! feeds it a synthetic violation, so each check is shown able to fail.

#[path = "tidy/lex.rs"]
mod lex;

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// `cargo metadata --no-deps` of the workspace.
fn metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo).args(["metadata", "--format-version", "1", "--no-deps", "--offline"]).current_dir(root()).output().unwrap();
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every `.rs` file under `dir`, as (path relative to the workspace, text).
fn rust_files(dir: &Path, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let rel = p.strip_prefix(root()).unwrap().to_string_lossy().into_owned();
            out.push((rel, fs::read_to_string(&p).unwrap()));
        }
    }
}

/// The non-test sources: `crates/*/src` and `xtask/src`.
fn sources() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut crates: Vec<_> = fs::read_dir(root().join("crates")).unwrap().map(|e| e.unwrap().path()).collect();
    crates.sort();
    for c in crates.iter().map(|c| c.join("src")).chain([root().join("xtask/src")]) {
        if c.is_dir() {
            rust_files(&c, &mut out);
        }
    }
    out
}

/// The non-test sources and the crate template's Rust (built on consumers' machines).
fn sources_and_template() -> Vec<(String, String)> {
    let mut out = sources();
    rust_files(&root().join("crates/kiln-package/template"), &mut out);
    out
}

fn assert_none(what: &str, violations: Vec<String>) {
    assert!(violations.is_empty(), "{what}:\n  {}", violations.join("\n  "));
}

// ---------------------------------------------------------------------------
// Crate dependencies.

/// The build side: what GPU machines never have.
const BUILD_SIDE: &[&str] = &["kiln-build", "kiln-toolchain", "kiln-dist"];

/// Crates whose dependencies are exactly bounded (normal and build dependencies).
const LEAVES: &[(&str, &[&str])] = &[
    ("kiln-target", &["serde"]),
    ("kiln-manifest", &["kiln-target", "serde", "serde_json", "sha2"]),
    ("kiln-fs", &["anyhow", "kiln-manifest", "sha2"]),
    ("kiln-http", &["base64", "sha2", "tempfile", "ureq"]),
];

/// A crate's dependencies: (name, kind: "normal" / "build" / "dev", optional).
type Deps = BTreeMap<String, Vec<(String, String, bool)>>;

/// The workspace crates' dependencies, out of `cargo metadata`.
fn workspace_deps(meta: &Value) -> Deps {
    let mut out = Deps::new();
    for p in meta["packages"].as_array().unwrap() {
        let deps = p["dependencies"].as_array().unwrap();
        let deps = deps
            .iter()
            .map(|d| (d["name"].as_str().unwrap().to_string(), d["kind"].as_str().unwrap_or("normal").to_string(), d["optional"] == true))
            .collect();
        out.insert(p["name"].as_str().unwrap().to_string(), deps);
    }
    out
}

/// The crate template's dependencies (`crates/kiln-package/template/<crate>/Cargo.toml.in`),
/// by template folder: the keys of its `[dependencies]`, `[build-dependencies]` and
/// `[target.*.dependencies]` tables. `{{...}}` lines are filled in by kiln-package's
/// generate/ with the set's own part crates.
fn template_deps(files: &[(String, String)]) -> Deps {
    let mut out = Deps::new();
    for (name, text) in files {
        let mut kind = None;
        let mut deps = Vec::new();
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                let table = line.trim_matches(['[', ']']);
                kind = match table.rsplit('.').next() {
                    Some("dependencies") => Some("normal"),
                    Some("build-dependencies") => Some("build"),
                    Some("dev-dependencies") => Some("dev"),
                    _ => None,
                };
            } else if let Some(kind) = kind.filter(|_| !line.is_empty() && !line.starts_with('#') && !line.starts_with("{{")) {
                let key = line.split(['=', '.']).next().unwrap().trim().trim_matches('"');
                deps.push((key.to_string(), kind.to_string(), line.contains("optional = true")));
            }
        }
        out.insert(name.clone(), deps);
    }
    out
}

/// Every workspace crate `from` reaches through normal and build dependencies
/// (its own dev-dependencies too, when `dev`: a test crate's tests run where it runs).
fn reach(deps: &Deps, from: &[(String, String, bool)], dev: bool) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut work: Vec<String> = from.iter().filter(|(_, k, _)| dev || k != "dev").map(|(n, _, _)| n.clone()).collect();
    while let Some(n) = work.pop() {
        if seen.insert(n.clone()) {
            for (d, k, _) in deps.get(&n).into_iter().flatten() {
                if k != "dev" {
                    work.push(d.clone());
                }
            }
        }
    }
    seen
}

/// The dependency rules, over the workspace's and the template's dependencies.
fn dependency_violations(ws: &Deps, template: &Deps) -> Vec<String> {
    let mut out = Vec::new();
    for (krate, allowed) in LEAVES {
        let Some(deps) = ws.get(*krate) else {
            out.push(format!("{krate}: not a workspace crate"));
            continue;
        };
        for (d, kind, _) in deps.iter().filter(|(_, k, _)| k != "dev") {
            if !allowed.contains(&d.as_str()) {
                out.push(format!("{krate} depends on {d} ({kind}); it may depend only on {}", allowed.join(", ")));
            }
        }
    }
    let runtime = ["kiln-loader", "kiln-kernel-tests"].map(|c| (c.to_string(), ws.get(c).cloned().unwrap_or_default()));
    let generated = template.iter().map(|(t, d)| (format!("template/{t}"), d.clone()));
    for (who, deps) in runtime.into_iter().chain(generated) {
        let reached = reach(ws, &deps, true);
        for bad in BUILD_SIDE.iter().filter(|b| reached.contains(**b)) {
            out.push(format!("{who} reaches the build side's {bad}"));
        }
        if who.starts_with("template/") && reached.contains("kiln-loader") {
            out.push(format!("{who} reaches kiln-loader: the loader adapts to the generated crates, not the reverse"));
        }
    }
    for (t, deps) in template {
        if let Some((_, _, optional)) = deps.iter().find(|(d, _, _)| d == "cudarc") {
            if !optional {
                out.push(format!("template/{t}: cudarc must stay optional (only for `From<ModulePtx> for cudarc::nvrtc::Ptx`)"));
            }
        }
    }
    out
}

fn template_files() -> Vec<(String, String)> {
    let dir = root().join("crates/kiln-package/template");
    let mut out: Vec<(String, String)> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("Cargo.toml.in").is_file())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), fs::read_to_string(p.join("Cargo.toml.in")).unwrap()))
        .collect();
    out.sort();
    out
}

/// Architecture Invariant: the shared leaves' dependencies, and nothing that
/// runs on a GPU machine reaching the build side.
#[test]
fn crate_dependencies_follow_the_architecture() {
    let template = template_deps(&template_files());
    assert!(template.get("main").is_some_and(|d| d.iter().any(|(n, _, _)| n == "kiln-manifest")), "the template's main crate was not read");
    assert_none("crate dependencies", dependency_violations(&workspace_deps(&metadata()), &template));
}

#[test]
fn the_dependency_check_catches_violations() {
    let meta = serde_json::json!({"packages": [
        {"name": "kiln-target", "dependencies": [{"name": "serde", "kind": null, "optional": false}, {"name": "anyhow", "kind": null, "optional": false}]},
        {"name": "kiln-manifest", "dependencies": [{"name": "kiln-target", "kind": null, "optional": false}, {"name": "tempfile", "kind": "dev", "optional": false}]},
        {"name": "kiln-fs", "dependencies": []},
        {"name": "kiln-http", "dependencies": []},
        {"name": "kiln-loader", "dependencies": [{"name": "kiln-manifest", "kind": null, "optional": false}]},
        {"name": "kiln-kernel-tests", "dependencies": [{"name": "kiln-helper", "kind": "dev", "optional": false}]},
        {"name": "kiln-helper", "dependencies": [{"name": "kiln-dist", "kind": null, "optional": false}]},
        {"name": "kiln-dist", "dependencies": []}
    ]});
    let template = template_deps(&[(
        "main".into(),
        "[package]\nname = \"x\"\n[dependencies]\nkiln-loader = \"1\"\n# kiln-build\n{{PART_DEPENDENCIES}}\n\
         [target.'cfg(unix)'.dependencies]\ncudarc = { version = \"0.19\" }\n[features]\nkiln-dist = []\n"
            .into(),
    )]);
    let v = dependency_violations(&workspace_deps(&meta), &template);
    let want = [
        "kiln-target depends on anyhow (normal)",
        "kiln-kernel-tests reaches the build side's kiln-dist",
        "template/main reaches kiln-loader",
        "template/main: cudarc must stay optional",
    ];
    for w in want {
        assert!(v.iter().any(|m| m.starts_with(w)), "{w} not reported in {v:#?}");
    }
    assert_eq!(v.len(), want.len(), "{v:#?}");
}

// ---------------------------------------------------------------------------
// Only kiln-pins parses the pin file.

/// Files outside kiln-pins that use the `toml` crate, and the TOML each reads.
const TOML_READERS: &[(&str, &str)] = &[
    ("crates/kiln-container/src/resolve.rs", "a Rust release channel file"),
    ("crates/kiln-dist/src/lock.rs", "artifacts.lock"),
    ("crates/kiln-dist/src/costs.rs", "job-costs.toml"),
    ("crates/kiln-dist/src/provenance.rs", "the source crate's Cargo.toml (its licence)"),
    ("crates/kiln-package/src/generate/text.rs", "a generated crate's Cargo.toml (its version)"),
    ("crates/kiln-package/src/generate/upstream.rs", "the source crate's Cargo.toml"),
    ("crates/kiln-publish/src/packaged.rs", "a packaged crate's Cargo.toml"),
    ("crates/kiln-publish/src/metadata.rs", "a packaged crate's Cargo.toml (the table packaged.rs parsed)"),
    ("crates/kiln-publish/src/registry.rs", "cargo's .cargo/config.toml and credentials.toml"),
];

/// A file outside kiln-pins that uses the `toml` crate (`toml::` or `use toml`
/// in code) must be listed in [`TOML_READERS`] and must not name the pin file
/// (the literal `"pins.toml"`); a listed file that no longer uses it is stale.
fn pin_parse_violations(files: &[(String, String)], readers: &[(&str, &str)]) -> Vec<String> {
    let mut out = Vec::new();
    let mut used = BTreeSet::new();
    for (path, text) in files.iter().filter(|(p, _)| !p.starts_with("crates/kiln-pins/")) {
        let src = lex::lex(text);
        if !(src.code.contains("toml::") || src.code.contains("use toml")) {
            continue;
        }
        used.insert(path.as_str());
        if let Some((line, _)) = src.strings.iter().find(|(_, s)| s == "pins.toml") {
            out.push(format!("{path}:{line}: uses the toml crate and names \"pins.toml\": only kiln-pins parses the pin file (take a `Pins`)"));
        } else if !readers.iter().any(|(p, _)| p == path) {
            out.push(format!("{path}: uses the toml crate; list it in tidy.rs TOML_READERS with the file it reads (never pins.toml)"));
        }
    }
    for (p, what) in readers.iter().filter(|(p, _)| !used.contains(p)) {
        out.push(format!("{p} ({what}) is listed in TOML_READERS but does not use the toml crate: remove it"));
    }
    out
}

/// Architecture Invariant: only kiln-pins parses `pins.toml`.
#[test]
fn only_kiln_pins_parses_the_pin_file() {
    assert_none("TOML parsed outside kiln-pins", pin_parse_violations(&sources(), TOML_READERS));
}

#[test]
fn the_pin_parse_check_catches_violations() {
    let files = [
        ("crates/kiln-dist/src/lock.rs".to_string(), "fn f(t: &str) -> toml::Table { toml::from_str(t).unwrap() }".to_string()),
        ("xtask/src/pins.rs".into(), "fn f() { let t: toml::Table = std::fs::read_to_string(\"pins.toml\").unwrap().parse().unwrap(); }".into()),
        ("crates/kiln-x/src/a.rs".into(), "use toml::Value;\n".into()),
        ("crates/kiln-y/src/b.rs".into(), "// toml::from_str(\"pins.toml\")\nfn ok() {}\n".into()),
        ("crates/kiln-pins/src/raw.rs".into(), "fn f() { toml::from_str::<T>(\"pins.toml\") }".into()),
    ];
    let v = pin_parse_violations(&files, &[("crates/kiln-dist/src/lock.rs", "artifacts.lock"), ("crates/gone.rs", "x")]);
    assert!(v[0].starts_with("xtask/src/pins.rs:1: uses the toml crate and names \"pins.toml\""), "{v:#?}");
    assert!(v[1].starts_with("crates/kiln-x/src/a.rs: uses the toml crate; list it"), "{v:#?}");
    assert!(v[2].starts_with("crates/gone.rs (x) is listed"), "{v:#?}");
    assert_eq!(v.len(), 3, "{v:#?}");
}

// ---------------------------------------------------------------------------
// GPU facts live only in kiln-target.

/// A string literal that starts with a GPU target's name (`"gfx90a"`,
/// `"sm_80"`, `"compute_89"`, `"gfx90a:xnack-"`: how a match arm or a table
/// names a target) is a GPU fact: outside kiln-target it is allowed only in
/// these files, each for the reason given. A name inside a message (`"expected
/// sm_90=FILE"`) is an example, not a fact. Tests (`tests/`, `#[cfg(test)]`
/// items) and comments are not scanned.
const GPU_NAMES_ALLOWED: &[(&str, &str)] = &[];

/// The target name `s` starts with: `gfx`, `sm_` or `compute_`, then a digit.
fn target_name(s: &str) -> Option<String> {
    let prefix = ["gfx", "sm_", "compute_"].into_iter().find(|p| s.starts_with(p))?;
    let rest = &s[prefix.len()..];
    if !rest.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let len = rest.find(|c: char| !c.is_ascii_alphanumeric()).unwrap_or(rest.len());
    Some(format!("{prefix}{}", &rest[..len]))
}

/// Every string literal outside kiln-target naming a GPU target, in a file not in `allowed`.
fn gpu_fact_violations(files: &[(String, String)], allowed: &[(&str, &str)]) -> Vec<String> {
    string_violations(files, "crates/kiln-target/", allowed, |s| target_name(s).map(|name| format!("names {name} (GPU facts live in kiln-target)")))
}

/// Every string literal of `files` (outside the crate at `owner`, and the
/// `allowed` files) that `check` objects to, as `path:line: why`.
fn string_violations(files: &[(String, String)], owner: &str, allowed: &[(&str, &str)], check: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files.iter().filter(|(p, _)| !p.starts_with(owner) && !allowed.iter().any(|(a, _)| a == p)) {
        for (line, s) in lex::lex(text).strings {
            if let Some(why) = check(&s) {
                out.push(format!("{path}:{line}: {why}"));
            }
        }
    }
    out
}

/// Architecture Invariant: GPU facts (which targets exist and what they are) live in kiln-target.
#[test]
fn gpu_facts_live_only_in_kiln_target() {
    assert_none("GPU targets named outside kiln-target", gpu_fact_violations(&sources_and_template(), GPU_NAMES_ALLOWED));
}

#[test]
fn the_gpu_fact_check_catches_violations() {
    let files = [
        ("crates/kiln-x/src/a.rs".to_string(), "fn wave(g: &str) -> u32 { match g { \"gfx1030\" | \"gfx90a\" => 32, _ => 64 } }".to_string()),
        ("crates/kiln-x/src/b.rs".into(), "const S: &[(&str, u32)] = &[(\"sm_80\", 1)]; // \"sm_90\"\nfn p(s: &str) { parse(s, \"sm_\"); msg(\"gfx{n}\"); bail!(\"expected sm_90=FILE\") }".into()),
        ("crates/kiln-target/src/lib.rs".into(), "const G: &str = \"gfx942\";".into()),
        ("crates/kiln-x/src/allowed.rs".into(), "const G: &str = \"compute_90\";".into()),
    ];
    let v = gpu_fact_violations(&files, &[("crates/kiln-x/src/allowed.rs", "a test fixture")]);
    assert_eq!(
        v,
        [
            "crates/kiln-x/src/a.rs:1: names gfx1030 (GPU facts live in kiln-target)",
            "crates/kiln-x/src/a.rs:1: names gfx90a (GPU facts live in kiln-target)",
            "crates/kiln-x/src/b.rs:1: names sm_80 (GPU facts live in kiln-target)"
        ]
    );
}

// ---------------------------------------------------------------------------
// The build side knows no kernel set.

/// `candle` (any case) in the code or strings of kiln-build's sources
/// (comments and `#[cfg(test)]` items aside): one violation per line.
fn kernel_set_violations(files: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files.iter().filter(|(p, _)| p.starts_with("crates/kiln-build/src/")) {
        let code = lex::lex(text).code;
        for (i, line) in code.lines().enumerate().filter(|(_, l)| l.to_ascii_lowercase().contains("candle")) {
            out.push(format!("{path}:{}: {} (the set's knowledge belongs in pins.toml)", i + 1, line.trim()));
        }
    }
    out
}

/// Architecture Invariant: kiln-build knows how to compile, not which kernels.
#[test]
fn the_build_side_names_no_kernel_set() {
    assert_none("kiln-build names candle", kernel_set_violations(&sources()));
}

#[test]
fn the_kernel_set_check_catches_violations() {
    let files = [
        (
            "crates/kiln-build/src/hip.rs".to_string(),
            "// candle's shims\npub const H: &str = \"candle_hip_compat.h\";\nconst E: &str = \"KILN_CANDLE_CRATE\";\n".to_string(),
        ),
        ("crates/kiln-build/src/ok.rs".into(), "//! candle-kernels, for example\n#[cfg(test)]\nmod tests { const T: &str = \"candle\"; }\n".into()),
        ("crates/kiln-dist/src/x.rs".into(), "const C: &str = \"candle\";".into()),
    ];
    let v = kernel_set_violations(&files);
    assert_eq!(v.len(), 2, "{v:#?}");
    assert!(v[0].starts_with("crates/kiln-build/src/hip.rs:2: pub const H") && v[1].starts_with("crates/kiln-build/src/hip.rs:3:"), "{v:#?}");
}

// ---------------------------------------------------------------------------
// xtask is the command line only.

/// The most code lines (not blank, not only a comment) an xtask module may
/// have: flags in, one library call per step, results printed. A module that
/// outgrows it is doing the pipeline's work, which belongs in a crate.
const XTASK_MODULE_BUDGET: usize = 100;

/// xtask modules exempt from the budget, each with its reason.
const XTASK_OVER_BUDGET: &[(&str, &str)] = &[("xtask/src/flags.rs", "clap's declarations of every command's flags, no logic")];

fn xtask_budget_violations(files: &[(String, String)], exempt: &[(&str, &str)], budget: usize) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files.iter().filter(|(p, _)| p.starts_with("xtask/src/") && !exempt.iter().any(|(e, _)| e == p)) {
        let n = lex::lex(text).code.lines().filter(|l| !l.trim().is_empty()).count();
        if n > budget {
            out.push(format!("{path}: {n} code lines, over xtask's {budget} per module: move the work into its crate"));
        }
    }
    out
}

/// Architecture Invariant: xtask is thin.
#[test]
fn xtask_modules_stay_thin() {
    assert_none("xtask modules over budget", xtask_budget_violations(&sources(), XTASK_OVER_BUDGET, XTASK_MODULE_BUDGET));
}

#[test]
fn the_xtask_budget_check_catches_violations() {
    let long = format!("//! A command.\n\n{}", "fn f() {}\n// note\n\n".repeat(3));
    let files = [("xtask/src/a.rs".to_string(), long.clone()), ("xtask/src/flags.rs".into(), long.clone()), ("crates/kiln-x/src/b.rs".into(), long)];
    assert_eq!(
        xtask_budget_violations(&files, &[("xtask/src/flags.rs", "declarations")], 2),
        ["xtask/src/a.rs: 3 code lines, over xtask's 2 per module: move the work into its crate"]
    );
    assert!(xtask_budget_violations(&files, &[], 3).is_empty());
}

// ---------------------------------------------------------------------------
// One sha256 hex encoder.

/// Files that hex-encode a digest by hand, each with its reason.
const HEX_BY_HAND: &[(&str, &str)] = &[(
    "crates/kiln-package/template/link/build.rs",
    "a link crate's build script checks its payload with sha2 alone: kiln-manifest is no build-dependency of it",
)];

/// A format string that is one byte in hex (`"{b:02x}"`, `"{:02x}"`): how a
/// digest is hex-encoded by hand. Only kiln-manifest's `hex` may do it, and the files in `allowed`.
fn hex_encoder_violations(files: &[(String, String)], allowed: &[(&str, &str)]) -> Vec<String> {
    string_violations(files, "crates/kiln-manifest/", allowed, |s| {
        (s.starts_with('{') && s.ends_with(":02x}") && s.matches('{').count() == 1)
            .then(|| "hex-encodes bytes by hand; call kiln_manifest::hex / sha256_hex".to_string())
    })
}

/// Architecture Invariant: a sha256 is only ever written by kiln_manifest's `sha256_hex`/`hex`.
#[test]
fn digests_are_hex_encoded_in_one_place() {
    assert_none("hand-written hex encoders", hex_encoder_violations(&sources_and_template(), HEX_BY_HAND));
}

#[test]
fn the_hex_encoder_check_catches_violations() {
    let files = [
        ("crates/kiln-x/src/a.rs".to_string(), "fn h(d: &[u8]) -> String { d.iter().map(|b| format!(\"{b:02x}\")).collect() }".to_string()),
        ("crates/kiln-x/src/b.rs".into(), "fn m(x: u8) -> String { format!(\"machine 0x{x:02x}\") }".into()),
        ("crates/kiln-manifest/src/lib.rs".into(), "fn hex(d: &[u8]) -> String { d.iter().map(|b| format!(\"{b:02x}\")).collect() }".into()),
        ("crates/kiln-y/build.rs".into(), "fn h(d: &[u8]) -> String { d.iter().map(|b| format!(\"{:02x}\", b)).collect() }".into()),
    ];
    assert_eq!(
        hex_encoder_violations(&files, &[("crates/kiln-y/build.rs", "no kiln-manifest there")]),
        ["crates/kiln-x/src/a.rs:1: hex-encodes bytes by hand; call kiln_manifest::hex / sha256_hex"]
    );
}

// ---------------------------------------------------------------------------
// What every consumer compiles reads without serde's derived readers.

/// The sources every consumer of kiln's crates compiles (packaged beside every set's crates).
const CONSUMER_COMPILED: &[&str] = &["crates/kiln-manifest/src/", "crates/kiln-target/src/", "crates/kiln-package/template/"];

/// `Deserialize` named, or serde_json's generic `from_*` called, outside tests
/// in [`CONSUMER_COMPILED`]: a derived reader is monomorphized into each crate that reads, so it is compiled in
/// every consumer's release build (docs/benchmarks.md, "kiln's crates in a
/// consumer's build"). kiln-manifest's `read.rs` is the one reader.
fn derived_reader_violations(files: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files.iter().filter(|(p, _)| CONSUMER_COMPILED.iter().any(|c| p.starts_with(c))) {
        let code = lex::lex(text).code;
        let mut at: Vec<usize> = ["Deserialize", "serde_json::from_"].iter().flat_map(|n| code.match_indices(n).map(|(at, _)| at)).collect();
        at.sort_unstable();
        for at in at {
            let line = code[..at].matches('\n').count() + 1;
            out.push(format!("{path}:{line}: a serde reader in code every consumer compiles; read through kiln-manifest's read.rs"));
        }
    }
    out
}

/// Architecture Invariant: nothing a consumer compiles derives or names serde's `Deserialize`: the manifest has one
/// reader, kiln-manifest's `read.rs`, over serde_json's `Value` (its parser compiled once, in serde_json).
#[test]
fn consumers_compile_no_derived_reader() {
    assert_none("derived readers in consumer-compiled code", derived_reader_violations(&sources_and_template()));
}

/// What of [`CONSUMER_COMPILED`] a consumer's build compiles only where called: the libraries (the main crate, from
/// the template, is the consumer's leaf), and the main crate's API beyond the drop-in's (`kiln::`, `Module::hsaco()`
/// and the HIP bundle code behind it), which candle-core's CUDA backend never calls.
const CONSUMER_LIBRARIES: &[&str] = &[
    "crates/kiln-manifest/src/",
    "crates/kiln-target/src/",
    "crates/kiln-package/template/main/src/kiln.rs",
    "crates/kiln-package/template/main/src/hip.rs",
];

/// Every `fn` outside tests in [`CONSUMER_LIBRARIES`] without `#[inline]` among
/// its attributes. rustc compiles a non-generic function in its own crate's
/// release build whether or not anything calls it, but an `#[inline]` one only
/// in the crates that call it: so the consumer's build compiles only the part of
/// these crates that the main crate uses (their unit time fell from about 3.2 to
/// 0.6 s: docs/benchmarks.md, "Kiln's crates in a consumer's build").
fn not_inline_violations(files: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files.iter().filter(|(p, _)| CONSUMER_LIBRARIES.iter().any(|c| p.starts_with(c))) {
        let code = lex::lex(text).code;
        let bytes = code.as_bytes();
        for (at, _) in code.match_indices("fn ") {
            let word_start = at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
            let named = bytes.get(at + 3).is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_');
            if !word_start || !named {
                continue; // `fn(u32)` (a pointer type) or part of a longer word
            }
            // The item's attributes and qualifiers: back to the end of what came before it.
            let item_start = code[..at].rfind(['{', '}', ';']).map_or(0, |i| i + 1);
            if !code[item_start..at].contains("#[inline") {
                let line = code[..at].matches('\n').count() + 1;
                out.push(format!("{path}:{line}: a function without #[inline] in a crate every consumer compiles"));
            }
        }
    }
    out
}

/// Architecture Invariant: every function of kiln-manifest and kiln-target, and of the main crate's `kiln` and `hip`
/// modules, is `#[inline]`, so that a consumer's release build compiles only what is called of them.
#[test]
fn consumer_libraries_compile_only_what_is_called() {
    assert_none("functions without #[inline] in consumer libraries", not_inline_violations(&sources_and_template()));
}

#[test]
fn the_inline_check_catches_violations() {
    let files = [
        (
            "crates/kiln-manifest/src/lib.rs".to_string(),
            "/// Doc.\n#[inline]\npub fn a() {}\n#[must_use]\npub(crate) fn b(f: fn(u32)) {}\nimpl X {\n    #[inline]\n    #[must_use]\n    \
             pub const fn c() {}\n    fn d() {}\n}\n#[cfg(test)]\nmod tests { fn e() {} }\n"
                .to_string(),
        ),
        ("crates/kiln-target/src/compat.rs".into(), "// fn in a comment\nconst F: fn() = g;\nunsafe fn g() {}\n".into()),
        ("crates/kiln-dist/src/lib.rs".into(), "pub fn elsewhere() {}\n".into()),
        ("crates/kiln-package/template/main/src/hip.rs".into(), "impl crate::Module {\n    pub fn hsaco(&self) {}\n}\n".into()),
        ("crates/kiln-package/template/main/src/image.rs".into(), "pub fn used_by_candle_core() {}\n".into()),
    ];
    assert_eq!(
        not_inline_violations(&files),
        [
            "crates/kiln-manifest/src/lib.rs:5: a function without #[inline] in a crate every consumer compiles",
            "crates/kiln-manifest/src/lib.rs:10: a function without #[inline] in a crate every consumer compiles",
            "crates/kiln-target/src/compat.rs:3: a function without #[inline] in a crate every consumer compiles",
            "crates/kiln-package/template/main/src/hip.rs:2: a function without #[inline] in a crate every consumer compiles",
        ]
    );
}

#[test]
fn the_derived_reader_check_catches_violations() {
    let files = [
        ("crates/kiln-manifest/src/lib.rs".to_string(), "#[derive(Clone, Serialize, Deserialize)]\nstruct M;\n".to_string()),
        ("crates/kiln-target/src/lib.rs".into(), "// no Deserialize here\n#[cfg(test)]\nmod tests { use serde::Deserialize; }\n".into()),
        (
            "crates/kiln-package/template/main/src/kiln.rs".into(),
            "fn f() { let _: M = serde_json::from_str::<M>(\"\").unwrap(); }\nimpl<'de> serde::Deserialize<'de> for M {}\n".into(),
        ),
        ("crates/kiln-dist/src/set_manifest.rs".into(), "#[derive(Deserialize)]\nstruct Wrapper;\n".into()),
    ];
    assert_eq!(
        derived_reader_violations(&files),
        [
            "crates/kiln-manifest/src/lib.rs:1: a serde reader in code every consumer compiles; read through kiln-manifest's read.rs",
            "crates/kiln-package/template/main/src/kiln.rs:1: a serde reader in code every consumer compiles; read through kiln-manifest's read.rs",
            "crates/kiln-package/template/main/src/kiln.rs:2: a serde reader in code every consumer compiles; read through kiln-manifest's read.rs",
        ]
    );
}

// ---------------------------------------------------------------------------
// Compilers run only through kiln-toolchain's Runner.

/// The programs started (`Command::new`, xshell's `cmd!`) outside kiln-toolchain,
/// none of them a compiler.
const PROGRAMS: &[&str] = &["cargo", "dpkg-deb", "rocminfo"];

/// Files that start a program named by a variable, each with what it is.
const PROGRAMS_BY_VARIABLE: &[(&str, &str)] = &[
    ("crates/kiln-kernel-tests/src/matrix.rs", "the kernel tests' own test binaries"),
    (
        "crates/kiln-package/template/link/stubs.rs",
        "on a consumer's machine, the C compiler cargo gives the link crates' build script (`CC`, else `cc`), making the CUDA stand-in libraries",
    ),
    (
        "crates/kiln-publish/src/serve.rs",
        "ferro-cargo-registry-server, the registry others maintain that `registry serve` starts, found on PATH or in cargo's bin",
    ),
];

/// Every process started outside kiln-toolchain whose program is not in `programs`.
fn process_violations(files: &[(String, String)], programs: &[&str], by_variable: &[(&str, &str)]) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files.iter().filter(|(p, _)| !p.starts_with("crates/kiln-toolchain/")) {
        let code = lex::lex(text).code;
        for start in ["Command::new(", "cmd!("] {
            for (at, _) in code.match_indices(start) {
                let args = &code[at + start.len()..];
                let args = if start == "cmd!(" { args.split_once(',').map_or("", |(_, r)| r) } else { args };
                let args = args.trim_start();
                let program = args.strip_prefix('"').map(|s| s.split([' ', '"']).next().unwrap_or(""));
                let line = code[..at].matches('\n').count() + 1;
                match program {
                    Some(p) if programs.contains(&p) => {}
                    None if by_variable.iter().any(|(f, _)| f == path) => {}
                    Some(p) => out.push(format!("{path}:{line}: starts `{p}`; compilers run through kiln_toolchain::Runner")),
                    None => out.push(format!("{path}:{line}: starts a program named by a variable; list the file in PROGRAMS_BY_VARIABLE")),
                }
            }
        }
    }
    out
}

/// Architecture Invariant: compilers only ever run through `kiln-toolchain::Runner`
/// (the crate template's build scripts, which run on consumers' machines, included).
#[test]
fn compilers_run_only_through_the_runner() {
    let files = sources_and_template();
    assert!(files.iter().any(|(p, _)| p == "crates/kiln-package/template/link/stubs.rs"), "the template was not read");
    assert_none("processes started outside kiln-toolchain", process_violations(&files, PROGRAMS, PROGRAMS_BY_VARIABLE));
}

// ---------------------------------------------------------------------------
// HTTP goes through kiln-http.

/// Programs that speak HTTP, which kiln never starts (kiln-toolchain included).
const HTTP_PROGRAMS: &[&str] = &["curl", "wget"];
/// HTTP client crates, which only kiln-http depends on.
const HTTP_CRATES: &[&str] = &["ureq", "reqwest", "hyper", "curl", "isahc", "attohttpc", "minreq"];

/// Every start of an HTTP program, anywhere, and every crate but kiln-http that
/// depends on an HTTP client crate.
fn http_violations(files: &[(String, String)], deps: &Deps) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files {
        let code = lex::lex(text).code;
        for start in ["Command::new(", "cmd!("] {
            for (at, _) in code.match_indices(start) {
                let args = &code[at + start.len()..];
                let args = if start == "cmd!(" { args.split_once(',').map_or("", |(_, r)| r) } else { args };
                let program = args.trim_start().strip_prefix('"').map(|s| s.split([' ', '"']).next().unwrap_or(""));
                if let Some(p) = program.filter(|p| HTTP_PROGRAMS.contains(p)) {
                    let line = code[..at].matches('\n').count() + 1;
                    out.push(format!("{path}:{line}: starts `{p}`; HTTP goes through kiln-http's Client"));
                }
            }
        }
    }
    for (krate, list) in deps.iter().filter(|(k, _)| *k != "kiln-http") {
        for (d, kind, _) in list.iter().filter(|(d, _, _)| HTTP_CRATES.contains(&d.as_str())) {
            out.push(format!("{krate} depends on {d} ({kind}); HTTP goes through kiln-http"));
        }
    }
    out
}

/// Architecture Invariant: every download, upload and cache request goes
/// through kiln-http (no curl at run time: the builder image has none).
#[test]
fn http_goes_only_through_kiln_http() {
    assert_none("HTTP outside kiln-http", http_violations(&sources_and_template(), &workspace_deps(&metadata())));
}

#[test]
fn the_http_check_catches_violations() {
    let files = [
        ("crates/kiln-toolchain/src/fetch.rs".to_string(), "fn f(sh: &Shell) { cmd!(sh, \"curl --fail {url}\").run(); }".to_string()),
        ("crates/kiln-x/src/b.rs".into(), "fn g() { Command::new(\"wget\"); Command::new(\"cargo\"); } // Command::new(\"curl\")".into()),
    ];
    let deps = Deps::from([
        ("kiln-http".to_string(), vec![("ureq".to_string(), "normal".to_string(), false)]),
        ("kiln-publish".to_string(), vec![("reqwest".to_string(), "normal".to_string(), false)]),
    ]);
    assert_eq!(
        http_violations(&files, &deps),
        [
            "crates/kiln-toolchain/src/fetch.rs:1: starts `curl`; HTTP goes through kiln-http's Client",
            "crates/kiln-x/src/b.rs:1: starts `wget`; HTTP goes through kiln-http's Client",
            "kiln-publish depends on reqwest (normal); HTTP goes through kiln-http",
        ]
    );
}

#[test]
fn the_process_check_catches_violations() {
    let files = [
        ("crates/kiln-build/src/a.rs".to_string(), "fn f(sh: &Shell) { cmd!(sh, \"nvcc -ptx {x}\").run(); Command::new(\"cargo\"); }".to_string()),
        ("crates/kiln-x/src/b.rs".into(), "fn g(bin: &str) { std::process::Command::new(bin); } // Command::new(\"clang\")".into()),
        ("crates/kiln-toolchain/src/run.rs".into(), "fn r() { Command::new(\"bwrap\"); }".into()),
    ];
    assert_eq!(
        process_violations(&files, &["cargo"], &[]),
        [
            "crates/kiln-build/src/a.rs:1: starts `nvcc`; compilers run through kiln_toolchain::Runner",
            "crates/kiln-x/src/b.rs:1: starts a program named by a variable; list the file in PROGRAMS_BY_VARIABLE"
        ]
    );
}

// ---------------------------------------------------------------------------
// No upstream source in the repository.

/// Every tracked C, C++ or CUDA file (`.c .cc .cpp .cu .cuh .h .hpp`) not under
/// kiln's own `kernels/`.
fn native_source_violations(tracked: &[&str]) -> Vec<String> {
    let native = |p: &&&str| [".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp"].iter().any(|e| p.ends_with(e));
    tracked
        .iter()
        .filter(native)
        .filter(|p| !p.starts_with("kernels/"))
        .map(|p| format!("{p}: kernel sources outside kernels/ (upstream's are read from the verified crates)"))
        .collect()
}

/// Every tracked file, as (mode, path): `git ls-files -s`.
fn tracked() -> Vec<(String, String)> {
    let out = Command::new("git").args(["ls-files", "-s"]).current_dir(root()).output().unwrap();
    assert!(out.status.success(), "git ls-files -s: {}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<(String, String)> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let (meta, path) = line.split_once('\t').expect("git ls-files -s: `mode object stage\\tpath`");
            (meta.split(' ').next().unwrap_or_default().to_string(), path.to_string())
        })
        .collect();
    assert!(rows.iter().any(|(_, p)| p == "pins.toml"), "git ls-files -s did not list the repository");
    rows
}

/// Architecture Invariant: no upstream source is committed.
#[test]
fn the_only_kernel_sources_committed_are_kilns() {
    let tracked = tracked();
    let paths: Vec<&str> = tracked.iter().map(|(_, p)| p.as_str()).collect();
    assert_none("kernel sources outside kernels/", native_source_violations(&paths));
}

#[test]
fn the_kernel_source_check_catches_violations() {
    let v = native_source_violations(&["kernels/probe/probe.cu", "vendor/candle/src/affine.cu", "docs/x.md", "bench/a.h"]);
    assert_eq!(v.len(), 2, "{v:#?}");
    assert!(v[0].starts_with("vendor/candle/src/affine.cu:") && v[1].starts_with("bench/a.h:"), "{v:#?}");
}

// ---------------------------------------------------------------------------
// A script the docs tell people to run runs.

/// Every tracked file that starts with `#!` (a program, run by its path as the
/// docs write it: `bench/consumer-build.sh sm90`) but is not executable in git
/// (`git ls-files -s` mode 100644): on a fresh clone it fails with "Permission
/// denied". `tracked`: (mode, path, first line).
fn script_mode_violations(tracked: &[(&str, &str, &str)]) -> Vec<String> {
    tracked
        .iter()
        .filter(|(mode, _, first)| first.starts_with("#!") && *mode != "100755")
        .map(|(mode, path, _)| format!("{path}: starts with `#!` but its mode is {mode}: `git update-index --chmod=+x {path}`"))
        .collect()
}

/// Architecture Invariant: every tracked script with a `#!` line is executable.
#[test]
fn scripts_are_executable() {
    let mut rows = Vec::new();
    for (mode, path) in tracked() {
        if mode == "120000" || mode == "160000" {
            continue; // a symbolic link or a submodule: no first line of its own
        }
        let Ok(bytes) = std::fs::read(root().join(&path)) else { continue }; // deleted in the work tree
        let first = String::from_utf8_lossy(bytes.split(|b| *b == b'\n').next().unwrap_or_default()).into_owned();
        rows.push((mode, path, first));
    }
    let rows: Vec<(&str, &str, &str)> = rows.iter().map(|(m, p, f)| (m.as_str(), p.as_str(), f.as_str())).collect();
    assert_none("scripts that are not executable", script_mode_violations(&rows));
}

#[test]
fn the_script_mode_check_catches_violations() {
    let v = script_mode_violations(&[
        ("100644", "bench/a.sh", "#!/usr/bin/env bash"),
        ("100755", "bench/b.sh", "#!/usr/bin/env bash"),
        ("100644", "bench/lib.sh", "# sourced, not run"),
        ("100644", "bench/c.py", "#!/usr/bin/env python3"),
    ]);
    assert_eq!(
        v,
        [
            "bench/a.sh: starts with `#!` but its mode is 100644: `git update-index --chmod=+x bench/a.sh`",
            "bench/c.py: starts with `#!` but its mode is 100644: `git update-index --chmod=+x bench/c.py`"
        ]
    );
}

// ---------------------------------------------------------------------------
// Text from outside is printed escaped.

/// Expressions that hold text from outside kiln (a signed statement, a
/// registry's index, a crate's provenance record), by how they end, with
/// where the text comes from. Passed to a formatting macro, each must go
/// through `kiln_manifest::shown` (control characters escaped).
const EXTERNAL_TEXT: &[(&str, &str)] = &[
    (".keyid", "an attestation's keyid"),
    (".payload_type", "a DSSE envelope's payloadType"),
    (".vers", "a registry index's version"),
    (".cksum", "a registry index's checksum"),
    (".kiln_commit", "a crate record's kiln commit"),
    (".pins_sha256", "a crate record's pin-file hash"),
    ("claims.name", "a crate record's name"),
    ("claims.version", "a crate record's version"),
];

/// Files the check skips, with the reason.
const EXTERNAL_TEXT_EXEMPT: &[(&str, &str)] = &[(
    "crates/kiln-test-registry/src/lib.rs",
    "kiln's test registry (dev-dependencies only): it answers uploads, parsing `vers` as semver first, and names files with it",
)];

/// Macros that format text for a person.
const FORMATTING: &[&str] = &["format!(", "println!(", "eprintln!(", "print!(", "write!(", "writeln!(", "bail!(", "anyhow!(", "panic!("];

/// Every argument of a formatting macro in `files` that is an
/// [`EXTERNAL_TEXT`] expression given as it is (`e.vers`, not `shown(&e.vers)`).
fn external_text_violations(files: &[(String, String)], exempt: &[(&str, &str)]) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files.iter().filter(|(p, _)| !exempt.iter().any(|(e, _)| e == p)) {
        let code = lex::lex(text).code;
        let b = code.as_bytes();
        for (end, from) in EXTERNAL_TEXT {
            for (at, _) in code.match_indices(end) {
                let after = code[at + end.len()..].trim_start();
                if !(after.starts_with(',') || after.starts_with(')'))
                    || b.get(at + end.len()).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
                {
                    continue;
                }
                // The whole expression: a path of names and dots.
                let mut start = at;
                while start > 0 && (b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_' || b[start - 1] == b'.') {
                    start -= 1;
                }
                if !code[..start].trim_end().ends_with(',') {
                    continue;
                }
                // Inside a formatting macro's arguments: its `(` not yet closed.
                let call = FORMATTING.iter().filter_map(|m| code[..start].rfind(m).map(|c| c + m.len())).max();
                if call.is_some_and(|c| open_parens(&code[c..start]) >= 0) {
                    let line = code[..at].bytes().filter(|&c| c == b'\n').count() + 1;
                    out.push(format!(
                        "{path}:{line}: `{}` ({from}) printed as it came: wrap it in kiln_manifest::shown",
                        &code[start..at + end.len()]
                    ));
                }
            }
        }
    }
    out
}

/// Parentheses opened minus closed in `code`, string literals skipped.
fn open_parens(code: &str) -> i32 {
    let (mut depth, mut in_string, mut escaped) = (0, false, false);
    for c in code.chars() {
        match (in_string, c) {
            (true, '\\') if !escaped => {
                escaped = true;
                continue;
            }
            (true, '"') if !escaped => in_string = false,
            (false, '"') => in_string = true,
            (false, '(') => depth += 1,
            (false, ')') => depth -= 1,
            _ => {}
        }
        escaped = false;
    }
    depth
}

/// Text from outside (EXTERNAL_TEXT) is printed only through `kiln_manifest::shown`.
#[test]
fn external_text_is_printed_escaped() {
    assert_none("external text printed unescaped", external_text_violations(&sources(), EXTERNAL_TEXT_EXEMPT));
}

#[test]
fn the_external_text_check_catches_violations() {
    let files = [
        ("crates/kiln-x/src/a.rs".to_string(), "fn f(e: &E) -> String { format!(\"{} lists {}\", name, e.vers) }".to_string()),
        ("crates/kiln-x/src/b.rs".into(), "fn f(s: &Sig) { println!(\"keyid {}\", shown(&s.keyid)); let ok = s.keyid == x; }".into()),
        (
            "crates/kiln-x/src/c.rs".into(),
            "fn f() -> Result<()> {\n    bail!(\n        \"{} {}\",\n        claims.name,\n        claims.version\n    )\n}".into(),
        ),
        ("crates/kiln-x/src/d.rs".into(), "fn f() { same_version(&e.vers, v); g(a, e.vers); }".into()),
        ("crates/kiln-x/src/e.rs".into(), "#[cfg(test)]\nmod tests { fn t() { println!(\"{}\", x, e.keyid); } }".into()),
        ("crates/kiln-y/src/f.rs".into(), "fn f(e: &E) -> String { format!(\"{}\", e.vers) }".into()),
    ];
    assert_eq!(
        external_text_violations(&files, &[("crates/kiln-y/src/f.rs", "exempt")]),
        [
            "crates/kiln-x/src/a.rs:1: `e.vers` (a registry index's version) printed as it came: wrap it in kiln_manifest::shown",
            "crates/kiln-x/src/c.rs:4: `claims.name` (a crate record's name) printed as it came: wrap it in kiln_manifest::shown",
            "crates/kiln-x/src/c.rs:5: `claims.version` (a crate record's version) printed as it came: wrap it in kiln_manifest::shown",
        ]
    );
}

// ---------------------------------------------------------------------------
// One owner per rule (issue 35): each fact or check is written once, and
// everything else calls it.

/// Words that name a CUDA level in an operand (`level`, `device_sm`, `ptx_level`).
const CUDA_LEVEL_WORDS: &[&str] = &["sm", "level", "ptx", "sass", "major", "minor", "capability"];

/// Files outside kiln-target that compare CUDA levels for another reason than
/// which code runs on which device, each with that reason.
const CUDA_LEVELS_COMPARED: &[(&str, &str)] =
    &[("crates/kiln-matrix/src/workflow.rs", "writes an sm as `nvidia-smi --query-gpu=compute_cap` prints it (`9.0`): a format, not a rule")];

/// The operand of a comparison beside `side` (`left`: the end of the text
/// before the operator; else the start of the text after it): a path of
/// names, dots and digits.
fn operand(side: &str, left: bool) -> &str {
    let is = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
    if left {
        let s = side.trim_end();
        &s[s.trim_end_matches(is).len()..]
    } else {
        let s = side.trim_start();
        &s[..s.len() - s.trim_start_matches(is).len()]
    }
}

/// Whether `operand` names a CUDA level: one of its words is a [`CUDA_LEVEL_WORDS`].
fn names_a_cuda_level(operand: &str) -> bool {
    operand.split(|c: char| !c.is_ascii_alphanumeric()).any(|w| CUDA_LEVEL_WORDS.contains(&w.to_ascii_lowercase().as_str()))
}

/// Every comparison of two CUDA levels (`level > device_level`), or a level's
/// major (`sm / 10`), in code outside kiln-target and the `allowed` files:
/// which SASS runs or which PTX JITs where is kiln-target's `compat` rule.
fn cuda_compat_violations(files: &[(String, String)], allowed: &[(&str, &str)]) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files.iter().filter(|(p, _)| !p.starts_with("crates/kiln-target/") && !allowed.iter().any(|(a, _)| a == p)) {
        let code = lex::lex(text).code;
        for (i, line) in code.lines().enumerate() {
            for op in [" <= ", " >= ", " < ", " > ", " / 10"] {
                for (at, _) in line.match_indices(op) {
                    let (a, b) = (operand(&line[..at], true), operand(&line[at + op.len()..], false));
                    let both = names_a_cuda_level(a) && (op == " / 10" || names_a_cuda_level(b));
                    if both {
                        out.push(format!(
                            "{path}:{}: `{a}{op}{b}` decides CUDA compatibility; call kiln_target::compat (sass_runs_on, ptx_jits_on, cuda_choice)",
                            i + 1
                        ));
                    }
                }
            }
        }
    }
    out
}

/// Architecture Invariant: the CUDA compatibility rule is decided only in kiln-target's `compat.rs`.
#[test]
fn cuda_compatibility_is_decided_only_in_kiln_target() {
    assert_none("CUDA compatibility decided outside kiln-target", cuda_compat_violations(&sources_and_template(), CUDA_LEVELS_COMPARED));
}

#[test]
fn the_cuda_compat_check_catches_violations() {
    let files = [
        ("crates/kiln-loader/src/verify.rs".to_string(), "fn f() {\n    if level > device_level {\n        bail()\n    }\n}".to_string()),
        ("crates/kiln-x/src/a.rs".into(), "fn g(s: u32, d: u32) -> bool { s.sm / 10 == d.sm / 10 && l.0 <= x.0 }".into()),
        ("crates/kiln-x/src/ok.rs".into(), "fn h() -> bool { kiln_target::ptx_jits_on(level, device_level) && n < max }".into()),
        ("crates/kiln-target/src/compat.rs".into(), "fn ptx_jits_on(ptx_level: u32, device_sm: u32) -> bool { ptx_level <= device_sm }".into()),
        ("crates/kiln-y/src/allowed.rs".into(), "fn k() -> bool { sm >= from_level }".into()),
    ];
    let v = cuda_compat_violations(&files, &[("crates/kiln-y/src/allowed.rs", "a build choice")]);
    assert_eq!(
        v,
        [
            "crates/kiln-loader/src/verify.rs:2: `level > device_level` decides CUDA compatibility; call kiln_target::compat (sass_runs_on, ptx_jits_on, cuda_choice)",
            "crates/kiln-x/src/a.rs:1: `s.sm / 10` decides CUDA compatibility; call kiln_target::compat (sass_runs_on, ptx_jits_on, cuda_choice)",
            "crates/kiln-x/src/a.rs:1: `d.sm / 10` decides CUDA compatibility; call kiln_target::compat (sass_runs_on, ptx_jits_on, cuda_choice)",
        ]
    );
}

/// Files outside kiln-manifest that take paths apart by their components for
/// another reason than "is it inside its folder", each with that reason.
const PATH_COMPONENTS_ALLOWED: &[(&str, &str)] = &[(
    "crates/kiln-build/src/scan.rs",
    "the include scanner resolves `#include \"../x.h\"` as the compiler does (a `..` climbs), to hash what a compile reads",
)];

/// Every hand-written "is this path inside its folder" outside kiln-manifest:
/// a component compared with `".."` or `"."` (`c == ".."`, `dir != "."`), a
/// `".."` anywhere, or `Component::ParentDir`/`CurDir`. The one check is
/// `kiln_manifest::path_inside`.
fn path_check_violations(files: &[(String, String)], allowed: &[(&str, &str)]) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files.iter().filter(|(p, _)| !p.starts_with("crates/kiln-manifest/") && !allowed.iter().any(|(a, _)| a == p)) {
        let code = lex::lex(text).code;
        for (i, line) in code.lines().enumerate() {
            let compared = ["== \".\"", "!= \".\"", "\"..\""].iter().find(|c| line.contains(**c));
            let matched = ["Component::ParentDir", "Component::CurDir"].iter().find(|c| line.contains(**c));
            if let Some(c) = compared.or(matched) {
                out.push(format!("{path}:{}: `{c}`: a path checked by hand; call kiln_manifest::path_inside", i + 1));
            }
        }
    }
    out
}

/// Architecture Invariant: "is this path inside its folder" is answered only by kiln-manifest.
#[test]
fn path_checks_live_in_kiln_manifest() {
    assert_none("path checks outside kiln-manifest", path_check_violations(&sources_and_template(), PATH_COMPONENTS_ALLOWED));
}

#[test]
fn the_path_check_catches_violations() {
    let files = [
        (
            "crates/kiln-publish/src/server.rs".to_string(),
            "fn f(rel: &str) -> bool { rel.split('/').any(|c| c.is_empty() || c == \".\" || c == \"..\") }".to_string(),
        ),
        ("crates/kiln-x/src/a.rs".into(), "fn g(p: &Path) -> bool { p.components().any(|c| c == Component::ParentDir) }".into()),
        (
            "crates/kiln-x/src/ok.rs".into(),
            "fn h(p: &str) -> bool { kiln_manifest::path_inside(root, p).is_ok() && Path::new(\".\").exists() } // \"..\"".into(),
        ),
        ("crates/kiln-manifest/src/lib.rs".into(), "fn path_inside(p: &str) -> bool { p != \"..\" }".into()),
        ("crates/kiln-build/src/scan.rs".into(), "fn n(c: Component) { if c == Component::ParentDir {} }".into()),
    ];
    assert_eq!(
        path_check_violations(&files, &[("crates/kiln-build/src/scan.rs", "resolves includes")]),
        [
            "crates/kiln-publish/src/server.rs:1: `== \".\"`: a path checked by hand; call kiln_manifest::path_inside",
            "crates/kiln-x/src/a.rs:1: `Component::ParentDir`: a path checked by hand; call kiln_manifest::path_inside",
        ]
    );
}

/// Files outside kiln-package's `crate_file.rs` that open tar archives, each
/// with what they read (never a `.crate`).
const TAR_READERS: &[(&str, &str)] = &[("crates/kiln-container/src/rootfs.rs", "Debian packages' data and Rust's release tarballs")];

/// Every tar archive opened (`Archive::new`) outside kiln-package's one
/// bounded `.crate` reader and the `allowed` files.
fn crate_reader_violations(files: &[(String, String)], allowed: &[(&str, &str)]) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files.iter().filter(|(p, _)| p != "crates/kiln-package/src/crate_file.rs" && !allowed.iter().any(|(a, _)| a == p)) {
        let code = lex::lex(text).code;
        for (at, _) in code.match_indices("Archive::new(") {
            let line = code[..at].matches('\n').count() + 1;
            out.push(format!("{path}:{line}: opens a tar archive; a .crate is read only by kiln_package::crate_file"));
        }
    }
    out
}

/// Architecture Invariant: `.crate` files are read only through `kiln_package::crate_file`.
#[test]
fn crates_are_read_only_by_crate_file() {
    assert_none(".crate read outside kiln_package::crate_file", crate_reader_violations(&sources_and_template(), TAR_READERS));
}

#[test]
fn the_crate_reader_check_catches_violations() {
    let files = [
        ("crates/kiln-dist/src/verify_crate.rs".to_string(), "fn f(b: &[u8]) { let a = tar::Archive::new(GzDecoder::new(b)); }".to_string()),
        ("crates/kiln-package/src/crate_file.rs".into(), "fn r(b: &[u8]) { tar::Archive::new(GzDecoder::new(b)); }".into()),
        ("crates/kiln-y/src/debs.rs".into(), "fn d(f: File) { tar::Archive::new(f); }".into()),
        ("crates/kiln-x/src/ok.rs".into(), "fn g(b: &[u8]) { kiln_package::crate_file::files(b, \"x\"); } // Archive::new(".into()),
    ];
    assert_eq!(
        crate_reader_violations(&files, &[("crates/kiln-y/src/debs.rs", "Debian packages")]),
        ["crates/kiln-dist/src/verify_crate.rs:1: opens a tar archive; a .crate is read only by kiln_package::crate_file"]
    );
}

/// The files that may send the remote cache's requests: its client and the tier it is.
const REMOTE_REQUESTERS: &[&str] = &["crates/kiln-toolchain/src/remote.rs", "crates/kiln-toolchain/src/http_tier.rs"];

/// The cache's files, which keep no process-wide state (a value is threaded instead).
const CACHE_FILES: &[&str] = &[
    "crates/kiln-build/src/store.rs",
    "crates/kiln-toolchain/src/tiers.rs",
    "crates/kiln-toolchain/src/http_tier.rs",
    "crates/kiln-toolchain/src/remote.rs",
];

/// Every request to the remote cache sent outside [`REMOTE_REQUESTERS`] (so
/// not through `tiers::Tiered`, the one read-through that checks what a tier
/// sent, writes back and keeps read-only mode), and every `static` in [`CACHE_FILES`].
fn cache_tier_violations(files: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files {
        let code = lex::lex(text).code;
        let line = |at: usize| code[..at].matches('\n').count() + 1;
        if !REMOTE_REQUESTERS.contains(&path.as_str()) {
            for call in [".get_cas(", ".get_pinned(", ".put_cas("] {
                for (at, _) in code.match_indices(call) {
                    out.push(format!("{path}:{}: `{call}` asks the remote cache directly; go through kiln_toolchain::tiers::Tiered", line(at)));
                }
            }
        }
        if CACHE_FILES.contains(&path.as_str()) {
            for (at, _) in code.match_indices("static ") {
                if at == 0 || !(code.as_bytes()[at - 1].is_ascii_alphanumeric() || code.as_bytes()[at - 1] == b'\'') {
                    out.push(format!("{path}:{}: a `static` in the cache: thread a value instead", line(at)));
                }
            }
        }
    }
    out
}

/// Architecture Invariant: the cache is one read-through over tiers (kiln-toolchain `tiers.rs`), which alone talks to
/// the remote cache's client; the cache's files keep no global state.
#[test]
fn the_cache_is_read_only_through_its_tiers() {
    assert_none("cache outside its tiers", cache_tier_violations(&sources()));
}

#[test]
fn the_cache_tier_check_catches_violations() {
    let files = [
        (
            "crates/kiln-build/src/store.rs".to_string(),
            "static TOUCHED: Mutex<Vec<String>> = Mutex::new(Vec::new());\nfn s(t: &'static str) {}".to_string(),
        ),
        ("crates/kiln-toolchain/src/fetch.rs".into(), "fn f(r: &Remote) {\n    r.get_pinned(sha, None, &dest);\n}".into()),
        ("crates/kiln-toolchain/src/http_tier.rs".into(), "fn g(r: &Remote) { r.get_cas(sha, None, &d); r.put_cas(sha, &f); }".into()),
        ("crates/kiln-dist/src/x.rs".into(), "// r.put_cas(sha, &f)\nstatic N: u8 = 1;".into()),
    ];
    assert_eq!(
        cache_tier_violations(&files),
        [
            "crates/kiln-build/src/store.rs:1: a `static` in the cache: thread a value instead",
            "crates/kiln-toolchain/src/fetch.rs:2: `.get_pinned(` asks the remote cache directly; go through kiln_toolchain::tiers::Tiered",
        ]
    );
}

/// Files outside `tiers.rs` that hash a file in a cache's blob area, each with why it is not the blob check.
const BLOB_HASHERS: &[(&str, &str)] = &[(
    "crates/kiln-toolchain/src/fetch.rs",
    "`download_verified` checks a download against its pin and `verify_file` a file against the hash its caller gives",
)];

/// Every check of a cache entry or blob written outside kiln-toolchain's
/// `tiers.rs` (whose `check_entry` and `check_blob` are the only ones): an
/// entry's output told apart from its bookkeeping (`BOOKKEEPING` outside a
/// `use`), its recorded sha256 read (`SHA256_FILE` on a line that reads),
/// or a file hashed (`sha256_file(`) by a source that names a blob area of
/// the cache (`cache::DEBS`, `.debs()`, `DEB_SUFFIX`, `"bundles"`).
fn cache_check_violations(files: &[(String, String)], allowed: &[(&str, &str)]) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files.iter().filter(|(p, _)| p != "crates/kiln-toolchain/src/tiers.rs") {
        let lexed = lex::lex(text);
        let code = &lexed.code;
        let line = |at: usize| code[..at].matches('\n').count() + 1;
        // A name imported (`use`, `pub use`) is not a check; its use is.
        let imported = |at: usize| {
            let statement = code[..at].rsplit(';').next().unwrap_or_default().trim_start();
            ["use ", "pub use ", "pub(crate) use "].iter().any(|u| statement.starts_with(u))
        };
        for (at, _) in code.match_indices("BOOKKEEPING").filter(|(at, _)| !imported(*at)) {
            out.push(format!("{path}:{}: `BOOKKEEPING`: an entry's output picked by hand; call kiln_toolchain::tiers::check_entry", line(at)));
        }
        let blob_area =
            ["cache::DEBS", ".debs()", "DEB_SUFFIX"].iter().any(|n| code.contains(n)) || lexed.strings.iter().any(|(_, s)| s == "bundles");
        for (i, l) in code.lines().enumerate() {
            if l.contains("SHA256_FILE") && ["read_to_string(", "fs::read("].iter().any(|r| l.contains(r)) {
                out.push(format!("{path}:{}: `SHA256_FILE` read: an entry checked by hand; call kiln_toolchain::tiers::check_entry", i + 1));
            }
            if blob_area && l.contains("sha256_file(") && !allowed.iter().any(|(a, _)| a == path) {
                out.push(format!(
                    "{path}:{}: `sha256_file(` beside a blob area of the cache: a blob checked by hand; call kiln_toolchain::tiers::check_blob",
                    i + 1
                ));
            }
        }
    }
    out.sort_by_key(|v| {
        let mut parts = v.splitn(3, ':');
        (parts.next().map(str::to_string), parts.next().and_then(|n| n.parse::<usize>().ok()))
    });
    out
}

/// Architecture Invariant: whether a cache entry or blob is whole is decided only by kiln-toolchain's
/// `tiers::check_entry` and `tiers::check_blob`, which the top tier and `cache verify` both call.
#[test]
fn cache_entries_and_blobs_are_checked_only_in_tiers() {
    assert_none("cache checks outside tiers.rs", cache_check_violations(&sources(), BLOB_HASHERS));
}

#[test]
fn the_cache_check_check_catches_violations() {
    let files = [
        (
            "crates/kiln-dist/src/cache_admin.rs".to_string(),
            "use kiln_build::store::{Store, BOOKKEEPING, SHA256_FILE};\n\
             fn v(dir: &Path) {\n\
                 let recorded = fs::read_to_string(dir.join(SHA256_FILE)).ok();\n\
                 let outputs: Vec<_> = names(dir).filter(|n| !BOOKKEEPING.contains(n)).collect();\n\
                 for (area, ext) in [(cache::DEBS, \".deb\"), (\"bundles\", \".hipfb\")] { fetch::sha256_file(&dir.join(area)); }\n\
             }"
            .to_string(),
        ),
        (
            "crates/kiln-build/src/store.rs".into(),
            "pub use kiln_toolchain::tiers::{output_sha256, BOOKKEEPING, SHA256_FILE};\n\
             fn put(d: &Path) { fs::write(d.join(SHA256_FILE), output_sha256(d)?)?; tiers::check_entry(d, None); }"
                .into(),
        ),
        ("crates/kiln-toolchain/src/tiers.rs".into(), "fn c(e: &Path) { fs::read_to_string(e.join(SHA256_FILE)); BOOKKEEPING.len(); }".into()),
        ("crates/kiln-toolchain/src/fetch.rs".into(), "fn f(c: &Cache, p: &Path) { c.debs(); sha256_file(p); }".into()),
        ("crates/kiln-dist/src/package.rs".into(), "fn p(f: &Path) { fetch::sha256_file(f); } // cache.debs()".into()),
    ];
    assert_eq!(
        cache_check_violations(&files, BLOB_HASHERS),
        [
            "crates/kiln-dist/src/cache_admin.rs:3: `SHA256_FILE` read: an entry checked by hand; call kiln_toolchain::tiers::check_entry",
            "crates/kiln-dist/src/cache_admin.rs:4: `BOOKKEEPING`: an entry's output picked by hand; call kiln_toolchain::tiers::check_entry",
            "crates/kiln-dist/src/cache_admin.rs:5: `sha256_file(` beside a blob area of the cache: a blob checked by hand; call kiln_toolchain::tiers::check_blob",
        ]
    );
}

/// Names kiln fixes once: (the literal, the one place that writes it, what to call).
const FIXED_NAMES: &[(&str, &str, &str)] = &[
    ("pins.toml", "crates/kiln-pins/src/lib.rs", "kiln_pins::FILE_NAME"),
    ("ci/matrix.yaml", "crates/kiln-matrix/src/lib.rs", "kiln_matrix::FILE"),
    ("artifacts.lock", "crates/kiln-dist/src/set_output.rs", "kiln_dist::set_output::lock_file_name"),
    ("https://github.com/kiln-gpu/kiln", "crates/kiln-package/src/sources.rs", "kiln_package::repository!() / sources::REPOSITORY"),
];

/// Code that is written once too: (the text, the one place that has it, what to call).
const FIXED_CODE: &[(&str, &str, &str)] =
    &[("available_parallelism().map_or(2", "crates/kiln-toolchain/src/lib.rs", "kiln_toolchain::default_workers (the default worker count)")];

/// Every string literal that is, or starts with, a [`FIXED_NAMES`] name, and
/// every [`FIXED_CODE`] text, outside its one place.
fn fixed_name_violations(files: &[(String, String)], names: &[(&str, &str, &str)], code: &[(&str, &str, &str)]) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files {
        let src = lex::lex(text);
        for (line, s) in &src.strings {
            for (name, owner, call) in names.iter().filter(|(_, o, _)| o != path) {
                if s == name || (name.starts_with("https://") && s.starts_with(name)) {
                    out.push(format!("{path}:{line}: the literal {s:?}; {owner} owns it: use {call}"));
                }
            }
        }
        for (needle, owner, call) in code.iter().filter(|(_, o, _)| o != path) {
            for (at, _) in src.code.match_indices(needle) {
                let line = src.code[..at].matches('\n').count() + 1;
                out.push(format!("{path}:{line}: `{needle}`; {owner} owns it: call {call}"));
            }
        }
    }
    out
}

/// Architecture Invariant: the pin file's and the runner matrix's names, the main lock's, kiln's
/// repository URL and the default worker count are each written in one place.
#[test]
fn fixed_names_are_written_once() {
    assert_none("fixed names written twice", fixed_name_violations(&sources_and_template(), FIXED_NAMES, FIXED_CODE));
}

#[test]
fn the_fixed_name_check_catches_violations() {
    let files = [
        ("xtask/src/main.rs".to_string(), "fn f(a: &Path) -> bool { a.join(\"pins.toml\").is_file() && a.join(\"ci/matrix.yaml\").is_file() }".to_string()),
        ("crates/kiln-x/src/a.rs".into(), "const UA: &str = \"https://github.com/kiln-gpu/kiln/blob/main/x\";\nfn n() -> usize { std::thread::available_parallelism().map_or(2, |n| n.get()) }".into()),
        ("crates/kiln-x/src/ok.rs".into(), "fn g() { bail!(\"pins.toml changed\"); let p = kiln_pins::FILE_NAME; } // \"pins.toml\"".into()),
        ("crates/kiln-pins/src/lib.rs".into(), "pub const FILE_NAME: &str = \"pins.toml\";".into()),
    ];
    assert_eq!(
        fixed_name_violations(&files, FIXED_NAMES, FIXED_CODE),
        [
            "xtask/src/main.rs:1: the literal \"pins.toml\"; crates/kiln-pins/src/lib.rs owns it: use kiln_pins::FILE_NAME",
            "xtask/src/main.rs:1: the literal \"ci/matrix.yaml\"; crates/kiln-matrix/src/lib.rs owns it: use kiln_matrix::FILE",
            "crates/kiln-x/src/a.rs:1: the literal \"https://github.com/kiln-gpu/kiln/blob/main/x\"; crates/kiln-package/src/sources.rs owns it: use kiln_package::repository!() / sources::REPOSITORY",
            "crates/kiln-x/src/a.rs:2: `available_parallelism().map_or(2`; crates/kiln-toolchain/src/lib.rs owns it: call kiln_toolchain::default_workers (the default worker count)",
        ]
    );
}

/// Every source file's first line is a `//!` doc saying what the module is;
/// a file `include!`d elsewhere (where an inner doc cannot be) starts with a
/// plain `//` comment instead.
fn module_doc_violations(files: &[(String, String)]) -> Vec<String> {
    let included: BTreeSet<&str> = files
        .iter()
        .flat_map(|(_, t)| t.match_indices("include!(\"").map(move |(at, m)| &t[at + m.len()..]))
        .filter_map(|rest| rest.split('"').next())
        .filter_map(|p| p.rsplit('/').next())
        .collect();
    let mut out = Vec::new();
    for (path, text) in files {
        let first = text.trim_start();
        let name = path.rsplit('/').next().unwrap_or(path);
        if first.starts_with("//!") || (included.contains(name) && first.starts_with("//")) {
            continue;
        }
        out.push(format!("{path}: no `//!` doc at its top saying what the module is"));
    }
    out
}

/// Architecture Invariant: every module says what it is (a `//!` doc).
#[test]
fn every_module_has_a_doc() {
    assert_none("modules without a //! doc", module_doc_violations(&sources_and_template()));
}

#[test]
fn the_module_doc_check_catches_violations() {
    let files = [
        ("xtask/src/a.rs".to_string(), "use std::path::Path;\n".to_string()),
        ("xtask/src/b.rs".into(), "//! b.\nfn f() {}\n".into()),
        ("crates/t/build.rs".into(), "// a build script\ninclude!(\"src/host.rs\");\n".into()),
        ("crates/t/src/host.rs".into(), "// included: plain comments only\nfn h() {}\n".into()),
        ("crates/t/src/other.rs".into(), "// not included\nfn o() {}\n".into()),
    ];
    assert_eq!(
        module_doc_violations(&files),
        [
            "xtask/src/a.rs: no `//!` doc at its top saying what the module is",
            "crates/t/build.rs: no `//!` doc at its top saying what the module is",
            "crates/t/src/other.rs: no `//!` doc at its top saying what the module is",
        ]
    );
}

/// Loops of files of one crate that import each other which remain, each
/// with why: (crate, its files' modules, sorted; why). Each is to be broken,
/// not added to: a new loop fails the test.
const IMPORT_LOOPS_ALLOWED: &[(&str, &[&str], &str)] = &[
    // None left: issue 35 broke the last five (kiln-dist's builder/merge/shard and
    // package/provenance, kiln-build's cuda/hip/plan, kiln-loader's backends, kiln-pins' readers).
];

/// A crate's module of the source file `path` (`crates/kiln-dist/src/lock.rs`:
/// (`kiln-dist`, `lock`); `generate/text.rs`: `generate::text`); `None` for
/// a crate root (`lib.rs`, `main.rs`, `bin/`).
fn module_of(path: &str) -> Option<(String, String)> {
    let (krate, rel) = match path.strip_prefix("xtask/src/") {
        Some(rel) => ("xtask", rel),
        None => {
            let rest = path.strip_prefix("crates/")?;
            let (krate, rel) = rest.split_once("/src/")?;
            (krate, rel)
        }
    };
    let rel = rel.strip_suffix(".rs")?;
    let rel = rel.strip_suffix("/mod").unwrap_or(rel);
    if rel == "lib" || rel == "main" || rel.starts_with("bin/") {
        return None;
    }
    Some((krate.to_string(), rel.replace('/', "::")))
}

/// The paths a `crate::` (or `super::`) reference names, starting at `rest`
/// (the text after it): one path, or each of a `{...}` group's.
fn referenced_paths(rest: &str) -> Vec<String> {
    let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':').collect::<String>();
    if let Some(group) = rest.strip_prefix('{') {
        let (mut depth, mut items, mut item) = (0, Vec::new(), String::new());
        for c in group.chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(std::mem::take(&mut item));
                    continue;
                }
                _ => {}
            }
            item.push(c);
        }
        items.push(item);
        items.iter().map(|i| ident(i.trim())).filter(|i| !i.is_empty()).collect()
    } else {
        vec![ident(rest)]
    }
}

/// The module of `modules` a path names: its longest prefix that is one.
fn resolve(path: &str, modules: &BTreeSet<String>, reexports: &BTreeMap<String, String>) -> Option<String> {
    let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    (1..=segments.len())
        .rev()
        .map(|n| segments[..n].join("::"))
        .find(|p| modules.contains(p))
        .or_else(|| reexports.get(segments.first()?.to_owned()).cloned())
}

/// Every loop of files of one crate that import each other (`crate::x`,
/// `super::x`, a name the crate root re-exports), as (crate, modules sorted).
fn import_loops(files: &[(String, String)]) -> Vec<(String, Vec<String>)> {
    let mut modules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, _) in files {
        if let Some((k, m)) = module_of(path) {
            modules.entry(k).or_default().insert(m);
        }
    }
    // What each crate root re-exports (`pub use lock::{Lock, Made};`): name → module.
    let mut reexports: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (path, text) in files.iter().filter(|(p, _)| module_of(p).is_none()) {
        let krate = path.strip_prefix("crates/").and_then(|r| r.split('/').next()).unwrap_or("xtask").to_string();
        let Some(mods) = modules.get(&krate) else { continue };
        let code = lex::lex(text).code;
        for (at, m) in code.match_indices("pub use ") {
            let rest = &code[at + m.len()..];
            let Some(module) = resolve(
                &rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':').collect::<String>(),
                mods,
                &BTreeMap::new(),
            ) else {
                continue;
            };
            let inner = rest
                .split_once('{')
                .filter(|(head, _)| !head.contains(';'))
                .map_or(rest.split(';').next().unwrap_or(""), |(_, g)| g.split('}').next().unwrap_or(""));
            for name in inner.split(',').map(|n| n.rsplit("::").next().unwrap_or("").split(" as ").last().unwrap_or("").trim()) {
                reexports.entry(krate.clone()).or_default().insert(name.to_string(), module.clone());
            }
        }
    }
    let mut edges: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for (path, text) in files {
        let Some((krate, me)) = module_of(path) else { continue };
        let mods = &modules[&krate];
        let re = reexports.get(&krate).cloned().unwrap_or_default();
        let code = lex::lex(text).code;
        let b = code.as_bytes();
        for start in ["crate::", "super::"] {
            for (at, _) in code.match_indices(start) {
                if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_' || b[at - 1] == b'$') {
                    continue;
                }
                let base = match (start, me.rsplit_once("::")) {
                    ("super::", Some((parent, _))) => format!("{parent}::"),
                    _ => String::new(),
                };
                for p in referenced_paths(&code[at + start.len()..]) {
                    if let Some(to) = resolve(&format!("{base}{p}"), mods, &re).filter(|to| *to != me) {
                        edges.entry((krate.clone(), me.clone())).or_default().insert(to);
                    }
                }
            }
        }
    }
    // Loops: the strongly connected sets of two modules or more.
    let reach = |krate: &str, from: &str| {
        let mut seen = BTreeSet::new();
        let mut work = vec![from.to_string()];
        while let Some(m) = work.pop() {
            for n in edges.get(&(krate.to_string(), m)).into_iter().flatten() {
                if seen.insert(n.clone()) {
                    work.push(n.clone());
                }
            }
        }
        seen
    };
    let mut loops = BTreeSet::new();
    for (krate, mods) in &modules {
        for m in mods {
            let from = reach(krate, m);
            let mut scc: Vec<String> = mods.iter().filter(|n| from.contains(*n) && reach(krate, n).contains(m)).cloned().collect();
            if scc.len() > 1 {
                scc.sort();
                loops.insert((krate.clone(), scc));
            }
        }
    }
    loops.into_iter().collect()
}

/// Each loop not allowed as it is, and each allowed loop that is gone.
fn import_loop_violations(files: &[(String, String)], allowed: &[(&str, &[&str], &str)]) -> Vec<String> {
    let loops = import_loops(files);
    let mut out: Vec<String> = loops
        .iter()
        .filter(|(k, m)| !allowed.iter().any(|(ak, am, _)| ak == k && am == m))
        .map(|(k, m)| format!("{k}: {} import each other; break the loop (one owner per type)", m.join(", ")))
        .collect();
    for (k, m, _) in allowed.iter().filter(|(ak, am, _)| !loops.iter().any(|(k, m)| k == ak && m == am)) {
        out.push(format!("{k}: {} no longer import each other: remove the entry from IMPORT_LOOPS_ALLOWED", m.join(", ")));
    }
    out
}

/// Architecture Invariant: no two files of one crate import each other in a loop (IMPORT_LOOPS_ALLOWED aside).
#[test]
fn no_files_of_a_crate_import_each_other() {
    assert_none("import loops", import_loop_violations(&sources(), IMPORT_LOOPS_ALLOWED));
}

#[test]
fn the_import_loop_check_catches_violations() {
    let files = [
        ("crates/kiln-x/src/lib.rs".to_string(), "pub mod a;\npub mod b;\npub mod c;\npub mod g;\npub use c::{Cee, Other as O};\n".to_string()),
        ("crates/kiln-x/src/a.rs".into(), "use crate::{\n    b::Bee,\n    g::text,\n};\n".into()),
        ("crates/kiln-x/src/b.rs".into(), "fn f() -> crate::Cee { todo!() } // crate::d\n".into()),
        ("crates/kiln-x/src/c.rs".into(), "use crate::a;\n#[cfg(test)]\nmod tests { use crate::b; }\n".into()),
        ("crates/kiln-x/src/g/mod.rs".into(), "pub mod text;\n".into()),
        ("crates/kiln-x/src/g/text.rs".into(), "use super::Thing; fn t() { kiln_crate::x(); }\n".into()),
        ("xtask/src/main.rs".into(), "mod d;\nmod m;\n".into()),
        ("xtask/src/d.rs".into(), "fn r() { crate::m::run() }\n".into()),
        ("xtask/src/m.rs".into(), "use crate::d::report;\n".into()),
    ];
    assert_eq!(
        import_loops(&files),
        [("kiln-x".to_string(), vec!["a".to_string(), "b".into(), "c".into()]), ("xtask".into(), vec!["d".into(), "m".into()])]
    );
    assert_eq!(
        import_loop_violations(&files, &[("kiln-x", &["a", "b", "c"], "being broken"), ("kiln-y", &["p", "q"], "gone")]),
        [
            "xtask: d, m import each other; break the loop (one owner per type)",
            "kiln-y: p, q no longer import each other: remove the entry from IMPORT_LOOPS_ALLOWED"
        ]
    );
}
