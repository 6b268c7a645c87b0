// Links the static library under test: `fat` (upstream-style objects with
// their SASS inside, NVIDIA's static runtime) or `split` (kiln's host-only
// objects, whose runtime calls land in src/launch.rs).
//
// And candle-kernels' own src/ffi.rs (FFI_RS, the verified sources build.sh
// found): src/main.rs declares nothing itself, it includes that file, and this
// script lists the functions it declares into OUT_DIR/declared.rs. A function
// the harness never names fails the build here, naming it: a function added
// upstream cannot be skipped silently (src/main.rs checks again at run time
// that every one was called).
use std::collections::BTreeSet;

/// (name, the feature that gates it or "") for every `pub fn` of ffi.rs.
fn declared(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut gate = String::new();
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("#[cfg(feature = \"") {
            gate = rest.split('"').next().unwrap_or_default().to_string();
        } else if let Some(rest) = line.strip_prefix("pub fn ") {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            out.push((name, std::mem::take(&mut gate)));
        } else if !line.starts_with("#[") && !line.is_empty() && !line.starts_with("//") {
            // A cfg applies to the item right after it (other attributes in between).
            gate.clear();
        }
    }
    out
}

/// The identifiers of Rust source, comments and string literals left out.
fn identifiers(src: &str) -> BTreeSet<String> {
    let mut code = String::new();
    let mut chars = src.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
                code.push('\n');
            }
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    if !escaped && c == '"' {
                        break;
                    }
                    escaped = !escaped && c == '\\';
                }
                code.push(' ');
            }
            _ => code.push(c),
        }
    }
    code.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).map(str::to_string).collect()
}

fn main() {
    let lib = std::env::var("FFI_LIB_DIR").expect("FFI_LIB_DIR: the folder with libffi_under_test.a");
    println!("cargo:rustc-link-search=native={lib}");
    println!("cargo:rustc-link-lib=static=ffi_under_test");
    if std::env::var_os("CARGO_FEATURE_FAT").is_some() {
        println!("cargo:rustc-link-lib=static=cudart_static");
        for l in ["rt", "pthread", "dl"] {
            println!("cargo:rustc-link-lib=dylib={l}");
        }
    }
    // Both: moe_wmma.cu's Thrust code throws C++ exceptions.
    println!("cargo:rustc-link-lib=dylib=stdc++");
    println!("cargo:rerun-if-env-changed=FFI_LIB_DIR");

    let ffi_rs = std::env::var("FFI_RS").expect("FFI_RS: candle-kernels' src/ffi.rs (bench/ffi-split/build.sh sets it)");
    println!("cargo:rerun-if-env-changed=FFI_RS");
    println!("cargo:rerun-if-changed={ffi_rs}");
    println!("cargo:rerun-if-changed=src/main.rs");
    println!("cargo:rustc-env=FFI_RS={ffi_rs}");
    let text = std::fs::read_to_string(&ffi_rs).unwrap_or_else(|e| panic!("{ffi_rs}: {e}"));
    let functions = declared(&text);
    let pub_fns = text.matches("pub fn ").count();
    assert!(
        !functions.is_empty() && functions.len() == pub_fns,
        "{ffi_rs}: read {} functions of its {pub_fns} `pub fn`: its layout is not the one this script parses",
        functions.len()
    );
    let used = identifiers(&std::fs::read_to_string("src/main.rs").expect("src/main.rs"));
    let missing: Vec<&str> = functions.iter().filter(|(name, gate)| gate.is_empty() && !used.contains(name)).map(|(name, _)| name.as_str()).collect();
    if !missing.is_empty() {
        panic!(
            "{ffi_rs} declares {} function(s) that bench/ffi-split/harness/src/main.rs never calls: {}\n\
             every function of candle-kernels' ffi must be called and its output compared (bench/ffi-split/build.sh)",
            missing.len(),
            missing.join(", ")
        );
    }
    let rows: String = functions.iter().map(|(name, gate)| format!("    ({name:?}, {gate:?}),\n")).collect();
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("declared.rs");
    std::fs::write(
        out,
        format!(
            "/// Every function candle-kernels' src/ffi.rs declares, with the feature that gates it (\"\" if none).\n\
             pub const DECLARED: &[(&str, &str)] = &[\n{rows}];\n"
        ),
    )
    .unwrap();
}
