// Bit-exact conversions for the software __nv_bfloat16 and __nv_fp8_e4m3/e5m2
// (cuda_bf16.h, cuda_fp8.h next to this file). Plain C++ on integer bits, with
// no HIP dependency, so that kernels/hip/test/fpconv_vs_cuda.cpp can compile the
// same code on the host and compare it, input by input, with the CUDA 12.4
// headers in kiln's sysroot. The rules implemented are CUDA's software path (its
// sm_80 code; the shims define __CUDA_ARCH__ 890 for candle's kernel gates, and
// sm_89+ hardware conversions agree but for the NaN payloads docs/hip-shims.md
// lists): round to nearest even; NaN -> canonical NaN
// where CUDA canonicalizes; fp8 saturation as __NV_SATFINITE; float -> integer
// truncating with saturation, NaN -> 0 (64-bit: 0x8000000000000000).
#pragma once

#ifndef KILN_FPCONV
#define KILN_FPCONV __host__ __device__ inline
#endif

namespace kiln_fp {

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

KILN_FPCONV u32 f32_bits(float f) { u32 u; __builtin_memcpy(&u, &f, 4); return u; }
KILN_FPCONV float f32_from_bits(u32 u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
KILN_FPCONV u64 f64_bits(double d) { u64 u; __builtin_memcpy(&u, &d, 8); return u; }
// nvcc's device code has no __builtin_clz*; test/cuda_device_check.cu runs this
// header there too.
KILN_FPCONV int clz32(u32 x) {
#if defined(__NVCC__) && defined(__CUDA_ARCH__)
  return __clz(int(x));
#else
  return __builtin_clz(x);
#endif
}
KILN_FPCONV int clz64(u64 x) {
#if defined(__NVCC__) && defined(__CUDA_ARCH__)
  return __clzll((long long)x);
#else
  return __builtin_clzll(x);
#endif
}

// ---------------------------------------------------------------- bfloat16
KILN_FPCONV float bf16_to_f32(u16 b) { return f32_from_bits(u32(b) << 16); }

// The 16 low bits decide the rounding; all-ones exponents are Inf (kept) or NaN.
KILN_FPCONV u16 bf16_from_f32_rn(float f) {
  u32 u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  u += 0x7fffu + ((u >> 16) & 1u);
  return u16(u >> 16);
}
KILN_FPCONV u16 bf16_from_f32_rz(float f) {
  const u32 u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  return u16(u >> 16);
}

// Wider sources round in two steps, the first "to odd": truncate to float, then
// set the last bit when anything was cut off. Float keeps 16 more bits than
// bfloat16, so the second rounding (to nearest even) is then exact: one correct
// rounding overall, as CUDA's __double2bfloat16 and __int2bfloat16_rn give.
KILN_FPCONV float f32_round_odd(double x) {
  float f = float(x);  // nearest
  if (f != f) return f;
  const double d = double(f);
  u32 u = f32_bits(f);
  if ((x > 0.0 && d > x) || (x < 0.0 && d < x)) u -= 1;  // nearest went away from zero: step back
  if (d != x) u |= 1u;
  return f32_from_bits(u);
}
KILN_FPCONV float f32_round_odd(u64 m) {
  if (m == 0) return 0.0f;
  const int bits = 64 - clz64(m);
  if (bits > 24) {
    const int cut = bits - 24;
    const u64 kept = (m >> cut) << cut;
    m = kept | (kept != m ? (u64(1) << cut) : 0);  // sticky in the last kept bit
  }
  return float(m);  // exact: at most 24 significant bits
}
KILN_FPCONV u16 bf16_from_f64_rn(double x) { return bf16_from_f32_rn(f32_round_odd(x)); }
KILN_FPCONV u16 bf16_from_u64_rn(u64 v) { return bf16_from_f32_rn(f32_round_odd(v)); }
KILN_FPCONV u16 bf16_from_i64_rn(long long v) {
  const u64 mag = v < 0 ? u64(0) - u64(v) : u64(v);
  const u16 b = bf16_from_u64_rn(mag);
  return v < 0 ? u16(b | 0x8000u) : b;
}

// Float -> integer, truncating, saturating at the type's range; NaN gives
// `nan_value` (CUDA: 0, or 0x8000000000000000 for the 64-bit conversions).
template <typename I> KILN_FPCONV I f32_to_int_rz_sat(float f, I lo, I hi, I nan_value) {
  if (f != f) return nan_value;
  if (f <= float(lo)) return lo;
  if (f >= float(hi)) return hi;  // float(hi) may round up past hi: >= keeps the cast below in range
  return I(f);
}

// -------------------------------------------------------------------- fp8
// E4M3 (no Inf; S.1111.111 is NaN; max 448) and E5M2 (IEEE-like; max 57344).
enum fp8_kind { fp8_e4m3 = 0, fp8_e5m2 = 1 };

// A source format: float or double, named by its bit layout.
template <typename U> struct fp_src;
template <> struct fp_src<u32> {
  static constexpr int mbits = 23, bias = 127, width = 32;
  // |x| at or below half the smallest fp8 subnormal rounds to zero (ties to even).
  static constexpr u32 e4m3_zero = 0x3a800000u;       // 2^-10
  static constexpr u32 e5m2_zero = 0x37000000u;       // 2^-17
  // Above maxnorm + ulp/2 overflows. E5M2's midpoint 61440 itself overflows
  // (its even neighbour is 65536), so its bound is one bit below.
  static constexpr u32 e4m3_over = 0x43e80000u;       // 464
  static constexpr u32 e5m2_over = 0x47700000u - 1u;  // 61440 - ulp
};
template <> struct fp_src<u64> {
  static constexpr int mbits = 52, bias = 1023, width = 64;
  static constexpr u64 e4m3_zero = 0x3f50000000000000ull;
  static constexpr u64 e5m2_zero = 0x3ee0000000000000ull;
  static constexpr u64 e4m3_over = 0x407d000000000000ull;
  static constexpr u64 e5m2_over = 0x40ee000000000000ull - 1ull;
};

// One rounding from a float/double bit pattern to fp8, to nearest even.
template <typename U> KILN_FPCONV u8 fp8_from_bits(U bits, bool satfinite, fp8_kind kind) {
  typedef fp_src<U> S;
  const U sign_bit = U(1) << (S::width - 1);
  const U inf = (sign_bit - 1) & ~((U(1) << S::mbits) - 1);
  const u8 sign = (bits & sign_bit) ? 0x80 : 0x00;
  const U a = bits & (sign_bit - 1);
  const bool e4 = kind == fp8_e4m3;
  if (a > inf) return e4 ? u8(sign | 0x7f) : u8(sign | 0x7e | u8((a >> (S::mbits - 2)) & 3u));
  if (a > (e4 ? S::e4m3_over : S::e5m2_over)) {
    if (satfinite) return u8(sign | (e4 ? 0x7e : 0x7b));
    return u8(sign | (e4 ? 0x7f : 0x7c));  // E4M3 has no Inf: NaN
  }
  if (a <= (e4 ? S::e4m3_zero : S::e5m2_zero)) return sign;
  const int fp8_mbits = e4 ? 3 : 2, fp8_emin = e4 ? -6 : -14;
  const int e = int(a >> S::mbits) - S::bias;  // a is a normal number here
  const U m = (a & ((U(1) << S::mbits) - 1)) | (U(1) << S::mbits);
  const int E = e > fp8_emin ? e : fp8_emin;  // exponent of the fp8 binade (subnormals: emin)
  const int shift = S::mbits - fp8_mbits + (E - e);
  U n = m >> shift;
  const U rem = m & ((U(1) << shift) - 1), half = U(1) << (shift - 1);
  if (rem > half || (rem == half && (n & 1u))) n += 1;
  // Subnormals encode n directly; a carry out of the mantissa moves to the next binade.
  return u8(sign | u8(((E - fp8_emin) << fp8_mbits) + int(n)));
}

// CUDA's float path first replaces any NaN by the positive canonical NaN.
KILN_FPCONV u8 fp8_from_f32(float f, bool satfinite, fp8_kind kind) {
  u32 u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) u = 0x7fffffffu;
  return fp8_from_bits<u32>(u, satfinite, kind);
}
KILN_FPCONV u8 fp8_from_f64(double d, bool satfinite, fp8_kind kind) {
  return fp8_from_bits<u64>(f64_bits(d), satfinite, kind);
}

// fp8 -> binary16 bits; every fp8 value is exact in half. NaN -> 0x7fff.
KILN_FPCONV u16 fp8_to_f16_bits(u8 x, fp8_kind kind) {
  if (kind == fp8_e5m2) {
    const u16 h = u16(u16(x) << 8);
    return (h & 0x7fffu) > 0x7c00u ? u16(0x7fff) : h;
  }
  if ((x & 0x7fu) == 0x7fu) return 0x7fff;
  const u16 s = u16((x & 0x80u) << 8);
  const u32 e = (x >> 3) & 0xfu, m = x & 7u;
  if (e) return u16(s | ((e + 8u) << 10) | (m << 7));
  if (!m) return s;
  const u32 p = 31u - u32(clz32(m));  // leading bit of a subnormal: 0..2
  return u16(s | ((p + 6u) << 10) | ((m << (10u - p)) & 0x3ffu));
}

KILN_FPCONV float f16_bits_to_f32(u16 h) {
  const u32 s = u32(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) return f32_from_bits(s | 0x7f800000u | (m << 13));
  if (e) return f32_from_bits(s | ((e + 112u) << 23) | (m << 13));
  if (!m) return f32_from_bits(s);
  const u32 p = 31u - u32(clz32(m));  // 0..9
  return f32_from_bits(s | ((p + 103u) << 23) | ((m << (23u - p)) & 0x7fffffu));
}

} // namespace kiln_fp
