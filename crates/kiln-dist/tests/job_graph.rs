//! kiln-build's job graph with the real pinned compilers: a step starts only
//! once the outputs it reads exist, work that finishes something goes before
//! more compiles, a failure stops only what reads from it (reported as not
//! run), and every node, compile or step, is cached by content.

use std::{fs, sync::Mutex};

use kiln_build::{cuda, run_graph, Node, Plan, Step};
use kiln_pins::Sm;
use kiln_toolchain::Cache;

mod common;
use common::{repo, temp, toolchain};

/// A step that writes the byte count of its input `in` as text.
fn count<'a>(label: &str) -> Step<'a> {
    Step {
        label: label.into(),
        output: "count.txt".into(),
        recipe: "count v1".into(),
        staged: Vec::new(),
        cost: 1,
        run: Box::new(|io| {
            let n = fs::metadata(io.path("in"))?.len();
            io.log(&format!("{n} bytes"))?;
            fs::write(io.path("count.txt"), n.to_string())?;
            Ok(())
        }),
    }
}

#[test]
fn steps_run_on_their_inputs_and_a_failure_stops_only_what_reads_it() {
    let (pins, runner) = toolchain();
    let dir = temp("graph-fail");
    let cache = Cache::at(dir.join("cache")).unwrap();
    let plan = Plan::new(pins.main_set(), repo().join("kernels/probe"), repo().join("kernels/hip"));
    let file = plan.file("probe.cu", "the probe").unwrap();
    let nodes = vec![
        Node::command(cuda::cubin_job(&plan, "probe", &file, Sm(90)).unwrap()),
        Node::step(count("count the cubin"), vec![(0, "in".into())]),
        Node::step(
            Step {
                label: "a failing step".into(),
                output: "never".into(),
                recipe: "fail v1".into(),
                staged: Vec::new(),
                cost: 1,
                run: Box::new(|io| {
                    io.log("about to fail")?;
                    anyhow::bail!("deliberately")
                }),
            },
            Vec::new(),
        ),
        Node::step(count("count the failure"), vec![(2, "in".into())]),
        Node::step(
            Step {
                label: "both".into(),
                output: "both.txt".into(),
                recipe: "both v1".into(),
                staged: Vec::new(),
                cost: 1,
                run: Box::new(|io| {
                    let n = fs::read_to_string(io.path("count"))?;
                    let len = fs::metadata(io.path("sm_90.cubin"))?.len();
                    fs::write(io.path("both.txt"), format!("{n}={len}"))?;
                    Ok(())
                }),
            },
            vec![(1, "count".into()), (0, "sm_90.cubin".into())],
        ),
    ];
    for round in 0..2 {
        let said = Mutex::new(Vec::new());
        let opts = kiln_build::Options { workers: 2, ..Default::default() };
        let results = run_graph(&runner, &cache, &nodes, &opts, &|l| said.lock().unwrap().push(l));
        let said = said.into_inner().unwrap().join("\n");
        let cubin = results[0].as_ref().unwrap();
        let len = fs::metadata(&cubin.path).unwrap().len();
        assert_eq!(fs::read_to_string(&results[1].as_ref().unwrap().path).unwrap(), len.to_string());
        let failed = results[2].as_ref().unwrap_err();
        assert!(!failed.skipped() && failed.tail.contains("deliberately") && failed.log.is_file(), "{failed}");
        assert!(fs::read_to_string(&failed.log).unwrap().contains("about to fail"), "the step's log is kept");
        let not_run = results[3].as_ref().unwrap_err();
        assert!(not_run.skipped() && not_run.tail.contains("a failing step"), "{not_run}");
        assert!(said.contains("not run count the failure"), "{said}");
        let both = results[4].as_ref().unwrap();
        assert_eq!(fs::read_to_string(&both.path).unwrap(), format!("{len}={len}"));
        // The second round finds every successful node in the cache.
        let cached = [0, 1, 4].iter().all(|&i| results[i].as_ref().unwrap().cached);
        assert_eq!(cached, round == 1, "round {round}: {said}");
        if round == 1 {
            // The entry keeps the step's log and recipe, as a compile's does.
            let entry = both.path.parent().unwrap();
            assert!(fs::read_to_string(entry.join("recipe.txt")).unwrap().contains("step both v1"));
            assert!(entry.join("build.log").is_file());
        }
    }
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn work_that_finishes_something_goes_before_more_compiles() {
    let (pins, runner) = toolchain();
    let dir = temp("graph-order");
    let cache = Cache::at(dir.join("cache")).unwrap();
    let plan = Plan::new(pins.main_set(), repo().join("kernels/probe"), repo().join("kernels/hip"));
    let file = plan.file("probe.cu", "the probe").unwrap();
    let mut first = cuda::cubin_job(&plan, "probe", &file, Sm(90)).unwrap();
    first.cost = 100;
    let mut second = cuda::ptx_job(&plan, "probe", &file, pins.targets.cuda_ptx[0]).unwrap();
    second.cost = 10;
    let nodes = vec![Node::command(second), Node::command(first), Node::step(count("count the cubin"), vec![(1, "in".into())])];
    let said = Mutex::new(Vec::new());
    // One worker: the order is the scheduler's, nothing else.
    let opts = kiln_build::Options { workers: 1, ..Default::default() };
    let results = run_graph(&runner, &cache, &nodes, &opts, &|l| said.lock().unwrap().push(l));
    assert!(results.iter().all(|r| r.is_ok()));
    let order: Vec<String> = said.into_inner().unwrap().into_iter().filter(|l| l.contains(" built ")).collect();
    let at = |what: &str| order.iter().position(|l| l.contains(what)).unwrap_or_else(|| panic!("{what} not built: {order:?}"));
    assert!(at("sm_90") < at("count the cubin") && at("count the cubin") < at("compute_"), "{order:?}");
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_archive_job_reads_its_objects_from_the_graph() {
    let (pins, runner) = toolchain();
    let dir = temp("graph-archive");
    let cache = Cache::at(dir.join("cache")).unwrap();
    let plan = Plan::new(pins.main_set(), repo().join("kernels/probe"), repo().join("kernels/hip")).with_cuda_headers(repo().join("kernels/cuda"));
    let file = plan.file("probe.cu", "the probe").unwrap();
    // The static library's own sms that the pinned nvcc reaches (a fat object is nvcc's alone).
    let lib = pins.main_set().staticlib.as_ref().unwrap();
    let lib_sms: &Vec<kiln_pins::Sm> = &lib.sass.iter().copied().filter(|&s| pins.lib_sass_by(lib, s) == kiln_pins::SassBy::Nvcc).collect();
    let object = cuda::object_job(&plan, "probelib", &file, lib_sms, &[]).unwrap();
    let name = object.output.clone();
    let archive = cuda::archive_job(&plan, "probelib", kiln_build::Arch::Fat { sass: lib_sms.clone(), ptx: vec![] }, std::slice::from_ref(&name));
    let nodes = vec![Node::command(object), Node { work: kiln_build::Work::Command(archive), inputs: vec![(0, name.clone())] }];
    let opts = kiln_build::Options { workers: 2, ..Default::default() };
    let results = run_graph(&runner, &cache, &nodes, &opts, &|l| eprintln!("{l}"));
    let built: Vec<_> = results.into_iter().map(|r| r.unwrap_or_else(|f| panic!("{f}"))).collect();
    let bytes = fs::read(&built[1].path).unwrap();
    let sms: Vec<u32> = lib_sms.iter().map(|s| s.0).collect();
    let a = kiln_validate::ar::check(&bytes, &sms, &[], &[]).unwrap();
    assert_eq!(a.members.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), [name.as_str()]);
    for k in ["probe_gather_checked", "probe_saxpy_f32", "probe_warp_sum_f16"] {
        assert!(a.functions().iter().any(|f| f.contains(k)), "{k} in {:?}", a.functions());
    }
    fs::remove_dir_all(dir).unwrap();
}

/// A job's output that is a link (here to a file outside the job folder) is
/// refused, naming the job and the output, and nothing enters the cache:
/// the hash, the cache and every reader would follow it out of the sandbox.
#[test]
fn a_job_whose_output_is_a_symlink_is_refused() {
    let (_pins, runner) = toolchain();
    let dir = temp("graph-symlink");
    let cache = Cache::at(dir.join("cache")).unwrap();
    let outside = dir.join("outside.txt");
    fs::write(&outside, "not the job's").unwrap();
    let target = outside.clone();
    let nodes = vec![Node::step(
        Step {
            label: "a linking step".into(),
            output: "out.bin".into(),
            recipe: "link v1".into(),
            staged: Vec::new(),
            cost: 1,
            run: Box::new(move |io| {
                std::os::unix::fs::symlink(&target, io.path("out.bin"))?;
                Ok(())
            }),
        },
        Vec::new(),
    )];
    let opts = kiln_build::Options { workers: 1, ..Default::default() };
    let results = run_graph(&runner, &cache, &nodes, &opts, &|l| eprintln!("{l}"));
    let failed = results[0].as_ref().expect_err("a link output must be refused");
    assert!(failed.tail.contains("a linking step") && failed.tail.contains("out.bin") && failed.tail.contains("symbolic link"), "{failed}");
    assert!(!cache.root().join("objects").exists() || walk_has_no(&cache.root().join("objects"), "out.bin"), "nothing was cached");
}

fn walk_has_no(dir: &std::path::Path, name: &str) -> bool {
    fs::read_dir(dir).unwrap().flatten().all(|e| e.file_name() != name && (!e.path().is_dir() || walk_has_no(&e.path(), name)))
}
