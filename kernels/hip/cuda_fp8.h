// Stand-in for CUDA's <cuda_fp8.h>: __nv_fp8_e4m3 / __nv_fp8_e5m2 in software.
// HIP 5.7 has no fp8 type (hip_fp8.h arrived with ROCm 6.1, and its
// "fnuz" E4M3 for gfx94x is a different format: bias 8, no negative zero, NaN
// 0x80). CUDA's E4M3 is OCP's E4M3FN: bias 7, max 448, S.1111.111 is NaN, no Inf.
//
// Conversions follow CUDA 12.4's sm_80 code path bit for bit (kiln_hip_fpconv.h;
// kernels/hip/test checks them against the CUDA headers): round to nearest even,
// __NV_SATFINITE clamps finite overflow and +-Inf to +-448 (E4M3) / +-57344 (E5M2),
// NaN stays NaN. Only the candle-visible surface is here: the storage typedefs,
// the conversion functions, and the two scalar types (no x2/x4 vector types).
#pragma once
#include "candle_hip_compat.h"
#include "cuda_bf16.h"
#include "kiln_hip_fpconv.h"

typedef unsigned char __nv_fp8_storage_t;
typedef unsigned short int __nv_fp8x2_storage_t;
typedef unsigned int __nv_fp8x4_storage_t;
typedef enum __nv_saturation_t { __NV_NOSAT, __NV_SATFINITE } __nv_saturation_t;
typedef enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 } __nv_fp8_interpretation_t;

#define KILN_FP8 __host__ __device__ __forceinline__

namespace kiln_hip {
KILN_FP8 kiln_fp::fp8_kind fp8_kind_of(__nv_fp8_interpretation_t k) {
  return k == __NV_E5M2 ? kiln_fp::fp8_e5m2 : kiln_fp::fp8_e4m3;
}
} // namespace kiln_hip

KILN_FP8 __nv_fp8_storage_t __nv_cvt_double_to_fp8(const double x, const __nv_saturation_t saturate,
                                                    const __nv_fp8_interpretation_t fp8_interpretation) {
  return kiln_fp::fp8_from_f64(x, saturate == __NV_SATFINITE, kiln_hip::fp8_kind_of(fp8_interpretation));
}
KILN_FP8 __nv_fp8_storage_t __nv_cvt_float_to_fp8(const float x, const __nv_saturation_t saturate,
                                                   const __nv_fp8_interpretation_t fp8_interpretation) {
  return kiln_fp::fp8_from_f32(x, saturate == __NV_SATFINITE, kiln_hip::fp8_kind_of(fp8_interpretation));
}
KILN_FP8 __nv_fp8_storage_t __nv_cvt_halfraw_to_fp8(const __half_raw x, const __nv_saturation_t saturate,
                                                     const __nv_fp8_interpretation_t fp8_interpretation) {
  return __nv_cvt_float_to_fp8(kiln_fp::f16_bits_to_f32(x.x), saturate, fp8_interpretation);
}
KILN_FP8 __nv_fp8_storage_t __nv_cvt_bfloat16raw_to_fp8(const __nv_bfloat16_raw x, const __nv_saturation_t saturate,
                                                         const __nv_fp8_interpretation_t fp8_interpretation) {
  return __nv_cvt_float_to_fp8(kiln_fp::bf16_to_f32(x.x), saturate, fp8_interpretation);
}
// Returns HIP's __half_raw, which __half (and so __half2float) converts from
// implicitly, as candle's F8E4M3_TO_FLOAT macro needs.
KILN_FP8 __half_raw __nv_cvt_fp8_to_halfraw(const __nv_fp8_storage_t x, const __nv_fp8_interpretation_t fp8_interpretation) {
  __half_raw r;
  r.x = kiln_fp::fp8_to_f16_bits(x, kiln_hip::fp8_kind_of(fp8_interpretation));
  return r;
}

// Both types: the constructor/operator set of CUDA 12.4 (all explicit), with
// integers going through float as CUDA's do.
#define KILN_FP8_TYPE(NAME, INTERP)                                                                              \
  struct __attribute__((aligned(1))) NAME {                                                                      \
    __nv_fp8_storage_t __x;                                                                                      \
    NAME() = default;                                                                                            \
    explicit KILN_FP8 NAME(const __half f)                                                                       \
        : __x(__nv_cvt_halfraw_to_fp8(static_cast<__half_raw>(f), __NV_SATFINITE, INTERP)) {}                   \
    explicit KILN_FP8 NAME(const __nv_bfloat16 f)                                                                \
        : __x(__nv_cvt_bfloat16raw_to_fp8(static_cast<__nv_bfloat16_raw>(f), __NV_SATFINITE, INTERP)) {}        \
    explicit KILN_FP8 NAME(const float f) : __x(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, INTERP)) {}             \
    explicit KILN_FP8 NAME(const double f) : __x(__nv_cvt_double_to_fp8(f, __NV_SATFINITE, INTERP)) {}           \
    explicit KILN_FP8 NAME(const unsigned short int v) : NAME(static_cast<float>(v)) {}                          \
    explicit KILN_FP8 NAME(const unsigned int v) : NAME(static_cast<float>(v)) {}                                \
    explicit KILN_FP8 NAME(const unsigned long int v) : NAME(static_cast<float>(v)) {}                           \
    explicit KILN_FP8 NAME(const unsigned long long int v) : NAME(static_cast<float>(v)) {}                      \
    explicit KILN_FP8 NAME(const short int v) : NAME(static_cast<float>(v)) {}                                   \
    explicit KILN_FP8 NAME(const int v) : NAME(static_cast<float>(v)) {}                                         \
    explicit KILN_FP8 NAME(const long int v) : NAME(static_cast<float>(v)) {}                                    \
    explicit KILN_FP8 NAME(const long long int v) : NAME(static_cast<float>(v)) {}                               \
    explicit KILN_FP8 operator __half() const { return __half(__nv_cvt_fp8_to_halfraw(__x, INTERP)); }          \
    explicit KILN_FP8 operator float() const {                                                                   \
      return kiln_fp::f16_bits_to_f32(kiln_fp::fp8_to_f16_bits(__x, kiln_hip::fp8_kind_of(INTERP)));           \
    }                                                                                                            \
    /* Exact: every fp8 value is a bfloat16 value (CUDA truncates, which is the same here). */                   \
    explicit KILN_FP8 operator __nv_bfloat16() const { return __float2bfloat16_rz(float(*this)); }               \
    explicit KILN_FP8 operator double() const { return double(float(*this)); }                                   \
    explicit KILN_FP8 operator unsigned char() const { return sat<unsigned char>(0, 255, 0); }                  \
    explicit KILN_FP8 operator unsigned short int() const { return sat<unsigned short>(0, 65535, 0); }          \
    explicit KILN_FP8 operator unsigned int() const { return sat<unsigned int>(0u, 4294967295u, 0u); }          \
    explicit KILN_FP8 operator unsigned long int() const {                                                       \
      return sat<unsigned long>(0ul, 18446744073709551615ul, 0x8000000000000000ul);                             \
    }                                                                                                            \
    explicit KILN_FP8 operator unsigned long long int() const {                                                  \
      return sat<unsigned long long>(0ull, 18446744073709551615ull, 0x8000000000000000ull);                     \
    }                                                                                                            \
    explicit KILN_FP8 operator signed char() const { return sat<signed char>(-128, 127, 0); }                   \
    explicit KILN_FP8 operator char() const { return sat<char>(-128, 127, 0); }                                  \
    explicit KILN_FP8 operator short int() const { return sat<short>(-32768, 32767, 0); }                        \
    explicit KILN_FP8 operator int() const { return sat<int>(-2147483647 - 1, 2147483647, 0); }                  \
    explicit KILN_FP8 operator long int() const {                                                                \
      return sat<long>(-9223372036854775807l - 1, 9223372036854775807l, -9223372036854775807l - 1);             \
    }                                                                                                            \
    explicit KILN_FP8 operator long long int() const {                                                           \
      return sat<long long>(-9223372036854775807ll - 1, 9223372036854775807ll, -9223372036854775807ll - 1);     \
    }                                                                                                            \
    explicit KILN_FP8 operator bool() const { return (__x & 0x7fu) != 0u; }                                      \
                                                                                                                 \
  private:                                                                                                       \
    /* Truncating, saturating; NaN -> 0 (64-bit: 0x8000000000000000), as CUDA. */                               \
    template <typename I> KILN_FP8 I sat(I lo, I hi, I nanv) const {                                             \
      return kiln_fp::f32_to_int_rz_sat<I>(float(*this), lo, hi, nanv);                                          \
    }                                                                                                            \
  };

KILN_FP8_TYPE(__nv_fp8_e4m3, __NV_E4M3)
KILN_FP8_TYPE(__nv_fp8_e5m2, __NV_E5M2)
#undef KILN_FP8_TYPE
static_assert(sizeof(__nv_fp8_e4m3) == 1 && sizeof(__nv_fp8_e5m2) == 1, "CUDA's fp8 layout");

#undef KILN_FP8
