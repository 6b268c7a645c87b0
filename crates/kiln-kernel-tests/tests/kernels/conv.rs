//! conv: the direct `conv1d`/`conv2d`/`conv_transpose1d`/`conv_transpose2d`
//! kernels, `im2col1d`/`im2col` and `col2im1d` (candle's default conv and
//! transposed-conv paths: im2col or col2im around a matmul), `max_pool2d`,
//! `avg_pool2d`, `upsample_nearest2d`, `upsample_bilinear2d`. Inputs are
//! contiguous and channels-last storage permuted to NCHW (real strides);
//! references are candle's CPU convs and pools, in f32 for half types.

use candle_core::{DType, Device as Cpu, Tensor};
use half::{bf16, f16};
use kiln_loader::KernelArgs;

use crate::support::{case, for_num_elems, ptr_at, values, ArgsExt, Case, Ctx, Elem, Input, Tol, View};

/// Channels-first contiguous, and the same shape as a permuted channels-last storage.
fn inputs(shape: &[usize]) -> Vec<View> {
    let mut last = vec![shape[0]];
    last.extend_from_slice(&shape[2..]);
    last.push(shape[1]);
    let n = shape.len();
    let mut perm = vec![0, n - 1];
    perm.extend(1..n - 1);
    vec![View::Contig(shape.to_vec()), View::Permute { base: last, perm }]
}

fn f32_of(t: &Tensor) -> candle_core::Result<Tensor> {
    t.to_dtype(DType::F32)
}

/// The reference's copy of an input: in the precision the device accumulates
/// `E` in (f64 for f64, else f32), and contiguous, because candle-core
/// 0.11.1's CPU `conv1d` copies a non-contiguous kernel and then multiplies by
/// the original storage anyway (measured: all 910 outputs wrong for a permuted
/// f32 kernel; for f16 the dtype conversion had already made a copy).
fn acc_of<E: Elem>(t: &Tensor) -> candle_core::Result<Tensor> {
    t.to_dtype(if E::NAME == "f64" { DType::F64 } else { DType::F32 })?.contiguous()
}

fn back<E: Elem>(t: &Tensor) -> anyhow::Result<Vec<E>> {
    values::<E>(&t.to_dtype(E::DTYPE)?)
}

/// The device accumulates in f32 (f64 for f64) and rounds once; candle's CPU
/// conv in f32 sums in another order.
fn tol<E: Elem>() -> Tol {
    match E::NAME {
        "f32" => Tol { atol: 1e-4, rtol: 1e-4 },
        _ => E::tol().scale(2.0),
    }
}

fn info_of<E: Elem>(cx: &Ctx, x: &Input<E>, k: Option<&Input<E>>) -> anyhow::Result<crate::support::Buf> {
    match k {
        Some(k) => cx.info(&[&x.dims(), &x.strides(), &k.dims(), &k.strides()]),
        None => cx.info(&[&x.dims(), &x.strides()]),
    }
}

// (padding, stride, dilation)
const CONV_PARAMS: [(usize, usize, usize); 3] = [(0, 1, 1), (1, 2, 2), (2, 1, 3)];

/// The naive `conv1d` kernel of candle-kernels 0.11.1 reads input position
/// `(stride * l + k) * dilation - padding`, where the convolution (and candle's
/// CPU backend) reads `stride * l + k * dilation - padding`: the two agree only
/// for dilation 1. candle's CUDA backend takes the im2col path by default, so
/// the naive kernel is tested where it is right; docs/gpu-tests.md has the note.
const CONV1D_NAIVE_PARAMS: [(usize, usize, usize); 3] = [(0, 1, 1), (1, 2, 1), (2, 3, 1)];

fn conv1d<E: Elem>(cx: &Ctx) -> anyhow::Result<()> {
    let kernel = format!("conv1d_{}", E::NAME);
    let (b, c_in, l_in, c_out, k) = (2, 5, 67, 7, 3);
    let kviews = [View::Contig(vec![c_out, c_in, k]), View::Permute { base: vec![c_out, k, c_in], perm: vec![0, 2, 1] }];
    for (xv, kv) in inputs(&[b, c_in, l_in]).into_iter().zip(kviews) {
        for (padding, stride, dilation) in CONV1D_NAIVE_PARAMS {
            let x = Input::<E>::new(cx, &xv, -1.0, 1.0)?;
            let kt = Input::<E>::new(cx, &kv, -1.0, 1.0)?;
            let want = back::<E>(&acc_of::<E>(&x.tensor)?.conv1d(&acc_of::<E>(&kt.tensor)?, padding, stride, dilation, 1)?)?;
            let l_out = (l_in + 2 * padding - dilation * (k - 1) - 1) / stride + 1;
            let (xb, kb, out) = (cx.upload(&x.storage)?, cx.upload(&kt.storage)?, cx.poisoned(&want)?);
            let info = info_of(cx, &x, Some(&kt))?;
            let mut a = KernelArgs::new();
            a.push(x.elem_count()).push(l_out).push(stride).push(padding).push(dilation).buf(&info);
            a.push(ptr_at::<E>(&xb, x.offset())).push(ptr_at::<E>(&kb, kt.offset())).buf(&out);
            cx.launch("conv", &kernel, for_num_elems(b * c_out * l_out), &mut a)?;
            let what = format!("{kernel} on {}, kernel {}, padding {padding} stride {stride} dilation {dilation}", xv.tag(), kv.tag());
            cx.check(&what, &cx.download::<E>(&out)?, &want, tol::<E>())?;
        }
    }
    Ok(())
}

fn conv2d<E: Elem>(cx: &Ctx) -> anyhow::Result<()> {
    let kernel = format!("conv2d_{}", E::NAME);
    let (b, c_in, h, w, c_out, kh, kw) = (2, 3, 13, 11, 4, 3, 2);
    let kviews = [View::Contig(vec![c_out, c_in, kh, kw]), View::Permute { base: vec![c_out, kh, kw, c_in], perm: vec![0, 3, 1, 2] }];
    for (xv, kv) in inputs(&[b, c_in, h, w]).into_iter().zip(kviews) {
        for (padding, stride, dilation) in CONV_PARAMS {
            let x = Input::<E>::new(cx, &xv, -1.0, 1.0)?;
            let kt = Input::<E>::new(cx, &kv, -1.0, 1.0)?;
            let want = back::<E>(&acc_of::<E>(&x.tensor)?.conv2d(&acc_of::<E>(&kt.tensor)?, padding, stride, dilation, 1)?)?;
            let out_h = (h + 2 * padding - dilation * (kh - 1) - 1) / stride + 1;
            let out_w = (w + 2 * padding - dilation * (kw - 1) - 1) / stride + 1;
            let (xb, kb, out) = (cx.upload(&x.storage)?, cx.upload(&kt.storage)?, cx.poisoned(&want)?);
            let info = info_of(cx, &x, Some(&kt))?;
            let mut a = KernelArgs::new();
            a.push(x.elem_count()).push(out_w).push(out_h).push(stride).push(padding).push(dilation).buf(&info);
            a.push(ptr_at::<E>(&xb, x.offset())).push(ptr_at::<E>(&kb, kt.offset())).buf(&out);
            cx.launch("conv", &kernel, for_num_elems(b * c_out * out_h * out_w), &mut a)?;
            let what = format!("{kernel} on {}, kernel {}, padding {padding} stride {stride} dilation {dilation}", xv.tag(), kv.tag());
            cx.check(&what, &cx.download::<E>(&out)?, &want, tol::<E>())?;
        }
    }
    Ok(())
}

/// im2col1d's columns times the kernel is the convolution (what candle does
/// with them); the columns are copies, so the product is taken in f32.
fn im2col1d<E: Elem>(cx: &Ctx) -> anyhow::Result<()> {
    let kernel = format!("im2col1d_{}", E::NAME);
    let (b, c_in, l_in, c_out, k) = (2, 5, 67, 7, 3);
    for xv in inputs(&[b, c_in, l_in]) {
        for (padding, stride, dilation) in CONV_PARAMS {
            let x = Input::<E>::new(cx, &xv, -1.0, 1.0)?;
            let kt = Input::<E>::new(cx, &View::Contig(vec![c_out, c_in, k]), -1.0, 1.0)?;
            let (xf, kf) = (f32_of(&x.tensor)?, f32_of(&kt.tensor)?);
            let want = values::<f32>(&xf.conv1d(&kf, padding, stride, dilation, 1)?)?;
            let l_out = (l_in + 2 * padding - dilation * (k - 1) - 1) / stride + 1;
            let threads = b * l_out * c_in;
            // Poison for the columns: any value the product cannot hide.
            let cols = cx.upload(&vec![E::poison(); threads * k])?;
            let xb = cx.upload(&x.storage)?;
            let info = info_of(cx, &x, None)?;
            let mut a = KernelArgs::new();
            a.push(threads).push(l_out).push(k).push(stride).push(padding).push(dilation).buf(&info);
            a.push(ptr_at::<E>(&xb, x.offset())).buf(&cols);
            cx.launch("conv", &kernel, for_num_elems(threads), &mut a)?;
            let col = Tensor::from_vec(cx.download::<E>(&cols)?, (b * l_out, c_in * k), &Cpu::Cpu)?.to_dtype(DType::F32)?;
            let res = col.matmul(&kf.reshape((c_out, c_in * k))?.t()?)?.reshape((b, l_out, c_out))?.transpose(1, 2)?;
            let what = format!("{kernel} (then matmul) on {}, padding {padding} stride {stride} dilation {dilation}", xv.tag());
            cx.check(&what, &values::<f32>(&res)?, &want, Tol { atol: 1e-4, rtol: 1e-4 })?;
        }
    }
    Ok(())
}

fn im2col<E: Elem>(cx: &Ctx) -> anyhow::Result<()> {
    let kernel = format!("im2col_{}", E::NAME);
    let (b, c_in, h, w, c_out, kh, kw) = (2, 3, 13, 11, 4, 3, 2);
    for xv in inputs(&[b, c_in, h, w]) {
        for (padding, stride, dilation) in CONV_PARAMS {
            let x = Input::<E>::new(cx, &xv, -1.0, 1.0)?;
            let kt = Input::<E>::new(cx, &View::Contig(vec![c_out, c_in, kh, kw]), -1.0, 1.0)?;
            let (xf, kf) = (f32_of(&x.tensor)?, f32_of(&kt.tensor)?);
            let want = values::<f32>(&xf.conv2d(&kf, padding, stride, dilation, 1)?)?;
            let h_out = (h + 2 * padding - dilation * (kh - 1) - 1) / stride + 1;
            let w_out = (w + 2 * padding - dilation * (kw - 1) - 1) / stride + 1;
            let dst_el = b * h_out * w_out * c_in * kh * kw;
            let cols = cx.upload(&vec![E::poison(); dst_el])?;
            let xb = cx.upload(&x.storage)?;
            let info = info_of(cx, &x, None)?;
            let mut a = KernelArgs::new();
            a.push(dst_el).push(h_out).push(w_out).push(kh).push(kw).push(stride).push(padding).push(dilation).buf(&info);
            a.push(ptr_at::<E>(&xb, x.offset())).buf(&cols);
            cx.launch("conv", &kernel, for_num_elems(dst_el), &mut a)?;
            let col = Tensor::from_vec(cx.download::<E>(&cols)?, (b * h_out * w_out, c_in * kh * kw), &Cpu::Cpu)?.to_dtype(DType::F32)?;
            let res = col.matmul(&kf.reshape((c_out, c_in * kh * kw))?.t()?)?.reshape((b, h_out, w_out, c_out))?.permute((0, 3, 1, 2))?;
            let what = format!("{kernel} (then matmul) on {}, padding {padding} stride {stride} dilation {dilation}", xv.tag());
            cx.check(&what, &values::<f32>(&res)?, &want, Tol { atol: 1e-4, rtol: 1e-4 })?;
        }
    }
    Ok(())
}

/// col2im1d on the columns candle computes (input times kernel) is the
/// transposed convolution.
fn col2im1d<E: Elem>(cx: &Ctx) -> anyhow::Result<()> {
    let kernel = format!("col2im1d_{}", E::NAME);
    let (b, c_in, l_in, c_out, k) = (2, 5, 31, 3, 4);
    for stride in [1usize, 3] {
        let x = Input::<E>::new(cx, &View::Contig(vec![b, c_in, l_in]), -1.0, 1.0)?;
        let kt = Input::<E>::new(cx, &View::Contig(vec![c_in, c_out, k]), -1.0, 1.0)?;
        let (xf, kf) = (f32_of(&x.tensor)?, f32_of(&kt.tensor)?);
        let col = xf.transpose(1, 2)?.broadcast_matmul(&kf.reshape((c_in, c_out * k))?)?.to_dtype(E::DTYPE)?;
        let want = back::<E>(&conv_transpose1d_ref(&xf, &kf, 0, 0, stride, 1)?)?;
        let l_out = (l_in - 1) * stride + k;
        let dst_el = b * c_out * l_out;
        let cb = cx.upload(&values::<E>(&col)?)?;
        let out = cx.poisoned(&want)?;
        let mut a = KernelArgs::new();
        a.push(dst_el).push(l_out).push(l_in).push(c_out).push(k).push(stride).buf(&cb).buf(&out);
        cx.launch("conv", &kernel, for_num_elems(dst_el), &mut a)?;
        // The columns are rounded to E, and the device adds them up in E.
        cx.check(&format!("{kernel} stride {stride}"), &cx.download::<E>(&out)?, &want, tol::<E>().scale(2.0))?;
    }
    Ok(())
}

/// candle-core 0.11.1's CPU `conv_transpose1d` is wrong from the second batch
/// item on when it takes its col2im path (padding 0, output_padding 0,
/// dilation 1, contiguous kernel): measured against a naive f64 loop, one
/// item at a time is right. So the reference runs it one item at a time.
fn conv_transpose1d_ref(x: &Tensor, k: &Tensor, padding: usize, out_padding: usize, stride: usize, dilation: usize) -> candle_core::Result<Tensor> {
    let items = (0..x.dim(0)?)
        .map(|i| x.narrow(0, i, 1)?.conv_transpose1d(k, padding, out_padding, stride, dilation, 1))
        .collect::<candle_core::Result<Vec<_>>>()?;
    Tensor::cat(&items, 0)
}

// (padding, output_padding, stride, dilation)
const CONVT_PARAMS: [(usize, usize, usize, usize); 3] = [(0, 0, 1, 1), (1, 1, 2, 1), (2, 0, 3, 2)];

fn conv_transpose1d<E: Elem>(cx: &Ctx) -> anyhow::Result<()> {
    let kernel = format!("conv_transpose1d_{}", E::NAME);
    let (b, c_in, l_in, c_out, k) = (2, 5, 31, 3, 4);
    for xv in inputs(&[b, c_in, l_in]) {
        for (padding, out_padding, stride, dilation) in CONVT_PARAMS {
            let x = Input::<E>::new(cx, &xv, -1.0, 1.0)?;
            let kt = Input::<E>::new(cx, &View::Contig(vec![c_in, c_out, k]), -1.0, 1.0)?;
            let want = back::<E>(&conv_transpose1d_ref(&f32_of(&x.tensor)?, &f32_of(&kt.tensor)?, padding, out_padding, stride, dilation)?)?;
            let l_out = (l_in - 1) * stride - 2 * padding + dilation * (k - 1) + out_padding + 1;
            let (xb, kb, out) = (cx.upload(&x.storage)?, cx.upload(&kt.storage)?, cx.poisoned(&want)?);
            let info = info_of(cx, &x, Some(&kt))?;
            let mut a = KernelArgs::new();
            a.push(x.elem_count()).push(l_out).push(stride).push(padding).push(out_padding).push(dilation).buf(&info);
            a.push(ptr_at::<E>(&xb, x.offset())).push(ptr_at::<E>(&kb, kt.offset())).buf(&out);
            cx.launch("conv", &kernel, for_num_elems(b * c_out * l_out), &mut a)?;
            let what = format!("{kernel} on {}, padding {padding} output_padding {out_padding} stride {stride} dilation {dilation}", xv.tag());
            cx.check(&what, &cx.download::<E>(&out)?, &want, tol::<E>())?;
        }
    }
    Ok(())
}

fn conv_transpose2d<E: Elem>(cx: &Ctx) -> anyhow::Result<()> {
    let kernel = format!("conv_transpose2d_{}", E::NAME);
    let (b, c_in, h, w, c_out, kh, kw) = (2, 3, 7, 6, 4, 3, 2);
    for xv in inputs(&[b, c_in, h, w]) {
        for (padding, out_padding, stride, dilation) in CONVT_PARAMS {
            let x = Input::<E>::new(cx, &xv, -1.0, 1.0)?;
            let kt = Input::<E>::new(cx, &View::Contig(vec![c_in, c_out, kh, kw]), -1.0, 1.0)?;
            let want = back::<E>(&f32_of(&x.tensor)?.conv_transpose2d(&f32_of(&kt.tensor)?, padding, out_padding, stride, dilation)?)?;
            let out_h = (h - 1) * stride + dilation * (kh - 1) + out_padding + 1 - 2 * padding;
            let out_w = (w - 1) * stride + dilation * (kw - 1) + out_padding + 1 - 2 * padding;
            let (xb, kb, out) = (cx.upload(&x.storage)?, cx.upload(&kt.storage)?, cx.poisoned(&want)?);
            let info = info_of(cx, &x, Some(&kt))?;
            let mut a = KernelArgs::new();
            a.push(x.elem_count()).push(out_w).push(out_h).push(stride).push(padding).push(out_padding).push(dilation).buf(&info);
            a.push(ptr_at::<E>(&xb, x.offset())).push(ptr_at::<E>(&kb, kt.offset())).buf(&out);
            cx.launch("conv", &kernel, for_num_elems(b * c_out * out_h * out_w), &mut a)?;
            let what = format!("{kernel} on {}, padding {padding} output_padding {out_padding} stride {stride} dilation {dilation}", xv.tag());
            cx.check(&what, &cx.download::<E>(&out)?, &want, tol::<E>())?;
        }
    }
    Ok(())
}

const POOLS: [((usize, usize), (usize, usize)); 3] = [((2, 2), (2, 2)), ((3, 3), (2, 2)), ((3, 2), (2, 1))];

fn pool<E: Elem>(cx: &Ctx, max: bool) -> anyhow::Result<()> {
    let kernel = format!("{}_pool2d_{}", if max { "max" } else { "avg" }, E::NAME);
    let (b, c, h, w) = (2, 3, 13, 11);
    let (lo, hi) = if E::FLOAT { (-10.0, 10.0) } else { (0.0, 250.0) };
    for xv in inputs(&[b, c, h, w]) {
        for (k, s) in POOLS {
            let x = Input::<E>::new(cx, &xv, lo, hi)?;
            let want = if max {
                values::<E>(&x.tensor.max_pool2d_with_stride(k, s)?)?
            } else {
                back::<E>(&f32_of(&x.tensor)?.avg_pool2d_with_stride(k, s)?)?
            };
            let (xb, out) = (cx.upload(&x.storage)?, cx.poisoned(&want)?);
            let info = info_of(cx, &x, None)?;
            // As candle's CUDA backend passes them: (k.0, k.1, s.0, s.1) as (w_k, h_k, w_stride, h_stride).
            let mut a = KernelArgs::new();
            a.push(x.elem_count()).push(k.0).push(k.1).push(s.0).push(s.1).buf(&info);
            a.push(ptr_at::<E>(&xb, x.offset())).buf(&out);
            cx.launch("conv", &kernel, for_num_elems(want.len()), &mut a)?;
            let t = if max { Tol::EXACT } else { E::tol().scale(2.0) };
            cx.check(&format!("{kernel} k {k:?} stride {s:?} on {}", xv.tag()), &cx.download::<E>(&out)?, &want, t)?;
        }
    }
    Ok(())
}

fn upsample_nearest<E: Elem>(cx: &Ctx) -> anyhow::Result<()> {
    let kernel = format!("upsample_nearest2d_{}", E::NAME);
    let (lo, hi) = if E::FLOAT { (-10.0, 10.0) } else { (0.0, 250.0) };
    for xv in inputs(&[2, 3, 13, 11]) {
        for (th, tw) in [(29usize, 17usize), (6, 5)] {
            let x = Input::<E>::new(cx, &xv, lo, hi)?;
            let want = values::<E>(&x.tensor.upsample_nearest2d(th, tw)?)?;
            let (xb, out) = (cx.upload(&x.storage)?, cx.poisoned(&want)?);
            let info = info_of(cx, &x, None)?;
            let dims = x.dims();
            // candle: upsample_nearest2d(h, w) reaches the kernel as (out_w, out_h) = (h, w).
            let mut a = KernelArgs::new();
            a.push(th).push(tw).push(dims[2] as f64 / th as f64).push(dims[3] as f64 / tw as f64).buf(&info);
            a.push(ptr_at::<E>(&xb, x.offset())).buf(&out);
            cx.launch("conv", &kernel, for_num_elems(want.len()), &mut a)?;
            cx.check(&format!("{kernel} to {th}x{tw} on {}", xv.tag()), &cx.download::<E>(&out)?, &want, Tol::EXACT)?;
        }
    }
    Ok(())
}

fn upsample_bilinear<E: Elem>(cx: &Ctx) -> anyhow::Result<()> {
    let kernel = format!("upsample_bilinear2d_{}", E::NAME);
    for xv in inputs(&[2, 3, 13, 11]) {
        for align_corners in [false, true] {
            let (th, tw) = (29usize, 17usize);
            let x = Input::<E>::new(cx, &xv, -10.0, 10.0)?;
            let want = back::<E>(&f32_of(&x.tensor)?.upsample_bilinear2d(th, tw, align_corners)?)?;
            let (xb, out) = (cx.upload(&x.storage)?, cx.poisoned(&want)?);
            let info = info_of(cx, &x, None)?;
            let mut a = KernelArgs::new();
            a.push(tw).push(th).push_bytes(&[align_corners as u8]).push_bytes(&[0u8]).push(0f64).push_bytes(&[0u8]).push(0f64).buf(&info);
            a.push(ptr_at::<E>(&xb, x.offset())).buf(&out);
            cx.launch("conv", &kernel, for_num_elems(want.len()), &mut a)?;
            cx.check(
                &format!("{kernel} to {th}x{tw} align_corners {align_corners} on {}", xv.tag()),
                &cx.download::<E>(&out)?,
                &want,
                E::tol().scale(4.0),
            )?;
        }
    }
    Ok(())
}

macro_rules! floats {
    ($out:ident, $name:literal, $f:ident) => {
        $out.push(case("conv", format!("{}_f32", $name), $f::<f32>));
        $out.push(case("conv", format!("{}_f16", $name), $f::<f16>));
        $out.push(case("conv", format!("{}_bf16", $name), $f::<bf16>));
    };
}

pub fn cases(out: &mut Vec<Case>) {
    floats!(out, "conv1d", conv1d);
    floats!(out, "conv2d", conv2d);
    out.push(case("conv", "conv2d_f64", conv2d::<f64>));
    floats!(out, "im2col1d", im2col1d);
    floats!(out, "im2col", im2col);
    floats!(out, "col2im1d", col2im1d);
    floats!(out, "conv_transpose1d", conv_transpose1d);
    floats!(out, "conv_transpose2d", conv_transpose2d);
    for (name, max) in [("max_pool2d", true), ("avg_pool2d", false)] {
        out.push(case("conv", format!("{name}_f32"), move |cx| pool::<f32>(cx, max)));
        out.push(case("conv", format!("{name}_f16"), move |cx| pool::<f16>(cx, max)));
        out.push(case("conv", format!("{name}_bf16"), move |cx| pool::<bf16>(cx, max)));
    }
    out.push(case("conv", "max_pool2d_u8", |cx| pool::<u8>(cx, true)));
    out.push(case("conv", "max_pool2d_u32", |cx| pool::<u32>(cx, true)));
    floats!(out, "upsample_nearest2d", upsample_nearest);
    out.push(case("conv", "upsample_nearest2d_u8", upsample_nearest::<u8>));
    out.push(case("conv", "upsample_nearest2d_u32", upsample_nearest::<u32>));
    floats!(out, "upsample_bilinear2d", upsample_bilinear);
}
