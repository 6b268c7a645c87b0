//! How one module is compiled for NVIDIA: nvcc to PTX at the floor (which
//! newer GPUs' drivers JIT-compile) and to one cubin of SASS per sm; and the
//! static library's objects: fat (each carrying a fatbin for every sm), or
//! per target (a host-only object per file beside one cubin per file and
//! sm, docs/static-library.md).

use anyhow::Result;
use kiln_manifest::Kind;
use kiln_pins::{SassBy, Sm, StaticLib, Target};
use kiln_target::host_object::{self, Host};
use kiln_toolchain::{sysroot::JOB_DIR, Mount};

use crate::{
    compile::{Output, Plan, SourceFile},
    job::{Arch, Job, JobKind},
    scan::Input,
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
    let inputs = plan.scan(file, false)?;
    assembled_cubin_job(plan, module, file, sm, from, &plan.set.flags.cuda, inputs)
}

/// [`ptxas_cubin_job`] with the compile's `flags` and the `inputs` it reads.
fn assembled_cubin_job(plan: &Plan, module: &str, file: &SourceFile, sm: Sm, from: Sm, flags: &[String], inputs: Vec<Input>) -> Result<Job> {
    let Some(ptxas) = &plan.ptxas else {
        anyhow::bail!("{} needs the pinned ptxas ([toolchain].ptxas), which this plan was not given", sm.sass());
    };
    let stem = module.rsplit('/').next().unwrap_or(module);
    let ptx = format!("{JOB_DIR}/{stem}.ptx");
    let mut nvcc = vec!["nvcc".to_string(), gencode(from, &from.ptx()), "--ptx".into()];
    nvcc.extend(flags.iter().cloned());
    nvcc.extend(plan.include_flags());
    nvcc.extend(["-o".into(), ptx.clone(), file.input.at.clone()]);
    let output = format!("{stem}.cubin");
    let assemble =
        vec![format!("{JOB_DIR}/{PTXAS}"), format!("-arch={}", sm.sass()), "-m64".into(), "-o".into(), format!("{JOB_DIR}/{output}"), ptx.clone()];
    let script = format!("set -e; {}; {}; rm {}", shell_words(&nvcc), shell_words(&assemble), shell_quote(&ptx));
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

/// The source file's stem: what a per-target library names its host object,
/// its cubins and its tag by (`mmq_instance_q4_0`).
pub fn lib_stem(rel: &str) -> &str {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    name.strip_suffix(".cu").unwrap_or(name)
}

/// The flags every compile of a per-target library gets: the library's own,
/// its forced headers, and the library's whole arch list as `__CUDA_ARCH_LIST__`
/// (`kernels/cuda/kiln_arch_list.h`), so that the host code picks the tile
/// geometry the cubins were compiled for and names CUB's kernels as they do.
/// Returns the flags and the forced headers (inputs of the compile).
fn per_target_flags(plan: &Plan, pins: &kiln_pins::Pins, lib: &StaticLib) -> Result<(Vec<String>, Vec<Input>)> {
    let mut forced: Vec<Input> = lib.force_include.iter().map(|h| plan.cuda_header(h)).collect::<Result<_>>()?;
    forced.push(plan.cuda_header(ARCH_LIST_HEADER)?);
    let mut flags = plan.set.flags.cuda_staticlib.clone();
    for f in &forced {
        flags.extend(["-include".to_string(), f.at.clone()]);
    }
    flags.push(format!("-DKILN_ARCH_LIST={}", arch_list(pins, lib)));
    Ok((flags, forced))
}

/// kiln's header that sets `__CUDA_ARCH_LIST__` (kernels/cuda).
pub const ARCH_LIST_HEADER: &str = "kiln_arch_list.h";

/// The `__CUDA_ARCH_LIST__` of a per-target library: the `__CUDA_ARCH__` of
/// every device compile its cubins come from (an sm's own, or for an sm
/// the pinned ptxas assembles, the PTX level it is assembled from), as nvcc
/// writes it for one fat object of them (`700,750,...`), commas escaped
/// for nvcc's option parser.
pub fn arch_list(pins: &kiln_pins::Pins, lib: &StaticLib) -> String {
    device_levels(pins, lib).iter().map(|l| format!("{}0", l.0)).collect::<Vec<_>>().join("\\,")
}

/// The level of the device pass that `sm`'s SASS of library `lib` comes
/// from: its own (nvcc), or the PTX level the pinned ptxas assembles it from.
fn device_level(pins: &kiln_pins::Pins, lib: &StaticLib, sm: Sm) -> Sm {
    match pins.lib_sass_by(lib, sm) {
        SassBy::Nvcc => sm,
        SassBy::Ptxas { from } => from,
    }
}

/// Every device-pass level of library `lib`: its sms' ([`device_level`])
/// and its PTX levels, lowest first, each once.
fn device_levels(pins: &kiln_pins::Pins, lib: &StaticLib) -> Vec<Sm> {
    let mut levels: Vec<Sm> = lib.sass.iter().map(|&sm| device_level(pins, lib, sm)).chain(lib.ptx.iter().copied()).collect();
    levels.sort_unstable_by_key(|l| l.0);
    levels.dedup();
    levels
}

/// One cubin of a per-target library compiled from source: file `file` for
/// `sm`, as the fat object's device pass for that sm compiles it (same
/// flags, forced headers and arch list), by nvcc or, in one job, nvcc to the
/// library's PTX and the pinned ptxas. Its module is `<lib>/<stem>`
/// (`cuda/sm_90/moe/mmq_instance_q4_0.cubin`). A cubin whose PTX level the
/// library compiles anyway ([`lib_ptx_level`]) is assembled from that PTX
/// job's output instead ([`lib_assembled_cubin_job`]).
pub fn lib_cubin_job(plan: &Plan, pins: &kiln_pins::Pins, lib: &StaticLib, file: &SourceFile, sm: Sm) -> Result<Job> {
    let module = kiln_manifest::library_file_module(&lib.name, lib_stem(&file.rel));
    let (flags, forced) = per_target_flags(plan, pins, lib)?;
    let inputs = plan.scan_forced(file, &forced)?;
    match pins.lib_sass_by(lib, sm) {
        SassBy::Nvcc => {
            let out =
                Output { arch: Arch::One(Target::Sass(sm)), kind: JobKind::Artifact(Kind::Cubin), name: format!("{}.cubin", lib_stem(&file.rel)) };
            let mut job = nvcc_job(plan, &module, out, &["--cubin"], &flags, file, vec![gencode(sm, &sm.sass())])?;
            job.cost = plan.cost(&inputs);
            job.inputs = inputs;
            Ok(job)
        }
        SassBy::Ptxas { from } => assembled_cubin_job(plan, &module, file, sm, from, &flags, inputs),
    }
}

/// The PTX level that a per-target library's SASS for `sm` is compiled
/// through, when the library compiles PTX at that level too (its pinned
/// `ptx`): nvcc's own level for an sm it reaches (`-gencode
/// arch=compute_90,code=sm_90` is cicc to compute_90 PTX, then ptxas), else
/// the level the pinned ptxas assembles from ([`kiln_pins::Pins::lib_sass_by`]).
/// Such an sm's cubin is assembled from that level's one PTX job per file,
/// which every cubin of the level shares.
pub fn lib_ptx_level(pins: &kiln_pins::Pins, lib: &StaticLib, sm: Sm) -> Option<Sm> {
    let level = device_level(pins, lib, sm);
    lib.ptx.contains(&level).then_some(level)
}

/// The PTX of file `file` of a per-target library at `level`, compiled as
/// the library's cubins are (same flags, forced headers and arch list):
/// what its cubins of that level are assembled from ([`JobKind::LibPtx`]:
/// an intermediate, not an artifact). Output `<stem>.ptx`.
pub fn lib_ptx_job(plan: &Plan, pins: &kiln_pins::Pins, lib: &StaticLib, file: &SourceFile, level: Sm) -> Result<Job> {
    let stem = lib_stem(&file.rel);
    let (flags, forced) = per_target_flags(plan, pins, lib)?;
    let out = Output { arch: Arch::One(Target::Ptx(level)), kind: JobKind::LibPtx, name: format!("{stem}.ptx") };
    let mut job =
        nvcc_job(plan, &kiln_manifest::library_file_module(&lib.name, stem), out, &["--ptx"], &flags, file, vec![gencode(level, &level.ptx())])?;
    job.inputs = plan.scan_forced(file, &forced)?;
    job.cost = plan.cost(&job.inputs);
    Ok(job)
}

/// The cubin for `sm` of a per-target library's file, assembled from the
/// output of its [`lib_ptx_job`] (`ptx`), which the graph stages into the
/// job folder under its output name, so the cache key covers its bytes: by
/// the pinned nvcc's own ptxas where nvcc reaches `sm` (as nvcc itself runs
/// it, `-arch=sm_XX -m64`: `nvcc -dryrun` of the library's flags), else by the
/// pinned newer ptxas, staged as for the modules' Blackwell SASS.
pub fn lib_assembled_cubin_job(plan: &Plan, pins: &kiln_pins::Pins, lib: &StaticLib, ptx: &Job, sm: Sm) -> Result<Job> {
    let stem = ptx.output.strip_suffix(".ptx").unwrap_or(&ptx.output);
    let (program, staged) = match pins.lib_sass_by(lib, sm) {
        SassBy::Nvcc => ("ptxas".to_string(), Vec::new()),
        SassBy::Ptxas { .. } => {
            let Some(ptxas) = &plan.ptxas else {
                anyhow::bail!("{} needs the pinned ptxas ([toolchain].ptxas), which this plan was not given", sm.sass());
            };
            (format!("{JOB_DIR}/{PTXAS}"), vec![(PTXAS.to_string(), ptxas.path.clone())])
        }
    };
    let output = format!("{stem}.cubin");
    Ok(Job {
        set: plan.set.name.clone(),
        module: ptx.module.clone(),
        arch: Arch::One(Target::Sass(sm)),
        kind: JobKind::Artifact(Kind::Cubin),
        argv: vec![
            program,
            format!("-arch={}", sm.sass()),
            "-m64".into(),
            "-o".into(),
            format!("{JOB_DIR}/{output}"),
            format!("{JOB_DIR}/{}", ptx.output),
        ],
        output,
        inputs: Vec::new(),
        staged,
        mounts: plan.mounts(),
        cost: ptx.cost / 2,
    })
}

/// The command of a job assembled from `ptx`'s output, with the command
/// that made it first: what made the cubin, as one `sh -c` line (the
/// provenance record of a shared PTX's cubin).
pub fn with_its_ptx(ptx: &Job, cubin: &Job) -> Vec<String> {
    vec!["sh".into(), "-c".into(), format!("set -e; {}; {}", shell_words(&ptx.argv), shell_words(&cubin.argv))]
}

/// The host object of one file of a per-target library for `host`, in one
/// sandboxed run: nvcc compiles it with one PTX-only device arch (the
/// library's newest, unoptimised and thrown away with the fatbin), objcopy
/// renames every call into NVIDIA's runtime to the crate's own
/// (`kiln_<lib>_cudaLaunchKernel`, ...) and replaces the fatbin with the
/// file's tag ([`host_object`]). For a CPU other than the toolchain's own,
/// nvcc's host compiler and objcopy are the pinned cross ones
/// (`[toolchain.cross.<cpu>]`, the plan's [`Plan::cross_root`]), mounted from their own root.
pub fn host_object_job(plan: &Plan, pins: &kiln_pins::Pins, lib: &StaticLib, file: &SourceFile, host: &'static Host) -> Result<Job> {
    let stem = lib_stem(&file.rel);
    let (flags, forced) = per_target_flags(plan, pins, lib)?;
    // The device pass is the library's newest level: nvcc's host code launches (and
    // registers) only the kernels its device pass compiled, and an arch gate can drop
    // kernels below a level (NO_BF16_KERNEL below sm_80, kiln_arch_gates.h). With the
    // lowest level the bf16 WMMA MoE launchers launched nothing on every GPU (found by
    // bench/ffi-split on an H200, docs/static-library.md); the newest has every kernel
    // of every cubin (kiln-dist's kernel-set check: no newer arch has fewer).
    let Some(&top) = device_levels(pins, lib).last() else {
        anyhow::bail!("static library `{}` has no target", lib.name);
    };
    let compiled = format!("{JOB_DIR}/{stem}.host.o");
    let tag = format!("{JOB_DIR}/{stem}.tag");
    let output = format!("{stem}.o");
    let mut mounts = plan.mounts();
    let (env, nvcc_host, objcopy) = if host == host_object::BUILD_HOST {
        (String::new(), Vec::new(), "objcopy".to_string())
    } else {
        let cross = plan.cross_root(host.cpu)?;
        mounts.push(Mount { host: cross.root.clone(), at: cross.at(), writable: false });
        let mut nvcc_host = vec!["-ccbin".to_string(), cross.program(&cross.cxx)];
        nvcc_host.extend(front_end_types(host).iter().map(|d| d.to_string()));
        (format!("export LD_LIBRARY_PATH={}; ", shell_quote(&cross.library_path())), nvcc_host, cross.program(&format!("{}-objcopy", host.gnu)))
    };
    // The device pass's PTX is thrown away: unoptimised (`-Xcicc -O0`) it takes a
    // quarter of the time, and the host object comes out the same byte for byte
    // (measured on candle's mmvq_gguf.cu: 52 s to 13 s; docs/static-library.md).
    let mut nvcc = vec!["nvcc".to_string()];
    nvcc.extend(nvcc_host);
    nvcc.extend([gencode(top, &top.ptx()), "-Xcicc".into(), "-O0".into(), "-c".into()]);
    nvcc.extend(flags);
    nvcc.extend(plan.include_flags());
    nvcc.extend(["-o".into(), compiled.clone(), file.input.at.clone()]);
    let mut objcopy = vec![objcopy];
    for name in host_object::RUNTIME_CALLS {
        objcopy.extend(["--redefine-sym".into(), format!("{name}={}", host_object::renamed(&lib.name, name))]);
    }
    objcopy.extend(["--update-section".into(), format!(".nv_fatbin={tag}"), compiled.clone(), format!("{JOB_DIR}/{output}")]);
    // The tag's bytes as printf writes them: octal escapes for its NULs.
    let printf: String = host_object::tag(stem).iter().map(|&b| if b == 0 { "\\000".to_string() } else { (b as char).to_string() }).collect();
    let script = format!(
        "set -e; {env}{}; printf {} > {}; {}; rm {} {}",
        shell_words(&nvcc),
        shell_quote(&printf),
        shell_quote(&tag),
        shell_words(&objcopy),
        shell_quote(&compiled),
        shell_quote(&tag)
    );
    let inputs = plan.scan_forced(file, &forced)?;
    Ok(Job {
        set: plan.set.name.clone(),
        module: kiln_manifest::library_file_module(&lib.name, stem),
        arch: Arch::Host(host),
        kind: JobKind::Object,
        argv: vec!["sh".into(), "-c".into(), script],
        output,
        cost: plan.cost(&inputs),
        inputs,
        staged: Vec::new(),
        mounts,
    })
}

/// Defines nvcc needs to compile host code for `host` with its cross g++.
/// aarch64: nvcc 12.4's C++ front ends (cudafe++, cicc) do not know GCC's
/// aarch64 vector builtin types, with which glibc >= 2.39's
/// `<bits/math-vector.h>` (trixie's 2.41) declares its vector math functions,
/// so every file that includes `<math.h>` fails (`identifier "__SVBool_t" is
/// undefined`; CUDA 12.5 and later know them). Each is defined, before any
/// header, as a pointer to an incomplete type of kiln's: those declarations
/// still parse, and no code of the library calls them.
fn front_end_types(host: &Host) -> &'static [&'static str] {
    match host.cpu {
        "aarch64" => &[
            "-D__Float32x4_t=struct __kiln_f32x4 *",
            "-D__Float64x2_t=struct __kiln_f64x2 *",
            "-D__SVFloat32_t=struct __kiln_svf32 *",
            "-D__SVFloat64_t=struct __kiln_svf64 *",
            "-D__SVBool_t=struct __kiln_svbool *",
        ],
        _ => &[],
    }
}

/// The static library from its objects, named in archive order (the pinned
/// source order): each must be staged into the job folder under its name,
/// by the caller (`staged`) or by the graph (the object jobs' outputs).
/// `ar`'s D flag zeroes timestamps, uids and modes: the archive depends on content only.
pub fn archive_job(plan: &Plan, lib: &str, arch: Arch, members: &[String]) -> Job {
    let output = format!("lib{lib}.a");
    let mut argv = vec!["ar".to_string(), "rcsD".into(), format!("{JOB_DIR}/{output}")];
    argv.extend(members.iter().map(|name| format!("{JOB_DIR}/{name}")));
    Job {
        set: plan.set.name.clone(),
        module: lib.into(),
        arch,
        kind: JobKind::Artifact(Kind::Staticlib),
        argv,
        output,
        inputs: Vec::new(),
        staged: Vec::new(),
        mounts: plan.mounts(),
        cost: 1,
    }
}
