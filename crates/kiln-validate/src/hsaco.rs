//! AMDGPU code objects (HSACO): ELF header checks and the per-kernel
//! resource metadata (registers, scratch, spills) from the `AMDGPU` note.

use anyhow::{bail, Context, Result};
use object::{
    elf,
    read::elf::{ElfFile64, FileHeader, SectionHeader},
    Endianness, Object, ObjectSymbol,
};
use serde::{Deserialize, Serialize};

/// `EI_OSABI` of AMDGPU HSA code objects.
const ELFOSABI_AMDGPU_HSA: u8 = 64;
/// The note type holding the msgpack metadata (code object v3+).
const NT_AMDGPU_METADATA: u32 = 32;
const EF_AMDGPU_MACH: u32 = 0x0ff;
const EF_AMDGPU_FEATURE_XNACK: u32 = 0x300;
const EF_AMDGPU_FEATURE_SRAMECC: u32 = 0xc00;
/// Code object v6+: the generic version of a generic target's object, in the
/// top byte of `e_flags` (0 for a concrete processor; LLVM's `ELF.h`
/// `EF_AMDGPU_GENERIC_VERSION`, which ROCr compares with the version its
/// ISA registry lists, 1 for every family today).
const EF_AMDGPU_GENERIC_VERSION_OFFSET: u32 = 24;

/// A target feature's setting in `e_flags` (v4+ encoding).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Feature {
    Unsupported,
    Any,
    Off,
    On,
}

impl Feature {
    fn from_bits(bits: u32) -> Feature {
        match bits {
            0 => Feature::Unsupported,
            1 => Feature::Any,
            2 => Feature::Off,
            _ => Feature::On,
        }
    }
}

/// What one kernel needs from the hardware: the manifest's type, which
/// [`read`] fills from the code object's metadata.
pub use kiln_manifest::KernelResources;

#[derive(Clone, Debug)]
pub struct Hsaco {
    pub mach: u32,
    /// `EI_ABIVERSION`: code object v4 is 2, v5 is 3.
    pub abi_version: u8,
    pub xnack: Feature,
    pub sramecc: Feature,
    /// The generic version (`e_flags` >> 24): at least 1 in a generic
    /// target's object, 0 in a concrete processor's.
    pub generic_version: u8,
    /// `amdhsa.target`, e.g. `amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-`.
    pub target: String,
    /// Sorted by name.
    pub kernels: Vec<KernelResources>,
}

impl Hsaco {
    pub fn kernel_names(&self) -> Vec<String> {
        self.kernels.iter().map(|k| k.name.clone()).collect()
    }
}

/// Code object version as `EI_ABIVERSION` encodes it.
pub fn abi_version_of(code_object_version: u32) -> u8 {
    (code_object_version - 2) as u8
}

pub fn read(bytes: &[u8]) -> Result<Hsaco> {
    let file = ElfFile64::<Endianness>::parse(bytes).context("not a 64-bit ELF file")?;
    let header = file.elf_header();
    let endian = file.endian();
    let ident = header.e_ident();
    if header.e_machine(endian) != elf::EM_AMDGPU {
        bail!("ELF machine is {}, not AMDGPU ({})", header.e_machine(endian), elf::EM_AMDGPU);
    }
    if ident.os_abi != ELFOSABI_AMDGPU_HSA {
        bail!("ELF OS/ABI is {}, not AMDGPU HSA ({ELFOSABI_AMDGPU_HSA})", ident.os_abi);
    }
    let flags = header.e_flags(endian);

    let mut metadata = None;
    for section in header.sections(endian, bytes)?.iter() {
        let Some(mut notes) = section.notes(endian, bytes)? else { continue };
        while let Some(note) = notes.next()? {
            if note.name() == b"AMDGPU" && note.n_type(endian) == NT_AMDGPU_METADATA {
                let mut desc = note.desc();
                metadata = Some(rmpv::decode::read_value(&mut desc).context("the AMDGPU metadata note is not msgpack")?);
            }
        }
    }
    let metadata = metadata.context("no AMDGPU metadata note (code object v3 or later expected)")?;
    let get =
        |map: &rmpv::Value, key: &str| -> Option<rmpv::Value> { map.as_map()?.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v.clone()) };
    let target = get(&metadata, "amdhsa.target").and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
    let mut kernels = Vec::new();
    for k in get(&metadata, "amdhsa.kernels").and_then(|v| v.as_array().cloned()).context("metadata lists no amdhsa.kernels")? {
        let n = |key: &str| get(&k, key).and_then(|v| v.as_u64()).unwrap_or(0);
        let name = get(&k, ".name").and_then(|v| v.as_str().map(String::from)).context("a kernel without .name")?;
        kernels.push(KernelResources {
            name,
            vgprs: n(".vgpr_count"),
            sgprs: n(".sgpr_count"),
            vgpr_spills: n(".vgpr_spill_count"),
            sgpr_spills: n(".sgpr_spill_count"),
            scratch_bytes: n(".private_segment_fixed_size"),
            lds_bytes: n(".group_segment_fixed_size"),
            max_flat_workgroup_size: n(".max_flat_workgroup_size"),
            wavefront_size: n(".wavefront_size"),
        });
    }
    kernels.sort_by(|a, b| a.name.cmp(&b.name));

    // The metadata and the symbol table must agree on what is launchable.
    let mut descriptors: Vec<String> = file.symbols().filter_map(|s| s.name().ok().and_then(|n| n.strip_suffix(".kd")).map(String::from)).collect();
    descriptors.sort();
    descriptors.dedup();
    let names: Vec<String> = kernels.iter().map(|k| k.name.clone()).collect();
    if descriptors != names {
        bail!("kernel descriptors (.kd symbols) and metadata disagree: {} vs {} kernels", descriptors.len(), names.len());
    }

    Ok(Hsaco {
        mach: flags & EF_AMDGPU_MACH,
        abi_version: ident.abi_version,
        xnack: Feature::from_bits((flags & EF_AMDGPU_FEATURE_XNACK) >> 8),
        sramecc: Feature::from_bits((flags & EF_AMDGPU_FEATURE_SRAMECC) >> 10),
        generic_version: (flags >> EF_AMDGPU_GENERIC_VERSION_OFFSET) as u8,
        target,
        kernels,
    })
}

/// Reads and checks that the code object is for `arch` (`gfx90a`, with its
/// `EF_AMDGPU_MACH` value `mach`) and the pinned code object version.
pub fn check(bytes: &[u8], arch: &str, mach: u32, code_object_version: u32) -> Result<Hsaco> {
    let h = read(bytes)?;
    if h.mach != mach {
        bail!("e_flags name machine 0x{:02x}, but {arch} is 0x{mach:02x}", h.mach);
    }
    let want = abi_version_of(code_object_version);
    if h.abi_version != want {
        bail!("EI_ABIVERSION is {} but code object v{code_object_version} ({want}) was asked for", h.abi_version);
    }
    if !h.target.contains(&format!("--{arch}")) {
        bail!("metadata target `{}` is not for {arch}", h.target);
    }
    let generic = kiln_manifest::kiln_target::gfx(arch).is_some_and(|g| g.is_generic());
    match (generic, h.generic_version) {
        (true, 0) => bail!("{arch} is a generic target, but the code object's e_flags carry no generic version (ROCm refuses it)"),
        (false, v) if v != 0 => bail!("e_flags carry generic version {v}, but {arch} is a concrete processor"),
        _ => {}
    }
    if h.kernels.is_empty() {
        bail!("the code object holds no kernels");
    }
    Ok(h)
}
