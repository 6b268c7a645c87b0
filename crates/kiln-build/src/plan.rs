//! From a [`Plan`] to the list of jobs a dist run needs: a set's modules per
//! target ([`hip`], [`cuda`]), its static library's objects or, per target,
//! its host objects, shared PTX and cubins.

use anyhow::{bail, Result};
use kiln_pins::{Pins, SassBy, Sm, Target};

/// Where a set's pinned input trees are mounted (`compile.rs`'s, named here too: `plan::INPUTS_AT`).
pub use crate::compile::INPUTS_AT;
use crate::{compile::Plan, cuda, hip, job::Job};

/// The (module, target) jobs of the set's modules that `wanted(module,
/// target)` selects: HSACO per AMD arch, PTX per level, a cubin per sm.
pub fn module_jobs(plan: &Plan, pins: &Pins, wanted: &dyn Fn(&str, &Target) -> bool) -> Result<Vec<Job>> {
    let mut jobs = Vec::new();
    let set = &plan.set;
    for module in &set.modules {
        let file = || plan.file(&set.source.module_file(module), &format!("module `{module}`"));
        for target in set.targets.all().into_iter().filter(|t| wanted(module, t)) {
            jobs.push(match target {
                Target::Hip(arch) => hip::job(plan, pins, module, &file()?, &arch)?,
                Target::Ptx(level) => cuda::ptx_job(plan, module, &file()?, level)?,
                Target::Sass(sm) => match pins.sass_by(&set.targets, sm) {
                    SassBy::Nvcc => cuda::cubin_job(plan, module, &file()?, sm)?,
                    SassBy::Ptxas { from } => cuda::ptxas_cubin_job(plan, module, &file()?, sm, from)?,
                },
            });
        }
    }
    Ok(jobs)
}

/// A per-target static library's compile jobs ([`lib_jobs`]).
pub struct LibJobs {
    /// Per host CPU, its host objects (files in archive order).
    pub objects: Vec<LibHost>,
    /// Per file and shared PTX level, the PTX its cubins of that level are
    /// assembled from ([`cuda::lib_ptx_level`]): intermediates.
    pub ptx: Vec<Job>,
    /// Per file and sm, its cubin: an artifact.
    pub cubins: Vec<LibCubin>,
}

/// One cubin of a per-target library, and the PTX job it reads, if any.
pub struct LibCubin {
    pub job: Job,
    /// Index into [`LibJobs::ptx`]: that job's output is staged into this
    /// one's folder under its own name.
    pub reads: Option<usize>,
}

/// A per-target static library's jobs for the `sms` selected: per host CPU
/// its host objects (files in archive order), per file one PTX per level
/// that a selected sm's SASS shares ([`cuda::lib_ptx_level`]), and one
/// cubin per sm.
pub fn lib_jobs(plan: &Plan, pins: &Pins, sms: &[Sm]) -> Result<LibJobs> {
    let Some(lib) = &plan.set.staticlib else { bail!("set `{}` has no static library", plan.set.name) };
    let hosts = lib_hosts(lib)?;
    let mut out = LibJobs { objects: hosts.iter().map(|&host| LibHost { host, objects: Vec::new() }).collect(), ptx: Vec::new(), cubins: Vec::new() };
    for rel in &lib.sources {
        let file = plan.file(rel, &format!("static library `{}`", lib.name))?;
        for h in &mut out.objects {
            h.objects.push(cuda::host_object_job(plan, pins, lib, &file, h.host)?);
        }
        let mut levels: Vec<(Sm, usize)> = Vec::new();
        for &sm in sms {
            let cubin = match cuda::lib_ptx_level(pins, lib, sm) {
                Some(level) => {
                    let i = match levels.iter().find(|(l, _)| *l == level) {
                        Some(&(_, i)) => i,
                        None => {
                            out.ptx.push(cuda::lib_ptx_job(plan, pins, lib, &file, level)?);
                            levels.push((level, out.ptx.len() - 1));
                            out.ptx.len() - 1
                        }
                    };
                    LibCubin { job: cuda::lib_assembled_cubin_job(plan, pins, lib, &out.ptx[i], sm)?, reads: Some(i) }
                }
                None => LibCubin { job: cuda::lib_cubin_job(plan, pins, lib, &file, sm)?, reads: None },
            };
            out.cubins.push(cubin);
        }
    }
    Ok(out)
}

/// One host CPU's objects of a per-target static library.
pub struct LibHost {
    pub host: &'static kiln_target::host_object::Host,
    pub objects: Vec<Job>,
}

/// The host CPUs a static library's host code is built for (its `hosts`), as kiln-target's rows.
pub fn lib_hosts(lib: &kiln_pins::StaticLib) -> Result<Vec<&'static kiln_target::host_object::Host>> {
    lib.hosts
        .iter()
        .map(|cpu| {
            kiln_target::host_object::host(cpu).ok_or_else(|| anyhow::anyhow!("static library `{}`: no host CPU `{cpu}` in kiln-target", lib.name))
        })
        .collect()
}

/// The static library's object jobs, in the pinned source order, for the
/// library's pinned targets narrowed to `sass` and `ptx`.
pub fn object_jobs(plan: &Plan, sass: &[Sm], ptx: &[Sm]) -> Result<Vec<Job>> {
    let Some(lib) = &plan.set.staticlib else { bail!("set `{}` has no static library", plan.set.name) };
    lib.sources
        .iter()
        .map(|rel| {
            let file = plan.file(rel, &format!("static library `{}`", lib.name))?;
            cuda::object_job(plan, &lib.name, &file, sass, ptx)
        })
        .collect()
}
