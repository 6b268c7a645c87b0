//! What built a set's crates ([`What`], which packaging makes them from),
//! for the provenance record each carries ([`kiln_package::provenance`]):
//! gathered here from the pins, the provisioned toolchain, kiln's checkout
//! and the job graph.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use kiln_package::sources::Sources;
use kiln_pins::KernelSet;
use kiln_toolchain::{fetch, Cache, Runner};

use crate::set_manifest::SetManifest;

/// What a set's crates are packaged from, besides the payloads.
pub struct What<'a> {
    pub runner: &'a Runner,
    pub cache: &'a Cache,
    pub set: &'a KernelSet,
    /// kiln's repository (the template and the leaf crates' sources).
    pub kiln: &'a Path,
    /// The set's verified sources.
    pub source_root: &'a Path,
    pub manifest: &'a SetManifest,
    /// The main crate name and version of the set whose CUDA runtime crate
    /// this set's parts link (`crate.cudart`); `None`: its own.
    pub cudart: Option<(String, String)>,
    pub pins: &'a kiln_pins::Pins,
    /// Per artifact (manifest path), the job that made it.
    pub jobs: BTreeMap<String, kiln_package::provenance::JobRecord>,
}

/// Every file of `trees`, each tree's sorted, as `<path in its tree> <sha256>` lines:
/// what the packaged crates' cache key and their provenance record hash.
pub(crate) fn trees_listing(trees: &[&Path]) -> Result<String> {
    let mut text = String::new();
    for tree in trees {
        for f in kiln_package::sources::files_under(tree)? {
            text.push_str(&format!("{} {}\n", f.strip_prefix(tree).unwrap_or(&f).display(), fetch::sha256_file(&f)?));
        }
    }
    Ok(text)
}

/// What built a set's crates, for the provenance record in each
/// ([`kiln_package::provenance`]): kiln (version, commit, the digest of the
/// code that writes crates), the pin file's sha256, every pinned input with
/// its licence, and per artifact the job that made it.
pub(crate) fn set_record(w: &What, sources: &Sources) -> Result<kiln_package::provenance::SetRecord> {
    use kiln_package::provenance::{Input, Origin, SetRecord};
    let pins = w.pins;
    let pins_bytes = fs::read(&pins.file).with_context(|| format!("cannot read {}", pins.file.display()))?;
    let root = &w.runner.sysroot().root;
    let mut inputs = Vec::new();
    for deb in &pins.closure()?.debs {
        let copyright = root.join("usr/share/doc").join(&deb.name).join("copyright");
        let license = fs::read_to_string(&copyright).ok().and_then(|t| kiln_package::provenance::debian_license(&t));
        inputs.push(Input { origin: Origin::Deb, name: deb.name.clone(), version: deb.version.clone(), sha256: deb.sha256.clone(), license });
    }
    let wheels = pins.toolchain.ptxas.iter().chain(w.set.inputs.iter().map(|i| &i.wheel));
    for wheel in wheels {
        let license = w.set.inputs.iter().find(|i| &i.wheel == wheel).and_then(|i| i.license.as_ref()).map(|l| l.spdx.clone());
        inputs.push(Input {
            origin: Origin::Wheel,
            name: wheel.package.clone(),
            version: wheel.version.clone(),
            sha256: wheel.sha256.clone(),
            license,
        });
    }
    if let kiln_pins::Source::Crate { name, version, sha256 } = &w.set.source {
        // Its licence as its own (verified) Cargo.toml states it.
        let license = fs::read_to_string(w.source_root.join("Cargo.toml"))
            .ok()
            .and_then(|t| toml::from_str::<toml::Table>(&t).ok())
            .and_then(|t| t.get("package")?.get("license")?.as_str().map(str::to_string));
        inputs.push(Input { origin: Origin::Crate, name: name.clone(), version: version.clone(), sha256: sha256.clone(), license });
    }
    inputs.dedup();
    let digest = trees_listing(&sources.trees())?;
    Ok(SetRecord {
        kiln_version: env!("CARGO_PKG_VERSION").to_string(),
        kiln_commit: git_head(w.kiln),
        kiln_sources_sha256: kiln_manifest::sha256_hex(digest.as_bytes()),
        pins_sha256: kiln_manifest::sha256_hex(&pins_bytes),
        set: w.set.name.clone(),
        toolchain_identity: w.manifest.manifest.toolchain.identity.clone(),
        inputs,
        jobs: w.jobs.clone(),
    })
}

/// The commit checked out in the git repository at `repo`, read from its
/// files (a worktree's `.git` file, loose and packed refs); `None` outside git.
pub(crate) fn git_head(repo: &Path) -> Option<String> {
    let dot = repo.join(".git");
    let git_dir = if dot.is_file() {
        let text = fs::read_to_string(&dot).ok()?;
        let dir = PathBuf::from(text.strip_prefix("gitdir:")?.trim());
        if dir.is_absolute() {
            dir
        } else {
            repo.join(dir)
        }
    } else {
        dot
    };
    let head = fs::read_to_string(git_dir.join("HEAD")).ok()?;
    let head = head.trim();
    let Some(name) = head.strip_prefix("ref:").map(str::trim) else {
        return is_commit_id(head).then(|| head.to_string());
    };
    // A worktree's refs live in the common folder.
    let common = fs::read_to_string(git_dir.join("commondir")).ok().map_or_else(|| git_dir.clone(), |c| git_dir.join(c.trim()));
    for dir in [&git_dir, &common] {
        if let Ok(text) = fs::read_to_string(dir.join(name)) {
            let id = text.trim();
            return is_commit_id(id).then(|| id.to_string());
        }
    }
    let packed = fs::read_to_string(common.join("packed-refs")).ok()?;
    packed.lines().find_map(|l| l.strip_suffix(name).map(str::trim)).filter(|id| is_commit_id(id)).map(str::to_string)
}

/// A git commit id: 40 lowercase hex digits (SHA-1 repositories).
fn is_commit_id(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commit_is_read_from_loose_and_packed_refs_and_worktrees() {
        let d = tempfile::tempdir().unwrap();
        let (repo, git) = (d.path().join("repo"), d.path().join("repo/.git"));
        fs::create_dir_all(git.join("refs/heads")).unwrap();
        let id = "0123456789abcdef0123456789abcdef01234567";
        fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        assert_eq!(git_head(&repo), None, "a branch with no commit");
        fs::write(git.join("packed-refs"), format!("# pack-refs with: peeled\n{id} refs/heads/main\n")).unwrap();
        assert_eq!(git_head(&repo).as_deref(), Some(id));
        let newer = "89abcdef0123456789abcdef0123456789abcdef";
        fs::write(git.join("refs/heads/main"), format!("{newer}\n")).unwrap();
        assert_eq!(git_head(&repo).as_deref(), Some(newer), "a loose ref beats the packed one");
        // A worktree: `.git` is a file naming its folder, whose refs are the common folder's.
        let wt = d.path().join("wt");
        let wt_git = git.join("worktrees/wt");
        fs::create_dir_all(&wt_git).unwrap();
        fs::create_dir_all(&wt).unwrap();
        fs::write(wt.join(".git"), format!("gitdir: {}\n", wt_git.display())).unwrap();
        fs::write(wt_git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        fs::write(wt_git.join("commondir"), "../..\n").unwrap();
        assert_eq!(git_head(&wt).as_deref(), Some(newer));
        fs::write(wt_git.join("HEAD"), "not a commit\n").unwrap();
        assert_eq!(git_head(&wt), None);
        assert_eq!(git_head(d.path()), None, "outside git");
    }
}
