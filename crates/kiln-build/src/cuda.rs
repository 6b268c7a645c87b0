//! How one module is compiled for NVIDIA: nvcc to PTX at the floor (which
//! newer GPUs' drivers JIT-compile) and to one cubin of SASS per sm; and the
//! static library's host objects, each carrying a fatbin for every sm.

use anyhow::Result;
use kiln_pins::{Pins, Sm, Target};

use crate::{
    job::{Arch, Job, Kind},
    plan::{Plan, SourceFile},
};

/// What one nvcc call makes: for which arch, what kind, into which file.
struct Output {
    arch: Arch,
    kind: Kind,
    name: String,
}

fn nvcc_job(plan: &Plan, module: &str, out: Output, mode: &[&str], flags: &[String], file: &SourceFile, gencodes: Vec<String>) -> Result<Job> {
    let Output { arch, kind, name: output } = out;
    let mut argv = vec!["nvcc".to_string()];
    argv.extend(gencodes);
    argv.extend(mode.iter().map(|s| s.to_string()));
    argv.extend(flags.iter().cloned());
    argv.extend(["-o".into(), format!("/kiln/job/{output}"), file.input.at.clone()]);
    let inputs = plan.scan(file, false)?;
    Ok(Job { module: module.into(), arch, kind, argv, output, cost: plan.cost(&inputs), inputs, staged: Vec::new(), mounts: plan.mounts() })
}

fn gencode(virt: Sm, real: &str) -> String {
    format!("-gencode=arch={},code={real}", virt.ptx())
}

/// PTX for one virtual arch: the fallback for GPUs no cubin was built for.
pub fn ptx_job(plan: &Plan, pins: &Pins, module: &str, file: &SourceFile, level: Sm) -> Result<Job> {
    let g = vec![gencode(level, &level.ptx())];
    let out = Output { arch: Arch::One(Target::Ptx(level)), kind: Kind::Ptx, name: format!("{module}.ptx") };
    nvcc_job(plan, module, out, &["--ptx"], &pins.flags.cuda, file, g)
}

/// SASS for one sm.
pub fn cubin_job(plan: &Plan, pins: &Pins, module: &str, file: &SourceFile, sm: Sm) -> Result<Job> {
    let g = vec![gencode(sm, &sm.sass())];
    let out = Output { arch: Arch::One(Target::Sass(sm)), kind: Kind::Cubin, name: format!("{module}.cubin") };
    nvcc_job(plan, module, out, &["--cubin"], &pins.flags.cuda, file, g)
}

/// One host object of the static library, with SASS for every pinned sm.
pub fn object_job(plan: &Plan, pins: &Pins, lib: &str, file: &SourceFile) -> Result<Job> {
    let sms = &pins.targets.cuda_sass;
    let stem = file.rel.rsplit('/').next().unwrap().trim_end_matches(".cu").to_string();
    let arch = Arch::Fat(sms.clone());
    let g = sms.iter().map(|&s| gencode(s, &s.sass())).collect();
    let mut job = nvcc_job(
        plan,
        &format!("{lib}/{stem}"),
        Output { arch, kind: Kind::Object, name: format!("{stem}.o") },
        &["-c"],
        &pins.flags.cuda_staticlib,
        file,
        g,
    )?;
    job.cost *= sms.len() as u64;
    Ok(job)
}

/// The static library from its objects, named in archive order (the pinned
/// source order): each must be staged into the job folder under its name,
/// by the caller (`staged`) or by the graph (the object jobs' outputs).
/// `ar`'s D flag zeroes timestamps, uids and modes: the archive depends on content only.
pub fn archive_job(plan: &Plan, lib: &str, sms: &[Sm], members: &[String]) -> Job {
    let output = format!("lib{lib}.a");
    let mut argv = vec!["ar".to_string(), "rcsD".into(), format!("/kiln/job/{output}")];
    argv.extend(members.iter().map(|name| format!("/kiln/job/{name}")));
    Job {
        module: lib.into(),
        arch: Arch::Fat(sms.to_vec()),
        kind: Kind::Staticlib,
        argv,
        output,
        inputs: Vec::new(),
        staged: Vec::new(),
        mounts: plan.mounts(),
        cost: 1,
    }
}
