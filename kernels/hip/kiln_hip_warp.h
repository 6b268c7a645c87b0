// Source-lane rules of CUDA's warp shuffles (PTX shfl.sync), as plain C++ on lane
// numbers, so that candle_hip_compat.h and kernels/hip/test/shfl_vs_cuda.cu (which
// runs them next to the real __shfl_*_sync on an NVIDIA GPU) share one definition.
//
// All numbers are lanes of a 32-lane warp. `width` is what CUDA allows: a power
// of two from 1 to 32. The warp splits into segments of `width` lanes; each rule
// returns the lane whose value the caller receives. Like PTX (b[4:0]), only the
// low five bits of the lane/offset argument count: __shfl_xor_sync(m, v, 33)
// exchanges with lane ^ 1, and __shfl_up_sync(m, v, -31) reads lane - 1.
#pragma once

#ifndef KILN_WARP_FN
#define KILN_WARP_FN __host__ __device__ inline
#endif

namespace kiln_warp {

KILN_WARP_FN unsigned seg_start(unsigned lane, int width) { return lane & ~unsigned(width - 1); }
KILN_WARP_FN unsigned seg_end(unsigned lane, int width) { return seg_start(lane, width) + unsigned(width - 1); }

// __shfl_sync: srcLane wraps inside the caller's segment.
KILN_WARP_FN unsigned src_idx(unsigned lane, int srcLane, int width) {
  return seg_start(lane, width) | (unsigned(srcLane) & 31u & unsigned(width - 1));
}
// __shfl_up_sync: a source before the segment start gives the caller's own value.
KILN_WARP_FN unsigned src_up(unsigned lane, unsigned delta, int width) {
  delta &= 31u;
  return (lane - seg_start(lane, width) >= delta) ? lane - delta : lane;
}
// __shfl_down_sync: a source past the segment end gives the caller's own value.
KILN_WARP_FN unsigned src_down(unsigned lane, unsigned delta, int width) {
  delta &= 31u;
  return (seg_end(lane, width) - lane >= delta) ? lane + delta : lane;
}
// __shfl_xor_sync: a source past the end of the caller's segment gives its own
// value; earlier segments may be read (PTX compares with maxLane only).
KILN_WARP_FN unsigned src_xor(unsigned lane, int laneMask, int width) {
  const unsigned x = lane ^ (unsigned(laneMask) & 31u);
  return x <= seg_end(lane, width) ? x : lane;
}

} // namespace kiln_warp
