//! `load-bench`: cold-load every kernel module of a dist folder onto one GPU
//! through the loader, and say how long each took.
//!
//! Needs only the GPU driver (libcuda or libamdhip64), dlopened at run time.
//! Run it in a fresh process with `CUDA_CACHE_DISABLE=1` so that PTX is
//! JIT-compiled rather than read from the driver's cache.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use kiln_loader::{ArtifactSource, Backend, Device, DistDir, KernelArgs, LaunchConfig, ModuleStore, SelectOptions, StoreOptions};
use serde_json::json;

const USAGE: &str = "usage: load-bench [--dist DIR] [--backend cuda|hip] [--device N] [--prefer best|ptx]
                  [--module NAME]... [--out FILE.json] [--no-smoke]
       load-bench --dry-run ARCH [--dist DIR] [--prefer best|ptx] [--module NAME]...

Cold-loads every kernel module of a kiln dist folder on one GPU through kiln-loader
(select, sha256 and header checks, driver load) and prints per-module and total
milliseconds. Writes FILE.json and FILE.md (default load-bench-<backend>-<prefer>.json).

  --dist DIR      the dist folder (default: $KILN_DIST_DIR, else target/dist)
  --backend B     cuda or hip (default: cuda if libcuda loads, else hip)
  --device N      device ordinal (default 0)
  --prefer P      best: exact cubin/HSACO, else PTX; ptx: always the PTX path (CUDA)
  --module NAME   only this module (repeatable)
  --no-smoke      skip the check launch of fill_f32 after loading
  --dry-run ARCH  no device: select and check (sha256, header) each module for ARCH (sm_90, gfx90a)
Run with CUDA_CACHE_DISABLE=1 so that PTX is compiled, not read from the JIT cache.";

struct Opts {
    dist: PathBuf,
    backend: Option<Backend>,
    device: usize,
    force_ptx: bool,
    modules: Vec<String>,
    out: Option<PathBuf>,
    smoke: bool,
    dry_run: Option<String>,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        dist: std::env::var_os(kiln_loader::DIST_DIR_ENV).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(kiln_manifest::DIST_DIR)),
        backend: None,
        device: 0,
        force_ptx: false,
        modules: vec![],
        out: None,
        smoke: true,
        dry_run: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--dist" => o.dist = PathBuf::from(value("--dist")?),
            "--backend" => {
                o.backend = Some(match value("--backend")?.as_str() {
                    "cuda" => Backend::Cuda,
                    "hip" => Backend::Hip,
                    b => return Err(format!("--backend {b}: expected cuda or hip")),
                })
            }
            "--device" => o.device = value("--device")?.parse().map_err(|_| "--device takes a number".to_string())?,
            "--prefer" => {
                o.force_ptx = match value("--prefer")?.as_str() {
                    "best" => false,
                    "ptx" => true,
                    p => return Err(format!("--prefer {p}: expected best or ptx")),
                }
            }
            "--module" => o.modules.push(value("--module")?),
            "--out" => o.out = Some(PathBuf::from(value("--out")?)),
            "--no-smoke" => o.smoke = false,
            "--dry-run" => o.dry_run = Some(value("--dry-run")?),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(o)
}

fn ms(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

fn main() -> ExitCode {
    let opts = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("load-bench: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("load-bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(o: Opts) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(arch) = &o.dry_run {
        return dry_run(&o, arch);
    }
    let source = DistDir::open(&o.dist)?;
    let backend = match o.backend {
        Some(b) => b,
        None => match (kiln_loader::cuda_driver_available(), kiln_loader::hip::probe()) {
            (Ok(()), _) => Backend::Cuda,
            (Err(_), Ok(_)) => Backend::Hip,
            (Err(cuda), Err(hip)) => return Err(format!("no GPU driver: {cuda}; and {hip}").into()),
        },
    };
    let prefer = if o.force_ptx { "ptx" } else { "best" };
    let mut store_opts = StoreOptions::from_env();
    store_opts.select = SelectOptions { force_ptx: o.force_ptx, ..store_opts.select };
    let store = ModuleStore::with_options(source, store_opts);

    let t = Instant::now();
    let device = Device::open(backend, o.device)?;
    let open_time = t.elapsed();
    let info = device.info().clone();
    let cache_disable = std::env::var("CUDA_CACHE_DISABLE").unwrap_or_default();
    println!(
        "device {} {}: {} ({}, arch {}), {}; opened in {:.1} ms",
        backend.as_str(),
        info.ordinal,
        info.name,
        info.reported_arch,
        info.arch.name(),
        info.driver_version,
        ms(open_time)
    );
    if backend == Backend::Cuda && cache_disable != "1" {
        println!("note: CUDA_CACHE_DISABLE is not 1: PTX may come from the driver's JIT cache, not a cold compile");
    }

    let modules: Vec<String> =
        if o.modules.is_empty() { store.source().manifest().modules().into_iter().map(String::from).collect() } else { o.modules.clone() };
    println!(
        "{:<12} {:<11} {:<6} {:>10} {:>9} {:>9} {:>11} {:>11} {:>8}",
        "module", "arch", "kind", "bytes", "fetch ms", "check ms", "driver ms", "total ms", "kernels"
    );
    let mut rows = vec![];
    let wall = Instant::now();
    let mut loaded = vec![];
    for m in &modules {
        let t = Instant::now();
        let module = store.get(&device, m)?;
        let total = t.elapsed();
        let s = module.stats();
        let a = module.artifact();
        println!(
            "{:<12} {:<11} {:<6} {:>10} {:>9.2} {:>9.2} {:>11.2} {:>11.2}",
            m,
            a.arch,
            a.kind.as_str(),
            a.size,
            ms(s.fetch),
            ms(s.verify),
            ms(s.driver),
            ms(total)
        );
        rows.push(json!({
            "module": m, "arch": a.arch, "kind": a.kind.as_str(), "path": a.path, "bytes": a.size,
            "matched": format!("{:?}", module.matched()),
            "fetch_ms": ms(s.fetch), "check_ms": ms(s.verify), "driver_ms": ms(s.driver), "total_ms": ms(total),
        }));
        loaded.push(module);
    }
    let wall = wall.elapsed();

    // Outside the timing: every kernel the manifest lists must resolve.
    let mut resolved = 0usize;
    for (module, row) in loaded.iter().zip(rows.iter_mut()) {
        for k in &module.artifact().kernels {
            module.function(k)?;
            resolved += 1;
        }
        row["kernels"] = json!(module.artifact().kernels.len());
    }
    let driver_sum: f64 = rows.iter().map(|r| r["driver_ms"].as_f64().unwrap()).sum();
    let total_sum: f64 = rows.iter().map(|r| r["total_ms"].as_f64().unwrap()).sum();
    println!("total: {} modules in {:.2} ms wall ({:.2} ms in the driver); {resolved} kernels resolved", rows.len(), ms(wall), driver_sum);

    let smoke = if o.smoke && modules.iter().any(|m| m == "fill") { Some(smoke_test(&store, &device)?) } else { None };
    if let Some(s) = &smoke {
        println!("smoke: {s}");
    }

    let out = o.out.unwrap_or_else(|| PathBuf::from(format!("load-bench-{}-{prefer}.json", backend.as_str())));
    let manifest = store.source().manifest();
    let report = json!({
        "tool": "kiln load-bench",
        "kiln": env!("CARGO_PKG_VERSION"),
        "dist": o.dist.display().to_string(),
        "source": format!("{} {}", manifest.source.crate_name, manifest.source.version),
        "backend": backend.as_str(),
        "prefer": prefer,
        "device": { "ordinal": info.ordinal, "name": info.name, "arch": info.arch.name(), "reported_arch": info.reported_arch, "driver": info.driver_version },
        "env": { "CUDA_CACHE_DISABLE": cache_disable, "KILN_HIP_ARCH_COMPAT": std::env::var(kiln_loader::HIP_COMPAT_ENV).unwrap_or_default() },
        "device_open_ms": ms(open_time),
        "modules": rows,
        "total_wall_ms": ms(wall),
        "total_sum_ms": (total_sum * 1e3).round() / 1e3,
        "driver_sum_ms": (driver_sum * 1e3).round() / 1e3,
        "kernels_resolved": resolved,
        "smoke": smoke,
    });
    std::fs::write(&out, serde_json::to_string_pretty(&report)? + "\n")?;
    let md = out.with_extension("md");
    let mut f = std::fs::File::create(&md)?;
    writeln!(f, "# kiln load-bench: {} {} ({}), prefer {prefer}\n", backend.as_str(), info.name, info.arch.name())?;
    writeln!(
        f,
        "Driver {}; CUDA_CACHE_DISABLE={}; device opened in {:.1} ms.\n",
        info.driver_version,
        if cache_disable.is_empty() { "(unset)" } else { &cache_disable },
        ms(open_time)
    )?;
    writeln!(f, "| module | artifact | bytes | fetch ms | check ms | driver ms | total ms | kernels |")?;
    writeln!(f, "|---|---|---:|---:|---:|---:|---:|---:|")?;
    for r in report["modules"].as_array().unwrap() {
        writeln!(
            f,
            "| {} | {} {} | {} | {} | {} | {} | {} | {} |",
            r["module"].as_str().unwrap(),
            r["arch"].as_str().unwrap(),
            r["kind"].as_str().unwrap(),
            r["bytes"],
            r["fetch_ms"],
            r["check_ms"],
            r["driver_ms"],
            r["total_ms"],
            r["kernels"]
        )?;
    }
    writeln!(f, "| **all** | | | | | {:.2} | **{:.2}** (wall) | {resolved} |", driver_sum, ms(wall))?;
    if let Some(s) = &smoke {
        writeln!(f, "\nSmoke launch: {s}")?;
    }
    println!("wrote {} and {}", out.display(), md.display());
    Ok(())
}

/// Proves a loaded module runs: fill_f32 over 1M floats, read back, compared.
fn smoke_test<S: ArtifactSource>(store: &ModuleStore<S>, device: &Device) -> Result<String, Box<dyn std::error::Error>> {
    const N: usize = 1 << 20;
    let module = store.get(device, "fill")?;
    let fill = module.function("fill_f32")?;
    let out = device.alloc(N * 4)?;
    let mut args = KernelArgs::new();
    args.push_buffer(&out).push(1.5f32).push(N);
    // SAFETY: fill_f32(float* buf, float value, size_t numel) writes `numel` floats to `buf`, which holds N.
    unsafe { fill.launch(&LaunchConfig::for_elements(N as u32, 256), &mut args)? };
    device.synchronize()?;
    let host: Vec<f32> = out.to_vec()?;
    let wrong = host.iter().filter(|&&v| v != 1.5).count();
    if wrong != 0 {
        return Err(format!("fill_f32 left {wrong} of {N} values not 1.5").into());
    }
    Ok(format!("fill_f32 from {} wrote {N} floats, all correct", module.artifact().path))
}

/// What a device of `arch` would load, checked as the store checks it, without a device.
fn dry_run(o: &Opts, arch: &str) -> Result<(), Box<dyn std::error::Error>> {
    let arch = kiln_loader::DeviceArch::parse(arch)?;
    let mut opts = StoreOptions::from_env();
    opts.select.force_ptx = o.force_ptx;
    let store = ModuleStore::with_options(DistDir::open(&o.dist)?, opts);
    let modules: Vec<String> =
        if o.modules.is_empty() { store.source().manifest().modules().into_iter().map(String::from).collect() } else { o.modules.clone() };
    for m in &modules {
        let t = Instant::now();
        let sel = store.check(m, &arch)?;
        println!(
            "{m:<12} {:<11} {:<6} {:>10} bytes  checked in {:.2} ms",
            sel.artifact.arch,
            sel.artifact.kind.as_str(),
            sel.artifact.size,
            ms(t.elapsed())
        );
    }
    println!("{} modules for {arch}: all selected and verified", modules.len());
    Ok(())
}
