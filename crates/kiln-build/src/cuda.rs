//! How one module is compiled for NVIDIA: nvcc to PTX at the floor (which
//! newer GPUs' drivers JIT-compile) and to one cubin of SASS per sm; and the
//! static library's host objects, each carrying a fatbin for every sm.

use anyhow::Result;
use kiln_manifest::Kind;
use kiln_pins::{Sm, Target};
use kiln_toolchain::sysroot::JOB_DIR;

use crate::{
    job::{Arch, Job, JobKind},
    plan::{Output, Plan, SourceFile},
};

fn nvcc_job(plan: &Plan, module: &str, out: Output, mode: &[&str], flags: &[String], file: &SourceFile, gencodes: Vec<String>) -> Result<Job> {
    let mut argv = vec!["nvcc".to_string()];
    argv.extend(gencodes);
    argv.extend(mode.iter().map(|s| s.to_string()));
    argv.extend(flags.iter().cloned());
    argv.extend(plan.include_flags());
    plan.compile_job(module, out, argv, file, false)
}

fn gencode(virt: Sm, real: &str) -> String {
    format!("-gencode=arch={},code={real}", virt.ptx())
}

/// PTX for one virtual arch: the fallback for GPUs no cubin was built for.
pub fn ptx_job(plan: &Plan, module: &str, file: &SourceFile, level: Sm) -> Result<Job> {
    let g = vec![gencode(level, &level.ptx())];
    let out = Output { arch: Arch::One(Target::Ptx(level)), kind: JobKind::Artifact(Kind::Ptx), name: format!("{module}.ptx") };
    nvcc_job(plan, module, out, &["--ptx"], &plan.set.flags.cuda, file, g)
}

/// SASS for one sm.
pub fn cubin_job(plan: &Plan, module: &str, file: &SourceFile, sm: Sm) -> Result<Job> {
    let g = vec![gencode(sm, &sm.sass())];
    let out = Output { arch: Arch::One(Target::Sass(sm)), kind: JobKind::Artifact(Kind::Cubin), name: format!("{module}.cubin") };
    nvcc_job(plan, module, out, &["--cubin"], &plan.set.flags.cuda, file, g)
}

/// SASS for an sm the pinned nvcc cannot target (Blackwell): in one sandboxed
/// run, nvcc compiles the module to PTX at `from` and the pinned newer ptxas
/// (staged into the job folder) assembles that PTX for the sm. nvcc itself
/// does exactly these two steps for `-gencode arch=compute_<from>,code=sm_<sm>`
/// (checked with 12.4: its sm_89 cubin equals `ptxas -arch=sm_89 -m64` of its
/// compute_89 PTX, byte for byte). The PTX step repeats the `from` PTX job's
/// compile rather than waiting for it, which keeps every job independent.
pub fn ptxas_cubin_job(plan: &Plan, module: &str, file: &SourceFile, sm: Sm, from: Sm) -> Result<Job> {
    let Some(ptxas) = &plan.ptxas else {
        anyhow::bail!("{} needs the pinned ptxas ([toolchain].ptxas), which this plan was not given", sm.sass());
    };
    let ptx = format!("{JOB_DIR}/{module}.ptx");
    let mut nvcc = vec!["nvcc".to_string(), gencode(from, &from.ptx()), "--ptx".into()];
    nvcc.extend(plan.set.flags.cuda.iter().cloned());
    nvcc.extend(plan.include_flags());
    nvcc.extend(["-o".into(), ptx.clone(), file.input.at.clone()]);
    let output = format!("{module}.cubin");
    let assemble =
        vec![format!("{JOB_DIR}/{PTXAS}"), format!("-arch={}", sm.sass()), "-m64".into(), "-o".into(), format!("{JOB_DIR}/{output}"), ptx.clone()];
    let script = format!("set -e; {}; {}; rm {}", shell_words(&nvcc), shell_words(&assemble), shell_quote(&ptx));
    let inputs = plan.scan(file, false)?;
    Ok(Job {
        set: plan.set.name.clone(),
        module: module.into(),
        arch: Arch::One(Target::Sass(sm)),
        kind: JobKind::Artifact(Kind::Cubin),
        argv: vec!["sh".into(), "-c".into(), script],
        output,
        cost: plan.cost(&inputs) * 2,
        inputs,
        staged: vec![(PTXAS.into(), ptxas.path.clone())],
        mounts: plan.mounts(),
    })
}

/// The name the pinned ptxas is staged under in a job folder.
const PTXAS: &str = "ptxas";

fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_=./+,:".contains(&b)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn shell_words(argv: &[String]) -> String {
    argv.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" ")
}

/// One host object of the static library: a fatbin with SASS for each of
/// `sass` and PTX for each of `ptx` (the library's pinned targets, or a
/// selection of them).
pub fn object_job(plan: &Plan, lib: &str, file: &SourceFile, sass: &[Sm], ptx: &[Sm]) -> Result<Job> {
    let stem = file.rel.rsplit('/').next().unwrap().trim_end_matches(".cu").to_string();
    let arch = Arch::Fat { sass: sass.to_vec(), ptx: ptx.to_vec() };
    let g = sass.iter().map(|&s| gencode(s, &s.sass())).chain(ptx.iter().map(|&l| gencode(l, &l.ptx()))).collect();
    let forced: Vec<_> = plan.set.staticlib.iter().flat_map(|l| &l.force_include).map(|h| plan.cuda_header(h)).collect::<Result<_>>()?;
    let mut flags = plan.set.flags.cuda_staticlib.clone();
    for f in &forced {
        flags.extend(["-include".to_string(), f.at.clone()]);
    }
    let mut job =
        nvcc_job(plan, &format!("{lib}/{stem}"), Output { arch, kind: JobKind::Object, name: format!("{stem}.o") }, &["-c"], &flags, file, g)?;
    job.inputs = plan.scan_forced(file, &forced)?;
    job.cost = plan.cost(&job.inputs) * (sass.len() + ptx.len()) as u64;
    Ok(job)
}

/// The static library from its objects, named in archive order (the pinned
/// source order): each must be staged into the job folder under its name,
/// by the caller (`staged`) or by the graph (the object jobs' outputs).
/// `ar`'s D flag zeroes timestamps, uids and modes: the archive depends on content only.
pub fn archive_job(plan: &Plan, lib: &str, sass: &[Sm], ptx: &[Sm], members: &[String]) -> Job {
    let output = format!("lib{lib}.a");
    let mut argv = vec!["ar".to_string(), "rcsD".into(), format!("{JOB_DIR}/{output}")];
    argv.extend(members.iter().map(|name| format!("{JOB_DIR}/{name}")));
    Job {
        set: plan.set.name.clone(),
        module: lib.into(),
        arch: Arch::Fat { sass: sass.to_vec(), ptx: ptx.to_vec() },
        kind: JobKind::Artifact(Kind::Staticlib),
        argv,
        output,
        inputs: Vec::new(),
        staged: Vec::new(),
        mounts: plan.mounts(),
        cost: 1,
    }
}
