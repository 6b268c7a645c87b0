//! The fatbinary writer of the generated crates (template/main/src/fatbin.rs,
//! compiled here as it is shipped) against NVIDIA's own tools from the pinned
//! toolchain: for SASS, byte for byte what `fatbinary --compress=false`
//! writes from the same cubins; with PTX, `cuobjdump` lists every entry and
//! extracts each payload unchanged. The per-GPU choice (choose.rs) is checked
//! against the rules its module doc states.

#[path = "../../kiln-package/template/main/src/choose.rs"]
#[allow(dead_code)]
mod choose;
#[path = "../../kiln-package/template/main/src/fatbin.rs"]
#[allow(dead_code)]
mod fatbin;

use std::{fs, path::PathBuf};

use kiln_pins::Pins;

mod common;
use common::repo;
use kiln_toolchain::{sysroot, Cache, Mount, Runner};

fn runner() -> Runner {
    let pins = Pins::load(&repo().join("pins.toml")).unwrap();
    let cache = Cache::from_env().unwrap();
    let root = sysroot::provision(&cache, &pins, 4, &|l| eprintln!("{l}")).expect("the pinned toolchain provisions");
    Runner::new(root).unwrap()
}

struct Work {
    runner: Runner,
    dir: PathBuf,
}

impl Work {
    fn new(label: &str) -> Work {
        let dir = std::env::temp_dir().join(format!("kiln-fatbin-{label}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::copy(repo().join("kernels/probe/probe.cu"), dir.join("probe.cu")).unwrap();
        Work { runner: runner(), dir }
    }

    /// Runs a pinned tool in the sandbox with the work folder at /kiln/job; returns stdout.
    fn run(&self, argv: &[&str]) -> String {
        let mounts = [Mount { host: self.dir.clone(), at: "/kiln/job".into(), writable: true }];
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let out = self.runner.command(&mounts, "/kiln/job", &argv).output().unwrap();
        assert!(out.status.success(), "{argv:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    fn read(&self, name: &str) -> Vec<u8> {
        fs::read(self.dir.join(name)).unwrap()
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn probe(w: &Work) {
    for sm in ["80", "86", "90"] {
        w.run(&["nvcc", &format!("-arch=sm_{sm}"), "-cubin", "-O3", "-o", &format!("p{sm}.cubin"), "probe.cu"]);
    }
    w.run(&["nvcc", "--gpu-architecture=compute_80", "--ptx", "-O3", "-o", "p80.ptx", "probe.cu"]);
}

#[test]
fn sass_entries_match_nvidias_fatbinary_byte_for_byte() {
    let w = Work::new("sass");
    probe(&w);
    w.run(&[
        "fatbinary",
        "-64",
        "--compress=false",
        "--create=ref.fatbin",
        "--image3=kind=elf,sm=80,file=p80.cubin",
        "--image3=kind=elf,sm=86,file=p86.cubin",
        "--image3=kind=elf,sm=90,file=p90.cubin",
    ]);
    let (c80, c86, c90) = (w.read("p80.cubin"), w.read("p86.cubin"), w.read("p90.cubin"));
    let ours = fatbin::write(&[
        fatbin::Entry::Sass { sm: 80, elf: &c80 },
        fatbin::Entry::Sass { sm: 86, elf: &c86 },
        fatbin::Entry::Sass { sm: 90, elf: &c90 },
    ]);
    let reference = w.read("ref.fatbin");
    assert_eq!(ours.len(), reference.len(), "size differs from fatbinary's");
    assert!(ours == reference, "kiln's fatbin differs from fatbinary's at byte {:?}", ours.iter().zip(&reference).position(|(a, b)| a != b));
    // kiln's own reader agrees.
    let entries = kiln_validate::fatbin::read(&ours).unwrap();
    assert_eq!(entries.iter().map(|e| e.sm).collect::<Vec<_>>(), [80, 86, 90]);
}

#[test]
fn ptx_and_sass_entries_read_back_with_cuobjdump() {
    let w = Work::new("ptx");
    probe(&w);
    let (c90, ptx) = (w.read("p90.cubin"), String::from_utf8(w.read("p80.ptx")).unwrap());
    let image = fatbin::write(&[fatbin::Entry::Sass { sm: 90, elf: &c90 }, fatbin::Entry::Ptx { level: 80, text: &ptx }]);
    fs::write(w.dir.join("ours.fatbin"), &image).unwrap();
    let listing = w.run(&["cuobjdump", "-lelf", "-lptx", "ours.fatbin"]);
    assert!(listing.contains("ELF file    1: ours.1.sm_90.cubin") && listing.contains("PTX file    1: ours.1.sm_80.ptx"), "{listing}");
    w.run(&["cuobjdump", "-xelf", "all", "-xptx", "all", "ours.fatbin"]);
    assert!(w.read("ours.1.sm_90.cubin") == c90, "the SASS entry does not extract unchanged");
    let extracted = String::from_utf8(w.read("ours.1.sm_80.ptx")).unwrap();
    assert_eq!(extracted.trim_end_matches('\0'), ptx, "the PTX entry does not extract unchanged");
    // The header fields fatbinary writes for PTX: kind 1, ISA version from `.version`, the sm.
    let entries = kiln_validate::fatbin::read(&image).unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!((entries[1].kind, entries[1].sm, entries[1].compressed), (kiln_validate::fatbin::EntryKind::Ptx, 80, false));
    // The listed kernels of the SASS entry are the probe's.
    let sass = w.run(&["cuobjdump", "-sass", "ours.fatbin"]);
    for k in ["probe_saxpy_f32", "probe_warp_sum_f16", "probe_gather_checked"] {
        assert!(sass.contains(k), "{k} is not in the image's SASS:\n{}", &sass[..sass.len().min(2000)]);
    }
}

#[test]
fn each_gpu_gets_the_best_code_it_can_run() {
    let sass = [80, 86, 89, 90];
    let ptx = [80, 89];
    let p = choose::plan(&[90], &sass, &ptx, None);
    assert_eq!((p.sass, p.ptx, p.unserved), (vec![90], vec![], vec![]), "an H100 gets sm_90 SASS and no PTX");
    // An A10 (8.6) and an L4 (8.9) in one process: each its own SASS.
    let p = choose::plan(&[86, 89], &sass, &ptx, None);
    assert_eq!(p.sass, [86, 89]);
    // A Jetson Orin (8.7) runs no other sm's SASS (no binary compatibility on Tegra): compute_80 PTX.
    let p = choose::plan(&[87], &sass, &ptx, None);
    assert_eq!((p.sass, p.ptx), (vec![], vec![80]));
    // Blackwell (10.0, 12.0): no SASS of that major; the highest PTX at or below it.
    let p = choose::plan(&[100, 120], &sass, &ptx, None);
    assert_eq!((p.sass.clone(), p.ptx.clone()), (vec![], vec![89]));
    // A T4 (7.5) is below every level: nothing carried serves it, and it is said.
    let p = choose::plan(&[75, 90], &sass, &ptx, None);
    assert_eq!((p.sass, p.unserved), (vec![90], vec![75]));
    // KILN_PTX_ARCH forces the PTX path for every device.
    let p = choose::plan(&[90, 86], &sass, &ptx, Some(80));
    assert_eq!((p.sass, p.ptx), (vec![], vec![80]));
    // With no sm crate enabled, PTX only.
    assert_eq!(choose::plan(&[90], &[], &ptx, None).ptx, [89]);
}
