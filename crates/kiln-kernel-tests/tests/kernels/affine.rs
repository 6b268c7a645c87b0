//! affine: `out = x * mul + add` (candle's `Tensor::affine`).

use half::{bf16, f16};

use crate::support::{case, launch_map, push_elem, values, views, what, Case, Ctx, Elem, Input};

fn run<E: Elem>(cx: &Ctx) -> anyhow::Result<()> {
    // Integers stay small: candle's CPU affine overflows (and panics in debug) past the type's range.
    let (lo, hi, mul, add) = if E::FLOAT { (-3.0, 3.0, 1.75, -0.5) } else { (0.0, 20.0, 3.0, 7.0) };
    let kernel = format!("affine_{}", E::NAME);
    for view in views() {
        let x = Input::<E>::new(cx, &view, lo, hi)?;
        let want = values::<E>(&x.tensor.affine(mul, add)?)?;
        let got = launch_map(
            cx,
            "affine",
            &kernel,
            &x,
            &want,
            |_| {},
            |a| {
                push_elem(a, E::from_f64(mul));
                push_elem(a, E::from_f64(add));
            },
        )?;
        cx.check(&what(&kernel, &view), &got, &want, E::tol())?;
    }
    Ok(())
}

pub fn cases(out: &mut Vec<Case>) {
    out.push(case("affine", "affine_f32", run::<f32>));
    out.push(case("affine", "affine_f16", run::<f16>));
    out.push(case("affine", "affine_bf16", run::<bf16>));
    out.push(case("affine", "affine_f64", run::<f64>));
    out.push(case("affine", "affine_u8", run::<u8>));
    out.push(case("affine", "affine_u32", run::<u32>));
    out.push(case("affine", "affine_i64", run::<i64>));
}
