#!/bin/sh
# Runs fpconv_vs_cuda.cpp inside kiln's sysroot (g++-13 and the CUDA 12.4 headers
# come from it). Usage: kernels/hip/test/run.sh <sysroot>   (~1-2 min on one core)
set -eu
R=${1:?usage: run.sh <kiln toolchain sysroot>}
HERE=$(cd "$(dirname "$0")/.." && pwd)
bwrap --ro-bind "$R" / --dev /dev --proc /proc --tmpfs /tmp --unshare-all --die-with-parent --clearenv \
  --setenv PATH /usr/bin:/bin --setenv LC_ALL C --ro-bind "$HERE" /kiln/hip --chdir /tmp -- \
  sh -c 'g++-13 -std=c++17 -O2 /kiln/hip/test/fpconv_vs_cuda.cpp -o fpconv && ./fpconv'
