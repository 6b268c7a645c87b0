//! `cargo xtask container`: the builder and runner images (docs/containers.md).
//! The work is in crates/kiln-container; this is the command line around it.

use std::path::Path;

use anyhow::{bail, Result};
use kiln_container::containerfile;
use kiln_pins::Pins;
use kiln_toolchain::Cache;

use crate::flags::Container;

pub fn run(pins_path: &Path, mut args: Container) -> Result<()> {
    if !(args.update || args.regenerate || args.check || args.rootfs || args.oci) {
        args.regenerate = true;
        args.oci = true;
    }
    let repo = crate::project_root();
    let mut pins = if args.update { kiln_container::resolve::load_for_update(pins_path)? } else { crate::load_pins(pins_path)? };
    if args.update {
        let cache = Cache::from_env()?;
        pins = update(pins_path, &pins, &cache)?;
        args.regenerate = true;
    }
    if args.check {
        let diff = containerfile::check(&repo, &pins)?;
        if !diff.is_empty() {
            bail!(
                "containers/ is out of date with {}:\n  {}\n  help: run `cargo xtask container --regenerate` and commit the result",
                pins_path.display(),
                diff.join("\n  ")
            );
        }
        println!("containers/: up to date with {}", pins_path.display());
    }
    if args.regenerate {
        let changed = containerfile::write(&repo, &pins)?;
        if changed.is_empty() {
            println!("containers/: already up to date");
        }
        for line in changed {
            println!("{line}");
        }
    }
    if args.rootfs || args.oci {
        let cache = Cache::from_env()?;
        let all = kiln_container::default_outputs(&args.out, &pins)?;
        let outputs = kiln_container::Outputs { rootfs: if args.rootfs { all.rootfs } else { None }, oci: if args.oci { all.oci } else { None } };
        let built = kiln_container::build(&cache, &pins, &outputs, &|l| crate::say(l))?;
        let r = &built.rootfs;
        if let Some(path) = &outputs.rootfs {
            println!("rootfs  {}  sha256:{}  {} bytes, {} entries", path.display(), r.sha256, r.bytes, r.entries);
        } else {
            println!("rootfs  sha256:{}  {} bytes, {} entries (the layer's diff_id)", r.sha256, r.bytes, r.entries);
        }
        if let Some(image) = &built.image {
            kiln_container::oci::verify_written(image)?;
            println!("image   {}  {}  (layer {}, {} bytes)", image.dir.display(), image.digest, image.layer.digest, image.layer.size);
        }
        println!("built in {:.0} s", built.seconds);
    }
    Ok(())
}

/// `--update` (kiln_container::resolve::update), and what it resolved.
pub fn update(path: &Path, pins: &Pins, cache: &Cache) -> Result<Pins> {
    let (pins, closures) = kiln_container::resolve::update(path, pins, cache, &|l| crate::say(l))?;
    let runners: Vec<String> = closures.runners.iter().map(|r| format!("{} {} packages", r.key, r.packages.debs.len())).collect();
    println!(
        "{}: builder +{} packages, Rust {} ({} archives); {}",
        path.display(),
        closures.builder.debs.len(),
        kiln_container::containers(&pins)?.builder.rust,
        closures.rust.len(),
        runners.join("; ")
    );
    Ok(pins)
}
