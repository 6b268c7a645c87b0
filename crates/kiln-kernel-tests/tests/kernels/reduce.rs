//! reduce: candle's `fast_{sum,min,max,argmin,argmax}` (`sum_keepdim`,
//! `max_keepdim`, `argmax_keepdim`, ...; `fast_sum_small` for sums of at most
//! 32 elements), and candle-nn's `softmax`, `rmsnorm`, `layernorm`, `rope`,
//! `rope_i`, `rope_thd` (references composed from candle-core ops in f32).

use candle_core::{DType, Device as Cpu, Tensor, D};
use half::{bf16, f16};
use kiln_loader::{KernelArgs, LaunchConfig};

use crate::support::{case, for_num_elems, ptr_at, values, ArgsExt, Case, Ctx, Elem, Input, Tol, View};

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Sum,
    Min,
    Max,
    ArgMin,
    ArgMax,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Sum => "sum",
            Op::Min => "min",
            Op::Max => "max",
            Op::ArgMin => "argmin",
            Op::ArgMax => "argmax",
        }
    }
}

/// (input view, reduced dim): a long contiguous row (1024 threads, a partial
/// last stride), a reduction over the first dim (strided: candle moves the
/// reduced dim last), a transposed input, and a short row (`fast_sum_small`).
fn shapes() -> Vec<(View, usize)> {
    vec![
        (View::Contig(vec![13, 1027]), 1),
        (View::Contig(vec![300, 17]), 0),
        (View::Transposed(45, 77), 1),
        (View::Narrow { base: vec![1030, 9], dim: 1, start: 2, len: 7 }, 1),
    ]
}

fn reduce<E: Elem>(cx: &Ctx, op: Op) -> anyhow::Result<()> {
    for (view, dim) in shapes() {
        // Sums of small integers are exact in every type, so they compare
        // exactly whatever order the device adds in; f32/f64 also get real
        // values, against a tolerance for the summation order.
        let real_sum = op == Op::Sum && matches!(E::NAME, "f32" | "f64");
        let (lo, hi) = match (E::FLOAT, op) {
            (true, Op::Sum) if real_sum => (-1.0, 1.0),
            (true, Op::Sum) => (-1.0, 1.0),
            (true, _) => (-100.0, 100.0),
            (false, Op::Sum) => (0.0, 2.0),
            (false, _) => (0.0, 250.0),
        };
        let mut x = Input::<E>::new(cx, &view, lo, hi)?;
        if op == Op::Sum && !real_sum {
            // u8 sums wrap on the device and panic on the CPU past 255: mostly zeros there.
            let u8_sum = E::NAME == "u8";
            let ints: Vec<E> = x
                .storage
                .iter()
                .map(|v| {
                    let v = v.to_f64().round();
                    E::from_f64(if u8_sum {
                        if cx.rng().int(0, 7) == 0 {
                            1.0
                        } else {
                            0.0
                        }
                    } else {
                        v
                    })
                })
                .collect();
            x = Input::from_storage(ints, &view)?;
        }
        let dims = x.dims();
        let strides = x.strides();
        // candle: kept dims first, the reduced dim last, with their strides.
        let (mut rd, mut rs) = (Vec::new(), Vec::new());
        for i in (0..dims.len()).filter(|&i| i != dim).chain([dim]) {
            rd.push(dims[i]);
            rs.push(strides[i]);
        }
        let src_el = x.elem_count();
        let dst_el = src_el / dims[dim];
        let el_to_sum = dims[dim];
        let small = op == Op::Sum && el_to_sum <= 32;
        let (cfg, name) = if small {
            (LaunchConfig { grid: (dst_el.div_ceil(256) as u32, 1, 1), block: (256, 1, 1), shared_mem_bytes: 0 }, "fast_sum_small".to_string())
        } else {
            let block = el_to_sum.min(1024).next_power_of_two() as u32;
            (LaunchConfig { grid: (dst_el as u32, 1, 1), block: (block, 1, 1), shared_mem_bytes: 0 }, format!("fast_{}", op.name()))
        };
        let kernel = format!("{name}_{}", E::NAME);
        let what = format!("{kernel} over dim {dim} of {}", view.tag());
        let info = cx.info(&[&rd, &rs])?;
        let inp = cx.upload(&x.storage)?;
        let mut a = KernelArgs::new();
        let push_common = |a: &mut KernelArgs| {
            a.push(if small { dst_el } else { src_el }).push(el_to_sum).push(dims.len()).buf(&info).push(ptr_at::<E>(&inp, x.offset()));
        };
        match op {
            Op::Sum | Op::Min | Op::Max => {
                let r = match op {
                    Op::Sum => x.tensor.sum_keepdim(dim)?,
                    Op::Min => x.tensor.min_keepdim(dim)?,
                    _ => x.tensor.max_keepdim(dim)?,
                };
                let want = values::<E>(&r)?;
                let out = cx.poisoned(&want)?;
                push_common(&mut a);
                a.buf(&out);
                cx.launch("reduce", &kernel, cfg, &mut a)?;
                let tol = if real_sum { E::tol().scale((el_to_sum as f64).sqrt() * 2.0) } else { Tol::EXACT };
                cx.check(&what, &cx.download::<E>(&out)?, &want, tol)?;
            }
            Op::ArgMin | Op::ArgMax => {
                let r = if op == Op::ArgMin { x.tensor.argmin_keepdim(dim)? } else { x.tensor.argmax_keepdim(dim)? };
                let want_idx = values::<u32>(&r)?;
                let out = cx.poisoned(&want_idx)?;
                push_common(&mut a);
                a.buf(&out);
                cx.launch("reduce", &kernel, cfg, &mut a)?;
                let got_idx = if cx.is_dry() { want_idx.clone() } else { cx.download::<u32>(&out)? };
                if let Some((i, g)) = got_idx.iter().enumerate().find(|(_, g)| **g as usize >= el_to_sum) {
                    anyhow::bail!("{what}: index {g} at {i} is outside the reduced dim of {el_to_sum}");
                }
                // Ties may pick another index than the CPU: compare the values there.
                let at = |idx: Vec<u32>| -> anyhow::Result<Vec<E>> {
                    let mut shape = dims.clone();
                    shape[dim] = 1;
                    let ids = Tensor::from_vec(idx, shape, &Cpu::Cpu)?;
                    values::<E>(&x.tensor.contiguous()?.gather(&ids, dim)?)
                };
                cx.check(&what, &at(got_idx)?, &at(want_idx)?, Tol::EXACT)?;
            }
        }
    }
    Ok(())
}

fn f32_of<E: Elem>(t: &Tensor) -> candle_core::Result<Tensor> {
    t.to_dtype(DType::F32)
}

fn back<E: Elem>(t: &Tensor) -> anyhow::Result<Vec<E>> {
    values::<E>(&t.to_dtype(E::DTYPE)?)
}

/// Rows of 37 (the 32-thread path) and 1027 (the 1024-thread path), contiguous as candle-nn requires.
const ROWS_COLS: [(usize, usize); 2] = [(7, 37), (5, 1027)];

fn softmax<E: Elem>(cx: &Ctx) -> anyhow::Result<()> {
    let kernel = format!("softmax_{}", E::NAME);
    for (rows, cols) in ROWS_COLS {
        let x = Input::<E>::new(cx, &View::Contig(vec![rows, cols]), -5.0, 5.0)?;
        let xf = f32_of::<E>(&x.tensor)?;
        let e = xf.broadcast_sub(&xf.max_keepdim(D::Minus1)?)?.exp()?;
        let want = back::<E>(&e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?)?;
        let (inp, out) = (cx.upload(&x.storage)?, cx.poisoned(&want)?);
        let mut a = KernelArgs::new();
        a.buf(&inp).buf(&out).push(cols as i32);
        cx.launch("reduce", &kernel, LaunchConfig { grid: (rows as u32, 1, 1), block: (1, 32, 1), shared_mem_bytes: 0 }, &mut a)?;
        cx.check(&format!("{kernel} {rows}x{cols}"), &cx.download::<E>(&out)?, &want, E::tol().scale(2.0))?;
    }
    Ok(())
}

const EPS: f32 = 1e-5;

fn norm<E: Elem>(cx: &Ctx, layer: bool) -> anyhow::Result<()> {
    let kernel = format!("{}_{}", if layer { "layernorm" } else { "rmsnorm" }, E::NAME);
    for (rows, cols) in ROWS_COLS {
        let x = Input::<E>::new(cx, &View::Contig(vec![rows, cols]), -3.0, 3.0)?;
        let alpha = Input::<E>::new(cx, &View::Contig(vec![cols]), 0.5, 1.5)?;
        let beta = Input::<E>::new(cx, &View::Contig(vec![cols]), -1.0, 1.0)?;
        let xf = f32_of::<E>(&x.tensor)?;
        let centered = if layer { xf.broadcast_sub(&xf.mean_keepdim(D::Minus1)?)? } else { xf.clone() };
        let scale = (centered.sqr()?.mean_keepdim(D::Minus1)? + EPS as f64)?.sqrt()?;
        let mut y = centered.broadcast_div(&scale)?.broadcast_mul(&f32_of::<E>(&alpha.tensor)?)?;
        if layer {
            y = y.broadcast_add(&f32_of::<E>(&beta.tensor)?)?;
        }
        let want = back::<E>(&y)?;
        let (inp, ab, bb, out) = (cx.upload(&x.storage)?, cx.upload(&alpha.storage)?, cx.upload(&beta.storage)?, cx.poisoned(&want)?);
        let block = if cols < 1024 { 32 } else { 1024 };
        let mut a = KernelArgs::new();
        a.buf(&inp).buf(&out).buf(&ab);
        if layer {
            a.buf(&bb);
        }
        a.push(cols as i32).push(block as i32).push(EPS);
        cx.launch("reduce", &kernel, LaunchConfig { grid: (rows as u32, 1, 1), block: (block, 1, 1), shared_mem_bytes: 0 }, &mut a)?;
        cx.check(&format!("{kernel} {rows}x{cols}"), &cx.download::<E>(&out)?, &want, E::tol().scale(if E::NAME == "f32" { 10.0 } else { 2.0 }))?;
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Rope {
    /// Halves rotated together (candle-nn `rope`), x is (b, h, t, d).
    Halves,
    /// Adjacent pairs (candle-nn `rope_i`), x is (b, h, t, d).
    Interleaved,
    /// Halves, x is (b, t, h, d) (candle-nn `rope_thd`).
    Thd,
}

fn rope<E: Elem>(cx: &Ctx, kind: Rope) -> anyhow::Result<()> {
    let name = match kind {
        Rope::Halves => "rope",
        Rope::Interleaved => "rope_i",
        Rope::Thd => "rope_thd",
    };
    let kernel = format!("{name}_{}", E::NAME);
    // b*h*t*d/2 = 2304: two full 1024-thread blocks and a partial one.
    let (b, h, t, d) = (2usize, 4usize, 9usize, 64usize);
    // cos/sin per position (t, d/2), or per batch and position (b, t, d/2).
    for batched in [false, true] {
        let cs_shape = if batched { vec![b, t, d / 2] } else { vec![t, d / 2] };
        let x_shape = if kind == Rope::Thd { vec![b, t, h, d] } else { vec![b, h, t, d] };
        let x = Input::<E>::new(cx, &View::Contig(x_shape), -2.0, 2.0)?;
        let cos = Input::<E>::new(cx, &View::Contig(cs_shape.clone()), -1.0, 1.0)?;
        let sin = Input::<E>::new(cx, &View::Contig(cs_shape), -1.0, 1.0)?;
        // The reference, in f32 on (b, h, t, d) with cos/sin broadcast to (b, 1, t, d/2).
        let xf = f32_of::<E>(&x.tensor)?;
        let xf = if kind == Rope::Thd { xf.transpose(1, 2)?.contiguous()? } else { xf };
        let bcast = |c: &Tensor| -> candle_core::Result<Tensor> {
            let c = f32_of::<E>(c)?;
            let c = if batched { c.unsqueeze(1)? } else { c.unsqueeze(0)?.unsqueeze(0)? };
            c.broadcast_as((b, h, t, d / 2))
        };
        let (c, s) = (bcast(&cos.tensor)?, bcast(&sin.tensor)?);
        let y = match kind {
            Rope::Interleaved => {
                let pairs = xf.reshape((b, h, t, d / 2, 2))?;
                let (x0, x1) = (pairs.narrow(4, 0, 1)?.squeeze(4)?, pairs.narrow(4, 1, 1)?.squeeze(4)?);
                let y0 = ((&x0 * &c)? - (&x1 * &s)?)?;
                let y1 = ((&x0 * &s)? + (&x1 * &c)?)?;
                Tensor::stack(&[y0, y1], 4)?.reshape((b, h, t, d))?
            }
            Rope::Halves | Rope::Thd => {
                let (x1, x2) = (xf.narrow(3, 0, d / 2)?, xf.narrow(3, d / 2, d / 2)?);
                Tensor::cat(&[((&x1 * &c)? - (&x2 * &s)?)?, ((&x1 * &s)? + (&x2 * &c)?)?], 3)?
            }
        };
        let y = if kind == Rope::Thd { y.transpose(1, 2)?.contiguous()? } else { y };
        let want = back::<E>(&y)?;
        let (xb, cb, sb, out) = (cx.upload(&x.storage)?, cx.upload(&cos.storage)?, cx.upload(&sin.storage)?, cx.poisoned(&want)?);
        let stride_b = if batched { (h * t * d) as u32 } else { 0 };
        let mut a = KernelArgs::new();
        a.buf(&xb).buf(&cb).buf(&sb).buf(&out);
        match kind {
            Rope::Interleaved => a.push((b * h) as u32).push((t * d) as u32).push(stride_b),
            Rope::Halves => a.push((b * h) as u32).push((t * d) as u32).push(d as u32).push(stride_b),
            Rope::Thd => a.push(b as u32).push(t as u32).push(h as u32).push(d as u32).push(stride_b),
        };
        cx.launch("reduce", &kernel, for_num_elems(b * h * t * d / 2), &mut a)?;
        cx.check(&format!("{kernel} {}cos/sin", if batched { "batched " } else { "" }), &cx.download::<E>(&out)?, &want, E::tol().scale(4.0))?;
    }
    Ok(())
}

fn reduce_cases<E: Elem>(out: &mut Vec<Case>) {
    for op in [Op::Sum, Op::Min, Op::Max, Op::ArgMin, Op::ArgMax] {
        out.push(case("reduce", format!("fast_{}_{}", op.name(), E::NAME), move |cx| reduce::<E>(cx, op)));
    }
}

fn float_cases<E: Elem>(out: &mut Vec<Case>) {
    out.push(case("reduce", format!("softmax_{}", E::NAME), softmax::<E>));
    out.push(case("reduce", format!("rmsnorm_{}", E::NAME), |cx| norm::<E>(cx, false)));
    out.push(case("reduce", format!("layernorm_{}", E::NAME), |cx| norm::<E>(cx, true)));
    out.push(case("reduce", format!("rope_{}", E::NAME), |cx| rope::<E>(cx, Rope::Halves)));
    out.push(case("reduce", format!("rope_i_{}", E::NAME), |cx| rope::<E>(cx, Rope::Interleaved)));
    out.push(case("reduce", format!("rope_thd_{}", E::NAME), |cx| rope::<E>(cx, Rope::Thd)));
}

pub fn cases(out: &mut Vec<Case>) {
    reduce_cases::<f32>(out);
    reduce_cases::<f16>(out);
    reduce_cases::<bf16>(out);
    reduce_cases::<f64>(out);
    reduce_cases::<u8>(out);
    reduce_cases::<u32>(out);
    reduce_cases::<i64>(out);
    float_cases::<f32>(out);
    float_cases::<f16>(out);
    float_cases::<bf16>(out);
}
