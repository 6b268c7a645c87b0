//! fill: `fill_<T>` (a whole buffer), `const_set_<T>` (candle's
//! `Tensor::const_set`, also through strided views), `copy2d_<T>` (candle's
//! `copy2d`, behind `Tensor::cat` and `slice_set`).

use candle_core::{Device as Cpu, Tensor};
use half::{bf16, f16};
use kiln_loader::{KernelArgs, LaunchConfig};

use crate::support::{case, for_num_elems, ptr_at, push_elem, values, views, ArgsExt, Case, Ctx, Elem, Input, Tol};

fn value<E: Elem>() -> E {
    E::from_f64(if E::FLOAT { -1.75 } else { 77.0 })
}

fn fill<E: Elem>(cx: &Ctx) -> anyhow::Result<()> {
    let kernel = format!("fill_{}", E::NAME);
    // Sizes around a block and a grid-stride loop that has to go round.
    for (n, grid) in [(1027usize, None), (5000, Some(2u32))] {
        let want = values::<E>(&Tensor::full(value::<E>(), n, &Cpu::Cpu)?)?;
        let out = cx.poisoned(&want)?;
        let mut a = KernelArgs::new();
        a.buf(&out);
        push_elem(&mut a, value::<E>());
        a.push(n);
        let cfg = match grid {
            Some(g) => LaunchConfig { grid: (g, 1, 1), block: (256, 1, 1), shared_mem_bytes: 0 },
            None => for_num_elems(n),
        };
        cx.launch("fill", &kernel, cfg, &mut a)?;
        cx.check(&format!("{kernel} of {n} with grid {:?}", cfg.grid), &cx.download::<E>(&out)?, &want, Tol::EXACT)?;
    }
    Ok(())
}

/// const_set writes through the view into the storage; every other element of
/// the storage must keep its value.
fn const_set<E: Elem>(cx: &Ctx) -> anyhow::Result<()> {
    let kernel = format!("const_set_{}", E::NAME);
    for view in views() {
        let x = Input::<E>::new(cx, &view, 0.0, 50.0)?;
        let base = Tensor::from_vec(x.storage.clone(), view.base_shape(), &Cpu::Cpu)?;
        view.apply(&base)?.const_set(value::<E>().to_scalar())?;
        let want = values::<E>(&base)?;
        let buf = cx.upload(&x.storage)?;
        let info = if x.is_contiguous() { None } else { Some(cx.info(&[&x.dims(), &x.strides()])?) };
        let mut a = KernelArgs::new();
        a.push(x.elem_count()).push(x.dims().len()).push(info.as_ref().map_or(0u64, |b| b.device_ptr()));
        push_elem(&mut a, value::<E>());
        a.push(ptr_at::<E>(&buf, x.offset()));
        cx.launch("fill", &kernel, for_num_elems(x.elem_count()), &mut a)?;
        cx.check(&format!("{kernel} through {}", view.tag()), &cx.download::<E>(&buf)?, &want, Tol::EXACT)?;
    }
    Ok(())
}

/// d1 rows of d2 elements from a (d1, src_s) storage at column src_o into a
/// (d1, dst_s) storage at column dst_o; the rest of dst is untouched.
fn copy2d<E: Elem>(cx: &Ctx) -> anyhow::Result<()> {
    let kernel = format!("copy2d_{}", E::NAME);
    let (d1, d2, src_s, dst_s, src_o, dst_o) = (37usize, 29usize, 40usize, 45usize, 3usize, 7usize);
    let src: Vec<E> = cx.rng().vec(d1 * src_s, 0.0, 100.0);
    let dst: Vec<E> = cx.rng().vec(d1 * dst_s, 0.0, 100.0);
    let src_t = Tensor::from_vec(src.clone(), (d1, src_s), &Cpu::Cpu)?;
    let dst_t = Tensor::from_vec(dst.clone(), (d1, dst_s), &Cpu::Cpu)?;
    let want = values::<E>(&dst_t.slice_assign(&[0..d1, dst_o..dst_o + d2], &src_t.narrow(1, src_o, d2)?)?)?;
    let (sb, db) = (cx.upload(&src)?, cx.upload(&dst)?);
    let mut a = KernelArgs::new();
    a.push(ptr_at::<E>(&sb, src_o)).push(ptr_at::<E>(&db, dst_o));
    a.push(d1 as u32).push(d2 as u32).push(src_s as u32).push(dst_s as u32);
    cx.launch("fill", &kernel, for_num_elems(d1 * d2), &mut a)?;
    cx.check(&format!("{kernel} {d1}x{d2}"), &cx.download::<E>(&db)?, &want, Tol::EXACT)
}

macro_rules! per_type {
    ($out:ident, $f:ident, $name:literal) => {
        $out.push(case("fill", format!("{}_f32", $name), $f::<f32>));
        $out.push(case("fill", format!("{}_f16", $name), $f::<f16>));
        $out.push(case("fill", format!("{}_bf16", $name), $f::<bf16>));
        $out.push(case("fill", format!("{}_f64", $name), $f::<f64>));
        $out.push(case("fill", format!("{}_u8", $name), $f::<u8>));
        $out.push(case("fill", format!("{}_u32", $name), $f::<u32>));
        $out.push(case("fill", format!("{}_i64", $name), $f::<i64>));
    };
}

pub fn cases(out: &mut Vec<Case>) {
    per_type!(out, const_set, "const_set");
    per_type!(out, copy2d, "copy2d");
    per_type!(out, fill, "fill");
}
