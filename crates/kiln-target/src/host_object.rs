//! A per-target static library's host objects (docs/static-library.md): the
//! one statement of what binds them to the crate's own CUDA runtime. The
//! build writes it (kiln-build's host-object job), validation checks it
//! (kiln-validate's archive check) and the drop-in's runtime answers it
//! (the crate template's `launch.rs`, whose test holds every name below).
//!
//! - Every call into NVIDIA's runtime that nvcc's host code makes is renamed
//!   from `NAME` to `kiln_<lib>_NAME` ([`renamed`]); the crate defines those,
//!   over the driver API. No other NVIDIA runtime function may be left.
//! - The object's `.nv_fatbin` section holds no code, only a tag naming the
//!   source file the object came from ([`tag`]): the kernels are in that
//!   file's cubins, one per sm, which the crate's per-sm parts carry.

/// A CPU that host objects are built for: one row each, the only place a
/// host CPU is added (pins.toml's `staticlib.hosts` and `[toolchain.cross.<cpu>]`
/// name rows of this table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Host {
    /// The CPU as cargo names it (`CARGO_CFG_TARGET_ARCH`, `cfg(target_arch)`).
    pub cpu: &'static str,
    /// The ELF `e_machine` of its objects (the ELF specification's registry).
    pub elf_machine: u16,
    /// The GNU triplet of its Debian cross tools (`aarch64-linux-gnu-objcopy`).
    pub gnu: &'static str,
    /// The Rust target a consumer builds for (Linux, glibc).
    pub rust_target: &'static str,
}

/// Every host CPU kiln can build host code for. The toolchain's own CPU is
/// the first ([`BUILD_HOST`]): its closure is Debian's amd64.
pub const HOSTS: &[Host] = &[
    Host { cpu: "x86_64", elf_machine: 62, gnu: "x86_64-linux-gnu", rust_target: "x86_64-unknown-linux-gnu" },
    // NVIDIA's Arm machines: GH200/GB200 (Grace), DGX Spark (GB10), Jetson Orin and Thor.
    Host { cpu: "aarch64", elf_machine: 183, gnu: "aarch64-linux-gnu", rust_target: "aarch64-unknown-linux-gnu" },
];

/// The CPU the pinned toolchain runs on and builds host code for natively.
pub const BUILD_HOST: &Host = &HOSTS[0];

/// The row of host CPU `cpu` (`x86_64`, `aarch64`).
#[inline]
pub fn host(cpu: &str) -> Option<&'static Host> {
    HOSTS.iter().find(|h| h.cpu == cpu)
}

/// The host CPU whose objects carry ELF machine `machine`.
#[inline]
pub fn host_of_machine(machine: u16) -> Option<&'static Host> {
    HOSTS.iter().find(|h| h.elf_machine == machine)
}

/// The host CPUs, as `x86_64, aarch64` (for messages).
#[inline]
pub fn host_names() -> String {
    HOSTS.iter().map(|h| h.cpu).collect::<Vec<_>>().join(", ")
}

/// Every NVIDIA runtime function a host object may call, by the name nvcc's
/// host code calls it. candle-kernels 0.11.1's 15 library files call 25 of
/// these (`bench/ffi-split/build.sh` lists them); the rest are the legacy
/// default-stream twins of the `_ptsz` ones.
pub const RUNTIME_CALLS: &[&str] = &[
    "__cudaPopCallConfiguration",
    "__cudaPushCallConfiguration",
    "__cudaRegisterFatBinary",
    "__cudaRegisterFatBinaryEnd",
    "__cudaRegisterFunction",
    "__cudaRegisterVar",
    "__cudaUnregisterFatBinary",
    "cudaDeviceGetAttribute",
    "cudaFree",
    "cudaFreeAsync",
    "cudaFreeAsync_ptsz",
    "cudaFuncGetAttributes",
    "cudaFuncSetAttribute",
    "cudaGetDevice",
    "cudaGetDeviceCount",
    "cudaGetErrorName",
    "cudaGetErrorString",
    "cudaGetLastError",
    "cudaLaunchKernel",
    "cudaLaunchKernel_ptsz",
    "cudaMalloc",
    "cudaMallocAsync",
    "cudaMallocAsync_ptsz",
    "cudaMemsetAsync",
    "cudaMemsetAsync_ptsz",
    "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
    "cudaPeekAtLastError",
    "cudaSetDevice",
    "cudaStreamSynchronize",
    "cudaStreamSynchronize_ptsz",
];

/// The first bytes of a host object's `.nv_fatbin` section: `KILNMOD\0`.
pub const TAG_MAGIC: &[u8] = b"KILNMOD\0";

/// The name a host object of library `lib` calls runtime function `name` by.
#[inline]
pub fn renamed(lib: &str, name: &str) -> String {
    format!("kiln_{lib}_{name}")
}

/// Whether `symbol` names a function of NVIDIA's runtime (what a host
/// object must not call under its own name): `cuda...`, `__cuda...`.
#[inline]
pub fn is_runtime_symbol(symbol: &str) -> bool {
    symbol.trim_start_matches('_').starts_with("cuda") && symbol.len() - symbol.trim_start_matches('_').len() <= 2
}

/// The `.nv_fatbin` section of the host object of source file `stem`.
#[inline]
pub fn tag(stem: &str) -> Vec<u8> {
    let mut t = TAG_MAGIC.to_vec();
    t.extend_from_slice(stem.as_bytes());
    t.push(0);
    t
}

/// The source file a `.nv_fatbin` section names, if it is a tag.
#[inline]
pub fn tagged(section: &[u8]) -> Option<&str> {
    let rest = section.strip_prefix(TAG_MAGIC)?;
    let end = rest.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&rest[..end]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_reads_back_and_runtime_symbols_are_told_apart() {
        assert_eq!(tagged(&tag("mmq_instance_q4_0")), Some("mmq_instance_q4_0"));
        assert_eq!(tagged(b"\x50\xed\x55\xba rest"), None, "a real fatbin is no tag");
        assert_eq!(tagged(b"KILNMOD\0unterminated"), None);
        assert!(RUNTIME_CALLS.iter().all(|f| is_runtime_symbol(f)));
        assert!(!is_runtime_symbol("___cudaX") && !is_runtime_symbol("kiln_moe_cudaMalloc") && !is_runtime_symbol("cuLaunchKernel"));
        assert_eq!(renamed("moe", "cudaMalloc"), "kiln_moe_cudaMalloc");
        let mut sorted = RUNTIME_CALLS.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted, RUNTIME_CALLS, "kept sorted and unique");
    }

    #[test]
    fn host_rows_are_unique_and_found_by_name_and_machine() {
        for h in HOSTS {
            assert_eq!(host(h.cpu), Some(h));
            assert_eq!(host_of_machine(h.elf_machine), Some(h));
            assert!(h.rust_target.starts_with(h.cpu) && h.gnu.starts_with(h.cpu), "{h:?}");
        }
        assert_eq!(BUILD_HOST.cpu, "x86_64");
        assert_eq!(host("riscv64"), None);
        assert_eq!(host_names(), "x86_64, aarch64");
    }
}
