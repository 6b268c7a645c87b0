//! Reads every compiler output back before it is published: the file is for
//! the arch it claims, holds the kernels it should, and every module exports
//! the same kernels on every target. This is all the checking AMD artifacts
//! get on machines without AMD GPUs.

use std::{
    fs,
    path::{Path, PathBuf},
};

use crate::set_manifest::SetManifest;
use anyhow::{bail, Context, Result};
use kiln_build::{Arch, Built, Failed, Job, JobKind, Node};
use kiln_manifest::{Artifact, Backend, Geometry, KernelResources, Kind, Manifest, Toolchain};
use kiln_pins::{HipArch, KernelSet, Pins, SassBy, Sm, Target, Targets};
use kiln_validate::{
    ar,
    compare::{KernelSets, Rule},
    cubin, hsaco, ptx,
};

/// An artifact and the cached file that holds its bytes.
pub struct Collected {
    pub artifact: Artifact,
    pub file: PathBuf,
}

/// The built outputs in node order, or one error that lists every failure
/// (and, briefly, what was not run because of one).
pub fn successes(nodes: &[Node], results: Vec<Result<Built, Failed>>) -> Result<Vec<Built>> {
    let mut ok = Vec::new();
    let mut failed = Vec::new();
    let mut not_run = Vec::new();
    for r in results {
        match r {
            Ok(b) => ok.push(b),
            Err(f) if f.skipped() => not_run.push(f.job),
            Err(f) => failed.push(f),
        }
    }
    if !failed.is_empty() {
        let list: Vec<String> = failed.iter().map(|f| f.to_string()).collect();
        let mut text = format!("{} of {} jobs failed; nothing was written to the dist folder:\n{}", failed.len(), nodes.len(), list.join("\n"));
        if !not_run.is_empty() {
            text.push_str(&format!("\nnot run, as they read a failed job's output: {}", not_run.join(", ")));
        }
        bail!(text);
    }
    Ok(ok)
}

/// Where an artifact goes in the dist folder (and the manifest's `path`).
pub fn dist_path(job: &Job) -> String {
    match job.kind {
        JobKind::Artifact(Kind::Hsaco) => format!("hip/{}/{}.hsaco", job.arch, job.module),
        JobKind::Artifact(Kind::Ptx) => format!("cuda/{}/{}.ptx", job.arch, job.module),
        JobKind::Artifact(Kind::Cubin) => format!("cuda/{}/{}.cubin", job.arch, job.module),
        JobKind::Artifact(Kind::Staticlib) => format!("cuda/lib/{}{}", host_folder(&job.arch), job.output),
        JobKind::Artifact(Kind::Bundle) => bundle_path(&job.module),
        JobKind::Object | JobKind::LibPtx => unreachable!("{job}: objects and library PTX are intermediate"),
    }
}

/// How the lock names a static-library object (`cuda/lib/<lib>/<stem>.o`):
/// not a dist file, but what the library is archived from.
pub fn object_path(job: &Job) -> String {
    debug_assert!(job.kind == JobKind::Object, "{job}: not an object");
    format!("cuda/lib/{}{}.o", host_folder(&job.arch), job.module)
}

/// The folder below `cuda/lib/` of a static library's host code for a CPU
/// other than the toolchain's own (`aarch64/`); none for the toolchain's own,
/// whose paths are those of every earlier dist.
fn host_folder(arch: &Arch) -> String {
    match arch {
        Arch::Host(h) if *h != kiln_manifest::kiln_target::host_object::BUILD_HOST => format!("{}/", h.cpu),
        _ => String::new(),
    }
}

/// Where a module's HIP bundle goes.
pub fn bundle_path(module: &str) -> String {
    format!("hip/bundle/{module}.hipfb")
}

/// The artifact a job wrote: its kind is the job's.
fn base(job: &Job, bytes: &[u8], kernels: Vec<String>) -> Artifact {
    let JobKind::Artifact(kind) = job.kind else { unreachable!("{job}: objects are intermediate") };
    Artifact {
        module: job.module.clone(),
        backend: job.arch.backend(),
        arch: job.arch.to_string(),
        kind,
        path: dist_path(job),
        size: bytes.len() as u64,
        sha256: kiln_manifest::sha256_hex(bytes),
        kernels,
        ptx_version: None,
        resources: Vec::new(),
        geometry: None,
    }
}

/// Validates each module output (built for `targets`) and describes it for the manifest.
pub fn artifacts(targets: &Targets, built: &[(Job, Built)]) -> Result<Vec<Collected>> {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for (job, b) in built {
        let bytes = fs::read(&b.path).with_context(|| format!("cannot read {}", b.path.display()))?;
        match describe(targets, job, &bytes) {
            Ok(artifact) => out.push(Collected { artifact, file: b.path.clone() }),
            Err(e) => problems.push(format!("{job} ({}): {e:#}\n  file: {}", dist_path(job), b.path.display())),
        }
    }
    if !problems.is_empty() {
        bail!("{} artifact(s) failed validation:\n{}", problems.len(), problems.join("\n"));
    }
    Ok(out)
}

fn describe(targets: &Targets, job: &Job, bytes: &[u8]) -> Result<Artifact> {
    Ok(match (job.kind, job.target()) {
        (JobKind::Artifact(Kind::Hsaco), Some(Target::Hip(arch))) => {
            let h = hsaco::check(bytes, arch.as_str(), arch.mach(), targets.code_object_version_for(arch))?;
            let mut a = base(job, bytes, h.kernel_names());
            a.geometry = Some(geometry(arch, &h.kernels)?);
            a.resources = h.kernels;
            a
        }
        (JobKind::Artifact(Kind::Ptx), Some(Target::Ptx(sm))) => {
            let text = std::str::from_utf8(bytes).context("PTX is not UTF-8 text")?;
            let p = ptx::check(text, sm.0)?;
            let mut a = base(job, bytes, p.entries);
            a.ptx_version = Some(p.version);
            a
        }
        // A static library's file may hold only host code; a module must hold kernels.
        (JobKind::Artifact(Kind::Cubin), Some(Target::Sass(sm))) if kiln_manifest::library_file(&job.module).is_some() => {
            base(job, bytes, cubin::check_sm(bytes, sm.0)?.kernels)
        }
        (JobKind::Artifact(Kind::Cubin), Some(Target::Sass(sm))) => {
            let c = cubin::check(bytes, sm.0)?;
            base(job, bytes, c.kernels)
        }
        _ => unreachable!("{job}: not a module's job"),
    })
}

/// The launch geometry a code object for `arch` was compiled for (kiln-target's
/// row: the defines kiln-build put on its compile line, the wave size), checked
/// against the wave size every kernel's metadata declares.
pub fn geometry(arch: &HipArch, kernels: &[KernelResources]) -> Result<Geometry> {
    let row = arch.row();
    let wave = row.wavefront_size();
    if let Some(k) = kernels.iter().find(|k| k.wavefront_size != u64::from(wave)) {
        bail!("kernel {} is compiled for {}-lane waves, but {arch} code objects must be wave{wave} (kiln-target); was -mwavefrontsize64 or -mno-wavefrontsize64 passed?", k.name, k.wavefront_size);
    }
    Ok(Geometry {
        cuda_arch: kiln_build::hip::EMULATED_CUDA_ARCH * 10,
        defines: row.geometry_defines().into_iter().map(String::from).collect(),
        wavefront_size: wave,
    })
}

/// Checks a set's static library (the archive job's output): SASS for every
/// sm in every object, and every function the set's `ffi` file (in its
/// sources at `src_root`) declares.
pub fn staticlib(set: &KernelSet, src_root: &Path, job: &Job, built: &Built) -> Result<Collected> {
    let lib = &job.module;
    let bytes = fs::read(&built.path).with_context(|| format!("cannot read {}", built.path.display()))?;
    let required = match set.staticlib.as_ref().and_then(|l| l.ffi.as_ref()) {
        Some(ffi) => {
            let decl = src_root.join(ffi);
            let rust = fs::read_to_string(&decl).with_context(|| format!("set `{}`: cannot read {}", set.name, decl.display()))?;
            let required = ar::extern_fns(&rust);
            if required.is_empty() {
                bail!("set `{}`: {} declares no extern \"C\" functions: has the source's ffi module moved?", set.name, decl.display());
            }
            required
        }
        None => Vec::new(),
    };
    let a = match &job.arch {
        Arch::Fat { sass, ptx } => {
            let levels: Vec<u32> = sass.iter().map(|s| s.0).collect();
            let ptx: Vec<u32> = ptx.iter().map(|l| l.0).collect();
            ar::check(&bytes, &levels, &ptx, &required)
        }
        Arch::Host(h) => ar::check_host(&bytes, lib, &required, h),
        Arch::One(_) => unreachable!("{job}: not the static library"),
    };
    let a = a.with_context(|| format!("set `{}`: static library lib{lib}.a ({}) failed validation", set.name, job.arch))?;
    // The C ABI surface: what a consumer can call (C++ symbols are internal).
    let exported: Vec<String> = a.functions().into_iter().filter(|f| !f.starts_with("_Z")).collect();
    let artifact = base(job, &bytes, exported);
    Ok(Collected { artifact, file: built.path.clone() })
}

/// Every module must export the same kernels on every target, as upstream's
/// own arch gates decide them:
/// - AMD targets exactly the kernels of the PTX level the HIP shims emulate
///   (`__CUDA_ARCH__` [`kiln_build::hip::EMULATED_CUDA_ARCH`]), and every
///   kernel of every CUDA target (PTX or SASS) at or below that level, sm_89's
///   included, whichever of them this run built: parity, with no exceptions;
/// - NVIDIA targets at least the floor PTX's, and a newer arch never fewer
///   than an older one (candle gates bf16 kernels on 800, fp8 on 890);
/// - SASS assembled by the newer ptxas exactly the kernels of the PTX it came from.
pub fn compare_kernel_sets(pins: &Pins, set: &KernelSet, collected: &[Collected]) -> Result<()> {
    let mut problems = Vec::new();
    let targets = &set.targets;
    let mut ascending: Vec<(u32, String)> = targets.cuda_ptx.iter().map(|s| (s.0, s.ptx())).collect();
    ascending.extend(targets.cuda_sass.iter().map(|s| (s.0, s.sass())));
    ascending.sort();
    let ascending: Vec<String> = ascending.into_iter().map(|(_, t)| t).collect();
    let emulated = Sm(kiln_build::hip::EMULATED_CUDA_ARCH).ptx();
    for module in &set.modules {
        let of = |arch: &str| collected.iter().find(|c| &c.artifact.module == module && c.artifact.arch == arch);
        let (mut amd, mut cuda) = (KernelSets::default(), KernelSets::default());
        let (mut first_amd, mut first_cuda) = (None, None);
        for c in collected.iter().filter(|c| &c.artifact.module == module) {
            let (sets, first) = if c.artifact.backend == Backend::Hip { (&mut amd, &mut first_amd) } else { (&mut cuda, &mut first_cuda) };
            sets.add(&c.artifact.arch, &c.artifact.kernels);
            first.get_or_insert(c.artifact.arch.clone());
        }
        if let Some(first) = first_amd {
            // Against the emulated level's PTX where this run built it, else against each other.
            let reference = match of(&emulated) {
                Some(c) => {
                    amd.add(&emulated, &c.artifact.kernels);
                    emulated.clone()
                }
                None => first,
            };
            problems.extend(amd.differences(&reference, |_| Rule::Equal).into_iter().map(|d| format!("set `{}`, module {module}: {d}", set.name)));
            problems.extend(parity_gaps(module, collected).into_iter().map(|d| format!("set `{}`, module {module}: {d} (kernel parity)", set.name)));
        }
        if let Some(first) = first_cuda {
            let floor = targets.cuda_ptx.first().map(|l| l.ptx());
            let reference = floor.filter(|f| of(f).is_some()).unwrap_or(first);
            for d in cuda.differences(&reference, |_| Rule::Superset).into_iter().chain(cuda.monotonic(&ascending)) {
                problems.push(format!("set `{}`, module {module}: {d}", set.name));
            }
            for &sm in &targets.cuda_sass {
                let SassBy::Ptxas { from } = pins.sass_by(targets, sm) else { continue };
                if let (Some(c), Some(p)) = (of(&sm.sass()), of(&from.ptx())) {
                    problems.extend(
                        exactly((&from.ptx(), &p.artifact.kernels), (&sm.sass(), &c.artifact.kernels))
                            .into_iter()
                            .map(|d| format!("set `{}`, module {module}: {d} (assembled from it by ptxas)", set.name)),
                    );
                }
            }
        }
    }
    problems.extend(library_kernel_gaps(pins, set, collected));
    if !problems.is_empty() {
        bail!("kernels differ between targets (a kernel missing on one arch would fail only on that GPU):\n  {}", problems.join("\n  "));
    }
    Ok(())
}

/// How `target`'s kernels differ from `reference`'s, which it must have
/// exactly (each a target's name and its kernels): one line per difference.
fn exactly(reference: (&str, &[String]), target: (&str, &[String])) -> Vec<String> {
    let mut pair = KernelSets::default();
    pair.add(reference.0, reference.1);
    pair.add(target.0, target.1);
    pair.differences(reference.0, |_| Rule::Equal)
}

/// A per-target static library's cubins, file by file: a newer sm never has
/// fewer kernels than an older one (upstream gates bf16 WMMA on sm_80), and
/// SASS assembled by the newer ptxas exactly the kernels of the nvcc-built
/// SASS of the level it came from (both are that level's device compile).
fn library_kernel_gaps(pins: &Pins, set: &KernelSet, collected: &[Collected]) -> Vec<String> {
    let Some(lib) = set.staticlib.as_ref().filter(|l| l.kernels == kiln_pins::LibKernels::PerTarget) else { return Vec::new() };
    let mut sms = lib.sass.clone();
    sms.sort_by_key(|s| s.0);
    let ascending: Vec<String> = sms.iter().map(|s| s.sass()).collect();
    let mut problems = Vec::new();
    for rel in &lib.sources {
        let module = kiln_manifest::library_file_module(&lib.name, kiln_build::cuda::lib_stem(rel));
        let mut sets = KernelSets::default();
        for c in collected.iter().filter(|c| c.artifact.module == module && c.artifact.kind == Kind::Cubin) {
            sets.add(&c.artifact.arch, &c.artifact.kernels);
        }
        problems.extend(sets.monotonic(&ascending).into_iter().map(|d| format!("set `{}`, static library file {module}: {d}", set.name)));
        for &sm in &lib.sass {
            let SassBy::Ptxas { from } = pins.lib_sass_by(lib, sm) else { continue };
            let of = |arch: String| collected.iter().find(|c| c.artifact.module == module && c.artifact.arch == arch);
            if let (Some(c), Some(reference)) = (of(sm.sass()), of(from.sass())) {
                problems.extend(
                    exactly((&from.sass(), &reference.artifact.kernels), (&sm.sass(), &c.artifact.kernels))
                        .into_iter()
                        .map(|d| format!("set `{}`, static library file {module}: {d} (both compiled at {})", set.name, from.ptx())),
                );
            }
        }
    }
    problems
}

/// One module's AMD code objects against each CUDA artifact at or below the
/// emulated level: what each lacks.
fn parity_gaps(module: &str, collected: &[Collected]) -> Vec<String> {
    let ours: Vec<&Artifact> = collected.iter().map(|c| &c.artifact).filter(|a| a.module == module).collect();
    let mut sets = KernelSets::default();
    let mut amd = Vec::new();
    let mut references = Vec::new();
    for a in &ours {
        let level = match Target::parse(&a.arch) {
            Ok(Target::Ptx(sm) | Target::Sass(sm)) => Some(sm.0),
            _ => None,
        };
        match (a.backend, level) {
            (Backend::Hip, _) => amd.push(a.arch.clone()),
            (Backend::Cuda, Some(l)) if l <= kiln_build::hip::EMULATED_CUDA_ARCH => references.push(a.arch.clone()),
            _ => continue,
        }
        sets.add(&a.arch, &a.kernels);
    }
    references.iter().flat_map(|r| sets.covering(r, &amd)).collect()
}

/// The HIP bundles (built and read back in the graph: [`crate::graph`]) as
/// artifacts. Every entry exports the same kernels: [`compare_kernel_sets`]
/// held each module's code objects to the emulated PTX level's (compute_89).
pub fn hip_bundles(set: &KernelSet, collected: &[Collected], bundles: &[(String, Built)]) -> Result<Vec<Collected>> {
    let archs: Vec<String> = set.targets.hip.iter().map(|a| a.to_string()).collect();
    let mut out = Vec::new();
    for (module, built) in bundles {
        let first = collected
            .iter()
            .find(|c| c.artifact.kind == Kind::Hsaco && &c.artifact.module == module && c.artifact.arch == archs[0])
            .with_context(|| format!("module {module} has a bundle but no code object"))?;
        let bytes = fs::read(&built.path).with_context(|| format!("cannot read {}", built.path.display()))?;
        let artifact = Artifact {
            module: module.clone(),
            backend: Backend::Hip,
            arch: archs.join("+"),
            kind: Kind::Bundle,
            path: bundle_path(module),
            size: bytes.len() as u64,
            sha256: kiln_manifest::sha256_hex(&bytes),
            kernels: first.artifact.kernels.clone(),
            ptx_version: None,
            resources: Vec::new(),
            geometry: None,
        };
        out.push(Collected { artifact, file: built.path.clone() });
    }
    Ok(out)
}

/// The manifest of one set's artifacts. The set is named only when it is
/// not the main one (docs/manifest.md); `source_sha256` is the `.crate`'s
/// for a crate, the folder's listing hash for a folder.
pub fn manifest(set: &KernelSet, main: bool, source_sha256: &str, toolchain: Toolchain, collected: &[Collected]) -> SetManifest {
    let mut artifacts: Vec<Artifact> = collected.iter().map(|c| c.artifact.clone()).collect();
    artifacts.sort_by(|a, b| a.path.cmp(&b.path));
    let t = &set.targets;
    let (source, source_path) = match &set.source {
        kiln_pins::Source::Crate { name, version, sha256 } => {
            (kiln_manifest::Source { crate_name: name.clone(), version: version.clone(), sha256: sha256.clone() }, None)
        }
        kiln_pins::Source::Folder { path } => {
            (kiln_manifest::Source { crate_name: String::new(), version: String::new(), sha256: source_sha256.to_string() }, Some(path.clone()))
        }
    };
    let manifest = Manifest {
        schema: kiln_manifest::SCHEMA,
        kiln: env!("CARGO_PKG_VERSION").to_string(),
        source,
        toolchain,
        targets: kiln_manifest::Targets {
            hip: t.hip.iter().map(|a| a.to_string()).collect(),
            code_object_version: t.code_object_version,
            cuda_ptx: t.cuda_ptx.iter().map(|s| s.ptx()).collect(),
            cuda_sass: t.cuda_sass.iter().map(|s| s.sass()).collect(),
        },
        artifacts,
    };
    SetManifest { set: (!main).then(|| set.name.clone()), source_path, manifest }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(name: &str, wave: u64) -> KernelResources {
        KernelResources {
            name: name.into(),
            vgprs: 8,
            sgprs: 8,
            vgpr_spills: 0,
            sgpr_spills: 0,
            scratch_bytes: 0,
            lds_bytes: 0,
            max_flat_workgroup_size: 1024,
            wavefront_size: wave,
        }
    }

    fn collected(arch: &str, kernels: &[&str]) -> Collected {
        let (backend, kind) = if arch.starts_with("gfx") { (Backend::Hip, Kind::Hsaco) } else { (Backend::Cuda, Kind::Cubin) };
        let artifact = Artifact {
            module: "m".into(),
            backend,
            arch: arch.into(),
            kind,
            path: format!("{arch}/m"),
            size: 1,
            sha256: "00".repeat(32),
            kernels: kernels.iter().map(|k| k.to_string()).collect(),
            ptx_version: None,
            resources: Vec::new(),
            geometry: None,
        };
        Collected { artifact, file: PathBuf::new() }
    }

    #[test]
    fn an_amd_object_lacking_a_kernel_of_sm_89_or_below_is_a_parity_gap() {
        let all = [
            collected("compute_80", &["a"]),
            collected("sm_89", &["a", "f8"]),
            collected("compute_89", &["a", "f8"]),
            // Above the emulated level: not a reference.
            collected("sm_90", &["a", "f8", "only_90"]),
            collected("gfx90a", &["a", "f8"]),
            collected("gfx1030", &["a"]),
        ];
        assert_eq!(parity_gaps("m", &all), ["gfx1030 lacks 1 kernel(s) that sm_89 has: f8", "gfx1030 lacks 1 kernel(s) that compute_89 has: f8"]);
        assert!(parity_gaps("m", &all[..5]).is_empty());
        assert!(parity_gaps("other", &all).is_empty());
    }

    #[test]
    fn the_geometry_is_the_target_tables_and_the_wave_size_is_checked() {
        let rdna3 = HipArch::parse("gfx1100").unwrap();
        let g = geometry(&rdna3, &[kernel("a", 32), kernel("b", 32)]).unwrap();
        assert_eq!(g, Geometry { cuda_arch: 890, defines: vec!["RDNA3".into()], wavefront_size: 32 });
        let cdna = HipArch::parse("gfx90a").unwrap();
        assert_eq!(geometry(&cdna, &[kernel("a", 64)]).unwrap().defines, Vec::<String>::new());
        assert_eq!(geometry(&HipArch::parse("gfx1030").unwrap(), &[]).unwrap().defines, ["RDNA2"]);
        // A code object whose kernels run in other waves than the table says is refused, naming the kernel.
        let e = geometry(&rdna3, &[kernel("a", 32), kernel("b", 64)]).unwrap_err().to_string();
        assert!(e.contains("kernel b is compiled for 64-lane waves") && e.contains("gfx1100") && e.contains("wave32"), "{e}");
        let e = geometry(&cdna, &[kernel("a", 32)]).unwrap_err().to_string();
        assert!(e.contains("wave64"), "{e}");
    }
}
