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
// Compilers run only through kiln-toolchain's Runner.

/// The programs started (`Command::new`, xshell's `cmd!`) outside kiln-toolchain,
/// none of them a compiler.
const PROGRAMS: &[&str] = &["cargo", "dpkg-deb", "rocminfo"];

/// Files that start a program named by a variable, each with what it is.
const PROGRAMS_BY_VARIABLE: &[(&str, &str)] = &[
    ("crates/kiln-kernel-tests/src/matrix.rs", "the kernel tests' own test binaries"),
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

/// Architecture Invariant: compilers only ever run through `kiln-toolchain::Runner`.
#[test]
fn compilers_run_only_through_the_runner() {
    assert_none("processes started outside kiln-toolchain", process_violations(&sources(), PROGRAMS, PROGRAMS_BY_VARIABLE));
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

/// Architecture Invariant: no upstream source is committed.
#[test]
fn the_only_kernel_sources_committed_are_kilns() {
    let out = Command::new("git").args(["ls-files"]).current_dir(root()).output().unwrap();
    assert!(out.status.success(), "git ls-files: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let tracked: Vec<&str> = text.lines().collect();
    assert!(tracked.contains(&"pins.toml"), "git ls-files did not list the repository");
    assert_none("kernel sources outside kernels/", native_source_violations(&tracked));
}

#[test]
fn the_kernel_source_check_catches_violations() {
    let v = native_source_violations(&["kernels/probe/probe.cu", "vendor/candle/src/affine.cu", "docs/x.md", "bench/a.h"]);
    assert_eq!(v.len(), 2, "{v:#?}");
    assert!(v[0].starts_with("vendor/candle/src/affine.cu:") && v[1].starts_with("bench/a.h:"), "{v:#?}");
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
