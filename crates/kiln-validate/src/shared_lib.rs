//! What a shared library exports, as the dynamic linker sees it: every symbol
//! of its dynamic symbol table with its type, binding, visibility and GNU
//! symbol version. Read without loading it (a runtime for hardware this
//! machine lacks: crates/kiln-container/tests/hip_runtime.rs).

use anyhow::{bail, Context, Result};
use object::elf;
use object::read::elf::{Dyn, ElfFile64, FileHeader, SectionHeader, Sym};
use object::{Endianness, Object, SymbolIndex};

/// One entry of `.dynsym`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DynSymbol {
    pub name: String,
    /// Defined here (not `SHN_UNDEF`: an import).
    pub defined: bool,
    /// `STT_FUNC` (or `STT_GNU_IFUNC`).
    pub function: bool,
    /// `STB_GLOBAL` or `STB_WEAK`.
    pub global: bool,
    /// `STV_DEFAULT` or `STV_PROTECTED`: others cannot bind to it otherwise.
    pub visible: bool,
    /// Its version node (`hip_4.2`), if the library versions its symbols.
    pub version: Option<String>,
    /// `name@version` only, not `name@@version`: never what an unversioned lookup finds.
    pub hidden: bool,
}

impl DynSymbol {
    /// Whether `dlsym(handle, name)`, which asks for no version, resolves
    /// this entry as a function: defined, global or weak, visible, and
    /// unversioned or at its default version (`@@`).
    pub fn dlsym_function(&self) -> bool {
        self.defined && self.function && self.global && self.visible && !self.hidden
    }

    /// `name`, `name@@version` or `name@version`, as `readelf --dyn-syms` writes it.
    pub fn display(&self) -> String {
        match &self.version {
            Some(v) => format!("{}{}{v}", self.name, if self.hidden || !self.defined { "@" } else { "@@" }),
            None => self.name.clone(),
        }
    }
}

/// Every `.dynsym` entry of the 64-bit ELF shared library `data` (named `what` in messages).
pub fn dynamic_symbols(what: &str, data: &[u8]) -> Result<Vec<DynSymbol>> {
    let file = ElfFile64::<Endianness>::parse(data).with_context(|| format!("{what}: not a 64-bit ELF file"))?;
    if file.elf_header().e_type(file.endian()) != elf::ET_DYN {
        bail!("{what}: not a shared library (ELF type is not ET_DYN)");
    }
    let endian = file.endian();
    let table = file.elf_dynamic_symbol_table();
    if table.is_empty() {
        bail!("{what}: no dynamic symbol table");
    }
    let versions = file.elf_section_table().versions(endian, data).with_context(|| format!("{what}: a broken symbol version table"))?;
    let mut out = Vec::new();
    for (i, sym) in table.iter().enumerate() {
        let name = sym.name(endian, table.strings()).with_context(|| format!("{what}: dynamic symbol {i} has no name"))?;
        if name.is_empty() {
            continue;
        }
        let (mut version, mut hidden) = (None, false);
        if let Some(v) = &versions {
            let index = v.version_index(endian, SymbolIndex(i));
            hidden = index.is_hidden();
            if let Some(node) = v.version(index).with_context(|| format!("{what}: symbol {i} has a bad version index"))? {
                version = Some(String::from_utf8_lossy(node.name()).into_owned());
            }
        }
        out.push(DynSymbol {
            name: String::from_utf8_lossy(name).into_owned(),
            defined: sym.st_shndx(endian) != elf::SHN_UNDEF,
            function: matches!(sym.st_type(), elf::STT_FUNC | elf::STT_GNU_IFUNC),
            global: matches!(sym.st_bind(), elf::STB_GLOBAL | elf::STB_WEAK),
            visible: matches!(sym.st_visibility(), elf::STV_DEFAULT | elf::STV_PROTECTED),
            version,
            hidden,
        });
    }
    Ok(out)
}

/// Which of `wanted` an unversioned `dlsym` would not find as a function in
/// a library with these `symbols`, each with what the table has under that
/// name instead (nothing, an import, a hidden version, ...).
pub fn missing_functions(symbols: &[DynSymbol], wanted: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for name in wanted {
        let entries: Vec<&DynSymbol> = symbols.iter().filter(|s| s.name == *name).collect();
        if entries.iter().any(|s| s.dlsym_function()) {
            continue;
        }
        let why = match entries.as_slice() {
            [] => "not in the dynamic symbol table".to_string(),
            some => some
                .iter()
                .map(|s| {
                    let what = if !s.defined {
                        "an undefined import"
                    } else if !s.function {
                        "not a function"
                    } else if !s.global {
                        "a local symbol"
                    } else if !s.visible {
                        "hidden or internal visibility"
                    } else {
                        "a non-default version, which an unversioned lookup never finds"
                    };
                    format!("{} is {what}", s.display())
                })
                .collect::<Vec<_>>()
                .join("; "),
        };
        out.push(format!("{name}: {why}"));
    }
    out
}

/// The sizes of the data objects a relocatable ELF object (`cc -c`'s output)
/// defines, by name: how a check reads back numbers a C compiler computed
/// (`char name[offsetof(...) + 1];`) without running anything it built.
pub fn object_sizes(what: &str, data: &[u8]) -> Result<std::collections::BTreeMap<String, u64>> {
    use object::{ObjectSymbol, SymbolKind};
    let file = ElfFile64::<Endianness>::parse(data).with_context(|| format!("{what}: not a 64-bit ELF file"))?;
    if file.elf_header().e_type(file.endian()) != elf::ET_REL {
        bail!("{what}: not a relocatable object (ELF type is not ET_REL)");
    }
    let mut out = std::collections::BTreeMap::new();
    for sym in file.symbols() {
        if sym.kind() == SymbolKind::Data && (sym.is_definition() || sym.is_common()) {
            if let Ok(name) = sym.name() {
                out.insert(name.to_string(), sym.size());
            }
        }
    }
    Ok(out)
}

/// The shared library's `DT_SONAME`, the name the dynamic linker and `dlopen` know it by.
pub fn soname(what: &str, data: &[u8]) -> Result<Option<String>> {
    let file = ElfFile64::<Endianness>::parse(data).with_context(|| format!("{what}: not a 64-bit ELF file"))?;
    let (endian, data) = (file.endian(), file.data());
    let sections = file.elf_section_table();
    for section in sections.iter() {
        if let Some((entries, link)) = section.dynamic(endian, data).with_context(|| format!("{what}: a broken dynamic section"))? {
            let strings = sections.strings(endian, data, link).with_context(|| format!("{what}: the dynamic section's strings"))?;
            for d in entries {
                if d.tag32(endian) == Some(elf::DT_SONAME) {
                    let name = d.string(endian, strings).with_context(|| format!("{what}: DT_SONAME"))?;
                    return Ok(Some(String::from_utf8_lossy(name).into_owned()));
                }
            }
        }
    }
    Ok(None)
}
