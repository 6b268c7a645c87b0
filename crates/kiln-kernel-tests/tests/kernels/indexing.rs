//! indexing: `is_<ids>_<T>` (index_select), `gather_…`, `ia_…` (index_add),
//! `s_…` (scatter), `sa_…` (scatter_add), with u8, u32 and i64 indices.
//! candle requires contiguous sources here; they start one slab into their
//! storage (an offset), and every dim is indexed in turn.

use candle_core::{Device as Cpu, Tensor};
use half::{bf16, f16};
use kiln_loader::KernelArgs;

use crate::support::{case, for_num_elems, ptr_at, values, ArgsExt, Case, Ctx, Elem, Input, Tol, View};

const SHAPE: [usize; 3] = [4, 37, 29];

/// The source: SHAPE, one slab into a (5, 37, 29) storage.
fn source_view() -> View {
    View::Narrow { base: vec![SHAPE[0] + 1, SHAPE[1], SHAPE[2]], dim: 0, start: 1, len: SHAPE[0] }
}

fn range<E: Elem>() -> (f64, f64) {
    if E::FLOAT {
        (-10.0, 10.0)
    } else {
        // index_add and scatter_add add up to 11 of these: no u8 overflow.
        (0.0, 20.0)
    }
}

fn ids<I: Elem>(cx: &Ctx, n: usize, upto: usize) -> Vec<I> {
    (0..n).map(|_| I::from_f64(cx.rng().int(0, upto as i64 - 1) as f64)).collect()
}

fn left_right(shape: &[usize], dim: usize) -> (usize, usize) {
    (shape[..dim].iter().product(), shape[dim + 1..].iter().product())
}

fn index_select<I: Elem, E: Elem>(cx: &Ctx) -> anyhow::Result<()> {
    let kernel = format!("is_{}_{}", I::NAME, E::NAME);
    let (lo, hi) = range::<E>();
    for (dim, &dim_len) in SHAPE.iter().enumerate() {
        let src = Input::<E>::new(cx, &source_view(), lo, hi)?;
        // More ids than the dim has, repeats included.
        let n_ids = 51;
        let idx: Vec<I> = ids(cx, n_ids, dim_len);
        let ids_t = Tensor::from_vec(idx.clone(), n_ids, &Cpu::Cpu)?;
        let want = values::<E>(&src.tensor.index_select(&ids_t, dim)?)?;
        let (left, right) = left_right(&SHAPE, dim);
        let dst_el = n_ids * left * right;
        let (sb, ib, out) = (cx.upload(&src.storage)?, cx.upload(&idx)?, cx.poisoned(&want)?);
        let info = cx.info(&[&[n_ids], &[1]])?;
        let mut a = KernelArgs::new();
        a.push(dst_el).push(1usize).buf(&info).buf(&ib).push(ptr_at::<E>(&sb, src.offset())).buf(&out);
        a.push(left).push(SHAPE[dim]).push(n_ids).push(right);
        cx.launch("indexing", &kernel, for_num_elems(dst_el), &mut a)?;
        cx.check(&format!("{kernel} along dim {dim}"), &cx.download::<E>(&out)?, &want, Tol::EXACT)?;
    }
    Ok(())
}

fn gather<I: Elem, E: Elem>(cx: &Ctx) -> anyhow::Result<()> {
    let kernel = format!("gather_{}_{}", I::NAME, E::NAME);
    let (lo, hi) = range::<E>();
    for dim in 0..3 {
        let src = Input::<E>::new(cx, &source_view(), lo, hi)?;
        let mut ishape = SHAPE.to_vec();
        ishape[dim] = 11;
        let n: usize = ishape.iter().product();
        let idx: Vec<I> = ids(cx, n, SHAPE[dim]);
        let ids_t = Tensor::from_vec(idx.clone(), ishape.clone(), &Cpu::Cpu)?;
        let want = values::<E>(&src.tensor.gather(&ids_t, dim)?)?;
        let (left, right) = left_right(&SHAPE, dim);
        let (sb, ib, out) = (cx.upload(&src.storage)?, cx.upload(&idx)?, cx.poisoned(&want)?);
        let mut a = KernelArgs::new();
        a.push(n).buf(&ib).push(ptr_at::<E>(&sb, src.offset())).buf(&out);
        a.push(left).push(SHAPE[dim]).push(ishape[dim]).push(right);
        cx.launch("indexing", &kernel, for_num_elems(n), &mut a)?;
        cx.check(&format!("{kernel} along dim {dim}"), &cx.download::<E>(&out)?, &want, Tol::EXACT)?;
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq)]
enum Write {
    IndexAdd,
    Scatter,
    ScatterAdd,
}

/// The in-place kernels: dst (SHAPE) is updated from src (SHAPE with 11
/// along `dim`); every dst element not addressed must keep its value.
fn write<I: Elem, E: Elem>(cx: &Ctx, op: Write) -> anyhow::Result<()> {
    let prefix = match op {
        Write::IndexAdd => "ia",
        Write::Scatter => "s",
        Write::ScatterAdd => "sa",
    };
    let kernel = format!("{prefix}_{}_{}", I::NAME, E::NAME);
    let (lo, hi) = range::<E>();
    for dim in 0..3 {
        let mut sshape = SHAPE.to_vec();
        sshape[dim] = 11;
        let src_view = View::Narrow { base: vec![sshape[0] + 1, sshape[1], sshape[2]], dim: 0, start: 1, len: sshape[0] };
        let src = Input::<E>::new(cx, &src_view, lo, hi)?;
        let dst = Input::<E>::new(cx, &View::Contig(SHAPE.to_vec()), lo, hi)?;
        let (idx, want) = match op {
            Write::IndexAdd => {
                let idx: Vec<I> = ids(cx, 11, SHAPE[dim]);
                let t = Tensor::from_vec(idx.clone(), 11, &Cpu::Cpu)?;
                let w = values::<E>(&dst.tensor.index_add(&t, &src.tensor.contiguous()?, dim)?)?;
                (idx, w)
            }
            Write::Scatter | Write::ScatterAdd => {
                let n: usize = sshape.iter().product();
                let idx: Vec<I> = ids(cx, n, SHAPE[dim]);
                let t = Tensor::from_vec(idx.clone(), sshape.clone(), &Cpu::Cpu)?;
                let s = src.tensor.contiguous()?;
                let w = if op == Write::Scatter { dst.tensor.scatter(&t, &s, dim)? } else { dst.tensor.scatter_add(&t, &s, dim)? };
                (idx, values::<E>(&w)?)
            }
        };
        let (left, right) = left_right(&sshape, dim);
        let (sb, ib, db) = (cx.upload(&src.storage)?, cx.upload(&idx)?, cx.upload(&dst.storage)?);
        let mut a = KernelArgs::new();
        a.buf(&ib);
        if op == Write::IndexAdd {
            a.push(11usize);
        }
        a.push(ptr_at::<E>(&sb, src.offset())).buf(&db);
        a.push(left).push(sshape[dim]).push(SHAPE[dim]).push(right);
        cx.launch("indexing", &kernel, for_num_elems(left * right), &mut a)?;
        cx.check(&format!("{kernel} along dim {dim}"), &cx.download::<E>(&db)?, &want, E::tol())?;
    }
    Ok(())
}

macro_rules! each {
    ($out:ident, $name:literal, $f:ident, [$(($i:ty, $e:ty)),*]) => {
        $($out.push(case("indexing", format!("{}_{}_{}", $name, <$i as Elem>::NAME, <$e as Elem>::NAME), |cx| $f::<$i, $e>(cx)));)*
    };
}

pub fn cases(out: &mut Vec<Case>) {
    // Every value type with u32 ids; u8 and i64 ids with a float and an integer type.
    each!(
        out,
        "is",
        index_select,
        [(u32, f32), (u32, f16), (u32, bf16), (u32, f64), (u32, u8), (u32, u32), (u32, i64), (u8, f32), (u8, bf16), (i64, f32), (i64, i64)]
    );
    each!(out, "gather", gather, [(u32, f32), (u32, f16), (u32, bf16), (u32, u8), (u32, i64), (u8, f32), (i64, bf16), (i64, u32)]);
    macro_rules! writes {
        ($name:literal, $op:expr, [$(($i:ty, $e:ty)),*]) => {
            $(out.push(case("indexing", format!("{}_{}_{}", $name, <$i as Elem>::NAME, <$e as Elem>::NAME), |cx| write::<$i, $e>(cx, $op)));)*
        };
    }
    writes!("ia", Write::IndexAdd, [(u32, f32), (u32, f16), (u32, bf16), (u32, u32), (u8, f32), (i64, f32), (i64, i64)]);
    writes!("s", Write::Scatter, [(u32, f32), (u32, f16), (u32, bf16), (u32, u8), (u8, f32), (i64, f32), (i64, i64)]);
    writes!("sa", Write::ScatterAdd, [(u32, f32), (u32, f16), (u32, bf16), (u32, u32), (u8, f32), (i64, f32), (i64, i64)]);
}
