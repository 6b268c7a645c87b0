//! Which registry a name means, and what it already holds: cargo's own
//! configuration (`CARGO_REGISTRIES_<NAME>_INDEX`, `[registries.NAME]` in
//! `.cargo/config.toml` from the working directory up, then in
//! `$CARGO_HOME`), its `config.json`, and its sparse index.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::http::{self, check_token};

/// Where cargo's configuration is looked up; the real process environment
/// in the CLI, a given one in tests.
pub struct Lookup {
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
}

impl Lookup {
    pub fn from_process() -> Result<Lookup> {
        Ok(Lookup { env: std::env::vars().collect(), cwd: std::env::current_dir()? })
    }

    fn cargo_home(&self) -> Option<PathBuf> {
        self.env.get("CARGO_HOME").map(PathBuf::from).or_else(|| self.env.get("HOME").map(|h| Path::new(h).join(".cargo")))
    }

    /// Cargo's config files, most specific first.
    fn config_files(&self) -> Vec<PathBuf> {
        let mut files = Vec::new();
        let mut dirs: Vec<PathBuf> = self.cwd.ancestors().map(|d| d.join(".cargo")).collect();
        if let Some(home) = self.cargo_home() {
            dirs.push(home);
        }
        for dir in dirs {
            for name in ["config.toml", "config"] {
                let f = dir.join(name);
                if f.is_file() && !files.contains(&f) {
                    files.push(f);
                    break;
                }
            }
        }
        files
    }
}

/// `CARGO_REGISTRIES_<NAME>_<KEY>` for a registry name.
pub fn env_key(name: &str, key: &str) -> String {
    format!("CARGO_REGISTRIES_{}_{key}", name.to_uppercase().replace('-', "_"))
}

pub const CRATES_IO: &str = "crates-io";
const CRATES_IO_SPARSE: &str = "sparse+https://index.crates.io/";

#[derive(Clone, Debug)]
pub struct Registry {
    pub name: String,
    /// As configured: `sparse+http(s)://.../`.
    pub index: String,
    /// Where the index was configured (for messages).
    pub index_from: String,
    pub token: Option<String>,
    pub token_from: Option<String>,
}

/// The registry's `config.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Config {
    pub dl: String,
    pub api: Option<String>,
    #[serde(default, rename = "auth-required")]
    pub auth_required: bool,
}

/// One line of a sparse index file (the fields kiln reads or writes).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct IndexEntry {
    pub name: String,
    pub vers: String,
    pub deps: Vec<IndexDep>,
    pub cksum: String,
    pub features: BTreeMap<String, Vec<String>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub features2: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub yanked: bool,
    #[serde(default)]
    pub links: Option<String>,
    #[serde(default = "one")]
    pub v: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rust_version: Option<String>,
}

impl Config {
    /// A registry's `config.json` as served from `url`: its `dl` and `api`
    /// must be http(s) URLs, since kiln sends the registry's token to `api`
    /// and a `file://` one once had curl read a local file into the error.
    pub fn parse(url: &str, body: &[u8]) -> Result<Config> {
        let config: Config = serde_json::from_slice(body).with_context(|| format!("{url} is not a registry config.json"))?;
        for (field, value) in [("dl", Some(&config.dl)), ("api", config.api.as_ref())] {
            if let Some(v) = value.filter(|v| !is_http(v)) {
                bail!("{url}: `{field}` is {v:?}, not an http:// or https:// URL: kiln talks to a registry over HTTP only (check the registry's configuration)");
            }
        }
        Ok(config)
    }
}

/// A crate's download URL from a registry's `dl`, as cargo forms it: the
/// markers replaced, or `/{crate}/{version}/download` appended when it has none.
pub fn dl_url(dl: &str, name: &str, version: &str, cksum: &str) -> String {
    const MARKERS: [&str; 5] = ["{crate}", "{version}", "{prefix}", "{lowerprefix}", "{sha256-checksum}"];
    if !MARKERS.iter().any(|m| dl.contains(m)) {
        return format!("{}/{name}/{version}/download", dl.trim_end_matches('/'));
    }
    let prefix = index_path(name);
    let prefix = prefix.rsplit_once('/').map_or("", |(p, _)| p).to_string();
    dl.replace("{crate}", name)
        .replace("{version}", version)
        .replace("{prefix}", &prefix)
        .replace("{lowerprefix}", &prefix.to_lowercase())
        .replace("{sha256-checksum}", cksum)
}

/// Whether `url` is an `http://` or `https://` URL (scheme in any case).
pub fn is_http(url: &str) -> bool {
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    matches!(scheme.as_deref(), Some("http" | "https"))
}

fn one() -> u32 {
    1
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct IndexDep {
    /// The name in `[dependencies]` (renamed, if it is).
    pub name: String,
    pub req: String,
    // Read as leniently as cargo reads them: a registry may leave out what is
    // empty or default (ferro-cargo-registry-server leaves out empty `features`).
    #[serde(default)]
    pub features: Vec<String>,
    #[serde(default)]
    pub optional: bool,
    #[serde(default = "yes")]
    pub default_features: bool,
    #[serde(default)]
    pub target: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub registry: Option<String>,
    /// The package's real name, when `name` renames it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
}

fn yes() -> bool {
    true
}

/// The index path of a crate name (cargo's rules: `1/a`, `2/ab`, `3/a/abc`,
/// `ab/cd/abcd...`), lowercased.
pub fn index_path(name: &str) -> String {
    let n = name.to_lowercase();
    // By characters: a name read from a file may not be ASCII (cargo refuses such names; kiln must not panic on one).
    let c: Vec<char> = n.chars().collect();
    let part = |r: std::ops::Range<usize>| c[r].iter().collect::<String>();
    match c.len() {
        0..=2 => format!("{}/{n}", c.len()),
        3 => format!("3/{}/{n}", part(0..1)),
        _ => format!("{}/{}/{n}", part(0..2), part(2..4)),
    }
}

impl Registry {
    pub fn resolve(name: &str, lookup: &Lookup) -> Result<Registry> {
        let (index, index_from) = if let Some(v) = lookup.env.get(&env_key(name, "INDEX")) {
            (v.clone(), env_key(name, "INDEX"))
        } else if let Some((v, file)) = from_config_files(lookup, name, "index")? {
            (v, file.display().to_string())
        } else if name == CRATES_IO {
            (CRATES_IO_SPARSE.to_string(), "cargo's default".to_string())
        } else {
            bail!(
                "registry `{name}` is not configured: set {}=sparse+https://HOST/PATH/ or add\n  [registries.{name}]\n  index = \"sparse+https://HOST/PATH/\"\nto .cargo/config.toml (here or in $CARGO_HOME)",
                env_key(name, "INDEX")
            );
        };
        if !index.strip_prefix("sparse+").is_some_and(is_http) {
            bail!(
                "registry `{name}` has index {index} (from {index_from}): kiln publishes to sparse registries only (`sparse+https://...`); a git index needs `cargo publish`"
            );
        }
        let (token, token_from) = token(name, lookup)?;
        Ok(Registry { name: name.to_string(), index, index_from, token, token_from })
    }

    /// The index's base URL, `http(s)://.../` (no `sparse+`, one trailing slash).
    pub fn index_base(&self) -> String {
        format!("{}/", self.index.trim_start_matches("sparse+").trim_end_matches('/'))
    }

    pub fn is_crates_io(&self) -> bool {
        crate::metadata::same_index(&self.index, CRATES_IO_SPARSE) || crate::metadata::same_index(&self.index, crate::CRATES_IO_INDEX)
    }

    pub fn config(&self) -> Result<Config> {
        let url = format!("{}config.json", self.index_base());
        let mut r = http::get(&url, None)?;
        if r.status == 401 && self.token.is_some() {
            r = http::get(&url, self.token.as_deref())?;
        }
        if r.status != 200 {
            bail!("{url}: HTTP {} {}", r.status, r.text().trim());
        }
        Config::parse(&url, &r.body)
    }

    /// The `.crate` of `name` `version` (build metadata aside, as registries
    /// compare versions), downloaded from the registry's `dl` and checked
    /// against the sha256 its index lists before it is returned.
    pub fn download(&self, name: &str, version: &str) -> Result<Vec<u8>> {
        // Never a request for a name that is no crate's (`../../etc/passwd` would reach other paths).
        check_crate_name(name).map_err(|why| anyhow::anyhow!("`{name}` is not a crate name: it {why}"))?;
        let config = self.config()?;
        let entries = self.entries(&config, name)?;
        let Some(e) = entries.iter().find(|e| crate::same_version(&e.vers, version)) else {
            let listed: Vec<String> = entries.iter().map(|e| kiln_manifest::shown(&e.vers).into_owned()).collect();
            bail!(
                "registry `{}` has no {} {} (its index lists: {})",
                self.name,
                kiln_manifest::shown(name),
                kiln_manifest::shown(version),
                if listed.is_empty() { "none".into() } else { listed.join(", ") }
            );
        };
        let url = dl_url(&config.dl, name, &e.vers, &e.cksum);
        let token = if config.auth_required { self.token.as_deref() } else { None };
        let r = http::get(&url, token)?;
        if r.status != 200 {
            bail!("{}: HTTP {} when downloading {name} {}", kiln_manifest::shown(&url), r.status, kiln_manifest::shown(&e.vers));
        }
        let sha = kiln_manifest::sha256_hex(&r.body);
        if sha != e.cksum {
            bail!(
                "{}: sha256 {sha}, but registry `{}`'s index lists {} for {} {}: the registry served other bytes than it indexed",
                kiln_manifest::shown(&url),
                self.name,
                kiln_manifest::shown(&e.cksum),
                kiln_manifest::shown(name),
                kiln_manifest::shown(&e.vers)
            );
        }
        Ok(r.body)
    }

    /// The versions of `name` the index lists (none when it has no file).
    pub fn entries(&self, config: &Config, name: &str) -> Result<Vec<IndexEntry>> {
        let url = format!("{}{}", self.index_base(), index_path(name));
        let token = if config.auth_required { self.token.as_deref() } else { None };
        let r = http::get(&url, token)?;
        match r.status {
            200 => r
                .text()
                .lines()
                .filter(|l| !l.trim().is_empty())
                .enumerate()
                .map(|(i, l)| {
                    // The server's line, shown cut and escaped: it may be huge or hold terminal control codes.
                    serde_json::from_str(l)
                        .with_context(|| format!("{url}: line {} is not an index entry: {}", i + 1, kiln_manifest::short(l, 200).escape_default()))
                })
                .collect(),
            // What cargo also reads as "no such crate".
            404 | 410 | 451 => Ok(Vec::new()),
            s => bail!("{url}: HTTP {s} {}", r.text().trim()),
        }
    }
}

fn from_config_files(lookup: &Lookup, name: &str, key: &str) -> Result<Option<(String, PathBuf)>> {
    for file in lookup.config_files() {
        let text = fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
        let table: toml::Table = text.parse().with_context(|| format!("{} does not parse", file.display()))?;
        let table_name = if name == CRATES_IO { None } else { Some(name) };
        let value = match table_name {
            Some(n) => table.get("registries").and_then(|r| r.get(n)).and_then(|r| r.get(key)),
            None => table.get("registry").and_then(|r| r.get(key)),
        };
        if let Some(v) = value.and_then(|v| v.as_str()) {
            return Ok(Some((v.to_string(), file)));
        }
    }
    Ok(None)
}

/// The token cargo would use: its environment variable, else
/// `$CARGO_HOME/credentials.toml` (where `cargo login` writes it).
fn token(name: &str, lookup: &Lookup) -> Result<(Option<String>, Option<String>)> {
    let var = if name == CRATES_IO { "CARGO_REGISTRY_TOKEN".to_string() } else { env_key(name, "TOKEN") };
    if let Some(t) = lookup.env.get(&var) {
        check_token(t, &format!("the environment variable {var}"))?;
        return Ok((Some(t.clone()), Some(var)));
    }
    let Some(home) = lookup.cargo_home() else { return Ok((None, None)) };
    for f in ["credentials.toml", "credentials"] {
        let path = home.join(f);
        let Ok(text) = fs::read_to_string(&path) else { continue };
        let table: toml::Table = text.parse().with_context(|| format!("{} does not parse", path.display()))?;
        let t = if name == CRATES_IO {
            table.get("registry").and_then(|r| r.get("token"))
        } else {
            table.get("registries").and_then(|r| r.get(name)).and_then(|r| r.get("token"))
        };
        if let Some(t) = t.and_then(|t| t.as_str()) {
            check_token(t, &path.display().to_string())?;
            return Ok((Some(t.to_string()), Some(path.display().to_string())));
        }
    }
    Ok((None, None))
}

/// A token is sent as one HTTP header line: a newline or any other control
/// character in it could add headers, so
/// it is refused, naming where it came from and never showing it.
/// `NAME@VERSION` as `verify-crate` takes it: NAME by cargo's rules for a
/// crate name (ASCII letters, digits, `-` and `_`, at most 64, starting with
/// a letter) and VERSION a semver version, both checked before any request;
/// errors name the argument (`what`) and what is wrong.
pub fn name_at_version(arg: &str, what: &str) -> Result<(String, String)> {
    let shown: String = arg.chars().take(100).flat_map(char::escape_default).collect();
    let Some((name, version)) = arg.split_once('@') else {
        bail!("{what} `{shown}` is neither a .crate file nor NAME@VERSION (e.g. kiln-candle-kernels-sm90@0.11.1+kiln.1)")
    };
    check_crate_name(name).map_err(|why| anyhow::anyhow!("{what} `{shown}`: the name {why}"))?;
    semver::Version::parse(version).map_err(|e| anyhow::anyhow!("{what} `{shown}`: the version is not a semver version ({e})"))?;
    Ok((name.to_string(), version.to_string()))
}

/// Whether `name` is a crate name by cargo's rules; else why not.
pub fn check_crate_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("is empty".into());
    }
    if name.len() > 64 {
        return Err(format!("is {} characters long; a crate name has at most 64", name.len()));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Err("does not start with an ASCII letter".into());
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_')) {
        return Err(format!("holds {c:?}; a crate name is ASCII letters, digits, `-` and `_` only"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {

    /// Issue 34: `verify-crate NAME@VERSION` sent NAME to the registry
    /// unchecked (`../../../etc/passwd@1.0.0`); now cargo's rules for a name
    /// and semver for the version hold before any request, the argument named.
    #[test]
    fn name_at_version_follows_cargos_rules_before_any_request() {
        assert_eq!(
            name_at_version("kiln-candle-kernels_sm90@0.11.1+kiln.1", "CRATE").unwrap(),
            ("kiln-candle-kernels_sm90".into(), "0.11.1+kiln.1".into())
        );
        let long = format!("{}@1.0.0", "a".repeat(65));
        for (arg, why) in [
            ("../../../etc/passwd@1.0.0", "does not start with an ASCII letter"),
            ("a/../b@1.0.0", "holds '/'"),
            ("@1.0.0", "is empty"),
            ("1abc@1.0.0", "does not start"),
            ("abc\u{e9}@1.0.0", "ASCII letters"),
            (long.as_str(), "at most 64"),
            ("abc@1.0", "not a semver version"),
            ("abc@../1.0.0", "not a semver version"),
            ("abc", "neither a .crate file nor NAME@VERSION"),
        ] {
            let e = format!("{:#}", name_at_version(arg, "CRATE").unwrap_err());
            assert!(e.contains("CRATE `") && e.contains(why), "{arg}: {e}");
        }
        let registry =
            Registry { name: "r".into(), index: "sparse+http://127.0.0.1:9/".into(), index_from: "test".into(), token: None, token_from: None };
        assert!(format!("{:#}", registry.download("../x", "1.0.0").unwrap_err()).contains("not a crate name"));
    }
    use super::*;

    #[test]
    fn tokens_with_control_characters_are_refused_without_showing_them() {
        let secret = "s3cret\noutput = /tmp/pwned";
        let err = format!("{:#}", check_token(secret, "the environment variable CARGO_REGISTRIES_KILN_TOKEN").unwrap_err());
        assert!(err.contains("CARGO_REGISTRIES_KILN_TOKEN") && err.contains("U+000A"), "{err}");
        assert!(!err.contains("s3cret") && !err.contains("pwned"), "the message shows the token: {err}");
        assert!(check_token("tab\tinside", "x").is_err());
        assert!(check_token("cio_abcDEF123-._~+/=", "x").is_ok());
        // Through the lookup, from the environment and from credentials.toml.
        let dir = std::env::temp_dir().join(format!("kiln-token-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let lookup =
            |env: Vec<(&str, &str)>| Lookup { env: env.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), cwd: dir.clone() };
        let err = format!("{:#}", token("kiln", &lookup(vec![("CARGO_REGISTRIES_KILN_TOKEN", secret)])).unwrap_err());
        assert!(err.contains("CARGO_REGISTRIES_KILN_TOKEN") && !err.contains("s3cret"), "{err}");
        fs::write(dir.join("credentials.toml"), "[registries.kiln]\ntoken = \"abc\\r\\nx\"\n").unwrap();
        let err = format!("{:#}", token("kiln", &lookup(vec![("CARGO_HOME", dir.to_str().unwrap())])).unwrap_err());
        assert!(err.contains("credentials.toml") && err.contains("U+000D"), "{err}");
        fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_config_whose_dl_or_api_is_not_http_is_refused_naming_the_field() {
        let url = "http://127.0.0.1:1/config.json";
        let ok = Config::parse(url, br#"{"dl":"http://127.0.0.1:1/dl","api":"HTTPS://registry.example"}"#).unwrap();
        assert_eq!(ok.api.as_deref(), Some("HTTPS://registry.example"));
        // What made `publish --execute` print the environment: curl (then kiln's client) read the file into the error.
        let e = format!("{:#}", Config::parse(url, br#"{"dl":"http://127.0.0.1:1/dl","api":"file:///proc/self/environ#"}"#).unwrap_err());
        assert!(e.starts_with(url) && e.contains("`api` is \"file:///proc/self/environ#\", not an http:// or https:// URL"), "{e}");
        for dl in ["ftp://x/", "/srv/crates", "gopher://x"] {
            let body = format!(r#"{{"dl":"{dl}"}}"#);
            let e = format!("{:#}", Config::parse(url, body.as_bytes()).unwrap_err());
            assert!(e.contains("`dl` is"), "{dl}: {e}");
        }
        assert!(format!("{:#}", Config::parse(url, b"<html>").unwrap_err()).contains("is not a registry config.json"));
    }

    #[test]
    fn index_paths_follow_cargo() {
        assert_eq!(index_path("a"), "1/a");
        assert_eq!(index_path("ab"), "2/ab");
        assert_eq!(index_path("abc"), "3/a/abc");
        assert_eq!(index_path("Kiln-Manifest"), "ki/ln/kiln-manifest");
        assert_eq!(index_path("aébc"), "aé/bc/aébc", "a name read from a file is cut by characters, never a panic");
    }

    #[test]
    fn resolves_from_env_then_config_then_fails_clearly() {
        let dir = std::env::temp_dir().join(format!("kiln-publish-registry-{}", std::process::id()));
        let nested = dir.join("a/b");
        fs::create_dir_all(nested.join(".cargo")).unwrap();
        fs::create_dir_all(dir.join(".cargo")).unwrap();
        fs::write(dir.join(".cargo/config.toml"), "[registries.my-reg]\nindex = \"sparse+http://outer/\"\n").unwrap();
        fs::write(nested.join(".cargo/config.toml"), "[registries.my-reg]\nindex = \"sparse+http://inner/\"\n").unwrap();
        let home = dir.join("home");
        fs::create_dir_all(&home).unwrap();
        fs::write(home.join("credentials.toml"), "[registries.my-reg]\ntoken = \"from-file\"\n").unwrap();
        let mut env = BTreeMap::from([("CARGO_HOME".to_string(), home.display().to_string())]);
        let lookup = |env: &BTreeMap<String, String>| Lookup { env: env.clone(), cwd: nested.clone() };

        let r = Registry::resolve("my-reg", &lookup(&env)).unwrap();
        assert_eq!(r.index, "sparse+http://inner/", "the nearest config file wins");
        assert_eq!(r.token.as_deref(), Some("from-file"));

        env.insert("CARGO_REGISTRIES_MY_REG_INDEX".into(), "sparse+http://env/".into());
        env.insert("CARGO_REGISTRIES_MY_REG_TOKEN".into(), "from-env".into());
        let r = Registry::resolve("my-reg", &lookup(&env)).unwrap();
        assert_eq!((r.index.as_str(), r.token.as_deref()), ("sparse+http://env/", Some("from-env")));
        assert_eq!(r.index_base(), "http://env/");

        let err = Registry::resolve("other", &lookup(&env)).unwrap_err().to_string();
        assert!(err.contains("registry `other` is not configured") && err.contains("CARGO_REGISTRIES_OTHER_INDEX"), "{err}");

        env.insert("CARGO_REGISTRIES_GIT_INDEX".into(), "https://example.com/index.git".into());
        let err = Registry::resolve("git", &lookup(&env)).unwrap_err().to_string();
        assert!(err.contains("sparse registries only"), "{err}");
        env.insert("CARGO_REGISTRIES_LOCAL_INDEX".into(), "sparse+file:///srv/index/".into());
        let err = Registry::resolve("local", &lookup(&env)).unwrap_err().to_string();
        assert!(err.contains("has index sparse+file:///srv/index/") && err.contains("sparse registries only"), "not http(s): {err}");

        let r = Registry::resolve(CRATES_IO, &lookup(&env)).unwrap();
        assert!(r.is_crates_io(), "{r:?}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
