//! Reads every compiler output back before it is published: the file is for
//! the arch it claims, holds the kernels it should, and every module exports
//! the same kernels on every target. This is all the checking AMD artifacts
//! get on machines without AMD GPUs.

use std::{fs, path::PathBuf};

use anyhow::{bail, Context, Result};
use kiln_build::{cuda, run_all, upstream::SourceCrate, Built, Failed, Job, Kind, Plan};
use kiln_manifest::{Artifact, Backend, KernelResources, Manifest, Toolchain};
use kiln_pins::{HipArch, Pins, Sm};
use kiln_toolchain::{fetch, Cache, Runner};
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

/// The built outputs in job order, or one error that lists every failure.
pub fn successes(jobs: &[Job], results: Vec<Result<Built, Failed>>) -> Result<Vec<(Job, Built)>> {
    let mut ok = Vec::new();
    let mut failed = Vec::new();
    for (job, r) in jobs.iter().zip(results) {
        match r {
            Ok(b) => ok.push((job.clone(), b)),
            Err(f) => failed.push(f),
        }
    }
    if !failed.is_empty() {
        let list: Vec<String> = failed.iter().map(|f| f.to_string()).collect();
        bail!("{} of {} compile jobs failed; nothing was written to the dist folder:\n{}", failed.len(), jobs.len(), list.join("\n"));
    }
    Ok(ok)
}

/// Where a module job's (or the archive's) output goes in the dist folder.
pub fn dist_path(job: &Job) -> String {
    match job.kind {
        Kind::Hsaco => format!("hip/{}/{}.hsaco", job.arch, job.module),
        Kind::Ptx => format!("cuda/{}/{}.ptx", job.arch, job.module),
        Kind::Cubin => format!("cuda/{}/{}.cubin", job.arch, job.module),
        Kind::Staticlib => format!("cuda/lib/{}", job.output),
        Kind::Object => unreachable!("objects are intermediate"),
    }
}

fn base(job: &Job, backend: Backend, kind: kiln_manifest::Kind, bytes: &[u8], kernels: Vec<String>) -> Artifact {
    Artifact {
        module: job.module.clone(),
        backend,
        arch: job.arch.clone(),
        kind,
        path: dist_path(job),
        size: bytes.len() as u64,
        sha256: fetch::sha256_bytes(bytes),
        kernels,
        ptx_version: None,
        resources: Vec::new(),
    }
}

/// Validates each module output and describes it for the manifest.
pub fn artifacts(pins: &Pins, built: &[(Job, Built)]) -> Result<Vec<Collected>> {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for (job, b) in built {
        let bytes = fs::read(&b.path).with_context(|| format!("cannot read {}", b.path.display()))?;
        match describe(pins, job, &bytes) {
            Ok(artifact) => out.push(Collected { artifact, file: b.path.clone() }),
            Err(e) => problems.push(format!("{job} ({}): {e:#}\n  file: {}", dist_path(job), b.path.display())),
        }
    }
    if !problems.is_empty() {
        bail!("{} artifact(s) failed validation:\n{}", problems.len(), problems.join("\n"));
    }
    Ok(out)
}

fn describe(pins: &Pins, job: &Job, bytes: &[u8]) -> Result<Artifact> {
    use kiln_manifest::Kind as K;
    Ok(match job.kind {
        Kind::Hsaco => {
            let arch = HipArch::parse(&job.arch).map_err(anyhow::Error::msg)?;
            let h = hsaco::check(bytes, arch.as_str(), arch.mach(), pins.targets.code_object_version)?;
            let mut a = base(job, Backend::Hip, K::Hsaco, bytes, h.kernel_names());
            a.resources = h.kernels.into_iter().map(resources).collect();
            a
        }
        Kind::Ptx => {
            let sm = Sm::parse_prefixed(&job.arch, "compute_").map_err(anyhow::Error::msg)?;
            let text = std::str::from_utf8(bytes).context("PTX is not UTF-8 text")?;
            let p = ptx::check(text, sm.0)?;
            let mut a = base(job, Backend::Cuda, K::Ptx, bytes, p.entries);
            a.ptx_version = Some(p.version);
            a
        }
        Kind::Cubin => {
            let sm = Sm::parse_prefixed(&job.arch, "sm_").map_err(anyhow::Error::msg)?;
            let c = cubin::check(bytes, sm.0)?;
            base(job, Backend::Cuda, K::Cubin, bytes, c.kernels)
        }
        Kind::Object | Kind::Staticlib => unreachable!("handled by staticlib()"),
    })
}

fn resources(k: hsaco::KernelResources) -> KernelResources {
    KernelResources {
        name: k.name,
        vgprs: k.vgprs,
        sgprs: k.sgprs,
        vgpr_spills: k.vgpr_spills,
        sgpr_spills: k.sgpr_spills,
        scratch_bytes: k.scratch_bytes,
        lds_bytes: k.lds_bytes,
        max_flat_workgroup_size: k.max_flat_workgroup_size,
        wavefront_size: k.wavefront_size,
    }
}

/// The Rust file whose `extern "C"` block the static library must satisfy.
pub const FFI_DECLARATIONS: &str = "src/ffi.rs";

/// Archives the static library's objects and checks it: SASS for every sm
/// in every object, and every function candle's `ffi` module declares.
#[allow(clippy::too_many_arguments)]
pub fn staticlib(
    runner: &Runner,
    cache: &Cache,
    plan: &Plan,
    pins: &Pins,
    source: &SourceCrate,
    objects: &[(Job, Built)],
    say: &(dyn Fn(String) + Sync),
) -> Result<Collected> {
    let lib = &pins.candle.staticlib.name;
    let arch = objects[0].0.arch.clone();
    let staged: Vec<(String, PathBuf)> = objects.iter().map(|(j, b)| (j.output.clone(), b.path.clone())).collect();
    let job = cuda::archive_job(plan, lib, &arch, staged);
    let results = run_all(runner, cache, std::slice::from_ref(&job), &kiln_build::Options { workers: 1, ..Default::default() }, say);
    let (_, built) = successes(std::slice::from_ref(&job), results)?.remove(0);
    let bytes = fs::read(&built.path)?;

    let decl = source.path(FFI_DECLARATIONS);
    let rust = fs::read_to_string(&decl).with_context(|| format!("cannot read {}", decl.display()))?;
    let required = ar::extern_fns(&rust);
    if required.is_empty() {
        bail!("{} declares no extern \"C\" functions: has candle-kernels' ffi module moved?", decl.display());
    }
    let sms: Vec<u32> = arch.split('+').map(|s| Sm::parse_prefixed(s, "sm_").map(|s| s.0)).collect::<Result<_, _>>().map_err(anyhow::Error::msg)?;
    let a = ar::check(&bytes, &sms, &required).with_context(|| format!("static library lib{lib}.a ({arch}) failed validation"))?;
    // The C ABI surface: what a consumer can call (C++ symbols are internal).
    let exported: Vec<String> = a.functions().into_iter().filter(|f| !f.starts_with("_Z")).collect();
    let artifact = base(&job, Backend::Cuda, kiln_manifest::Kind::Staticlib, &bytes, exported);
    Ok(Collected { artifact, file: built.path })
}

/// Every module must export the same kernels on every target: AMD targets
/// exactly the floor PTX's, NVIDIA targets at least those, and a newer
/// NVIDIA arch never fewer than an older one (candle gates fp8 kernels on sm_89).
pub fn compare_kernel_sets(pins: &Pins, collected: &[Collected]) -> Result<()> {
    let mut problems = Vec::new();
    let mut ascending: Vec<(u32, String)> = pins.targets.cuda_ptx.iter().map(|s| (s.0, s.ptx())).collect();
    ascending.extend(pins.targets.cuda_sass.iter().map(|s| (s.0, s.sass())));
    ascending.sort();
    let ascending: Vec<String> = ascending.into_iter().map(|(_, t)| t).collect();
    for module in &pins.candle.modules {
        let mut sets = KernelSets::default();
        let mut first = None;
        for c in collected.iter().filter(|c| &c.artifact.module == module) {
            sets.add(&c.artifact.arch, &c.artifact.kernels);
            first.get_or_insert(c.artifact.arch.clone());
        }
        let Some(first) = first else { continue };
        let floor = pins.targets.cuda_ptx[0].ptx();
        let reference = if collected.iter().any(|c| &c.artifact.module == module && c.artifact.arch == floor) { floor } else { first };
        let rule = |t: &str| if t.starts_with("gfx") { Rule::Equal } else { Rule::Superset };
        for d in sets.differences(&reference, rule).into_iter().chain(sets.monotonic(&ascending)) {
            problems.push(format!("module {module}: {d}"));
        }
    }
    if !problems.is_empty() {
        bail!("kernels differ between targets (a kernel missing on one arch would fail only on that GPU):\n  {}", problems.join("\n  "));
    }
    Ok(())
}

/// Per module, one clang offload bundle of its code objects for every pinned
/// gfx arch (the drop-in's `Module::hsaco()`), read back entry by entry
/// against the code objects that went in. A module built for only some of
/// the archs (`--arch`) gets none: a bundle promises every carried arch.
/// Bundles are kept in the cache under their own sha256 (content-addressed).
pub fn hip_bundles(cache: &Cache, pins: &Pins, collected: &[Collected]) -> Result<Vec<Collected>> {
    let archs: Vec<String> = pins.targets.hip.iter().map(|a| a.to_string()).collect();
    let mut out = Vec::new();
    if archs.is_empty() {
        return Ok(out);
    }
    for module in &pins.candle.modules {
        let objects: Vec<&Collected> = archs
            .iter()
            .filter_map(|arch| {
                collected.iter().find(|c| c.artifact.kind == kiln_manifest::Kind::Hsaco && &c.artifact.module == module && &c.artifact.arch == arch)
            })
            .collect();
        if objects.len() != archs.len() {
            continue;
        }
        let bytes =
            objects.iter().map(|c| fs::read(&c.file).with_context(|| format!("cannot read {}", c.file.display()))).collect::<Result<Vec<_>>>()?;
        let inputs: Vec<(&str, &[u8])> = objects.iter().zip(&bytes).map(|(c, b)| (c.artifact.arch.as_str(), b.as_slice())).collect();
        let bundle = kiln_build::bundle::write(&inputs);
        // Each entry's e_flags machine value is checked too, from kiln-target's table.
        let mach = |g: &str| HipArch::parse(g).ok().map(|a| a.mach());
        kiln_validate::bundle::verify_with(&bundle, &inputs, &mach)
            .with_context(|| format!("the HIP code-object bundle of module {module} does not read back"))?;
        let sha256 = fetch::sha256_bytes(&bundle);
        let file = cache.root().join("bundles").join(format!("{sha256}.hipfb"));
        if fetch::sha256_file(&file).ok().as_deref() != Some(sha256.as_str()) {
            let dir = file.parent().expect("bundles/ has a parent");
            fs::create_dir_all(dir)?;
            let tmp = dir.join(format!(".{sha256}.{}.part", std::process::id()));
            fs::write(&tmp, &bundle).with_context(|| format!("cannot write {}", tmp.display()))?;
            fs::rename(&tmp, &file).with_context(|| format!("cannot move {} to {}", tmp.display(), file.display()))?;
        }
        let artifact = Artifact {
            module: module.clone(),
            backend: Backend::Hip,
            arch: archs.join("+"),
            kind: kiln_manifest::Kind::Bundle,
            path: format!("hip/bundle/{module}.hipfb"),
            size: bundle.len() as u64,
            sha256,
            // Every entry exports the same kernels: compare_kernel_sets held them to the PTX floor's.
            kernels: objects[0].artifact.kernels.clone(),
            ptx_version: None,
            resources: Vec::new(),
        };
        out.push(Collected { artifact, file });
    }
    Ok(out)
}

pub fn manifest(pins: &Pins, toolchain: Toolchain, collected: &[Collected]) -> Manifest {
    let mut artifacts: Vec<Artifact> = collected.iter().map(|c| c.artifact.clone()).collect();
    artifacts.sort_by(|a, b| a.path.cmp(&b.path));
    let t = &pins.targets;
    Manifest {
        schema: kiln_manifest::SCHEMA,
        kiln: env!("CARGO_PKG_VERSION").to_string(),
        source: kiln_manifest::Source {
            crate_name: pins.candle.crate_name.clone(),
            version: pins.candle.version.clone(),
            sha256: pins.candle.sha256.clone(),
        },
        toolchain,
        targets: kiln_manifest::Targets {
            hip: t.hip.iter().map(|a| a.to_string()).collect(),
            code_object_version: t.code_object_version,
            cuda_ptx: t.cuda_ptx.iter().map(|s| s.ptx()).collect(),
            cuda_sass: t.cuda_sass.iter().map(|s| s.sass()).collect(),
        },
        artifacts,
    }
}
