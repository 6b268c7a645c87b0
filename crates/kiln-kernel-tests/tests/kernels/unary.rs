//! unary: candle's elementwise unary ops (`Tensor::exp`, `gelu`, `elu`, `powf`,
//! ...) and `ucopy`, which candle uses to make strided tensors contiguous.

use candle_core::{DType, Tensor};
use half::{bf16, f16};

use crate::support::{case, launch_map, push_elem, values, views, what, Case, Ctx, Elem, Input};

type Reference = fn(&Tensor) -> candle_core::Result<Tensor>;

/// In f32, then back: for ops candle-core has no `Tensor` method for
/// (candle-nn's sigmoid; normcdf inside gelu_erf).
fn via_f32(x: &Tensor, f: impl Fn(&Tensor) -> candle_core::Result<Tensor>) -> candle_core::Result<Tensor> {
    f(&x.to_dtype(DType::F32)?)?.to_dtype(x.dtype())
}

struct Op {
    kernel: &'static str,
    lo: f64,
    hi: f64,
    reference: Reference,
    /// Roundings in the kernel's own precision beyond one (half types compute
    /// gelu step by step in half precision).
    scale: f64,
    /// `uelu`/`upowf` take a parameter before the input.
    param: Option<f64>,
}

const ELU_ALPHA: f64 = 1.3;
const POWF_E: f64 = 1.7;

fn ops() -> Vec<Op> {
    let op = |kernel, lo, hi, reference: Reference, scale| Op { kernel, lo, hi, reference, scale, param: None };
    vec![
        op("uneg", -3.0, 3.0, |x| x.neg(), 1.0),
        op("urecip", 0.5, 3.0, |x| x.recip(), 1.0),
        op("uexp", -3.0, 3.0, |x| x.exp(), 1.0),
        op("ulog", 0.1, 5.0, |x| x.log(), 1.0),
        op("usin", -3.0, 3.0, |x| x.sin(), 1.0),
        op("ucos", -3.0, 3.0, |x| x.cos(), 1.0),
        op("utanh", -3.0, 3.0, |x| x.tanh(), 1.0),
        op("uerf", -2.0, 2.0, |x| x.erf(), 1.0),
        op("uceil", -3.0, 3.0, |x| x.ceil(), 1.0),
        op("ufloor", -3.0, 3.0, |x| x.floor(), 1.0),
        op("uround", -3.0, 3.0, |x| x.round(), 1.0),
        op("uabs", -3.0, 3.0, |x| x.abs(), 1.0),
        op("usqr", -3.0, 3.0, |x| x.sqr(), 1.0),
        op("usqrt", 0.0, 5.0, |x| x.sqrt(), 1.0),
        op("ugelu", -3.0, 3.0, |x| x.gelu(), 4.0),
        op("ugelu_erf", -3.0, 3.0, |x| x.gelu_erf(), 4.0),
        op("urelu", -3.0, 3.0, |x| x.relu(), 1.0),
        op("usilu", -3.0, 3.0, |x| x.silu(), 3.0),
        op("usign", -3.0, 3.0, |x| x.sign(), 1.0),
        op("usigmoid", -3.0, 3.0, |x| via_f32(x, |x| (x.neg()?.exp()? + 1.0)?.recip()), 3.0),
        op("unormcdf", -3.0, 3.0, |x| via_f32(x, |x| ((x / std::f64::consts::SQRT_2)?.erf()? + 1.0)? * 0.5), 3.0),
        Op { kernel: "uelu", lo: -3.0, hi: 3.0, reference: |x| x.elu(ELU_ALPHA), scale: 3.0, param: Some(ELU_ALPHA) },
        Op { kernel: "upowf", lo: 0.1, hi: 3.0, reference: |x| x.powf(POWF_E), scale: 3.0, param: Some(POWF_E) },
    ]
}

fn run<E: Elem>(cx: &Ctx, op: &Op) -> anyhow::Result<()> {
    let kernel = format!("{}_{}", op.kernel, E::NAME);
    for view in views() {
        let x = Input::<E>::new(cx, &view, op.lo, op.hi)?;
        let want = values::<E>(&(op.reference)(&x.tensor)?)?;
        let param = op.param;
        let got = launch_map(
            cx,
            "unary",
            &kernel,
            &x,
            &want,
            |a| {
                if let Some(p) = param {
                    push_elem(a, E::from_f64(p));
                }
            },
            |_| {},
        )?;
        cx.check(&what(&kernel, &view), &got, &want, E::tol().scale(op.scale))?;
    }
    Ok(())
}

/// `ucopy`: a strided input copied out contiguously (candle's `copy_strided_src`).
fn copy<E: Elem>(cx: &Ctx) -> anyhow::Result<()> {
    let kernel = format!("ucopy_{}", E::NAME);
    let (lo, hi) = if E::FLOAT { (-100.0, 100.0) } else { (0.0, 250.0) };
    for view in views() {
        let x = Input::<E>::new(cx, &view, lo, hi)?;
        let want = values::<E>(&x.tensor.contiguous()?)?;
        let got = launch_map(cx, "unary", &kernel, &x, &want, |_| {}, |_| {})?;
        cx.check(&what(&kernel, &view), &got, &want, candle_exact())?;
    }
    Ok(())
}

fn candle_exact() -> crate::support::Tol {
    crate::support::Tol::EXACT
}

pub fn cases(out: &mut Vec<Case>) {
    for (i, op) in ops().into_iter().enumerate() {
        let k = op.kernel;
        let op = std::sync::Arc::new(op);
        let (a, b, c) = (op.clone(), op.clone(), op.clone());
        out.push(case("unary", format!("{k}_f32"), move |cx| run::<f32>(cx, &a)));
        out.push(case("unary", format!("{k}_f16"), move |cx| run::<f16>(cx, &b)));
        out.push(case("unary", format!("{k}_bf16"), move |cx| run::<bf16>(cx, &c)));
        if i == 2 {
            let d = op.clone();
            out.push(case("unary", format!("{k}_f64"), move |cx| run::<f64>(cx, &d)));
        }
    }
    out.push(case("unary", "ucopy_f32", copy::<f32>));
    out.push(case("unary", "ucopy_f16", copy::<f16>));
    out.push(case("unary", "ucopy_bf16", copy::<bf16>));
    out.push(case("unary", "ucopy_f64", copy::<f64>));
    out.push(case("unary", "ucopy_u8", copy::<u8>));
    out.push(case("unary", "ucopy_u32", copy::<u32>));
    out.push(case("unary", "ucopy_i64", copy::<i64>));
}
