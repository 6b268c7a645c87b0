//! What every kernel test uses: element types, random inputs, layouts, the
//! device and module store, launching, poisoned outputs and comparison.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use anyhow::{anyhow, bail, Context, Result};
use candle_core::{Device as Cpu, Tensor, WithDType};
use half::{bf16, f16};
use kiln_loader::{Backend, Device, DeviceBuffer, DistDir, KernelArgs, LaunchConfig, ModuleStore, SelectOptions, StoreOptions};

// ---------------------------------------------------------------- element types

/// A dtype candle's kernels are instantiated for, as the test sees it.
pub trait Elem: WithDType + Copy + Send + Sync + std::fmt::Debug + 'static {
    /// The kernel-name suffix candle uses (`kernel_name::<T>`: `DType::as_str`).
    const NAME: &'static str;
    const FLOAT: bool;
    /// What an output is filled with before a launch, so that an element the
    /// kernel does not write cannot pass: NaN for floats, 0xAB bytes for integers.
    fn poison() -> Self;
    /// One unit in the last place around 1.0, the scale of the default tolerance.
    fn tol() -> Tol;
    /// A different value of the same type, for integer poison that happens to
    /// be the expected value and for sabotaging a reference.
    fn flip(self) -> Self;
}

/// |got - want| <= atol + rtol * |want|.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tol {
    pub atol: f64,
    pub rtol: f64,
}

impl Tol {
    pub const EXACT: Tol = Tol { atol: 0.0, rtol: 0.0 };

    /// For results that went through `k` roundings in the kernel's own precision
    /// (bf16 gelu rounds after every step; a reduction over n terms).
    pub fn scale(self, k: f64) -> Tol {
        Tol { atol: self.atol * k, rtol: self.rtol * k }
    }
}

macro_rules! float_elem {
    ($t:ty, $name:literal, $nan:expr, $atol:expr, $rtol:expr) => {
        impl Elem for $t {
            const NAME: &'static str = $name;
            const FLOAT: bool = true;
            fn poison() -> Self {
                $nan
            }
            fn tol() -> Tol {
                Tol { atol: $atol, rtol: $rtol }
            }
            fn flip(self) -> Self {
                <$t>::from_f64(self.to_f64() * -2.0 + 1.0)
            }
        }
    };
}

// Two units in the last place: f32 and f64 libm and CUDA's differ by a few ulp
// on transcendentals; f16 has 10 mantissa bits (2^-10 ≈ 9.8e-4), bf16 has 7
// (2^-7 ≈ 7.8e-3).
float_elem!(f32, "f32", f32::NAN, 1e-6, 1e-5);
float_elem!(f64, "f64", f64::NAN, 1e-12, 1e-11);
float_elem!(f16, "f16", f16::NAN, 1e-3, 2e-3);
float_elem!(bf16, "bf16", bf16::NAN, 1e-2, 1.6e-2);

macro_rules! int_elem {
    ($t:ty, $name:literal, $poison:expr) => {
        impl Elem for $t {
            const NAME: &'static str = $name;
            const FLOAT: bool = false;
            fn poison() -> Self {
                $poison
            }
            fn tol() -> Tol {
                Tol::EXACT
            }
            fn flip(self) -> Self {
                !self
            }
        }
    };
}

int_elem!(u8, "u8", 0xAB);
int_elem!(u32, "u32", 0xABAB_ABAB);
int_elem!(i64, "i64", 0xABAB_ABAB_ABAB_ABABu64 as i64);

/// The bytes of a slice of candle element types (all plain numbers: f16 and
/// bf16 are a u16 each).
pub fn bytes<E: Elem>(v: &[E]) -> &[u8] {
    // SAFETY: every `Elem` is a padding-free number type (u8, u32, i64, f16, bf16, f32, f64).
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

pub fn from_bytes<E: Elem>(b: &[u8]) -> Vec<E> {
    let n = b.len() / std::mem::size_of::<E>();
    let mut v = Vec::<E>::with_capacity(n);
    // SAFETY: as above; every bit pattern is a value, and `n` elements fit in `b`.
    unsafe {
        std::ptr::copy_nonoverlapping(b.as_ptr(), v.as_mut_ptr().cast::<u8>(), n * std::mem::size_of::<E>());
        v.set_len(n);
    }
    v
}

// ---------------------------------------------------------------- randomness

/// splitmix64: small, fast, and the same sequence on every machine for a seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }

    /// Uniform integer in [lo, hi].
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % ((hi - lo + 1) as u64)) as i64
    }

    /// `n` values of `E` in [lo, hi]: floats uniform (then rounded to `E`, so
    /// that the device and the reference see the same numbers), integers uniform.
    pub fn vec<E: Elem>(&mut self, n: usize, lo: f64, hi: f64) -> Vec<E> {
        (0..n).map(|_| if E::FLOAT { E::from_f64(self.uniform(lo, hi)) } else { E::from_f64(self.int(lo as i64, hi as i64) as f64) }).collect()
    }
}

/// The seed for this process: `KILN_TEST_SEED`, or fresh from the clock.
pub fn base_seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| match std::env::var(kiln_kernel_tests::TEST_SEED_ENV) {
        Ok(s) => s.trim().parse().unwrap_or_else(|_| panic!("{}={s:?} is not a u64", kiln_kernel_tests::TEST_SEED_ENV)),
        Err(_) => {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            (t.as_nanos() as u64) ^ ((std::process::id() as u64) << 32)
        }
    })
}

/// Each test's own stream, from the process seed and its name, so that
/// replaying one test with the printed seed gives it the same inputs.
pub fn test_seed(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    base_seed() ^ h
}

// ---------------------------------------------------------------- layouts

/// How an input is laid out in its storage: the views candle produces and
/// passes to its kernels with their real strides and offsets.
#[derive(Clone, Debug)]
pub enum View {
    /// Contiguous, this shape.
    Contig(Vec<usize>),
    /// A (rows, cols) view of a contiguous (cols, rows) storage: `.t()`.
    Transposed(usize, usize),
    /// `narrow(dim, start, len)` of a contiguous storage of shape `base`:
    /// an offset, and non-contiguous unless `dim` is the first.
    Narrow { base: Vec<usize>, dim: usize, start: usize, len: usize },
    /// `permute(perm)` of a contiguous storage of shape `base`.
    Permute { base: Vec<usize>, perm: Vec<usize> },
    /// `broadcast_as(to)` of a contiguous storage of shape `from` (stride 0 dims).
    Broadcast { from: Vec<usize>, to: Vec<usize> },
}

impl View {
    pub fn base_shape(&self) -> Vec<usize> {
        match self {
            View::Contig(s) => s.clone(),
            View::Transposed(r, c) => vec![*c, *r],
            View::Narrow { base, .. } | View::Permute { base, .. } => base.clone(),
            View::Broadcast { from, .. } => from.clone(),
        }
    }

    pub fn base_len(&self) -> usize {
        self.base_shape().iter().product()
    }

    pub fn apply(&self, base: &Tensor) -> Result<Tensor> {
        Ok(match self {
            View::Contig(_) => base.clone(),
            View::Transposed(..) => base.t()?,
            View::Narrow { dim, start, len, .. } => base.narrow(*dim, *start, *len)?,
            View::Permute { perm, .. } => base.permute(perm.as_slice())?,
            View::Broadcast { to, .. } => base.broadcast_as(to.as_slice())?,
        })
    }

    /// The shape of the view.
    pub fn shape(&self) -> Vec<usize> {
        match self {
            View::Contig(s) => s.clone(),
            View::Transposed(r, c) => vec![*r, *c],
            View::Narrow { base, dim, len, .. } => {
                let mut s = base.clone();
                s[*dim] = *len;
                s
            }
            View::Permute { base, perm } => perm.iter().map(|&p| base[p]).collect(),
            View::Broadcast { to, .. } => to.clone(),
        }
    }

    /// A short name for test names.
    pub fn tag(&self) -> String {
        let dims = |s: &[usize]| s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x");
        match self {
            View::Contig(s) => format!("contig_{}", dims(s)),
            View::Transposed(r, c) => format!("transposed_{r}x{c}"),
            View::Narrow { base, dim, start, len } => format!("narrow_{}_d{dim}_{start}+{len}", dims(base)),
            View::Permute { base, perm } => format!("permute_{}_{}", dims(base), perm.iter().map(|p| p.to_string()).collect::<String>()),
            View::Broadcast { from, to } => format!("broadcast_{}_to_{}", dims(from), dims(to)),
        }
    }
}

/// A random input tensor of `E` in `view`'s layout: the contiguous storage the
/// device gets, and the candle view of it the reference is computed on.
pub struct Input<E: Elem> {
    pub storage: Vec<E>,
    pub tensor: Tensor,
}

impl<E: Elem> Input<E> {
    pub fn new(cx: &Ctx, view: &View, lo: f64, hi: f64) -> Result<Input<E>> {
        let storage = cx.rng().vec::<E>(view.base_len(), lo, hi);
        Input::from_storage(storage, view)
    }

    pub fn from_storage(storage: Vec<E>, view: &View) -> Result<Input<E>> {
        let base = Tensor::from_vec(storage.clone(), view.base_shape(), &Cpu::Cpu)?;
        let tensor = view.apply(&base)?;
        Ok(Input { storage, tensor })
    }

    pub fn dims(&self) -> Vec<usize> {
        self.tensor.layout().dims().to_vec()
    }

    pub fn strides(&self) -> Vec<usize> {
        self.tensor.layout().stride().to_vec()
    }

    pub fn offset(&self) -> usize {
        self.tensor.layout().start_offset()
    }

    pub fn is_contiguous(&self) -> bool {
        self.tensor.layout().is_contiguous()
    }

    pub fn elem_count(&self) -> usize {
        self.tensor.elem_count()
    }
}

/// A candle tensor's values in logical (row-major) order.
pub fn values<E: Elem>(t: &Tensor) -> Result<Vec<E>> {
    Ok(t.flatten_all()?.to_vec1::<E>()?)
}

// ---------------------------------------------------------------- device and modules

struct Shared {
    device: Device,
    store: ModuleStore<DistDir>,
    ptx_store: ModuleStore<DistDir>,
}

/// The dist folder: `KILN_DIST_DIR`, else this checkout's target/dist (found
/// from the package directory nextest gives the test at run time, which
/// follows `--workspace-remap`; the compile-time one is the last resort).
pub fn dist_dir() -> PathBuf {
    if let Some(d) = std::env::var_os(kiln_loader::DIST_DIR_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir.join("../../target/dist")
}

fn open_shared(backend: Backend, ordinal: usize) -> Result<Shared, String> {
    let dist = dist_dir();
    if !dist.join("manifest.json").is_file() {
        return Err(format!(
            "no kiln dist folder at {} (no manifest.json): run `cargo xtask dist`, or set {} to one",
            dist.display(),
            kiln_loader::DIST_DIR_ENV
        ));
    }
    let open = || DistDir::open(&dist).map_err(|e| format!("opening the dist folder {}: {e}", dist.display()));
    let device = Device::open(backend, ordinal).map_err(|e| format!("opening {} device {ordinal}: {e}", backend.as_str()))?;
    let mut options = StoreOptions::from_env();
    // A generic target's leg (issue 36) tests its family's generic objects on the member it runs on.
    options.select.hip_prefer_generic = kiln_kernel_tests::gate::generic_leg();
    let store = ModuleStore::with_options(open()?, options);
    let mut ptx = StoreOptions::from_env();
    ptx.select = SelectOptions { force_ptx: true, ..ptx.select };
    let ptx_store = ModuleStore::with_options(open()?, ptx);
    Ok(Shared { device, store, ptx_store })
}

fn shared(backend: Backend, ordinal: usize) -> Result<&'static Shared> {
    static CUDA: OnceLock<Result<Shared, String>> = OnceLock::new();
    static HIP: OnceLock<Result<Shared, String>> = OnceLock::new();
    let cell = match backend {
        Backend::Cuda => &CUDA,
        Backend::Hip => &HIP,
    };
    cell.get_or_init(|| open_shared(backend, ordinal)).as_ref().map_err(|e| anyhow!("{e}"))
}

/// Deliberate breakage, to show that the tests can fail (docs/gpu-tests.md):
/// `launch` skips every launch, `reference` changes one expected value.
fn sabotage() -> Option<&'static str> {
    static S: OnceLock<Option<String>> = OnceLock::new();
    S.get_or_init(|| std::env::var("KILN_TEST_SABOTAGE").ok().filter(|s| !s.is_empty())).as_deref()
}

/// A device buffer, or in a dry run (`KILN_TEST_DRY=1`) just its size.
pub struct Buf {
    dev: Option<DeviceBuffer>,
    len: usize,
}

impl Buf {
    /// The address kernels see; in a dry run a made-up, never-dereferenced one.
    pub fn device_ptr(&self) -> u64 {
        self.dev.as_ref().map_or(0xD0_0000_0000, |d| d.device_ptr())
    }
}

/// `KernelArgs::push_buffer` for [`Buf`].
pub trait ArgsExt {
    fn buf(&mut self, b: &Buf) -> &mut Self;
}

impl ArgsExt for KernelArgs {
    fn buf(&mut self, b: &Buf) -> &mut Self {
        self.push(b.device_ptr())
    }
}

/// A developer's check without a GPU (`KILN_TEST_DRY=1 cargo test -p
/// kiln-kernel-tests --test kernels`): every test computes its inputs and its
/// candle reference and checks that each kernel it would launch is in the dist
/// manifest for `KILN_TEST_DRY_ARCH` (default sm_90), then fails with "dry run"
/// — a dry run proves the test code runs, never that a kernel is right.
pub fn dry_run() -> bool {
    std::env::var("KILN_TEST_DRY").is_ok_and(|v| v == "1")
}

fn dry_kernels(module: &str) -> Result<&'static std::collections::BTreeMap<String, Vec<String>>> {
    static K: OnceLock<Result<std::collections::BTreeMap<String, Vec<String>>, String>> = OnceLock::new();
    let _ = module;
    K.get_or_init(|| {
        let arch = std::env::var("KILN_TEST_DRY_ARCH").unwrap_or_else(|_| "sm_90".into());
        let text = std::fs::read_to_string(dist_dir().join("manifest.json")).map_err(|e| format!("{}: {e}", dist_dir().display()))?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        let mut out = std::collections::BTreeMap::new();
        for a in v["artifacts"].as_array().into_iter().flatten() {
            if a["arch"] == arch.as_str() {
                let ks = a["kernels"].as_array().into_iter().flatten().filter_map(|k| k.as_str().map(String::from)).collect();
                out.insert(a["module"].as_str().unwrap_or_default().to_string(), ks);
            }
        }
        Ok(out)
    })
    .as_ref()
    .map_err(|e| anyhow!("dry run: {e}"))
}

/// Everything a test body needs.
pub struct Ctx {
    shared: Option<&'static Shared>,
    /// Load through the PTX path (CUDA: the driver JIT-compiles compute_XX PTX)
    /// instead of the exact cubin.
    pub ptx: bool,
    rng: std::cell::RefCell<Rng>,
}

impl Ctx {
    pub fn new(name: &str, backend: Backend, ordinal: usize, ptx: bool) -> Result<Ctx> {
        let seed = test_seed(name);
        eprintln!("{name}: seed {} ({}={} replays this process's inputs)", seed, kiln_kernel_tests::TEST_SEED_ENV, base_seed());
        let shared = if dry_run() { None } else { Some(shared(backend, ordinal)?) };
        Ok(Ctx { shared, ptx, rng: std::cell::RefCell::new(Rng::new(seed)) })
    }

    /// A dry run: outputs are never produced, so structural checks on them are skipped too.
    pub fn is_dry(&self) -> bool {
        self.shared.is_none()
    }

    fn shared(&self) -> &'static Shared {
        self.shared.expect("a dry run never reaches the device")
    }

    pub fn rng(&self) -> std::cell::RefMut<'_, Rng> {
        self.rng.borrow_mut()
    }

    fn store(&self) -> &ModuleStore<DistDir> {
        if self.ptx {
            &self.shared().ptx_store
        } else {
            &self.shared().store
        }
    }

    pub fn upload<E: Elem>(&self, v: &[E]) -> Result<Buf> {
        let len = std::mem::size_of_val(v);
        match self.shared {
            None => Ok(Buf { dev: None, len }),
            Some(s) => Ok(Buf { dev: Some(s.device.upload::<u8>(bytes(v))?), len }),
        }
    }

    /// The dims-and-strides buffer candle's kernels take (`info`, `size_t*`;
    /// as i64, which has the bytes of a 64-bit usize).
    pub fn info(&self, parts: &[&[usize]]) -> Result<Buf> {
        self.upload(&parts.concat().iter().map(|&u| u as u64 as i64).collect::<Vec<i64>>())
    }

    /// An output buffer for `want.len()` elements, poisoned: every element is
    /// `E::poison()`, or its complement where that is the expected value, so
    /// that no element the kernel fails to write can match.
    pub fn poisoned<E: Elem>(&self, want: &[E]) -> Result<Buf> {
        let p: Vec<E> = want.iter().map(|w| if bytes(&[*w]) == bytes(&[E::poison()]) { E::poison().flip() } else { E::poison() }).collect();
        self.upload(&p)
    }

    pub fn download<E: Elem>(&self, b: &Buf) -> Result<Vec<E>> {
        match &b.dev {
            None => Ok(from_bytes(&vec![0xABu8; b.len])),
            Some(d) => Ok(from_bytes(&d.to_vec::<u8>()?)),
        }
    }

    /// Launches `module`'s `kernel` and waits for it.
    pub fn launch(&self, module: &str, kernel: &str, cfg: LaunchConfig, args: &mut KernelArgs) -> Result<()> {
        if self.shared.is_none() {
            let kernels = dry_kernels(module)?;
            let found = kernels.get(module).is_some_and(|ks| ks.iter().any(|k| k == kernel));
            if !found {
                bail!("dry run: kernel `{kernel}` is not in module `{module}` of the dist manifest");
            }
            return Ok(());
        }
        let s = self.shared();
        let m = self.store().get(&s.device, module).with_context(|| format!("loading module `{module}`"))?;
        let f = m.function(kernel).with_context(|| format!("kernel `{kernel}` of {}", m.artifact().path))?;
        if sabotage() == Some("launch") {
            return Ok(());
        }
        // SAFETY: every test passes the arguments candle passes to this kernel
        // (same order and types, read from candle-core 0.11.1's CUDA backend),
        // with buffers sized for the launch, alive until the synchronize below.
        unsafe { f.launch(&cfg, args) }.with_context(|| format!("launching `{kernel}`"))?;
        s.device.synchronize().with_context(|| format!("running `{kernel}`"))?;
        Ok(())
    }

    /// Compares a kernel's output with candle's, element by element.
    pub fn check<E: Elem>(&self, what: &str, got: &[E], want: &[E], tol: Tol) -> Result<()> {
        if self.shared.is_none() {
            if got.len() != want.len() || want.is_empty() {
                bail!("dry run: {what}: output of {} elements for {} expected", got.len(), want.len());
            }
            return Ok(());
        }
        let mut want = want.to_vec();
        if sabotage() == Some("reference") && !want.is_empty() {
            let i = want.len() / 2;
            want[i] = want[i].flip();
        }
        compare(what, got, &want, tol)
    }
}

/// One launch config per element, 1024 threads per block, as cudarc's
/// `LaunchConfig::for_num_elems` (what candle uses) makes it.
pub fn for_num_elems(n: usize) -> LaunchConfig {
    LaunchConfig::for_elements(n as u32, 1024)
}

pub fn ptr_at<E: Elem>(b: &Buf, offset: usize) -> u64 {
    b.device_ptr() + (offset * std::mem::size_of::<E>()) as u64
}

pub fn push_elem<E: Elem>(args: &mut KernelArgs, v: E) {
    args.push_bytes(bytes(&[v]));
}

/// got vs want within `tol` (NaN only matches NaN, infinities only themselves).
pub fn compare<E: Elem>(what: &str, got: &[E], want: &[E], tol: Tol) -> Result<()> {
    if got.len() != want.len() {
        bail!("{what}: {} elements, expected {}", got.len(), want.len());
    }
    if got.is_empty() {
        bail!("{what}: nothing to compare (a test must check something)");
    }
    let mut bad = Vec::new();
    let mut count = 0usize;
    let mut worst = 0f64;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (g.to_f64(), w.to_f64());
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() || g.is_nan() || g.is_infinite() {
            g == w
        } else {
            let err = (g - w).abs();
            worst = worst.max(err / (tol.atol + tol.rtol * w.abs()).max(f64::MIN_POSITIVE));
            err <= tol.atol + tol.rtol * w.abs()
        };
        if !ok {
            count += 1;
            if bad.len() < 6 {
                bad.push(format!("[{i}] got {g} want {w}"));
            }
        }
    }
    if count > 0 {
        bail!("{what}: {count} of {} elements mismatch (tolerance atol {:e} + rtol {:e}·|want|): {}", got.len(), tol.atol, tol.rtol, bad.join(", "));
    }
    let _ = worst;
    Ok(())
}

/// What a test case runs on a device context.
pub type Body = Arc<dyn Fn(&Ctx) -> Result<()> + Send + Sync>;

/// A test case: a module, a name within it, and its body.
pub struct Case {
    pub module: &'static str,
    pub name: String,
    /// CUDA only: the PTX path (skipped on HIP, which has no PTX).
    pub cuda_only: bool,
    pub body: Body,
}

pub fn case(module: &'static str, name: impl Into<String>, body: impl Fn(&Ctx) -> Result<()> + Send + Sync + 'static) -> Case {
    Case { module, name: name.into(), cuda_only: false, body: Arc::new(body) }
}

/// The layouts every elementwise kernel is run on: contiguous with an odd
/// length (one full 1024-thread block and a 3-element tail), a transpose, and
/// a narrowed 3-D view (an offset and a gap between rows). None of the element
/// counts (1027, 1073, 3663) is a multiple of a block size.
pub fn views() -> Vec<View> {
    vec![View::Contig(vec![1027]), View::Transposed(37, 29), View::Narrow { base: vec![3, 37, 40], dim: 2, start: 3, len: 33 }]
}

/// Launches an elementwise kernel the way candle does (`numel, num_dims,
/// info, [pre], inp, out, [post]`, info null when the input is contiguous),
/// with a poisoned output, and returns the output.
pub fn launch_map<E: Elem, O: Elem>(
    cx: &Ctx,
    module: &str,
    kernel: &str,
    x: &Input<E>,
    want: &[O],
    pre: impl Fn(&mut KernelArgs),
    post: impl Fn(&mut KernelArgs),
) -> Result<Vec<O>> {
    let el = x.elem_count();
    let inp = cx.upload(&x.storage)?;
    let out = cx.poisoned(want)?;
    let info = if x.is_contiguous() { None } else { Some(cx.info(&[&x.dims(), &x.strides()])?) };
    let mut a = KernelArgs::new();
    a.push(el).push(x.dims().len()).push(info.as_ref().map_or(0u64, |b| b.device_ptr()));
    pre(&mut a);
    a.push(ptr_at::<E>(&inp, x.offset())).buf(&out);
    post(&mut a);
    cx.launch(module, kernel, for_num_elems(el), &mut a)?;
    cx.download(&out)
}

/// `what` for messages: the kernel and the input layout.
pub fn what(kernel: &str, view: &View) -> String {
    format!("{kernel} on {}", view.tag())
}
