// Stand-in for CUDA's driver header <cuda.h>: candle's device code only reads
// CUDA_VERSION (cast.cu, for its pre-sm_80 bf16 casts). 12040 is the pinned nvcc
// 12.4 (pins.toml), matching __CUDACC_VER_* in candle_hip_compat.h.
#pragma once
#include "candle_hip_compat.h"
#ifndef CUDA_VERSION
#define CUDA_VERSION 12040
#endif
