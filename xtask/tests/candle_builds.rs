//! candle itself builds against kiln's candle-kernels drop-in with no nvcc on
//! the machine: candle-core, candle-nn and candle-transformers 0.11.1 from
//! crates.io with `--features cuda` (and candle-core with `cuda,cudnn,nccl`), candle-kernels patched to the generated
//! sources that `cargo xtask dist` keeps. A library build (no link step), so
//! no CUDA library is needed either; cudarc gets its CUDA version from
//! CUDARC_CUDA_VERSION, as it must on any machine without nvcc.

mod common;

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn dist() -> PathBuf {
    let dir = std::env::var_os("KILN_DIST_DIR").map_or_else(|| repo().join("target/dist"), PathBuf::from);
    assert!(dir.join("crates/src/shim/Cargo.toml").is_file(), "{} has no generated drop-in: run `cargo xtask dist` first", dir.display());
    dir
}

/// PATH without any folder that holds nvcc or hipcc.
fn path_without_gpu_compilers() -> String {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':').filter(|d| !["nvcc", "hipcc"].iter().any(|t| Path::new(d).join(t).exists())).collect::<Vec<_>>().join(":")
}

fn build(crates: &[&str], features: &str) -> (bool, String) {
    let shim = dist().join("crates/src/shim");
    let dir = repo().join("target/candle-consumer").join(features.replace(',', "-"));
    fs::create_dir_all(dir.join("src")).unwrap();
    let dep = |name: &str| {
        format!(
            "{name} = {{ version = \"=0.11.1\", features = [{}] }}\n",
            features.split(',').map(|f| format!("{f:?}")).collect::<Vec<_>>().join(", ")
        )
    };
    let deps: String = crates.iter().map(|c| dep(c)).collect();
    let toml = format!(
        "[package]\nname = \"candle-consumer\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n[dependencies]\n{deps}\n\
         [patch.crates-io]\ncandle-kernels = {{ path = {:?} }}\n\n[workspace]\n",
        shim.display().to_string()
    );
    fs::write(dir.join("Cargo.toml"), toml).unwrap();
    let uses: String = crates.iter().map(|c| format!("pub use {};\n", c.replace('-', "_"))).collect();
    fs::write(dir.join("src/lib.rs"), uses).unwrap();
    let out = common::lean_consumer_build(&mut Command::new("cargo"))
        .args(["build", "--lib", "--quiet"])
        .current_dir(&dir)
        .env("PATH", path_without_gpu_compilers())
        .env("CUDARC_CUDA_VERSION", "13000")
        .env("CARGO_TARGET_DIR", repo().join("target/candle-consumer/target"))
        .env_remove("CUDA_PATH")
        .env_remove("CUDA_HOME")
        .env_remove("CUDA_ROOT")
        .env_remove("NVCC")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    let lock = fs::read_to_string(dir.join("Cargo.lock")).unwrap_or_default();
    assert!(!lock.contains("name = \"cudaforge\""), "upstream's nvcc driver (cudaforge) is in the graph: the patch was not used");
    assert!(!log.contains("was not used in the crate graph"), "{log}");
    (out.status.success(), log)
}

#[test]
fn candle_core_nn_and_transformers_build_with_cuda_against_the_drop_in() {
    assert!(!Command::new("sh").args(["-c", "command -v nvcc"]).env("PATH", path_without_gpu_compilers()).status().unwrap().success());
    let (ok, log) = build(&["candle-core", "candle-nn", "candle-transformers"], "cuda");
    assert!(ok, "candle 0.11.1 with --features cuda did not build against kiln's drop-in:\n{log}");
    // cuDNN and NCCL are cudarc features of candle-core with fixed versions: no SDK needed either.
    let (ok, log) = build(&["candle-core"], "cuda,cudnn,nccl");
    assert!(ok, "candle-core 0.11.1 with --features cuda,cudnn,nccl did not build against kiln's drop-in:\n{log}");
}
