// Stand-in for CUDA's <cuda_bf16.h>: __nv_bfloat16 / __nv_bfloat162 as a software
// type with CUDA 12.4's class interface and sm_80 results.
//
// Why not HIP 5.7's own type: hip_bf16.h's __hip_bfloat16 is a plain struct
// with no constructors, conversion operators or arithmetic operators, and candle
// relies on all three (`__nv_bfloat16 one = 1.0;`, `static_cast<float>(x)`,
// `x * mul + add`). A class cannot be grafted onto it, and its free functions
// (__float2bfloat16 returning __hip_bfloat16, ...) would collide by name with
// the CUDA signatures, so hip_bf16.h is not included at all. Its NaN handling
// also differs (it keeps payloads; CUDA returns the canonical 0x7fff).
//
// Arithmetic is done in float and rounded once to bfloat16 per operation, as
// CUDA's bf16 instructions do: products of two bfloat16 are exact in float, and
// float carries more than 2*8+2 significand bits, so the float result of +, -,
// /, sqrt rounded again to bfloat16 is the correctly rounded bfloat16 result.
#pragma once
#include "candle_hip_compat.h"
#include "kiln_hip_fpconv.h"

struct __nv_bfloat16_raw {
  unsigned short x;
};
struct __nv_bfloat162_raw {
  unsigned short x;
  unsigned short y;
};

#define KILN_BF16 __host__ __device__ __forceinline__

struct __attribute__((aligned(2))) __nv_bfloat16 {
  // Protected in CUDA; public here so the free functions below need no friends.
  unsigned short __x;

  __nv_bfloat16() = default;
  KILN_BF16 constexpr __nv_bfloat16(const __nv_bfloat16_raw &hr) : __x(hr.x) {}
  KILN_BF16 __nv_bfloat16 &operator=(const __nv_bfloat16_raw &hr) { __x = hr.x; return *this; }
  KILN_BF16 operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }

  // The constructor and conversion set of CUDA 12.4 (implicit from the floating
  // and integer types it lists, explicit from __half, implicit to float and to
  // every integer type), so that overload resolution in candle's templates picks
  // the same conversions as nvcc does.
  explicit KILN_BF16 __nv_bfloat16(const __half f) : __x(kiln_fp::bf16_from_f32_rn(__half2float(f))) {}
  KILN_BF16 __nv_bfloat16(const float f) : __x(kiln_fp::bf16_from_f32_rn(f)) {}
  KILN_BF16 __nv_bfloat16(const double f) : __x(kiln_fp::bf16_from_f64_rn(f)) {}
  KILN_BF16 __nv_bfloat16(short val) : __x(kiln_fp::bf16_from_i64_rn(val)) {}
  KILN_BF16 __nv_bfloat16(unsigned short val) : __x(kiln_fp::bf16_from_u64_rn(val)) {}
  KILN_BF16 __nv_bfloat16(int val) : __x(kiln_fp::bf16_from_i64_rn(val)) {}
  KILN_BF16 __nv_bfloat16(unsigned int val) : __x(kiln_fp::bf16_from_u64_rn(val)) {}
  KILN_BF16 __nv_bfloat16(const long val) : __x(kiln_fp::bf16_from_i64_rn(val)) {}
  KILN_BF16 __nv_bfloat16(const unsigned long val) : __x(kiln_fp::bf16_from_u64_rn(val)) {}
  KILN_BF16 __nv_bfloat16(long long val) : __x(kiln_fp::bf16_from_i64_rn(val)) {}
  KILN_BF16 __nv_bfloat16(unsigned long long val) : __x(kiln_fp::bf16_from_u64_rn(val)) {}

  KILN_BF16 __nv_bfloat16 &operator=(const float f) { __x = kiln_fp::bf16_from_f32_rn(f); return *this; }
  KILN_BF16 __nv_bfloat16 &operator=(const double f) { __x = kiln_fp::bf16_from_f64_rn(f); return *this; }
  KILN_BF16 __nv_bfloat16 &operator=(short val) { __x = kiln_fp::bf16_from_i64_rn(val); return *this; }
  KILN_BF16 __nv_bfloat16 &operator=(unsigned short val) { __x = kiln_fp::bf16_from_u64_rn(val); return *this; }
  KILN_BF16 __nv_bfloat16 &operator=(int val) { __x = kiln_fp::bf16_from_i64_rn(val); return *this; }
  KILN_BF16 __nv_bfloat16 &operator=(unsigned int val) { __x = kiln_fp::bf16_from_u64_rn(val); return *this; }
  KILN_BF16 __nv_bfloat16 &operator=(long long val) { __x = kiln_fp::bf16_from_i64_rn(val); return *this; }
  KILN_BF16 __nv_bfloat16 &operator=(unsigned long long val) { __x = kiln_fp::bf16_from_u64_rn(val); return *this; }

  KILN_BF16 operator float() const { return kiln_fp::bf16_to_f32(__x); }
  // Truncating and saturating, NaN -> 0 (64-bit: 0x8000000000000000), as CUDA's
  // __bfloat162*_rz; never the undefined float->int cast of C++.
#define KILN_BF16_TO_INT(T, LO, HI, NANV) \
  KILN_BF16 operator T() const { return kiln_fp::f32_to_int_rz_sat<T>(float(*this), static_cast<T>(LO), static_cast<T>(HI), static_cast<T>(NANV)); }
  KILN_BF16_TO_INT(signed char, -128, 127, 0)
  KILN_BF16_TO_INT(unsigned char, 0, 255, 0)
  KILN_BF16_TO_INT(char, -128, 127, 0)
  KILN_BF16_TO_INT(short, -32768, 32767, 0)
  KILN_BF16_TO_INT(unsigned short, 0, 65535, 0)
  KILN_BF16_TO_INT(int, -2147483647 - 1, 2147483647, 0)
  KILN_BF16_TO_INT(unsigned int, 0u, 4294967295u, 0u)
  KILN_BF16_TO_INT(long, -9223372036854775807l - 1, 9223372036854775807l, -9223372036854775807l - 1)
  KILN_BF16_TO_INT(unsigned long, 0ul, 18446744073709551615ul, 0x8000000000000000ul)
  KILN_BF16_TO_INT(long long, -9223372036854775807ll - 1, 9223372036854775807ll, -9223372036854775807ll - 1)
  KILN_BF16_TO_INT(unsigned long long, 0ull, 18446744073709551615ull, 0x8000000000000000ull)
#undef KILN_BF16_TO_INT
  KILN_BF16 constexpr operator bool() const { return (__x & 0x7fffu) != 0u; }
};
typedef __nv_bfloat16 nv_bfloat16;
static_assert(sizeof(__nv_bfloat16) == 2 && alignof(__nv_bfloat16) == 2, "CUDA's bf16 layout");

struct __attribute__((aligned(4))) __nv_bfloat162 {
  __nv_bfloat16 x;
  __nv_bfloat16 y;
  __nv_bfloat162() = default;
  KILN_BF16 constexpr __nv_bfloat162(const __nv_bfloat16 &a, const __nv_bfloat16 &b) : x(a), y(b) {}
  KILN_BF16 __nv_bfloat162(const __nv_bfloat162_raw &h2r) : x(__nv_bfloat16_raw{h2r.x}), y(__nv_bfloat16_raw{h2r.y}) {}
  KILN_BF16 operator __nv_bfloat162_raw() const { return __nv_bfloat162_raw{x.__x, y.__x}; }
};
typedef __nv_bfloat162 nv_bfloat162;
static_assert(sizeof(__nv_bfloat162) == 4 && alignof(__nv_bfloat162) == 4, "CUDA's bf16x2 layout");

namespace kiln_hip {
KILN_BF16 __nv_bfloat16 bf16_bits(unsigned short u) { return __nv_bfloat16(__nv_bfloat16_raw{u}); }
KILN_BF16 __nv_bfloat16 bf16_rn(float f) { return bf16_bits(kiln_fp::bf16_from_f32_rn(f)); }
} // namespace kiln_hip

// ------------------------------------------------------------ conversions
KILN_BF16 float __bfloat162float(const __nv_bfloat16 a) { return kiln_fp::bf16_to_f32(a.__x); }
KILN_BF16 __nv_bfloat16 __float2bfloat16(const float a) { return kiln_hip::bf16_rn(a); }
KILN_BF16 __nv_bfloat16 __float2bfloat16_rn(const float a) { return kiln_hip::bf16_rn(a); }
KILN_BF16 __nv_bfloat16 __float2bfloat16_rz(const float a) { return kiln_hip::bf16_bits(kiln_fp::bf16_from_f32_rz(a)); }
KILN_BF16 __nv_bfloat16 __double2bfloat16(const double a) { return kiln_hip::bf16_bits(kiln_fp::bf16_from_f64_rn(a)); }
KILN_BF16 __nv_bfloat16 __int2bfloat16_rn(const int i) { return __nv_bfloat16(i); }
KILN_BF16 __nv_bfloat16 __uint2bfloat16_rn(const unsigned int i) { return __nv_bfloat16(i); }
KILN_BF16 __nv_bfloat16 __ll2bfloat16_rn(const long long i) { return __nv_bfloat16(i); }
KILN_BF16 __nv_bfloat16 __ull2bfloat16_rn(const unsigned long long i) { return __nv_bfloat16(i); }
KILN_BF16 int __bfloat162int_rz(const __nv_bfloat16 h) { return int(h); }
KILN_BF16 unsigned int __bfloat162uint_rz(const __nv_bfloat16 h) { return (unsigned int)(h); }
KILN_BF16 long long __bfloat162ll_rz(const __nv_bfloat16 h) { return (long long)(h); }
KILN_BF16 unsigned long long __bfloat162ull_rz(const __nv_bfloat16 h) { return (unsigned long long)(h); }
KILN_BF16 unsigned short __bfloat16_as_ushort(const __nv_bfloat16 h) { return h.__x; }
KILN_BF16 short __bfloat16_as_short(const __nv_bfloat16 h) { return (short)h.__x; }
KILN_BF16 __nv_bfloat16 __ushort_as_bfloat16(const unsigned short i) { return kiln_hip::bf16_bits(i); }
KILN_BF16 __nv_bfloat16 __short_as_bfloat16(const short i) { return kiln_hip::bf16_bits((unsigned short)i); }
KILN_BF16 __nv_bfloat162 __floats2bfloat162_rn(const float a, const float b) {
  return __nv_bfloat162(kiln_hip::bf16_rn(a), kiln_hip::bf16_rn(b));
}
KILN_BF16 __nv_bfloat162 __float2bfloat162_rn(const float a) { return __floats2bfloat162_rn(a, a); }
KILN_BF16 __nv_bfloat162 __float22bfloat162_rn(const float2 a) { return __floats2bfloat162_rn(a.x, a.y); }
KILN_BF16 float2 __bfloat1622float2(const __nv_bfloat162 a) { return make_float2(float(a.x), float(a.y)); }
KILN_BF16 __nv_bfloat162 __halves2bfloat162(const __nv_bfloat16 a, const __nv_bfloat16 b) { return __nv_bfloat162(a, b); }
KILN_BF16 __nv_bfloat162 __bfloat162bfloat162(const __nv_bfloat16 a) { return __nv_bfloat162(a, a); }
KILN_BF16 __nv_bfloat162 make_bfloat162(const __nv_bfloat16 x, const __nv_bfloat16 y) { return __nv_bfloat162(x, y); }
KILN_BF16 __nv_bfloat16 __low2bfloat16(const __nv_bfloat162 a) { return a.x; }
KILN_BF16 __nv_bfloat16 __high2bfloat16(const __nv_bfloat162 a) { return a.y; }
KILN_BF16 float __low2float(const __nv_bfloat162 a) { return float(a.x); }
KILN_BF16 float __high2float(const __nv_bfloat162 a) { return float(a.y); }

// ------------------------------------------------------------- arithmetic
KILN_BF16 __nv_bfloat16 __hadd(const __nv_bfloat16 a, const __nv_bfloat16 b) { return kiln_hip::bf16_rn(float(a) + float(b)); }
KILN_BF16 __nv_bfloat16 __hsub(const __nv_bfloat16 a, const __nv_bfloat16 b) { return kiln_hip::bf16_rn(float(a) - float(b)); }
KILN_BF16 __nv_bfloat16 __hmul(const __nv_bfloat16 a, const __nv_bfloat16 b) { return kiln_hip::bf16_rn(float(a) * float(b)); }
KILN_BF16 __nv_bfloat16 __hdiv(const __nv_bfloat16 a, const __nv_bfloat16 b) { return kiln_hip::bf16_rn(float(a) / float(b)); }
// One rounding: float fma is exact up to its own rounding, which is then innocuous.
KILN_BF16 __nv_bfloat16 __hfma(const __nv_bfloat16 a, const __nv_bfloat16 b, const __nv_bfloat16 c) {
  return kiln_hip::bf16_rn(__builtin_fmaf(float(a), float(b), float(c)));
}
KILN_BF16 __nv_bfloat16 __hneg(const __nv_bfloat16 a) { return kiln_hip::bf16_bits((unsigned short)(a.__x ^ 0x8000u)); }
KILN_BF16 __nv_bfloat16 __habs(const __nv_bfloat16 a) { return kiln_hip::bf16_bits((unsigned short)(a.__x & 0x7fffu)); }

#define KILN_BF16_2(NAME, OP)                                                                 \
  KILN_BF16 __nv_bfloat162 NAME(const __nv_bfloat162 a, const __nv_bfloat162 b) {             \
    return __nv_bfloat162(OP(a.x, b.x), OP(a.y, b.y));                                        \
  }
KILN_BF16_2(__hadd2, __hadd)
KILN_BF16_2(__hsub2, __hsub)
KILN_BF16_2(__hmul2, __hmul)
KILN_BF16_2(__h2div, __hdiv)
#undef KILN_BF16_2
KILN_BF16 __nv_bfloat162 __hfma2(const __nv_bfloat162 a, const __nv_bfloat162 b, const __nv_bfloat162 c) {
  return __nv_bfloat162(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y));
}
KILN_BF16 __nv_bfloat162 __hneg2(const __nv_bfloat162 a) { return __nv_bfloat162(__hneg(a.x), __hneg(a.y)); }
KILN_BF16 __nv_bfloat162 __habs2(const __nv_bfloat162 a) { return __nv_bfloat162(__habs(a.x), __habs(a.y)); }

// Operators return bfloat16, rounding after each one as CUDA's do (so
// `x * mul + add` rounds twice, never fused).
KILN_BF16 __nv_bfloat16 operator+(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hadd(a, b); }
KILN_BF16 __nv_bfloat16 operator-(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hsub(a, b); }
KILN_BF16 __nv_bfloat16 operator*(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hmul(a, b); }
KILN_BF16 __nv_bfloat16 operator/(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hdiv(a, b); }
KILN_BF16 __nv_bfloat16 &operator+=(__nv_bfloat16 &a, const __nv_bfloat16 &b) { a = __hadd(a, b); return a; }
KILN_BF16 __nv_bfloat16 &operator-=(__nv_bfloat16 &a, const __nv_bfloat16 &b) { a = __hsub(a, b); return a; }
KILN_BF16 __nv_bfloat16 &operator*=(__nv_bfloat16 &a, const __nv_bfloat16 &b) { a = __hmul(a, b); return a; }
KILN_BF16 __nv_bfloat16 &operator/=(__nv_bfloat16 &a, const __nv_bfloat16 &b) { a = __hdiv(a, b); return a; }
KILN_BF16 __nv_bfloat16 &operator++(__nv_bfloat16 &a) { a = __hadd(a, kiln_hip::bf16_bits(0x3f80)); return a; }
KILN_BF16 __nv_bfloat16 &operator--(__nv_bfloat16 &a) { a = __hsub(a, kiln_hip::bf16_bits(0x3f80)); return a; }
KILN_BF16 __nv_bfloat16 operator++(__nv_bfloat16 &a, int) { const __nv_bfloat16 r = a; ++a; return r; }
KILN_BF16 __nv_bfloat16 operator--(__nv_bfloat16 &a, int) { const __nv_bfloat16 r = a; --a; return r; }
KILN_BF16 __nv_bfloat16 operator+(const __nv_bfloat16 &a) { return a; }
KILN_BF16 __nv_bfloat16 operator-(const __nv_bfloat16 &a) { return __hneg(a); }
KILN_BF16 __nv_bfloat162 operator+(const __nv_bfloat162 &a, const __nv_bfloat162 &b) { return __hadd2(a, b); }
KILN_BF16 __nv_bfloat162 operator-(const __nv_bfloat162 &a, const __nv_bfloat162 &b) { return __hsub2(a, b); }
KILN_BF16 __nv_bfloat162 operator*(const __nv_bfloat162 &a, const __nv_bfloat162 &b) { return __hmul2(a, b); }
KILN_BF16 __nv_bfloat162 operator/(const __nv_bfloat162 &a, const __nv_bfloat162 &b) { return __h2div(a, b); }

// ------------------------------------------------------------- comparisons
// Ordered comparisons as on float (NaN compares false, -0 == +0).
KILN_BF16 bool __heq(const __nv_bfloat16 a, const __nv_bfloat16 b) { return float(a) == float(b); }
KILN_BF16 bool __hne(const __nv_bfloat16 a, const __nv_bfloat16 b) { return float(a) < float(b) || float(a) > float(b); }
KILN_BF16 bool __hlt(const __nv_bfloat16 a, const __nv_bfloat16 b) { return float(a) < float(b); }
KILN_BF16 bool __hle(const __nv_bfloat16 a, const __nv_bfloat16 b) { return float(a) <= float(b); }
KILN_BF16 bool __hgt(const __nv_bfloat16 a, const __nv_bfloat16 b) { return float(a) > float(b); }
KILN_BF16 bool __hge(const __nv_bfloat16 a, const __nv_bfloat16 b) { return float(a) >= float(b); }
// The operators are CUDA's unordered "!=" (true for NaN), ordered for the rest.
KILN_BF16 bool operator==(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __heq(a, b); }
KILN_BF16 bool operator!=(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return !__heq(a, b); }
KILN_BF16 bool operator<(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hlt(a, b); }
KILN_BF16 bool operator<=(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hle(a, b); }
KILN_BF16 bool operator>(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hgt(a, b); }
KILN_BF16 bool operator>=(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hge(a, b); }

KILN_BF16 bool __hisnan(const __nv_bfloat16 a) { return (a.__x & 0x7fffu) > 0x7f80u; }
KILN_BF16 int __hisinf(const __nv_bfloat16 a) { return (a.__x & 0x7fffu) == 0x7f80u ? ((a.__x & 0x8000u) ? -1 : 1) : 0; }

// __hmax/__hmin: a NaN operand loses to a number; two NaNs give the canonical NaN.
// The _nan forms propagate NaN as the canonical NaN. -0 < +0 in both, as CUDA's.
namespace kiln_hip {
KILN_BF16 bool bf16_less(const __nv_bfloat16 a, const __nv_bfloat16 b) {
  return float(a) < float(b) || (float(a) == float(b) && (a.__x & 0x8000u) && !(b.__x & 0x8000u));
}
} // namespace kiln_hip
KILN_BF16 __nv_bfloat16 __hmax(const __nv_bfloat16 a, const __nv_bfloat16 b) {
  if (__hisnan(a)) return __hisnan(b) ? kiln_hip::bf16_bits(0x7fff) : b;
  if (__hisnan(b)) return a;
  return kiln_hip::bf16_less(a, b) ? b : a;
}
KILN_BF16 __nv_bfloat16 __hmin(const __nv_bfloat16 a, const __nv_bfloat16 b) {
  if (__hisnan(a)) return __hisnan(b) ? kiln_hip::bf16_bits(0x7fff) : b;
  if (__hisnan(b)) return a;
  return kiln_hip::bf16_less(b, a) ? b : a;
}
KILN_BF16 __nv_bfloat16 __hmax_nan(const __nv_bfloat16 a, const __nv_bfloat16 b) {
  return (__hisnan(a) || __hisnan(b)) ? kiln_hip::bf16_bits(0x7fff) : __hmax(a, b);
}
KILN_BF16 __nv_bfloat16 __hmin_nan(const __nv_bfloat16 a, const __nv_bfloat16 b) {
  return (__hisnan(a) || __hisnan(b)) ? kiln_hip::bf16_bits(0x7fff) : __hmin(a, b);
}
KILN_BF16 __nv_bfloat162 __hmax2(const __nv_bfloat162 a, const __nv_bfloat162 b) { return __nv_bfloat162(__hmax(a.x, b.x), __hmax(a.y, b.y)); }
KILN_BF16 __nv_bfloat162 __hmin2(const __nv_bfloat162 a, const __nv_bfloat162 b) { return __nv_bfloat162(__hmin(a.x, b.x), __hmin(a.y, b.y)); }

// ------------------------------------------------------------------- math
// CUDA evaluates these in float and rounds to bfloat16 (its bf16 math is
// documented as such); the float functions are ROCm's ocml ones, so the last
// float ulp may differ from CUDA's libdevice, which the final rounding to
// bfloat16 hides in all but rare halfway cases.
#define KILN_BF16_MATH(NAME, F) \
  __device__ __forceinline__ __nv_bfloat16 NAME(const __nv_bfloat16 a) { return kiln_hip::bf16_rn(F(float(a))); }
KILN_BF16_MATH(hsqrt, sqrtf)
KILN_BF16_MATH(hrsqrt, rsqrtf)
KILN_BF16_MATH(hrcp, 1.0f /)
KILN_BF16_MATH(hexp, expf)
KILN_BF16_MATH(hexp2, exp2f)
KILN_BF16_MATH(hexp10, exp10f)
KILN_BF16_MATH(hlog, logf)
KILN_BF16_MATH(hlog2, log2f)
KILN_BF16_MATH(hlog10, log10f)
KILN_BF16_MATH(hsin, sinf)
KILN_BF16_MATH(hcos, cosf)
KILN_BF16_MATH(htanh, tanhf)
KILN_BF16_MATH(hceil, ceilf)
KILN_BF16_MATH(hfloor, floorf)
KILN_BF16_MATH(htrunc, truncf)
KILN_BF16_MATH(hrint, rintf)
#undef KILN_BF16_MATH

// ----------------------------------------------------------------- atomics
// CUDA's bf16 atomicAdd rounds the sum once, to nearest even; so does __hadd.
__device__ __forceinline__ __nv_bfloat16 atomicAdd(__nv_bfloat16 *address, __nv_bfloat16 val) {
  return kiln_hip::atomic_rmw16(address, [val](__nv_bfloat16 cur) { return __hadd(cur, val); });
}
__device__ __forceinline__ __nv_bfloat162 atomicAdd(__nv_bfloat162 *address, __nv_bfloat162 val) {
  // CUDA adds the two halves atomically each, not as one 32-bit unit.
  __nv_bfloat16 *p = reinterpret_cast<__nv_bfloat16 *>(address);
  const __nv_bfloat16 lo = atomicAdd(p, val.x), hi = atomicAdd(p + 1, val.y);
  return __nv_bfloat162(lo, hi);
}

#undef KILN_BF16
