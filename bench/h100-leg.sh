#!/usr/bin/env bash
# The NVIDIA leg of the GPU matrix and the loader's cold-load numbers, run on a
# GPU machine that has no cargo, no CUDA toolkit and no kiln toolchain: only
# the driver. What it needs is made on a CPU-only machine and carried in one
# folder (default target/gpu-b):
#
#   cargo nextest archive -p kiln-kernel-tests -p kiln-loader --archive-file target/gpu-b/kiln-tests.tar.zst
#   xz -c "$(command -v cargo-nextest)" > target/gpu-b/cargo-nextest.xz
#   cargo build --release -p kiln-loader --bin load-bench && cp target/release/load-bench target/gpu-b/
#   target/gpu-b/dist-sm90/: target/dist's manifest.json, cuda/sm_90, cuda/compute_89,
#                            and affine/fill of cuda/sm_80 and cuda/compute_80 (the loader's fixture)
#
# Run from the repository root with OUT set; the results land in $OUT:
#   load-best.{json,md}, load-ptx.{json,md}   load-bench, CUDA_CACHE_DISABLE=1
#   list.json                                 nextest's list (knows the skipped tests)
#   junit.xml, nextest.txt                    the run, --profile ci as in CI
# Back on the CPU machine:
#   cargo xtask test-matrix --from-junit sm_90=$OUT/junit.xml --list sm_90=$OUT/list.json
set -uo pipefail
B="${1:-target/gpu-b}"
OUT="${OUT:?set OUT}"
python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" \
  "$B/cargo-nextest.xz" "$B/cargo-nextest" && chmod +x "$B/cargo-nextest"
export KILN_DIST_DIR="$PWD/$B/dist-sm90" KILN_TEST_ARCH=sm_90
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv > "$OUT/gpu.txt" 2>&1
[ -n "${SKIP_LOAD:-}" ] || CUDA_CACHE_DISABLE=1 "$B/load-bench" --prefer best --out "$OUT/load-best.json"
[ -n "${SKIP_LOAD:-}" ] || CUDA_CACHE_DISABLE=1 "$B/load-bench" --prefer ptx --out "$OUT/load-ptx.json"
mkdir -p "${TMPDIR:-/tmp}/kiln-extract" "${TMPDIR:-/tmp}/kiln-extract-list"
filter='package(kiln-kernel-tests) | package(kiln-loader)'
nx=("$B/cargo-nextest" nextest)
"${nx[@]}" list --archive-file "$B/kiln-tests.tar.zst" --workspace-remap . -E "$filter" \
  --extract-to "${TMPDIR:-/tmp}/kiln-extract-list" --message-format json > "$OUT/list.json" 2> "$OUT/list.err"
"${nx[@]}" run --archive-file "$B/kiln-tests.tar.zst" --workspace-remap . -E "$filter" \
  --extract-to "${TMPDIR:-/tmp}/kiln-extract" --profile ci --no-tests=fail > "$OUT/nextest.txt" 2>&1
rc=$?
junit=$(find target "${TMPDIR:-/tmp}/kiln-extract" -path '*nextest/ci/junit.xml' 2>/dev/null | head -n 1)
cp "$junit" "$OUT/junit.xml" || echo "no junit.xml" >&2
tail -n 5 "$OUT/nextest.txt"
exit $rc
