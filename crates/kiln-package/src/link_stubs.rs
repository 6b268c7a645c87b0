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
//! consumer asks for them (`KILN_CUDA_LINK_STUBS=1`), for the CUDA major its
//! `CUDARC_CUDA_VERSION` names. A program linked against them records the real
//! sonames and symbol versions, so on a GPU machine the real libraries are
//! loaded; where only the stand-ins are found, every call returns the
//! library's "not initialised" status, and where the NVIDIA driver is, a
//! loaded stand-in stops the process (template `link/stubs.rs`).
//!
//! CUDA 12's table comes from the toolchain's stubs ([`read`]); each further
//! major's from the libraries (and, for the driver's libcuda, the header) in
//! the NVIDIA wheels `[cuda_link_stubs.<major>]` pins ([`from_member`]).

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
    /// The CUDA major it is for (12).
    pub major: u32,
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
/// (`usr/lib/x86_64-linux-gnu/stubs` of the pinned toolchain); their CUDA
/// major is cuBLAS's soname's (`libcublas.so.12`).
pub fn read(dir: &Path) -> Result<Vec<StubLib>> {
    let mut libs = Vec::new();
    for &(lib, _, _) in LIBRARIES {
        let path = dir.join(format!("lib{lib}.so"));
        let data = fs::read(&path).with_context(|| format!("cannot read NVIDIA's link stub {}", path.display()))?;
        libs.push(read_elf(&path.display().to_string(), &data, lib, 0)?);
    }
    let major = libs.iter().find(|l| l.lib == "cublas").and_then(|l| l.soname.strip_prefix("libcublas.so.")).and_then(|m| m.parse::<u32>().ok());
    let Some(major) = major else { bail!("{}: libcublas.so's soname names no CUDA major", dir.display()) };
    for l in &mut libs {
        l.major = major;
    }
    Ok(libs)
}

/// The status `lib`'s stand-in returns from every call ([`LIBRARIES`]).
fn status(lib: &str) -> Result<i32> {
    match LIBRARIES.iter().find(|l| l.0 == lib) {
        Some(l) => Ok(l.1),
        None => bail!("`{lib}` is not a CUDA library kiln makes stand-ins for ({})", LIBRARIES.iter().map(|l| l.0).collect::<Vec<_>>().join(", ")),
    }
}

/// One library of CUDA `major` from a pinned wheel's `member` (`bytes`; `what`
/// names it in messages):
/// NVIDIA's shared library itself, or for the driver's `cuda` (which no wheel
/// carries) the driver API header `cuda.h`, whose functions join those of
/// `base`, the toolchain's libcuda stub (the driver is one library for every major).
pub fn from_member(major: u32, lib: &str, member: &str, what: &str, bytes: &[u8], base: &[StubLib]) -> Result<StubLib> {
    if member.ends_with(".h") {
        if lib != "cuda" {
            bail!("{what}: a header gives only the driver's functions (`cuda`), not `{lib}`'s");
        }
        let base = base.iter().find(|l| l.lib == "cuda").context("the toolchain's libcuda stub is not read")?;
        let text = std::str::from_utf8(bytes).with_context(|| format!("{what}: not UTF-8"))?;
        return driver_header(what, text, major, base);
    }
    let l = read_elf(what, bytes, lib, major)?;
    if !l.soname.starts_with(&format!("lib{lib}.so.")) {
        bail!("{what}: soname {} is not lib{lib}'s", l.soname);
    }
    Ok(l)
}

/// libcuda's stand-in for CUDA `major`: `base`'s functions (soname, no
/// version node) and every function `cuda.h` declares, under the name it
/// links as (its `#define cuX cuX_vN`) and its own.
fn driver_header(what: &str, text: &str, major: u32, base: &StubLib) -> Result<StubLib> {
    let ident = |s: &str| s.starts_with("cu") && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    let mut renamed = std::collections::BTreeMap::new();
    let mut declared = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("#define ") {
            let mut it = rest.split_whitespace();
            if let (Some(a), Some(b), None) = (it.next(), it.next(), it.next()) {
                if ident(a) && ident(b) {
                    renamed.insert(a.to_string(), b.to_string());
                }
            }
        }
        let mut rest = t;
        while let Some(at) = rest.find("CUDAAPI ") {
            rest = &rest[at + "CUDAAPI ".len()..];
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if ident(&name) && rest[name.len()..].trim_start().starts_with('(') {
                declared.push(name);
            }
        }
    }
    if declared.len() < 100 || !declared.iter().any(|d| d == "cuInit") {
        bail!(
            "{what}: declares {} driver functions (cuInit among them: {}): not CUDA's cuda.h",
            declared.len(),
            declared.iter().any(|d| d == "cuInit")
        );
    }
    let mut functions = base.functions.clone();
    for d in declared {
        if let Some(linked) = renamed.get(&d) {
            functions.push(linked.clone());
        }
        functions.push(d);
    }
    functions.sort();
    functions.dedup();
    Ok(StubLib { major, lib: "cuda".into(), soname: base.soname.clone(), version_node: base.version_node.clone(), status: base.status, functions })
}

/// The exported functions, soname and symbol-version node of the shared
/// library `data` (named `what` in messages).
fn read_elf(what: &str, data: &[u8], lib: &str, major: u32) -> Result<StubLib> {
    let status = status(lib)?;
    let file = ElfFile64::<Endianness>::parse(data).with_context(|| format!("{what}: not a 64-bit ELF file"))?;
    let soname = soname(&file).with_context(|| format!("{what}: no DT_SONAME"))?;
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
        bail!("{what}: no functions in its dynamic symbol table");
    }
    if let Some(bad) = functions.iter().find(|f| !f.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')) {
        bail!("{what}: function name {bad:?} is not a C identifier");
    }
    Ok(StubLib { major, lib: lib.to_string(), soname, version_node, status, functions })
}

/// What to install instead of `lib`'s stand-in on a machine with a GPU, for CUDA `major`.
pub fn install_hint(major: u32, lib: &str) -> String {
    let (pip, deb) = match (major, lib) {
        (_, "cuda") => return "libcuda.so.1 comes with the NVIDIA driver: install the driver's libraries (Debian: libcuda1), or in a container run it with the NVIDIA Container Toolkit".into(),
        (12, "nvrtc") => ("nvidia-cuda-nvrtc-cu12", "libnvrtc12 (Debian non-free), cuda-nvrtc-12-<minor> (NVIDIA's repository)"),
        (12, "curand") => ("nvidia-curand-cu12", "libcurand10 (Debian non-free), libcurand-12-<minor> (NVIDIA's repository)"),
        (12, "cublas") => ("nvidia-cublas-cu12", "libcublas12 (Debian non-free), libcublas-12-<minor> (NVIDIA's repository)"),
        (12, "cublasLt") => ("nvidia-cublas-cu12", "libcublaslt12 (Debian non-free), libcublas-12-<minor> (NVIDIA's repository)"),
        (_, "nvrtc") => return format!("pip install 'nvidia-cuda-nvrtc=={major}.*' (its nvidia/cu{major}/lib on LD_LIBRARY_PATH), or apt install cuda-nvrtc-{major}-<minor> (NVIDIA's repository), or the CUDA {major} toolkit"),
        (_, "curand") => return format!("pip install nvidia-curand of CUDA {major} (its nvidia/cu{major}/lib on LD_LIBRARY_PATH), or apt install libcurand-{major}-<minor> (NVIDIA's repository), or the CUDA {major} toolkit"),
        (_, _) => return format!("pip install 'nvidia-cublas=={major}.*' (its nvidia/cu{major}/lib on LD_LIBRARY_PATH), or apt install libcublas-{major}-<minor> (NVIDIA's repository), or the CUDA {major} toolkit"),
    };
    format!("pip install {pip} (its nvidia/*/lib on LD_LIBRARY_PATH), or apt install {deb}, or the CUDA 12 toolkit")
}

/// Every library of [`LIBRARIES`] once for each major `libs` has: a major
/// with a library missing, or one twice, is an error.
pub fn check_complete(libs: &[StubLib]) -> Result<()> {
    let mut majors: Vec<u32> = libs.iter().map(|l| l.major).collect();
    majors.sort();
    majors.dedup();
    for m in majors {
        for &(lib, _, _) in LIBRARIES {
            match libs.iter().filter(|l| l.major == m && l.lib == lib).count() {
                1 => {}
                0 => {
                    bail!("CUDA {m}'s link stand-ins lack {lib} (every major needs {})", LIBRARIES.iter().map(|l| l.0).collect::<Vec<_>>().join(", "))
                }
                _ => bail!("CUDA {m}'s link stand-ins have {lib} twice"),
            }
        }
    }
    Ok(())
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

/// The table as the Rust source the CUDA runtime crate's build script includes
/// (template `link/stubs.rs`'s `StubRow`: major, lib, soname, version node, status, install, functions).
pub fn rust_table(libs: &[StubLib]) -> String {
    let mut s = String::from("pub const LINK_STUBS: &[(u32, &str, &str, &str, i32, &str, &[&str])] = &[\n");
    for l in libs {
        let _ = writeln!(
            s,
            "    ({}, {:?}, {:?}, {:?}, {}, {:?}, &[",
            l.major,
            l.lib,
            l.soname,
            l.version_node.as_deref().unwrap_or(""),
            l.status,
            install_hint(l.major, &l.lib)
        );
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
    fn a_wheel_member_is_read_as_a_library_or_the_driver_header() {
        let base = [StubLib {
            major: 12,
            lib: "cuda".into(),
            soname: "libcuda.so.1".into(),
            version_node: None,
            status: 34,
            functions: (0..100).map(|i| format!("cuOld{i}")).collect(),
        }];
        let mut header = String::from("#define cuCtxCreate                         cuCtxCreate_v4\n#define CU_SOMETHING 1\n");
        header.push_str(
            "CUresult CUDAAPI cuInit(unsigned int Flags);\nCUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev);\n",
        );
        for i in 0..100 {
            header.push_str(&format!("CUresult CUDAAPI cuNew{i}(void);\n"));
        }
        let h = "nvidia/cu13/include/cuda.h";
        let l = from_member(13, "cuda", h, "cuda.h of a wheel", header.as_bytes(), &base).unwrap();
        assert_eq!((l.major, l.soname.as_str(), l.status, l.version_node.as_deref()), (13, "libcuda.so.1", 34, None));
        for f in ["cuInit", "cuCtxCreate", "cuCtxCreate_v4", "cuNew99", "cuOld0"] {
            assert!(l.functions.iter().any(|g| g == f), "{f} missing: {:?}", l.functions);
        }
        assert!(!l.functions.iter().any(|g| g == "CU_SOMETHING"));
        let err = format!("{:#}", from_member(13, "cublas", h, "cuda.h of a wheel", header.as_bytes(), &base).unwrap_err());
        assert!(err.contains("not `cublas`'s"), "{err}");
        let err = format!("{:#}", from_member(13, "cuda", h, "cuda.h of a wheel", b"int x;", &base).unwrap_err());
        assert!(err.contains("not CUDA's cuda.h"), "{err}");
        let err = format!("{:#}", from_member(13, "cublas", "lib/libcublas.so.13", "libcublas.so.13 of a wheel", b"not an ELF", &base).unwrap_err());
        assert!(err.contains("libcublas.so.13 of a wheel: not a 64-bit ELF file"), "{err}");
        let err = format!("{:#}", from_member(13, "cufft", "lib/libcufft.so.12", "x", b"", &base).unwrap_err());
        assert!(err.contains("`cufft` is not a CUDA library kiln makes stand-ins for"), "{err}");
    }

    #[test]
    fn the_table_is_rust_the_build_script_includes() {
        let libs = [StubLib {
            major: 12,
            lib: "cuda".into(),
            soname: "libcuda.so.1".into(),
            version_node: None,
            status: 34,
            functions: vec!["cuInit".into(), "cuGetErrorString".into()],
        }];
        let text = rust_table(&libs);
        assert!(text.starts_with("pub const LINK_STUBS: &[(u32, &str, &str, &str, i32, &str, &[&str])] = &[\n"), "{text}");
        let install = format!("{:?}", install_hint(12, "cuda"));
        assert!(
            text.contains(&format!(
                "(12, \"cuda\", \"libcuda.so.1\", \"\", 34, {install}, &[\n        \"cuInit\",\n        \"cuGetErrorString\",\n    ]),"
            )),
            "{text}"
        );
        assert_eq!(rust_table(&[]), "pub const LINK_STUBS: &[(u32, &str, &str, &str, i32, &str, &[&str])] = &[\n];\n");
    }
}
