//! An OCI image layout (image-spec v1.1) with one layer, written directly.
//!
//! Nothing in it depends on when or where it was built: the layer is the
//! deterministic root filesystem tar, gzip-compressed with a fixed level and
//! no name or time in the gzip header; the config's times are the pinned
//! `source_date_epoch`; the JSON is written from structs (fixed key order).
//! So the manifest digest, which is the image's digest, is a function of the
//! pins alone. `skopeo copy oci:DIR:latest docker://...` publishes it unchanged.

use std::{
    collections::BTreeMap,
    fs::{self, File},
    io::{self, BufWriter, Write},
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use flate2::{write::GzEncoder, Compression, GzBuilder};
use kiln_pins::Pins;
use kiln_toolchain::sysroot;
use serde::{Deserialize, Serialize};

use crate::{containers, rootfs::Hashing, time::rfc3339};

pub const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// The tag the layout's index gives the image: `oci:DIR:latest`.
pub const REF_NAME: &str = "latest";

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema_version: u32,
    pub media_type: String,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    pub schema_version: u32,
    pub media_type: String,
    pub manifests: Vec<Descriptor>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ImageConfig {
    pub created: String,
    pub architecture: String,
    pub os: String,
    pub config: RunConfig,
    pub rootfs: RootFs,
    pub history: Vec<History>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct RunConfig {
    pub env: Vec<String>,
    pub cmd: Vec<String>,
    pub working_dir: String,
    pub labels: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RootFs {
    #[serde(rename = "type")]
    pub kind: String,
    pub diff_ids: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct History {
    pub created: String,
    pub created_by: String,
    pub comment: String,
}

/// The builder image's environment: what `cargo xtask dist` needs to find.
/// `KILN_WHEELS=/.kiln/wheels`: where a dist in the builder finds the toolchain's wheels.
pub fn builder_wheels_env() -> String {
    format!("{}=/{}", kiln_toolchain::wheel::SEED_ENV, crate::WHEELS_DIR)
}

pub const BUILDER_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The builder's image config for a root filesystem whose tar hashes to `diff_id`.
pub fn builder_config(pins: &Pins, diff_id: &str) -> Result<ImageConfig> {
    let c = containers(pins)?;
    let created = rfc3339(c.source_date_epoch);
    let identity = sysroot::identity(pins.closure()?);
    let labels = BTreeMap::from([
        ("org.opencontainers.image.title".to_string(), c.builder.name.clone()),
        (
            "org.opencontainers.image.description".to_string(),
            "kiln's builder: the pinned CUDA and ROCm compilers (Debian packages from pins.toml) as the root filesystem, with bubblewrap and Rust, for cargo xtask dist".to_string(),
        ),
        ("org.opencontainers.image.created".to_string(), created.clone()),
        ("io.kiln.toolchain".to_string(), identity),
        ("io.kiln.rust".to_string(), c.builder.rust.clone()),
    ]);
    Ok(ImageConfig {
        created: created.clone(),
        architecture: "amd64".into(),
        os: "linux".into(),
        config: RunConfig {
            env: vec![BUILDER_PATH.into(), "HOME=/root".into(), builder_wheels_env()],
            cmd: vec!["/bin/bash".into()],
            working_dir: "/".into(),
            labels,
        },
        rootfs: RootFs { kind: "layers".into(), diff_ids: vec![format!("sha256:{diff_id}")] },
        history: vec![History {
            created,
            created_by: "cargo xtask container --oci".into(),
            comment: "the pinned toolchain closure, the builder's packages and Rust, from pins.toml".into(),
        }],
    })
}

/// The gzip-compressed layer, written while the tar is produced.
pub struct LayerWriter {
    staging: PathBuf,
    part: PathBuf,
    gz: GzEncoder<Hashing<BufWriter<File>>>,
    /// Input waiting for a whole [`CHUNK`].
    pending: Vec<u8>,
}

/// The compressor is always handed input in pieces of this size: deflate's
/// output depends on where its input is split, and the tar arrives in pieces
/// as big as each read from `dpkg-deb`'s pipe happened to be.
const CHUNK: usize = 1 << 20;

/// A finished layer blob in the staging layout.
pub struct Layer {
    staging: PathBuf,
    pub digest: String,
    pub size: u64,
}

/// Where a layout for `dir` is put together before it is moved into place.
pub fn staging(dir: &Path) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(".part");
    dir.with_file_name(name)
}

impl LayerWriter {
    /// Starts a layout that replaces `dir` once [`write_layout`] finishes.
    pub fn create(dir: &Path) -> Result<LayerWriter> {
        let staging = staging(dir);
        if staging.exists() {
            fs::remove_dir_all(&staging).with_context(|| format!("cannot clear {}", staging.display()))?;
        }
        fs::create_dir_all(staging.join("blobs/sha256"))?;
        let part = staging.join("blobs/sha256/layer.part");
        let file = BufWriter::with_capacity(1 << 20, File::create(&part)?);
        // GzBuilder writes mtime 0 and no file name: nothing of this build in the header.
        let gz = GzBuilder::new().write(Hashing::new(file), Compression::new(6));
        Ok(LayerWriter { staging, part, gz, pending: Vec::with_capacity(CHUNK) })
    }

    pub fn finish(mut self) -> Result<Layer> {
        self.gz.write_all(&self.pending)?;
        let hashing = self.gz.finish()?;
        let (mut file, digest, size) = hashing.finish();
        file.flush()?;
        file.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        fs::rename(&self.part, self.staging.join("blobs/sha256").join(&digest))?;
        Ok(Layer { staging: self.staging, digest, size })
    }
}

impl Write for LayerWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(CHUNK - self.pending.len());
        self.pending.extend_from_slice(&buf[..n]);
        if self.pending.len() == CHUNK {
            self.gz.write_all(&self.pending)?;
            self.pending.clear();
        }
        Ok(n)
    }
    /// Does not flush the compressor: a flush would put a sync point in the
    /// stream wherever the caller asked for one.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The written image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    pub dir: PathBuf,
    /// `sha256:...` of the manifest: the digest a registry will show.
    pub digest: String,
    pub config: Descriptor,
    pub layer: Descriptor,
}

fn blob(staging: &Path, bytes: &[u8], media_type: &str) -> Result<Descriptor> {
    let digest = kiln_manifest::sha256_hex(bytes);
    fs::write(staging.join("blobs/sha256").join(&digest), bytes)?;
    Ok(Descriptor { media_type: media_type.into(), digest: format!("sha256:{digest}"), size: bytes.len() as u64, annotations: None })
}

/// Finishes the layout around `layer` and moves it to `dir` (replacing what was there).
pub fn write_layout(dir: &Path, title: &str, layer: Layer, config: &ImageConfig) -> Result<Image> {
    let staging = layer.staging.clone();
    let config = blob(&staging, &serde_json::to_vec(config)?, CONFIG)?;
    let layer = Descriptor { media_type: LAYER_GZIP.into(), digest: format!("sha256:{}", layer.digest), size: layer.size, annotations: None };
    let manifest = Manifest { schema_version: 2, media_type: MANIFEST.into(), config: config.clone(), layers: vec![layer.clone()] };
    let mut m = blob(&staging, &serde_json::to_vec(&manifest)?, MANIFEST)?;
    m.annotations = Some(BTreeMap::from([
        ("org.opencontainers.image.ref.name".to_string(), REF_NAME.to_string()),
        ("org.opencontainers.image.title".to_string(), title.to_string()),
    ]));
    let digest = m.digest.clone();
    let index = Index { schema_version: 2, media_type: INDEX.into(), manifests: vec![m] };
    fs::write(staging.join("index.json"), serde_json::to_vec(&index)?)?;
    fs::write(staging.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("cannot replace {}", dir.display()))?;
    }
    fs::rename(&staging, dir)?;
    Ok(Image { dir: dir.to_path_buf(), digest, config, layer })
}

/// `image`, just written, read back ([`verify_layout`]) as the same image.
pub fn verify_written(image: &Image) -> Result<()> {
    let checked = verify_layout(&image.dir).context("the image just written does not read back")?;
    anyhow::ensure!(checked.digest == image.digest, "the image reads back as {}, not {}", checked.digest, image.digest);
    Ok(())
}

/// Reads a layout back and checks every blob against its digest and size.
pub fn verify_layout(dir: &Path) -> Result<Image> {
    let read = |digest: &str| -> Result<Vec<u8>> {
        let hex = digest.strip_prefix("sha256:").with_context(|| format!("`{digest}` is not a sha256 digest"))?;
        let bytes = fs::read(dir.join("blobs/sha256").join(hex)).with_context(|| format!("blob {digest} is missing"))?;
        let actual = kiln_manifest::sha256_hex(&bytes);
        anyhow::ensure!(actual == hex, "blob {digest} holds bytes that hash to sha256:{actual}");
        Ok(bytes)
    };
    let index: Index = serde_json::from_slice(&fs::read(dir.join("index.json"))?)?;
    let m = index.manifests.first().context("index.json lists no manifest")?;
    let manifest: Manifest = serde_json::from_slice(&read(&m.digest)?)?;
    let _: ImageConfig = serde_json::from_slice(&read(&manifest.config.digest)?)?;
    let layer = manifest.layers.first().context("the manifest has no layer")?.clone();
    let path = dir.join("blobs/sha256").join(layer.digest.trim_start_matches("sha256:"));
    let actual = kiln_toolchain::fetch::sha256_file(&path)?;
    anyhow::ensure!(format!("sha256:{actual}") == layer.digest, "layer {} hashes to sha256:{actual}", layer.digest);
    anyhow::ensure!(fs::metadata(&path)?.len() == layer.size, "layer {} is not {} bytes", layer.digest, layer.size);
    Ok(Image { dir: dir.to_path_buf(), digest: m.digest.clone(), config: manifest.config, layer })
}
