//! Runs candle's MMVQ and MMQ q4_0 launchers (candle-kernels 0.11.1's static
//! library) on the GPU, on fixed pseudo-random inputs, against a CPU
//! reference; writes the raw outputs so that two builds (`fat`: upstream's
//! objects with NVIDIA's runtime; `split`: kiln's host-only objects + its
//! runtime in src/launch.rs + per-sm cubins) can be compared byte for byte.
#[cfg(feature = "split")]
// kiln's runtime for the static library, as the drop-in carries it.
#[path = "../../../../crates/kiln-package/template/main/src/launch.rs"]
mod launch;

/// What the runtime loads for a library file (the drop-in's `library_image`):
/// here, the sm_90 cubin build.sh made of it, from `CUBIN_DIR`.
#[cfg_attr(not(feature = "split"), allow(dead_code))]
fn library_image(stem: &str) -> Result<&'static [u8], String> {
    let dir = std::env::var("CUBIN_DIR").map_err(|_| "CUBIN_DIR unset".to_string())?;
    let path = format!("{dir}/{stem}.sm_90.cubin");
    std::fs::read(&path).map(|b| &*Box::leak(b.into_boxed_slice())).map_err(|e| format!("{path}: {e}"))
}

use std::ffi::c_void;
use std::time::Instant;

extern "C" {
    fn launch_mmvq_gguf_quantize_q8_1_f32(x: *const c_void, vy: *mut c_void, kx: i32, kx_padded: i32, num_rows: i32, stream: *mut c_void);
    fn launch_mmvq_gguf_q4_0_f32_plain(
        vx: *const c_void,
        vy: *const c_void,
        dst: *mut c_void,
        ncols_x: i32,
        nrows_x: i32,
        stride_col_y: i32,
        stride_col_dst: i32,
        b_size: i32,
        stream: *mut c_void,
    );
    fn launch_mmq_quantize_q8_1_DS4(
        x: *const c_void,
        ids: *const i32,
        vy: *mut c_void,
        type_x: i32,
        ne00: i64,
        s01: i64,
        s02: i64,
        s03: i64,
        ne0: i64,
        ne1: i64,
        ne2: i64,
        ne3: i64,
        stream: *mut c_void,
    );
    fn moe_gemm_gguf(
        inputs: *const f32,
        weights: *const c_void,
        sorted_token_ids: *const i32,
        expert_ids: *const i32,
        topk_weights: *const f32,
        outputs: *mut c_void,
        num_experts: i32,
        topk: i32,
        size_m: i32,
        size_n: i32,
        size_k: i32,
        gguf_dtype: i32,
        stream: i64,
    );
    fn moe_gemm_wmma(
        input: *const c_void,
        weights: *const c_void,
        sorted_token_ids: *const i32,
        expert_ids: *const i32,
        topk_weights: *const f32,
        output: *mut c_void,
        expert_counts: *mut i32,
        expert_offsets: *mut i32,
        num_experts: i32,
        topk: i32,
        size_m: i32,
        size_n: i32,
        size_k: i32,
        dtype: i32,
        is_prefill: bool,
        stream: i64,
    );
    fn launch_mmq_gguf_q4_0(
        tmp_fixup: *mut c_void,
        x: *const c_void,
        y: *const c_void,
        dst: *mut c_void,
        ncols_x: i64,
        nrows_x: i64,
        ncols_y: i64,
        stride_row_x: i64,
        stride_col_dst: i64,
        cc: i32,
        nsm: i32,
        smpbo: i64,
        warp_size: i32,
        stream: *mut c_void,
    );
}

struct Cu {
    _lib: libloading::Library,
    alloc: unsafe extern "C" fn(*mut u64, usize) -> i32,
    htod: unsafe extern "C" fn(u64, *const c_void, usize) -> i32,
    dtoh: unsafe extern "C" fn(*mut c_void, u64, usize) -> i32,
    memset: unsafe extern "C" fn(u64, u8, usize) -> i32,
    sync: unsafe extern "C" fn(*mut c_void) -> i32,
    attr: unsafe extern "C" fn(*mut i32, i32, i32) -> i32,
}

fn ck(r: i32, what: &str) {
    assert_eq!(r, 0, "{what} failed: CUresult {r}");
}

fn cu() -> (Cu, *mut c_void) {
    unsafe {
        let lib = libloading::Library::new("libcuda.so.1").expect("libcuda.so.1");
        let init: libloading::Symbol<unsafe extern "C" fn(u32) -> i32> = lib.get(b"cuInit\0").unwrap();
        ck(init(0), "cuInit");
        let get: libloading::Symbol<unsafe extern "C" fn(*mut i32, i32) -> i32> = lib.get(b"cuDeviceGet\0").unwrap();
        let retain: libloading::Symbol<unsafe extern "C" fn(*mut *mut c_void, i32) -> i32> = lib.get(b"cuDevicePrimaryCtxRetain\0").unwrap();
        let set: libloading::Symbol<unsafe extern "C" fn(*mut c_void) -> i32> = lib.get(b"cuCtxSetCurrent\0").unwrap();
        let stream_create: libloading::Symbol<unsafe extern "C" fn(*mut *mut c_void, u32) -> i32> = lib.get(b"cuStreamCreate\0").unwrap();
        let mut dev = 0;
        ck(get(&mut dev, 0), "cuDeviceGet");
        let mut ctx = std::ptr::null_mut();
        ck(retain(&mut ctx, dev), "cuDevicePrimaryCtxRetain");
        ck(set(ctx), "cuCtxSetCurrent");
        let mut stream = std::ptr::null_mut();
        ck(stream_create(&mut stream, 1), "cuStreamCreate");
        let c = Cu {
            alloc: *lib.get(b"cuMemAlloc_v2\0").unwrap(),
            htod: *lib.get(b"cuMemcpyHtoD_v2\0").unwrap(),
            dtoh: *lib.get(b"cuMemcpyDtoH_v2\0").unwrap(),
            memset: *lib.get(b"cuMemsetD8_v2\0").unwrap(),
            sync: *lib.get(b"cuStreamSynchronize\0").unwrap(),
            attr: *lib.get(b"cuDeviceGetAttribute\0").unwrap(),
            _lib: lib,
        };
        (c, stream)
    }
}

impl Cu {
    fn upload(&self, bytes: &[u8], extra: usize) -> u64 {
        let mut p = 0;
        unsafe {
            ck((self.alloc)(&mut p, bytes.len() + extra), "cuMemAlloc");
            ck((self.memset)(p, 0, bytes.len() + extra), "cuMemsetD8");
            ck((self.htod)(p, bytes.as_ptr().cast(), bytes.len()), "cuMemcpyHtoD");
        }
        p
    }
    fn zeros(&self, n: usize) -> u64 {
        self.upload(&vec![0u8; n], 0)
    }
    fn download_f32(&self, p: u64, n: usize) -> Vec<f32> {
        let mut v = vec![0f32; n];
        unsafe { ck((self.dtoh)(v.as_mut_ptr().cast(), p, n * 4), "cuMemcpyDtoH") };
        v
    }
    fn attr(&self, a: i32) -> i32 {
        let mut v = 0;
        unsafe { ck((self.attr)(&mut v, a, 0), "cuDeviceGetAttribute") };
        v
    }
}

/// xorshift: the same inputs in every build.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn f32(&mut self) -> f32 {
        (self.next() % 20001) as f32 / 10000.0 - 1.0
    }
}

fn f16_bits(x: f32) -> u16 {
    // Normal halves only (|x| >= 2^-14, < 65520), the mantissa truncated: what the checks here need.
    let b = x.to_bits();
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    (((b >> 16) & 0x8000) as u16) | ((exp as u16) << 10) | (((b >> 13) & 0x3ff) as u16)
}
fn f16_value(h: u16) -> f32 {
    let s = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let e = ((h >> 10) & 0x1f) as i32;
    let frac = (h & 0x3ff) as f32 / 1024.0;
    match e {
        0 => s * frac * 2f32.powi(-14),
        31 => f32::NAN,
        _ => s * (1.0 + frac) * 2f32.powi(e - 15),
    }
}

/// q/64 for q in -64..=64: exact in f16.
fn f16_of_64ths(q: i32) -> u16 {
    if q == 0 {
        0
    } else {
        f16_bits(q as f32 / 64.0)
    }
}

/// q4_0 rows: per 32 values, a half scale and 16 bytes of nibbles (value = d * (q - 8)).
fn q4_0(rng: &mut Rng, rows: usize, k: usize) -> (Vec<u8>, Vec<f32>) {
    let mut bytes = Vec::new();
    let mut values = Vec::new();
    for _ in 0..rows {
        for _ in 0..k / 32 {
            let d = f16_bits(1.0 / 64.0 + (rng.next() % 1000) as f32 / 1000.0 * (3.0 / 64.0));
            bytes.extend_from_slice(&d.to_le_bytes());
            let qs: Vec<u8> = (0..16).map(|_| rng.next() as u8).collect();
            let mut block = [0f32; 32];
            for (j, q) in qs.iter().enumerate() {
                block[j] = f16_value(d) * ((q & 0xf) as f32 - 8.0);
                block[j + 16] = f16_value(d) * ((q >> 4) as f32 - 8.0);
            }
            bytes.extend_from_slice(&qs);
            values.extend_from_slice(&block);
        }
    }
    (bytes, values)
}

/// q8_0 rows: per 32 values, a half scale and 32 signed bytes (value = d * q).
fn q8_0(rng: &mut Rng, rows: usize, k: usize) -> (Vec<u8>, Vec<f32>) {
    let mut bytes = Vec::new();
    let mut values = Vec::new();
    for _ in 0..rows {
        for _ in 0..k / 32 {
            let d = f16_bits(1.0 / 64.0 + (rng.next() % 1000) as f32 / 1000.0 * (3.0 / 64.0));
            bytes.extend_from_slice(&d.to_le_bytes());
            for _ in 0..32 {
                let q = rng.next() as u8;
                bytes.push(q);
                values.push(f16_value(d) * (q as i8) as f32);
            }
        }
    }
    (bytes, values)
}

fn reference(w: &[f32], y: &[f32], rows: usize, k: usize, b: usize) -> Vec<f32> {
    let mut out = vec![0f32; rows * b];
    for bi in 0..b {
        for r in 0..rows {
            out[bi * rows + r] = (0..k).map(|i| w[r * k + i] as f64 * y[bi * k + i] as f64).sum::<f64>() as f32;
        }
    }
    out
}

fn max_rel(got: &[f32], want: &[f32]) -> f32 {
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    got.iter().zip(want).fold(0f32, |m, (g, w)| if g.is_nan() { f32::INFINITY } else { m.max((g - w).abs() / scale) })
}

fn main() {
    let build = if cfg!(feature = "split") { "split" } else { "fat" };
    let out_dir = std::env::var("OUT").unwrap_or_else(|_| ".".into());
    let (cu, stream) = cu();
    let (rows, k) = (4096usize, 4096usize);
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let (w_bytes, w_values) = q4_0(&mut rng, rows, k);
    let w = cu.upload(&w_bytes, 512 * 18 / 32);
    for (name, b) in [("mmvq", 4usize), ("mmq", 64usize)] {
        let y: Vec<f32> = (0..b * k).map(|_| rng.f32()).collect();
        let y_dev = cu.upload(unsafe { std::slice::from_raw_parts(y.as_ptr().cast::<u8>(), y.len() * 4) }, 0);
        let dst = cu.zeros(rows * b * 4);
        let k_padded = k.div_ceil(512) * 512;
        let t = Instant::now();
        unsafe {
            if name == "mmvq" {
                let scratch = cu.zeros(b * k_padded / 32 * 36);
                launch_mmvq_gguf_quantize_q8_1_f32(y_dev as _, scratch as _, k as i32, k_padded as i32, b as i32, stream);
                launch_mmvq_gguf_q4_0_f32_plain(
                    w as _,
                    scratch as _,
                    dst as _,
                    k as i32,
                    rows as i32,
                    (k_padded / 32) as i32,
                    rows as i32,
                    b as i32,
                    stream,
                );
            } else {
                let k_padded = k_padded.div_ceil(128) * 128;
                let scratch = cu.zeros(b * (k_padded / 128) * 144 + 128 * 144);
                let fixup = cu.zeros(256 * 128 * 128 * 4);
                launch_mmq_quantize_q8_1_DS4(
                    y_dev as _,
                    std::ptr::null(),
                    scratch as _,
                    0,
                    k as i64,
                    k as i64,
                    0,
                    0,
                    k_padded as i64,
                    b as i64,
                    1,
                    1,
                    stream,
                );
                let cc = cu.attr(75) * 100 + cu.attr(76) * 10;
                launch_mmq_gguf_q4_0(
                    fixup as _,
                    w as _,
                    scratch as _,
                    dst as _,
                    k as i64,
                    rows as i64,
                    b as i64,
                    (k / 32) as i64,
                    rows as i64,
                    cc,
                    cu.attr(16),
                    cu.attr(97) as i64,
                    cu.attr(10),
                    stream,
                );
            }
            ck((cu.sync)(stream), "cuStreamSynchronize");
        }
        let first = t.elapsed();
        let got = cu.download_f32(dst, rows * b);
        let want = reference(&w_values, &y, rows, k, b);
        let err = max_rel(&got, &want);
        let bytes: Vec<u8> = got.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(format!("{out_dir}/{build}-{name}.bin"), &bytes).unwrap();
        let line = format!(
            "{build} {name}: b={b} rows={rows} k={k}: max |gpu - cpu| / max|cpu| = {err:.2e}; first call (module load included) {:.1} ms",
            first.as_secs_f64() * 1e3
        );
        println!("{line}");
        assert!(err < 2e-2, "{build} {name}: GPU result differs from the CPU reference ({err})");
    }
    // MoE (moe_gguf.cu, Q8_0): 4 experts of [n, k], each of m tokens routed to expert t % 4;
    // its launcher allocates its scratch with cudaMallocAsync and frees it with cudaFreeAsync.
    let (experts, n, m) = (4usize, 1024usize, 32usize);
    let (w8_bytes, w8_values) = q8_0(&mut rng, experts * n, k);
    let w8 = cu.upload(&w8_bytes, 0);
    let x: Vec<f32> = (0..m * k).map(|_| rng.f32()).collect();
    let x_dev = cu.upload(unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<u8>(), x.len() * 4) }, 0);
    let ids: Vec<i32> = (0..m as i32).collect();
    let expert_of: Vec<i32> = (0..m as i32).map(|t| t % experts as i32).collect();
    let as_bytes = |v: &[i32]| unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), v.len() * 4) }.to_vec();
    let ids_dev = cu.upload(&as_bytes(&ids), 0);
    let experts_dev = cu.upload(&as_bytes(&expert_of), 0);
    let out = cu.zeros(m * n * 4);
    let t = Instant::now();
    unsafe {
        moe_gemm_gguf(
            x_dev as _,
            w8 as _,
            ids_dev as _,
            experts_dev as _,
            std::ptr::null(),
            out as _,
            experts as i32,
            1,
            m as i32,
            n as i32,
            k as i32,
            0,
            stream as i64,
        );
        ck((cu.sync)(stream), "cuStreamSynchronize");
    }
    let first = t.elapsed();
    let got = cu.download_f32(out, m * n);
    let mut want = vec![0f32; m * n];
    for tok in 0..m {
        let e = expert_of[tok] as usize;
        for r in 0..n {
            want[tok * n + r] = (0..k).map(|i| w8_values[(e * n + r) * k + i] as f64 * x[tok * k + i] as f64).sum::<f64>() as f32;
        }
    }
    let err = max_rel(&got, &want);
    let bytes: Vec<u8> = got.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(format!("{out_dir}/{build}-moe.bin"), &bytes).unwrap();
    println!(
        "{build} moe_gemm_gguf q8_0: experts={experts} n={n} k={k} m={m}: max |gpu - cpu| / max|cpu| = {err:.2e}; first call {:.1} ms",
        first.as_secs_f64() * 1e3
    );
    assert!(err < 2e-2, "{build} moe: GPU result differs from the CPU reference ({err})");

    // MoE with WMMA (moe_wmma.cu, f16, prefill): its launcher counts tokens per expert and
    // scans the counts with Thrust (CUB's DeviceScan: cudaMalloc, cudaFuncGetAttributes,
    // occupancy, cudaStreamSynchronize, ... in NVIDIA's runtime or kiln's).
    let (experts, n, k2, m) = (4usize, 256usize, 512usize, 64usize);
    let q = |rng: &mut Rng| (rng.next() % 129) as i32 - 64;
    let w16: Vec<i32> = (0..experts * n * k2).map(|_| q(&mut rng)).collect();
    let x16: Vec<i32> = (0..m * k2).map(|_| q(&mut rng)).collect();
    let halves = |v: &[i32]| v.iter().flat_map(|&q| f16_of_64ths(q).to_le_bytes()).collect::<Vec<u8>>();
    let w16_dev = cu.upload(&halves(&w16), 0);
    let x16_dev = cu.upload(&halves(&x16), 0);
    let expert_of = |t: usize| t % experts;
    let mut sorted: Vec<i32> = (0..m as i32).collect();
    sorted.sort_by_key(|&t| expert_of(t as usize));
    let sorted_experts: Vec<i32> = sorted.iter().map(|&t| expert_of(t as usize) as i32).collect();
    let sorted_dev = cu.upload(&as_bytes(&sorted), 0);
    let sorted_experts_dev = cu.upload(&as_bytes(&sorted_experts), 0);
    let counts = cu.zeros(experts * 4);
    let offsets = cu.zeros((experts + 1) * 4);
    let out16 = cu.zeros(m * n * 2);
    let t = Instant::now();
    unsafe {
        moe_gemm_wmma(
            x16_dev as _,
            w16_dev as _,
            sorted_dev as _,
            sorted_experts_dev as _,
            std::ptr::null(),
            out16 as _,
            counts as _,
            offsets as _,
            experts as i32,
            1,
            m as i32,
            n as i32,
            k2 as i32,
            0,
            true,
            stream as i64,
        );
        ck((cu.sync)(stream), "cuStreamSynchronize");
    }
    let first = t.elapsed();
    let mut raw = vec![0u16; m * n];
    unsafe { ck((cu.dtoh)(raw.as_mut_ptr().cast(), out16, m * n * 2), "cuMemcpyDtoH") };
    let got: Vec<f32> = raw.iter().map(|&h| f16_value(h)).collect();
    let mut want = vec![0f32; m * n];
    for tok in 0..m {
        let e = expert_of(tok);
        for r in 0..n {
            want[tok * n + r] = (0..k2).map(|i| (w16[(e * n + r) * k2 + i] as f64 / 64.0) * (x16[tok * k2 + i] as f64 / 64.0)).sum::<f64>() as f32;
        }
    }
    // candle-kernels 0.11.1 stores an f16 result as `static_cast<half>(float_to_half(x))`
    // (moe_utils.cuh): the half whose value is the integer of x's f16 bit pattern, not x. Both
    // builds do exactly that; the reference does it too, so that the check checks the rest.
    let upstream_store = |x: f32| if x.abs() < 1.0 / 16384.0 { 0.0 } else { f16_bits(x) as f32 };
    let want: Vec<f32> = want.iter().map(|&x| upstream_store(x)).collect();
    let err = max_rel(&got, &want);
    let bytes: Vec<u8> = raw.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(format!("{out_dir}/{build}-moe_wmma.bin"), &bytes).unwrap();
    println!("{build} moe_gemm_wmma f16 prefill (Thrust scan): experts={experts} n={n} k={k2} m={m}: max |gpu - cpu| / max|cpu| = {err:.2e} (the CPU result stored as upstream stores it); first call {:.1} ms", first.as_secs_f64() * 1e3);
    assert!(err < 1e-2, "{build} moe_wmma: GPU result differs from the CPU reference as upstream stores it ({err})");
    println!("{build}: every launcher agrees with the CPU reference");
}
