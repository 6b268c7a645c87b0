//! kiln's container images, all derived from `pins.toml` (docs/containers.md).
//!
//! - `kiln-builder`: the pinned toolchain closure unpacked as the root
//!   filesystem, byte for byte the sysroot `cargo xtask toolchain` makes (same
//!   files, same `.kiln/sysroot.json`), plus bubblewrap, CA certificates and a
//!   pinned Rust, so that `cargo xtask dist` runs inside it. [`build`] writes
//!   it without a container engine, as a deterministic tar ([`rootfs`]) and an
//!   OCI image layout ([`oci`]): two builds give the same digest.
//! - `kiln-runner-rocm` (HIP 5.7), `kiln-runner-rocm7` (HIP 7, for what HIP
//!   5.7 cannot load), `kiln-runner-cuda`: what GPU test jobs run in.
//!
//! Every image also has a Containerfile under `containers/` ([`containerfile`]),
//! generated from the same pins, for building with podman or docker.
//! [`resolve`] turns the `[containers]` table into the exact packages.

pub mod containerfile;
pub mod oci;
pub mod resolve;
pub mod rootfs;
pub mod time;

use std::{
    fs,
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{bail, Context, Result};
use kiln_pins::{Containers, Pins, RustComponent, WheelPin};
use kiln_toolchain::{
    fetch::{self, sha256_file},
    sysroot, wheel, Cache,
};
use rootfs::{Extra, Input};

/// The images, by the key their table has in `[containers]` (each one's folder in containers/).
pub const IMAGES: [&str; 4] = ["builder", kiln_pins::RUNNERS[0], kiln_pins::RUNNERS[1], kiln_pins::RUNNERS[2]];

/// The `[containers]` table, or an error that says it is missing.
pub fn containers(pins: &Pins) -> Result<&Containers> {
    pins.containers.as_ref().with_context(|| format!("{} has no [containers] table: see docs/containers.md for what it holds", pins.file.display()))
}

/// The builder's generated closures, checked against the toolchain they were
/// resolved on top of.
pub fn closures(pins: &Pins) -> Result<kiln_pins::ContainerClosures> {
    let c = containers(pins)?.closures(&pins.file)?;
    let identity = sysroot::identity(pins.closure()?);
    if c.toolchain != identity {
        bail!(
            "{}: [containers.builder.closure] was resolved on top of toolchain {}, but [toolchain.closure] is now {}\n  \
             help: run `cargo xtask container --update` (the builder's packages must sit on the pinned toolchain)",
            pins.file.display(),
            &c.toolchain[..12],
            &identity[..12]
        );
    }
    Ok(c)
}

/// Where the builder keeps the pinned wheels (`<sha256>.whl`), and points
/// [`wheel::SEED_ENV`] at: a dist in the image downloads none of them.
pub const WHEELS_DIR: &str = ".kiln/wheels";

/// Every pinned wheel, which the builder carries in [`WHEELS_DIR`]: the
/// toolchain's (Blackwell's ptxas) and each kernel set's inputs (CUTLASS), once each.
pub fn builder_wheels(pins: &Pins) -> Vec<&WheelPin> {
    let mut out: Vec<&WheelPin> = Vec::new();
    for w in pins.toolchain.ptxas.iter().chain(pins.sets.iter().flat_map(|s| s.inputs.iter().map(|i| &i.wheel))) {
        if !out.iter().any(|o| o.sha256 == w.sha256) {
            out.push(w);
        }
    }
    out
}

/// The files the builder adds to the unpacked closures, in the order they are
/// written. The Containerfile makes the same ones ([`containerfile`]); the
/// wheels of [`builder_wheels`] are added after them (fetched, not generated).
pub fn builder_extras(pins: &Pins) -> Result<Vec<Extra>> {
    let closure = pins.closure()?;
    let record = serde_json::to_string_pretty(&sysroot::record(closure))?;
    let mut out = vec![
        Extra::Dir(".kiln".into(), 0o755),
        Extra::File(sysroot::RECORD.into(), 0o644, record.into_bytes()),
        Extra::Dir(WHEELS_DIR.into(), 0o755),
    ];
    // Where the sandbox mounts kiln's inputs; bubblewrap needs them to exist in `/`.
    out.push(Extra::Dir("kiln".into(), 0o755));
    for dir in sysroot::MOUNT_POINTS {
        out.push(Extra::Dir(dir.to_string(), 0o755));
    }
    // No maintainer script runs in an unpacked root, so nothing writes these.
    out.push(Extra::File(
        "etc/passwd".into(),
        0o644,
        b"root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n".to_vec(),
    ));
    out.push(Extra::File("etc/group".into(), 0o644, b"root:x:0:\nnogroup:x:65534:\n".to_vec()));
    out.push(Extra::CaBundle("etc/ssl/certs/ca-certificates.crt".into()));
    // rustc links with `cc`, and crates' build scripts compile C with it: the
    // toolchain's gcc is the only C compiler in the root.
    let gcc = closure
        .debs
        .iter()
        .filter_map(|d| d.name.strip_prefix("gcc-").filter(|v| v.bytes().all(|b| b.is_ascii_digit())))
        .max_by_key(|v| v.parse::<u32>().unwrap_or(0))
        .context("[toolchain.closure] has no gcc-<N>: the builder needs a C compiler for Rust to link with")?;
    if closure.find(&format!("g++-{gcc}")).is_none() {
        bail!("[toolchain.closure] has gcc-{gcc} but no g++-{gcc}: the builder needs both");
    }
    out.push(Extra::Symlink("usr/local/bin/cc".into(), format!("/usr/bin/gcc-{gcc}")));
    out.push(Extra::Symlink("usr/local/bin/c++".into(), format!("/usr/bin/g++-{gcc}")));
    Ok(out)
}

/// The cached copy of a Rust archive, downloaded (and sha256-checked) if needed.
pub fn fetch_rust(cache: &Cache, component: &RustComponent) -> Result<PathBuf> {
    let dir = cache.root().join("rust");
    fs::create_dir_all(&dir)?;
    let dest = dir.join(format!("{}.tar.gz", component.sha256));
    if !dest.exists() {
        let what = format!("{} {} ({})", component.name, component.version, component.target);
        // The pin's size, once `--update` recorded it; the channel file gives none.
        let limit = match component.size {
            0 => fetch::Limit::AtMost(fetch::UNPINNED_SIZE_CAP),
            n => fetch::Limit::Exactly(n),
        };
        fetch::download_verified(&component.url, &component.sha256, limit, &what, &dest)?;
    }
    Ok(dest)
}

/// What to write: the plain root filesystem tar, the OCI image layout, or both.
#[derive(Clone, Debug, Default)]
pub struct Outputs {
    pub rootfs: Option<PathBuf>,
    pub oci: Option<PathBuf>,
}

#[derive(Clone, Debug)]
pub struct Built {
    pub rootfs: rootfs::Summary,
    pub image: Option<oci::Image>,
    pub seconds: f64,
}

/// Builds the builder's root filesystem from the pinned, verified inputs and
/// writes what `outputs` asks for. Needs no container engine and no root.
pub fn build(cache: &Cache, pins: &Pins, outputs: &Outputs, say: &(dyn Fn(String) + Sync)) -> Result<Built> {
    let start = Instant::now();
    let c = containers(pins)?;
    let closures = closures(pins)?;
    let toolchain = pins.closure()?;
    sysroot::which("dpkg-deb", "apt-get install dpkg")?;

    let mut inputs = Vec::new();
    let debs: Vec<_> = toolchain.debs.iter().chain(&closures.builder.debs).collect();
    let total: u64 = debs.iter().map(|d| d.size).sum::<u64>();
    say(format!("{}: {} packages ({:.0} MB), Rust {}", c.builder.name, debs.len(), total as f64 / 1e6, c.builder.rust));
    for d in &debs {
        let path = fetch::fetch_deb(cache, &pins.toolchain.mirrors, d)?;
        // Re-hashed even when cached: these bytes become a published image.
        fetch::verify_file(&path, &d.sha256, &format!("{} {} (cached)", d.name, d.version))?;
        inputs.push(Input::Deb { path, what: format!("{} {}", d.name, d.version) });
    }
    for r in &closures.rust {
        let path = fetch_rust(cache, r)?;
        fetch::verify_file(&path, &r.sha256, &format!("{} {} (cached)", r.name, r.version))?;
        inputs.push(Input::RustArchive { path, what: format!("{} {}", r.name, r.version), prefix: "usr/local".into() });
    }
    let mut extras = builder_extras(pins)?;
    for pin in builder_wheels(pins) {
        let path = wheel::fetch_wheel(cache, pin)?;
        let bytes = fs::read(&path)?;
        // Re-hashed as read: these bytes become a published image.
        if kiln_manifest::sha256_hex(&bytes) != pin.sha256 {
            bail!("{} changed while it was read (sha256 is no longer the pinned {}): run the build again", path.display(), pin.sha256);
        }
        extras.push(Extra::File(format!("{WHEELS_DIR}/{}.whl", pin.sha256), 0o644, bytes));
    }

    let epoch = c.source_date_epoch;
    let layer = match &outputs.oci {
        Some(dir) => Some(oci::LayerWriter::create(dir)?),
        None => None,
    };
    let plain = match &outputs.rootfs {
        Some(path) => {
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent)?;
            }
            let tmp = path.with_extension("tar.part");
            Some((tmp.clone(), fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?))
        }
        None => None,
    };
    if layer.is_none() && plain.is_none() {
        bail!("nothing to write: ask for the root filesystem, the OCI image, or both");
    }
    let mut sink = rootfs::Tee(plain.as_ref().map(|(_, f)| f), layer);
    say(format!("{}: writing the root filesystem (every timestamp {})", c.builder.name, time::rfc3339(epoch)));
    let summary = match rootfs::write(&inputs, &extras, epoch, &mut sink, &|l| say(l)) {
        Ok(s) => s,
        Err(e) => {
            // Nothing half-written is left where a later run or a reader could take it for whole.
            if let Some((tmp, _)) = &plain {
                fs::remove_file(tmp).ok();
            }
            if let Some(dir) = &outputs.oci {
                fs::remove_dir_all(oci::staging(dir)).ok();
            }
            return Err(e);
        }
    };
    let rootfs::Tee(_, layer) = sink;
    if let Some((tmp, file)) = plain {
        file.sync_all()?;
        let path = outputs.rootfs.as_ref().unwrap();
        fs::rename(&tmp, path)?;
        // The tar's hash was taken while writing; reading it back proves what landed on disk.
        let on_disk = sha256_file(path)?;
        if on_disk != summary.sha256 {
            bail!("{} reads back as {on_disk}, not the {} that was written", path.display(), summary.sha256);
        }
    }
    let image = match layer {
        Some(layer) => {
            let layer = layer.finish()?;
            let config = oci::builder_config(pins, &summary.sha256)?;
            Some(oci::write_layout(outputs.oci.as_ref().unwrap(), &c.builder.name, layer, &config)?)
        }
        None => None,
    };
    Ok(Built { rootfs: summary, image, seconds: start.elapsed().as_secs_f64() })
}

/// The container output folder's owner: `--out` may name only a folder that
/// holds nothing but what `cargo xtask container` writes there (its marker
/// lists the builder's `<name>.rootfs.tar` and `<name>.oci`), or an empty one
/// (the image in it is replaced).
pub const OWNER: kiln_fs::Owner = kiln_fs::Owner { command: "cargo xtask container", flag: "--out", reuse: kiln_fs::Reuse::FilledInPlace };

/// Where `cargo xtask container` writes the builder inside `out`, once `out`
/// is known to be (or made) a container output folder: never a user's folder.
pub fn default_outputs(out: &Path, pins: &Pins) -> Result<Outputs> {
    let name = &containers(pins)?.builder.name;
    let (rootfs, oci) = (format!("{name}.rootfs.tar"), format!("{name}.oci"));
    // And what they are written into before a rename puts them in place.
    let (rootfs_tmp, oci_tmp) = (format!("{rootfs}.part"), format!("{oci}.part"));
    OWNER.claim_and_mark(out, &[&rootfs, &oci, &rootfs_tmp, &oci_tmp])?;
    Ok(Outputs { rootfs: Some(out.join(rootfs)), oci: Some(out.join(oci)) })
}
