// Dumps what kiln's HIP shims compute for every bf16/fp16/fp8 conversion candle
// uses, so that crates/kiln-dist/tests/hip_numerics.rs can compare them with the
// `half` and `float8` crates (what candle-core's CPU backend computes).
//
// Compiled for the host by the pinned clang in HIP mode (`-x hip --cuda-host-only`,
// `-include candle_hip_compat.h`): the same headers, the same `__host__ __device__`
// functions and class operators that the code objects inline, here on x86. bf16 and
// fp8 are kiln's software conversions (kiln_hip_fpconv.h), which do not depend on
// the target. fp16 is HIP 5.7's own `__half` (`static_cast<_Float16>`): on the host
// that is the compiler runtime's IEEE conversion, on the GPU `v_cvt_f16_f32`; both
// round to nearest even with f16 subnormals kept (docs/hip-shims.md says what this
// does and does not prove).
//
// Usage: fpconv_tables <f32 inputs> <f64 inputs> <output>. Inputs are raw
// little-endian u32 / u64 bit patterns; the output is, in this order, raw
// little-endian arrays (the order and widths are the test's `Tables::read`):
//   for every u16 v:          bf16(v)->f32 u32, f16(v)->f32 u32,
//                             bf16(v)->e4m3, bf16(v)->e5m2, f16(v)->e4m3, f16(v)->e5m2 (u8 each)
//   for every u8 b, e4m3 then e5m2: ->f32 u32, ->f16 u16, ->bf16 u16, ->f64 u64
//   for every f32 input:      ->bf16 u16, ->f16 u16, ->e4m3 u8, ->e5m2 u8 (satfinite)
//   for every f64 input:      ->bf16 u16, ->f16 u16, ->e4m3 u8, ->e5m2 u8 (satfinite)
#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "cuda_fp8.h"

#include <cstdio>
#include <cstring>
#include <vector>

namespace {
template <typename T> std::vector<T> read_all(const char *path) {
  std::vector<T> v;
  FILE *f = std::fopen(path, "rb");
  if (!f) return v;
  T x;
  while (std::fread(&x, sizeof x, 1, f) == 1) v.push_back(x);
  std::fclose(f);
  return v;
}
template <typename T> void put(std::vector<unsigned char> &out, T x) {
  unsigned char b[sizeof x];
  std::memcpy(b, &x, sizeof x);
  out.insert(out.end(), b, b + sizeof x);
}
unsigned u32_of(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
unsigned long long u64_of(double d) { unsigned long long u; std::memcpy(&u, &d, 8); return u; }
float f32_of(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
double f64_of(unsigned long long u) { double d; std::memcpy(&d, &u, 8); return d; }
unsigned short f16_bits(__half h) { return static_cast<__half_raw>(h).x; }
__half f16_from(unsigned short v) { __half_raw r; r.x = v; return __half(r); }

template <typename F8> void fp8_table(std::vector<unsigned char> &out) {
  for (unsigned b = 0; b < 256; ++b) {
    F8 x;
    x.__x = (unsigned char)b;
    put(out, u32_of(float(x)));
    put(out, f16_bits(__half(x)));
    put(out, __bfloat16_as_ushort(__nv_bfloat16(x)));
    put(out, u64_of(double(x)));
  }
}
} // namespace

int main(int argc, char **argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: fpconv_tables <f32 inputs> <f64 inputs> <output>\n");
    return 2;
  }
  const std::vector<unsigned> f32s = read_all<unsigned>(argv[1]);
  const std::vector<unsigned long long> f64s = read_all<unsigned long long>(argv[2]);
  std::vector<unsigned char> out;
  for (unsigned v = 0; v < 65536; ++v) {
    const __nv_bfloat16 b = __ushort_as_bfloat16((unsigned short)v);
    const __half h = f16_from((unsigned short)v);
    put(out, u32_of(float(b)));
    put(out, u32_of(__half2float(h)));
    put(out, __nv_fp8_e4m3(b).__x);
    put(out, __nv_fp8_e5m2(b).__x);
    put(out, __nv_fp8_e4m3(h).__x);
    put(out, __nv_fp8_e5m2(h).__x);
  }
  fp8_table<__nv_fp8_e4m3>(out);
  fp8_table<__nv_fp8_e5m2>(out);
  for (unsigned u : f32s) {
    const float f = f32_of(u);
    put(out, __bfloat16_as_ushort(__nv_bfloat16(f)));
    put(out, f16_bits(__float2half(f)));
    put(out, __nv_fp8_e4m3(f).__x);
    put(out, __nv_fp8_e5m2(f).__x);
  }
  for (unsigned long long u : f64s) {
    const double d = f64_of(u);
    put(out, __bfloat16_as_ushort(__nv_bfloat16(d)));
    put(out, f16_bits(__half(d)));
    put(out, __nv_fp8_e4m3(d).__x);
    put(out, __nv_fp8_e5m2(d).__x);
  }
  FILE *f = std::fopen(argv[3], "wb");
  if (!f || std::fwrite(out.data(), 1, out.size(), f) != out.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "cannot write %s\n", argv[3]);
    return 1;
  }
  std::printf("%zu f32, %zu f64 inputs\n", f32s.size(), f64s.size());
  return 0;
}
