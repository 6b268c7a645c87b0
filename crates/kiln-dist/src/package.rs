//! The last step of dist: the artifact crates, generated around the payloads
//! the job graph compressed (and the static library's slices), packaged with
//! cargo. The crates land in `<dist>/crates/` with `crates.json`.

use std::{
    collections::BTreeMap,
    fs, io,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use kiln_fs::copy_tree;
use kiln_package::{
    cargo, generate,
    sources::{Sources, ToolchainFiles},
};
use kiln_pins::{ArtifactCrate, CrateApi};
use kiln_toolchain::{fetch, Cache, Runner};

use crate::provenance::{self, trees_listing};

pub use crate::provenance::What;
pub use kiln_package::record::{CrateRecord, CRATES_DIR, CRATES_JSON, SOURCES_DIR};

/// What the graph made for a set's crates: the compressed payloads and slices.
pub struct Payloads {
    /// Each artifact's compressed bytes, by its manifest path.
    pub artifacts: BTreeMap<String, PathBuf>,
    /// The static library's slices ([`kiln_package::slices`]), per host CPU
    /// of its `hosts` (the toolchain's own first).
    pub slices: Vec<PathBuf>,
    /// `libcudart_static.a`, compressed.
    pub cudart: PathBuf,
}

/// Generates the set's crates around the payloads and packages them into
/// `<staged>/crates/`, or copies them from the cache; returns their records
/// and the cache key of the set.
pub fn crates(w: &What, payloads: &Payloads, staged: &Path, say: &(dyn Fn(String) + Sync)) -> Result<(Vec<CrateRecord>, String)> {
    let set = w.set;
    let Some(artifact_crate) = &set.artifact_crate else { bail!("set `{}` has no crate to package", set.name) };
    let version = set.crate_version().context("a packaged set's source is a crate")?;
    let (runner, cache) = (w.runner, w.cache);
    let sources = Sources::in_repo(w.kiln);
    let toolchain = ToolchainFiles::in_sysroot(&runner.sysroot().root);
    let ffi = set
        .staticlib
        .as_ref()
        .and_then(|l| l.ffi.as_ref())
        .with_context(|| format!("set `{}`: its crates need the static library's ffi file", set.name))?;
    let ffi_rs = w.source_root.join(ffi);
    let provenance = provenance::set_record(w, &sources)?;
    let (key, input_licenses) = package_key(w, artifact_crate, &version, &sources, &ffi_rs, &provenance)?;
    let cached = cache.packages().join(&key);
    if let Some(records) = from_cache(cache, &cached, &key, staged, say)? {
        return Ok((records, key));
    }
    let t = std::time::Instant::now();
    let work = cache.scratch("crates")?; // removed when dropped
    let gen_root = work.join("ws");
    let manifest_json = w.manifest.to_json();
    let link_stubs = crate::sources::cuda_link_stubs(cache, w.pins, &toolchain.cuda_stubs)?;
    let inputs = generate::Inputs {
        set,
        manifest: &w.manifest.manifest,
        manifest_json: &manifest_json,
        payloads: &payloads.artifacts,
        slices: &payloads.slices,
        cudart_payload: &payloads.cudart,
        cudart: w.cudart.clone(),
        source_root: w.source_root,
        ffi_rs: &ffi_rs,
        sources: &sources,
        toolchain: &toolchain,
        link_stubs: &link_stubs,
        input_licenses: &input_licenses,
        kiln_version: env!("CARGO_PKG_VERSION"),
        provenance: &provenance,
    };
    say(format!("packaging {} {version} crates", artifact_crate.name));
    let generated = match artifact_crate.api {
        CrateApi::Kiln => generate::generate(&inputs, &gen_root)?,
        CrateApi::Upstream => generate::generate_upstream(&inputs, &gen_root)?,
    };
    let packaged = cargo::package(&gen_root)?;
    let dest = staged.join(CRATES_DIR);
    fs::create_dir_all(&dest)?;
    let records = records(&generated, &packaged, &dest, say)?;
    fs::write(dest.join(CRATES_JSON), serde_json::to_string_pretty(&records)? + "\n")?;
    // The generated sources too: a `[patch]` by path needs them (docs/consuming.md).
    fs::remove_dir_all(gen_root.join("target")).ok();
    move_dir(&gen_root, &dest.join(SOURCES_DIR)).context("cannot keep the generated crate sources")?;
    // Cache the result whole (a rename of a finished folder), keyed by every input.
    let tmp = cache.scratch("packages")?;
    copy_tree(&dest, &tmp)?;
    kiln_toolchain::cache::publish_dir(&tmp, &cached)?;
    say(format!("packaged {} crates in {:.1} s", records.len(), t.elapsed().as_secs_f64()));
    Ok((records, key))
}

/// The packaged crates' cache key: the manifest, the CUDA runtime borrowed,
/// upstream's sources for a drop-in, the input licences' texts, kiln's
/// template and the toolchain's files; and those licences.
fn package_key(
    w: &What,
    artifact_crate: &ArtifactCrate,
    version: &str,
    sources: &Sources,
    ffi_rs: &Path,
    provenance: &kiln_package::provenance::SetRecord,
) -> Result<(String, Vec<kiln_package::LicenseText>)> {
    let (set, cache) = (w.set, w.cache);
    let mut key_text = format!("{}\n", w.manifest.to_json());
    // The provenance record each crate carries (kiln's commit, the pins, the jobs).
    key_text.push_str(&format!("provenance {provenance:?}\n"));
    if let Some((name, version)) = &w.cudart {
        key_text.push_str(&format!("cudart of {name} {version}\n"));
    }
    if artifact_crate.api == CrateApi::Upstream {
        // The drop-in carries upstream's src/ and manifest.
        for f in kiln_package::sources::files_under(&w.source_root.join("src"))?.into_iter().chain([w.source_root.join("Cargo.toml")]) {
            key_text.push_str(&format!("upstream {} {}\n", f.strip_prefix(w.source_root).unwrap_or(&f).display(), fetch::sha256_file(&f)?));
        }
    }
    let input_licenses = crate::sources::input_licenses(cache, set)?;
    for l in &input_licenses {
        key_text.push_str(&format!("licence {} {} {}\n", l.file, l.spdx, kiln_manifest::sha256_hex(l.text.as_bytes())));
    }
    let key = cache_key(w.runner, &artifact_crate.name, version, &key_text, &sources.trees(), ffi_rs)?;
    Ok((key, input_licenses))
}

/// The crates cached under `key` (`cached`), copied into `staged` when they
/// check against their crates.json; a damaged entry is moved aside (`None`).
fn from_cache(cache: &Cache, cached: &Path, key: &str, staged: &Path, say: &(dyn Fn(String) + Sync)) -> Result<Option<Vec<CrateRecord>>> {
    if cached.join(CRATES_JSON).is_file() {
        match verify_cached(cached) {
            Ok(records) => {
                copy_tree(cached, &staged.join(CRATES_DIR))?;
                say(format!("packaged crates from cache ({} crates)", records.len()));
                return Ok(Some(records));
            }
            Err(e) => {
                let aside = cache.move_aside(cached, &format!("packages-{key}"))?;
                say(format!(
                    "warning: the cached packaged crates {} are damaged ({e:#}); moved to {} and packaging again",
                    cached.display(),
                    aside.display()
                ));
            }
        }
    }
    Ok(None)
}

/// The records of what cargo packaged (`packaged`) of the crates kiln
/// generated, each copied into `dest`; another set's crate is left out.
fn records(generated: &[generate::Crate], packaged: &[cargo::Packaged], dest: &Path, say: &(dyn Fn(String) + Sync)) -> Result<Vec<CrateRecord>> {
    let mut records = Vec::new();
    for p in packaged {
        // Another set's crate (its CUDA runtime's), packaged only for the workspace to resolve.
        if generated.iter().any(|g| {
            g.borrowed && p.name.starts_with(&format!("{}-", g.name)) && p.name[g.name.len() + 1..].starts_with(|c: char| c.is_ascii_digit())
        }) {
            continue;
        }
        let info = generated
            .iter()
            .find(|g| p.name.starts_with(&format!("{}-", g.name)) && p.name[g.name.len() + 1..].starts_with(|c: char| c.is_ascii_digit()));
        let info = info.with_context(|| format!("cargo packaged {} which kiln did not generate", p.name))?;
        let file = format!("{}.crate", p.name);
        fs::copy(&p.file, dest.join(&file))?;
        let version = p.name[info.name.len() + 1..].to_string();
        records.push(CrateRecord {
            name: info.name.clone(),
            version,
            file: format!("{CRATES_DIR}/{file}"),
            size: p.size,
            sha256: fetch::sha256_file(&p.file)?,
            raw_bytes: info.raw_bytes,
            payload_bytes: info.payload_bytes,
        });
        say(format!("  {:<36} {:>9} bytes ({:.1} MB of artifacts)", info.name, p.size, info.raw_bytes as f64 / 1e6));
    }
    Ok(records)
}

/// Reads a cached packaging result and checks every `.crate` in it against
/// the sha256 and size its record gives; returns the records.
pub fn verify_cached(dir: &Path) -> Result<Vec<CrateRecord>> {
    let json = dir.join(CRATES_JSON);
    let records: Vec<CrateRecord> = serde_json::from_str(&fs::read_to_string(&json).with_context(|| format!("cannot read {}", json.display()))?)
        .with_context(|| format!("{} does not parse", json.display()))?;
    for r in &records {
        let name = r.file.rsplit('/').next().unwrap_or(&r.file);
        let file = kiln_manifest::regular_file_inside(dir, name).map_err(|e| anyhow::anyhow!("{}: `file` {:?}: {e}", json.display(), r.file))?;
        let sha = fetch::sha256_file(&file)?;
        if sha != r.sha256 || fs::metadata(&file)?.len() != r.size {
            bail!("{name} has sha256 {sha}, its record says {}", r.sha256);
        }
    }
    Ok(records)
}

/// Everything the packaged crates are made from: the manifest (which names
/// every artifact's sha256), the template and kiln-manifest sources, the
/// set's `ffi.rs`, the toolchain (static cudart, licence texts), the crate pins.
fn cache_key(runner: &Runner, name: &str, version: &str, manifest_json: &str, trees: &[&Path], ffi: &Path) -> Result<String> {
    let mut text = format!(
        "kiln-package v1\nkiln {}\n{}\ntoolchain {}\ncrate {name} {version}\nffi {}\n",
        env!("CARGO_PKG_VERSION"),
        kiln_package::compress::recipe(),
        runner.sysroot().identity,
        fetch::sha256_file(ffi)?
    );
    text.push_str(manifest_json);
    text.push_str(&trees_listing(trees)?);
    Ok(kiln_manifest::sha256_hex(text.as_bytes()))
}

/// A rename, or a copy and a removal where the two folders are on different
/// mounts (EXDEV): the cache is scratch space, `staged` is below the target
/// folder, and in the builder container those are separate mounts, as they
/// are when `KILN_CACHE_DIR` is on another disk.
fn move_dir(from: &Path, to: &Path) -> Result<()> {
    move_dir_with(from, to, |a, b| fs::rename(a, b))
}

fn move_dir_with(from: &Path, to: &Path, rename: impl Fn(&Path, &Path) -> io::Result<()>) -> Result<()> {
    match rename(from, to) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::CrossesDevices => {
            copy_tree(from, to).with_context(|| format!("copying {} to {} (another filesystem)", from.display(), to.display()))?;
            fs::remove_dir_all(from).with_context(|| format!("removing {}", from.display()))
        }
        Err(e) => Err(e).with_context(|| format!("renaming {} to {}", from.display(), to.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(root: &Path) {
        fs::create_dir_all(root.join("a/b")).unwrap();
        fs::write(root.join("top.rs"), "top").unwrap();
        fs::write(root.join("a/b/deep.rs"), "deep").unwrap();
    }

    #[test]
    fn a_move_across_filesystems_copies_then_removes() {
        let tmp = std::env::temp_dir().join(format!("kiln-move-{}", std::process::id()));
        let (from, to) = (tmp.join("from"), tmp.join("to"));
        tree(&from);
        let exdev = |_: &Path, _: &Path| Err(io::Error::from(io::ErrorKind::CrossesDevices));
        move_dir_with(&from, &to, exdev).unwrap();
        assert!(!from.exists(), "the source must be gone after a copy-move");
        assert_eq!(fs::read_to_string(to.join("top.rs")).unwrap(), "top");
        assert_eq!(fs::read_to_string(to.join("a/b/deep.rs")).unwrap(), "deep");
        // Any other error is reported, and nothing is copied.
        let (from2, to2) = (tmp.join("from2"), tmp.join("to2"));
        tree(&from2);
        let denied = |_: &Path, _: &Path| Err(io::Error::from(io::ErrorKind::PermissionDenied));
        let err = move_dir_with(&from2, &to2, denied).unwrap_err();
        assert!(format!("{err:#}").contains("renaming"), "{err:#}");
        assert!(from2.exists() && !to2.exists());
        // The real rename on one filesystem.
        move_dir(&from2, &to2).unwrap();
        assert!(!from2.exists() && to2.join("a/b/deep.rs").is_file());
        fs::remove_dir_all(&tmp).ok();
    }
}
