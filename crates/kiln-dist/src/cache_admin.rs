//! `cargo xtask cache`: what is in kiln's cache, whether it is whole, and
//! removing what no current plan uses. Every full dist records what it used
//! (`plans/<checkout>.json`: its cache keys, packaged crates, toolchain,
//! sources, packages), one record per checkout sharing the cache; `gc` keeps
//! the union of the records whose checkout still exists and removes the rest.
//! Nothing is removed from a cache without kiln's marker (`cache::KEPT`: a
//! user's folder, or one an older kiln made, until `cargo xtask cache mark`),
//! and in a marked one only what kiln names, in each area the forms it gives
//! there (`Cache::names_its_own`): entries by their key, `<sha256>.deb`,
//! package keys, toolchain identities, `sources/<crate>-<version>-<16 hex>`,
//! scratch folders no run holds, plan records, and the names kiln gives in
//! `damaged/` and `failed/`. Any other name is kept and reported.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use kiln_build::store::Store;
use kiln_toolchain::{
    cache::{self, dir_size},
    tiers::{self, BlobFault, EntryFault},
    Cache,
};
use serde::{Deserialize, Serialize};

/// What one checkout's last full dist used.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PlanRecord {
    pub checkout: PathBuf,
    pub toolchain: String,
    /// The cross compilers' roots (`toolchains/` names) beside the toolchain.
    #[serde(default)]
    pub cross: Vec<String>,
    /// `sources/` folder names.
    pub sources: Vec<String>,
    /// `debs/` file names.
    pub debs: Vec<String>,
    /// Object-store keys (compiles, archives, bundles, payloads).
    pub keys: Vec<String>,
    /// `objects/packages/` keys.
    pub packages: Vec<String>,
}

fn plans_dir(cache: &Cache) -> PathBuf {
    cache.root().join(cache::PLANS)
}

/// One record per checkout and combination of kernel sets (`variant`: empty
/// for the default sets), so that building an opt-in set alone does not make
/// the default sets' entries look unused, nor the other way round.
fn record_path(cache: &Cache, checkout: &Path, variant: &str) -> PathBuf {
    let mut id = checkout.to_string_lossy().into_owned();
    if !variant.is_empty() {
        id.push('#');
        id.push_str(variant);
    }
    plans_dir(cache).join(format!("{}.json", &kiln_manifest::sha256_hex(id.as_bytes())[..16]))
}

/// Writes this checkout's record (atomically) for the sets named by `variant`.
pub fn record(cache: &Cache, rec: &PlanRecord, variant: &str) -> Result<()> {
    let path = record_path(cache, &rec.checkout, variant);
    fs::create_dir_all(path.parent().unwrap())?;
    let tmp = path.with_extension(format!("json.{}", std::process::id()));
    fs::write(&tmp, serde_json::to_string_pretty(rec)?)?;
    fs::rename(&tmp, &path)?;
    Ok(())
}

fn records(cache: &Cache) -> Result<Vec<(PathBuf, PlanRecord)>> {
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir(plans_dir(cache)) else { return Ok(out) };
    for e in rd.flatten() {
        if !e.file_type().is_ok_and(|t| t.is_file()) || !is_record_name(&e.file_name().to_string_lossy()) {
            continue; // not a record kiln wrote
        }
        let bytes = fs::read(e.path()).with_context(|| format!("cannot read {}", e.path().display()))?;
        // A damaged record keeps nothing (its checkout counts as gone).
        match serde_json::from_slice::<PlanRecord>(&bytes) {
            Ok(r) => out.push((e.path(), r)),
            Err(_) => out.push((e.path(), PlanRecord::default())),
        }
    }
    Ok(out)
}

/// `<16 hex>.json`: what [`record_path`] names (its temporary file aside).
fn is_record_name(name: &str) -> bool {
    name.ends_with(".json") && Cache::names_its_own(cache::PLANS, name)
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        fs::read_dir(dir).map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default();
    v.sort();
    v
}

/// Every object-store entry: (key, entry folder).
fn entries(cache: &Cache) -> Vec<(String, PathBuf)> {
    let store = Store::new(cache);
    let mut out = Vec::new();
    for shard in names(&cache.objects()) {
        if shard.len() != 2 {
            continue; // `packages/` and anything else kiln keeps beside the entries
        }
        // Only folders named by a key of this shard are entries: anything
        // else there (a stray file) is not kiln's to check or remove.
        for key in names(&cache.objects().join(&shard)) {
            if !kiln_manifest::is_sha256_hex(&key) || !key.starts_with(&shard) {
                continue;
            }
            let dir = store.entry(&key);
            if dir.is_dir() {
                out.push((key, dir));
            }
        }
    }
    out
}

/// Bytes per area of the cache, largest first.
pub fn sizes(cache: &Cache) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = names(cache.root()).into_iter().map(|n| (n.clone(), dir_size(&cache.root().join(&n)))).collect();
    v.sort_by_key(|(_, bytes)| std::cmp::Reverse(*bytes));
    v
}

/// One damaged thing, and why.
#[derive(Clone, Debug)]
pub struct Damage {
    pub path: PathBuf,
    pub why: String,
}

/// Names in an area kiln checks or cleans that are of no form kiln gives
/// there: never checked, never removed, reported (`area/name`).
fn foreign(area: &str, dir: &Path) -> Vec<String> {
    names(dir).into_iter().filter(|n| !Cache::names_its_own(area, n)).map(|n| format!("{area}/{n}")).collect()
}

/// What [`verify`] found.
#[derive(Debug, Default)]
pub struct Verified {
    pub checked: usize,
    pub damaged: Vec<Damage>,
    /// Names of no form kiln gives in the areas it checks (`debs/notes.deb`,
    /// `objects/packages/mine`): not checked and never removed.
    pub foreign: Vec<String>,
}

/// Checks every entry and download against the sha256 it is named by or
/// recorded with; with `repair`, removes what is damaged. Only names of
/// kiln's forms are checked (so removed); others are reported as foreign.
/// `repair` is refused in a cache without kiln's marker.
pub fn verify(cache: &Cache, repair: bool) -> Result<Verified> {
    if repair {
        cache.check_cleanable()?;
    }
    let mut checked = 0;
    let mut damaged = Vec::new();
    for (key, dir) in entries(cache) {
        checked += 1;
        let why = match tiers::check_entry(&dir, None) {
            Ok(_) => None,
            Err(EntryFault::NoOutput) => Some("the entry holds no output".to_string()),
            Err(EntryFault::NotRecorded) => None, // made before hashes were recorded; recorded at its next use
            Err(EntryFault::Differs { output, actual, recorded }) => Some(format!("{output} has sha256 {actual}, the entry recorded {recorded}")),
            Err(EntryFault::Unreadable { output, error }) => Some(format!("{output}: {error:#}")),
            Err(EntryFault::SeveralOutputs(many)) => Some(format!("more than one output ({})", many.join(", "))),
        };
        if let Some(why) = why {
            damaged.push(Damage { path: dir, why: format!("cache entry {key}: {why}") });
        }
    }
    let mut foreign_names = Vec::new();
    for (area, ext) in [(cache::DEBS, ".deb"), ("bundles", ".hipfb")] {
        let dir = cache.root().join(area);
        foreign_names.extend(foreign(area, &dir));
        for n in names(&dir) {
            let Some(want) = n.strip_suffix(ext).filter(|_| Cache::names_its_own(area, &n)) else { continue };
            checked += 1;
            match tiers::check_blob(&dir.join(&n), want) {
                Ok(()) => {}
                Err(BlobFault::Differs { actual }) => {
                    damaged.push(Damage { path: dir.join(&n), why: format!("{area}/{n} is named by its sha256 but hashes to {actual}") })
                }
                Err(BlobFault::Unreadable(e)) => damaged.push(Damage { path: dir.join(&n), why: format!("{area}/{n}: {e:#}") }),
            }
        }
    }
    let packages = cache.packages();
    foreign_names.extend(foreign(cache::PACKAGES, &packages));
    for key in names(&packages).into_iter().filter(|k| Cache::names_its_own(cache::PACKAGES, k)) {
        checked += 1;
        if let Err(e) = crate::package::verify_cached(&packages.join(&key)) {
            damaged.push(Damage { path: packages.join(&key), why: format!("packaged crates {key}: {e:#}") });
        }
    }
    if repair {
        for d in &damaged {
            let gone = if d.path.is_dir() { fs::remove_dir_all(&d.path) } else { fs::remove_file(&d.path) };
            gone.with_context(|| format!("cannot remove {}", d.path.display()))?;
        }
    }
    Ok(Verified { checked, damaged, foreign: foreign_names })
}

/// What `gc` removed.
#[derive(Clone, Debug, Default)]
pub struct Freed {
    pub items: Vec<(String, u64)>,
    /// Names of no form kiln gives in the areas it cleans (`sources/my-thesis`,
    /// `debs/README.txt`): kept, and reported so the user can move them.
    pub kept: Vec<String>,
}

impl Freed {
    fn remove(&mut self, path: PathBuf, label: String) -> Result<()> {
        let bytes = dir_size(&path);
        let gone = if path.is_dir() { fs::remove_dir_all(&path) } else { fs::remove_file(&path) };
        gone.with_context(|| format!("cannot remove {}", path.display()))?;
        self.items.push((label, bytes));
        Ok(())
    }

    pub fn bytes(&self) -> u64 {
        self.items.iter().map(|(_, b)| b).sum()
    }
}

/// Removes scratch folders of dead runs, moved-aside damaged entries, failed
/// jobs' logs, and everything no recorded plan uses; refuses a cache without
/// kiln's marker, removing nothing.
pub fn gc(cache: &Cache) -> Result<Freed> {
    cache.check_cleanable()?;
    let mut freed = Freed::default();
    let (n, bytes) = cache.remove_stale_scratch()?;
    if n > 0 {
        freed.items.push((format!("{n} scratch folder(s) of interrupted runs"), bytes));
    }
    for area in [cache::DAMAGED, cache::FAILED, cache::PLANS, cache::TMP] {
        freed.kept.extend(foreign(area, &cache.root().join(area)));
    }
    let mut kept = Vec::new();
    let mut remove = |path: PathBuf, label: String| freed.remove(path, label);
    for area in [cache::DAMAGED, cache::FAILED] {
        let dir = cache.root().join(area);
        for n in names(&dir) {
            if Cache::names_its_own(area, &n) {
                remove(dir.join(&n), format!("{area}/{n}"))?;
            }
        }
        fs::remove_dir(&dir).ok(); // when nothing else is left in it
    }
    let mut live = Vec::new();
    for (path, rec) in records(cache)? {
        if rec.checkout.as_os_str().is_empty() || !rec.checkout.join(kiln_pins::FILE_NAME).is_file() {
            remove(path, format!("the plan record of {} (checkout gone)", rec.checkout.display()))?;
        } else {
            live.push(rec);
        }
    }
    if live.is_empty() {
        bail!(
            "no dist has recorded what it uses in {} yet, so nothing else can be told apart from what is needed: \
             run a full `cargo xtask dist` first (stale scratch, damaged/ and failed/ were cleaned)",
            cache.root().display()
        );
    }
    let keep = |f: fn(&PlanRecord) -> &Vec<String>| -> BTreeSet<String> { live.iter().flat_map(|r| f(r).iter().cloned()).collect() };
    let (keys, packages, debs, sources) = (keep(|r| &r.keys), keep(|r| &r.packages), keep(|r| &r.debs), keep(|r| &r.sources));
    // HIP bundles were kept in `bundles/` before they became store entries: nothing there is used.
    let bundles = BTreeSet::new();
    let toolchains: BTreeSet<String> = live.iter().flat_map(|r| std::iter::once(&r.toolchain).chain(&r.cross)).cloned().collect();
    for (key, dir) in entries(cache) {
        if !keys.contains(&key) {
            remove(dir, format!("{}/{}/{key}", cache::OBJECTS, &key[..2]))?;
        }
    }
    let areas: [(&str, PathBuf, &BTreeSet<String>); 5] = [
        (cache::PACKAGES, cache.packages(), &packages),
        ("bundles", cache.root().join("bundles"), &bundles),
        (cache::DEBS, cache.debs(), &debs),
        (cache::SOURCES, cache.sources(), &sources),
        (cache::TOOLCHAINS, cache.toolchains(), &toolchains),
    ];
    for (label, dir, used) in areas {
        for n in names(&dir) {
            if !Cache::names_its_own(label, &n) {
                kept.push(format!("{label}/{n}"));
            } else if !used.contains(&n) {
                remove(dir.join(&n), format!("{label}/{n}"))?;
            }
        }
    }
    freed.kept.extend(kept);
    Ok(freed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The user's files that the old rule took for kiln's: a folder whose
    /// top-level names are the cache's areas.
    const THEIRS: [&str; 5] =
        ["debs/README.txt", "debs/notes.deb", "sources/my-thesis/chapter1.tex", "damaged/tax-return.2024.1", "objects/packages/mine/a.txt"];

    fn write_theirs(root: &Path) {
        for f in THEIRS {
            fs::create_dir_all(root.join(f).parent().unwrap()).unwrap();
            fs::write(root.join(f), "the user's").unwrap();
        }
    }

    /// Issue 34: `cache mark` refuses a folder whose areas hold names kiln
    /// never gives there (before: marked, since its top-level names were
    /// kiln's), and in a marked cache `gc` and `verify --repair` remove only
    /// names of kiln's forms, keeping and reporting the rest (before: gc
    /// removed every name no plan record listed, repair any `.deb` or package
    /// folder it could not verify).
    #[test]
    fn names_kiln_never_gives_are_refused_by_mark_and_kept_by_gc_and_repair() {
        let root = tempfile::tempdir().unwrap();
        let user = root.path().join("user");
        write_theirs(&user);
        let mut cache = Cache::at(user.clone()).unwrap();
        let err = format!("{:#}", cache.mark().expect_err("a folder holding names kiln never gives is not marked"));
        assert!(err.contains("debs/README.txt") && err.contains("KILN_CACHE_DIR"), "{err}");
        assert!(!user.join(kiln_fs::MARKER).exists());

        // A cache kiln made and marked, where the user later put files of theirs.
        let cache = Cache::at(root.path().join("cache")).unwrap();
        assert!(cache.marked());
        let checkout = root.path().join("checkout");
        fs::create_dir_all(&checkout).unwrap();
        fs::write(checkout.join("pins.toml"), "").unwrap();
        record(&cache, &PlanRecord { checkout, ..PlanRecord::default() }, "").unwrap();
        write_theirs(cache.root());
        let unused = [
            cache.debs().join(format!("{}.deb", "ab".repeat(32))),
            cache.sources().join(format!("candle-kernels-0.11.1-{}", "cd".repeat(8))),
            cache.packages().join("ef".repeat(32)),
        ];
        for u in &unused {
            fs::create_dir_all(u.parent().unwrap()).unwrap();
            fs::write(u, "kiln's, unused").unwrap();
        }
        fs::write(cache.root().join("plans/my-plan.txt"), "the user's").unwrap();

        let v = verify(&cache, true).unwrap();
        assert!(v.foreign.contains(&"debs/README.txt".to_string()) && v.foreign.contains(&"objects/packages/mine".to_string()), "{:?}", v.foreign);
        assert!(THEIRS.iter().all(|f| cache.root().join(f).is_file()), "verify --repair removed a file kiln did not make");
        let freed = gc(&cache).unwrap();
        assert!(THEIRS.iter().all(|f| cache.root().join(f).is_file()), "gc removed a file kiln did not make: {:?}", freed.items);
        assert!(cache.root().join("plans/my-plan.txt").is_file());
        for name in ["debs/README.txt", "sources/my-thesis", "damaged/tax-return.2024.1", "objects/packages/mine", "plans/my-plan.txt"] {
            assert!(freed.kept.contains(&name.to_string()), "{name} not reported as kept: {:?}", freed.kept);
        }
        assert!(unused.iter().all(|u| !u.exists()), "gc keeps what no plan uses: {:?}", freed.items);
    }
}
