//! How one module is compiled for one AMD arch: clang in HIP mode, device
//! code only, one code object (HSACO) per (module, arch). The CUDA names the
//! sources use are mapped to HIP by kiln's shim headers (kernels/hip/),
//! force-included ahead of each source, which stays unmodified.

use anyhow::Result;
use kiln_pins::{HipArch, Pins, Target};

use crate::{
    job::{Arch, Job, Kind},
    plan::{Plan, SourceFile},
};

/// The shim header force-included into every HIP compile.
pub const FORCED_INCLUDE: &str = "candle_hip_compat.h";

pub fn job(plan: &Plan, pins: &Pins, module: &str, file: &SourceFile, arch: &HipArch) -> Result<Job> {
    let clang = &pins.toolchain.clang.package; // clang-17
    let major = clang.trim_start_matches("clang-");
    let mut argv = vec![
        format!("clang++-{major}"),
        "-x".into(),
        "hip".into(),
        format!("--offload-arch={arch}"),
        "--cuda-device-only".into(),
        // Without it clang wraps even a single arch in an offload bundle.
        "--no-gpu-bundle-output".into(),
        format!("-mcode-object-version={}", pins.targets.code_object_version),
        "--rocm-path=/usr".into(),
        format!("--rocm-device-lib-path=/usr/lib/llvm-{major}/lib/clang/{major}/amdgcn/bitcode"),
    ];
    argv.extend(pins.flags.hip.iter().cloned());
    if let Some(n) = pins.flags.hip_max_threads_per_block.get(module) {
        argv.push(format!("--gpu-max-threads-per-block={n}"));
    }
    let output = format!("{module}.hsaco");
    argv.extend([
        format!("-I{}", plan.shims.at),
        "-include".into(),
        FORCED_INCLUDE.into(),
        "-o".into(),
        format!("/kiln/job/{output}"),
        file.input.at.clone(),
    ]);
    let inputs = plan.scan(file, true)?;
    Ok(Job {
        module: module.into(),
        arch: Arch::One(Target::Hip(arch.clone())),
        kind: Kind::Hsaco,
        argv,
        output,
        cost: plan.cost(&inputs),
        inputs,
        staged: Vec::new(),
        mounts: plan.mounts(),
    })
}
