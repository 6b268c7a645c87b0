//! From pins and source trees to the list of jobs a dist run needs.

use std::path::PathBuf;

use anyhow::{bail, Result};
use kiln_pins::{Pins, Target};
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
        Plan { src: Tree { host: src_root, at: "/kiln/src" }, shims: Tree { host: shims, at: "/kiln/hip" }, src_name }
    }

    pub fn file(&self, rel: &str, what: &str) -> Result<SourceFile> {
        let host = self.src.host.join(rel);
        if !host.is_file() {
            bail!("{what}: {} has no {rel}", self.src_name);
        }
        Ok(SourceFile { rel: rel.into(), input: Input { at: format!("{}/{rel}", self.src.at), host } })
    }

    fn trees(&self) -> [Tree; 2] {
        [self.src.clone(), self.shims.clone()]
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

    /// Bytes of source read: a fair guess at how long a compile takes.
    pub fn cost(&self, inputs: &[Input]) -> u64 {
        inputs.iter().map(|i| std::fs::metadata(&i.host).map_or(0, |m| m.len())).sum()
    }

    pub fn mounts(&self) -> Vec<Mount> {
        vec![
            Mount { host: self.src.host.clone(), at: self.src.at, writable: false },
            Mount { host: self.shims.host.clone(), at: self.shims.at, writable: false },
        ]
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
                Target::Sass(sm) => cuda::cubin_job(plan, pins, module, &file()?, sm)?,
            });
        }
    }
    Ok(jobs)
}

/// The static library's object jobs, in the pinned source order.
pub fn object_jobs(plan: &Plan, pins: &Pins) -> Result<Vec<Job>> {
    let lib = &pins.candle.staticlib;
    lib.sources
        .iter()
        .map(|rel| {
            let file = plan.file(rel, &format!("static library `{}` (pins.toml candle.staticlib)", lib.name))?;
            cuda::object_job(plan, pins, &lib.name, &file)
        })
        .collect()
}
