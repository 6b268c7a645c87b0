//! Kernel parity in the dist this checkout last wrote (`target/dist`, from
//! `cargo xtask dist`): for every module, every AMD code object carries every
//! kernel of every CUDA artifact at or below the level the HIP shims emulate
//! (sm_89's, compute_89's: candle's fp8 E4M3 kernels included), and records
//! the launch geometry of its arch's row in kiln-target. `dist` itself refuses
//! a gap when it builds (the builder test
//! `amd_objects_carry_the_sm_89_kernels_and_a_gap_fails_the_dist` proves it with
//! a real compile); this reads back what was published. Without a
//! `target/dist`, the test is listed as ignored, saying why.

use std::fs;

use kiln_manifest::{Backend, Kind, Manifest};
use kiln_pins::{HipArch, Target};
use kiln_validate::compare::KernelSets;
use libtest_mimic::{Arguments, Failed, Trial};

mod common;
use common::repo;

/// Every gap and geometry mismatch in `m`, one line each.
fn problems(m: &Manifest) -> Vec<String> {
    let mut out = Vec::new();
    let mut modules: Vec<&str> = m.artifacts.iter().filter(|a| a.kind == Kind::Hsaco).map(|a| a.module.as_str()).collect();
    modules.dedup();
    for module in modules {
        let mut sets = KernelSets::default();
        let (mut amd, mut references) = (Vec::new(), Vec::new());
        for a in m.artifacts.iter().filter(|a| a.module == module) {
            match (a.kind, Target::parse(&a.arch)) {
                (Kind::Hsaco, _) => amd.push(a.arch.clone()),
                (Kind::Ptx | Kind::Cubin, Ok(Target::Ptx(sm) | Target::Sass(sm))) if sm.0 <= kiln_build::hip::EMULATED_CUDA_ARCH => {
                    references.push(a.arch.clone())
                }
                _ => continue,
            }
            sets.add(&a.arch, &a.kernels);
        }
        if references.is_empty() {
            out.push(format!("module {module}: no CUDA artifact at or below sm_{} to compare with", kiln_build::hip::EMULATED_CUDA_ARCH));
        }
        out.extend(references.iter().flat_map(|r| sets.covering(r, &amd)).map(|d| format!("module {module}: {d}")));
    }
    for a in &m.artifacts {
        // Code objects: their row's; CUDA artifacts (and bundles, which hold code objects): none.
        let want = match a.kind {
            Kind::Hsaco => {
                let row = HipArch::parse(&a.arch).unwrap().row();
                Some((row.geometry_defines(), row.wavefront_size()))
            }
            _ => None,
        };
        let have = a.geometry.as_ref().map(|g| (g.defines.iter().map(String::as_str).collect::<Vec<_>>(), g.wavefront_size));
        if have != want || a.geometry.as_ref().is_some_and(|g| g.cuda_arch != kiln_build::hip::EMULATED_CUDA_ARCH * 10) {
            out.push(format!("{}: geometry {:?}, kiln-target says {want:?}", a.path, a.geometry));
        }
    }
    out
}

fn check_the_written_dist() -> Result<(), Failed> {
    let path = repo().join("target/dist/manifest.json");
    let m = Manifest::from_json(&fs::read_to_string(&path)?, &path.display().to_string()).map_err(|e| e.to_string())?;
    let p = problems(&m);
    let hsaco = m.artifacts.iter().filter(|a| a.kind == Kind::Hsaco).count();
    if hsaco == 0 {
        return Err(format!("{}: no AMD code object to check", path.display()).into());
    }
    if !p.is_empty() {
        return Err(format!("{} problem(s) in {}:\n  {}", p.len(), path.display(), p.join("\n  ")).into());
    }
    Ok(())
}

/// The check itself fails on a gap and on a wrong or missing geometry: the
/// written dist with one fp8 kernel taken out of an AMD object, and so on.
fn the_check_fails_on_a_gap_and_a_wrong_geometry() -> Result<(), Failed> {
    let geometry = |defines: &[&str], wave| kiln_manifest::Geometry {
        cuda_arch: 890,
        defines: defines.iter().map(|d| d.to_string()).collect(),
        wavefront_size: wave,
    };
    let art = |arch: &str, kind, kernels: &[&str]| kiln_manifest::Artifact {
        module: "unary".into(),
        backend: if kind == Kind::Hsaco { Backend::Hip } else { Backend::Cuda },
        arch: arch.into(),
        kind,
        path: format!("{arch}/unary"),
        size: 1,
        sha256: "00".repeat(32),
        kernels: kernels.iter().map(|k| k.to_string()).collect(),
        ptx_version: None,
        resources: Vec::new(),
        geometry: (kind == Kind::Hsaco).then(|| if arch == "gfx90a" { geometry(&[], 64) } else { geometry(&["RDNA3"], 32) }),
    };
    let good = || {
        let mut m = Manifest {
            schema: 1,
            kiln: "0".into(),
            source: kiln_manifest::Source { crate_name: "c".into(), version: "0".into(), sha256: String::new() },
            toolchain: kiln_manifest::Toolchain {
                identity: String::new(),
                distribution: String::new(),
                suite: String::new(),
                packages: Default::default(),
                reported: Default::default(),
            },
            targets: kiln_manifest::Targets { hip: vec![], code_object_version: 5, cuda_ptx: vec![], cuda_sass: vec![] },
            artifacts: vec![],
        };
        m.artifacts = vec![
            art("sm_89", Kind::Cubin, &["ucopy_f32", "ucopy_f8_e4m3"]),
            art("sm_90", Kind::Cubin, &["ucopy_f32", "ucopy_f8_e4m3", "later"]),
            art("gfx1100", Kind::Hsaco, &["ucopy_f32", "ucopy_f8_e4m3"]),
            art("gfx90a", Kind::Hsaco, &["ucopy_f32", "ucopy_f8_e4m3"]),
        ];
        m
    };
    let expect = |m: &Manifest, want: &str| -> Result<(), Failed> {
        let p = problems(m);
        if p.len() == 1 && p[0].contains(want) {
            Ok(())
        } else {
            Err(format!("expected one problem with `{want}`, got {p:?}").into())
        }
    };
    if !problems(&good()).is_empty() {
        return Err(format!("a good manifest: {:?}", problems(&good())).into());
    }
    let mut m = good();
    m.artifacts[2].kernels.pop();
    expect(&m, "module unary: gfx1100 lacks 1 kernel(s) that sm_89 has: ucopy_f8_e4m3")?;
    let mut m = good();
    m.artifacts[3].geometry = Some(geometry(&["RDNA3"], 64));
    expect(&m, "gfx90a/unary: geometry")?;
    let mut m = good();
    m.artifacts[2].geometry = None;
    expect(&m, "gfx1100/unary: geometry None")?;
    let mut m = good();
    m.artifacts[0].geometry = Some(geometry(&[], 32));
    expect(&m, "sm_89/unary: geometry Some")
}

fn main() {
    let args = Arguments::from_args();
    let written = repo().join("target/dist/manifest.json").exists();
    let mut trials = vec![Trial::test("the_check_fails_on_a_gap_and_a_wrong_geometry", the_check_fails_on_a_gap_and_a_wrong_geometry)];
    let dist = Trial::test("every_amd_object_in_target_dist_has_sm_89s_kernels_and_its_geometry", check_the_written_dist);
    trials.push(if written {
        dist
    } else {
        eprintln!("parity: SKIPPED every_amd_object_in_target_dist_has_sm_89s_kernels_and_its_geometry: no target/dist/manifest.json (run `cargo xtask dist` first)");
        dist.with_ignored_flag(true)
    });
    libtest_mimic::run(&args, trials).exit();
}
