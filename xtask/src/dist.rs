use std::path::Path;

use anyhow::{bail, Context, Result};
use kiln_dist::{lock::Lock, Options, Selection};
use kiln_manifest::Manifest;
use kiln_toolchain::fetch;

use crate::flags;

pub fn run(pins_path: &Path, f: flags::Dist) -> Result<()> {
    let pins = crate::load_pins(pins_path)?;
    let root = crate::project_root();
    let lock_path = root.join(kiln_dist::lock::FILE_NAME);
    let locked = if f.locked { Some(Lock::load(&lock_path)?) } else { None };
    let opts = Options {
        repo: root.clone(),
        out: root.join(&f.out),
        selection: Selection::new(f.modules, &f.archs, &pins)?,
        workers: f.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
        verbose: f.verbose,
        locked,
        package: !f.no_package,
    };
    let outcome = kiln_dist::run(&pins, &opts, &|l| crate::say(l))?;
    let m = &outcome.manifest;
    let bytes: u64 = m.artifacts.iter().map(|a| a.size).sum();
    println!(
        "{}: {} artifacts ({:.1} MB) in {:.1} s; manifest {}",
        outcome.out.display(),
        m.artifacts.len(),
        bytes as f64 / 1e6,
        outcome.seconds,
        outcome.out.join(kiln_manifest::FILE_NAME).display()
    );
    if !outcome.crates.is_empty() {
        let total: u64 = outcome.crates.iter().map(|c| c.size).sum();
        println!("{} crates ({:.1} MB) in {}", outcome.crates.len(), total as f64 / 1e6, outcome.out.join(kiln_dist::package::CRATES_DIR).display());
    }
    if f.locked {
        println!("all {} artifacts match {}", m.artifacts.len(), lock_path.display());
    }
    if f.update_lock {
        let mut lock = if lock_path.exists() { Lock::load(&lock_path)? } else { Lock::of(m) };
        lock.update(m);
        lock.write(&lock_path)?;
        println!("{}: {} artifact hashes", lock_path.display(), lock.artifacts.len());
    }
    Ok(())
}

/// Re-hashes the dist folder against its manifest, and the manifest against the lock.
pub fn verify(pins_path: &Path, v: flags::Verify) -> Result<()> {
    let _pins = crate::load_pins(pins_path)?;
    let root = crate::project_root();
    let dist = root.join(&v.dist);
    let mpath = dist.join(kiln_manifest::FILE_NAME);
    let text = std::fs::read_to_string(&mpath).with_context(|| format!("cannot read {}: run `cargo xtask dist` first", mpath.display()))?;
    let m = Manifest::from_json(&text, &mpath.display().to_string())?;
    let mut problems = Vec::new();
    for a in &m.artifacts {
        let path = dist.join(&a.path);
        match fetch::sha256_file(&path) {
            Ok(h) if h == a.sha256 => {}
            Ok(h) => problems.push(format!("{}: sha256 {} but the manifest says {}", a.path, &h[..16], &a.sha256[..16])),
            Err(e) => problems.push(format!("{}: {e:#}", a.path)),
        }
    }
    let lock = Lock::load(&root.join(kiln_dist::lock::FILE_NAME))?;
    let complete = m.artifacts.len() >= lock.artifacts.len();
    problems.extend(lock.differences(&m, complete));
    if !problems.is_empty() {
        bail!("{} problem(s) in {}:\n  {}", problems.len(), dist.display(), problems.join("\n  "));
    }
    println!("{}: {} artifacts match the manifest and {}", dist.display(), m.artifacts.len(), kiln_dist::lock::FILE_NAME);
    Ok(())
}
