//! The static library's PTX, run: candle-core's MMQ activation quantizer
//! (`ffi::launch_mmq_quantize_q8_1_D4`, in kiln's libmoe.a) on a fixed input,
//! called as candle-core's fast_mmq.rs calls it, with the device's SASS and,
//! under `CUDA_FORCE_PTX_JIT=1`, with the library's compute_90 PTX that the
//! driver JIT-compiles: what a GPU beyond the pinned nvcc (Blackwell) runs.
//! Prints the sha256 of the quantized bytes and a few of them; the GPU script
//! runs it both ways on a fresh JIT cache and compares. No cuBLAS, no module
//! loads (CUDA_FORCE_PTX_JIT would break cuBLAS's own kernels).
//! Built by bench/candle-core/dropin-load.sh libptx (not a workspace member).

use std::ffi::c_void;

use candle_kernels::ffi;
use cudarc::driver::{CudaContext, DevicePtr};
use sha2::{Digest, Sha256};

const QK8_1: usize = 32;
const BLOCK_Q8_1_MMQ_SIZE: usize = 4 * QK8_1 + 4 * 4;

fn main() {
    let ctx = CudaContext::new(0).expect("a CUDA device");
    let stream = ctx.default_stream();
    let (rows, k) = (4usize, 512usize);
    let x: Vec<f32> = (0..rows * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
    let dx = stream.clone_htod(&x).expect("copy x");
    let bytes = rows * (k / (4 * QK8_1)) * BLOCK_Q8_1_MMQ_SIZE + 128 * BLOCK_Q8_1_MMQ_SIZE;
    let out = stream.alloc_zeros::<u8>(bytes).expect("alloc");
    {
        let (xp, _gx) = dx.device_ptr(&stream);
        let (op, _go) = out.device_ptr(&stream);
        // SAFETY: the arguments candle-core's fast_mmq.rs passes for an f32 [rows, k] input.
        unsafe {
            ffi::launch_mmq_quantize_q8_1_D4(
                xp as *const c_void,
                std::ptr::null(),
                op as *mut c_void,
                0,
                k as i64,
                k as i64,
                0,
                0,
                k as i64,
                rows as i64,
                1,
                1,
                stream.cu_stream() as *mut c_void,
            );
        }
    }
    stream.synchronize().expect("the kernel ran");
    let host = stream.clone_dtoh(&out).expect("copy out");
    let used = &host[..rows * (k / (4 * QK8_1)) * BLOCK_Q8_1_MMQ_SIZE];
    let nonzero = used.iter().filter(|&&b| b != 0).count();
    let sha: String = Sha256::digest(used).iter().map(|b| format!("{b:02x}")).collect();
    println!(
        "{{\"force_ptx_jit\":{:?},\"bytes\":{},\"nonzero\":{nonzero},\"sha256\":\"{sha}\",\"first\":{:?}}}",
        std::env::var("CUDA_FORCE_PTX_JIT").unwrap_or_default(),
        used.len(),
        &used[..16]
    );
    assert!(nonzero > used.len() / 2, "the quantizer wrote (almost) nothing: the launch failed");
}
