//! How one module is compiled for one AMD arch: clang in HIP mode, device
//! code only, one code object (HSACO) per (module, arch). The CUDA names the
//! sources use are mapped to HIP by kiln's shim headers (kernels/hip/): the
//! set's `hip_force_include` ones are force-included ahead of each source,
//! which stays unmodified.

use anyhow::Result;
use kiln_manifest::Kind;
use kiln_pins::{HipArch, Pins, Target};

use crate::{
    compile::{Output, Plan, SourceFile},
    job::{Arch, Job, JobKind},
};

/// The `__CUDA_ARCH__` (divided by 10) that the pinned HIP shims define for
/// device passes: AMD code objects get exactly the kernels the sources compile
/// for that NVIDIA level (bf16 and fp8 on: the shims convert both in
/// software), as upstream's ROCm backend compiles them (`-D__CUDA_ARCH__=890`).
/// A test reads the main set's forced headers to keep the two equal.
pub const EMULATED_CUDA_ARCH: u32 = 89;

pub fn job(plan: &Plan, pins: &Pins, module: &str, file: &SourceFile, arch: &HipArch) -> Result<Job> {
    // The first pinned clang that knows the arch (clang-17), else the newer one (pins.toml `clang_next`).
    let compiler = pins.hip_compiler(arch);
    let major = compiler.major;
    let mut argv = vec![
        format!("clang++-{major}"),
        "-x".into(),
        "hip".into(),
        format!("--offload-arch={arch}"),
        "--cuda-device-only".into(),
        // Without it clang wraps even a single arch in an offload bundle.
        "--no-gpu-bundle-output".into(),
        format!("-mcode-object-version={}", plan.set.targets.code_object_version_for(arch)),
        "--rocm-path=/usr".into(),
        format!("--rocm-device-lib-path=/{}", compiler.bitcode_dir()),
    ];
    argv.extend(plan.set.flags.hip.iter().cloned());
    // The launch-geometry macros of kiln-target's table (the manifest records them per artifact).
    argv.extend(arch.row().geometry_defines().into_iter().map(|d| format!("-D{d}")));
    if let Some(n) = plan.set.flags.hip_max_threads_per_block.get(module) {
        argv.push(format!("--gpu-max-threads-per-block={n}"));
    }
    let output = format!("{module}.hsaco");
    argv.push(format!("-I{}", plan.shims.at));
    argv.extend(plan.include_flags());
    for header in &plan.set.flags.hip_force_include {
        argv.extend(["-include".into(), header.clone()]);
    }
    let out = Output { arch: Arch::One(Target::Hip(arch.clone())), kind: JobKind::Artifact(Kind::Hsaco), name: output };
    plan.compile_job(module, out, argv, file, true)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_emulated_arch_is_the_one_the_shim_defines() {
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let pins = kiln_pins::Pins::load(&repo.join("pins.toml")).unwrap();
        let define = format!("#define __CUDA_ARCH__ {}", super::EMULATED_CUDA_ARCH * 10);
        let forced = &pins.main_set().flags.hip_force_include;
        let defines = |h: &String| std::fs::read_to_string(repo.join("kernels/hip").join(h)).unwrap().lines().any(|l| l.trim() == define);
        assert!(forced.iter().any(defines), "none of the main set's HIP forced headers {forced:?} has `{define}`");
    }
}
