//! What `Module::ptx()` returns. Its text is the PTX, as upstream's was; the
//! conversion candle-core makes (`load_module(mdl.ptx().into())`) instead
//! hands the driver native code (see [`crate::image`]).
//!
//! candle compiles some kernels only for `__CUDA_ARCH__ >= 890` (fp8), so one
//! PTX level cannot serve every GPU: the crate carries several, and the text
//! is the highest level the first GPU can JIT, as upstream's build would
//! have made for the build machine's GPU.

use std::{fmt, ops::Deref, sync::OnceLock};

use crate::{image, payload, MODULE_NAMES, PTX_LEVELS};

/// Overrides the choice, e.g. `compute_80`; also makes the conversion into
/// cudarc's `Ptx` carry only that PTX (no SASS), to force and test the JIT.
pub const ENV: &str = "KILN_PTX_ARCH";

/// The PTX level named by [`ENV`], if it names one this crate carries.
pub(crate) fn forced_level() -> Option<&'static (u32, &'static str)> {
    static FORCED: OnceLock<Option<&'static (u32, &'static str)>> = OnceLock::new();
    *FORCED.get_or_init(|| {
        let wanted = std::env::var(ENV).ok()?;
        let found = PTX_LEVELS.iter().find(|(_, n)| *n == wanted);
        if found.is_none() {
            let carried: Vec<&str> = PTX_LEVELS.iter().map(|(_, n)| *n).collect();
            eprintln!("{}: {ENV}={wanted} is not a PTX level this crate carries ({}); ignored", env!("CARGO_PKG_NAME"), carried.join(", "));
        }
        found
    })
}

fn level() -> &'static str {
    static LEVEL: OnceLock<&'static str> = OnceLock::new();
    LEVEL.get_or_init(|| {
        if let Some((_, name)) = forced_level() {
            return name;
        }
        let cap = image::devices().first().copied().unwrap_or(0);
        let best = kiln_manifest::kiln_target::best_ptx(PTX_LEVELS.iter().map(|(l, _)| *l), cap);
        PTX_LEVELS.iter().find(|(l, _)| Some(*l) == best).unwrap_or(&PTX_LEVELS[0]).1
    })
}

/// The PTX text of module `index` at `level`, inflated and verified once.
pub(crate) fn text_at(index: usize, level: &str) -> &'static str {
    static TEXT: OnceLock<Vec<Vec<OnceLock<&'static str>>>> = OnceLock::new();
    let cells = TEXT.get_or_init(|| MODULE_NAMES.iter().map(|_| PTX_LEVELS.iter().map(|_| OnceLock::new()).collect()).collect());
    let at = PTX_LEVELS.iter().position(|(_, n)| *n == level).unwrap_or_else(|| panic!("{level} is not a PTX level of this crate"));
    cells[index][at].get_or_init(|| {
        let path = format!("cuda/{level}/{}.ptx", MODULE_NAMES[index]);
        let bytes = payload::verified(&path).unwrap_or_else(|e| panic!("{e}"));
        let text = String::from_utf8(bytes).unwrap_or_else(|_| panic!("{path} is not UTF-8"));
        Box::leak(text.into_boxed_str())
    })
}

/// The PTX level `Module::ptx()` uses in this process.
pub fn chosen_level() -> &'static str {
    level()
}

/// A kernel module's code, as `Module::ptx()` returns it.
///
/// As text (it dereferences to `str`: `&*ptx`, `.to_string()`, `format!`)
/// it is the module's PTX, exactly what upstream's `ptx()` returned. Converted
/// into `cudarc::nvrtc::Ptx` (feature `cudarc`, on in the candle-kernels
/// drop-in), which is what candle-core does with it, it becomes a fatbinary
/// with the SASS this crate carries for this machine's GPUs, so that the
/// driver loads native code instead of JIT-compiling PTX (docs: the crate README).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ModulePtx {
    pub(crate) index: usize,
}

impl ModulePtx {
    /// The PTX text (what dereferencing gives).
    pub fn as_str(&self) -> &'static str {
        text_at(self.index, level())
    }

    /// The image the cudarc conversion hands to `cuModuleLoadData`: a
    /// fatbinary with the carried SASS for this process's GPUs (PTX only for
    /// a GPU without SASS, or when `KILN_PTX_ARCH` asks for it). Panics with
    /// a message naming the module, the devices and what is carried when no
    /// GPU of this process can use anything the crate carries.
    pub fn image(&self) -> &'static [u8] {
        image::for_module(self.index)
    }
}

impl Deref for ModulePtx {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for ModulePtx {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for ModulePtx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for ModulePtx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ModulePtx({})", MODULE_NAMES[self.index])
    }
}

impl PartialEq<str> for ModulePtx {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ModulePtx {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

// Not `From<ModulePtx> for String`: cudarc's `impl<S: Into<String>> From<S>
// for Ptx` would then apply too, and the two impls would collide.
#[cfg(feature = "cudarc")]
impl From<ModulePtx> for cudarc::nvrtc::Ptx {
    fn from(p: ModulePtx) -> Self {
        cudarc::nvrtc::Ptx::from_binary(p.image().to_vec())
    }
}
