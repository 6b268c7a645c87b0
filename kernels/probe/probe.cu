// kiln's probe kernels: small and real, touching what differs between
// targets (16-bit floats, warp shuffles, atomics, an assert that embeds
// __FILE__), so that toolchain and determinism tests exercise the same
// compiler paths as candle's modules in seconds instead of minutes.
#include <assert.h>
#include <cuda_fp16.h>
#include <stdint.h>

extern "C" __global__ void probe_saxpy_f32(const size_t n, const float a, const float *x, float *y) {
  const size_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

extern "C" __global__ void probe_warp_sum_f16(const size_t n, const __half *x, float *out) {
  const size_t i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? __half2float(x[i]) : 0.0f;
  for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffff, v, m, 32);
  if (threadIdx.x % 32 == 0) atomicAdd(out, v);
}

extern "C" __global__ void probe_gather_checked(const size_t n, const uint32_t *ids, const float *src, const size_t src_len, float *dst) {
  const size_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    assert(ids[i] < src_len);
    dst[i] = src[ids[i]];
  }
}
