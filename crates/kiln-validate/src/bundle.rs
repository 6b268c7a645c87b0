//! Reads clang offload bundles back (the layout kiln-build's `bundle` writes)
//! and checks one against the code objects it was made from: every entry
//! present once, byte-identical to its input, and its id naming the arch and
//! target features the code object itself carries (metadata target, and the
//! `e_flags` machine and feature bits).
//!
//! [`read`] parses the header; [`check`] reads every HIP entry as a code
//! object and returns it with its kernels (for comparing kernel sets);
//! [`verify`]/[`verify_with`] compare a bundle with the `(gfx, code object)`
//! pairs that went into it.

use anyhow::{bail, Context, Result};

use crate::hsaco::{self, Feature, Hsaco};

const MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
/// How much of an in-memory image ROCm's runtime reads for the bundle header.
const RUNTIME_HEADER_READ: usize = 4096;
/// Offload kinds the HIP runtime loads; every other entry (the host) is skipped.
const HIP_KINDS: [&str; 3] = ["hipv4", "hip", "hcc"];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// `host-x86_64-unknown-linux-gnu`, `hipv4-amdgcn-amd-amdhsa--gfx90a`, ...
    pub id: String,
    pub offset: u64,
    pub size: u64,
}

impl Entry {
    /// The gfx target id of a HIP entry (`gfx90a`, `gfx90a:xnack-`); `None` for the host.
    pub fn gfx(&self) -> Option<&str> {
        let (kind, rest) = self.id.split_once('-')?;
        if !HIP_KINDS.contains(&kind) {
            return None;
        }
        // `amdgcn-amd-amdhsa-` then `-gfx..` (current) or `gfx..` (old bundlers).
        let rest = rest.strip_prefix("amdgcn-amd-amdhsa-")?;
        Some(rest.strip_prefix('-').unwrap_or(rest))
    }

    /// The entry's bytes; `bundle` is the buffer [`read`] read it from.
    pub fn payload<'a>(&self, bundle: &'a [u8]) -> &'a [u8] {
        &bundle[self.offset as usize..(self.offset + self.size) as usize]
    }
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// The entries of an uncompressed bundle, in file order. Refuses a bad
/// magic, a truncated header, an entry past the end of the file, over the
/// header or over another entry, an id given twice, and a header longer than
/// the 4096 bytes the HIP runtime reads of an in-memory image.
pub fn read(bytes: &[u8]) -> Result<Vec<Entry>> {
    if bytes.get(..MAGIC.len()) != Some(MAGIC) {
        if bytes.starts_with(b"CCOB") {
            bail!("a compressed (CCOB) clang offload bundle; kiln reads and writes only uncompressed ones");
        }
        bail!("not a clang offload bundle (no __CLANG_OFFLOAD_BUNDLE__ magic)");
    }
    let n = u64_at(bytes, MAGIC.len()).context("truncated bundle header: no entry count")?;
    let mut at = MAGIC.len() + 8;
    let mut out: Vec<Entry> = Vec::new();
    for i in 0..n {
        let (Some(offset), Some(size), Some(len)) = (u64_at(bytes, at), u64_at(bytes, at + 8), u64_at(bytes, at + 16)) else {
            bail!("truncated bundle header: entry {i} of {n} ends past the file's {} bytes", bytes.len());
        };
        let id = usize::try_from(len)
            .ok()
            .and_then(|len| bytes.get(at + 24..(at + 24).checked_add(len)?))
            .with_context(|| format!("truncated bundle header: the id of entry {i} of {n} ({len} bytes) ends past the end of the file"))?;
        let id = String::from_utf8(id.to_vec()).with_context(|| format!("bundle entry {i} of {n}: the id is not UTF-8"))?;
        at += 24 + id.len();
        out.push(Entry { id, offset, size });
    }
    for (i, e) in out.iter().enumerate() {
        if e.offset.checked_add(e.size).is_none_or(|end| end > bytes.len() as u64) {
            bail!("bundle entry {}: bytes {}..+{} run past the end of the file ({} bytes)", e.id, e.offset, e.size, bytes.len());
        }
        if out[..i].iter().any(|f| f.id == e.id) {
            bail!("bundle entry {} appears twice", e.id);
        }
    }
    // ROCm's runtime hands its code-object reader only the first 4096 bytes of
    // an image that is not backed by a file (clr), so the whole header must fit.
    if at > RUNTIME_HEADER_READ {
        bail!("the bundle header is {at} bytes; the HIP runtime reads only the first {RUNTIME_HEADER_READ} of an in-memory image");
    }
    let mut spans: Vec<&Entry> = out.iter().filter(|e| e.size > 0).collect();
    spans.sort_by_key(|e| e.offset);
    if let Some(e) = spans.first().filter(|e| e.offset < at as u64) {
        bail!("bundle entry {} (at byte {}) overlaps the header, which ends at byte {at}", e.id, e.offset);
    }
    for w in spans.windows(2) {
        if w[1].offset < w[0].offset + w[0].size {
            bail!("bundle entries {} and {} overlap", w[0].id, w[1].id);
        }
    }
    Ok(out)
}

/// The entry of `bundle` that the HIP runtime of ROCm `runtime` loads on a
/// device whose ISA is `device` (its target id, `gfx1031` or
/// `gfx90a:sramecc+:xnack-`), as clr does it (`hipamd/src/hip_fatbin.cpp`,
/// `ExtractFatBinaryUsingCOMGR`, with comgr's `lookUpCodeObject` and
/// `isCompatibleIsaName`): the first HIP entry for the device's own processor
/// whose features agree (an id without `xnack`/`sramecc` fits either
/// setting); else, from ROCm [`kiln_target::GENERIC_ROCM`] on (ROCm 5.7 to
/// 6.3 ask for the device's processor alone), the first entry for its
/// family's generic target (`TargetToGeneric`: the processor's generic target,
/// kiln-target's `generic` column, with the device's features re-appended);
/// else none, which the runtime reports as `hipErrorNoBinaryForGpu`. The order
/// of the entries never decides between the two.
pub fn hip_runtime_pick<'a>(entries: &'a [Entry], device: &str, runtime: kiln_manifest::kiln_target::Rocm) -> Option<&'a Entry> {
    let (processor, features) = split_target_id(device).ok()?;
    let fits = |e: &&Entry, wanted: &str| {
        let Some(Ok((p, entry_features))) = e.gfx().map(split_target_id) else { return false };
        p == wanted && entry_features.iter().all(|f| features.contains(f))
    };
    if let Some(native) = entries.iter().find(|e| fits(e, processor)) {
        return Some(native);
    }
    let generic = kiln_manifest::kiln_target::gfx(processor)?.generic?;
    if runtime < kiln_manifest::kiln_target::GENERIC_ROCM {
        return None;
    }
    entries.iter().find(|e| fits(e, generic))
}

/// A HIP entry read as a code object.
#[derive(Clone, Debug)]
pub struct CodeObject {
    pub entry: Entry,
    pub hsaco: Hsaco,
}

impl CodeObject {
    /// The entry's gfx target id (`gfx90a`, `gfx90a:xnack-`).
    pub fn gfx(&self) -> &str {
        self.entry.gfx().expect("only HIP entries become code objects")
    }

    /// The kernels the code object defines, sorted.
    pub fn kernels(&self) -> Vec<String> {
        self.hsaco.kernel_names()
    }
}

/// The processor of a target id (`gfx90a` of `gfx90a:sramecc+:xnack-`) and
/// its features with their settings.
fn split_target_id(target_id: &str) -> Result<(&str, Vec<(&str, bool)>)> {
    let mut parts = target_id.split(':');
    let processor = parts.next().unwrap_or("");
    let mut features = Vec::new();
    for f in parts {
        let (name, on) = match f.as_bytes().last() {
            Some(b'+') => (&f[..f.len() - 1], true),
            Some(b'-') => (&f[..f.len() - 1], false),
            _ => bail!("target id {target_id}: feature `{f}` has no + or -"),
        };
        features.push((name, on));
    }
    Ok((processor, features))
}

/// Checks that a HIP entry's code object is what its id says: the processor
/// the metadata names (`amdhsa.target`), the `e_flags` machine (when
/// `mach_of` knows the processor's value, from kiln-target), and `xnack` and
/// `sramecc` as the id sets them (on/off where the id names them, "any" or
/// unsupported where it does not: the runtime picks an entry by its id).
fn check_entry(entry: &Entry, h: &Hsaco, mach_of: &dyn Fn(&str) -> Option<u32>) -> Result<()> {
    let gfx = entry.gfx().expect("a HIP entry");
    let (processor, features) = split_target_id(gfx).with_context(|| format!("bundle entry {}", entry.id))?;
    let (_, object_target) = h.target.rsplit_once("--").unwrap_or(("", &h.target));
    let object_processor = object_target.split(':').next().unwrap_or("");
    if object_processor != processor {
        bail!("bundle entry {} says {processor}, but its code object is for {object_processor} (amdhsa.target `{}`)", entry.id, h.target);
    }
    if let Some(mach) = mach_of(processor) {
        if h.mach != mach {
            bail!(
                "bundle entry {} says {processor} (e_flags machine 0x{mach:02x}), but its code object's e_flags name machine 0x{:02x}",
                entry.id,
                h.mach
            );
        }
    }
    for (name, setting) in [("xnack", h.xnack), ("sramecc", h.sramecc)] {
        let wanted = features.iter().find(|(f, _)| *f == name).map(|(_, on)| *on);
        let ok = match wanted {
            Some(true) => setting == Feature::On,
            Some(false) => setting == Feature::Off,
            None => matches!(setting, Feature::Any | Feature::Unsupported),
        };
        if !ok {
            let said = match wanted {
                Some(true) => format!("{name}+"),
                Some(false) => format!("{name}-"),
                None => format!("no {name} setting (any)"),
            };
            bail!("bundle entry {} says {said}, but its code object's e_flags have {name} {setting:?}", entry.id);
        }
    }
    if let Some((f, _)) = features.iter().find(|(f, _)| !["xnack", "sramecc"].contains(f)) {
        bail!("bundle entry {}: unknown target feature `{f}`", entry.id);
    }
    Ok(())
}

/// Reads `bundle` and every HIP entry in it as a code object, checked against
/// its id (see `mach_of` in [`verify_with`]); the host entry is skipped. The
/// result, in file order, carries each entry's kernels, so the caller can
/// compare kernel sets across archs.
pub fn check(bundle: &[u8], mach_of: &dyn Fn(&str) -> Option<u32>) -> Result<Vec<CodeObject>> {
    let mut out = Vec::new();
    for entry in read(bundle)? {
        if entry.gfx().is_none() {
            continue;
        }
        let h = hsaco::read(entry.payload(bundle)).with_context(|| format!("bundle entry {} is not a readable code object", entry.id))?;
        check_entry(&entry, &h, mach_of)?;
        out.push(CodeObject { entry, hsaco: h });
    }
    Ok(out)
}

/// Checks `bundle` against the `(gfx target id, code object)` pairs it was
/// made from: an entry for each, byte-identical to it, its code object for
/// the arch its id names ([`check`]), and no other code-object entry.
/// `mach_of` gives a processor's `EF_AMDGPU_MACH` value (kiln-target's table,
/// e.g. `|g| kiln_pins::HipArch::parse(g).ok().map(|a| a.mach())`), `None`
/// where unknown, in which case the arch is checked from the metadata alone.
pub fn verify_with(bundle: &[u8], inputs: &[(&str, &[u8])], mach_of: &dyn Fn(&str) -> Option<u32>) -> Result<Vec<CodeObject>> {
    let objects = check(bundle, mach_of)?;
    for (i, (gfx, object)) in inputs.iter().enumerate() {
        if inputs[..i].iter().any(|(g, _)| g == gfx) {
            bail!("{gfx} is among the bundle's inputs twice");
        }
        let Some(o) = objects.iter().find(|o| o.gfx() == *gfx) else {
            let present: Vec<&str> = objects.iter().map(|o| o.gfx()).collect();
            bail!("the bundle has no entry for {gfx} (it has {})", if present.is_empty() { "none".to_string() } else { present.join(", ") });
        };
        if o.entry.payload(bundle) != *object {
            bail!(
                "the bundle's entry {} ({} bytes) differs from the {gfx} code object it was made from ({} bytes)",
                o.entry.id,
                o.entry.size,
                object.len()
            );
        }
    }
    if let Some(extra) = objects.iter().find(|o| !inputs.iter().any(|(g, _)| o.gfx() == *g)) {
        bail!("the bundle has an entry {} that nothing was bundled for", extra.entry.id);
    }
    Ok(objects)
}

/// [`verify_with`], the arch checked from each code object's metadata target
/// only; returns every entry (the host's too), in file order.
pub fn verify(bundle: &[u8], inputs: &[(&str, &[u8])]) -> Result<Vec<Entry>> {
    verify_with(bundle, inputs, &|_| None)?;
    read(bundle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "host-x86_64-unknown-linux-gnu";
    const GFX90A: u32 = 0x3f;
    const GFX1030: u32 = 0x36;

    /// A bundle header with the given entries, zero-filled to `total` bytes (if longer).
    fn bundle(entries: &[(&str, u64, u64)], total: usize) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        for (id, off, size) in entries {
            b.extend_from_slice(&off.to_le_bytes());
            b.extend_from_slice(&size.to_le_bytes());
            b.extend_from_slice(&(id.len() as u64).to_le_bytes());
            b.extend_from_slice(id.as_bytes());
        }
        b.resize(total.max(b.len()), 0);
        b
    }

    /// The bundle kiln-build writes (host first, payloads 4096-aligned), from
    /// ids as given: enough to test the reader without depending on the writer.
    fn bundle_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let all: Vec<(String, &[u8])> =
            std::iter::once((HOST.to_string(), &[][..])).chain(entries.iter().map(|(g, b)| (format!("hipv4-amdgcn-amd-amdhsa--{g}"), *b))).collect();
        let mut at = 4096u64;
        let mut spans = Vec::new();
        for (id, b) in &all {
            spans.push((id.as_str(), at, b.len() as u64));
            at = (at + b.len() as u64).div_ceil(4096) * 4096;
        }
        let mut out = bundle(&spans, 0);
        for ((_, b), (_, off, _)) in all.iter().zip(&spans) {
            out.resize(*off as usize, 0);
            out.extend_from_slice(b);
        }
        out
    }

    /// An ELF section: name offset, type, link, info, alignment, entry size, bytes.
    type Section<'a> = (u32, u32, u32, u32, u64, u64, &'a [u8]);

    /// A minimal AMDGPU code object: ELF header with `e_flags`, an `AMDGPU`
    /// metadata note (`amdhsa.target`, one kernel per name) and the kernels'
    /// `.kd` symbols, all that `hsaco::read` looks at.
    fn code_object(e_flags: u32, target: &str, kernels: &[&str]) -> Vec<u8> {
        use rmpv::Value;
        let s = |x: &str| Value::from(x);
        let meta = Value::Map(vec![
            (s("amdhsa.target"), s(target)),
            (s("amdhsa.version"), Value::Array(vec![1.into(), 2.into()])),
            (
                s("amdhsa.kernels"),
                Value::Array(kernels.iter().map(|k| Value::Map(vec![(s(".name"), s(k)), (s(".symbol"), s(&format!("{k}.kd")))])).collect()),
            ),
        ]);
        let mut desc = Vec::new();
        rmpv::encode::write_value(&mut desc, &meta).unwrap();
        let pad4 = |v: &mut Vec<u8>| v.resize(v.len().div_ceil(4) * 4, 0);
        let mut note = Vec::new();
        for x in [7u32, desc.len() as u32, 32] {
            note.extend_from_slice(&x.to_le_bytes());
        }
        note.extend_from_slice(b"AMDGPU\0");
        pad4(&mut note);
        note.extend_from_slice(&desc);
        pad4(&mut note);
        let mut strtab = vec![0u8];
        let mut symtab = vec![0u8; 24];
        for k in kernels {
            let name = strtab.len() as u32;
            strtab.extend_from_slice(format!("{k}.kd\0").as_bytes());
            symtab.extend_from_slice(&name.to_le_bytes());
            symtab.extend_from_slice(&[0x11, 0]); // GLOBAL OBJECT, default visibility
            symtab.extend_from_slice(&1u16.to_le_bytes());
            symtab.extend_from_slice(&[0; 16]);
        }
        let shstrtab = b"\0.note\0.symtab\0.strtab\0.shstrtab\0".to_vec();
        let sections: [Section; 4] =
            [(1, 7, 0, 0, 4, 0, &note), (7, 2, 3, 1, 8, 24, &symtab), (15, 3, 0, 0, 1, 0, &strtab), (23, 3, 0, 0, 1, 0, &shstrtab)];
        let mut body = vec![0u8; 64];
        let mut offsets = Vec::new();
        for (.., bytes) in &sections {
            body.resize(body.len().div_ceil(8) * 8, 0);
            offsets.push(body.len() as u64);
            body.extend_from_slice(bytes);
        }
        body.resize(body.len().div_ceil(8) * 8, 0);
        let shoff = body.len() as u64;
        body.extend_from_slice(&[0; 64]);
        for ((name, ty, link, info, align, entsize, bytes), off) in sections.iter().zip(&offsets) {
            for x in [*name, *ty] {
                body.extend_from_slice(&x.to_le_bytes());
            }
            for x in [0u64, 0, *off, bytes.len() as u64] {
                body.extend_from_slice(&x.to_le_bytes());
            }
            for x in [*link, *info] {
                body.extend_from_slice(&x.to_le_bytes());
            }
            for x in [*align, *entsize] {
                body.extend_from_slice(&x.to_le_bytes());
            }
        }
        let mut h = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 64, 3, 0, 0, 0, 0, 0, 0, 0];
        h.extend_from_slice(&3u16.to_le_bytes()); // ET_DYN
        h.extend_from_slice(&224u16.to_le_bytes()); // EM_AMDGPU
        h.extend_from_slice(&1u32.to_le_bytes());
        for x in [0u64, 0, shoff] {
            h.extend_from_slice(&x.to_le_bytes());
        }
        h.extend_from_slice(&e_flags.to_le_bytes());
        for x in [64u16, 56, 0, 64, 5, 4] {
            h.extend_from_slice(&x.to_le_bytes());
        }
        body[..64].copy_from_slice(&h);
        body
    }

    fn err<T: std::fmt::Debug>(r: Result<T>) -> String {
        format!("{:#}", r.unwrap_err())
    }

    #[test]
    fn damaged_bundles_are_refused_with_the_reason() {
        assert!(err(read(b"\x7fELF....")).contains("no __CLANG_OFFLOAD_BUNDLE__"));
        assert!(err(read(b"CCOB\x01\x00")).contains("compressed"));
        assert!(err(read(MAGIC)).contains("truncated bundle header"));
        // The header cut off in the middle of an entry, and in the middle of an id.
        let whole = bundle(&[(HOST, 4096, 0), ("hipv4-amdgcn-amd-amdhsa--gfx90a", 4096, 8)], 4104);
        assert!(err(read(&whole[..95])).contains("entry 1 of 2 ends past"));
        let in_id = &whole[..MAGIC.len() + 8 + 24 + 10];
        assert!(err(read(in_id)).contains("the id of entry 0 of 2"));
        // A payload cut off.
        assert!(err(read(&whole[..4100])).contains("hipv4-amdgcn-amd-amdhsa--gfx90a: bytes 4096..+8 run past the end"));
        let huge = bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx90a", u64::MAX, 2)], 4096);
        assert!(err(read(&huge)).contains("run past the end"));
        let twice = bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx90a", 200, 8), ("hipv4-amdgcn-amd-amdhsa--gfx90a", 300, 8)], 400);
        assert!(err(read(&twice)).contains("appears twice"));
        let overlap = bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx90a", 200, 100), ("hipv4-amdgcn-amd-amdhsa--gfx1030", 250, 100)], 400);
        assert!(err(read(&overlap)).contains("gfx90a and hipv4-amdgcn-amd-amdhsa--gfx1030 overlap"));
        let over_header = bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx90a", 40, 8)], 400);
        assert!(err(read(&over_header)).contains("gfx90a (at byte 40) overlaps the header"));
        let ids: Vec<String> = (0..80).map(|i| format!("hipv4-amdgcn-amd-amdhsa--gfx9{i:02}")).collect();
        let many: Vec<(&str, u64, u64)> = ids.iter().map(|id| (id.as_str(), 8192, 0)).collect();
        assert!(err(read(&bundle(&many, 8192))).contains("only the first 4096"));

        let e = read(&whole).unwrap();
        assert_eq!(e.iter().map(|e| e.gfx()).collect::<Vec<_>>(), [None, Some("gfx90a")]);
        assert_eq!(e[1].payload(&whole), &[0u8; 8]);
    }

    #[test]
    fn generic_objects_are_v6_with_a_generic_version_and_concrete_ones_without() {
        const GFX11_GENERIC: u32 = 0x54;
        // As clang 21 writes them: EI_ABIVERSION 4 (v6), generic version 1 in the top byte.
        let v6 = |e_flags: u32, target: &str| {
            let mut o = code_object(e_flags, target, &["k"]);
            o[8] = 4;
            o
        };
        let good = v6(1 << 24 | GFX11_GENERIC, "amdgcn-amd-amdhsa--gfx11-generic");
        assert_eq!(hsaco::check(&good, "gfx11-generic", GFX11_GENERIC, 6).unwrap().generic_version, 1);
        let e = err(hsaco::check(&v6(GFX11_GENERIC, "amdgcn-amd-amdhsa--gfx11-generic"), "gfx11-generic", GFX11_GENERIC, 6));
        assert!(e.contains("gfx11-generic is a generic target, but the code object's e_flags carry no generic version"), "{e}");
        let e = err(hsaco::check(&v6(1 << 24 | GFX1030, "amdgcn-amd-amdhsa--gfx1030"), "gfx1030", GFX1030, 6));
        assert!(e.contains("e_flags carry generic version 1, but gfx1030 is a concrete processor"), "{e}");
        // A generic object of code object v5 does not exist: the version check says so first.
        let e = err(hsaco::check(&good, "gfx11-generic", GFX11_GENERIC, 5));
        assert!(e.contains("EI_ABIVERSION is 4 but code object v5 (3) was asked for"), "{e}");
        // A bundle entry for a generic target is checked against its code object like any other.
        let b = bundle_of(&[("gfx11-generic", &good)]);
        verify_with(&b, &[("gfx11-generic", &good)], &|g| (g == "gfx11-generic").then_some(GFX11_GENERIC)).unwrap();
    }

    #[test]
    fn the_hip_runtime_takes_the_devices_own_entry_else_its_generic_one_from_rocm_6_4() {
        let ids = ["gfx1030", "gfx10-3-generic", "gfx90a:xnack-", "gfx9-4-generic"];
        let entries: Vec<Entry> = std::iter::once(HOST)
            .map(String::from)
            .chain(ids.iter().map(|g| format!("hipv4-amdgcn-amd-amdhsa--{g}")))
            .map(|id| Entry { id, offset: 0, size: 0 })
            .collect();
        let pick = |dev: &str, rocm| hip_runtime_pick(&entries, dev, rocm).and_then(|e| e.gfx()).map(String::from);
        assert_eq!(pick("gfx1030", (5, 7)).as_deref(), Some("gfx1030"));
        assert_eq!(pick("gfx1031", (6, 4)).as_deref(), Some("gfx10-3-generic"));
        assert_eq!(pick("gfx1031", (6, 3)), None);
        // Features: an entry that names one must agree with the device.
        assert_eq!(pick("gfx90a:sramecc+:xnack-", (5, 7)).as_deref(), Some("gfx90a:xnack-"));
        assert_eq!(pick("gfx90a:sramecc+:xnack+", (7, 0)), None, "gfx90a has no generic family");
        assert_eq!(pick("gfx942:sramecc+:xnack-", (6, 4)).as_deref(), Some("gfx9-4-generic"));
        assert_eq!(pick("gfx1100", (7, 0)), None);
    }

    #[test]
    fn entry_ids_name_their_target() {
        let gfx = |id: &str| Entry { id: id.into(), offset: 0, size: 0 }.gfx().map(String::from);
        assert_eq!(gfx("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-").as_deref(), Some("gfx90a:xnack-"));
        assert_eq!(gfx("hip-amdgcn-amd-amdhsa-gfx906").as_deref(), Some("gfx906"));
        assert_eq!(gfx("host-x86_64-unknown-linux-gnu-"), None);
        assert_eq!(gfx("openmp-amdgcn-amd-amdhsa--gfx90a"), None);
    }

    #[test]
    fn entries_are_checked_against_their_code_objects() {
        let a = code_object(GFX90A | 1 << 8 | 1 << 10, "amdgcn-amd-amdhsa--gfx90a", &["affine_f32", "fill_u8"]);
        let b = code_object(GFX1030, "amdgcn-amd-amdhsa--gfx1030", &["affine_f32", "fill_u8"]);
        let good = bundle_of(&[("gfx1030", &b), ("gfx90a", &a)]);
        let mach = |g: &str| match g {
            "gfx90a" => Some(GFX90A),
            "gfx1030" => Some(GFX1030),
            _ => None,
        };
        let objects = verify_with(&good, &[("gfx90a", &a), ("gfx1030", &b)], &mach).unwrap();
        assert_eq!(
            objects.iter().map(|o| (o.gfx(), o.kernels())).collect::<Vec<_>>(),
            [("gfx1030", vec!["affine_f32".to_string(), "fill_u8".to_string()]), ("gfx90a", vec!["affine_f32".to_string(), "fill_u8".to_string()]),]
        );
        assert_eq!(verify(&good, &[("gfx90a", &a), ("gfx1030", &b)]).unwrap().len(), 3);

        // An entry whose id says gfx90a holding the gfx1030 code object.
        let swapped = bundle_of(&[("gfx90a", &b)]);
        let e = err(verify(&swapped, &[("gfx90a", &b)]));
        assert!(e.contains("hipv4-amdgcn-amd-amdhsa--gfx90a says gfx90a, but its code object is for gfx1030"), "{e}");
        // Metadata and e_flags disagreeing: caught where the machine value is known.
        let lying = code_object(GFX1030, "amdgcn-amd-amdhsa--gfx90a", &["k"]);
        let b2 = bundle_of(&[("gfx90a", &lying)]);
        verify(&b2, &[("gfx90a", &lying)]).unwrap();
        let e = err(verify_with(&b2, &[("gfx90a", &lying)], &mach));
        assert!(e.contains("says gfx90a (e_flags machine 0x3f), but its code object's e_flags name machine 0x36"), "{e}");

        // Target features: the id's setting must be the code object's.
        let xnack_off = code_object(GFX90A | 2 << 8, "amdgcn-amd-amdhsa--gfx90a:xnack-", &["k"]);
        let ok = bundle_of(&[("gfx90a:xnack-", &xnack_off)]);
        verify(&ok, &[("gfx90a:xnack-", &xnack_off)]).unwrap();
        let e = err(verify(&bundle_of(&[("gfx90a:xnack+", &xnack_off)]), &[("gfx90a:xnack+", &xnack_off)]));
        assert!(e.contains("says xnack+, but its code object's e_flags have xnack Off"), "{e}");
        let e = err(verify(&bundle_of(&[("gfx90a", &xnack_off)]), &[("gfx90a", &xnack_off)]));
        assert!(e.contains("hipv4-amdgcn-amd-amdhsa--gfx90a says no xnack setting (any), but its code object's e_flags have xnack Off"), "{e}");

        // Inputs the bundle lacks, bytes that are not the input's, entries nothing asked for.
        let e = err(verify(&good, &[("gfx90a", &a), ("gfx1030", &b), ("gfx1100", &b)]));
        assert!(e.contains("no entry for gfx1100 (it has gfx1030, gfx90a)"), "{e}");
        let other = code_object(GFX90A, "amdgcn-amd-amdhsa--gfx90a", &["affine_f32"]);
        let e = err(verify(&good, &[("gfx90a", &other), ("gfx1030", &b)]));
        assert!(e.contains("entry hipv4-amdgcn-amd-amdhsa--gfx90a") && e.contains("differs from the gfx90a code object"), "{e}");
        let e = err(verify(&good, &[("gfx90a", &a)]));
        assert!(e.contains("an entry hipv4-amdgcn-amd-amdhsa--gfx1030 that nothing was bundled for"), "{e}");
        // An entry that is not a code object at all.
        let junk = bundle_of(&[("gfx90a", b"not an ELF")]);
        assert!(err(check(&junk, &mach)).contains("entry hipv4-amdgcn-amd-amdhsa--gfx90a is not a readable code object"));
    }
}
