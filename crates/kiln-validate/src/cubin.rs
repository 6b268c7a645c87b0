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
    let sm = header.e_flags(endian) & 0xff;
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

pub fn check(bytes: &[u8], sm: u32) -> Result<Cubin> {
    let c = read(bytes)?;
    if c.sm != sm {
        bail!("e_flags say sm_{}, but sm_{sm} was asked for", c.sm);
    }
    if c.kernels.is_empty() {
        bail!("the cubin holds no kernel entries");
    }
    Ok(c)
}
