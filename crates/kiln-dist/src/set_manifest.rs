//! What a dist folder's `manifest.json` is: kiln-manifest's [`Manifest`] and,
//! for a kernel set other than the main one, which set it is (and a folder
//! source's path).
//!
//! kiln-manifest 0.1.0 is published inside the candle crates, so its types are
//! not changed here: the two fields live in this wrapper, written only where
//! they apply. The main set's manifest is exactly `Manifest::to_json()` (the
//! bytes every earlier dist wrote, which the candle crates embed), and
//! kiln-manifest's reader ignores fields it does not know, so it reads any
//! set's manifest (docs/manifest.md).

use anyhow::{bail, Context, Result};
use kiln_manifest::Manifest;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SetManifest {
    /// The kernel set; absent for the main set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set: Option<String>,
    /// A folder source's path (its `source.sha256` is then the hash of the
    /// folder's listing, and `source.crate` and `source.version` are empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_path: Option<String>,
    #[serde(flatten)]
    pub manifest: Manifest,
}

/// The wrapper's own fields, as [`SetManifest::from_json`] reads them
/// (kiln-manifest's reader reads the rest).
#[derive(Deserialize)]
struct Wrapper {
    #[serde(default)]
    set: Option<String>,
    #[serde(default)]
    source_path: Option<String>,
}

impl SetManifest {
    /// The main set's manifest: nothing beyond kiln-manifest's fields.
    pub fn main(manifest: Manifest) -> SetManifest {
        SetManifest { set: None, source_path: None, manifest }
    }

    pub fn to_json(&self) -> String {
        if self.set.is_none() && self.source_path.is_none() {
            return self.manifest.to_json();
        }
        let mut s = serde_json::to_string_pretty(self).expect("a manifest always serializes");
        s.push('\n');
        s
    }

    /// Parses and checks the schema; `what` names the source in messages.
    pub fn from_json(text: &str, what: &str) -> Result<SetManifest> {
        // kiln-manifest's checks first (the schema), then the wrapper's fields.
        let manifest = Manifest::from_json(text, what).map_err(|e| anyhow::anyhow!("{e}"))?;
        let Wrapper { set, source_path } = serde_json::from_str(text).with_context(|| format!("{what}: not a kiln manifest"))?;
        if set.as_deref() == Some("") {
            bail!("{what}: an empty `set`");
        }
        Ok(SetManifest { set, source_path, manifest })
    }

    /// The file name of the lock of the set this manifest is of.
    pub fn lock_name(&self) -> String {
        crate::set_output::lock_file_name(self.set.as_deref().unwrap_or_default(), self.set.is_none())
    }

    /// The lock's `source` line: `candle-kernels 0.11.1 <sha256>`, or `<path> <sha256>` for a folder.
    pub fn source_line(&self) -> String {
        let s = &self.manifest.source;
        match &self.source_path {
            Some(p) => format!("{p} {}", s.sha256),
            None => format!("{} {} {}", s.crate_name, s.version, s.sha256),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_manifest::{Source, Targets, Toolchain};

    fn manifest() -> Manifest {
        Manifest {
            schema: kiln_manifest::SCHEMA,
            kiln: "0.1.0".into(),
            source: Source { crate_name: "candle-flash-attn".into(), version: "0.11.1".into(), sha256: "ab".repeat(32) },
            toolchain: Toolchain {
                identity: "t".into(),
                distribution: "debian".into(),
                suite: "trixie".into(),
                packages: Default::default(),
                reported: Default::default(),
            },
            targets: Targets { hip: vec![], code_object_version: 5, cuda_ptx: vec![], cuda_sass: vec![] },
            artifacts: vec![],
        }
    }

    #[test]
    fn the_main_set_writes_exactly_kiln_manifests_bytes_and_others_name_their_set() {
        let main = SetManifest::main(manifest());
        assert_eq!(main.to_json(), manifest().to_json());
        let other = SetManifest { set: Some("flash-attn".into()), source_path: None, manifest: manifest() };
        let json = other.to_json();
        assert!(json.starts_with("{\n  \"set\": \"flash-attn\",\n  \"schema\": 1,"), "{json}");
        assert_eq!(SetManifest::from_json(&json, "m").unwrap(), other);
        // kiln-manifest's own reader (the loader's, the crates') reads it, without the set.
        assert_eq!(Manifest::from_json(&json, "m").unwrap(), manifest());
        assert_eq!(SetManifest::from_json(&main.to_json(), "m").unwrap().set, None);
        let folder = SetManifest { set: Some("example".into()), source_path: Some("kernels/example".into()), manifest: manifest() };
        assert_eq!(folder.source_line(), format!("kernels/example {}", "ab".repeat(32)));
        assert_eq!(main.source_line(), format!("candle-flash-attn 0.11.1 {}", "ab".repeat(32)));
    }
}
