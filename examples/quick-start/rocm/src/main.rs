//! What a HIP host loads from kiln's crates: per module, one clang offload
//! bundle with a code object for every carried gfx arch (`hipModuleLoadData`
//! takes it as is), and the single code object `kiln::select` picks for a
//! device. Runs anywhere: nothing here needs a GPU or ROCm.

use kiln_candle_kernels as kernels;

fn main() {
    let arch = std::env::args().nth(1).unwrap_or_else(|| "gfx1100".into());
    for module in [&kernels::AFFINE, &kernels::UNARY, &kernels::QUANTIZED] {
        let bundle = module.hsaco();
        match kernels::kiln::select(module.name(), &arch) {
            Ok(a) => println!("{}: bundle {} bytes; for {arch}: {} ({} bytes, sha256 {})", module.name(), bundle.len(), a.path, a.size, a.sha256),
            Err(e) => println!("{}: bundle {} bytes; for {arch}: {e}", module.name(), bundle.len()),
        }
    }
}
