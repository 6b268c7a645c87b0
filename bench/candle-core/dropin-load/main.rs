//! First `load_module` of every candle kernel module through candle-core's own
//! path (`ctx.load_module(mdl.ptx().into())`, cudarc 0.19 as candle-core 0.11.1
//! calls it) with kiln's candle-kernels drop-in, on device 0. Per module: what
//! the drop-in's image holds (its plan), the time to build the image (inflate,
//! sha256, fatbin), the driver's load time, and two driver attributes of the
//! module's first kernel: BINARY_VERSION (the SASS it runs) and PTX_VERSION (the
//! virtual arch its code came from: 90 for kiln's sm_90 SASS, 89 when the
//! driver JIT-compiled the compute_89 PTX). One JSON line per module, then a
//! total. Run with a fresh CUDA_CACHE_PATH; KILN_PTX_ARCH=compute_89 forces PTX.
//! Built by bench/candle-core/setup.sh + dropin-load.sh (not a workspace member).

use std::time::Instant;

use candle_kernels as k;
use cudarc::driver::{sys::CUfunction_attribute_enum as Attr, CudaContext};

fn main() {
    let t_all = Instant::now();
    let t_ctx = Instant::now();
    let ctx = CudaContext::new(0).expect("a CUDA device");
    let ctx_ms = t_ctx.elapsed().as_secs_f64() * 1e3;
    let modules: [(&str, &k::Module); 11] = [
        ("affine", &k::AFFINE),
        ("binary", &k::BINARY),
        ("cast", &k::CAST),
        ("conv", &k::CONV),
        ("fill", &k::FILL),
        ("indexing", &k::INDEXING),
        ("quantized", &k::QUANTIZED),
        ("reduce", &k::REDUCE),
        ("sort", &k::SORT),
        ("ternary", &k::TERNARY),
        ("unary", &k::UNARY),
    ];
    let (mut image_total, mut load_total, mut bytes_total) = (0.0, 0.0, 0usize);
    for (name, m) in modules {
        let plan = k::kiln::image_plan(name);
        let t = Instant::now();
        let ptx: cudarc::nvrtc::Ptx = m.ptx().into();
        let image_ms = t.elapsed().as_secs_f64() * 1e3;
        let bytes = m.ptx().image().len();
        let t = Instant::now();
        let module = ctx.load_module(ptx).unwrap_or_else(|e| panic!("{name}: load_module failed: {e:?}"));
        let load_ms = t.elapsed().as_secs_f64() * 1e3;
        let kernel = k::kiln::manifest()
            .artifacts
            .iter()
            .find(|a| a.module == name && a.kind == k::kiln::Kind::Ptx)
            .and_then(|a| a.kernels.first().cloned())
            .expect("the manifest lists the module's kernels");
        let f = module.load_function(&kernel).unwrap_or_else(|e| panic!("{name}: {kernel}: {e:?}"));
        let binary = f.get_attribute(Attr::CU_FUNC_ATTRIBUTE_BINARY_VERSION).unwrap();
        let ptx_version = f.get_attribute(Attr::CU_FUNC_ATTRIBUTE_PTX_VERSION).unwrap();
        println!(
            "{{\"module\":\"{name}\",\"sass\":{:?},\"ptx\":{:?},\"image_bytes\":{bytes},\"image_ms\":{image_ms:.2},\"load_ms\":{load_ms:.2},\"kernel\":\"{kernel}\",\"binary_version\":{binary},\"ptx_version\":{ptx_version}}}",
            plan.sass, plan.ptx
        );
        image_total += image_ms;
        load_total += load_ms;
        bytes_total += bytes;
    }
    println!(
        "{{\"total\":true,\"devices\":{:?},\"context_ms\":{ctx_ms:.1},\"image_ms\":{image_total:.1},\"load_ms\":{load_total:.1},\"image_plus_load_ms\":{:.1},\"wall_ms\":{:.1},\"image_bytes\":{bytes_total}}}",
        k::kiln::cuda_devices(),
        image_total + load_total,
        t_all.elapsed().as_secs_f64() * 1e3
    );
}
