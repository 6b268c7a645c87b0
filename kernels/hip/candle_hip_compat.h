// Force-included (`-include candle_hip_compat.h`) ahead of every candle .cu file that
// kiln compiles for AMD. It makes clang's HIP mode accept candle's CUDA sources
// unmodified, with CUDA's semantics where HIP's differ. Written for the pinned
// HIP 5.7.1 headers and clang 17 (docs/hip-shims.md has the name-by-name map).
//
// The stand-ins for <cuda_fp16.h>, <cuda_bf16.h>, <cuda_fp8.h>, <cuda.h> and
// <cuda/std/limits> live next to this file and win over the CUDA toolkit's own
// headers in the sysroot because `-I/kiln/hip` is searched before /usr/include.
#pragma once

#if !defined(__HIP__) || !defined(__clang__)
#error "candle_hip_compat.h is for clang in HIP mode (-x hip)"
#endif

#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_version.h>
#include <stdint.h>

#include "kiln_hip_warp.h"

// Every definition here was checked against these headers; a different HIP may
// already provide some of them (HIP 5.7 added atomicMax/Min(long long*) and
// __hmax_nan, which broke the ROCm 5.2 probe shims) or lack others.
#if HIP_VERSION_MAJOR != 5 || HIP_VERSION_MINOR != 7
#error "kiln's HIP shims are written for HIP 5.7 (pins.toml); re-audit them for this HIP"
#endif

// candle gates its f16 (>= 530), bf16 and fp8 (>= 800) kernels on __CUDA_ARCH__,
// and the fp8 kernels that need sm_89 hardware (>= 890). 890 gives AMD the same
// kernel set as the compute_89 PTX and sm_89, as upstream's ROCm backend builds
// (-D__CUDA_ARCH__=890): cuda_bf16.h and cuda_fp8.h here convert in software, so
// every kernel works on every AMD target. It is defined only in the device pass,
// as nvcc does, and after the HIP headers, which must not see it.
#if defined(__HIP_DEVICE_COMPILE__) && !defined(__CUDA_ARCH__)
#define __CUDA_ARCH__ 890
#endif
// candle's compatibility.cuh derives the toolkit version from these; 12.4 is the
// pinned nvcc (pins.toml) and makes candle rely on the toolkit's __hmax_nan, which
// HIP 5.7's hip_fp16.h has.
#ifndef __CUDACC_VER_MAJOR__
#define __CUDACC_VER_MAJOR__ 12
#define __CUDACC_VER_MINOR__ 4
#define __CUDACC_VER_BUILD__ 131
#endif

#define KILN_DEV __device__ __forceinline__

namespace kiln_hip {

// ---------------------------------------------------------------------------
// Warps. CUDA warps are 32 threads and candle hard-codes that (WARP_SIZE 32,
// shuffle widths of 32, `tid / 32` warp ids, 32-entry shared arrays of per-warp
// partials). gfx1030/gfx1100 run HIP in wave32, so a wave is a warp. gfx90a is
// wave64: there each wave is treated as two independent 32-lane "virtual warps"
// (lanes 0-31 and 32-63), which is what threadIdx-derived warp ids already
// assume. The shuffles below never cross a virtual-warp boundary, so candle's
// per-warp reductions stay per 32 lanes on every target.
// ---------------------------------------------------------------------------
constexpr int cuda_warp_size = 32;

// Lane within the virtual warp, and the physical lane the virtual warp starts at.
KILN_DEV unsigned vlane() { return __lane_id() & (cuda_warp_size - 1); }
KILN_DEV unsigned vwarp_base() {
#if __AMDGCN_WAVEFRONT_SIZE == 64
  return __lane_id() & ~unsigned(cuda_warp_size - 1);
#else
  return 0;
#endif
}

// Reads `v` from physical lane `src` with ds_bpermute, one 32-bit word at a time,
// so every type CUDA can shuffle (8/16-bit ints, __half, __nv_bfloat16, 64-bit,
// small structs) goes through the same path; HIP 5.7 itself only overloads
// 32/64-bit scalars.
template <typename T> KILN_DEV T permute(T v, unsigned src) {
  constexpr unsigned words = (sizeof(T) + 3) / 4;
  int in[words] = {};
  int out[words];
  __builtin_memcpy(in, &v, sizeof(T));
#pragma unroll
  for (unsigned i = 0; i < words; ++i) out[i] = __builtin_amdgcn_ds_bpermute(int(src << 2), in[i]);
  T r;
  __builtin_memcpy(&r, out, sizeof(T));
  return r;
}

} // namespace kiln_hip

// `mask` is not used: AMD has no independent thread scheduling, so there is no
// partial-warp reconvergence to request. candle always passes 0xffffffff with
// every lane of the virtual warp active; a shuffle that reads an inactive lane is
// undefined in CUDA too. The lane rules are PTX's (kiln_hip_warp.h), applied to
// the lane within the virtual warp.
template <typename T>
KILN_DEV T __shfl_sync(unsigned long long mask, T var, int srcLane, int width = kiln_hip::cuda_warp_size) {
  (void)mask;
  return kiln_hip::permute(var, kiln_hip::vwarp_base() + kiln_warp::src_idx(kiln_hip::vlane(), srcLane, width));
}
template <typename T>
KILN_DEV T __shfl_up_sync(unsigned long long mask, T var, unsigned int delta, int width = kiln_hip::cuda_warp_size) {
  (void)mask;
  return kiln_hip::permute(var, kiln_hip::vwarp_base() + kiln_warp::src_up(kiln_hip::vlane(), delta, width));
}
template <typename T>
KILN_DEV T __shfl_down_sync(unsigned long long mask, T var, unsigned int delta, int width = kiln_hip::cuda_warp_size) {
  (void)mask;
  return kiln_hip::permute(var, kiln_hip::vwarp_base() + kiln_warp::src_down(kiln_hip::vlane(), delta, width));
}
template <typename T>
KILN_DEV T __shfl_xor_sync(unsigned long long mask, T var, int laneMask, int width = kiln_hip::cuda_warp_size) {
  (void)mask;
  return kiln_hip::permute(var, kiln_hip::vwarp_base() + kiln_warp::src_xor(kiln_hip::vlane(), laneMask, width));
}

// A wave executes in lockstep, so no execution barrier is needed; the fences keep
// CUDA's promise that memory written before __syncwarp is visible to the other
// lanes after it, and stop the compiler from moving accesses across it.
KILN_DEV void __syncwarp(unsigned long long mask = 0xffffffffull) {
  (void)mask;
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}

// ---------------------------------------------------------------------------
// Integer SIMD intrinsics (quantized.cu).
// ---------------------------------------------------------------------------
// __dp4a: four 8-bit products summed into a 32-bit accumulator, wrapping like
// CUDA's (clamp = false). The dot instructions per target: v_dot4_i32_i8 /
// v_dot4_u32_u8 on gfx90a and gfx1030, v_dot4_i32_iu8 (signedness per operand)
// on gfx11; anything else gets the exact portable sum.
KILN_DEV int __dp4a(int srcA, int srcB, int c) {
#if defined(__gfx906__) || defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || \
    defined(__gfx942__) || defined(__gfx1011__) || defined(__gfx1012__) || defined(__gfx1030__) || defined(__gfx1031__) || \
    defined(__gfx1032__) || defined(__gfx1033__) || defined(__gfx1034__) || defined(__gfx1035__) || defined(__gfx1036__)
  return __builtin_amdgcn_sdot4(srcA, srcB, c, false);
#elif defined(__GFX11__)
  return __builtin_amdgcn_sudot4(true, srcA, true, srcB, c, false);
#else
  const int8_t *a = (const int8_t *)&srcA, *b = (const int8_t *)&srcB;
  return int(unsigned(c) + unsigned(a[0] * b[0]) + unsigned(a[1] * b[1]) + unsigned(a[2] * b[2]) + unsigned(a[3] * b[3]));
#endif
}
KILN_DEV unsigned int __dp4a(unsigned int srcA, unsigned int srcB, unsigned int c) {
#if defined(__gfx906__) || defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || \
    defined(__gfx942__) || defined(__gfx1011__) || defined(__gfx1012__) || defined(__gfx1030__) || defined(__gfx1031__) || \
    defined(__gfx1032__) || defined(__gfx1033__) || defined(__gfx1034__) || defined(__gfx1035__) || defined(__gfx1036__) || \
    defined(__GFX11__)
  return __builtin_amdgcn_udot4(srcA, srcB, c, false);
#else
  const uint8_t *a = (const uint8_t *)&srcA, *b = (const uint8_t *)&srcB;
  return c + a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3];
#endif
}

// __vsubss4: per-byte signed subtraction, saturated to [-128, 127].
KILN_DEV int __vsubss4(int a, int b) {
  typedef signed char kiln_i8x4 __attribute__((ext_vector_type(4)));
  return __builtin_bit_cast(int, __builtin_elementwise_sub_sat(__builtin_bit_cast(kiln_i8x4, a), __builtin_bit_cast(kiln_i8x4, b)));
}

// ---------------------------------------------------------------------------
// Atomics HIP 5.7 lacks.
// ---------------------------------------------------------------------------
// CUDA (sm_70+) has a 16-bit atomicCAS; AMD has no 16-bit CAS instruction, so
// this is a CAS on the aligned 32-bit word that holds the halfword, retried only
// when the other halfword changed under it. Same contract as CUDA's: relaxed,
// device scope, returns the old halfword. Works on global and shared memory.
KILN_DEV unsigned short int atomicCAS(unsigned short int *address, unsigned short int compare, unsigned short int val) {
  unsigned int *word = (unsigned int *)((uintptr_t)address & ~uintptr_t(3));
  const unsigned int shift = ((uintptr_t)address & 2) ? 16u : 0u;
  const unsigned int keep = ~(0xffffu << shift);
  unsigned int old = __hip_atomic_load(word, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
  for (;;) {
    const unsigned short int cur = (unsigned short int)(old >> shift);
    if (cur != compare) return cur;
    const unsigned int desired = (old & keep) | ((unsigned int)val << shift);
    if (__hip_atomic_compare_exchange_strong(word, &old, desired, __ATOMIC_RELAXED, __ATOMIC_RELAXED,
                                             __HIP_MEMORY_SCOPE_AGENT))
      return compare;
    // `old` now holds the word's current value; loop.
  }
}

namespace kiln_hip {
// Read-modify-write of a 16-bit float through the 16-bit CAS above: the common
// body of atomicAdd(__half*) and atomicAdd(__nv_bfloat16*). A CAS loop instead of
// gfx90a's packed-f16 atomic add, which silently does nothing on fine-grained
// (host-coherent) memory and which gfx10/gfx11 do not have.
template <typename T, typename F> KILN_DEV T atomic_rmw16(T *address, F op) {
  unsigned short int *p = (unsigned short int *)address;
  unsigned short int old = __hip_atomic_load(p, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT), assumed;
  do {
    assumed = old;
    T cur;
    __builtin_memcpy(&cur, &assumed, 2);
    const T next = op(cur);
    unsigned short int bits;
    __builtin_memcpy(&bits, &next, 2);
    old = atomicCAS(p, assumed, bits);
    // Compare the bits, not the values, so that a NaN cannot spin forever.
  } while (assumed != old);
  T r;
  __builtin_memcpy(&r, &old, 2);
  return r;
}
} // namespace kiln_hip

// CUDA's native f16 atomic add rounds once (to nearest even); __hadd on two
// halves does the same in a native f16 add.
KILN_DEV __half atomicAdd(__half *address, __half val) {
  return kiln_hip::atomic_rmw16(address, [val](__half cur) { return __hadd(cur, val); });
}

// ---------------------------------------------------------------------------
// min/max. clang's __clang_hip_math.h has min/max(int, int), (float, float),
// (double, double) and a template min<T>(T, T). blockDim.x is a property object,
// not an unsigned int, so `min(unsigned, blockDim.x)` (cuda_utils.cuh) deduces no
// T and is ambiguous between the int/float/double overloads. CUDA declares the
// unsigned and mixed-sign overloads below (mixed ones compare as unsigned, like
// CUDA's); with them the call means what it means under nvcc.
// ---------------------------------------------------------------------------
KILN_DEV unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
KILN_DEV unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
KILN_DEV unsigned int min(int a, unsigned int b) { return min((unsigned int)a, b); }
KILN_DEV unsigned int max(int a, unsigned int b) { return max((unsigned int)a, b); }
KILN_DEV unsigned int min(unsigned int a, int b) { return min(a, (unsigned int)b); }
KILN_DEV unsigned int max(unsigned int a, int b) { return max(a, (unsigned int)b); }

// candle never reads `warpSize`, but CUDA code that does means 32. Everything
// above emulates 32-lane warps, so `warpSize` must agree. Defined last: HIP's own
// headers (all included above) keep their wave size.
#define warpSize 32
