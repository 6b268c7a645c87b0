//! ternary: `where_<cond>_<T>` (candle's `Tensor::where_cond`), conditions u8,
//! u32 and i64, each operand with its own layout.

use half::{bf16, f16};
use kiln_loader::KernelArgs;

use crate::support::{case, for_num_elems, ptr_at, values, ArgsExt, Case, Ctx, Elem, Input, Tol, View};

/// (cond, on_true, on_false) views of one logical shape.
fn triples() -> Vec<(View, View, View)> {
    vec![
        (View::Contig(vec![1027]), View::Contig(vec![1027]), View::Contig(vec![1027])),
        (View::Transposed(37, 29), View::Contig(vec![37, 29]), View::Broadcast { from: vec![1, 29], to: vec![37, 29] }),
        (
            View::Narrow { base: vec![3, 37, 40], dim: 2, start: 3, len: 33 },
            View::Narrow { base: vec![3, 40, 33], dim: 1, start: 2, len: 37 },
            View::Permute { base: vec![37, 3, 33], perm: vec![1, 0, 2] },
        ),
    ]
}

fn run<C: Elem, E: Elem>(cx: &Ctx) -> anyhow::Result<()> {
    let kernel = format!("where_{}_{}", C::NAME, E::NAME);
    let (lo, hi) = if E::FLOAT { (-3.0, 3.0) } else { (0.0, 200.0) };
    for (cv, tv, fv) in triples() {
        // 0, 1 and 2: any non-zero condition selects on_true.
        let c = Input::<C>::new(cx, &cv, 0.0, 2.0)?;
        let t = Input::<E>::new(cx, &tv, lo, hi)?;
        let f = Input::<E>::new(cx, &fv, lo, hi)?;
        let want = values::<E>(&c.tensor.where_cond(&t.tensor, &f.tensor)?)?;
        let el = c.elem_count();
        let (cb, tb, fb) = (cx.upload(&c.storage)?, cx.upload(&t.storage)?, cx.upload(&f.storage)?);
        let out = cx.poisoned(&want)?;
        // candle always passes dims and the three strides here.
        let info = cx.info(&[&c.dims(), &c.strides(), &t.strides(), &f.strides()])?;
        let mut a = KernelArgs::new();
        a.push(el).push(c.dims().len()).buf(&info);
        a.push(ptr_at::<C>(&cb, c.offset())).push(ptr_at::<E>(&tb, t.offset())).push(ptr_at::<E>(&fb, f.offset())).buf(&out);
        cx.launch("ternary", &kernel, for_num_elems(el), &mut a)?;
        let got = cx.download::<E>(&out)?;
        cx.check(&format!("{kernel} on {}, {}, {}", cv.tag(), tv.tag(), fv.tag()), &got, &want, Tol::EXACT)?;
    }
    Ok(())
}

pub fn cases(out: &mut Vec<Case>) {
    out.push(case("ternary", "where_u8_f32", run::<u8, f32>));
    out.push(case("ternary", "where_u8_f16", run::<u8, f16>));
    out.push(case("ternary", "where_u8_bf16", run::<u8, bf16>));
    out.push(case("ternary", "where_u8_f64", run::<u8, f64>));
    out.push(case("ternary", "where_u8_u8", run::<u8, u8>));
    out.push(case("ternary", "where_u8_u32", run::<u8, u32>));
    out.push(case("ternary", "where_u8_i64", run::<u8, i64>));
    out.push(case("ternary", "where_u32_f32", run::<u32, f32>));
    out.push(case("ternary", "where_u32_bf16", run::<u32, bf16>));
    out.push(case("ternary", "where_i64_f32", run::<i64, f32>));
    out.push(case("ternary", "where_i64_f16", run::<i64, f16>));
    out.push(case("ternary", "where_i64_i64", run::<i64, i64>));
}
