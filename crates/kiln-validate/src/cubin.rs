//! CUDA cubins: ELF for `EM_CUDA`, the sm in `e_flags`, kernels as entry symbols.

use anyhow::{bail, Context, Result};
use object::{
    elf,
    read::elf::{ElfFile64, FileHeader, Sym},
    Endianness,
};

/// `st_other` bit that marks a kernel entry point.
const STO_CUDA_ENTRY: u8 = 0x10;

#[derive(Clone, Debug)]
pub struct Cubin {
    /// The SASS arch, e.g. 90.
    pub sm: u32,
    pub kernels: Vec<String>,
}

pub fn read(bytes: &[u8]) -> Result<Cubin> {
    let file = ElfFile64::<Endianness>::parse(bytes).context("not a 64-bit ELF file")?;
    let header = file.elf_header();
    let endian = file.endian();
    if header.e_machine(endian) != elf::EM_CUDA {
        bail!("ELF machine is {}, not CUDA ({})", header.e_machine(endian), elf::EM_CUDA);
    }
    let sm = sm_of(header.e_ident().os_abi, header.e_flags(endian))?;
    let symbols = file.elf_symbol_table();
    let strings = symbols.strings();
    let mut kernels: Vec<String> = symbols
        .iter()
        .filter(|s| s.st_type() == elf::STT_FUNC && s.st_other() & STO_CUDA_ENTRY != 0)
        .map(|s| Ok(String::from_utf8_lossy(s.name(endian, strings)?).into_owned()))
        .collect::<Result<_>>()?;
    kernels.sort();
    Ok(Cubin { sm, kernels })
}

/// The ELF OS ABI of cubins up to sm_90 (`ELFOSABI_CUDA`): the sm is the
/// low byte of `e_flags`, the PTX level it came from the third.
const OSABI_CUDA: u8 = 0x33;
/// The OS ABI of Blackwell-era cubins (sm_100 and later, ptxas 12.8+): the sm
/// is the second byte of `e_flags`; bit 3 marks arch-specific code (`sm_100a`),
/// which runs on that exact sm only.
const OSABI_CUDA_V2: u8 = 0x41;
const ARCH_SPECIFIC_V2: u32 = 0x08;

fn sm_of(osabi: u8, flags: u32) -> Result<u32> {
    match osabi {
        OSABI_CUDA => Ok(flags & 0xff),
        OSABI_CUDA_V2 if flags & ARCH_SPECIFIC_V2 != 0 => {
            bail!("e_flags 0x{flags:x} mark sm_{}a code, which runs on that one sm only", (flags >> 8) & 0xff)
        }
        OSABI_CUDA_V2 => Ok((flags >> 8) & 0xff),
        other => bail!("ELF OS ABI 0x{other:x} is no cubin layout kiln knows (0x{OSABI_CUDA:x} or 0x{OSABI_CUDA_V2:x})"),
    }
}

pub fn check(bytes: &[u8], sm: u32) -> Result<Cubin> {
    let c = check_sm(bytes, sm)?;
    if c.kernels.is_empty() {
        bail!("the cubin holds no kernel entries");
    }
    Ok(c)
}

/// A cubin for `sm`, kernels or not: a static library's file may hold only
/// host code (a C entry point calling another file's launcher).
pub fn check_sm(bytes: &[u8], sm: u32) -> Result<Cubin> {
    let c = read(bytes)?;
    if c.sm != sm {
        bail!("e_flags say sm_{}, but sm_{sm} was asked for", c.sm);
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_e_flags_layouts_name_the_sm() {
        // ptxas 12.9's own headers: sm_90 (from compute_89 PTX), sm_100, sm_120, sm_100a.
        assert_eq!(sm_of(0x33, 0x59055a).unwrap(), 90);
        assert_eq!(sm_of(0x41, 0x6006402).unwrap(), 100);
        assert_eq!(sm_of(0x41, 0x6007802).unwrap(), 120);
        assert!(sm_of(0x41, 0x600640a).unwrap_err().to_string().contains("sm_100a"));
        assert!(sm_of(0x00, 0x5a).is_err());
    }
}
