//! kiln's flake (flake.nix, nix/), tested offline against the stub nixpkgs in
//! nix/tests/stub-nixpkgs. The flake's own logic is real here: reading
//! pins.toml, closure to fetches, the sysroot record and identity, the shell's
//! variables, the unfree predicate and the error messages. Only nixpkgs is a
//! stand-in (its fetchurl downloads nothing); docs/nix.md says what that leaves
//! untested.
//!
//! Needs Nix with a store it can write (Debian: `apt-get install nix-bin`, as
//! root). Without it these tests fail: they never skip.

use std::{
    collections::BTreeMap,
    fs,
    io::ErrorKind,
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::{Mutex, MutexGuard},
};

use kiln_pins::{Pins, GENERATED_MARKER};
use kiln_toolchain::sysroot;

const SYSTEM: &str = "x86_64-linux";

/// Offline: no binary cache, no global flake registry. The stub's builders
/// are the host's /bin/bash, which a sandboxed build cannot see. No build
/// users: the result is then the same with or without Debian's
/// nix-setup-systemd (which creates them and writes /etc/nix/nix.conf).
const NIX_CONFIG: &str = "experimental-features = nix-command flakes\n\
                          substituters =\n\
                          flake-registry = /dev/null\n\
                          sandbox = false\n\
                          build-users-group =\n\
                          warn-dirty = false\n";

/// One Nix command at a time: CI has 2 cores, and the tests share the store
/// and the stub sysroot, which Nix would otherwise build under a lock anyway.
static NIX: Mutex<()> = Mutex::new(());

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn stub_nixpkgs() -> String {
    format!("path:{}", repo().join("nix/tests/stub-nixpkgs").display())
}

fn lock() -> MutexGuard<'static, ()> {
    NIX.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `nix ARGS` with the stub in place of the nixpkgs input.
fn nix(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let stub = stub_nixpkgs();
    let (sub, rest) = args.split_first().unwrap();
    let mut full = vec![*sub];
    if *sub == "flake" {
        full.push(rest[0]);
        full.extend(["--override-input", "nixpkgs", &stub]);
        full.extend(&rest[1..]);
    } else {
        full.extend(["--override-input", "nixpkgs", &stub]);
        full.extend(rest);
    }
    run_nix(&full, envs)
}

/// Runs `nix ARGS` as written: with the locked nixpkgs, which is not fetched here.
fn run_nix(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let out = Command::new("nix").args(args).env("NIX_CONFIG", NIX_CONFIG).envs(envs.iter().copied()).output();
    match out {
        Ok(out) => out,
        Err(e) if e.kind() == ErrorKind::NotFound => panic!(
            "`nix` is not installed, and the flake cannot be tested without it.\n  \
             Install it (Debian: `apt-get install nix-bin`; these tests run it as root with a \
             single-user store in /nix) and run the tests again."
        ),
        Err(e) => panic!("cannot run nix: {e}"),
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// stdout of a command that must succeed.
fn succeeds(out: Output, what: &str) -> String {
    assert!(out.status.success(), "{what} failed ({}):\n{}", out.status, text(&out.stderr));
    text(&out.stdout)
}

/// stderr of a command that must fail.
fn fails(out: Output, what: &str) -> String {
    assert!(!out.status.success(), "{what} succeeded, but should have failed; stdout:\n{}", text(&out.stdout));
    text(&out.stderr)
}

/// Nix sees only the files git tracks; say so instead of a missing-file error.
fn assert_tracked(dir: &Path) {
    let out = Command::new("git").arg("-C").arg(dir).args(["ls-files", "flake.nix", "flake.lock", "nix"]).output().unwrap();
    let listed = text(&out.stdout);
    for f in ["flake.nix", "flake.lock", "nix/pins.nix", "nix/tests/stub-nixpkgs/default.nix"] {
        assert!(
            listed.lines().any(|l| l == f),
            "{f} is not tracked by git in {}; Nix only sees tracked files: `git add flake.nix flake.lock nix`",
            dir.display()
        );
    }
}

fn load_pins(path: &Path) -> Pins {
    Pins::load(path).unwrap_or_else(|e| panic!("{e}"))
}

/// `env -0` output as a map.
fn env_map(out: &str) -> BTreeMap<String, String> {
    out.split('\0').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// The flake and everything it reads, copied into a fresh git repository, so
/// that a test can edit them without touching the checkout.
struct Copy {
    dir: PathBuf,
}

impl Copy {
    fn new(label: &str) -> Copy {
        let dir = std::env::temp_dir().join(format!("kiln-nix-flake-{label}-{}", std::process::id()));
        fs::remove_dir_all(&dir).ok();
        fs::create_dir_all(&dir).unwrap();
        let root = repo();
        for f in ["flake.nix", "flake.lock", "pins.toml", "Cargo.toml", "Cargo.lock"] {
            fs::copy(root.join(f), dir.join(f)).unwrap_or_else(|e| panic!("cannot copy {f}: {e}"));
        }
        copy_dir(&root.join("nix"), &dir.join("nix"));
        Copy { dir }
    }

    /// Replaces `from` with `to` in `file`, which must hold `from` exactly `times` times.
    fn edit(&self, file: &str, from: &str, to: &str, times: usize) -> &Copy {
        let path = self.dir.join(file);
        let old = fs::read_to_string(&path).unwrap();
        assert_eq!(old.matches(from).count(), times, "test setup: expected {times} × `{from}` in {file}; has its layout changed?");
        fs::write(&path, old.replace(from, to)).unwrap();
        self
    }

    /// Moves the closure entry of package `name` to the start of the closure.
    fn move_to_closure_start(&self, name: &str) -> &Copy {
        let path = self.dir.join("pins.toml");
        let text = fs::read_to_string(&path).unwrap();
        let start = "[toolchain.closure]\ndebs = [\n";
        let needle = format!("{{ name = \"{name}\", ");
        let line = text.lines().find(|l| l.trim_start().starts_with(&needle)).expect("test setup: no such closure entry");
        let without = text.replacen(&format!("{line}\n"), "", 1);
        assert!(without.contains(start), "test setup: pins.toml has no `{start}`");
        fs::write(&path, without.replacen(start, &format!("{start}{line}\n"), 1)).unwrap();
        self
    }

    fn write(&self, file: &str, contents: &str) -> &Copy {
        fs::write(self.dir.join(file), contents).unwrap();
        self
    }

    /// Commits nothing: Nix reads tracked files from the work tree.
    fn flake(&self) -> String {
        let git = |args: &[&str]| {
            let out = Command::new("git").arg("-C").arg(&self.dir).args(args).output().unwrap();
            assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
        };
        git(&["init", "-q"]);
        git(&["add", "-A"]);
        format!("git+file://{}", self.dir.display())
    }

    fn pins(&self) -> Pins {
        load_pins(&self.dir.join("pins.toml"))
    }
}

impl Drop for Copy {
    fn drop(&mut self) {
        fs::remove_dir_all(&self.dir).ok();
    }
}

fn copy_dir(from: &Path, to: &Path) {
    kiln_fs::copy_tree(from, to).unwrap();
}

fn eval_raw(flake: &str, attr: &str) -> Output {
    nix(&["eval", "--raw", &format!("{flake}#{attr}")], &[])
}

#[test]
fn flake_lock_matches_the_inputs_and_flake_check_passes() {
    let _nix = lock();
    let root = repo();
    assert_tracked(&root);
    let flake = root.to_str().unwrap();

    // Offline, this fails if flake.lock is not a complete lock for flake.nix's inputs.
    succeeds(run_nix(&["flake", "lock", "--no-update-lock-file", flake], &[]), "nix flake lock --no-update-lock-file");
    let meta = succeeds(run_nix(&["flake", "metadata", "--json", flake], &[]), "nix flake metadata");
    let locked = meta.split("\"nixpkgs\":{\"locked\":{").nth(1).and_then(|l| l.split('}').next()).unwrap_or_default();
    assert!(
        locked.contains("\"owner\":\"NixOS\"") && locked.contains("\"repo\":\"nixpkgs\"") && locked.contains("\"narHash\":\"sha256-"),
        "flake.lock does not lock nixpkgs to a GitHub revision with a narHash:\n{meta}"
    );

    succeeds(nix(&["flake", "check", flake], &[]), "nix flake check (stub nixpkgs)");
}

#[test]
fn dev_shell_provides_the_pinned_toolchain_and_the_xtask_accepts_it() {
    let _nix = lock();
    let root = repo();
    assert_tracked(&root);
    let flake = root.to_str().unwrap();
    let pins = load_pins(&root.join("pins.toml"));
    let closure = pins.closure().unwrap();

    let env = env_map(&succeeds(nix(&["develop", flake, "-c", "env", "-0"], &[]), "nix develop -c env"));
    let var = |name: &str| env.get(name).unwrap_or_else(|| panic!("the dev shell does not set {name}")).clone();

    // The sysroot: what kiln provisions itself, record and layout alike.
    let root_dir = PathBuf::from(var(sysroot::ENV));
    assert!(root_dir.starts_with("/nix/store"), "KILN_SYSROOT is not a store path: {}", root_dir.display());
    let record = sysroot::read_record(&root_dir).unwrap().unwrap_or_else(|| panic!("{} has no {}", root_dir.display(), sysroot::RECORD));
    let expected = sysroot::record(closure);
    assert_eq!(record.identity, sysroot::identity(closure), "the flake's identity differs from kiln_toolchain's");
    assert_eq!(record, expected, "the flake's sysroot record differs: {:?}", sysroot::differences(&record, &expected));
    for dir in sysroot::MOUNT_POINTS {
        assert!(root_dir.join(dir).is_dir(), "the sysroot lacks the mount point {dir}");
    }

    // Every closure .deb was fetched from the pinned mirrors by its pinned
    // sha256 and unpacked in pin-file order (the stub's dpkg-deb numbers them).
    let mut unpacked: Vec<PathBuf> = fs::read_dir(root_dir.join(".stub-debs")).unwrap().map(|e| e.unwrap().path()).collect();
    unpacked.sort();
    assert_eq!(unpacked.len(), closure.debs.len(), "the sysroot unpacked {} packages, the closure has {}", unpacked.len(), closure.debs.len());
    for (file, deb) in unpacked.iter().zip(&closure.debs) {
        let fetched = fs::read_to_string(file).unwrap();
        let field = |key: &str| fetched.lines().filter_map(|l| l.strip_prefix(key)).map(str::to_string).collect::<Vec<_>>();
        assert_eq!(field("sha256="), vec![deb.sha256.clone()], "{}: fetched with another hash", deb.name);
        let urls: Vec<String> = pins.toolchain.mirrors.iter().map(|m| format!("{m}/{}", deb.path)).collect();
        assert_eq!(field("url="), urls, "{}: fetched from other URLs", deb.name);
    }

    // What the shell says it provides, from the pins and nothing else.
    assert_eq!(var("KILN_TOOLCHAIN_IDENTITY"), sysroot::identity(closure));
    for (role, pin) in pins.compilers() {
        assert_eq!(var(&format!("KILN_TOOLCHAIN_{}", role.to_uppercase())), format!("{} {}", pin.package, pin.version));
    }

    // The tools `cargo xtask dist` and the tests need come from the shell's inputs, not the host.
    let path = var("PATH");
    for tool in ["cargo", "rustc", "cargo-clippy", "rustfmt", "cargo-nextest", "bwrap", "dpkg-deb"] {
        let found = std::env::split_paths(&path).map(|d| d.join(tool)).find(|p| p.is_file());
        match found {
            Some(p) => assert!(p.starts_with("/nix/store"), "{tool} comes from the host ({}), not the shell", p.display()),
            None => panic!("the dev shell has no {tool} on PATH"),
        }
    }

    // The xtask, run in the shell, takes KILN_SYSROOT as its toolchain...
    let xtask = env!("CARGO_BIN_EXE_xtask");
    let cache = std::env::temp_dir().join(format!("kiln-nix-flake-cache-{}", std::process::id()));
    let cache_env = [("KILN_CACHE_DIR", cache.to_str().unwrap())];
    let out = succeeds(nix(&["develop", flake, "-c", xtask, "toolchain"], &cache_env), "cargo xtask toolchain in the dev shell");
    assert_eq!(out.trim(), root_dir.to_str().unwrap(), "the xtask did not use the shell's KILN_SYSROOT");

    // ...and refuses it, naming the package, once the pins say otherwise.
    let drifted = std::env::temp_dir().join(format!("kiln-nix-flake-drifted-{}.toml", std::process::id()));
    let deb = closure.find(&pins.toolchain.nvcc.package).unwrap();
    let other: String = deb.sha256.chars().rev().collect();
    fs::write(&drifted, fs::read_to_string(root.join("pins.toml")).unwrap().replace(&deb.sha256, &other)).unwrap();
    let err = fails(
        nix(&["develop", flake, "-c", xtask, "--pins", drifted.to_str().unwrap(), "toolchain"], &cache_env),
        "cargo xtask toolchain with pins that differ from the shell's sysroot",
    );
    fs::remove_file(&drifted).ok();
    fs::remove_dir_all(&cache).ok();
    assert!(err.contains("is not the pinned one"), "unexpected error:\n{err}");
    assert!(err.contains(&format!("{}: {} with another sha256", deb.name, deb.version)), "the error does not name {}:\n{err}", deb.name);
}

#[test]
fn every_version_in_the_shell_comes_from_the_pin_file() {
    let _nix = lock();
    let root = repo();
    let pins = load_pins(&root.join("pins.toml"));
    let closure = pins.closure().unwrap();

    // No pinned version or hash is written down a second time in Nix.
    let mut nix_files = vec![root.join("flake.nix")];
    for entry in fs::read_dir(root.join("nix")).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "nix") {
            nix_files.push(p);
        }
    }
    assert!(nix_files.len() >= 4, "expected flake.nix and nix/*.nix, found {nix_files:?}");
    let mut pinned: Vec<String> = vec![pins.toolchain.suite.clone()];
    for set in &pins.sets {
        if let kiln_pins::Source::Crate { version, sha256, .. } = &set.source {
            pinned.extend([version.clone(), sha256.clone()]);
        }
    }
    for (_, p) in pins.compilers() {
        pinned.push(p.version.clone());
        // `12.4.131`, `17.0.6`; shorter ones (`6.0`) would match unrelated text.
        let upstream = kiln_pins::upstream_version(&p.version);
        if upstream.matches('.').count() >= 2 {
            pinned.push(upstream.to_string());
        }
    }
    pinned.extend(closure.debs.iter().map(|d| d.sha256.clone()));
    if let Some(w) = &pins.toolchain.ptxas {
        pinned.extend([w.sha256.clone(), w.version.clone(), w.url.clone()]);
    }
    for file in &nix_files {
        let body = fs::read_to_string(file).unwrap();
        for value in &pinned {
            assert!(!body.contains(value.as_str()), "{} writes down `{value}`, which pins.toml already pins", file.display());
        }
    }

    // Bump the nvcc pin (and its closure entry) in a copy: the shell follows.
    // The closure's last entry goes first: kiln sorts before hashing, and so
    // must the flake.
    let nvcc = &pins.toolchain.nvcc;
    let bumped = format!("{}+kilntest1", nvcc.version);
    let deb = closure.find(&nvcc.package).unwrap();
    let new_sha: String = deb.sha256.chars().rev().collect();
    let copy = Copy::new("bump");
    copy.edit(
        "pins.toml",
        &format!("\"{}\", version = \"{}\"", nvcc.package, nvcc.version),
        &format!("\"{}\", version = \"{bumped}\"", nvcc.package),
        2,
    )
    .edit("pins.toml", &deb.sha256, &new_sha, 1)
    .move_to_closure_start(&closure.debs.last().unwrap().name);
    let flake = copy.flake();
    let copied = copy.pins();
    assert_eq!(copied.closure().unwrap().debs[0].name, closure.debs.last().unwrap().name, "test setup: the closure was not reordered");
    let new_identity = sysroot::identity(copied.closure().unwrap());
    assert_ne!(new_identity, sysroot::identity(closure));

    let shell = format!("devShells.{SYSTEM}.default");
    let nvcc_var = succeeds(eval_raw(&flake, &format!("{shell}.KILN_TOOLCHAIN_NVCC")), "nix eval KILN_TOOLCHAIN_NVCC");
    assert_eq!(nvcc_var, format!("{} {bumped}", nvcc.package));
    let identity = succeeds(eval_raw(&flake, &format!("{shell}.KILN_TOOLCHAIN_IDENTITY")), "nix eval KILN_TOOLCHAIN_IDENTITY");
    assert_eq!(identity, new_identity, "the flake's identity for the bumped pins differs from kiln_toolchain's");
    let sysroot_path = succeeds(eval_raw(&flake, &format!("{shell}.KILN_SYSROOT")), "nix eval KILN_SYSROOT");
    assert!(sysroot_path.ends_with(&format!("-kiln-sysroot-{}", &new_identity[..12])), "KILN_SYSROOT {sysroot_path} is not the bumped toolchain");
}

#[test]
fn broken_pin_files_fail_evaluation_with_a_clear_message() {
    let _nix = lock();
    let pins = load_pins(&repo().join("pins.toml"));
    let closure = pins.closure().unwrap();
    let attr = format!("devShells.{SYSTEM}.default.drvPath");
    let check = |copy: &Copy, expected: &[&str]| {
        let err = fails(eval_raw(&copy.flake(), &attr), "evaluating the dev shell");
        for e in expected {
            assert!(err.contains(e), "the error does not say `{e}`:\n{err}");
        }
    };

    // The unedited copy evaluates, so each failure below is its edit's.
    let control = Copy::new("control");
    succeeds(eval_raw(&control.flake(), &attr), "evaluating the unedited copy");

    // A compiler bumped without `cargo xtask pins update`.
    let clang = &pins.toolchain.clang;
    let bumped = format!("{}+kilntest1", clang.version);
    let copy = Copy::new("stale-closure");
    copy.edit(
        "pins.toml",
        &format!("package = \"{}\", version = \"{}\"", clang.package, clang.version),
        &format!("package = \"{}\", version = \"{bumped}\"", clang.package),
        1,
    );
    check(
        &copy,
        &[&format!("pins.toml: {} is pinned to {bumped} but [toolchain.closure] has {}", clang.package, clang.version), "cargo xtask pins update"],
    );

    // No closure at all.
    let copy = Copy::new("no-closure");
    let text = fs::read_to_string(repo().join("pins.toml")).unwrap();
    let head = &text[..text.find(GENERATED_MARKER).expect("pins.toml has no generated closure")];
    copy.write("pins.toml", head);
    check(&copy, &["pins.toml: the toolchain's package closure ([toolchain.closure]) is missing", "cargo xtask pins update"]);

    // A damaged hash.
    let deb = &closure.debs[0];
    let copy = Copy::new("bad-sha");
    copy.edit("pins.toml", &deb.sha256, "not-a-sha256", 1);
    check(&copy, &[&format!("closure package {}: `not-a-sha256` is not a sha256", deb.name)]);

    // A schema this flake does not know.
    let copy = Copy::new("schema");
    copy.edit("pins.toml", "\nschema = 2\n", "\nschema = 3\n", 1);
    check(&copy, &["pins.toml: unsupported schema 3"]);

    // A non-free package that is not NVIDIA's CUDA toolkit: the unfree
    // predicate admits the CUDA EULA only.
    let free = closure.debs.iter().find(|d| d.path.starts_with("pool/main/")).unwrap();
    let moved = free.path.replacen("pool/main/", "pool/non-free/", 1);
    let copy = Copy::new("non-free");
    copy.edit("pins.toml", &format!("path = \"{}\"", free.path), &format!("path = \"{moved}\""), 1);
    check(&copy, &[&format!("Package ‘{}_", free.name), "has an unfree license (‘unfree’), refusing to evaluate"]);

    // Without the predicate, the CUDA packages themselves are refused: the
    // predicate is what admits them.
    let cuda = closure.debs.iter().find(|d| d.path.starts_with("pool/non-free/")).expect("the closure has no non-free package");
    let copy = Copy::new("no-predicate");
    copy.edit("flake.nix", "config = { inherit allowUnfreePredicate; };", "config = { };", 1);
    check(&copy, &[&format!("Package ‘{}_", cuda.name), "has an unfree license (‘CUDA EULA’)"]);

    // A Rust older than the workspace's rust-version (read from Cargo.toml).
    let cargo = fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let line = cargo.lines().find(|l| l.starts_with("rust-version = ")).expect("Cargo.toml has no rust-version");
    let copy = Copy::new("rust-version");
    copy.edit("Cargo.toml", line, "rust-version = \"99.0\"", 1);
    check(&copy, &["older than the workspace's rust-version 99.0 (Cargo.toml)"]);
}

#[test]
fn the_dist_derivation_places_the_pinned_ptxas_wheel_where_the_xtask_looks() {
    let _nix = lock();
    let root = repo();
    assert_tracked(&root);
    let flake = root.to_str().unwrap();
    let pins = load_pins(&root.join("pins.toml"));
    let wheel = pins.toolchain.ptxas.as_ref().expect("pins.toml pins a ptxas");
    let dist = format!("packages.{SYSTEM}.dist");
    let build = succeeds(eval_raw(flake, &format!("{dist}.buildPhase")), "nix eval the dist derivation's buildPhase");
    // The xtask's cache layout: wheels/<sha256>.whl (kiln_toolchain::wheel::fetch_wheel), checked there again.
    let copy = format!("cp \"$ptxasWheel\" \"$KILN_CACHE_DIR/wheels/{}.whl\"", wheel.sha256);
    assert!(build.lines().any(|l| l.trim() == copy), "the dist derivation does not run `{copy}`:\n{build}");
    // $ptxasWheel is a fixed-output fetch of the pinned URL and hash (the stub's fetchurl keeps both).
    let urls = succeeds(nix(&["eval", "--json", &format!("{flake}#{dist}.ptxasWheel.urls")], &[]), "nix eval the wheel fetch's urls");
    assert_eq!(urls.trim(), format!("[\"{}\"]", wheel.url));
    let hash = succeeds(eval_raw(flake, &format!("{dist}.ptxasWheel.expectedHash")), "nix eval the wheel fetch's hash");
    assert_eq!(hash, wheel.sha256);
}
