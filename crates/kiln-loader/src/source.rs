//! Where artifacts come from: the generated kernel crate (embedded bytes) or a
//! `cargo xtask dist` folder on disk. The loader asks only for the manifest and
//! the raw bytes of an artifact by its manifest `path`; decompressing is the
//! source's business.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use kiln_manifest::Manifest;

use crate::error::{Error, Result};

/// The environment variable naming a dist folder to load from.
pub const DIST_DIR_ENV: &str = "KILN_DIST_DIR";

/// A set of kiln artifacts with their manifest.
///
/// The loader checks every byte it gets against the manifest's sha256 before
/// use, so a source need not be trusted to return the right file, only to
/// return the manifest the artifacts were built with.
pub trait ArtifactSource: Send + Sync {
    fn manifest(&self) -> &Manifest;
    /// The raw bytes of the artifact at `path` (a manifest `path`).
    /// Embedded artifacts return `Cow::Borrowed` and cost nothing to keep.
    fn bytes(&self, path: &str) -> Result<Cow<'static, [u8]>>;
    /// Names the source in messages (`dist folder /x/target/dist`).
    fn describe(&self) -> String;
}

/// A shared or `'static` source is a source: the same three calls, passed through.
macro_rules! forward_source {
    ($($ptr:ty),+) => {$(
        impl<S: ArtifactSource + ?Sized> ArtifactSource for $ptr {
            fn manifest(&self) -> &Manifest {
                (**self).manifest()
            }
            fn bytes(&self, path: &str) -> Result<Cow<'static, [u8]>> {
                (**self).bytes(path)
            }
            fn describe(&self) -> String {
                (**self).describe()
            }
        }
    )+};
}
forward_source!(std::sync::Arc<S>, &'static S);

/// A dist folder written by `cargo xtask dist` (`target/dist`).
#[derive(Debug)]
pub struct DistDir {
    root: PathBuf,
    manifest: Manifest,
}

impl DistDir {
    /// Reads `<root>/manifest.json`.
    pub fn open(root: impl Into<PathBuf>) -> Result<DistDir> {
        let root = root.into();
        let file = root.join(kiln_manifest::FILE_NAME);
        let what = file.display().to_string();
        let text = std::fs::read_to_string(&file).map_err(|e| Error::Manifest {
            source: what.clone(),
            message: format!("cannot read it: {e}; build the artifacts with `cargo xtask dist` or point {DIST_DIR_ENV} at a dist folder"),
        })?;
        let manifest = Manifest::from_json(&text, &what).map_err(|e| Error::Manifest { source: what, message: e.0 })?;
        Ok(DistDir { root, manifest })
    }

    /// The folder named by `KILN_DIST_DIR`, if it is set.
    pub fn from_env() -> Option<Result<DistDir>> {
        std::env::var_os(DIST_DIR_ENV).map(DistDir::open)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A manifest path is relative and `/`-separated; one that climbs out of
    /// the folder (`../`, `/etc/...`), or leads to anything but a regular
    /// file (a link, a FIFO), comes from a tampered manifest
    /// ([`kiln_manifest::regular_file_inside`]).
    fn resolve(&self, path: &str) -> Result<PathBuf> {
        kiln_manifest::regular_file_inside(&self.root, path)
            .map_err(|message| Error::Artifact { path: path.to_string(), message: format!("dist folder: {message}") })
    }
}

impl ArtifactSource for DistDir {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn bytes(&self, path: &str) -> Result<Cow<'static, [u8]>> {
        let file = self.resolve(path)?;
        std::fs::read(&file)
            .map(Cow::Owned)
            .map_err(|e| Error::Artifact { path: path.to_string(), message: format!("cannot read {}: {e}", file.display()) })
    }

    fn describe(&self) -> String {
        format!("dist folder {}", self.root.display())
    }
}

type Fetch = dyn Fn(&str) -> Option<Cow<'static, [u8]>> + Send + Sync;

/// An [`ArtifactSource`] over functions, for crates that embed artifacts
/// without depending on this loader: the generated kernel crate exposes its
/// manifest and a byte lookup, and the consumer wraps them here.
pub struct FnSource {
    manifest: Manifest,
    fetch: Box<Fetch>,
    name: String,
}

impl FnSource {
    /// `fetch(path)` returns the raw (decompressed) bytes of the artifact at a manifest `path`.
    pub fn new(name: impl Into<String>, manifest: Manifest, fetch: impl Fn(&str) -> Option<Cow<'static, [u8]>> + Send + Sync + 'static) -> FnSource {
        FnSource { manifest, fetch: Box::new(fetch), name: name.into() }
    }
}

impl ArtifactSource for FnSource {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }
    fn bytes(&self, path: &str) -> Result<Cow<'static, [u8]>> {
        (self.fetch)(path).ok_or_else(|| Error::Artifact { path: path.to_string(), message: format!("{} does not carry it", self.name) })
    }
    fn describe(&self) -> String {
        self.name.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        let json = r#"{"schema":1,"kiln":"0.1.0","source":{"crate":"candle-kernels","version":"0.11.1","sha256":"00"},
            "toolchain":{"identity":"00","distribution":"debian","suite":"trixie","packages":{},"reported":{}},
            "targets":{"hip":[],"code_object_version":5,"cuda_ptx":["compute_80"],"cuda_sass":[]},
            "artifacts":[{"module":"fill","backend":"cuda","arch":"compute_80","kind":"ptx","path":"cuda/compute_80/fill.ptx",
            "size":3,"sha256":"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad","kernels":["fill_f32"]}]}"#;
        Manifest::from_json(json, "test").unwrap()
    }

    #[test]
    fn fn_source_serves_embedded_bytes_and_names_itself_when_it_cannot() {
        static PTX: &[u8] = b"abc";
        let s = FnSource::new("kiln-kernels-cuda 0.1.0", manifest(), |p| (p == "cuda/compute_80/fill.ptx").then_some(Cow::Borrowed(PTX)));
        assert!(matches!(s.bytes("cuda/compute_80/fill.ptx").unwrap(), Cow::Borrowed(b"abc")));
        let e = s.bytes("cuda/sm_90/fill.cubin").unwrap_err();
        assert_eq!(e.to_string(), "kiln artifact `cuda/sm_90/fill.cubin`: kiln-kernels-cuda 0.1.0 does not carry it");
        crate::verify::verify_hash(&s.manifest().artifacts[0], &s.bytes("cuda/compute_80/fill.ptx").unwrap()).unwrap();
    }
}
