//! One kernel set's compiles: [`Plan`] (its trees as the sandbox mounts them,
//! its `-I` roots, the set itself) and [`Plan::compile_job`], the job of one
//! compiler call on one source file, which `hip.rs` and `cuda.rs` build their
//! commands on. Which jobs a set needs is `plan.rs`'s.

use std::path::PathBuf;

use anyhow::{bail, Result};
use kiln_pins::{IncludeRoot, KernelSet};
use kiln_toolchain::{
    sysroot::{HIP_DIR, JOB_DIR, KERNELS_DIR, SRC_DIR},
    Mount,
};

use crate::{
    job::{Arch, Job, JobKind},
    scan::{self, Input, Tree},
};

/// What one compiler call makes: for which arch, what kind, into which file
/// (in the job's folder).
pub struct Output {
    pub arch: Arch,
    pub kind: JobKind,
    pub name: String,
}

/// One kernel set's build: its trees (sources at `/kiln/src`, kiln's HIP
/// shims at `/kiln/hip`, kiln's CUDA headers at `/kiln/kernels`, pinned input
/// trees at `/tmp/kiln-inc/<name>`), its `-I` roots, and the set itself (its
/// modules, static library, targets and flags).
pub struct Plan {
    pub set: KernelSet,
    pub src: Tree,
    pub shims: Tree,
    /// What the sources are, for messages ("candle-kernels 0.11.1").
    pub src_name: String,
    /// The pinned newer ptxas, for sms the pinned nvcc cannot target.
    pub ptxas: Option<kiln_toolchain::wheel::Tool>,
    /// kiln's CUDA headers (`kernels/cuda`, at `/kiln/kernels`), for the
    /// static library's forced includes.
    pub cuda_headers: Option<Tree>,
    /// The set's pinned input trees, mounted.
    pub inputs: Vec<Tree>,
    /// The set's `-I` roots, in order (inside the sources, or input trees).
    pub search: Vec<Tree>,
    /// The pinned cross compilers' roots, for host code of other CPUs.
    pub cross: Vec<kiln_toolchain::sysroot::CrossRoot>,
}

/// Where a set's pinned input trees are mounted. Under the sandbox's `/tmp`
/// (a fresh tmpfs in every run) because bubblewrap can only make mount points
/// in a writable folder, and the sysroot's `/kiln` is read-only: new mount
/// points there would change every provisioned sysroot and the builder image.
pub const INPUTS_AT: &str = "/tmp/kiln-inc";

/// A source file of the kernel tree.
#[derive(Clone, Debug)]
pub struct SourceFile {
    /// Relative to the tree root, e.g. `src/affine.cu`.
    pub rel: String,
    pub input: Input,
}

impl Plan {
    /// The plan of `set`, whose sources are at `src_root`.
    pub fn new(set: &KernelSet, src_root: PathBuf, shims: PathBuf) -> Plan {
        Plan {
            set: set.clone(),
            src: Tree { host: src_root, at: SRC_DIR.into() },
            shims: Tree { host: shims, at: HIP_DIR.into() },
            src_name: set.source.describe(),
            ptxas: None,
            cuda_headers: None,
            inputs: Vec::new(),
            search: Vec::new(),
            cross: Vec::new(),
        }
    }

    /// The plan with the pinned cross compilers' roots.
    pub fn with_cross(mut self, cross: Vec<kiln_toolchain::sysroot::CrossRoot>) -> Plan {
        self.cross = cross;
        self
    }

    /// The cross compiler's root for host CPU `cpu`, or an error naming what provides it.
    pub fn cross_root(&self, cpu: &str) -> Result<&kiln_toolchain::sysroot::CrossRoot> {
        match self.cross.iter().find(|c| c.cpu == cpu) {
            Some(c) => Ok(c),
            None => bail!("host code for {cpu} needs the pinned cross compiler ([toolchain.cross.{cpu}]), which this plan was not given"),
        }
    }

    /// The plan with kiln's CUDA headers folder (the repository's `kernels/cuda`).
    pub fn with_cuda_headers(mut self, host: PathBuf) -> Plan {
        self.cuda_headers = Some(Tree { host, at: KERNELS_DIR.into() });
        self
    }

    /// The plan with the set's include roots, `inputs` giving each pinned
    /// input's unpacked folder by name: a root that is not a folder, or an
    /// input not given, is an error naming the set.
    pub fn with_includes(mut self, inputs: &[(String, PathBuf)]) -> Result<Plan> {
        let set = &self.set.name;
        for (name, host) in inputs {
            if !host.is_dir() {
                bail!("set `{set}`: input `{name}` is not a folder: {}", host.display());
            }
            self.inputs.push(Tree { host: host.clone(), at: format!("{INPUTS_AT}/{name}") });
        }
        for root in &self.set.include {
            let tree = match root {
                IncludeRoot::Source(rel) => {
                    let host = self.src.host.join(rel);
                    if !host.is_dir() {
                        bail!("set `{set}`: include root `{rel}` is not a folder of {} ({})", self.src_name, host.display());
                    }
                    Tree { host, at: format!("{}/{rel}", self.src.at) }
                }
                IncludeRoot::Input(name) => match self.inputs.iter().find(|t| t.at == format!("{INPUTS_AT}/{name}")) {
                    Some(t) => t.clone(),
                    None => bail!("set `{set}`: include root `input:{name}` names an input this plan was not given"),
                },
            };
            self.search.push(tree);
        }
        Ok(self)
    }

    /// `-I` flags for the set's include roots.
    pub fn include_flags(&self) -> Vec<String> {
        self.search.iter().map(|t| format!("-I{}", t.at)).collect()
    }

    /// `header` of kiln's CUDA headers as a forced include, or an error saying
    /// the plan lacks them.
    pub fn cuda_header(&self, header: &str) -> Result<Input> {
        let Some(tree) = &self.cuda_headers else { bail!("the plan has no CUDA headers folder (kernels/cuda) for {header}") };
        let host = tree.host.join(header);
        if !host.is_file() {
            bail!("set `{}`: kiln's CUDA headers at {} lack {header}", self.set.name, tree.host.display());
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
            bail!("set `{}`, {what}: {} has no {rel}", self.set.name, self.src_name);
        }
        Ok(SourceFile { rel: rel.into(), input: Input { at: format!("{}/{rel}", self.src.at), host } })
    }

    /// The sources, the HIP shims and the input trees: what module jobs read.
    fn trees(&self) -> Vec<Tree> {
        [self.src.clone(), self.shims.clone()].into_iter().chain(self.inputs.iter().cloned()).collect()
    }

    /// Every tree, kiln's CUDA headers too.
    fn all_trees(&self) -> Vec<Tree> {
        self.trees().into_iter().chain(self.cuda_headers.clone()).collect()
    }

    /// Every tree file that compiling `file` reads; `hip` adds the shims.
    pub fn scan(&self, file: &SourceFile, hip: bool) -> Result<Vec<Input>> {
        let trees = self.trees();
        if hip {
            let mut forced = Vec::new();
            for header in &self.set.flags.hip_force_include {
                let host = self.shims.host.join(header);
                if !host.is_file() {
                    bail!("the HIP shims at {} lack {header}", self.shims.host.display());
                }
                forced.push(Input { at: format!("{}/{header}", self.shims.at), host });
            }
            let search: Vec<Tree> = std::iter::once(self.shims.clone()).chain(self.search.iter().cloned()).collect();
            scan::inputs(&trees, &file.input, &forced, &search)
        } else {
            scan::inputs(&trees, &file.input, &[], &self.search)
        }
    }

    /// Every tree file that compiling `file` with `forced` includes reads (CUDA).
    pub fn scan_forced(&self, file: &SourceFile, forced: &[Input]) -> Result<Vec<Input>> {
        scan::inputs(&self.all_trees(), &file.input, forced, &self.search)
    }

    /// Bytes of source read: a fair guess at how long a compile takes.
    /// The job that runs `argv` (the compiler and its flags) on `file` into
    /// `out`: `-o` and the source are appended, its inputs scanned (with the
    /// HIP shims for `hip`), its cost and mounts this plan's.
    pub fn compile_job(&self, module: &str, out: Output, mut argv: Vec<String>, file: &SourceFile, hip: bool) -> Result<Job> {
        let Output { arch, kind, name: output } = out;
        argv.extend(["-o".into(), format!("{JOB_DIR}/{output}"), file.input.at.clone()]);
        let inputs = self.scan(file, hip)?;
        Ok(Job {
            set: self.set.name.clone(),
            module: module.into(),
            arch,
            kind,
            argv,
            output,
            cost: self.cost(&inputs),
            inputs,
            staged: Vec::new(),
            mounts: self.mounts(),
        })
    }

    pub fn cost(&self, inputs: &[Input]) -> u64 {
        inputs.iter().map(|i| std::fs::metadata(&i.host).map_or(0, |m| m.len())).sum()
    }

    pub fn mounts(&self) -> Vec<Mount> {
        self.all_trees().into_iter().map(|t| Mount { host: t.host, at: t.at, writable: false }).collect()
    }
}
