// Host check of kiln_hip_fpconv.h (the conversions behind the software bf16 and
// fp8 types) against CUDA 12.4's own headers, whose host code paths are the
// sm_80 software paths. Exhaustive where the input space allows (all 2^32
// floats, all bf16 and fp8 values), random plus edge cases elsewhere.
// Build and run (kernels/hip/test/run.sh does this inside kiln's sysroot):
//   g++-13 -std=c++17 -O2 fpconv_vs_cuda.cpp -o fpconv && ./fpconv
// (no -I to kernels/hip: <cuda_*.h> must be the toolkit's, not kiln's stand-ins)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#define KILN_FPCONV inline
#include "../kiln_hip_fpconv.h"

static long failures = 0;
#define CHECK(cond, ...)                                    \
  do {                                                      \
    if (!(cond)) {                                          \
      if (++failures <= 20) std::printf(__VA_ARGS__);       \
    }                                                       \
  } while (0)

static uint16_t bits(__nv_bfloat16 h) { return static_cast<__nv_bfloat16_raw>(h).x; }
static uint16_t hbits(__half_raw h) { return h.x; }
static float f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
static double f64(uint64_t u) { double d; std::memcpy(&d, &u, 8); return d; }

int main() {
  // float -> bf16 (rn, rz) and float -> fp8 (both kinds, both saturation modes): all floats.
  const __nv_fp8_interpretation_t kinds[2] = {__NV_E4M3, __NV_E5M2};
  const kiln_fp::fp8_kind kkinds[2] = {kiln_fp::fp8_e4m3, kiln_fp::fp8_e5m2};
  for (uint64_t i = 0; i < (1ull << 32); ++i) {
    const float f = f32(uint32_t(i));
    CHECK(kiln_fp::bf16_from_f32_rn(f) == bits(__float2bfloat16_rn(f)), "f32->bf16 rn %08llx\n", (unsigned long long)i);
    CHECK(kiln_fp::bf16_from_f32_rz(f) == bits(__float2bfloat16_rz(f)), "f32->bf16 rz %08llx\n", (unsigned long long)i);
    for (int k = 0; k < 2; ++k) {
      CHECK(kiln_fp::fp8_from_f32(f, true, kkinds[k]) == __nv_cvt_float_to_fp8(f, __NV_SATFINITE, kinds[k]),
            "f32->fp8 kind %d sat %08llx\n", k, (unsigned long long)i);
      if ((i & 0xff) == 0 || (i & 0x7f800000u) >= 0x43000000u)
        CHECK(kiln_fp::fp8_from_f32(f, false, kkinds[k]) == __nv_cvt_float_to_fp8(f, __NV_NOSAT, kinds[k]),
              "f32->fp8 kind %d nosat %08llx\n", k, (unsigned long long)i);
    }
  }
  std::printf("floats done, failures so far %ld\n", failures);

  // bf16 -> float and bf16 -> integers: all bf16.
  for (uint32_t b = 0; b < 65536; ++b) {
    const __nv_bfloat16 h = __nv_bfloat16_raw{uint16_t(b)};
    const float f = kiln_fp::bf16_to_f32(uint16_t(b));
    const float g = __bfloat162float(h);
    CHECK(std::memcmp(&f, &g, 4) == 0, "bf16->f32 %04x\n", b);
    CHECK(kiln_fp::f32_to_int_rz_sat<int>(f, INT32_MIN, INT32_MAX, 0) == __bfloat162int_rz(h), "bf16->int %04x\n", b);
    CHECK(kiln_fp::f32_to_int_rz_sat<unsigned>(f, 0u, UINT32_MAX, 0u) == __bfloat162uint_rz(h), "bf16->uint %04x\n", b);
    CHECK(kiln_fp::f32_to_int_rz_sat<long long>(f, INT64_MIN, INT64_MAX, INT64_MIN) == __bfloat162ll_rz(h), "bf16->ll %04x\n", b);
    CHECK(kiln_fp::f32_to_int_rz_sat<unsigned long long>(f, 0ull, UINT64_MAX, 0x8000000000000000ull) == __bfloat162ull_rz(h),
          "bf16->ull %04x\n", b);
    CHECK(kiln_fp::f32_to_int_rz_sat<short>(f, -32768, 32767, 0) == __bfloat162short_rz(h), "bf16->short %04x\n", b);
    CHECK(kiln_fp::f32_to_int_rz_sat<unsigned short>(f, 0, 65535, 0) == __bfloat162ushort_rz(h), "bf16->ushort %04x\n", b);
    CHECK(kiln_fp::f32_to_int_rz_sat<signed char>(f, -128, 127, 0) == __bfloat162char_rz(h), "bf16->char %04x\n", b);
    CHECK(kiln_fp::f32_to_int_rz_sat<unsigned char>(f, 0, 255, 0) == __bfloat162uchar_rz(h), "bf16->uchar %04x\n", b);
  }

  // fp8 -> half bits and half -> float: all values.
  for (uint32_t x = 0; x < 256; ++x)
    for (int k = 0; k < 2; ++k)
      CHECK(kiln_fp::fp8_to_f16_bits(uint8_t(x), kkinds[k]) == hbits(__nv_cvt_fp8_to_halfraw(uint8_t(x), kinds[k])),
            "fp8->f16 kind %d %02x\n", k, x);
  for (uint32_t h = 0; h < 65536; ++h) {
    __half_raw r; r.x = uint16_t(h);
    const float a = kiln_fp::f16_bits_to_f32(uint16_t(h)), b = __half2float(__half(r));
    CHECK(std::memcmp(&a, &b, 4) == 0 || (a != a && b != b), "f16->f32 %04x\n", h);
  }

  // Doubles and 64-bit integers: edges, every binade boundary, and random bit patterns.
  std::mt19937_64 rng(12345);
  std::vector<double> ds = {0.0, -0.0, 448.0, 464.0, 464.00000000000006, 463.99999999999994, 480.0, 57344.0, 61440.0,
                            61439.99999999999, 61440.00000000001, 0x1p-10, 0x1p-10 + 0x1p-60, 0x1p-17, 0x1p-17 + 0x1p-70,
                            0x1p-9, 0x1p-6, 0x1p-14, 0x1p-16, 1e300, -1e300, 3.4028235677973366e38, 3.4028234663852886e38,
                            std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                            std::numeric_limits<double>::quiet_NaN(), -std::numeric_limits<double>::quiet_NaN(),
                            f64(0x7ff0000000000001ull), f64(0xfff4000000000000ull), 1.0 + 0x1p-8 + 0x1p-40, 1.0 + 0x1p-8,
                            0x1p-133, 0x1p-134, 0x1p-134 + 0x1p-200, 1e-45, 1e-320};
  for (int e = -1100; e < 1100; ++e)
    for (double m : {1.0, 1.0625, 1.125, 1.5, 1.9375, 1.03125, 1.0 + 0x1p-9, 1.0 + 0x1p-25}) {
      ds.push_back(std::ldexp(m, e));
      ds.push_back(-std::ldexp(m, e));
    }
  for (int i = 0; i < 20000000; ++i) {
    uint64_t u = rng();
    if (i & 1) u = (u & 0x800fffffffffffffull) | (uint64_t(1023 - 30 + (rng() % 50)) << 52);  // fp8/bf16-relevant range
    ds.push_back(f64(u));
  }
  for (double d : ds) {
    uint64_t u; std::memcpy(&u, &d, 8);
    CHECK(kiln_fp::bf16_from_f64_rn(d) == bits(__double2bfloat16(d)), "f64->bf16 %016llx\n", (unsigned long long)u);
    for (int k = 0; k < 2; ++k)
      for (int sat = 0; sat < 2; ++sat)
        CHECK(kiln_fp::fp8_from_f64(d, sat, kkinds[k]) ==
                  __nv_cvt_double_to_fp8(d, sat ? __NV_SATFINITE : __NV_NOSAT, kinds[k]),
              "f64->fp8 kind %d sat %d %016llx\n", k, sat, (unsigned long long)u);
  }
  std::vector<unsigned long long> us = {0, 1, 255, 256, 257, 0x7fffffffull, 0x80000000ull, 0xffffffffull, 0x1000001ull,
                                        0x1000003ull, 0x180ffffull, 0x1810000ull, 0x1808000ull, 0x1818000ull,
                                        0xffffffffffffffffull, 0x8000000000000000ull, 0x7fffffffffffffffull};
  for (int i = 0; i < 4000000; ++i) {
    const unsigned long long v = rng();
    us.push_back(v >> (rng() % 64));
  }
  for (unsigned long long v : us) {
    CHECK(kiln_fp::bf16_from_u64_rn(v) == bits(__ull2bfloat16_rn(v)), "u64->bf16 %llx\n", v);
    CHECK(kiln_fp::bf16_from_i64_rn((long long)v) == bits(__ll2bfloat16_rn((long long)v)), "i64->bf16 %llx\n", v);
    CHECK(kiln_fp::bf16_from_u64_rn(uint32_t(v)) == bits(__uint2bfloat16_rn(uint32_t(v))), "u32->bf16 %llx\n", v);
    CHECK(kiln_fp::bf16_from_i64_rn(int32_t(v)) == bits(__int2bfloat16_rn(int32_t(v))), "i32->bf16 %llx\n", v);
  }

  std::printf("%s: %ld failures (%zu doubles, %zu integers, all floats/bf16/fp8)\n", failures ? "FAIL" : "PASS", failures,
              ds.size(), us.size());
  return failures ? 1 : 0;
}
