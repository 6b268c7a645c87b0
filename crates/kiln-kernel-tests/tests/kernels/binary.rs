//! binary: `badd bsub bmul bdiv bminimum bmaximum` and the comparisons
//! `eq ne lt le gt ge` (u8 out), on same-shape views with their own strides:
//! contiguous, transposed against contiguous, broadcast (stride 0), narrowed.

use candle_core::Tensor;
use half::{bf16, f16};
use kiln_loader::KernelArgs;

use crate::support::{case, for_num_elems, ptr_at, values, ArgsExt, Case, Ctx, Elem, Input, Tol, View};

/// (lhs view, rhs view), same logical shape.
fn pairs() -> Vec<(View, View)> {
    vec![
        (View::Contig(vec![1027]), View::Contig(vec![1027])),
        (View::Transposed(37, 29), View::Contig(vec![37, 29])),
        (View::Contig(vec![37, 29]), View::Broadcast { from: vec![1, 29], to: vec![37, 29] }),
        (View::Narrow { base: vec![3, 37, 40], dim: 2, start: 3, len: 33 }, View::Broadcast { from: vec![3, 1, 33], to: vec![3, 37, 33] }),
    ]
}

type Ref = fn(&Tensor, &Tensor) -> candle_core::Result<Tensor>;

fn launch<E: Elem, O: Elem>(cx: &Ctx, kernel: &str, l: &Input<E>, r: &Input<E>, want: &[O]) -> anyhow::Result<Vec<O>> {
    let el = l.elem_count();
    let (lb, rb) = (cx.upload(&l.storage)?, cx.upload(&r.storage)?);
    let out = cx.poisoned(want)?;
    // candle passes dims + both strides unless both sides are contiguous.
    let info = if l.is_contiguous() && r.is_contiguous() { None } else { Some(cx.info(&[&l.dims(), &l.strides(), &r.strides()])?) };
    let mut a = KernelArgs::new();
    a.push(el).push(l.dims().len()).push(info.as_ref().map_or(0u64, |b| b.device_ptr()));
    a.push(ptr_at::<E>(&lb, l.offset())).push(ptr_at::<E>(&rb, r.offset())).buf(&out);
    cx.launch("binary", kernel, for_num_elems(el), &mut a)?;
    cx.download(&out)
}

fn arith<E: Elem>(cx: &Ctx, op: &'static str, reference: Ref) -> anyhow::Result<()> {
    let kernel = format!("b{op}_{}", E::NAME);
    // Unsigned sub stays non-negative and div never divides by zero: candle's
    // CPU ops would overflow (panic in debug) or divide by zero.
    let ((llo, lhi), (rlo, rhi)) = match (E::FLOAT, op) {
        (true, _) => ((-3.0, 3.0), (0.5, 3.0)),
        (false, "mul") => ((0.0, 15.0), (0.0, 15.0)),
        (false, _) => ((20.0, 40.0), (1.0, 20.0)),
    };
    for (lv, rv) in pairs() {
        let l = Input::<E>::new(cx, &lv, llo, lhi)?;
        let r = Input::<E>::new(cx, &rv, rlo, rhi)?;
        let want = values::<E>(&reference(&l.tensor, &r.tensor)?)?;
        let got = launch(cx, &kernel, &l, &r, &want)?;
        cx.check(&format!("{kernel} on {} and {}", lv.tag(), rv.tag()), &got, &want, E::tol())?;
    }
    Ok(())
}

fn cmp<E: Elem>(cx: &Ctx, op: &'static str, reference: Ref) -> anyhow::Result<()> {
    let kernel = format!("{op}_{}", E::NAME);
    for (lv, rv) in pairs() {
        // Few distinct values, so that equal pairs are common.
        let (lo, hi) = if E::FLOAT { (-3.0, 3.0) } else { (0.0, 6.0) };
        let ints = |v: Vec<E>| -> Vec<E> { v.into_iter().map(|x| E::from_f64(x.to_f64().round())).collect() };
        let l = Input::from_storage(ints(cx.rng().vec::<E>(lv.base_len(), lo, hi)), &lv)?;
        let r = Input::from_storage(ints(cx.rng().vec::<E>(rv.base_len(), lo, hi)), &rv)?;
        let want = values::<u8>(&reference(&l.tensor, &r.tensor)?)?;
        let got = launch::<E, u8>(cx, &kernel, &l, &r, &want)?;
        cx.check(&format!("{kernel} on {} and {}", lv.tag(), rv.tag()), &got, &want, Tol::EXACT)?;
    }
    Ok(())
}

fn for_type<E: Elem>(out: &mut Vec<Case>) {
    let arith_ops: [(&'static str, Ref); 6] = [
        ("add", |l, r| l.add(r)),
        ("sub", |l, r| l.sub(r)),
        ("mul", |l, r| l.mul(r)),
        ("div", |l, r| l.div(r)),
        ("minimum", |l, r| l.minimum(r)),
        ("maximum", |l, r| l.maximum(r)),
    ];
    for (op, f) in arith_ops {
        out.push(case("binary", format!("b{op}_{}", E::NAME), move |cx| arith::<E>(cx, op, f)));
    }
    let cmp_ops: [(&'static str, Ref); 6] = [
        ("eq", |l, r| l.eq(r)),
        ("ne", |l, r| l.ne(r)),
        ("lt", |l, r| l.lt(r)),
        ("le", |l, r| l.le(r)),
        ("gt", |l, r| l.gt(r)),
        ("ge", |l, r| l.ge(r)),
    ];
    for (op, f) in cmp_ops {
        out.push(case("binary", format!("{op}_{}", E::NAME), move |cx| cmp::<E>(cx, op, f)));
    }
}

pub fn cases(out: &mut Vec<Case>) {
    for_type::<f32>(out);
    for_type::<f16>(out);
    for_type::<bf16>(out);
    for_type::<u8>(out);
    for_type::<u32>(out);
    for_type::<i64>(out);
    out.push(case("binary", "badd_f64", |cx| arith::<f64>(cx, "add", |l, r| l.add(r))));
}
