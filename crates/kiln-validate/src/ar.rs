//! Static libraries (`ar` archives of nvcc host objects): which functions
//! they define, and for which sms each object embeds SASS.
//!
//! A consumer links the archive and calls its `extern "C"` functions, so the
//! check that matters is that every function the Rust side declares is
//! defined, and that every object carries code for every pinned sm.

use anyhow::{bail, Context, Result};
use kiln_manifest::kiln_target::host_object;
use object::{read::archive::ArchiveFile, Object, ObjectSection, ObjectSymbol, SymbolKind};

use crate::fatbin;

#[derive(Clone, Debug)]
pub struct Member {
    pub name: String,
    /// Global functions the object defines, sorted.
    pub functions: Vec<String>,
    /// What its `.nv_fatbin` section holds (nothing when it is a tag).
    pub fatbin: Vec<fatbin::Entry>,
    /// The source file its `.nv_fatbin` section names, when that is a
    /// per-target library's tag ([`host_object::tagged`]).
    pub tag: Option<String>,
    /// The symbols it uses and does not define, sorted.
    pub undefined: Vec<String>,
    /// Its ELF `e_machine` (little-endian ELF; `None` for anything else).
    pub machine: Option<u16>,
}

#[derive(Clone, Debug)]
pub struct Archive {
    pub members: Vec<Member>,
}

impl Archive {
    /// Every global function any member defines, sorted.
    pub fn functions(&self) -> Vec<String> {
        let mut all: Vec<String> = self.members.iter().flat_map(|m| m.functions.iter().cloned()).collect();
        all.sort();
        all.dedup();
        all
    }
}

pub fn read(bytes: &[u8]) -> Result<Archive> {
    let archive = ArchiveFile::parse(bytes).context("not an ar archive")?;
    let mut members = Vec::new();
    for member in archive.members() {
        let member = member?;
        let name = String::from_utf8_lossy(member.name()).trim_end_matches('/').to_string();
        let data = member.data(bytes)?;
        let file = object::File::parse(data).with_context(|| format!("member {name} is not an object file"))?;
        let mut functions: Vec<String> = file
            .symbols()
            .filter(|s| s.is_global() && s.is_definition() && s.kind() == SymbolKind::Text)
            .filter_map(|s| s.name().ok().map(String::from))
            .collect();
        functions.sort();
        let mut undefined: Vec<String> = file.symbols().filter(|s| s.is_undefined()).filter_map(|s| s.name().ok().map(String::from)).collect();
        undefined.retain(|s| !s.is_empty());
        undefined.sort();
        undefined.dedup();
        let (fatbin, tag) = match file.section_by_name(".nv_fatbin") {
            Some(section) => {
                let data = section.data()?;
                match host_object::tagged(data) {
                    Some(stem) => (Vec::new(), Some(stem.to_string())),
                    None => (fatbin::read(data).with_context(|| format!("member {name}: bad .nv_fatbin"))?, None),
                }
            }
            None => (Vec::new(), None),
        };
        let machine = (data.len() >= 20 && data.starts_with(b"\x7fELF") && data[5] == 1).then(|| u16::from_le_bytes([data[18], data[19]]));
        members.push(Member { name, functions, fatbin, tag, undefined, machine });
    }
    if members.is_empty() {
        bail!("the archive has no members");
    }
    Ok(Archive { members })
}

/// Checks that every member embeds SASS for each of `sms` and PTX for each
/// of `ptx` levels, and that the archive defines each of `required`
/// functions. Every problem is listed.
pub fn check(bytes: &[u8], sms: &[u32], ptx: &[u32], required: &[String]) -> Result<Archive> {
    let a = read(bytes)?;
    let mut problems = Vec::new();
    for m in &a.members {
        let has = |kind, n| m.fatbin.iter().any(|e| e.kind == kind && e.sm == n);
        let missing: Vec<String> = sms
            .iter()
            .filter(|&&s| !has(fatbin::EntryKind::Elf, s))
            .map(|s| format!("SASS for sm_{s}"))
            .chain(ptx.iter().filter(|&&l| !has(fatbin::EntryKind::Ptx, l)).map(|l| format!("PTX for compute_{l}")))
            .collect();
        if !missing.is_empty() {
            problems.push(format!("{} has no {}", m.name, missing.join(", ")));
        }
    }
    problems.extend(undefined_required(&a, required));
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }
    Ok(a)
}

/// Checks a per-target library of `lib` (docs/static-library.md): every
/// member is a host object carrying no code, only the tag of its own file
/// (`<stem>.o` tagged `<stem>`), calls none of NVIDIA's runtime functions
/// under its own name, and of the renamed ones only those the crate's
/// runtime defines ([`host_object::RUNTIME_CALLS`]); and the archive defines
/// each of `required`. Every problem is listed.
pub fn check_host(bytes: &[u8], lib: &str, required: &[String], host: &host_object::Host) -> Result<Archive> {
    let a = read(bytes)?;
    let mut problems = Vec::new();
    let prefix = host_object::renamed(lib, "");
    for m in &a.members {
        if m.machine != Some(host.elf_machine) {
            let found = match m.machine {
                Some(n) => host_object::host_of_machine(n).map_or(format!("ELF machine {n}"), |h| h.cpu.to_string()),
                None => "no ELF machine".into(),
            };
            problems.push(format!("{} holds {found} code, and this is the library for {} hosts", m.name, host.cpu));
        }
        let stem = m.name.strip_suffix(".o").unwrap_or(&m.name);
        match &m.tag {
            Some(t) if t == stem => {}
            Some(t) => problems.push(format!("{} is tagged as {t}'s host object, not {stem}'s", m.name)),
            None if m.fatbin.is_empty() => problems.push(format!("{} has no kiln tag in .nv_fatbin: not a per-target host object", m.name)),
            None => {
                problems.push(format!("{} carries device code ({} fatbin entries): a per-target host object carries none", m.name, m.fatbin.len()))
            }
        }
        let own: Vec<&str> = m.undefined.iter().map(String::as_str).filter(|s| host_object::is_runtime_symbol(s)).collect();
        if !own.is_empty() {
            problems.push(format!("{} calls NVIDIA's runtime under its own names (not renamed to {prefix}*): {}", m.name, own.join(", ")));
        }
        let unknown: Vec<&str> =
            m.undefined.iter().filter_map(|s| s.strip_prefix(&prefix)).filter(|f| !host_object::RUNTIME_CALLS.contains(f)).collect();
        if !unknown.is_empty() {
            problems.push(format!("{} calls runtime functions the crate's runtime does not define: {}", m.name, unknown.join(", ")));
        }
    }
    problems.extend(undefined_required(&a, required));
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }
    Ok(a)
}

/// Which of `required` no member defines, as a problem line.
fn undefined_required(a: &Archive, required: &[String]) -> Option<String> {
    let defined = a.functions();
    let undefined: Vec<&String> = required.iter().filter(|f| defined.binary_search(f).is_err()).collect();
    (!undefined.is_empty()).then(|| {
        format!(
            "{} function(s) declared by the Rust side are not defined: {}",
            undefined.len(),
            undefined.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        )
    })
}

/// The functions an `extern "C" { ... }` block of a Rust file declares
/// (candle-kernels' `src/ffi.rs`): the names the archive must define.
pub fn extern_fns(rust: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut in_extern = false;
    // A declaration behind `#[cfg(feature = ...)]` exists only with that
    // feature (candle's `cutile`), which kiln does not build.
    let mut gated = false;
    for line in rust.lines() {
        let t = line.trim();
        if t.starts_with("//") {
            continue;
        }
        if in_extern && depth == 1 && t.starts_with("#[cfg(") {
            gated = true;
            continue;
        }
        if !in_extern && (t.starts_with("extern \"C\"") || t.starts_with("unsafe extern \"C\"")) && t.ends_with('{') {
            in_extern = true;
            depth = 1;
            continue;
        }
        if in_extern {
            if depth == 1 {
                // Any visibility: `pub`, `pub(crate)` (candle-flash-attn's), `pub(super)`.
                let t = match t.strip_prefix("pub") {
                    Some(rest) if rest.starts_with('(') => rest.split_once(')').map_or(t, |(_, r)| r.trim_start()),
                    Some(rest) if rest.starts_with(' ') => rest.trim_start(),
                    _ => t,
                };
                let t = t.strip_prefix("safe ").or_else(|| t.strip_prefix("unsafe ")).unwrap_or(t);
                if let Some(rest) = t.strip_prefix("fn ") {
                    let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if !std::mem::take(&mut gated) {
                        out.push(name);
                    }
                }
            }
            depth += t.matches('{').count();
            depth -= t.matches('}').count().min(depth);
            if depth == 0 {
                in_extern = false;
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn extern_fns_reads_declarations_only() {
        let src = "use x;\nextern \"C\" {\n    #[cfg(feature = \"cutile\")]\n    pub fn gated(\n        x: i32,\n    ) -> i32;\n    // fn commented(\n    pub fn a_b(x: i32,\n        y: *mut f32);\n    pub fn c();\n    pub(crate) fn run_mha(\n        q: *const u8,\n    );\n    pub(super) fn d();\n    fn e();\n}\npub fn not_extern() {}\n";
        assert_eq!(super::extern_fns(src), ["a_b", "c", "d", "e", "run_mha"]);
    }
}
