//! Reading a manifest: the one reader, for kiln's own tools and for the
//! artifact crates alike.
//!
//! serde derives the writer ([`Manifest::to_json`]); the reader is written out
//! here, over serde_json's `Value` (`str::parse`, which serde_json compiles in
//! its own crate), because a derived reader is monomorphized into every
//! crate that reads: in a consumer's release build that was most of this
//! crate's compile time (docs/benchmarks.md, "kiln's crates in a consumer's
//! build"). The field names are the writer's; `every_field_round_trips`
//! holds the two together. Like the derived reader it replaces, it ignores
//! fields it does not know (the manifest only ever adds fields) and refuses a
//! missing or mistyped one, naming where it is (`artifacts[3].size`).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::{Artifact, Backend, Geometry, KernelResources, Kind, Manifest, Package, Source, Targets, Toolchain};

/// `text` as a manifest, or why not (without the `what` prefix [`Manifest::from_json`] adds).
#[inline]
pub(crate) fn manifest(text: &str) -> Result<Manifest, String> {
    let value: Value = text.parse().map_err(|e: serde_json::Error| e.to_string())?;
    let mut o = Obj::of(value, "")?;
    Ok(Manifest {
        schema: o.u32("schema")?,
        kiln: o.string("kiln")?,
        source: o.with("source", source)?,
        toolchain: o.with("toolchain", toolchain)?,
        targets: o.with("targets", targets)?,
        artifacts: o.list("artifacts", artifact)?,
    })
}

#[inline]
fn source(o: &mut Obj) -> Result<Source, String> {
    Ok(Source { crate_name: o.string("crate")?, version: o.string("version")?, sha256: o.string("sha256")? })
}

#[inline]
fn toolchain(o: &mut Obj) -> Result<Toolchain, String> {
    Ok(Toolchain {
        identity: o.string("identity")?,
        distribution: o.string("distribution")?,
        suite: o.string("suite")?,
        packages: o.map("packages", |v, at| Obj::of(v, at).and_then(|mut p| package(&mut p)))?,
        reported: o.map("reported", string)?,
    })
}

#[inline]
fn package(o: &mut Obj) -> Result<Package, String> {
    Ok(Package { package: o.string("package")?, version: o.string("version")?, sha256: o.string("sha256")? })
}

#[inline]
fn targets(o: &mut Obj) -> Result<Targets, String> {
    Ok(Targets {
        hip: o.strings("hip")?,
        code_object_version: o.u32("code_object_version")?,
        cuda_ptx: o.strings("cuda_ptx")?,
        cuda_sass: o.strings("cuda_sass")?,
    })
}

#[inline]
fn artifact(o: &mut Obj) -> Result<Artifact, String> {
    Ok(Artifact {
        module: o.string("module")?,
        backend: o.named("backend", &[Backend::Hip, Backend::Cuda], |b| b.as_str())?,
        arch: o.string("arch")?,
        kind: o.named("kind", &Kind::ALL, |k| k.as_str())?,
        path: o.string("path")?,
        size: o.u64("size")?,
        sha256: o.string("sha256")?,
        kernels: o.strings("kernels")?,
        ptx_version: o.optional("ptx_version", string)?,
        resources: o.optional("resources", |v, at| list(v, at, resources))?.unwrap_or_default(),
        geometry: o.optional("geometry", |v, at| Obj::of(v, at).and_then(|mut g| geometry(&mut g)))?,
    })
}

#[inline]
fn geometry(o: &mut Obj) -> Result<Geometry, String> {
    Ok(Geometry { cuda_arch: o.u32("cuda_arch")?, defines: o.strings("defines")?, wavefront_size: o.u32("wavefront_size")? })
}

#[inline]
fn resources(o: &mut Obj) -> Result<KernelResources, String> {
    Ok(KernelResources {
        name: o.string("name")?,
        vgprs: o.u64("vgprs")?,
        sgprs: o.u64("sgprs")?,
        vgpr_spills: o.u64("vgpr_spills")?,
        sgpr_spills: o.u64("sgpr_spills")?,
        scratch_bytes: o.u64("scratch_bytes")?,
        lds_bytes: o.u64("lds_bytes")?,
        max_flat_workgroup_size: o.u64("max_flat_workgroup_size")?,
        wavefront_size: o.u64("wavefront_size")?,
    })
}

/// A JSON object and where it is (`artifacts[3]`; empty: the top).
/// Each field is taken out of it as it is read (no string is copied); a
/// list, not serde_json's map, so that no map code is compiled here.
struct Obj {
    fields: Vec<(String, Value)>,
    at: String,
}

impl Obj {
    #[inline]
    fn of(v: Value, at: &str) -> Result<Obj, String> {
        match v {
            Value::Object(fields) => Ok(Obj { fields: fields.into_iter().collect(), at: at.to_string() }),
            other => Err(mistyped(at, "an object", &other)),
        }
    }

    #[inline]
    fn take(&mut self, name: &str) -> Option<Value> {
        let i = self.fields.iter().position(|(k, _)| k == name)?;
        Some(self.fields.swap_remove(i).1)
    }

    /// Where the field `name` is, for messages.
    #[inline]
    fn at(&self, name: &str) -> String {
        if self.at.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.at)
        }
    }

    #[inline]
    fn field(&mut self, name: &str) -> Result<Value, String> {
        self.take(name).ok_or_else(|| {
            if self.at.is_empty() {
                format!("missing field `{name}`")
            } else {
                format!("{}: missing field `{name}`", self.at)
            }
        })
    }

    #[inline]
    fn string(&mut self, name: &str) -> Result<String, String> {
        string(self.field(name)?, &self.at(name))
    }

    #[inline]
    fn u64(&mut self, name: &str) -> Result<u64, String> {
        let v = self.field(name)?;
        v.as_u64().ok_or_else(|| mistyped(&self.at(name), "an unsigned integer", &v))
    }

    #[inline]
    fn u32(&mut self, name: &str) -> Result<u32, String> {
        let n = self.u64(name)?;
        u32::try_from(n).map_err(|_| format!("{}: {n} is out of range (at most {})", self.at(name), u32::MAX))
    }

    #[inline]
    fn strings(&mut self, name: &str) -> Result<Vec<String>, String> {
        strings(self.field(name)?, &self.at(name))
    }

    #[inline]
    fn with<T>(&mut self, name: &str, read: fn(&mut Obj) -> Result<T, String>) -> Result<T, String> {
        read(&mut Obj::of(self.field(name)?, &self.at(name))?)
    }

    #[inline]
    fn list<T>(&mut self, name: &str, read: fn(&mut Obj) -> Result<T, String>) -> Result<Vec<T>, String> {
        list(self.field(name)?, &self.at(name), read)
    }

    #[inline]
    fn map<T>(&mut self, name: &str, read: impl Fn(Value, &str) -> Result<T, String>) -> Result<BTreeMap<String, T>, String> {
        let at = self.at(name);
        let entries = match self.field(name)? {
            Value::Object(entries) => entries,
            other => return Err(mistyped(&at, "an object", &other)),
        };
        entries
            .into_iter()
            .map(|(k, v)| {
                let v = read(v, &format!("{at}.{k}"))?;
                Ok((k, v))
            })
            .collect()
    }

    /// A field the writer leaves out when it is empty: absent or `null` is `None`.
    #[inline]
    fn optional<T>(&mut self, name: &str, read: impl Fn(Value, &str) -> Result<T, String>) -> Result<Option<T>, String> {
        match self.take(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => read(v, &self.at(name)).map(Some),
        }
    }

    /// One of `variants`, by the name `name_of` gives it.
    #[inline]
    fn named<T: Copy>(&mut self, name: &str, variants: &[T], name_of: fn(T) -> &'static str) -> Result<T, String> {
        let s = self.string(name)?;
        variants.iter().copied().find(|v| name_of(*v) == s).ok_or_else(|| {
            let known: Vec<_> = variants.iter().map(|v| format!("`{}`", name_of(*v))).collect();
            format!("{}: unknown variant `{}`, expected one of {}", self.at(name), crate::shown(&s), known.join(", "))
        })
    }
}

#[inline]
fn string(v: Value, at: &str) -> Result<String, String> {
    match v {
        Value::String(s) => Ok(s),
        other => Err(mistyped(at, "a string", &other)),
    }
}

#[inline]
fn strings(v: Value, at: &str) -> Result<Vec<String>, String> {
    items(v, at)?.into_iter().enumerate().map(|(i, item)| string(item, &format!("{at}[{i}]"))).collect()
}

#[inline]
fn list<T>(v: Value, at: &str, read: fn(&mut Obj) -> Result<T, String>) -> Result<Vec<T>, String> {
    items(v, at)?.into_iter().enumerate().map(|(i, item)| read(&mut Obj::of(item, &format!("{at}[{i}]"))?)).collect()
}

#[inline]
fn items(v: Value, at: &str) -> Result<Vec<Value>, String> {
    match v {
        Value::Array(items) => Ok(items),
        other => Err(mistyped(at, "an array", &other)),
    }
}

#[inline]
fn mistyped(at: &str, expected: &str, found: &Value) -> String {
    let found = match found {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    let at = if at.is_empty() { "the manifest" } else { at };
    format!("{at}: expected {expected}, found {found}")
}
