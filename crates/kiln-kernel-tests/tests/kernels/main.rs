//! Kernel correctness tests: every candle-kernels module kiln builds, run on a
//! GPU through kiln-loader, compared with candle-core's CPU backend.
//!
//! The same test bodies run on CUDA and HIP: each case is listed once per
//! backend as `<backend>::<module>::<case>`. Whether a backend's cases run,
//! are skipped (listed as ignored, which nextest shows as SKIP and counts) or
//! must fail is decided when the tests are listed (kiln_kernel_tests::gate;
//! docs/gpu-tests.md). `host::…` tests check the checking itself and need no GPU.

mod affine;
mod binary;
mod cast;
mod conv;
mod fill;
mod host;
mod indexing;
mod quantized;
mod reduce;
mod sort;
mod support;
mod ternary;
mod unary;

use std::sync::Arc;

use kiln_kernel_tests::gate::{self, Gate};
use kiln_kernel_tests::names::test_name;
use kiln_loader::Backend;
use libtest_mimic::{Arguments, Failed, Trial};
use support::{Case, Ctx};

fn all_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    affine::cases(&mut cases);
    binary::cases(&mut cases);
    cast::cases(&mut cases);
    conv::cases(&mut cases);
    fill::cases(&mut cases);
    indexing::cases(&mut cases);
    quantized::cases(&mut cases);
    reduce::cases(&mut cases);
    sort::cases(&mut cases);
    ternary::cases(&mut cases);
    unary::cases(&mut cases);
    cases
}

/// Cases run a second time on CUDA through the PTX path (the driver
/// JIT-compiles kiln's compute_XX PTX instead of loading the cubin): the
/// first case of every module.
fn ptx_cases(cases: &[Case]) -> Vec<Case> {
    let mut seen = std::collections::BTreeSet::new();
    cases
        .iter()
        .filter(|c| seen.insert(c.module))
        .map(|c| Case { module: c.module, name: format!("ptx_{}", c.name), cuda_only: true, body: c.body.clone() })
        .collect()
}

fn main() {
    let args = Arguments::from_args();
    let cases = all_cases();
    let ptx = ptx_cases(&cases);
    // Only the listing and the selected tests need a decision; probing a
    // driver is cheap next to a test, and both list and run agree because
    // they read the same environment.
    let mut trials: Vec<Trial> = host::trials();
    let dry = support::dry_run();
    for backend in [Backend::Cuda, Backend::Hip] {
        let gate = if dry {
            Arc::new(Gate::Run(gate::Found { ordinal: 0, name: "dry run".into(), arch: "none".into() }))
        } else {
            Arc::new(gate::from_env(backend))
        };
        for c in cases.iter().chain(ptx.iter().filter(|_| backend == Backend::Cuda)) {
            let name = test_name(backend, c.module, &c.name);
            let body = c.body.clone();
            let is_ptx = c.cuda_only;
            let trial = match &*gate {
                Gate::Run(found) => {
                    let ordinal = found.ordinal;
                    Trial::test(name.clone(), move || {
                        let cx = Ctx::new(&name, backend, ordinal, is_ptx).map_err(|e| Failed::from(format!("{e:#}")))?;
                        body(&cx).map_err(|e| Failed::from(format!("{e:#}")))?;
                        if dry {
                            return Err(Failed::from("DRY RUN: inputs, references and kernel names are fine; nothing ran on a GPU"));
                        }
                        Ok(())
                    })
                }
                Gate::Skip(_) => Trial::test(name, || Ok(())).with_ignored_flag(true),
                Gate::Fail(why) => {
                    let why = why.clone();
                    Trial::test(name, move || Err(Failed::from(why.clone())))
                }
            };
            trials.push(trial);
        }
        if let Gate::Skip(why) = &*gate {
            // The listing is parsed by nextest and must stay clean: say it on stderr.
            eprintln!("kiln-kernel-tests: {} tests skipped: {why}", backend.as_str());
        }
    }
    libtest_mimic::run(&args, trials).exit();
}
