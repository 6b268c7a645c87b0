//! The HIP shims' numerics without an AMD GPU: kiln's conversion headers
//! (kernels/hip/: bf16, fp16, fp8 E4M3/E5M2 to and from float) compiled for
//! the host by the pinned clang in HIP mode, in kiln's sandbox
//! (kernels/hip/test/fpconv_tables.cpp), and compared with the `half` and
//! `float8` crates, which is what candle-core's CPU backend computes: every
//! 8- and 16-bit encoding, and about 7 million floats and doubles chosen for
//! the rounding and saturation cases. Every difference must be one of the
//! documented ones ([`Difference`], docs/hip-shims.md "Against candle's CPU
//! backend"); anything else fails with the first inputs it happened on.
//! The toolchain is provisioned on first use (about 1.2 GB).

use std::{collections::BTreeMap, fs};

use float8::{F8E4M3, F8E5M2};
use half::{bf16, f16};
use kiln_toolchain::Mount;

mod common;
use common::{repo, temp, toolchain};

/// Why a kiln result may differ from the crates' (every other difference is a defect).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Difference {
    /// bf16 -> float of a signalling NaN: kiln (and CUDA) copy the bits, `half`
    /// sets the quiet bit. Both are NaN.
    SignallingNanQuieted,
    /// A NaN input: kiln gives CUDA's canonical NaN (bf16 0x7fff, fp8 0x7f from
    /// float), the crates keep the sign and payload. Both are NaN.
    NanEncoding,
    /// f64 -> bf16/f16 where `half` rounds on the high 32 bits of the double
    /// only: the low 32 bits would have broken a tie. kiln's result is the
    /// correctly rounded one (checked here), as CUDA's `__double2bfloat16` is.
    HalfIgnoresLowDoubleBits,
}

#[derive(Default)]
struct Report {
    checked: usize,
    documented: BTreeMap<(&'static str, Difference), usize>,
    defects: Vec<String>,
}

impl Report {
    /// Records one comparison: equal, a documented difference, or a defect.
    fn check(&mut self, what: &'static str, input: String, kiln: u64, crates: u64, why: Option<Difference>) {
        self.checked += 1;
        if kiln == crates {
            return;
        }
        match why {
            Some(d) => *self.documented.entry((what, d)).or_default() += 1,
            None if self.defects.len() < 20 => self.defects.push(format!("{what}({input}): kiln {kiln:#x}, candle's CPU {crates:#x}")),
            None => self.defects.push(String::new()),
        }
    }
}

fn bf16_nan(v: u16) -> bool {
    v & 0x7fff > 0x7f80
}
fn f16_nan(v: u16) -> bool {
    v & 0x7fff > 0x7c00
}

/// The value a 16-bit result stands for when judging a rounding: infinity
/// counts as the first power of two past the largest finite value (where
/// rounding to nearest puts the overflow boundary).
fn rounded_value(bits: u16, bf: bool) -> f64 {
    let inf = if bf { 0x7f80 } else { 0x7c00 };
    if bits & 0x7fff == inf {
        let big = if bf { 2f64.powi(128) } else { 65536.0 };
        return if bits & 0x8000 != 0 { -big } else { big };
    }
    if bf {
        bf16::from_bits(bits).to_f64()
    } else {
        f16::from_bits(bits).to_f64()
    }
}

/// `kiln` is the correct rounding of `x` where `other` is not: strictly nearer,
/// or as near and even.
fn correctly_rounded(x: f64, kiln: u16, other: u16, bf: bool) -> bool {
    let (k, o) = ((x - rounded_value(kiln, bf)).abs(), (x - rounded_value(other, bf)).abs());
    k < o || (k == o && kiln & 1 == 0)
}

/// The inputs beyond the exhaustive 8/16-bit tables: every bf16 rounding case
/// (all high halves with the tie patterns below them), the fp8 and f16
/// rounding cases (every mantissa of every binade they reach, with the bits
/// below their ties set to the patterns that decide them), the specials, and
/// pseudo-random bit patterns. Doubles: the same floats, then with bits below
/// float precision set (sticky bits), plus random doubles.
fn inputs() -> (Vec<u32>, Vec<u64>) {
    let mut f32s = Vec::new();
    for high in 0..=0xffffu32 {
        for low in [0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff] {
            f32s.push(high << 16 | low);
        }
    }
    for exp in (127 - 26)..=(127 + 18u32) {
        for mant_high in 0..1024u32 {
            for low in [0, 1, 0xfff, 0x1000, 0x1001, 0x1fff] {
                for sign in [0, 0x8000_0000u32] {
                    f32s.push(sign | exp << 23 | mant_high << 13 | low);
                }
            }
        }
    }
    let specials = [0x7f80_0000u32, 0x7fc0_0000, 0x7f80_0001, 0x7fbf_ffff, 0x7fff_ffff, 0x0000_0001, 0x007f_ffff, 0x7f7f_ffff];
    for s in specials {
        f32s.extend([s, s | 0x8000_0000]);
    }
    // xorshift64: a fixed sequence, so a failure repeats.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..1_000_000 {
        f32s.push(next() as u32);
    }
    let mut f64s = Vec::new();
    for &u in &f32s {
        let d = (f32::from_bits(u) as f64).to_bits();
        if f32::from_bits(u).is_finite() {
            f64s.extend([d, d | 1, d | 0x1fff_ffff, d ^ 0x8000_0000]);
        } else {
            f64s.push(d);
        }
    }
    for _ in 0..500_000 {
        f64s.push(next());
        // Random doubles in the fp8 and f16 range (|x| < 2^18).
        f64s.push(f64::from_bits(0x3f00_0000_0000_0000 | (next() >> 12)).to_bits() ^ (next() & 0x8000_0000_0000_0000));
    }
    (f32s, f64s)
}

/// What the host build of the shims computed (fpconv_tables.cpp's output order).
struct Tables {
    /// Per u16: bf16->f32, f16->f32, bf16->e4m3, bf16->e5m2, f16->e4m3, f16->e5m2.
    wide: Vec<(u32, u32, u8, u8, u8, u8)>,
    /// Per u8, E4M3 then E5M2: ->f32, ->f16, ->bf16, ->f64.
    fp8: [Vec<(u32, u16, u16, u64)>; 2],
    /// Per float / per double input: ->bf16, ->f16, ->e4m3, ->e5m2.
    from_f32: Vec<(u16, u16, u8, u8)>,
    from_f64: Vec<(u16, u16, u8, u8)>,
}

struct Cursor<'a>(&'a [u8]);
impl Cursor<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        head.try_into().unwrap()
    }
    fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
}

impl Tables {
    fn read(bytes: &[u8], n32: usize, n64: usize) -> Tables {
        let want = 65536 * 12 + 2 * 256 * 16 + (n32 + n64) * 6;
        assert_eq!(bytes.len(), want, "fpconv_tables wrote {} bytes, expected {want}", bytes.len());
        let mut c = Cursor(bytes);
        let wide = (0..65536).map(|_| (c.u32(), c.u32(), c.u8(), c.u8(), c.u8(), c.u8())).collect();
        let mut fp8 = || (0..256).map(|_| (c.u32(), c.u16(), c.u16(), c.u64())).collect::<Vec<_>>();
        let fp8 = [fp8(), fp8()];
        let from_f32 = (0..n32).map(|_| (c.u16(), c.u16(), c.u8(), c.u8())).collect();
        let from_f64 = (0..n64).map(|_| (c.u16(), c.u16(), c.u8(), c.u8())).collect();
        Tables { wide, fp8, from_f32, from_f64 }
    }
}

/// Compiles fpconv_tables.cpp with the pinned clang (host side of a HIP
/// compile, the shims force-included as for the code objects) and runs it on
/// the inputs, all inside kiln's sandbox.
fn kiln_tables(f32s: &[u32], f64s: &[u64]) -> Tables {
    let (pins, runner) = toolchain();
    let major = pins.toolchain.clang.package.trim_start_matches("clang-").to_string();
    let dir = temp("hip-numerics");
    fs::write(dir.join("f32.bin"), f32s.iter().flat_map(|u| u.to_le_bytes()).collect::<Vec<_>>()).unwrap();
    fs::write(dir.join("f64.bin"), f64s.iter().flat_map(|u| u.to_le_bytes()).collect::<Vec<_>>()).unwrap();
    let mounts = [
        Mount { host: repo().join("kernels/hip"), at: "/kiln/hip".into(), writable: false },
        Mount { host: dir.to_path_buf(), at: "/kiln/job".into(), writable: true },
    ];
    let script = format!(
        "clang++-{major} -x hip --cuda-host-only -nogpulib --rocm-path=/usr -std=c++17 -O2 -Wall -Werror \
         -I/kiln/hip -include candle_hip_compat.h /kiln/hip/test/fpconv_tables.cpp -o fpconv_tables \
         && ./fpconv_tables f32.bin f64.bin tables.bin"
    );
    let log = dir.join("log");
    let status = runner.run(&mounts, "/kiln/job", &["sh".to_string(), "-c".into(), script], &log).unwrap();
    assert!(status.success(), "fpconv_tables failed: {}", fs::read_to_string(&log).unwrap_or_default());
    Tables::read(&fs::read(dir.join("tables.bin")).unwrap(), f32s.len(), f64s.len())
}

/// Every comparison, against `half` and `float8` as candle-core 0.11.1's CPU
/// backend converts (fp8 <-> the others through f32, as its casts do).
fn compare(t: &Tables, f32s: &[u32], f64s: &[u64]) -> Report {
    use Difference::*;
    let mut r = Report::default();
    let nan = |is: bool| is.then_some(NanEncoding);
    for v in 0..=0xffffu16 {
        let (bf_f32, h_f32, bf_e4, bf_e5, h_e4, h_e5) = t.wide[v as usize];
        let (b, h) = (bf16::from_bits(v), f16::from_bits(v));
        // CUDA's bf16 -> float is the bits shifted, NaN or not.
        let quieted = (bf16_nan(v) && v & 0x40 == 0 && bf_f32 == u32::from(v) << 16).then_some(SignallingNanQuieted);
        r.check("bf16->f32", format!("{v:#06x}"), bf_f32.into(), b.to_f32().to_bits().into(), quieted);
        r.check("f16->f32", format!("{v:#06x}"), h_f32.into(), h.to_f32().to_bits().into(), None);
        let e4_nan = |k: u8| (k == 0x7f).then_some(NanEncoding);
        let bf_is_nan = bf16_nan(v);
        let h_is_nan = f16_nan(v);
        r.check(
            "bf16->e4m3",
            format!("{v:#06x}"),
            bf_e4.into(),
            F8E4M3::from_f32(b.to_f32()).to_bits().into(),
            if bf_is_nan { e4_nan(bf_e4) } else { None },
        );
        r.check(
            "bf16->e5m2",
            format!("{v:#06x}"),
            bf_e5.into(),
            F8E5M2::from_f32(b.to_f32()).to_bits().into(),
            if bf_is_nan { e4_nan(bf_e5) } else { None },
        );
        r.check(
            "f16->e4m3",
            format!("{v:#06x}"),
            h_e4.into(),
            F8E4M3::from_f32(h.to_f32()).to_bits().into(),
            if h_is_nan { e4_nan(h_e4) } else { None },
        );
        r.check(
            "f16->e5m2",
            format!("{v:#06x}"),
            h_e5.into(),
            F8E5M2::from_f32(h.to_f32()).to_bits().into(),
            if h_is_nan { e4_nan(h_e5) } else { None },
        );
    }
    for b in 0..=255u8 {
        let (e4, e5) = (F8E4M3::from_bits(b), F8E5M2::from_bits(b));
        let refs = [(e4.to_f32(), e4.to_f16(), e4.to_f64(), "e4m3"), (e5.to_f32(), e5.to_f16(), e5.to_f64(), "e5m2")];
        for (kind, (f, h, d, name)) in refs.into_iter().enumerate() {
            let (k_f32, k_f16, k_bf16, k_f64) = t.fp8[kind][b as usize];
            let input = format!("{name} {b:#04x}");
            r.check(if kind == 0 { "e4m3->f32" } else { "e5m2->f32" }, input.clone(), k_f32.into(), f.to_bits().into(), None);
            r.check(if kind == 0 { "e4m3->f16" } else { "e5m2->f16" }, input.clone(), k_f16.into(), h.to_bits().into(), None);
            r.check(if kind == 0 { "e4m3->bf16" } else { "e5m2->bf16" }, input.clone(), k_bf16.into(), bf16::from_f32(f).to_bits().into(), None);
            r.check(if kind == 0 { "e4m3->f64" } else { "e5m2->f64" }, input, k_f64, d.to_bits(), None);
        }
    }
    for (i, &u) in f32s.iter().enumerate() {
        let x = f32::from_bits(u);
        let (k_bf, k_h, k_e4, k_e5) = t.from_f32[i];
        let input = format!("{u:#010x}");
        let is_nan = x.is_nan();
        r.check("f32->bf16", input.clone(), k_bf.into(), bf16::from_f32(x).to_bits().into(), nan(is_nan && k_bf == 0x7fff));
        r.check("f32->f16", input.clone(), k_h.into(), f16::from_f32(x).to_bits().into(), None);
        r.check("f32->e4m3", input.clone(), k_e4.into(), F8E4M3::from_f32(x).to_bits().into(), nan(is_nan && k_e4 == 0x7f));
        r.check("f32->e5m2", input, k_e5.into(), F8E5M2::from_f32(x).to_bits().into(), nan(is_nan && k_e5 == 0x7f));
    }
    for (i, &u) in f64s.iter().enumerate() {
        let x = f64::from_bits(u);
        let (k_bf, k_h, k_e4, k_e5) = t.from_f64[i];
        let input = format!("{u:#018x}");
        let (c_bf, c_h) = (bf16::from_f64(x).to_bits(), f16::from_f64(x).to_bits());
        let sticky =
            |k: u16, c: u16, bf: bool| (x.is_finite() && u & 0xffff_ffff != 0 && correctly_rounded(x, k, c, bf)).then_some(HalfIgnoresLowDoubleBits);
        let bf_why = if x.is_nan() { nan(k_bf == 0x7fff) } else { sticky(k_bf, c_bf, true) };
        r.check("f64->bf16", input.clone(), k_bf.into(), c_bf.into(), bf_why);
        r.check("f64->f16", input.clone(), k_h.into(), c_h.into(), sticky(k_h, c_h, false));
        r.check("f64->e4m3", input.clone(), k_e4.into(), F8E4M3::from_f64(x).to_bits().into(), None);
        r.check("f64->e5m2", input, k_e5.into(), F8E5M2::from_f64(x).to_bits().into(), None);
    }
    r
}

#[test]
fn the_shims_convert_as_candles_cpu_backend_but_for_documented_differences() {
    let (f32s, f64s) = inputs();
    let tables = kiln_tables(&f32s, &f64s);
    let r = compare(&tables, &f32s, &f64s);
    eprintln!("{} comparisons ({} floats, {} doubles); documented differences:", r.checked, f32s.len(), f64s.len());
    for ((what, why), n) in &r.documented {
        eprintln!("  {what}: {n} x {why:?}");
    }
    assert!(r.checked > 20_000_000, "too few comparisons: {}", r.checked);
    let shown: Vec<&String> = r.defects.iter().filter(|d| !d.is_empty()).collect();
    assert!(
        r.defects.is_empty(),
        "{} undocumented differences, first ones:\n  {}",
        r.defects.len(),
        shown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n  ")
    );
    // The documented differences are the ones expected, and only those.
    let kinds: Vec<_> = r.documented.keys().copied().collect();
    use Difference::*;
    for (what, why) in &kinds {
        let expected = match why {
            SignallingNanQuieted => *what == "bf16->f32",
            NanEncoding => what.ends_with("e4m3") || what.ends_with("e5m2") || *what == "f32->bf16" || *what == "f64->bf16",
            HalfIgnoresLowDoubleBits => *what == "f64->bf16" || *what == "f64->f16",
        };
        assert!(expected, "{what}: {why:?} is not a documented difference there");
    }
    // The sweep reaches saturation: finite floats past each format's overflow bound clamp to its largest finite value.
    let clamped = |bound: f32, max: u8, e5: bool| {
        f32s.iter()
            .zip(&tables.from_f32)
            .any(|(&u, k)| f32::from_bits(u).is_finite() && f32::from_bits(u) > bound && (if e5 { k.3 } else { k.2 }) == max)
    };
    assert!(clamped(464.0, 0x7e, false) && clamped(61440.0, 0x7b, true), "the sweep no longer reaches fp8 saturation");
    for must in [("f64->bf16", HalfIgnoresLowDoubleBits), ("f32->bf16", NanEncoding), ("bf16->f32", SignallingNanQuieted)] {
        assert!(r.documented.contains_key(&must), "the sweep no longer reaches {must:?}: {kinds:?}");
    }
}

/// The comparison itself fails on a wrong conversion: tables computed from the
/// crates (so every entry agrees), then one entry broken per kind.
#[test]
fn a_wrong_conversion_is_reported() {
    let f32s = vec![0x3f80_0000u32, 0x4000_0000, 0x7fc0_0000];
    let f64s: Vec<u64> = f32s.iter().map(|&u| (f32::from_bits(u) as f64).to_bits()).collect();
    let honest = || Tables {
        wide: (0..=0xffffu16)
            .map(|v| {
                let (b, h) = (bf16::from_bits(v), f16::from_bits(v));
                let e = |x: f32| (F8E4M3::from_f32(x).to_bits(), F8E5M2::from_f32(x).to_bits());
                ((b.to_f32().to_bits()), h.to_f32().to_bits(), e(b.to_f32()).0, e(b.to_f32()).1, e(h.to_f32()).0, e(h.to_f32()).1)
            })
            .collect(),
        fp8: [
            (0..=255u8)
                .map(F8E4M3::from_bits)
                .map(|x| (x.to_f32().to_bits(), x.to_f16().to_bits(), bf16::from_f32(x.to_f32()).to_bits(), x.to_f64().to_bits()))
                .collect(),
            (0..=255u8)
                .map(F8E5M2::from_bits)
                .map(|x| (x.to_f32().to_bits(), x.to_f16().to_bits(), bf16::from_f32(x.to_f32()).to_bits(), x.to_f64().to_bits()))
                .collect(),
        ],
        from_f32: f32s
            .iter()
            .map(|&u| f32::from_bits(u))
            .map(|x| (bf16::from_f32(x).to_bits(), f16::from_f32(x).to_bits(), F8E4M3::from_f32(x).to_bits(), F8E5M2::from_f32(x).to_bits()))
            .collect(),
        from_f64: f64s
            .iter()
            .map(|&u| f64::from_bits(u))
            .map(|x| (bf16::from_f64(x).to_bits(), f16::from_f64(x).to_bits(), F8E4M3::from_f64(x).to_bits(), F8E5M2::from_f64(x).to_bits()))
            .collect(),
    };
    assert!(compare(&honest(), &f32s, &f64s).defects.is_empty());
    type Break = fn(&mut Tables);
    let breaks: [(&str, Break); 5] = [
        ("bf16->f32(0x3f80)", |t| t.wide[0x3f80].0 ^= 1),
        ("e4m3->f16", |t| t.fp8[0][0x38].1 ^= 1),
        ("f32->e5m2(0x40000000)", |t| t.from_f32[1].3 ^= 1),
        // A rounding off by one ulp is not excused as a NaN or as half's double rounding.
        ("f64->bf16(0x3ff0000000000000)", |t| t.from_f64[0].0 += 1),
        ("f32->bf16(0x7fc00000)", |t| t.from_f32[2].0 = 0x7fc1),
    ];
    for (what, break_it) in breaks {
        let mut t = honest();
        break_it(&mut t);
        let r = compare(&t, &f32s, &f64s);
        assert_eq!(r.defects.len(), 1, "{what}: {:?}", r.defects);
        assert!(r.defects[0].starts_with(what), "{what}: {:?}", r.defects);
    }
}
