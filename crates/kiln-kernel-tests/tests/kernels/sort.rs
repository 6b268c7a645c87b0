//! sort: `asort_asc_<T>` / `asort_desc_<T>` (candle's `arg_sort_last_dim`), a
//! bitonic sort of each row in shared memory, rows padded to a power of two.

use candle_core::{Device as Cpu, Tensor};
use half::{bf16, f16};
use kiln_loader::{KernelArgs, LaunchConfig};

use crate::support::{case, ptr_at, values, ArgsExt, Case, Ctx, Elem, Input, Tol, View};

fn run<E: Elem>(cx: &Ctx, asc: bool) -> anyhow::Result<()> {
    let kernel = format!("asort_{}_{}", if asc { "asc" } else { "desc" }, E::NAME);
    // 37 (padded to 64), 1000 (1024: a full block), 1500 (2048: more columns
    // than threads). Rows start one row into the storage (an offset).
    for ncols in [37usize, 1000, 1500] {
        let nrows = 5;
        let view = View::Narrow { base: vec![nrows + 1, ncols], dim: 0, start: 1, len: nrows };
        let (lo, hi) = if E::FLOAT { (-100.0, 100.0) } else { (0.0, 250.0) };
        let x = Input::<E>::new(cx, &view, lo, hi)?;
        let want_idx = values::<u32>(&x.tensor.arg_sort_last_dim(asc)?)?;
        let pad = ncols.next_power_of_two();
        let inp = cx.upload(&x.storage)?;
        let out = cx.poisoned(&want_idx)?;
        let mut a = KernelArgs::new();
        a.push(ptr_at::<E>(&inp, x.offset())).buf(&out).push(ncols as i32).push(pad as i32);
        let cfg = LaunchConfig { grid: (nrows as u32, 1, 1), block: (pad.min(1024) as u32, 1, 1), shared_mem_bytes: (pad * 4) as u32 };
        cx.launch("sort", &kernel, cfg, &mut a)?;
        let got_idx = if cx.is_dry() { want_idx.clone() } else { cx.download::<u32>(&out)? };
        let what = format!("{kernel} of {nrows}x{ncols}");
        // Every row a permutation of 0..ncols ...
        for (r, row) in got_idx.chunks(ncols).enumerate() {
            let mut seen = vec![false; ncols];
            for &i in row {
                if i as usize >= ncols || std::mem::replace(&mut seen[i as usize], true) {
                    anyhow::bail!("{what}: row {r} is not a permutation of 0..{ncols} (index {i})");
                }
            }
        }
        // ... that orders the values as the CPU's does (ties may be ordered differently).
        let at = |idx: Vec<u32>| -> anyhow::Result<Vec<E>> {
            let ids = Tensor::from_vec(idx, (nrows, ncols), &Cpu::Cpu)?;
            values::<E>(&x.tensor.contiguous()?.gather(&ids, 1)?)
        };
        cx.check(&what, &at(got_idx)?, &at(want_idx)?, Tol::EXACT)?;
    }
    Ok(())
}

fn for_type<E: Elem>(out: &mut Vec<Case>) {
    out.push(case("sort", format!("asort_asc_{}", E::NAME), |cx| run::<E>(cx, true)));
    out.push(case("sort", format!("asort_desc_{}", E::NAME), |cx| run::<E>(cx, false)));
}

pub fn cases(out: &mut Vec<Case>) {
    for_type::<f32>(out);
    for_type::<f16>(out);
    for_type::<bf16>(out);
    for_type::<f64>(out);
    for_type::<u8>(out);
    for_type::<u32>(out);
    for_type::<i64>(out);
}
