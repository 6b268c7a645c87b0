// Runs kiln's CUDA-semantics models next to the real thing on an NVIDIA GPU:
//  1. the shuffle lane rules of kiln_hip_warp.h against __shfl_*_sync, for every
//     lane, every legal width and a range of offsets (in and out of range);
//  2. the bf16/fp8 conversions of kiln_hip_fpconv.h against CUDA's device
//     conversions (on sm_90 these are hardware cvt instructions, i.e. a third
//     implementation besides the sm_80 software path that fpconv_vs_cuda.cpp
//     compares on the host): all 2^32 floats and int32s, random doubles;
//  3. what CUDA's float -> integer casts give out of range (saturation, NaN -> 0),
//     printed for docs/hip-shims.md.
// Build and run on a machine with nvcc and an sm_80+ GPU (no -I to kernels/hip):
//   nvcc -std=c++17 -O2 -arch=sm_90 kernels/hip/test/cuda_device_check.cu -o cdc && ./cdc
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "../kiln_hip_fpconv.h"
#include "../kiln_hip_warp.h"

#define CK(x)                                                                      \
  do {                                                                             \
    cudaError_t e = (x);                                                           \
    if (e != cudaSuccess) {                                                        \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); \
      return 2;                                                                    \
    }                                                                              \
  } while (0)

// ---------------------------------------------------------------- shuffles
__constant__ __device__ int kArgsDev[] = {-33, -32, -31, -17, -16, -2, -1, 0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 23, 31, 32, 33, 40, 63, 64,
                                         65, 127, 128, 1000, 0x7fffffff};
__constant__ __device__ int kWidthsDev[] = {1, 2, 4, 8, 16, 32};
constexpr int kArgs[] = {-33, -32, -31, -17, -16, -2, -1, 0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 23, 31, 32, 33, 40, 63, 64,
                         65, 127, 128, 1000, 0x7fffffff};
constexpr int kNumArgs = sizeof(kArgs) / sizeof(kArgs[0]);
constexpr int kWidths[] = {1, 2, 4, 8, 16, 32};

// out[((mode * 6 + w) * kNumArgs + a) * 32 + lane] = source lane seen by `lane`.
__global__ void shuffles(int *out) {
  const int lane = threadIdx.x;
  for (int w = 0; w < 6; ++w)
    for (int a = 0; a < kNumArgs; ++a) {
      const int width = kWidthsDev[w], arg = kArgsDev[a];
      int *o = out + (w * kNumArgs + a) * 32 + lane;
      o[0 * 6 * kNumArgs * 32] = __shfl_sync(0xffffffffu, lane, arg, width);
      o[1 * 6 * kNumArgs * 32] = __shfl_up_sync(0xffffffffu, lane, (unsigned)arg, width);
      o[2 * 6 * kNumArgs * 32] = __shfl_down_sync(0xffffffffu, lane, (unsigned)arg, width);
      o[3 * 6 * kNumArgs * 32] = __shfl_xor_sync(0xffffffffu, lane, arg, width);
    }
}

// ------------------------------------------------------------- conversions
__device__ unsigned long long g_bad[9];
__device__ unsigned long long g_first[9];

__device__ unsigned long long g_first_cuda[9];

__device__ void bad(int k, unsigned long long input, unsigned cuda_result) {
  if (atomicAdd(&g_bad[k], 1ull) == 0) {
    g_first[k] = input;
    g_first_cuda[k] = cuda_result;
  }
}

__global__ void floats(uint32_t base) {
  const uint32_t u = base + blockIdx.x * blockDim.x + threadIdx.x;
  float f;
  memcpy(&f, &u, 4);
  const __nv_bfloat16 b = __float2bfloat16_rn(f);
  if (kiln_fp::bf16_from_f32_rn(f) != static_cast<__nv_bfloat16_raw>(b).x) bad(0, u, static_cast<__nv_bfloat16_raw>(b).x);
  if (kiln_fp::fp8_from_f32(f, true, kiln_fp::fp8_e4m3) != __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3))
    bad(1, u, __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3));
  if (kiln_fp::fp8_from_f32(f, true, kiln_fp::fp8_e5m2) != __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2))
    bad(2, u, __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2));
  const int i = int(u);
  if (kiln_fp::bf16_from_i64_rn(i) != static_cast<__nv_bfloat16_raw>(__int2bfloat16_rn(i)).x)
    bad(3, u, static_cast<__nv_bfloat16_raw>(__int2bfloat16_rn(i)).x);
  if (kiln_fp::bf16_from_u64_rn(u) != static_cast<__nv_bfloat16_raw>(__uint2bfloat16_rn(u)).x)
    bad(4, u, static_cast<__nv_bfloat16_raw>(__uint2bfloat16_rn(u)).x);
  if (u < 256u) {
    for (int k = 0; k < 2; ++k) {
      const __nv_fp8_interpretation_t in = k ? __NV_E5M2 : __NV_E4M3;
      if (kiln_fp::fp8_to_f16_bits(uint8_t(u), k ? kiln_fp::fp8_e5m2 : kiln_fp::fp8_e4m3) !=
          __nv_cvt_fp8_to_halfraw(uint8_t(u), in).x)
        bad(5, u | (k << 8), __nv_cvt_fp8_to_halfraw(uint8_t(u), in).x);
    }
  }
}

__global__ void doubles(const double *d, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned long long u;
  memcpy(&u, &d[i], 8);
  const unsigned short cb = static_cast<__nv_bfloat16_raw>(__double2bfloat16(d[i])).x;
  if (kiln_fp::bf16_from_f64_rn(d[i]) != cb) {
    // sm_90 converts in hardware (cvt.rn.bf16.f64), which keeps a NaN's sign and top payload bits;
    // CUDA's sm_80 path, which kiln follows, returns the canonical 0x7fff. Count NaNs apart.
    if (d[i] != d[i]) bad(2 + 6, u, cb); else bad(6, u, cb);
  }
  if (kiln_fp::fp8_from_f64(d[i], true, kiln_fp::fp8_e4m3) != __nv_cvt_double_to_fp8(d[i], __NV_SATFINITE, __NV_E4M3))
    bad(7, u, __nv_cvt_double_to_fp8(d[i], __NV_SATFINITE, __NV_E4M3));
}

// ------------------------------------------------------- float -> integer
__global__ void casts(const float *in, int n, unsigned *u8, long long *i64, int *i32) {
  for (int i = 0; i < n; ++i) {
    u8[i] = (uint8_t)in[i];
    i64[i] = (long long)in[i];
    i32[i] = (int)in[i];
  }
}

int main() {
  int fails = 0;
  // 1. shuffles
  const int total = 4 * 6 * kNumArgs * 32;
  int *dout;
  CK(cudaMalloc(&dout, total * sizeof(int)));
  shuffles<<<1, 32>>>(dout);
  CK(cudaGetLastError());
  std::vector<int> out(total);
  CK(cudaMemcpy(out.data(), dout, total * sizeof(int), cudaMemcpyDeviceToHost));
  const char *names[] = {"idx", "up", "down", "xor"};
  int shfl_bad = 0;
  for (int mode = 0; mode < 4; ++mode)
    for (int w = 0; w < 6; ++w)
      for (int a = 0; a < kNumArgs; ++a)
        for (unsigned lane = 0; lane < 32; ++lane) {
          const int width = kWidths[w], arg = kArgs[a];
          unsigned want = 0;
          switch (mode) {
          case 0: want = kiln_warp::src_idx(lane, arg, width); break;
          case 1: want = kiln_warp::src_up(lane, (unsigned)arg, width); break;
          case 2: want = kiln_warp::src_down(lane, (unsigned)arg, width); break;
          case 3: want = kiln_warp::src_xor(lane, arg, width); break;
          }
          const int got = out[((mode * 6 + w) * kNumArgs + a) * 32 + lane];
          if (got != int(want) && ++shfl_bad <= 40)
            std::printf("shfl %s width %d arg %d lane %u: cuda %d kiln %u\n", names[mode], width, arg, lane, got, want);
        }
  std::printf("shuffles: %d mismatches of %d\n", shfl_bad, total);
  fails += shfl_bad != 0;

  // 2. conversions
  for (uint64_t base = 0; base < (1ull << 32); base += (1ull << 28))
    floats<<<(1u << 28) / 256, 256>>>(uint32_t(base));
  CK(cudaDeviceSynchronize());
  std::mt19937_64 rng(7);
  const int n = 1 << 24;
  std::vector<double> ds(n);
  for (int i = 0; i < n; ++i) {
    uint64_t u = rng();
    if (i & 1) u = (u & 0x800fffffffffffffull) | (uint64_t(1023 - 140 + (rng() % 290)) << 52);
    memcpy(&ds[i], &u, 8);
  }
  double *dd;
  CK(cudaMalloc(&dd, n * sizeof(double)));
  CK(cudaMemcpy(dd, ds.data(), n * sizeof(double), cudaMemcpyHostToDevice));
  doubles<<<n / 256, 256>>>(dd, n);
  CK(cudaDeviceSynchronize());
  unsigned long long nbad[9], first[9], firstc[9];
  CK(cudaMemcpyFromSymbol(nbad, g_bad, sizeof(nbad)));
  CK(cudaMemcpyFromSymbol(first, g_first, sizeof(first)));
  CK(cudaMemcpyFromSymbol(firstc, g_first_cuda, sizeof(firstc)));
  const char *what[] = {"f32->bf16", "f32->e4m3", "f32->e5m2", "i32->bf16", "u32->bf16", "fp8->f16", "f64->bf16", "f64->e4m3",
                        "f64->bf16 NaN (sm_90 hw keeps payload; not a failure)"};
  for (int k = 0; k < 9; ++k) {
    std::printf("%-10s %llu mismatches%s", what[k], nbad[k], nbad[k] ? "" : "\n");
    if (nbad[k]) std::printf(" (first input %llx: cuda %llx)\n", first[k], firstc[k]);
    fails += k < 8 && nbad[k] != 0;
  }

  // 3. out-of-range float -> integer casts, for the record
  const float in[] = {300.0f, 255.9f, -5.0f, 1e20f, -1e20f, std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity()};
  const int m = sizeof(in) / sizeof(in[0]);
  float *din; unsigned *du8; long long *di64; int *di32;
  CK(cudaMalloc(&din, sizeof(in))); CK(cudaMalloc(&du8, m * 4)); CK(cudaMalloc(&di64, m * 8)); CK(cudaMalloc(&di32, m * 4));
  CK(cudaMemcpy(din, in, sizeof(in), cudaMemcpyHostToDevice));
  casts<<<1, 1>>>(din, m, du8, di64, di32);
  unsigned hu8[m]; long long hi64[m]; int hi32[m];
  CK(cudaMemcpy(hu8, du8, m * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hi64, di64, m * 8, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hi32, di32, m * 4, cudaMemcpyDeviceToHost));
  for (int i = 0; i < m; ++i)
    std::printf("cast %g: u8 %u  i32 %d  i64 %lld\n", in[i], hu8[i], hi32[i], hi64[i]);

  std::printf("%s\n", fails ? "FAIL" : "PASS");
  return fails ? 1 : 0;
}
