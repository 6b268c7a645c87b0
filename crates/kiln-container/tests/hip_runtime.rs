//! kiln-loader's HIP binding held against the HIP runtime of every AMD runner
//! image, **structurally**: there is no AMD GPU here and nothing AMD is run;
//! every claim is about the bytes of the pinned packages.
//!
//! For each runner image of pins.toml `[containers]` whose closure carries a
//! HIP runtime (`libamdhip64-<N>`: kiln-runner-rocm's HIP 5.7, kiln-runner-rocm7's
//! HIP 7), its pinned `.deb` and the runtime's own headers pinned beside the
//! image (`headers`, libamdhip64-dev at the runtime's version) are fetched
//! through kiln's pinned download (sha256-checked, into kiln's cache) and
//! unpacked, and:
//!
//! - the library's `DT_SONAME` is one of the names the loader dlopens
//!   (`kiln_loader::hip::library_candidates`);
//! - its dynamic symbol table (kiln-validate's `shared_lib`) exports every symbol
//!   the binding resolves (`REQUIRED_SYMBOLS`) as a function an unversioned
//!   `dlsym` finds: defined, global, visible, unversioned or at its default
//!   version (`@@`), never only a hidden `@` one;
//! - of `PROPERTIES_CALLS`, the call the binding would pick (the first the
//!   library exports) is declared by the header with the struct the binding
//!   says (a C function-pointer assignment, `-Werror=incompatible-pointer-types`),
//!   and `offsetof(struct, gcnArchName)`, the field's size, the struct's size
//!   (within `PROPS_BUFFER`), `sizeof(hipError_t)` and the `hipError_t` values
//!   the binding tells apart (`ERROR_CODES`) are the header's. The host's `cc`
//!   (the one rustc links this test with) compiles the header with
//!   `-D__HIP_PLATFORM_AMD__` to an object file only: the numbers are read back
//!   as the sizes of arrays it defines (`char x[offsetof(...) + 1]`), so
//!   nothing it built is run. The header is the runtime's own declaration of
//!   the ABI; Debian's library is stripped (no DWARF to read).
//!
//! `a_wrong_table_fails_naming_what_differs` feeds the same check a binding
//! that wants a symbol the runtime lacks, a wrong offset and a wrong error
//! code, and reads the failures.

use std::{
    ffi::c_int,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use kiln_loader::hip::{library_candidates, PropertiesCall, ERROR_CODES, PROPERTIES_CALLS, PROPS_BUFFER, REQUIRED_SYMBOLS};
use kiln_pins::{Deb, Pins};
use kiln_toolchain::{fetch, Cache};
use kiln_validate::shared_lib;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// What the binding expects of a runtime: the loader's own tables, or a test's edit of them.
struct Binding<'a> {
    symbols: &'a [&'a str],
    calls: &'a [PropertiesCall],
    errors: &'a [(&'a str, c_int)],
}

const LOADER: Binding<'static> = Binding { symbols: REQUIRED_SYMBOLS, calls: &PROPERTIES_CALLS, errors: &ERROR_CODES };

/// One AMD runner image's runtime, fetched and unpacked.
struct Runtime {
    image: String,
    /// `libamdhip64-7 7.2.4-1~exp2`.
    package: String,
    /// The shared library's path below the unpacked package, and its bytes.
    library: (String, Vec<u8>),
    /// The unpacked header package's `usr/include`.
    include: PathBuf,
    _dir: tempfile::TempDir,
}

fn unpack(cache: &Cache, pins: &Pins, deb: &Deb, into: &Path) {
    let file = fetch::fetch_deb(cache, &pins.toolchain.mirrors, deb).unwrap_or_else(|e| panic!("{} {}: {e:#}", deb.name, deb.version));
    let ok = Command::new("dpkg-deb").arg("-x").arg(&file).arg(into).status().expect("dpkg-deb runs");
    assert!(ok.success(), "dpkg-deb -x {} failed", file.display());
}

/// Every runner image with a HIP runtime, in pins.toml's order.
fn runtimes() -> Vec<Runtime> {
    let pins = Pins::load(&repo().join("pins.toml")).unwrap();
    let containers = kiln_container::containers(&pins).unwrap();
    let closures = kiln_container::closures(&pins).unwrap();
    let cache = Cache::from_env().unwrap();
    let mut out = Vec::new();
    for image in &containers.runners {
        let runner = closures.runner(image.key).unwrap();
        let Some(hip) = runner.packages.hip_runtime() else { continue };
        let headers: Vec<&Deb> = runner.headers.iter().filter(|d| d.name == "libamdhip64-dev").collect();
        assert!(
            matches!(headers.as_slice(), [h] if h.version == hip.version),
            "pins.toml [containers.{}] carries {} {} but pins no `headers = [\"libamdhip64-dev={}\"]` beside it: \
             its layout cannot be checked against the runtime's own header (add it, then `cargo xtask container --update`)",
            image.key,
            hip.name,
            hip.version,
            hip.version
        );
        let dir = tempfile::Builder::new().prefix(&format!("kiln-hip-{}-", image.key)).tempdir().unwrap();
        let (rt, hdr) = (dir.path().join("runtime"), dir.path().join("headers"));
        unpack(&cache, &pins, hip, &rt);
        unpack(&cache, &pins, headers[0], &hdr);
        // The library itself: the regular file `libamdhip64.so.<N>` leads to.
        let lib_dir = rt.join("usr/lib/x86_64-linux-gnu");
        let link = fs::read_dir(&lib_dir)
            .unwrap_or_else(|e| panic!("{} {}: no {}: {e}", hip.name, hip.version, lib_dir.display()))
            .map(|e| e.unwrap().path())
            .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("libamdhip64.so."))
            .unwrap_or_else(|| panic!("{} {} ships no libamdhip64.so.*", hip.name, hip.version));
        let real = fs::canonicalize(&link).unwrap();
        let bytes = fs::read(&real).unwrap();
        let rel = real.strip_prefix(fs::canonicalize(&rt).unwrap()).unwrap().display().to_string();
        out.push(Runtime {
            image: image.name.clone(),
            package: format!("{} {}", hip.name, hip.version),
            library: (rel, bytes),
            include: hdr.join("usr/include"),
            _dir: dir,
        });
    }
    out
}

/// Everything `binding` expects that `rt` does not give, each a line naming
/// the image, the file and what to do; and, when nothing is missing, a
/// one-line account of what was checked.
fn check(rt: &Runtime, binding: &Binding) -> Result<String, Vec<String>> {
    let (rel, bytes) = &rt.library;
    let what = format!("{} ({}: {rel})", rt.image, rt.package);
    let mut failures = Vec::new();

    let soname = shared_lib::soname(&what, bytes).unwrap().unwrap_or_default();
    if !library_candidates().contains(&soname) && std::env::var_os(kiln_loader::hip::LIBRARY_ENV).is_none() {
        failures.push(format!("{what}: soname `{soname}` is not among the names kiln-loader dlopens (hip.rs library_candidates)"));
    }

    let symbols = shared_lib::dynamic_symbols(&what, bytes).unwrap();
    for m in shared_lib::missing_functions(&symbols, binding.symbols) {
        failures.push(format!(
            "{what}: kiln-loader needs {m} (crates/kiln-loader/src/hip.rs REQUIRED_SYMBOLS; the loader would refuse this runtime as too old)"
        ));
    }
    let exported = |name: &str| symbols.iter().any(|s| s.name == name && s.dlsym_function());
    let Some(call) = binding.calls.iter().find(|c| exported(c.symbol)) else {
        let names: Vec<&str> = binding.calls.iter().map(|c| c.symbol).collect();
        failures.push(format!("{what}: exports none of {} (hip.rs PROPERTIES_CALLS): the loader cannot read the device's arch", names.join(", ")));
        return Err(failures);
    };
    let version = symbols.iter().find(|s| s.name == call.symbol && s.dlsym_function()).unwrap().display();

    // The header, compiled to an object whose array sizes are the numbers.
    let t = call.c_struct;
    let mut c = format!(
        "#include <stddef.h>\n#include <hip/hip_runtime_api.h>\n\
         /* The header declares the call with this struct. */\n\
         hipError_t (*const kiln_call)({t} *, int) = &{sym};\n\
         char kiln_offset[offsetof({t}, gcnArchName) + 1];\n\
         char kiln_len[sizeof((({t} *)0)->gcnArchName) + 1];\n\
         char kiln_struct[sizeof({t}) + 1];\n\
         char kiln_error_t[sizeof(hipError_t) + 1];\n",
        sym = call.symbol
    );
    for (name, _) in binding.errors {
        c.push_str(&format!("char kiln_value_{name}[{name} + 1];\n"));
    }
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("layout.c"), &c).unwrap();
    let out = Command::new("cc")
        .args(["-c", "-x", "c", "-D__HIP_PLATFORM_AMD__", "-Werror=incompatible-pointer-types", "-I"])
        .arg(&rt.include)
        .arg(dir.path().join("layout.c"))
        .arg("-o")
        .arg(dir.path().join("layout.o"))
        .output()
        .expect("the host's cc runs (rustc links with it)");
    if !out.status.success() {
        failures.push(format!(
            "{what}: its header ({}) does not declare {} as `hipError_t {}({t} *, int)` the way kiln-loader calls it \
             (hip.rs PROPERTIES_CALLS), or does not compile:\n{}",
            rt.include.join("hip/hip_runtime_api.h").display(),
            call.symbol,
            call.symbol,
            String::from_utf8_lossy(&out.stderr)
        ));
        return Err(failures);
    }
    let sizes = shared_lib::object_sizes("layout.o", &fs::read(dir.path().join("layout.o")).unwrap()).unwrap();
    let n = |k: &str| sizes.get(k).copied().unwrap_or_else(|| panic!("layout.o defines no {k}: {sizes:?}")) as i64 - 1;
    let fix = "fix crates/kiln-loader/src/hip.rs PROPERTIES_CALLS (the binding reads the wrong bytes on this runtime)";
    if n("kiln_offset") != call.gcn_arch_name_offset as i64 {
        failures.push(format!(
            "{what}: offsetof({t}, gcnArchName) is {} in the runtime's header, kiln-loader reads it at {}: {fix}",
            n("kiln_offset"),
            call.gcn_arch_name_offset
        ));
    }
    if n("kiln_len") != call.gcn_arch_name_len as i64 {
        failures.push(format!(
            "{what}: {t}.gcnArchName is {} bytes in the header, kiln-loader reads {}: {fix}",
            n("kiln_len"),
            call.gcn_arch_name_len
        ));
    }
    if n("kiln_struct") > PROPS_BUFFER as i64 {
        failures.push(format!(
            "{what}: sizeof({t}) is {}, more than kiln-loader's PROPS_BUFFER {PROPS_BUFFER}: the runtime would write past it",
            n("kiln_struct")
        ));
    }
    if n("kiln_error_t") != std::mem::size_of::<c_int>() as i64 {
        failures.push(format!("{what}: sizeof(hipError_t) is {}, kiln-loader takes it as a C int", n("kiln_error_t")));
    }
    for (name, value) in binding.errors {
        let header = n(&format!("kiln_value_{name}"));
        if header != *value as i64 {
            failures.push(format!("{what}: {name} is {header} in the runtime's header, kiln-loader's ERROR_CODES say {value}"));
        }
    }
    if !failures.is_empty() {
        return Err(failures);
    }
    Ok(format!(
        "{what}: soname {soname}; all {} required symbols exported for dlsym; arch name through {version} into {t} \
         (gcnArchName at {}, {} bytes; struct {} bytes <= {PROPS_BUFFER}); hipError_t an int, {} codes as the header's \
         (structural only: nothing executed on AMD hardware)",
        binding.symbols.len(),
        call.gcn_arch_name_offset,
        call.gcn_arch_name_len,
        n("kiln_struct"),
        binding.errors.len()
    ))
}

#[test]
fn the_loader_binds_every_amd_runner_images_hip_runtime() {
    let runtimes = runtimes();
    let images: Vec<&str> = runtimes.iter().map(|r| r.image.as_str()).collect();
    assert_eq!(images, ["kiln-runner-rocm", "kiln-runner-rocm7"], "the AMD runner images of pins.toml");
    let mut failures = Vec::new();
    for rt in &runtimes {
        match check(rt, &LOADER) {
            Ok(line) => eprintln!("{line}"),
            Err(f) => failures.extend(f),
        }
    }
    assert!(failures.is_empty(), "kiln-loader's HIP binding does not fit a runner image's runtime:\n  {}", failures.join("\n  "));
}

#[test]
fn a_wrong_table_fails_naming_what_differs() {
    let runtimes = runtimes();
    let rocm7 = runtimes.iter().find(|r| r.image == "kiln-runner-rocm7").unwrap();
    let rocm = runtimes.iter().find(|r| r.image == "kiln-runner-rocm").unwrap();

    // A symbol no runtime has.
    let mut symbols = REQUIRED_SYMBOLS.to_vec();
    symbols.push("hipKilnNoSuchCall");
    let e = check(rocm7, &Binding { symbols: &symbols, ..LOADER }).unwrap_err().join("\n");
    assert!(e.contains("kiln-runner-rocm7 (libamdhip64-7 7.2.4-1~exp2") && e.contains("hipKilnNoSuchCall: not in the dynamic symbol table"), "{e}");

    // A symbol HIP 7 has only as an import: defined elsewhere, so dlsym on it finds nothing here.
    let import = "hsa_init";
    let e = check(rocm7, &Binding { symbols: &[import], ..LOADER }).unwrap_err().join("\n");
    assert!(e.contains("hsa_init: hsa_init@ROCR_1 is an undefined import"), "{e}");

    // gcnArchName one byte off, in the layout each runtime's loader path uses.
    let mut calls = PROPERTIES_CALLS;
    calls[0].gcn_arch_name_offset += 1;
    calls[1].gcn_arch_name_offset += 1;
    let e = check(rocm7, &Binding { calls: &calls, ..LOADER }).unwrap_err().join("\n");
    assert!(e.contains("offsetof(hipDeviceProp_tR0600, gcnArchName) is 1160 in the runtime's header, kiln-loader reads it at 1161"), "{e}");
    let e = check(rocm, &Binding { calls: &calls, ..LOADER }).unwrap_err().join("\n");
    assert!(e.contains("offsetof(hipDeviceProp_t, gcnArchName) is 396 in the runtime's header, kiln-loader reads it at 397"), "{e}");

    // The R0600 call with HIP 5's struct: the header declares it otherwise.
    let mut calls = PROPERTIES_CALLS;
    calls[0].c_struct = "hipDeviceProp_tR0000";
    let e = check(rocm7, &Binding { calls: &calls, ..LOADER }).unwrap_err().join("\n");
    assert!(
        e.contains("does not declare hipGetDevicePropertiesR0600 as `hipError_t hipGetDevicePropertiesR0600(hipDeviceProp_tR0000 *, int)`"),
        "{e}"
    );

    // A wrong error code.
    let e = check(rocm, &Binding { errors: &[("hipErrorNoDevice", 101)], ..LOADER }).unwrap_err().join("\n");
    assert!(e.contains("hipErrorNoDevice is 100 in the runtime's header, kiln-loader's ERROR_CODES say 101"), "{e}");
}
