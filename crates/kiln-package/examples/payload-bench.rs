//! The crate-size side of the size / first-load trade-off (docs/packaging.md):
//! for each arch's artifacts in a dist folder, the bytes a crate carries at
//! several zstd levels and the time the generated crates' pure-Rust decoder
//! (ruzstd) takes to inflate them at first use. The driver side (load times
//! on a GPU) is load-bench's.
//!
//!   cargo run --release -p kiln-package --example payload-bench -- [DIST] [--out FILE.md]

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};

const LEVELS: [i32; 4] = [3, 9, 19, 22];
const CHOSEN: i32 = kiln_package::compress::LEVEL;
const RUNS: usize = 5;

fn inflate_ms(z: &[u8], want: usize) -> Result<f64> {
    let mut best = f64::MAX;
    for _ in 0..RUNS {
        let t = Instant::now();
        let mut r = z;
        let mut d = ruzstd::decoding::StreamingDecoder::new(&mut r).context("not zstd")?;
        let mut out = Vec::with_capacity(want);
        d.read_to_end(&mut out)?;
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(out.len() == want, "inflated {} bytes, want {want}", out.len());
    }
    Ok(best)
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut dist = PathBuf::from("target/dist");
    let mut out = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--out" => out = Some(PathBuf::from(args.next().context("--out needs a file")?)),
            "-h" | "--help" => {
                println!("payload-bench [DIST] [--out FILE.md]: zstd sizes and ruzstd inflate times per arch of a dist folder");
                return Ok(());
            }
            _ => dist = PathBuf::from(a),
        }
    }
    let path = dist.join("manifest.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}: run `cargo xtask dist` first", dist.display()))?;
    let manifest = kiln_manifest::Manifest::from_json(&text, &path.display().to_string())?;
    // (arch, kind) -> artifact paths
    let mut groups: BTreeMap<(String, &str), Vec<String>> = BTreeMap::new();
    for a in &manifest.artifacts {
        groups.entry((a.arch.clone(), a.kind.as_str())).or_default().push(a.path.clone());
    }
    let mut md = String::new();
    md.push_str("| arch | kind | files | raw MB |");
    for l in LEVELS {
        md.push_str(&format!(" zstd-{l} MB |"));
    }
    md.push_str(&format!(" ratio at {CHOSEN} | ruzstd inflate ms (zstd-{CHOSEN}, all files, best of {RUNS}) | inflate MB/s |\n|---|---|---:|---:|"));
    for _ in LEVELS {
        md.push_str("---:|");
    }
    md.push_str("---:|---:|---:|\n");
    for ((arch, kind), paths) in &groups {
        let raw: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(dist.join(p)).with_context(|| p.clone())).collect::<Result<_>>()?;
        let raw_total: usize = raw.iter().map(Vec::len).sum();
        let mut sizes = Vec::new();
        let mut chosen = Vec::new();
        for l in LEVELS {
            let zs: Vec<Vec<u8>> = raw.iter().map(|r| zstd::bulk::compress(r, l)).collect::<std::io::Result<_>>()?;
            sizes.push(zs.iter().map(Vec::len).sum::<usize>());
            if l == CHOSEN {
                chosen = zs;
            }
        }
        let ms: f64 = chosen.iter().zip(&raw).map(|(z, r)| inflate_ms(z, r.len())).sum::<Result<f64>>()?;
        let zc = sizes[LEVELS.iter().position(|&l| l == CHOSEN).unwrap()];
        let mb = |n: usize| format!("{:.2}", n as f64 / 1e6);
        let mut row = format!("| {arch} | {kind} | {} | {} |", paths.len(), mb(raw_total));
        for s in &sizes {
            row.push_str(&format!(" {} |", mb(*s)));
        }
        row.push_str(&format!(" {:.2} | {:.1} | {:.0} |\n", raw_total as f64 / zc as f64, ms, raw_total as f64 / 1e6 / (ms / 1e3)));
        eprint!("{row}");
        md.push_str(&row);
    }
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string()))
        .unwrap_or_default();
    let head = format!(
        "payload-bench on {} ({} cores), dist {} ({} artifacts), ruzstd 0.9, release build.\n\n",
        cpu,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        dist.display(),
        manifest.artifacts.len()
    );
    print!("{head}{md}");
    if let Some(o) = out {
        std::fs::write(&o, format!("{head}{md}")).with_context(|| o.display().to_string())?;
        eprintln!("wrote {}", o.display());
    }
    Ok(())
}
