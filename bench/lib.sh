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

# Helpers both proofs (this one and bench/flash-attn) use.

# URL to FILE, unless FILE is already there with SHA256; checked either way.
fetch_checked() { # url sha256 file
  if ! echo "$2  $3" | sha256sum -c --status 2>/dev/null; then
    curl -sSfL --retry 3 -o "$3.part" "$1"
    mv "$3.part" "$3"
  fi
  echo "$2  $3" | sha256sum -c --status \
    || { echo "$3 (from $1) does not have the pinned sha256 $2; nothing was built from it" >&2; return 1; }
  echo "$3: sha256 ok"
}

# PATH without any directory that holds an nvcc.
clean_path() {
  local out="" d dirs
  IFS=: read -ra dirs <<< "$PATH"
  for d in "${dirs[@]}"; do [ -e "$d/nvcc" ] || out="${out:+$out:}$d"; done
  echo "$out"
}

# Fails (saying where) if an nvcc is reachable: on PATH or in a usual CUDA home. The kiln
# variants build with none.
refuse_nvcc() {
  local p
  if command -v nvcc >/dev/null; then echo "kiln variant: nvcc is on PATH ($(command -v nvcc))" >&2; return 1; fi
  for p in /usr/local/cuda /opt/cuda /usr/lib/cuda /usr; do
    if [ -e "$p/bin/nvcc" ]; then echo "kiln variant: $p/bin/nvcc exists" >&2; return 1; fi
  done
}
