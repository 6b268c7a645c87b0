# shellcheck shell=bash disable=SC2034  # settings, read by the scripts that source this
# Settings of the candle-core suite harness (sourced by the other scripts); the helpers are
# bench/lib.sh's. Everything it builds or downloads lives under $WORK, outside the
# repository, except the packed test binaries (target/candle-proof/, ignored by git), which
# the GPU run carries.

set -euo pipefail

# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
HERE="$BENCH/candle-core"
WORK="${KILN_PROOF_WORK:-/root/proof}"
pins_load ""

# candle-core at the version of the candle set's source crate (candle-kernels: candle
# releases them together), exactly as crates.io serves it. candle-core is the consumer
# kiln's crates are tested in, not a kiln input, so its sha256 is pinned here.
CANDLE_CORE_VERSION="$(pin sets candle source version)"
CANDLE_CORE_URL="$(crate_url candle-core "$CANDLE_CORE_VERSION")"
CANDLE_CORE_SHA256=d11c8be87cfbaef9ebb62fb3f850d1fc8e00cc1d11d393fdbe55a4d5c2cdb325

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
