//! Tests of the checking itself, on the host: a kernel test is only worth
//! something if an unwritten element, a wrong value or a wrong layout fails it.

use half::{bf16, f16};
use libtest_mimic::{Failed, Trial};

use crate::support::{compare, Elem, Input, Rng, Tol, View};

fn t(name: &str, f: fn() -> Result<(), String>) -> Trial {
    Trial::test(format!("host::{name}"), move || f().map_err(Failed::from))
}

fn must_fail<E: Elem>(got: &[E], want: &[E], tol: Tol, why: &str) -> Result<(), String> {
    match compare("x", got, want, tol) {
        Err(_) => Ok(()),
        Ok(()) => Err(format!("compare accepted {why}: got {got:?}, want {want:?}")),
    }
}

fn poison_never_passes() -> Result<(), String> {
    fn each<E: Elem>(want: Vec<E>) -> Result<(), String> {
        // What `Ctx::poisoned` writes before a launch, for these expected values.
        let p: Vec<E> = want.iter().map(|w| if w.to_f64() == E::poison().to_f64() { E::poison().flip() } else { E::poison() }).collect();
        for (i, (p, w)) in p.iter().zip(&want).enumerate() {
            if compare("x", &[*p], &[*w], E::tol().scale(1000.0)).is_ok() {
                return Err(format!("{}: poison {p:?} passes for expected {w:?} at {i}", E::NAME));
            }
        }
        Ok(())
    }
    each::<f32>(vec![0.0, 1.0, -3.5, f32::MAX])?;
    each::<f16>(vec![f16::ZERO, f16::ONE, f16::MAX])?;
    each::<bf16>(vec![bf16::ZERO, bf16::ONE, bf16::MAX])?;
    each::<u8>(vec![0, 1, 0xAB, 0x54, 255])?;
    each::<u32>(vec![0, 0xABAB_ABAB, 7])?;
    each::<i64>(vec![0, 0xABAB_ABAB_ABAB_ABABu64 as i64, -1])
}

fn compare_rejects() -> Result<(), String> {
    must_fail(&[1.0f32, f32::NAN], &[1.0, 2.0], f32::tol(), "NaN (an unwritten, poisoned element)")?;
    must_fail(&[1.0f32, 2.001], &[1.0, 2.0], f32::tol(), "a 5e-4 relative error in f32")?;
    must_fail(&[bf16::from_f32(1.0), bf16::from_f32(1.0625)], &[bf16::from_f32(1.0), bf16::from_f32(1.0)], bf16::tol(), "8 bf16 ulps")?;
    must_fail(&[5u8, 171], &[5, 170], u8::tol(), "an integer off by one")?;
    must_fail(&[1.0f32], &[1.0, 2.0], f32::tol(), "a short output")?;
    must_fail::<f32>(&[], &[], f32::tol(), "nothing at all")?;
    must_fail(&[f32::INFINITY], &[f32::MAX], f32::tol(), "inf for a finite value")?;
    compare("x", &[1.0f32, 2.000001], &[1.0, 2.0], f32::tol()).map_err(|e| format!("rejected 1 ulp: {e}"))?;
    compare("x", &[f32::NAN], &[f32::NAN], f32::tol()).map_err(|e| format!("NaN where NaN is expected: {e}"))?;
    compare("x", &[bf16::from_f32(1.0078125)], &[bf16::from_f32(1.0)], bf16::tol()).map_err(|e| format!("1 bf16 ulp: {e}"))
}

fn views_are_what_they_claim() -> Result<(), String> {
    let check = |view: View, contiguous: bool, offset: usize| -> Result<(), String> {
        let storage: Vec<f32> = (0..view.base_len()).map(|i| i as f32).collect();
        let x = Input::from_storage(storage, &view).map_err(|e| e.to_string())?;
        if x.is_contiguous() != contiguous || x.offset() != offset || x.dims() != view.shape() {
            return Err(format!(
                "{}: contiguous {} offset {} dims {:?}, expected {contiguous} {offset} {:?}",
                view.tag(),
                x.is_contiguous(),
                x.offset(),
                x.dims(),
                view.shape()
            ));
        }
        // The view's values are the storage read through its dims and strides.
        let vals: Vec<f32> = crate::support::values(&x.tensor).map_err(|e| e.to_string())?;
        let (dims, strides) = (x.dims(), x.strides());
        for (i, v) in vals.iter().enumerate() {
            let (mut rem, mut at) = (i, x.offset());
            for d in (0..dims.len()).rev() {
                at += (rem % dims[d]) * strides[d];
                rem /= dims[d];
            }
            if *v != at as f32 {
                return Err(format!("{}: element {i} is {v}, storage says {at}", view.tag()));
            }
        }
        Ok(())
    };
    check(View::Contig(vec![1027]), true, 0)?;
    check(View::Transposed(37, 29), false, 0)?;
    check(View::Narrow { base: vec![3, 37, 40], dim: 2, start: 3, len: 33 }, false, 3)?;
    check(View::Narrow { base: vec![5, 37, 29], dim: 0, start: 1, len: 4 }, true, 37 * 29)?;
    check(View::Permute { base: vec![2, 13, 11, 3], perm: vec![0, 3, 1, 2] }, false, 0)?;
    check(View::Broadcast { from: vec![1, 29], to: vec![37, 29] }, false, 0)
}

fn rng_is_seeded_and_in_range() -> Result<(), String> {
    let a: Vec<f32> = Rng::new(7).vec(100, -2.0, 3.0);
    let b: Vec<f32> = Rng::new(7).vec(100, -2.0, 3.0);
    let c: Vec<f32> = Rng::new(8).vec(100, -2.0, 3.0);
    let ints: Vec<u8> = Rng::new(9).vec(1000, 3.0, 9.0);
    if a != b || a == c {
        return Err("the same seed must give the same inputs, another seed others".into());
    }
    if a.iter().any(|v| !(-2.0..3.0).contains(v)) || ints.iter().any(|v| !(3..=9).contains(v)) || !ints.contains(&3) || !ints.contains(&9) {
        return Err("values out of range, or the range's ends never drawn".into());
    }
    Ok(())
}

pub fn trials() -> Vec<Trial> {
    vec![
        t("check::poison_never_passes", poison_never_passes),
        t("check::compare_rejects_wrong_outputs", compare_rejects),
        t("check::views_are_what_they_claim", views_are_what_they_claim),
        t("check::rng_is_seeded_and_in_range", rng_is_seeded_and_in_range),
    ]
}
