//! The dist's one job graph: every compile, and the work that reads their
//! outputs, each starting as soon as what it reads exists:
//!
//! ```text
//! library PTX per file ──► its cubins of that level (sm_90, sm_100, sm_120)
//! module × target compiles ──► HIP bundle per module (every pinned gfx arch)
//!        │                          │
//!        └──────────────┬───────────┘
//!                       ▼
//!              zstd payload per artifact ───────────────┐  (only when packaging)
//! static-library objects ──► archive (ar) ──► slices ───┤
//!        └──► zstd (sizes for the slices) ──────┘       │
//! libcudart_static.a ──► zstd payload ──────────────────┤
//!                                                       ▼
//!                     after the graph: validation, manifest, lock,
//!                     then the crates generated around the payloads
//! ```
//!
//! Everything runs through kiln-build's runner: the same sandbox for the
//! tools, the same content cache, the same logs and progress lines. The
//! crates themselves are generated and `cargo package`d after the graph:
//! they embed the manifest, and cargo packages the main crate only together
//! with every part crate it depends on. A run of several kernel sets is one
//! graph: each set adds its own nodes ([`SetNodes`]).

use std::fs;

use anyhow::{bail, Context, Result};
use kiln_build::{cuda, Arch, Job, JobKind, Node, Plan, Step, Work};
use kiln_package::{compress, slices, sources::ToolchainFiles, PAYLOAD_BUDGET};
use kiln_pins::{HipArch, KernelSet, Pins, Target};

use crate::Selection;

/// The nodes, and which is which.
pub struct Graph<'a> {
    pub nodes: Vec<Node<'a>>,
    /// Per set built, in the order of the plans given, which nodes are its.
    pub sets: Vec<SetNodes>,
}

/// One kernel set's nodes.
pub struct SetNodes {
    /// The module compiles (HSACO, PTX, cubin), in plan order.
    pub modules: Vec<usize>,
    /// A per-target library's PTX, which its cubins read (intermediates:
    /// no artifact, payload or provenance record of their own).
    pub intermediates: Vec<usize>,
    /// The static library's archive jobs: the toolchain's own CPU's first,
    /// then (per target) one per further host CPU.
    pub archives: Vec<usize>,
    /// Per module, its HIP bundle.
    pub bundles: Vec<(String, usize)>,
    pub package: Option<Packaging>,
}

/// The packaging jobs, when the crates are packaged.
pub struct Packaging {
    /// (the node whose output is compressed, its payload's node), for every module artifact and bundle.
    pub payloads: Vec<(usize, usize)>,
    /// The static library's slices (a folder: [`slices::split`]), per archive.
    pub slices: Vec<usize>,
    /// `libcudart_static.a`, compressed.
    pub cudart: usize,
}

/// The compile job of a node, if it is one.
fn command<'n>(node: &'n Node) -> Option<&'n Job> {
    match &node.work {
        Work::Command(j) => Some(j),
        Work::Step(_) => None,
    }
}

impl Graph<'_> {
    /// The compile job behind a module or archive node.
    pub fn job(&self, i: usize) -> &Job {
        command(&self.nodes[i]).unwrap_or_else(|| panic!("node {i} ({}) is not a compile", self.nodes[i]))
    }

    /// Per artifact of the set whose nodes are `s` (its manifest path), the job that made it:
    /// its command and every file it read with its sha256 (the provenance
    /// record in each crate, [`kiln_package::provenance`]).
    pub fn job_records(
        &self,
        s: &SetNodes,
        hashes: &kiln_build::job::Hashes,
    ) -> Result<std::collections::BTreeMap<String, kiln_package::provenance::JobRecord>> {
        let mut out = std::collections::BTreeMap::new();
        for &i in s.modules.iter().chain(&s.archives) {
            let job = self.job(i);
            // A cubin assembled from a library PTX: that compile and this one, the files the compile read.
            let from = self.nodes[i].inputs.iter().map(|&(d, _)| &self.nodes[d]).find_map(command).filter(|j| j.kind == JobKind::LibPtx);
            let (argv, read) = match from {
                Some(ptx) => (cuda::with_its_ptx(ptx, job), &ptx.inputs),
                None => (job.argv.clone(), &job.inputs),
            };
            let mut inputs = Vec::new();
            for input in read {
                inputs.push((input.at.clone(), hashes.of(&input.host)?));
            }
            out.insert(crate::collect::dist_path(job), kiln_package::provenance::JobRecord { argv, inputs });
        }
        Ok(out)
    }

    /// Jobs by what they are, for the opening line.
    pub fn describe(&self) -> String {
        let objects = self.nodes.iter().filter(|n| command(n).is_some_and(|j| j.kind == JobKind::Object)).count();
        let modules: usize = self.sets.iter().map(|s| s.modules.len()).sum();
        let archives: usize = self.sets.iter().map(|s| s.archives.len()).sum();
        let bundles: usize = self.sets.iter().map(|s| s.bundles.len()).sum();
        let ptx = self.nodes.iter().filter(|n| command(n).is_some_and(|j| j.kind == JobKind::LibPtx)).count();
        let mut s = format!("{modules} module jobs, {objects} static-library objects");
        if ptx > 0 {
            s.push_str(&format!(", {ptx} static-library PTX"));
        }
        match archives {
            0 => {}
            1 => s.push_str(" and their archive"),
            n => s.push_str(&format!(" and their {n} archives")),
        }
        if bundles > 0 {
            s.push_str(&format!(", {bundles} HIP bundles"));
        }
        if self.sets.iter().any(|s| s.package.is_some()) {
            let steps = self.nodes.iter().filter(|n| command(n).is_none()).count() - bundles;
            s.push_str(&format!(", {steps} packaging jobs"));
        }
        s
    }
}

/// The compressed payload of a node's output (one recipe for every payload,
/// so that equal bytes share one cache entry).
fn zstd<'a>(label: String, staged: Vec<(String, std::path::PathBuf)>) -> Step<'a> {
    Step {
        label: format!("zstd {label}"),
        output: "payload.zst".into(),
        recipe: compress::recipe(),
        staged,
        cost: 1,
        run: Box::new(|io| {
            let bytes = fs::read(io.path("input")).context("cannot read the input")?;
            fs::write(io.path("payload.zst"), compress::zstd(&bytes)?)?;
            Ok(())
        }),
    }
}

/// Every job a dist run of `plans` (one per set) needs: the selected
/// compiles, the static libraries, the HIP bundles, and where `package(set)`
/// says so, the crates' payloads.
pub fn build<'a>(
    pins: &'a Pins,
    plans: impl IntoIterator<Item = &'a Plan>,
    selection: &Selection,
    package: &dyn Fn(&KernelSet) -> bool,
    toolchain: &ToolchainFiles,
) -> Result<Graph<'a>> {
    let mut nodes: Vec<Node<'a>> = Vec::new();
    let mut sets = Vec::new();
    // One CUDA runtime payload, whichever sets' crates carry it.
    let mut cudart = None;
    for plan in plans {
        let set = &plan.set;
        let mut modules = Vec::new();
        let mut intermediates = Vec::new();
        for job in selection.module_jobs(plan, pins)? {
            modules.push(nodes.len());
            nodes.push(Node::command(job));
        }

        // Per archive: its node and its objects' nodes.
        let mut archives: Vec<(usize, Vec<usize>)> = Vec::new();
        if let (true, Some(lib)) = (selection.wants_staticlib(set), &set.staticlib) {
            let crate::select::LibraryJobs { archives: per_arch, ptx, cubins } = selection.library_jobs(plan, pins)?;
            // The PTX its cubins of a level share, first: each cubin reads its file's under the PTX job's output name.
            let first = nodes.len();
            for job in ptx {
                intermediates.push(nodes.len());
                nodes.push(Node::command(job));
            }
            // A per-target library's cubins are artifacts like a module's: validated, locked and packaged per sm.
            for cubin in cubins {
                let inputs = cubin.reads.map(|p| (first + p, command(&nodes[first + p]).expect("a PTX job").output.clone())).into_iter().collect();
                modules.push(nodes.len());
                nodes.push(Node { work: Work::Command(cubin.job), inputs });
            }
            for (arch, jobs) in per_arch {
                let (mut inputs, mut objects) = (Vec::new(), Vec::new());
                let members: Vec<String> = jobs.iter().map(|j| j.output.clone()).collect();
                for job in jobs {
                    inputs.push((nodes.len(), job.output.clone()));
                    objects.push(nodes.len());
                    nodes.push(Node::command(job));
                }
                let mut job = cuda::archive_job(plan, &lib.name, arch, &members);
                job.cost = objects.len() as u64;
                archives.push((nodes.len(), objects));
                nodes.push(Node { work: Work::Command(job), inputs });
            }
        }

        // A bundle promises every carried arch: only modules built for all of them get one.
        let archs = &set.targets.hip;
        let mut bundles = Vec::new();
        if !archs.is_empty() {
            for module in &set.modules {
                let hsaco = |arch: &HipArch| {
                    let target = Target::Hip(arch.clone());
                    let is = |j: &Job| &j.module == module && j.target() == Some(&target);
                    modules.iter().copied().find(|&i| command(&nodes[i]).is_some_and(is)).map(|i| (i, format!("{arch}.hsaco")))
                };
                let Some(inputs) = archs.iter().map(hsaco).collect::<Option<Vec<_>>>() else { continue };
                bundles.push((module.clone(), nodes.len()));
                nodes.push(Node::step(bundle_step(module, archs.iter().map(|a| a.to_string()).collect()), inputs));
            }
        }

        let packaging = if package(set) {
            let mut payloads = Vec::new();
            for i in modules.iter().copied().chain(bundles.iter().map(|(_, i)| *i)) {
                payloads.push((i, nodes.len()));
                let label = nodes[i].to_string();
                nodes.push(Node::step(zstd(label, Vec::new()), vec![(i, "input".into())]));
            }
            if archives.is_empty() {
                bail!("packaging set `{}` needs its static library, and this run does not build it", set.name);
            }
            let mut slices = Vec::new();
            for (archive, objects) in &archives {
                // Each object compressed on its own: the slices are cut by these sizes.
                let mut inputs = vec![(*archive, "library.a".to_string())];
                for &o in objects {
                    let name = format!("{}.zst", command(&nodes[o]).expect("an object is a compile").output);
                    let label = nodes[o].to_string();
                    inputs.push((nodes.len(), name));
                    nodes.push(Node::step(zstd(label, Vec::new()), vec![(o, "input".into())]));
                }
                let arch = command(&nodes[*archive]).expect("the archive is a compile").arch.clone();
                slices.push(nodes.len());
                nodes.push(Node::step(slices_step(plan, objects.len() as u64, arch), inputs));
            }
            let cudart = *cudart.get_or_insert_with(|| {
                nodes.push(Node::step(zstd("libcudart_static.a".into(), vec![("input".into(), toolchain.cudart_static.clone())]), Vec::new()));
                nodes.len() - 1
            });
            Some(Packaging { payloads, slices, cudart })
        } else {
            None
        };
        sets.push(SetNodes { modules, intermediates, archives: archives.into_iter().map(|(a, _)| a).collect(), bundles, package: packaging });
    }
    Ok(Graph { nodes, sets })
}

/// One module's code objects for every pinned gfx arch as one clang offload
/// bundle (the drop-in's `Module::hsaco()`), read back entry by entry
/// against the code objects that went in.
fn bundle_step<'a>(module: &str, archs: Vec<String>) -> Step<'a> {
    let output = format!("{module}.hipfb");
    let module = module.to_string();
    Step {
        label: format!("hip bundle {module}"),
        output: output.clone(),
        recipe: format!("hip bundle v{} of {}", kiln_build::bundle::VERSION, archs.join("+")),
        staged: Vec::new(),
        cost: 1,
        run: Box::new(move |io| {
            let bytes = archs
                .iter()
                .map(|a| fs::read(io.path(&format!("{a}.hsaco"))).with_context(|| format!("cannot read the {a} code object")))
                .collect::<Result<Vec<_>>>()?;
            let inputs: Vec<(&str, &[u8])> = archs.iter().zip(&bytes).map(|(a, b)| (a.as_str(), b.as_slice())).collect();
            let bundle = kiln_build::bundle::write(&inputs);
            // Each entry's e_flags machine value is checked too, from kiln-target's table.
            let mach = |g: &str| HipArch::parse(g).ok().map(|a| a.mach());
            kiln_validate::bundle::verify_with(&bundle, &inputs, &mach)
                .with_context(|| format!("the HIP code-object bundle of module {module} does not read back"))?;
            fs::write(io.path(&output), bundle)?;
            Ok(())
        }),
    }
}

/// The set's static library cut into the link crates' slices, each archived
/// with the pinned `ar` in the sandbox (as the library's archive job, of its
/// `arch`) and compressed.
fn slices_step(plan: &Plan, cost: u64, arch: Arch) -> Step<'_> {
    let set = &plan.set;
    let host = match &arch {
        Arch::Host(h) => h,
        _ => kiln_manifest::kiln_target::host_object::BUILD_HOST,
    };
    let main = slices::crate_stem(&set.artifact_crate.as_ref().expect("only a packaged set is sliced").name, host);
    let lib = set.staticlib.as_ref().expect("only a set with a static library is sliced");
    let ar = cuda::archive_job(plan, "<lib>", arch.clone(), &["<members>".to_string()]).argv.join(" ");
    Step {
        label: format!("slices of lib{}.a", lib.name),
        output: "slices".into(),
        recipe: format!("static library slices v{} for {main}, budget {PAYLOAD_BUDGET}, `{ar}`, {}", slices::VERSION, compress::recipe()),
        staged: Vec::new(),
        cost,
        run: Box::new(move |io| {
            let library = fs::read(io.path("library.a")).context("cannot read the static library")?;
            let work = io.path(".ar");
            let size = |name: &str, _: &[u8]| -> Result<u64> {
                let z = io.path(&format!("{name}.zst"));
                Ok(fs::metadata(&z).with_context(|| format!("{name} was not compressed: {} is missing", z.display()))?.len())
            };
            let archive = |name: &str, members: Vec<(String, std::path::PathBuf)>| -> Result<std::path::PathBuf> {
                let names: Vec<String> = members.iter().map(|(n, _)| n.clone()).collect();
                let mut job = cuda::archive_job(plan, name, arch.clone(), &names);
                job.staged = members;
                let dir = work.join(name);
                fs::create_dir_all(&dir)?;
                for (name, path) in &job.staged {
                    kiln_build::store::link_or_copy(path, &dir.join(name))?;
                }
                io.sandboxed(&dir, &job.mounts, &job.argv)?;
                Ok(dir.join(&job.output))
            };
            let out = io.path("slices");
            fs::create_dir_all(&out)?;
            let made = slices::split(&library, &main, &size, &archive, &out)?;
            fs::remove_dir_all(&work).with_context(|| format!("cannot remove {}", work.display()))?;
            io.log(&format!("{} slices: {}", made.len(), made.iter().map(|s| s.lib.as_str()).collect::<Vec<_>>().join(", ")))?;
            Ok(())
        }),
    }
}
