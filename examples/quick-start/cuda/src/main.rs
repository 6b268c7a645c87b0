//! candle-core on CUDA, with kiln's prebuilt kernels: on a GPU it runs a kernel
//! (native SASS where kiln carries it, no PTX JIT); without one it says so and
//! runs the same on the CPU.

use candle_core::{Device, Tensor};

fn main() -> candle_core::Result<()> {
    let manifest = kiln_candle_kernels::kiln::manifest();
    println!("kiln kernels: {} artifacts, toolchain {}", manifest.artifacts.len(), kiln_candle_kernels::kiln::toolchain().identity);
    let device = match Device::new_cuda(0) {
        Ok(gpu) => gpu,
        Err(e) => {
            println!("no CUDA device ({e}); on the CPU instead");
            Device::Cpu
        }
    };
    let x = Tensor::arange(0f32, 6., &device)?;
    let y = x.affine(2.0, 1.0)?.sqr()?.sum_all()?;
    println!("{device:?}: sum((2x+1)^2) for x in 0..6 = {}", y.to_scalar::<f32>()?);
    Ok(())
}
