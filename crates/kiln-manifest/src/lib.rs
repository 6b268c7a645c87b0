//! `target/dist/manifest.json`: what `cargo xtask dist` built, one entry per
//! artifact, with hashes and the kernels read back from each file.
//!
//! This is a published interface (docs/manifest.md): the artifact crates
//! embed it and the runtime loader reads it, so fields are only ever added.
//! serde derives its writer; its reader ([`read`]) is written out, so that a
//! consumer's build compiles no serde code for it.

use serde::Serialize;
use std::collections::BTreeMap;

mod read;
mod select;
pub use select::{ArchError, DeviceArch, Match, SelectError, SelectOptions, Selection};

/// The manifest schema this crate writes and reads.
pub const SCHEMA: u32 = 1;
/// Its file name inside the dist folder.
pub const FILE_NAME: &str = "manifest.json";
/// The main set's dist folder, relative to the repository root: where
/// `cargo xtask dist` writes it by default and where the loader, its
/// benchmark and CI's workflow look for it.
pub const DIST_DIR: &str = "target/dist";

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Manifest {
    pub schema: u32,
    /// The kiln version that wrote it.
    pub kiln: String,
    pub source: Source,
    pub toolchain: Toolchain,
    pub targets: Targets,
    pub artifacts: Vec<Artifact>,
}

/// The kernel sources: a crates.io crate, by version and sha256 of its `.crate`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Source {
    #[serde(rename = "crate")]
    pub crate_name: String,
    pub version: String,
    pub sha256: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Toolchain {
    /// sha256 over every package of the toolchain (kiln-toolchain's `identity`).
    pub identity: String,
    pub distribution: String,
    pub suite: String,
    /// The compiler packages by role (`nvcc`, `clang`, `hip`, `rocm_device_libs`).
    pub packages: BTreeMap<String, Package>,
    /// What each compiler says of itself (`nvcc --version`, `clang --version`), first line that names a version.
    pub reported: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Package {
    pub package: String,
    pub version: String,
    pub sha256: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Targets {
    pub hip: Vec<String>,
    pub code_object_version: u32,
    /// PTX levels, lowest (the floor) first.
    pub cuda_ptx: Vec<String>,
    pub cuda_sass: Vec<String>,
}

pub use kiln_target::Backend;

/// The GPU table and the CUDA compatibility rule, for the artifact crates, which reach kiln-target through this crate.
pub use kiln_target;

/// The sha256 of `bytes` as every kiln record writes it (the manifest, the
/// lock, crates.json, cache entries): 64 lowercase hex digits.
#[inline]
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex(&sha2::Sha256::digest(bytes))
}

/// Lowercase hex of a digest.
#[inline]
pub fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `s` is a sha256 as kiln's records write it: 64 lowercase hex digits.
#[inline]
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Text from outside kiln (a file, an archive's entry names, a server's
/// answer, a signed statement) as it may be printed: control characters
/// (C0, DEL, C1: terminal escape sequences, carriage returns, bells) and the
/// bidirectional overrides that reorder what a terminal shows are written as
/// `\u{..}` escapes, a backslash as `\\`; everything else as it is. The one
/// function every message uses for external text.
#[inline]
pub fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    #[inline]
    fn hidden(c: char) -> bool {
        c == '\\' || c.is_control() || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    }
    if !text.chars().any(hidden) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if hidden(c) => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The first `n` characters of a hash or id for a message: never a panic on a
/// shorter or non-ASCII string read from a file (it is then shown whole).
#[inline]
pub fn short(s: &str, n: usize) -> &str {
    s.char_indices().nth(n).map_or(s, |(i, _)| &s[..i])
}

/// Where a path read from a file (an artifact's manifest `path`) lives under
/// `root`: a relative, `/`-separated path of plain names only. One that climbs
/// out of the folder (`..`, `/etc/...`), names the folder itself (empty, `.`)
/// comes from a tampered file and is refused. The one check every reader of
/// such paths uses (the loader, `verify`).
#[inline]
pub fn path_inside(root: &std::path::Path, path: &str) -> Result<std::path::PathBuf, String> {
    use std::path::{Component, Path};
    let rel = Path::new(path);
    let plain = !path.is_empty() && rel.components().all(|c| matches!(c, Component::Normal(_)));
    if !plain || path.contains('\0') {
        return Err(format!("not a path inside the folder {}", root.display()));
    }
    Ok(root.join(rel))
}

/// [`path_inside`], then what is there must be a regular file reached
/// through folders only: a symbolic link anywhere on the way (which may lead
/// out of the folder), a FIFO (which would block a reader for ever), a device
/// or a folder is refused, looked at without being opened.
#[inline]
pub fn regular_file_inside(root: &std::path::Path, path: &str) -> Result<std::path::PathBuf, String> {
    let file = path_inside(root, path)?;
    let mut at = root.to_path_buf();
    let names: Vec<_> = std::path::Path::new(path).components().collect();
    for (i, c) in names.iter().enumerate() {
        at.push(c);
        let meta = std::fs::symlink_metadata(&at).map_err(|e| format!("cannot read {}: {e}", at.display()))?;
        let last = i + 1 == names.len();
        let t = meta.file_type();
        if t.is_symlink() {
            return Err(format!("{} is a symbolic link; kiln reads only regular files inside {}", at.display(), root.display()));
        }
        if last && !t.is_file() {
            return Err(format!("{} is not a regular file (a folder, FIFO, socket or device); not read", at.display()));
        }
        if !last && !t.is_dir() {
            return Err(format!("{} is not a folder", at.display()));
        }
    }
    Ok(file)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// An AMDGPU code object for one gfx arch.
    Hsaco,
    /// PTX text for a virtual arch (`compute_XX`), JIT-compiled by the driver.
    Ptx,
    /// SASS for one real arch (`sm_XX`).
    Cubin,
    /// A static library of host objects with embedded SASS (candle-kernels' `ffi`).
    Staticlib,
    /// A clang offload bundle of one module's code objects for every carried
    /// gfx arch (`Module::hsaco()`): `hipModuleLoadData` takes the entry for
    /// the device. Its `arch` lists the bundled archs, `+`-separated.
    Bundle,
}

/// The module name of one source file of a static library built per target
/// (docs/static-library.md): `<lib>/<stem>` (`moe/mmq_instance_q4_0`), whose
/// cubins are `cuda/sm_XX/<lib>/<stem>.cubin`. Such a module is no kernel
/// module of the crate's API: [`Manifest::modules`] leaves it out.
#[inline]
pub fn library_file_module(lib: &str, stem: &str) -> String {
    format!("{lib}/{stem}")
}

/// The library and the file stem of a module name that [`library_file_module`] made.
#[inline]
pub fn library_file(module: &str) -> Option<(&str, &str)> {
    module.split_once('/')
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Artifact {
    /// `affine`..`unary`, the static library's name (`moe`), or one file of a
    /// library built per target (`moe/mmq_instance_q4_0`: [`library_file_module`]).
    pub module: String,
    pub backend: Backend,
    /// `gfx90a`, `compute_80`, `sm_90`; a static library lists its sms joined
    /// by `+`, or is `host` when built per target (its kernels are its files' cubins).
    pub arch: String,
    pub kind: Kind,
    /// Relative to the dist folder, `/`-separated.
    pub path: String,
    pub size: u64,
    pub sha256: String,
    /// Kernel entry points read from the file (for a static library: the
    /// `extern "C"` functions it defines), sorted.
    pub kernels: Vec<String>,
    /// PTX only: the `.version` directive (decides the oldest driver that JITs it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ptx_version: Option<String>,
    /// HSACO only: per-kernel registers, scratch and spills from the code-object metadata.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<KernelResources>,
    /// HSACO only: the launch geometry it was compiled for, which the host that
    /// launches its kernels must assume (docs/consuming.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub geometry: Option<Geometry>,
}

/// What an AMD code object was compiled for that decides how its kernels must
/// be launched: chosen per arch by kiln-target's table, recorded per artifact.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Geometry {
    /// The `__CUDA_ARCH__` the HIP shims define for the device pass (890): the
    /// CUDA code paths, and the kernel set, of that NVIDIA level.
    pub cuda_arch: u32,
    /// Macros on the compile line that change launch geometry in the sources
    /// (`RDNA2`, `RDNA3`); empty: none. `GGML_USE_HIPBLAS` is never among them.
    pub defines: Vec<String>,
    /// Lanes per wave of every kernel in it: 32 (RDNA) or 64 (GCN/CDNA). The
    /// sources' warps are 32 lanes either way (the shims' virtual warps).
    pub wavefront_size: u32,
}

/// What one AMD kernel needs from the hardware, as kiln-validate reads it
/// from the code object's metadata.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KernelResources {
    pub name: String,
    pub vgprs: u64,
    pub sgprs: u64,
    pub vgpr_spills: u64,
    pub sgpr_spills: u64,
    /// Private (scratch) bytes per work-item; spills land here.
    pub scratch_bytes: u64,
    /// LDS (shared memory) bytes per work-group.
    pub lds_bytes: u64,
    /// The launch bound the kernel was compiled for.
    pub max_flat_workgroup_size: u64,
    pub wavefront_size: u64,
}

/// A manifest that cannot be used.
#[derive(Debug)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    #[inline]
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Error {}

impl Manifest {
    /// Parses and checks the schema; `what` names the source in messages.
    #[inline]
    pub fn from_json(text: &str, what: &str) -> Result<Manifest, Error> {
        let m = read::manifest(text).map_err(|e| Error(format!("{what}: not a kiln manifest: {e}")))?;
        if m.schema != SCHEMA {
            return Err(Error(format!("{what}: manifest schema {} but this reader knows {SCHEMA}", m.schema)));
        }
        Ok(m)
    }

    /// `#[inline]`: compiled only in the crates that write a manifest (kiln's
    /// tools), not in every crate that depends on this one.
    #[inline]
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("a manifest always serializes");
        s.push('\n');
        s
    }

    #[inline]
    pub fn find(&self, module: &str, kind: Kind, arch: &str) -> Option<&Artifact> {
        self.artifacts.iter().find(|a| a.module == module && a.kind == kind && a.arch == arch)
    }

    /// Every artifact of one module.
    #[inline]
    pub fn of_module<'a>(&'a self, module: &'a str) -> impl Iterator<Item = &'a Artifact> + 'a {
        self.artifacts.iter().filter(move |a| a.module == module)
    }
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 5] = [Kind::Hsaco, Kind::Ptx, Kind::Cubin, Kind::Staticlib, Kind::Bundle];

    #[inline]
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Hsaco => "hsaco",
            Kind::Ptx => "ptx",
            Kind::Cubin => "cubin",
            Kind::Staticlib => "staticlib",
            Kind::Bundle => "bundle",
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn external_text_is_shown_with_its_control_characters_escaped() {
        assert!(matches!(shown("kiln-candle-kernels-sm90 0.11.1+kiln.1 ünïcode"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(shown("a\u{1b}]0;pwned\u{7}b\r\n"), "a\\u{1b}]0;pwned\\u{7}b\\u{d}\\u{a}");
        assert_eq!(shown("x\u{9b}31m\u{202e}gpj.exe\\"), "x\\u{9b}31m\\u{202e}gpj.exe\\\\");
        assert!(!shown("\u{1b}[2J\u{7f}").chars().any(char::is_control));
    }

    /// A manifest of candle-kernels 0.11.1 with `targets` and `artifacts`
    /// (the other modules' tests build theirs on it).
    pub(crate) fn manifest_of(targets: Targets, artifacts: Vec<Artifact>) -> Manifest {
        Manifest {
            schema: SCHEMA,
            kiln: "0.1.0".into(),
            source: Source { crate_name: "candle-kernels".into(), version: "0.11.1".into(), sha256: "ab".repeat(32) },
            toolchain: Toolchain {
                identity: "cd".repeat(32),
                distribution: "debian".into(),
                suite: "trixie".into(),
                packages: BTreeMap::new(),
                reported: BTreeMap::new(),
            },
            targets,
            artifacts,
        }
    }

    fn sample() -> Manifest {
        manifest_of(
            Targets { hip: vec!["gfx90a".into()], code_object_version: 5, cuda_ptx: vec!["compute_80".into()], cuda_sass: vec!["sm_90".into()] },
            vec![Artifact {
                module: "affine".into(),
                backend: Backend::Cuda,
                arch: "compute_80".into(),
                kind: Kind::Ptx,
                path: "cuda/compute_80/affine.ptx".into(),
                size: 10,
                sha256: "ef".repeat(32),
                kernels: vec!["affine_f32".into()],
                ptx_version: Some("8.4".into()),
                resources: vec![],
                geometry: None,
            }],
        )
    }

    #[test]
    fn hashes_are_shortened_and_recognised_without_panicking_on_what_a_file_holds() {
        let h = sha256_hex(b"kiln");
        assert!(is_sha256_hex(&h) && short(&h, 12) == &h[..12]);
        assert_eq!((short("ab", 12), short("", 16), short("é€ab", 2)), ("ab", "", "é€"));
        for bad in ["ab", &h.to_uppercase(), &format!("{h}0"), &format!("{}g", &h[..63])] {
            assert!(!is_sha256_hex(bad), "{bad}");
        }
    }

    #[test]
    fn round_trips_and_uses_the_documented_field_names() {
        let m = sample();
        let json = m.to_json();
        for key in [
            "\"artifacts\"",
            "\"module\"",
            "\"backend\": \"cuda\"",
            "\"arch\"",
            "\"kind\": \"ptx\"",
            "\"path\"",
            "\"size\"",
            "\"sha256\"",
            "\"kernels\"",
            "\"crate\"",
        ] {
            assert!(json.contains(key), "{key} missing from {json}");
        }
        assert!(!json.contains("\"resources\""), "empty resources are left out");
        assert_eq!(Manifest::from_json(&json, "test").unwrap(), m);
        assert!(m.find("affine", Kind::Ptx, "compute_80").is_some());
    }

    #[test]
    fn writes_kernel_resources_as_documented() {
        // docs/manifest.md's field names and order: kiln-validate fills this
        // type, so what it reads is what the manifest writes.
        let r = KernelResources {
            name: "affine_bf16".into(),
            vgprs: 12,
            sgprs: 18,
            vgpr_spills: 0,
            sgpr_spills: 1,
            scratch_bytes: 4,
            lds_bytes: 0,
            max_flat_workgroup_size: 1024,
            wavefront_size: 64,
        };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"name":"affine_bf16","vgprs":12,"sgprs":18,"vgpr_spills":0,"sgpr_spills":1,"scratch_bytes":4,"lds_bytes":0,"max_flat_workgroup_size":1024,"wavefront_size":64}"#
        );
    }

    /// The reader ([`read`]) and the derived writer name every field alike: a
    /// manifest with every optional field set reads back as itself.
    #[test]
    fn every_field_round_trips() {
        let mut m = sample();
        m.toolchain
            .packages
            .insert("nvcc".into(), Package { package: "nvidia-cuda-toolkit".into(), version: "12.4".into(), sha256: "01".repeat(32) });
        m.toolchain.reported.insert("nvcc".into(), "Cuda compilation tools, release 12.4".into());
        let mut hsaco = m.artifacts[0].clone();
        hsaco.backend = Backend::Hip;
        hsaco.kind = Kind::Hsaco;
        hsaco.ptx_version = None;
        hsaco.geometry = Some(Geometry { cuda_arch: 890, defines: vec!["RDNA3".into()], wavefront_size: 32 });
        hsaco.resources = vec![KernelResources {
            name: "affine_f32".into(),
            vgprs: 1,
            sgprs: 2,
            vgpr_spills: 3,
            sgpr_spills: 4,
            scratch_bytes: 5,
            lds_bytes: 6,
            max_flat_workgroup_size: 7,
            wavefront_size: 8,
        }];
        m.artifacts.push(hsaco);
        for kind in Kind::ALL {
            let mut a = m.artifacts[0].clone();
            a.kind = kind;
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str(), "Kind::as_str is the written name");
            m.artifacts.push(a);
        }
        assert_eq!(Manifest::from_json(&m.to_json(), "test").unwrap(), m);
    }

    #[test]
    fn a_missing_or_mistyped_field_is_named_where_it_is() {
        let json = sample().to_json();
        let err = |from: &str, to: &str| {
            assert!(json.contains(from), "{from}");
            Manifest::from_json(&json.replacen(from, to, 1), "m.json").unwrap_err().0
        };
        assert_eq!(err("\"size\": 10", "\"bytes\": 10"), "m.json: not a kiln manifest: artifacts[0]: missing field `size`");
        assert_eq!(
            err("\"size\": 10", "\"size\": \"10\""),
            "m.json: not a kiln manifest: artifacts[0].size: expected an unsigned integer, found a string"
        );
        assert_eq!(
            err("\"kind\": \"ptx\"", "\"kind\": \"elf\""),
            "m.json: not a kiln manifest: artifacts[0].kind: unknown variant `elf`, expected one of `hsaco`, `ptx`, `cubin`, `staticlib`, `bundle`"
        );
        assert_eq!(
            err("\"code_object_version\": 5", "\"code_object_version\": 4294967296"),
            "m.json: not a kiln manifest: targets.code_object_version: 4294967296 is out of range (at most 4294967295)"
        );
        assert_eq!(
            err("\"kernels\": [", "\"kernels\": [1, "),
            "m.json: not a kiln manifest: artifacts[0].kernels[0]: expected a string, found a number"
        );
        // Fields it does not know are read past (fields are only ever added).
        assert_eq!(Manifest::from_json(&json.replacen("\"size\": 10", "\"size\": 10, \"new\": [null]", 1), "m").unwrap(), sample());
        assert_eq!(
            Manifest::from_json("[]", "m.json").unwrap_err().0,
            "m.json: not a kiln manifest: the manifest: expected an object, found an array"
        );
        assert!(
            Manifest::from_json("{", "m.json").unwrap_err().0.contains("EOF while parsing"),
            "serde_json's own message, with its line and column"
        );
    }

    #[test]
    fn refuses_other_schemas_and_garbage() {
        let json = sample().to_json().replace("\"schema\": 1", "\"schema\": 2");
        assert!(Manifest::from_json(&json, "m.json").unwrap_err().0.contains("schema 2"));
        assert!(Manifest::from_json("{}", "m.json").unwrap_err().0.starts_with("m.json: not a kiln manifest"));
    }
}
