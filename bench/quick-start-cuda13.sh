#!/usr/bin/env bash
# On an NVIDIA GPU host with CUDA 13's libraries and no cargo: runs a quick-start binary
# (examples/quick-start/cuda built on the CPU machine with CUDARC_CUDA_VERSION=13000 and
# KILN_CUDA_LINK_STUBS=1, then stripped and xz-compressed to fit the carry limit) twice:
# against the machine's CUDA 13 libraries (it must compute on the GPU), and with kiln's
# stand-ins (its build's OUT_DIR/kiln-cuda-stubs/run, carried as standins/) first on
# LD_LIBRARY_PATH (it must stop, naming the stand-in). docs/results/quick-start-cuda13-h200.txt.
#
#   bash bench/quick-start-cuda13.sh CARRY     (CARRY: quick-start-cuda.xz and standins/)
set -u
cd "${1:?the carried folder}"
[ -x quick-start-cuda ] || { python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('quick-start-cuda.xz'), open('quick-start-cuda','wb'))" && chmod +x quick-start-cuda; }
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
dirs=""
for lib in libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13; do
  f=$(find / -xdev -name "$lib" -not -path '*/proc/*' 2>/dev/null | grep -v standins | head -1)
  echo "$lib: ${f:-not found}"
  [ -n "$f" ] && dirs="$dirs:$(dirname "$f")"
done
echo "== 1. the quick start (built on the CPU machine with CUDA 13 stand-ins) against this machine's CUDA 13 libraries"
LD_LIBRARY_PATH="${dirs#:}" ./quick-start-cuda; echo "rc=$?"
echo "== 2. the same binary with kiln's stand-ins found first, on this machine with the NVIDIA driver"
LD_LIBRARY_PATH="$PWD/standins" ./quick-start-cuda; echo "rc=$?"
