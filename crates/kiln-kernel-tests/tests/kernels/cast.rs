//! cast: `cast_<src>_<dst>` (candle's `Tensor::to_dtype`), strided inputs included.

use half::{bf16, f16};

use crate::support::{case, launch_map, values, views, what, Case, Ctx, Elem, Input};

fn run<S: Elem, D: Elem>(cx: &Ctx) -> anyhow::Result<()> {
    let kernel = format!("cast_{}_{}", S::NAME, D::NAME);
    // Float to integer stays in the target's range (out of range is undefined
    // behaviour in C++ and saturates in Rust); integer narrowing wraps on both
    // sides, so it is tested past the target's range.
    let (lo, hi) = match (S::FLOAT, D::FLOAT) {
        (true, false) => (0.0, 250.0),
        (true, true) => (-100.0, 100.0),
        (false, false) => (0.0, 1000.0),
        (false, true) => (0.0, 60000.0),
    };
    for view in views() {
        let x = Input::<S>::new(cx, &view, lo, hi)?;
        let want = values::<D>(&x.tensor.to_dtype(D::DTYPE)?)?;
        let got = launch_map(cx, "cast", &kernel, &x, &want, |_| {}, |_| {})?;
        cx.check(&what(&kernel, &view), &got, &want, D::tol())?;
    }
    Ok(())
}

macro_rules! casts {
    ($out:ident: $($s:ty => [$($d:ty),*]),* $(,)?) => {
        $($(
            $out.push(case("cast", format!("cast_{}_{}", <$s as Elem>::NAME, <$d as Elem>::NAME), run::<$s, $d>));
        )*)*
    };
}

pub fn cases(out: &mut Vec<Case>) {
    casts!(out:
        f32 => [f16, bf16, f64, u8, u32, i64],
        f16 => [f32, bf16, f64, u8, u32],
        bf16 => [f32, f16, f64, u8, u32],
        f64 => [f32, f16, bf16],
        u8 => [f32, f16, bf16, u32, i64],
        u32 => [f32, f16, bf16, u8, i64],
        i64 => [f32, f64, u8, u32],
    );
}
