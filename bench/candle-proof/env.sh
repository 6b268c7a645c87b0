# Shared settings of the candle-core proof harness (sourced by the other scripts).
# Everything it builds or downloads lives under $WORK, outside the repository,
# except the packed test binaries (target/candle-proof/, ignored by git), which the
# GPU run carries.

set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
WORK="${KILN_PROOF_WORK:-/root/proof}"

# candle-core 0.11.1, exactly as crates.io serves it.
CANDLE_CORE_VERSION=0.11.1
CANDLE_CORE_URL="https://static.crates.io/crates/candle-core/candle-core-${CANDLE_CORE_VERSION}.crate"
CANDLE_CORE_SHA256=d11c8be87cfbaef9ebb62fb3f850d1fc8e00cc1d11d393fdbe55a4d5c2cdb325
# The upstream kernels crate candle-core's own lockfile resolves to (for the record:
# cargo checks it against the index's checksum when it downloads it).
CANDLE_KERNELS_SHA256=8dc057aec95c3b1a0e595227cd039c1436da596f79ccc9e025ba17d070315851

# kiln's packaged crates (cargo xtask dist).
KILN_DIST="${KILN_DIST_DIR:-$REPO/target/dist}"
KILN_CRATES="$KILN_DIST/crates"

# Where things go.
CUDA13="$WORK/cuda13"                 # pip --target of cuda13-wheels.lock
CUDA13_ROOT="$CUDA13/nvidia/cu13"     # bin/nvcc, include/, lib/*.so.13
LINKROOT="$WORK/cuda-link"            # CUDA_HOME for cudarc: lib/lib{cuda,cudart,nvrtc,cublas,cublasLt,curand}.so
NVCC_WRAP="$WORK/nvcc-wrap"           # bin/nvcc: logs each call, then runs $CUDA13_ROOT/bin/nvcc
PACK="$REPO/target/candle-proof"      # what the GPU run carries (ignored by git)
RESULTS="$WORK/results"

# The CUDA version cudarc is built for (skips its `nvcc --version`), and the arch
# upstream's build.rs compiles for (cudaforge: 90 -> sm_90a PTX and SASS).
export CUDARC_CUDA_VERSION=13000
UPSTREAM_COMPUTE_CAP=90

VARIANTS=(upstream kiln)
TEST_TARGET=all_tests
