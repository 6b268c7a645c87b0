//! quantized: the GGML kernels candle's CUDA quantized path launches —
//! `quantize_q8_1` (activations), `mul_mat_vec_*_q8_1_cuda{1..8}` (MMVQ, batch
//! 1-8), `mul_mat_*` (MMQ), `dequantize_mul_mat_vec_*` (DMMV),
//! `dequantize_block_*_{f32,f16}`, `get_rows_*` (quantized embedding) and
//! `indexed_moe_forward_*_q8_1` — for legacy (Q4_0, Q5_1, Q8_0) and k-quant
//! (Q2K, Q4K, Q6K) types. Weights are quantized by candle's CPU code; the
//! reference is candle's CPU `QMatMul`, `dequantize` and `embedding`.

use candle_core::quantized::ggml_file::qtensor_from_ggml;
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device as Cpu, Module, Tensor};
use half::f16;
use kiln_loader::{KernelArgs, LaunchConfig};

use crate::support::{case, values, ArgsExt, Buf, Case, Ctx, Tol};

const MATRIX_ROW_PADDING: usize = 512;
const WARP: u32 = 32;

/// The kernel-name stem of a type: `q4_0`, `q4_K`.
fn stem(t: GgmlDType) -> &'static str {
    match t {
        GgmlDType::Q4_0 => "q4_0",
        GgmlDType::Q4_1 => "q4_1",
        GgmlDType::Q5_0 => "q5_0",
        GgmlDType::Q5_1 => "q5_1",
        GgmlDType::Q8_0 => "q8_0",
        GgmlDType::Q2K => "q2_K",
        GgmlDType::Q3K => "q3_K",
        GgmlDType::Q4K => "q4_K",
        GgmlDType::Q5K => "q5_K",
        GgmlDType::Q6K => "q6_K",
        GgmlDType::F32 => "f32",
        GgmlDType::F16 => "f16",
        _ => "other",
    }
}

fn is_k(t: GgmlDType) -> bool {
    matches!(t, GgmlDType::Q2K | GgmlDType::Q3K | GgmlDType::Q4K | GgmlDType::Q5K | GgmlDType::Q6K | GgmlDType::Q8K)
}

/// Random f32 weights or activations in [-1, 1).
fn random(cx: &Ctx, shape: &[usize]) -> anyhow::Result<Tensor> {
    let n = shape.iter().product();
    Ok(Tensor::from_vec(cx.rng().vec::<f32>(n, -1.0, 1.0), shape, &Cpu::Cpu)?)
}

/// The weights on the device as candle lays them out: the quantized blocks,
/// then MATRIX_ROW_PADDING elements' worth of zeros (the kernels read past the
/// last row's end).
fn upload_q(cx: &Ctx, q: &QTensor) -> anyhow::Result<Buf> {
    let t = q.dtype();
    let mut bytes: Vec<u8> = q.data()?.into_owned();
    bytes.extend(std::iter::repeat_n(0u8, MATRIX_ROW_PADDING * t.type_size() / t.block_size()));
    cx.upload(&bytes)
}

fn poisoned_f32(cx: &Ctx, n: usize) -> anyhow::Result<Buf> {
    cx.upload(&vec![f32::NAN; n])
}

/// candle's `quantize_q8_1`: `rows` rows of `k` f32, each padded to a multiple
/// of 512 and quantized to Q8_1 blocks (36 bytes per 32 values).
fn quantize_q8_1(cx: &Ctx, x: &Buf, k: usize, rows: usize) -> anyhow::Result<Buf> {
    let k_padded = k.next_multiple_of(MATRIX_ROW_PADDING);
    let bytes = rows * k_padded / 32 * 36;
    let out = cx.upload(&vec![0xABu8; bytes])?;
    let mut a = KernelArgs::new();
    a.buf(x).buf(&out).push(k as i32).push(k_padded as i32);
    let cfg = LaunchConfig { grid: (k_padded.div_ceil(256) as u32, rows as u32, 1), block: (256, 1, 1), shared_mem_bytes: 0 };
    cx.launch("quantized", "quantize_q8_1", cfg, &mut a)?;
    Ok(out)
}

/// Matmul outputs: the device quantizes the activations to Q8_1, candle's CPU
/// to Q8_0 or Q8_K, so they differ by a few quantization steps; a wrong row,
/// block or scale is off by the outputs' own size.
fn matmul_tol(want: &[f32]) -> Tol {
    let max = want.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
    Tol { atol: 0.02 * max, rtol: 0.0 }
}

fn quantize_q8_1_test(cx: &Ctx) -> anyhow::Result<()> {
    // 700 is not a multiple of 32 nor of 512: a partial block, then padding.
    let (rows, k) = (3usize, 700usize);
    let k_padded = k.next_multiple_of(MATRIX_ROW_PADDING);
    let x = random(cx, &[rows, k])?;
    let xb = cx.upload(&values::<f32>(&x)?)?;
    let got = cx.download::<u8>(&quantize_q8_1(cx, &xb, k, rows)?)?;
    if cx.is_dry() {
        return Ok(());
    }
    let padded = x.pad_with_zeros(1, 0, k_padded - k)?;
    let want = QTensor::quantize(&padded, GgmlDType::Q8_1)?.data()?.into_owned();
    if got.len() != want.len() {
        anyhow::bail!("quantize_q8_1: {} bytes, candle's Q8_1 has {}", got.len(), want.len());
    }
    let (mut gd, mut wd, mut gq, mut wq) = (vec![], vec![], vec![], vec![]);
    for (g, w) in got.chunks(36).zip(want.chunks(36)) {
        let d = |b: &[u8]| f16::from_le_bytes([b[0], b[1]]);
        gd.push(d(g));
        wd.push(d(w));
        // ds.y: the device keeps the sum of the inputs, candle's CPU sum(qs)·d;
        // both say the same to within half a step per value.
        let (gs, ws, step) = (f16::from_le_bytes([g[2], g[3]]).to_f64(), f16::from_le_bytes([w[2], w[3]]).to_f64(), d(w).to_f64());
        if (gs - ws).abs() > 16.0 * step + 0.01 * ws.abs() + 1e-3 {
            anyhow::bail!("quantize_q8_1: block sum {gs}, candle's {ws} (step {step})");
        }
        gq.extend(g[4..].iter().map(|q| *q as i8 as f32));
        wq.extend(w[4..].iter().map(|q| *q as i8 as f32));
    }
    cx.check("quantize_q8_1 scales", &gd, &wd, Tol::EXACT.scale(0.0))?;
    // x/d and x·(1/d) may round a tie differently.
    cx.check("quantize_q8_1 quants", &gq, &wq, Tol { atol: 1.0, rtol: 0.0 })
}

const K: usize = 768; // not a multiple of 512: the activations get padding

fn mmvq(cx: &Ctx, t: GgmlDType) -> anyhow::Result<()> {
    let nrows = 300;
    let w = random(cx, &[nrows, K])?;
    let q = QTensor::quantize(&w, t)?;
    let qb = upload_q(cx, &q)?;
    let mm = QMatMul::from_qtensor(q)?;
    for b in [1usize, 3, 8] {
        let kernel = format!("mul_mat_vec_{}_q8_1_cuda{b}", stem(t));
        let x = random(cx, &[b, K])?;
        let want = values::<f32>(&mm.forward(&x)?)?;
        let xb = cx.upload(&values::<f32>(&x)?)?;
        let yq = quantize_q8_1(cx, &xb, K, b)?;
        let out = poisoned_f32(cx, nrows * b)?;
        let (blocks, warps) = match b {
            1 => (nrows as u32, 4),
            2..=4 => ((nrows as u32).div_ceil(2), 4),
            _ => ((nrows as u32).div_ceil(2), 2),
        };
        let mut a = KernelArgs::new();
        a.buf(&qb).buf(&yq).buf(&out);
        a.push(K as i32).push(nrows as i32).push(K.next_multiple_of(MATRIX_ROW_PADDING) as i32).push(nrows as i32);
        cx.launch("quantized", &kernel, LaunchConfig { grid: (blocks, 1, 1), block: (WARP, warps, 1), shared_mem_bytes: 0 }, &mut a)?;
        cx.check(&format!("{kernel} {nrows}x{K} by {b}x{K}"), &cx.download::<f32>(&out)?, &want, matmul_tol(&want))?;
    }
    Ok(())
}

fn mmq(cx: &Ctx, t: GgmlDType) -> anyhow::Result<()> {
    let kernel = format!("mul_mat_{}", stem(t));
    let (mmq_x, mmq_y) = match t {
        GgmlDType::Q4_0 | GgmlDType::Q4_1 | GgmlDType::Q2K | GgmlDType::Q4K | GgmlDType::Q5K => (64, 128),
        GgmlDType::Q5_0 | GgmlDType::Q5_1 | GgmlDType::Q8_0 => (128, 64),
        GgmlDType::Q3K => (128, 128),
        _ => (64, 64),
    };
    // Neither 300 rows nor 13 columns fill a tile.
    let (n, cols) = (300usize, 13usize);
    let w = random(cx, &[n, K])?;
    let q = QTensor::quantize(&w, t)?;
    let qb = upload_q(cx, &q)?;
    let x = random(cx, &[cols, K])?;
    let want = values::<f32>(&QMatMul::from_qtensor(q)?.forward(&x)?)?;
    let xb = cx.upload(&values::<f32>(&x)?)?;
    let yq = quantize_q8_1(cx, &xb, K, cols)?;
    let out = poisoned_f32(cx, n * cols)?;
    let mut a = KernelArgs::new();
    a.buf(&qb).buf(&yq).buf(&out);
    a.push(K as i32).push(n as i32).push(cols as i32).push(K.next_multiple_of(MATRIX_ROW_PADDING) as i32).push(n as i32);
    let cfg = LaunchConfig { grid: (n.div_ceil(mmq_y) as u32, cols.div_ceil(mmq_x) as u32, 1), block: (WARP, 4, 1), shared_mem_bytes: 0 };
    cx.launch("quantized", &kernel, cfg, &mut a)?;
    cx.check(&format!("{kernel} {n}x{K} by {cols}x{K}"), &cx.download::<f32>(&out)?, &want, matmul_tol(&want))
}

/// DMMV multiplies by the f32 activations themselves: the reference is the
/// dequantized weights times them, in f32.
fn dmmv(cx: &Ctx, t: GgmlDType) -> anyhow::Result<()> {
    let kernel = match t {
        GgmlDType::Q2K => "dequantize_mul_mat_vec_q2_k".to_string(),
        GgmlDType::Q3K => "dequantize_mul_mat_vec_q3_k".to_string(),
        GgmlDType::Q4K => "dequantize_mul_mat_vec_q4_k".to_string(),
        GgmlDType::Q5K => "dequantize_mul_mat_vec_q5_k".to_string(),
        GgmlDType::Q6K => "dequantize_mul_mat_vec_q6_k".to_string(),
        _ => format!("dequantize_mul_mat_vec_{}_cuda", stem(t)),
    };
    let nrows = 300;
    let q = QTensor::quantize(&random(cx, &[nrows, K])?, t)?;
    let qb = upload_q(cx, &q)?;
    let x = random(cx, &[K])?;
    let want = values::<f32>(&q.dequantize(&Cpu::Cpu)?.matmul(&x.reshape((K, 1))?)?)?;
    let xb = cx.upload(&values::<f32>(&x)?)?;
    let out = poisoned_f32(cx, nrows)?;
    let mut a = KernelArgs::new();
    a.buf(&qb).buf(&xb).buf(&out).push(K as i32).push(nrows as i32);
    cx.launch("quantized", &kernel, LaunchConfig { grid: (nrows as u32, 1, 1), block: (WARP, 1, 1), shared_mem_bytes: 0 }, &mut a)?;
    let max = want.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
    cx.check(&format!("{kernel} {nrows}x{K}"), &cx.download::<f32>(&out)?, &want, Tol { atol: 1e-3 * max, rtol: 1e-4 })
}

fn dequantize(cx: &Ctx, t: GgmlDType, to_f16: bool) -> anyhow::Result<()> {
    let kernel = format!("dequantize_block_{}_{}", stem(t), if to_f16 { "f16" } else { "f32" });
    let el = 39 * 256;
    let q = QTensor::quantize(&random(cx, &[el])?, t)?;
    let qb = upload_q(cx, &q)?;
    let want = q.dequantize(&Cpu::Cpu)?;
    let nb = el.div_ceil(256) as u32;
    let (block, blocks) = match t {
        GgmlDType::Q5_0 | GgmlDType::Q5_1 => (256u32, el.div_ceil(2 * 256) as u32),
        GgmlDType::Q2K | GgmlDType::Q3K | GgmlDType::Q5K | GgmlDType::Q6K => (64, nb),
        _ => (32, nb),
    };
    let mut a = KernelArgs::new();
    let cfg = LaunchConfig { grid: (blocks, 1, 1), block: (block, 1, 1), shared_mem_bytes: 0 };
    let what = format!("{kernel} of {el}");
    if to_f16 {
        let want = values::<f16>(&want.to_dtype(candle_core::DType::F16)?)?;
        let out = cx.poisoned(&want)?;
        a.buf(&qb).buf(&out);
        if !is_k(t) {
            a.push(if matches!(t, GgmlDType::Q5_0 | GgmlDType::Q5_1) { el as i32 } else { (el / 32) as i32 });
        }
        cx.launch("quantized", &kernel, cfg, &mut a)?;
        cx.check(&what, &cx.download::<f16>(&out)?, &want, Tol { atol: 1e-3, rtol: 2e-3 })
    } else {
        let want = values::<f32>(&want)?;
        let out = cx.poisoned(&want)?;
        a.buf(&qb).buf(&out);
        if !is_k(t) {
            a.push(if matches!(t, GgmlDType::Q5_0 | GgmlDType::Q5_1) { el as i32 } else { (el / 32) as i32 });
        }
        cx.launch("quantized", &kernel, cfg, &mut a)?;
        cx.check(&what, &cx.download::<f32>(&out)?, &want, Tol { atol: 1e-5, rtol: 1e-5 })
    }
}

/// Quantized embedding: rows of a quantized matrix, dequantized to f32.
fn get_rows(cx: &Ctx, t: GgmlDType) -> anyhow::Result<()> {
    let kernel = format!("get_rows_{}", stem(t));
    let (rows, hidden, n_ids) = (40usize, K, 23usize);
    let q = QTensor::quantize(&random(cx, &[rows, hidden])?, t)?;
    let ids: Vec<u32> = (0..n_ids).map(|_| cx.rng().int(0, rows as i64 - 1) as u32).collect();
    let want = values::<f32>(&q.embedding(&Tensor::from_vec(ids.clone(), n_ids, &Cpu::Cpu)?)?)?;
    let (qb, ib, out) = (upload_q(cx, &q)?, cx.upload(&ids)?, poisoned_f32(cx, n_ids * hidden)?);
    let (block, grid_y) = match t {
        GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16 => (256u32, hidden.div_ceil(256)),
        GgmlDType::Q2K | GgmlDType::Q3K | GgmlDType::Q5K | GgmlDType::Q6K => (64, hidden / 256),
        GgmlDType::Q4K => (32, hidden / 256),
        _ => (256, hidden.div_ceil(512)),
    };
    let row_stride = hidden * t.type_size() / t.block_size();
    let mut a = KernelArgs::new();
    a.buf(&qb).buf(&ib).buf(&out).push(hidden as i64).push(row_stride);
    cx.launch("quantized", &kernel, LaunchConfig { grid: (n_ids as u32, grid_y as u32, 1), block: (block, 1, 1), shared_mem_bytes: 0 }, &mut a)?;
    cx.check(&format!("{kernel} {n_ids} of {rows}x{hidden}"), &cx.download::<f32>(&out)?, &want, Tol { atol: 1e-5, rtol: 1e-5 })
}

/// Mixture-of-experts: each (token, slot) multiplies its activations by the
/// expert its id names. The reference: candle's CPU QMatMul of that expert.
fn indexed_moe(cx: &Ctx, t: GgmlDType) -> anyhow::Result<()> {
    let kernel = format!(
        "indexed_moe_forward_{}_q8_1",
        match t {
            GgmlDType::Q8_0 => "q8_0",
            GgmlDType::Q2K => "q2k",
            GgmlDType::Q4K => "q4k",
            GgmlDType::Q6K => "q6k",
            _ => "other",
        }
    );
    let (experts, n, batch, topk) = (4usize, 70usize, 3usize, 2usize);
    let w = random(cx, &[experts, n, K])?;
    let q_all = QTensor::quantize(&w.reshape((experts * n, K))?, t)?;
    let q_bytes = q_all.data()?.into_owned();
    // Expert e as the kernel reads it: candle-kernels 0.11.1 steps from one
    // expert to the next by `n * k / QK_K` blocks (QK_K = 256) whatever the
    // type. Right for the k-quants (256 values a block); for Q8_0 (32 values a
    // block) it lands inside expert 0's weights, an upstream bug that kiln
    // compiles as it is (docs/gpu-tests.md). The reference reads the same bytes.
    let expert_bytes = n * K / t.block_size() * t.type_size();
    let stride_bytes = n * K / 256 * t.type_size();
    let expert = |e: usize| {
        let at = e * stride_bytes;
        qtensor_from_ggml(t, &q_bytes[at..at + expert_bytes], vec![n, K], &Cpu::Cpu)
    };
    let wb = upload_q(cx, &q_all)?;
    // Per-slot activations (input_dim1 = topk), then one row shared by the slots (input_dim1 = 1).
    for input_dim1 in [topk, 1] {
        let x = random(cx, &[batch, input_dim1, K])?;
        let ids: Vec<u32> = (0..batch * topk).map(|_| cx.rng().int(0, experts as i64 - 1) as u32).collect();
        let mut want = Vec::new();
        for bi in 0..batch {
            for j in 0..topk {
                let e = ids[bi * topk + j] as usize;
                let mm = QMatMul::from_qtensor(expert(e)?)?;
                let row = x.get(bi)?.get(if input_dim1 == 1 { 0 } else { j })?.reshape((1, K))?;
                want.extend(values::<f32>(&mm.forward(&row)?)?);
            }
        }
        let xb = cx.upload(&values::<f32>(&x)?)?;
        let xq = quantize_q8_1(cx, &xb, K, batch * input_dim1)?;
        let (ib, out) = (cx.upload(&ids)?, poisoned_f32(cx, batch * topk * n)?);
        let mut a = KernelArgs::new();
        a.buf(&wb).buf(&xq).buf(&ib).buf(&out);
        a.push(n as i32)
            .push(K as i32)
            .push(batch as i32)
            .push(topk as i32)
            .push(K.next_multiple_of(MATRIX_ROW_PADDING) as i32)
            .push(input_dim1 as i32);
        let cfg = LaunchConfig { grid: (n as u32, batch as u32, topk as u32), block: (WARP, 4, 1), shared_mem_bytes: 0 };
        cx.launch("quantized", &kernel, cfg, &mut a)?;
        cx.check(&format!("{kernel} input_dim1 {input_dim1}"), &cx.download::<f32>(&out)?, &want, matmul_tol(&want))?;
    }
    Ok(())
}

pub fn cases(out: &mut Vec<Case>) {
    out.push(case("quantized", "quantize_q8_1", quantize_q8_1_test));
    let types = [GgmlDType::Q4_0, GgmlDType::Q5_1, GgmlDType::Q8_0, GgmlDType::Q2K, GgmlDType::Q4K, GgmlDType::Q6K];
    for t in types {
        let s = stem(t);
        out.push(case("quantized", format!("mul_mat_vec_{s}_q8_1"), move |cx| mmvq(cx, t)));
        out.push(case("quantized", format!("mul_mat_{s}"), move |cx| mmq(cx, t)));
        out.push(case("quantized", format!("dequantize_mul_mat_vec_{s}"), move |cx| dmmv(cx, t)));
        out.push(case("quantized", format!("dequantize_block_{s}_f32"), move |cx| dequantize(cx, t, false)));
        out.push(case("quantized", format!("dequantize_block_{s}_f16"), move |cx| dequantize(cx, t, true)));
    }
    for t in [GgmlDType::F32, GgmlDType::F16, GgmlDType::Q4_0, GgmlDType::Q8_0, GgmlDType::Q4K, GgmlDType::Q6K] {
        out.push(case("quantized", format!("get_rows_{}", stem(t)), move |cx| get_rows(cx, t)));
    }
    for t in [GgmlDType::Q8_0, GgmlDType::Q4K] {
        out.push(case("quantized", format!("indexed_moe_forward_{}", stem(t)), move |cx| indexed_moe(cx, t)));
    }
}
