//! From pins and source trees to the list of jobs a dist run needs.

use std::path::PathBuf;

use anyhow::{bail, Result};
use kiln_pins::{Pins, SassBy, Sm, Target};
use kiln_toolchain::Mount;

use crate::{
    cuda, hip,
    job::Job,
    scan::{self, Input, Tree},
};

/// The trees a build reads: kernel sources (mounted at `/kiln/src`) and
/// kiln's HIP shims (at `/kiln/hip`).
pub struct Plan {
    pub src: Tree,
    pub shims: Tree,
    /// What the sources are, for messages ("candle-kernels 0.11.1").
    pub src_name: String,
    /// The pinned newer ptxas, for sms the pinned nvcc cannot target.
    pub ptxas: Option<kiln_toolchain::wheel::Tool>,
    /// kiln's CUDA headers (`kernels/cuda`, at `/kiln/kernels`), force-included
    /// into the static library's objects.
    pub cuda_headers: Option<Tree>,
}

/// A source file of the kernel tree.
#[derive(Clone, Debug)]
pub struct SourceFile {
    /// Relative to the tree root, e.g. `src/affine.cu`.
    pub rel: String,
    pub input: Input,
}

impl Plan {
    pub fn new(src_root: PathBuf, src_name: String, shims: PathBuf) -> Plan {
        Plan {
            src: Tree { host: src_root, at: "/kiln/src" },
            shims: Tree { host: shims, at: "/kiln/hip" },
            src_name,
            ptxas: None,
            cuda_headers: None,
        }
    }

    /// The plan with kiln's CUDA headers folder (the repository's `kernels/cuda`).
    pub fn with_cuda_headers(mut self, host: PathBuf) -> Plan {
        self.cuda_headers = Some(Tree { host, at: "/kiln/kernels" });
        self
    }

    /// `header` of kiln's CUDA headers as a forced include, or an error saying
    /// the plan lacks them.
    pub fn cuda_header(&self, header: &str) -> Result<Input> {
        let Some(tree) = &self.cuda_headers else { bail!("the plan has no CUDA headers folder (kernels/cuda) for {header}") };
        let host = tree.host.join(header);
        if !host.is_file() {
            bail!("kiln's CUDA headers at {} lack {header}", tree.host.display());
        }
        Ok(Input { at: format!("{}/{header}", tree.at), host })
    }

    /// The plan with the pinned newer ptxas (kiln_toolchain::wheel::tool).
    pub fn with_ptxas(mut self, ptxas: kiln_toolchain::wheel::Tool) -> Plan {
        self.ptxas = Some(ptxas);
        self
    }

    pub fn file(&self, rel: &str, what: &str) -> Result<SourceFile> {
        let host = self.src.host.join(rel);
        if !host.is_file() {
            bail!("{what}: {} has no {rel}", self.src_name);
        }
        Ok(SourceFile { rel: rel.into(), input: Input { at: format!("{}/{rel}", self.src.at), host } })
    }

    /// The sources and the HIP shims: what module jobs read.
    fn trees(&self) -> [Tree; 2] {
        [self.src.clone(), self.shims.clone()]
    }

    /// Every tree, kiln's CUDA headers too.
    fn all_trees(&self) -> Vec<Tree> {
        self.trees().into_iter().chain(self.cuda_headers.clone()).collect()
    }

    /// Every tree file that compiling `file` reads; `hip` adds the shims.
    pub fn scan(&self, file: &SourceFile, hip: bool) -> Result<Vec<Input>> {
        let trees = self.trees();
        if hip {
            let forced = self.shims.host.join(hip::FORCED_INCLUDE);
            if !forced.is_file() {
                bail!("the HIP shims at {} lack {}", self.shims.host.display(), hip::FORCED_INCLUDE);
            }
            let forced = Input { at: format!("{}/{}", self.shims.at, hip::FORCED_INCLUDE), host: forced };
            scan::inputs(&trees, &file.input, &[forced], &trees[1..])
        } else {
            scan::inputs(&trees, &file.input, &[], &[])
        }
    }

    /// Every tree file that compiling `file` with `forced` includes reads (CUDA).
    pub fn scan_forced(&self, file: &SourceFile, forced: &[Input]) -> Result<Vec<Input>> {
        scan::inputs(&self.all_trees(), &file.input, forced, &[])
    }

    /// Bytes of source read: a fair guess at how long a compile takes.
    pub fn cost(&self, inputs: &[Input]) -> u64 {
        inputs.iter().map(|i| std::fs::metadata(&i.host).map_or(0, |m| m.len())).sum()
    }

    pub fn mounts(&self) -> Vec<Mount> {
        self.all_trees().into_iter().map(|t| Mount { host: t.host, at: t.at, writable: false }).collect()
    }
}

/// The (module, target) jobs of the pinned modules that `wanted(module,
/// target)` selects: HSACO per AMD arch, PTX per level, a cubin per sm.
pub fn module_jobs(plan: &Plan, pins: &Pins, wanted: &dyn Fn(&str, &Target) -> bool) -> Result<Vec<Job>> {
    let mut jobs = Vec::new();
    for module in &pins.candle.modules {
        let file = || plan.file(&format!("src/{module}.cu"), &format!("module `{module}` (pins.toml candle.modules)"));
        for target in pins.targets.all().into_iter().filter(|t| wanted(module, t)) {
            jobs.push(match target {
                Target::Hip(arch) => hip::job(plan, pins, module, &file()?, &arch)?,
                Target::Ptx(level) => cuda::ptx_job(plan, pins, module, &file()?, level)?,
                Target::Sass(sm) => match pins.sass_by(sm) {
                    SassBy::Nvcc => cuda::cubin_job(plan, pins, module, &file()?, sm)?,
                    SassBy::Ptxas { from } => cuda::ptxas_cubin_job(plan, pins, module, &file()?, sm, from)?,
                },
            });
        }
    }
    Ok(jobs)
}

/// The static library's object jobs, in the pinned source order, for the
/// library's pinned targets narrowed to `sass` and `ptx`.
pub fn object_jobs(plan: &Plan, pins: &Pins, sass: &[Sm], ptx: &[Sm]) -> Result<Vec<Job>> {
    let lib = &pins.candle.staticlib;
    lib.sources
        .iter()
        .map(|rel| {
            let file = plan.file(rel, &format!("static library `{}` (pins.toml candle.staticlib)", lib.name))?;
            cuda::object_job(plan, pins, &lib.name, &file, sass, ptx)
        })
        .collect()
}
