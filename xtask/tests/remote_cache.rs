//! The shared remote cache against a real server: nginx with WebDAV `PUT` on
//! loopback, started by each test. A dist on an empty local cache is fed by
//! a warm remote without compiling; damaged objects on the server are misses
//! (and repaired by the next write-back); an unreachable or silent server
//! costs one bounded time-out, then the dist builds locally; read-only mode
//! writes nothing; the toolchain's packages and pinned wheels come from the
//! remote too, checked against their pins.

use std::{
    fs,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Command, Output},
};

mod common;

use common::{assert_same_tree, cache_at, nginx::Nginx, scratch, text, xtask};
use kiln_toolchain::{remote, Cache};

const SELECTION: &[&str] = &["--module", "affine", "--module", "fill", "--arch", "gfx90a", "--arch", "sm_90", "--no-package"];
const JOBS: usize = 4;

fn dist(cache: &Path, url: &str, out: &Path, extra: &[&str]) -> Command {
    let mut c = xtask(cache);
    c.arg("dist").args(SELECTION).args(["--remote-cache", url]).arg("--out").arg(out).args(extra);
    c
}

fn run(mut c: Command) -> Output {
    c.output().unwrap()
}

fn with_login(mut c: Command, server: &Nginx) -> Command {
    c.env(remote::NETRC_ENV, &server.netrc);
    c
}

/// Fills the server from a dist that compiles on an empty cache; returns its dist folder.
fn warm(root: &Path, server: &Nginx) -> PathBuf {
    let out = root.join("first");
    let o = run(with_login(dist(&cache_at(&root.join("first-cache")), &server.url(), &out, &["--locked"]), server));
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains(&format!("{JOBS} misses, {JOBS} stored")), "{}", text(&o));
    out
}

fn sha256(path: &Path) -> String {
    kiln_manifest::sha256_hex(&fs::read(path).unwrap())
}

#[test]
fn an_empty_local_cache_is_fed_entirely_by_a_warm_remote_without_compiling() {
    let s = scratch("remote-warm");
    let server = Nginx::start(&s.0.join("nginx"));
    let first = warm(&s.0, &server);
    // Every job is a record and its bytes, each named by its hash.
    let stored = server.stored();
    assert_eq!(stored.iter().filter(|(n, _)| n.starts_with("ac/")).count(), JOBS, "{stored:?}");
    for (name, path) in stored.iter().filter(|(n, _)| n.starts_with("cas/")) {
        assert_eq!(format!("cas/{}", sha256(path)), *name);
    }

    // A second machine: empty cache, and compiling turned off. It succeeds only if everything came from the server.
    let out = s.0.join("second");
    let o = run(dist(&cache_at(&s.0.join("second-cache")), &server.url(), &out, &["--no-compile", "--locked"]));
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains(&format!("{JOBS} jobs in")) && t.contains("from cache, 0 built"), "{t}");
    assert!(t.contains(&format!("{JOBS} hits, 0 misses, 0 stored")), "{t}");
    assert_same_tree(&first, &out);

    // Without the server, the same empty cache and --no-compile fail, naming the job: the flag is real.
    let o = run({
        let mut c = xtask(&cache_at(&s.0.join("third-cache")));
        c.arg("dist").args(SELECTION).arg("--no-compile").arg("--out").arg(s.0.join("third"));
        c
    });
    assert!(!o.status.success() && text(&o).contains("compiling is turned off"), "{}", text(&o));
    // It failed before any log was written: no empty log path is offered.
    assert!(!text(&o).contains("log: )"), "{}", text(&o));
}

#[test]
fn damaged_objects_on_the_server_are_misses_and_the_next_write_back_repairs_them() {
    let s = scratch("remote-damaged");
    let server = Nginx::start(&s.0.join("nginx"));
    let first = warm(&s.0, &server);
    let stored = server.stored();
    let cas: Vec<&PathBuf> = stored.iter().filter(|(n, _)| n.starts_with("cas/")).map(|(_, p)| p).collect();
    let ac: Vec<&PathBuf> = stored.iter().filter(|(n, _)| n.starts_with("ac/")).map(|(_, p)| p).collect();
    // Other bytes in one object, a truncated second one, and a record that is not one.
    let mut bytes = fs::read(cas[0]).unwrap();
    bytes[100] ^= 0x55;
    fs::write(cas[0], &bytes).unwrap();
    let len = fs::metadata(cas[1]).unwrap().len();
    fs::File::options().write(true).open(cas[1]).unwrap().set_len(len / 2).unwrap();
    fs::write(ac[0], b"{\"schema\": 1, \"recipe\": ").unwrap();

    let out = s.0.join("second");
    let o = run(with_login(dist(&cache_at(&s.0.join("second-cache")), &server.url(), &out, &["--locked"]), &server));
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.matches("is damaged").count() >= 2, "every damaged object is named: {t}");
    assert!(t.contains("not a kiln record"), "{t}");
    // Nothing damaged became an artifact: the lock matched (--locked), and the folder is the first machine's.
    assert_same_tree(&first, &out);
    assert!(!t.contains(" 0 built"), "the damaged entries were built here: {t}");
    // Written back: every object on the server is again the bytes its name promises.
    for (name, path) in server.stored().iter().filter(|(n, _)| n.starts_with("cas/")) {
        assert_eq!(format!("cas/{}", sha256(path)), *name, "still damaged");
    }
    let o = run(dist(&cache_at(&s.0.join("third-cache")), &server.url(), &s.0.join("third"), &["--no-compile"]));
    assert!(o.status.success(), "repaired: an empty cache is fed entirely again: {}", text(&o));
}

#[test]
fn an_unreachable_or_silent_server_costs_one_time_out_then_the_dist_builds_locally() {
    let s = scratch("remote-down");
    // Nothing listens on a port that was just freed: connections are refused at once.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // A server that accepts connections and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://127.0.0.1:{}/kiln", silent.local_addr().unwrap().port());
    for (i, url) in [format!("http://127.0.0.1:{closed}/kiln"), silent_url].iter().enumerate() {
        let mut c = dist(&cache_at(&s.0.join(format!("cache{i}"))), url, &s.0.join(format!("out{i}")), &["--locked"]);
        c.env(remote::TIMEOUT_ENV, "2");
        let o = run(c);
        let t = text(&o);
        assert!(o.status.success(), "{url}: {t}");
        assert_eq!(t.matches("asking it nothing more in this run").count(), 1, "{url}: one failure, then no more requests: {t}");
        assert!(t.contains("(unreachable: not used after the first failure)"), "{t}");
        if i == 1 {
            assert!(t.contains("no answer within the time-out (2 s"), "{t}");
        }
    }
    drop(silent);
}

#[test]
fn read_only_mode_and_a_refused_write_store_nothing_but_still_read() {
    let s = scratch("remote-readonly");
    let server = Nginx::start(&s.0.join("nginx"));
    // Read-only, with the login that could write: nothing is written.
    let o = run(with_login(dist(&cache_at(&s.0.join("c1")), &server.url(), &s.0.join("o1"), &["--remote-cache-read-only", "--locked"]), &server));
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("0 stored") && text(&o).contains("(read-only)"), "{}", text(&o));
    assert!(server.stored().is_empty(), "{:?}", server.stored());
    assert!(server.requests().iter().all(|(m, _, _)| m == "GET"), "{:?}", server.requests());
    // The same through the environment.
    let mut c = with_login(dist(&cache_at(&s.0.join("c2")), &server.url(), &s.0.join("o2"), &["--locked"]), &server);
    c.env(remote::READ_ONLY_ENV, "1");
    assert!(run(c).status.success());
    assert!(server.stored().is_empty());

    // Writable, but without the login: the server refuses (401), the dist says so once and goes on.
    let o = run(dist(&cache_at(&s.0.join("c3")), &server.url(), &s.0.join("o3"), &["--locked"]));
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert_eq!(t.matches("the server refused a write (HTTP 401)").count(), 1, "{t}");
    assert!(server.stored().is_empty());

    // Reading needs no login: once warm, the read-only dist is fed by it.
    warm(&s.0, &server);
    let o = run(dist(&cache_at(&s.0.join("c4")), &server.url(), &s.0.join("o4"), &["--remote-cache-read-only", "--no-compile"]));
    assert!(o.status.success(), "{}", text(&o));

    // A token that could smuggle a header line in is refused before anything runs, and not printed.
    let mut c = dist(&cache_at(&s.0.join("c5")), &server.url(), &s.0.join("o5"), &[]);
    c.env(remote::TOKEN_ENV, "abc\noutput = /tmp/owned");
    let o = run(c);
    assert!(!o.status.success() && text(&o).contains(remote::TOKEN_ENV) && !text(&o).contains("owned"), "{}", text(&o));
    // Credentials in the URL are refused, and not echoed.
    let url = format!("http://{}:{}@127.0.0.1:{}/kiln", common::nginx::USER, common::nginx::PASSWORD, server.port);
    let o = run(dist(&cache_at(&s.0.join("c6")), &url, &s.0.join("o6"), &[]));
    assert!(!o.status.success() && text(&o).contains("netrc") && !text(&o).contains(common::nginx::PASSWORD), "{}", text(&o));
}

#[test]
fn toolchain_packages_come_from_the_remote_checked_against_their_pins() {
    let s = scratch("remote-debs");
    let server = Nginx::start(&s.0.join("nginx"));
    let pins = kiln_pins::Pins::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../pins.toml")).unwrap();
    let deb = pins.closure().unwrap().debs.iter().min_by_key(|d| d.size).unwrap().clone();
    let real = common::real_cache().join("debs").join(format!("{}.deb", deb.sha256));
    assert!(real.is_file(), "{} is missing: run `cargo xtask toolchain` first", real.display());
    // The server has the package, the only mirror answers nothing (a closed port).
    let cas = server.root.join("kiln/cas");
    fs::create_dir_all(&cas).unwrap();
    fs::copy(&real, cas.join(&deb.sha256)).unwrap();
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mirrors = vec![format!("http://127.0.0.1:{closed}/debian")];
    let config = || remote::Config::new(&server.url()).unwrap();
    let cache = Cache::at(s.0.join("cache")).unwrap().with_remote(Some(config()));
    let got = kiln_toolchain::fetch::fetch_deb(&cache, &mirrors, &deb).unwrap();
    assert_eq!(sha256(&got), deb.sha256);

    // Other bytes on the server: not taken; with no mirror to fall back on, the error says so.
    fs::write(cas.join(&deb.sha256), b"not the package").unwrap();
    let cache = Cache::at(s.0.join("cache2")).unwrap().with_remote(Some(config()));
    let err = format!("{:#}", kiln_toolchain::fetch::fetch_deb(&cache, &mirrors, &deb).unwrap_err());
    assert!(err.contains("could not download") && err.contains(&deb.name), "{err}");
    assert!(!cache.debs().join(format!("{}.deb", deb.sha256)).exists(), "damaged bytes were kept");
}

/// Set in a child of this test binary, `<cache> <remote url> <netrc> <pin url> <sha256>`:
/// the child fetches that pinned wheel into that cache through that remote
/// and prints what it got, so that its parent reads its warnings too.
const WHEEL_CHILD: &str = "KILN_TEST_WHEEL_CHILD";
const WHEEL_TEST: &str = "pinned_wheels_come_from_the_remote_checked_against_their_pins";

/// The child's part of [`WHEEL_TEST`].
fn fetch_wheel_here(spec: &str) {
    let [cache, url, netrc, pin_url, pinned] = spec.split(' ').collect::<Vec<_>>()[..] else { panic!("{WHEEL_CHILD}=`{spec}`") };
    let mut config = remote::Config::new(url).unwrap();
    config.netrc = Some(PathBuf::from(netrc));
    let cache = Cache::at(PathBuf::from(cache)).unwrap().with_remote(Some(config));
    let pin = kiln_pins::WheelPin { package: "kiln-test-wheel".into(), version: "1.0".into(), url: pin_url.into(), sha256: pinned.into() };
    match kiln_toolchain::wheel::fetch_wheel(&cache, &pin) {
        Ok(path) => println!("fetched {} with sha256 {}", path.display(), sha256(&path)),
        Err(e) => println!("failed: {e:#}"),
    }
    println!("{}", cache.remote().unwrap().summary());
}

/// What the child says when it fetches the wheel `sha256` from `pin_url`
/// into a new cache `cache`, through `server`.
fn fetch_wheel_in_child(cache: &Path, server: &Nginx, pin_url: &str, sha256: &str) -> String {
    let spec = format!("{} {} {} {pin_url} {sha256}", cache.display(), server.url(), server.netrc.display());
    let o = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", WHEEL_TEST, "--nocapture", "--test-threads=1"])
        .env(WHEEL_CHILD, spec)
        .env_remove(kiln_toolchain::wheel::SEED_ENV)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    text(&o)
}

#[test]
fn pinned_wheels_come_from_the_remote_checked_against_their_pins() {
    if let Ok(spec) = std::env::var(WHEEL_CHILD) {
        return fetch_wheel_here(&spec);
    }
    let s = scratch("remote-wheels");
    let server = Nginx::start(&s.0.join("nginx"));
    // A wheel is fetched and checked as bytes (what is in it is read later, against its RECORD).
    let wheel = b"the bytes of a pinned wheel".to_vec();
    let sha = kiln_manifest::sha256_hex(&wheel);
    let cas = server.root.join("kiln/cas");
    fs::create_dir_all(&cas).unwrap();
    fs::write(cas.join(&sha), &wheel).unwrap();
    // The pin's URL answers nothing (a closed port): the server is the only place that has it.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dead = format!("http://127.0.0.1:{closed}/kiln_test_wheel-1.0-py3-none-any.whl");
    let said = fetch_wheel_in_child(&s.0.join("cache"), &server, &dead, &sha);
    let kept = s.0.join("cache/wheels").join(format!("{sha}.whl"));
    assert!(said.contains(&format!("fetched {} with sha256 {sha}", kept.display())), "{said}");
    assert!(said.contains(&format!("remote cache {}: 1 hits, 0 misses", server.url())), "{said}");

    // Other bytes on the server: refused, the warning naming the server and the object; with
    // the pin's URL dead, the error names that URL, and nothing is kept.
    fs::write(cas.join(&sha), b"not the wheel").unwrap();
    let said = fetch_wheel_in_child(&s.0.join("cache2"), &server, &dead, &sha);
    assert!(said.contains(&format!("warning: remote cache {}: cas/{sha} is damaged", server.url())), "{said}");
    assert!(said.contains("failed: ") && said.contains(&dead), "{said}");
    assert!(said.contains("1 damaged (ignored)"), "{said}");
    assert!(!s.0.join("cache2/wheels").join(format!("{sha}.whl")).exists(), "damaged bytes were kept");

    // The pin's URL live: downloaded, checked, and written back over the server's damaged copy.
    let pypi = server.root.join("pypi");
    fs::create_dir_all(&pypi).unwrap();
    fs::write(pypi.join("kiln_test_wheel-1.0-py3-none-any.whl"), &wheel).unwrap();
    let live = format!("http://127.0.0.1:{}/pypi/kiln_test_wheel-1.0-py3-none-any.whl", server.port);
    let said = fetch_wheel_in_child(&s.0.join("cache3"), &server, &live, &sha);
    assert!(said.contains(&format!("with sha256 {sha}")) && said.contains("1 stored"), "{said}");
    assert_eq!(fs::read(cas.join(&sha)).unwrap(), wheel, "the write-back did not repair the server's copy");
}
