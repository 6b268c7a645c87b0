// Links the static library under test: `fat` (upstream-style objects with
// their SASS inside, NVIDIA's static runtime) or `split` (kiln's host-only
// objects, whose runtime calls land in src/launch.rs).
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
}
