// Stand-in for CUDA's <cuda_fp16.h>: HIP's __half/__half2 (hip_fp16.h) are
// classes with CUDA's layout, conversions, operators and intrinsic names, so they
// are used as they are. What HIP 5.7 lacks for __half (16-bit shuffles, the 16-bit
// atomicCAS and atomicAdd(__half*)) is in candle_hip_compat.h.
#pragma once
#include "candle_hip_compat.h"
