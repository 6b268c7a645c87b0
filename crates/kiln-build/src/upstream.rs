//! A kernel set's sources when they are a crate from crates.io: fetched by
//! cargo (which checks the registry's checksum), checked again against the
//! pinned sha256, and unpacked into the cache. Upstream sources are never
//! copied into the repo.

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use kiln_toolchain::{cache::publish_dir, fetch, Cache};
use xshell::{cmd, Shell};

/// Names `.crate` files (`:`-separated) to use instead of fetching them with
/// cargo (the Nix build's fixed-output fetches): a crate's is the one whose
/// file name ends with `<name>-<version>.crate`; other crates are fetched.
pub const CRATE_ENV: &str = "KILN_SOURCE_CRATES";

/// An unpacked, verified source crate.
#[derive(Clone, Debug)]
pub struct SourceCrate {
    pub name: String,
    pub version: String,
    pub sha256: String,
    /// The crate root (holds Cargo.toml and src/).
    pub root: PathBuf,
}

/// The marker an unpacked crate carries: the crate's sha256, then the
/// listing of every file unpacked from it ([`listing`]), which each use re-hashes.
const MARKER: &str = ".kiln-verified";

/// Returns the unpacked crate, fetching it with cargo the first time. Each
/// use re-hashes the unpacked tree against the listing recorded when it was
/// unpacked from the checked crate: a tree that differs (a file changed,
/// added or removed; or a marker of an older kiln without a listing) is
/// unpacked again from the crate, checked, and, where it differs, moved
/// aside to the cache's `damaged/` folder with a warning naming the files.
pub fn fetch_crate(cache: &Cache, name: &str, version: &str, sha256: &str, say: &dyn Fn(String)) -> Result<SourceCrate> {
    // A `.crate` handed in (by the Nix build, which fetches it itself) is
    // checked exactly like one cargo fetched.
    let find = || {
        let handed_in = std::env::var(CRATE_ENV).unwrap_or_default();
        let ours = handed_in.split(':').find(|f| !f.is_empty() && f.ends_with(&format!("{name}-{version}.crate")));
        match ours {
            Some(file) => Ok(PathBuf::from(file)),
            None => cargo_fetch(cache, name, version, say),
        }
    };
    unpacked(cache, name, version, sha256, &find, say)
}

/// [`fetch_crate`], the crate file found by `find` when it is needed.
fn unpacked(cache: &Cache, name: &str, version: &str, sha256: &str, find: &dyn Fn() -> Result<PathBuf>, say: &dyn Fn(String)) -> Result<SourceCrate> {
    let dest = cache.sources().join(format!("{name}-{version}-{}", &sha256[..16]));
    let done = |root: PathBuf| SourceCrate { name: name.into(), version: version.into(), sha256: sha256.into(), root };
    let marker = fs::read_to_string(dest.join(MARKER)).ok();
    if let Some(marker) = &marker {
        if listing(&dest).is_ok_and(|l| *marker == format!("{sha256}\n{l}")) {
            return Ok(done(dest));
        }
    }

    let crate_file = find()?;
    let actual = fetch::sha256_file(&crate_file)?;
    if actual != sha256 {
        bail!(fetch::HashMismatch { what: format!("{name} {version}"), url: crate_file.display().to_string(), expected: sha256.into(), actual });
    }

    let tmp = cache.scratch("source")?;
    let inner = tmp.join(format!("{name}-{version}"));
    let unpacked = (|| -> Result<String> {
        // kiln's one bounded reader: regular files only, inside the package folder, within its limits.
        let bytes = kiln_package::crate_file::read(&crate_file)?;
        let what = crate_file.display().to_string();
        kiln_package::crate_file::for_each(&bytes[..], &what, kiln_package::crate_file::LIMITS, |e, data| {
            let to = kiln_manifest::path_inside(&tmp, &format!("{}/{}", e.top, e.rel)).map_err(|why| anyhow::anyhow!("{what}: {why}"))?;
            fs::create_dir_all(to.parent().expect("a file inside the scratch folder has a parent"))?;
            fs::write(&to, data).with_context(|| format!("cannot write {}", to.display()))
        })?;
        if !inner.join("Cargo.toml").exists() {
            bail!("{} does not hold {name}-{version}/Cargo.toml", crate_file.display());
        }
        let fresh = listing(&inner)?;
        fs::write(inner.join(MARKER), format!("{sha256}\n{fresh}"))?;
        Ok(fresh)
    })();
    let fresh = match unpacked {
        Ok(l) => l,
        Err(e) => {
            fs::remove_dir_all(&tmp).ok();
            return Err(e);
        }
    };
    // A copy already there (an older marker, a damaged tree, or none: never trusted unmarked).
    if dest.exists() {
        match listing(&dest) {
            // The same files under an older marker: only the marker is renewed.
            Ok(here) if here == fresh => {
                let renewed = dest.join(format!("{MARKER}.{}", std::process::id()));
                fs::write(&renewed, format!("{sha256}\n{fresh}"))?;
                fs::rename(&renewed, dest.join(MARKER))?;
                fs::remove_dir_all(&tmp).ok();
                return Ok(done(dest));
            }
            here => {
                let what = match here {
                    Ok(here) => differing(&here, &fresh),
                    Err(e) => format!("{e:#}"),
                };
                let aside = cache.root().join("damaged").join(format!(
                    "source-{name}-{version}.{}.{}",
                    std::process::id(),
                    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
                ));
                fs::create_dir_all(aside.parent().expect("damaged/ has a parent"))?;
                fs::rename(&dest, &aside).with_context(|| format!("cannot move the damaged {} aside", dest.display()))?;
                say(format!(
                    "warning: the unpacked {name} {version} in {} differs from its checked crate ({what}); moved it to {} and unpacked it again",
                    dest.display(),
                    aside.display()
                ));
            }
        }
    }
    publish_dir(&inner, &dest)?;
    fs::remove_dir_all(&tmp).ok();
    Ok(done(dest))
}

/// Every file below `root` but the marker, one `<sha256> <relative path>`
/// line each, sorted; a link or anything else that is not a file or folder is refused.
fn listing(root: &Path) -> Result<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
        for e in fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
            let e = e?;
            let t = e.file_type()?;
            let rel = e.path().strip_prefix(root).expect("below the root").to_string_lossy().into_owned();
            if t.is_dir() {
                walk(root, &e.path(), out)?;
            } else if t.is_file() {
                if !rel.starts_with(MARKER) {
                    out.push(format!("{} {rel}", fetch::sha256_file(&e.path())?));
                }
            } else {
                bail!("{} is not a file or folder", e.path().display());
            }
        }
        Ok(())
    }
    let mut lines = Vec::new();
    walk(root, root, &mut lines)?;
    lines.sort_by(|a, b| a.split_once(' ').map(|x| x.1).cmp(&b.split_once(' ').map(|x| x.1)));
    Ok(lines.iter().map(|l| format!("{l}\n")).collect())
}

/// The files whose lines differ between two listings, named (at most 5).
fn differing(here: &str, fresh: &str) -> String {
    let (h, f): (std::collections::BTreeSet<&str>, std::collections::BTreeSet<&str>) = (here.lines().collect(), fresh.lines().collect());
    let mut names: Vec<&str> = h.symmetric_difference(&f).map(|l| l.split_once(' ').map_or(*l, |x| x.1)).collect();
    names.sort();
    names.dedup();
    let n = names.len();
    names.truncate(5);
    format!("{n} file(s): {}{}", names.join(", "), if n > 5 { ", ..." } else { "" })
}

/// Has cargo download `name` `version` and returns the `.crate` file.
fn cargo_fetch(cache: &Cache, name: &str, version: &str, say: &dyn Fn(String)) -> Result<PathBuf> {
    let sh = Shell::new()?;
    let dir = cache.root().join("fetch").join(format!("{name}-{version}"));
    fs::create_dir_all(&dir)?;
    // A throwaway package whose only dependency is the pinned crate.
    fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"kiln-fetch\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\
             [lib]\npath = \"lib.rs\"\n[dependencies]\n{name} = \"={version}\"\n[workspace]\n"
        ),
    )?;
    fs::write(dir.join("lib.rs"), "")?;
    let manifest = dir.join("Cargo.toml");
    say(format!("fetching {name} {version} with cargo"));
    if cmd!(sh, "cargo fetch --offline --quiet --manifest-path {manifest}").quiet().ignore_stderr().run().is_err() {
        cmd!(sh, "cargo fetch --quiet --manifest-path {manifest}")
            .quiet()
            .run()
            .with_context(|| format!("cargo could not fetch {name} {version} from crates.io"))?;
    }
    find_in_cargo_cache(name, version)
}

fn find_in_cargo_cache(name: &str, version: &str) -> Result<PathBuf> {
    let home = match std::env::var_os("CARGO_HOME") {
        Some(h) => PathBuf::from(h),
        None => PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?).join(".cargo"),
    };
    let registry = home.join("registry/cache");
    let file = format!("{name}-{version}.crate");
    for entry in fs::read_dir(&registry).with_context(|| format!("cannot read {}", registry.display()))? {
        let candidate = entry?.path().join(&file);
        if candidate.exists() {
            return Ok(candidate);
        }
    }
    bail!("cargo fetched {name} {version} but {file} is not under {}", registry.display())
}

impl SourceCrate {
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `.crate` (gzipped tar of `demo-1.0.0/`) with a manifest and one source file.
    fn demo_crate(dir: &Path) -> PathBuf {
        let file = dir.join("demo-1.0.0.crate");
        let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(fs::File::create(&file).unwrap(), flate2::Compression::default()));
        for (path, text) in [("demo-1.0.0/Cargo.toml", "[package]\nname = \"demo\"\n"), ("demo-1.0.0/src/kernel.cu", "__global__ void k() {}\n")] {
            let mut h = tar::Header::new_gnu();
            h.set_size(text.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            tar.append_data(&mut h, path, text.as_bytes()).unwrap();
        }
        tar.into_inner().unwrap().finish().unwrap();
        file
    }

    #[test]
    fn the_unpacked_source_crate_is_re_hashed_on_every_use() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::at(tmp.path().join("cache")).unwrap();
        let file = demo_crate(tmp.path());
        let sha = fetch::sha256_file(&file).unwrap();
        let said = std::cell::RefCell::new(Vec::new());
        let say = |l: String| said.borrow_mut().push(l);
        let find = || Ok(file.clone());
        let c = unpacked(&cache, "demo", "1.0.0", &sha, &find, &say).unwrap();
        let kernel = c.path("src/kernel.cu");
        // Intact: used as it is, without the crate.
        let no_crate = || -> Result<PathBuf> { bail!("the crate is not needed for an intact tree") };
        unpacked(&cache, "demo", "1.0.0", &sha, &no_crate, &say).unwrap();
        assert!(said.borrow().is_empty(), "{:?}", said.borrow());
        // A file changed after the tree was marked verified: found, moved aside, unpacked again.
        fs::write(&kernel, "__global__ void k() { /* planted */ }\n").unwrap();
        let again = unpacked(&cache, "demo", "1.0.0", &sha, &find, &say).unwrap();
        assert_eq!(fs::read_to_string(again.path("src/kernel.cu")).unwrap(), "__global__ void k() {}\n");
        let said_now = said.borrow().join("\n");
        assert!(said_now.contains("differs from its checked crate") && said_now.contains("src/kernel.cu"), "{said_now}");
        assert!(fs::read_dir(cache.root().join("damaged")).unwrap().count() == 1, "the damaged tree is kept aside");
        // A file added is found too, and so is a marker of an older kiln (no listing) over a changed tree.
        fs::write(again.path("src/extra.cu"), "").unwrap();
        fs::write(again.path(MARKER), format!("{sha}\n")).unwrap();
        let e = unpacked(&cache, "demo", "1.0.0", &sha, &no_crate, &say).unwrap_err();
        assert!(format!("{e:#}").contains("not needed"), "a changed tree is never used as it is: {e:#}");
        unpacked(&cache, "demo", "1.0.0", &sha, &find, &say).unwrap();
        assert!(!again.path("src/extra.cu").exists() && said.borrow().last().unwrap().contains("src/extra.cu"), "{:?}", said.borrow());
        // An older marker over an intact tree is renewed in place, nothing moved.
        fs::write(again.path(MARKER), format!("{sha}\n")).unwrap();
        unpacked(&cache, "demo", "1.0.0", &sha, &find, &say).unwrap();
        assert_eq!(fs::read_dir(cache.root().join("damaged")).unwrap().count(), 2);
        unpacked(&cache, "demo", "1.0.0", &sha, &no_crate, &say).unwrap();
        // No marker at all over a changed tree: never trusted, replaced.
        fs::remove_file(again.path(MARKER)).unwrap();
        fs::write(again.path("Cargo.toml"), "[package]\nname = \"planted\"\n").unwrap();
        unpacked(&cache, "demo", "1.0.0", &sha, &find, &say).unwrap();
        assert!(fs::read_to_string(again.path("Cargo.toml")).unwrap().contains("demo") && said.borrow().last().unwrap().contains("Cargo.toml"));
    }
}
