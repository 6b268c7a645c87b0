//! Link stubs for a consumer without a CUDA SDK.
//!
//! candle-core's CUDA backend links, through cudarc's `dynamic-linking`,
//! `-lcuda -lnvrtc -lcurand -lcublas -lcublasLt`: a machine without the CUDA
//! toolkit cannot link a candle program at all, though kiln's crates need no
//! SDK. NVIDIA's answer for build machines is its stub libraries (the
//! toolkit's `stubs/lib*.so`: every function, the real soname, no code); the
//! pinned toolchain has them. kiln reads each stub's soname, symbol version
//! and function names here, at packaging, and the CUDA runtime crate's build
//! script (template `link/build.rs`) turns that table into stand-in
//! libraries with the C compiler every Rust link already needs, when the
//! consumer asks for them (`KILN_CUDA_LINK_STUBS=1`). A program linked
//! against them records the real sonames and symbol versions, so on a GPU
//! machine the real libraries are loaded; where only the stand-ins are found,
//! every call returns the library's "not initialised" status.

use std::{fmt::Write as _, fs, path::Path};

use anyhow::{bail, Context, Result};
use object::{
    elf,
    read::elf::{Dyn as _, ElfFile64, FileHeader as _, SectionHeader as _},
    Endianness, Object, ObjectSymbol, SymbolKind,
};

/// The libraries candle-core 0.11.1 links through cudarc 0.19.10 (features
/// `driver`, `nvrtc`, `curand`, `cublas`, `cublaslt` with `dynamic-linking`),
/// each with the status its stand-in returns from every call: a value of the
/// library's own result enum, so cudarc's typed bindings read a valid one.
pub const LIBRARIES: &[(&str, i32, &str)] = &[
    ("cuda", 34, "CUDA_ERROR_STUB_LIBRARY"),
    ("nvrtc", 11, "NVRTC_ERROR_INTERNAL_ERROR"),
    ("curand", 203, "CURAND_STATUS_INITIALIZATION_FAILED"),
    ("cublas", 1, "CUBLAS_STATUS_NOT_INITIALIZED"),
    ("cublasLt", 1, "CUBLAS_STATUS_NOT_INITIALIZED"),
];

/// The environment variable that turns the stand-ins on in a consumer's build.
pub const ENV: &str = "KILN_CUDA_LINK_STUBS";

/// One library's stand-in, as read from NVIDIA's stub.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StubLib {
    /// `cublas` (linked as `-lcublas`).
    pub lib: String,
    /// `libcublas.so.12`.
    pub soname: String,
    /// The version node its functions carry (`libcublas.so.12`), if any.
    pub version_node: Option<String>,
    /// What every call returns.
    pub status: i32,
    /// Its functions, sorted.
    pub functions: Vec<String>,
}

/// Reads every library of [`LIBRARIES`] from the stub folder `dir`
/// (`usr/lib/x86_64-linux-gnu/stubs` of the pinned toolchain).
pub fn read(dir: &Path) -> Result<Vec<StubLib>> {
    LIBRARIES.iter().map(|&(lib, status, _)| read_one(&dir.join(format!("lib{lib}.so")), lib, status)).collect()
}

fn read_one(path: &Path, lib: &str, status: i32) -> Result<StubLib> {
    let data = fs::read(path).with_context(|| format!("cannot read NVIDIA's link stub {}", path.display()))?;
    let file = ElfFile64::<Endianness>::parse(&data[..]).with_context(|| format!("{}: not a 64-bit ELF file", path.display()))?;
    let soname = soname(&file).with_context(|| format!("{}: no DT_SONAME", path.display()))?;
    let mut functions = Vec::new();
    let mut version_node = None;
    for sym in file.dynamic_symbols() {
        let Ok(name) = sym.name() else { continue };
        if sym.is_definition() && sym.kind() == SymbolKind::Text && !name.starts_with('_') && name != "EXPORTS" {
            functions.push(name.to_string());
        } else if name == soname && sym.section() == object::SymbolSection::Absolute {
            // A version definition's symbol: the functions carry `@@<soname>`.
            version_node = Some(name.to_string());
        }
    }
    functions.sort();
    functions.dedup();
    if functions.is_empty() {
        bail!("{}: no functions in its dynamic symbol table", path.display());
    }
    if let Some(bad) = functions.iter().find(|f| !f.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')) {
        bail!("{}: function name {bad:?} is not a C identifier", path.display());
    }
    Ok(StubLib { lib: lib.to_string(), soname, version_node, status, functions })
}

fn soname(file: &ElfFile64<Endianness>) -> Option<String> {
    let endian = file.endian();
    let sections = file.elf_header().sections(endian, file.data()).ok()?;
    for section in sections.iter() {
        if let Ok(Some((entries, link))) = section.dynamic(endian, file.data()) {
            let strings = sections.strings(endian, file.data(), link).ok()?;
            for d in entries {
                if d.tag32(endian) == Some(elf::DT_SONAME) {
                    let name = d.string(endian, strings).ok()?;
                    return Some(String::from_utf8_lossy(name).into_owned());
                }
            }
        }
    }
    None
}

/// The table as the Rust source the CUDA runtime crate's build script includes.
pub fn rust_table(libs: &[StubLib]) -> String {
    let mut s = String::from("pub const LINK_STUBS: &[(&str, &str, &str, i32, &[&str])] = &[\n");
    for l in libs {
        let _ = writeln!(s, "    ({:?}, {:?}, {:?}, {}, &[", l.lib, l.soname, l.version_node.as_deref().unwrap_or(""), l.status);
        for f in &l.functions {
            let _ = writeln!(s, "        {f:?},");
        }
        s.push_str("    ]),\n");
    }
    s.push_str("];\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_damaged_stub_is_an_error_naming_it() {
        let dir = std::env::temp_dir().join(format!("kiln-link-stubs-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let err = format!("{:#}", read(&dir).unwrap_err());
        assert!(err.contains(&dir.join("libcuda.so").display().to_string()) && err.contains("cannot read NVIDIA's link stub"), "{err}");
        fs::write(dir.join("libcuda.so"), b"not an ELF file").unwrap();
        let err = format!("{:#}", read(&dir).unwrap_err());
        assert!(err.contains("libcuda.so: not a 64-bit ELF file"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_table_is_rust_the_build_script_includes() {
        let libs = [StubLib {
            lib: "cuda".into(),
            soname: "libcuda.so.1".into(),
            version_node: None,
            status: 34,
            functions: vec!["cuInit".into(), "cuGetErrorString".into()],
        }];
        let text = rust_table(&libs);
        assert!(text.starts_with("pub const LINK_STUBS: &[(&str, &str, &str, i32, &[&str])] = &[\n"), "{text}");
        assert!(text.contains("(\"cuda\", \"libcuda.so.1\", \"\", 34, &[\n        \"cuInit\",\n        \"cuGetErrorString\",\n    ]),"), "{text}");
        assert_eq!(rust_table(&[]), "pub const LINK_STUBS: &[(&str, &str, &str, i32, &[&str])] = &[\n];\n");
    }
}
