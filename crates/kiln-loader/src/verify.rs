//! The two checks every artifact passes before a driver sees it: its bytes are
//! the ones the manifest recorded (sha256 and size), and its own header says it
//! is code for this device (ELF machine and flags, PTX `.target`).
//!
//! The hash catches corruption and mixed-up files; the header catches a
//! manifest that is self-consistent but wrong (a cubin for sm_80 recorded as
//! sm_90), which the hash cannot see. Drivers given code for another arch fail
//! with vague errors at best, so the loader names the mismatch itself.

use kiln_manifest::{Artifact, Backend, DeviceArch, Kind, Match};

use crate::error::{Error, Result};

/// `EM_CUDA`, `EM_AMDGPU` and the HSA OS ABI (ELF `e_ident[EI_OSABI]`).
const EM_CUDA: u16 = 190;
const EM_AMDGPU: u16 = 224;
const ELFOSABI_AMDGPU_HSA: u8 = 64;

fn mach_of(gfx: &str) -> Option<u32> {
    kiln_target::gfx(gfx).and_then(|g| g.mach)
}

fn gfx_of(mach: u32) -> Option<&'static str> {
    kiln_target::gfx_by_mach(mach).map(|g| g.name)
}

pub use kiln_manifest::sha256_hex;

/// The bytes are the ones the manifest recorded.
pub fn verify_hash(artifact: &Artifact, bytes: &[u8]) -> Result<()> {
    let actual = sha256_hex(bytes);
    if bytes.len() as u64 != artifact.size || !actual.eq_ignore_ascii_case(&artifact.sha256) {
        return Err(Error::HashMismatch {
            path: artifact.path.clone(),
            expected_sha256: artifact.sha256.clone(),
            actual_sha256: actual,
            expected_size: artifact.size,
            actual_size: bytes.len() as u64,
        });
    }
    Ok(())
}

/// The fields of an ELF64 little-endian header the checks need.
struct ElfHeader {
    osabi: u8,
    machine: u16,
    flags: u32,
}

fn read_elf(bytes: &[u8]) -> std::result::Result<ElfHeader, String> {
    const EHDR: usize = 64;
    if bytes.len() < EHDR {
        return Err(format!("{} bytes is too short for an ELF header", bytes.len()));
    }
    if &bytes[..4] != b"\x7fELF" {
        return Err("not an ELF file (bad magic)".into());
    }
    if bytes[4] != 2 || bytes[5] != 1 {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]);
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
    // A truncated file still has a plausible header: the tables it points to
    // must lie inside it.
    let within = |off: u64, count: u16, size: u16| off.checked_add(count as u64 * size as u64).is_some_and(|end| end <= bytes.len() as u64);
    if !within(u64_at(32), u16_at(56), u16_at(54)) || !within(u64_at(40), u16_at(60), u16_at(58)) {
        return Err(format!("ELF tables lie past its end ({} bytes): the file is truncated", bytes.len()));
    }
    Ok(ElfHeader { osabi: bytes[7], machine: u16_at(18), flags: u32_at(48) })
}

/// `.version` and `.target` of PTX text, which come before any code.
fn read_ptx(bytes: &[u8]) -> std::result::Result<(String, String), String> {
    if bytes.contains(&0) {
        return Err("PTX text contains a NUL byte".into());
    }
    let text = std::str::from_utf8(bytes).map_err(|_| "not PTX: not UTF-8 text".to_string())?;
    let (mut version, mut target) = (None, None);
    for line in text.lines().map(str::trim) {
        if let Some(v) = line.strip_prefix(".version") {
            version = Some(v.trim().to_string());
        } else if let Some(t) = line.strip_prefix(".target") {
            // `.target sm_80` or `.target sm_80, debug`: the first word is the arch.
            target = t.split(|c: char| c == ',' || c.is_whitespace()).find(|w| !w.is_empty()).map(str::to_string);
        }
        if line.starts_with(".entry") || line.starts_with(".visible") || (version.is_some() && target.is_some()) {
            break;
        }
    }
    match (version, target) {
        (Some(v), Some(t)) => Ok((v, t)),
        _ => Err("not PTX: no .version and .target directives before the code".into()),
    }
}

/// The artifact's own header agrees with the manifest entry and with the
/// device it is about to be loaded on.
pub fn check_blob(artifact: &Artifact, bytes: &[u8], device: &DeviceArch, matched: Match) -> Result<()> {
    let bad = |reason: String| Error::BadBlob { path: artifact.path.clone(), reason };
    let backend_ok = matches!((artifact.backend, device), (Backend::Cuda, DeviceArch::Cuda { .. }) | (Backend::Hip, DeviceArch::Hip { .. }));
    if !backend_ok {
        return Err(bad(format!("it is {} code and the device is {device}", artifact.backend.as_str())));
    }
    match (artifact.kind, device) {
        (Kind::Cubin, DeviceArch::Cuda { major, minor }) => {
            let h = read_elf(bytes).map_err(|r| bad(format!("not a cubin: {r}")))?;
            if h.machine != EM_CUDA {
                return Err(bad(format!("not a cubin: ELF machine {} is not CUDA ({EM_CUDA})", h.machine)));
            }
            // nvcc 12 puts the sm in the low byte of e_flags (kiln-validate reads it the same way).
            let sm = h.flags & 0xff;
            let device_sm = major * 10 + minor;
            if artifact.arch != format!("sm_{sm}") {
                return Err(bad(format!("the manifest says {} but the cubin is for sm_{sm}", artifact.arch)));
            }
            if !kiln_target::sass_runs_on(sm, device_sm) {
                return Err(bad(format!(
                    "the cubin is for sm_{sm} and the device is sm_{device_sm}: a cubin runs only on its own sm or a newer one of the same major version, and on a Jetson only on its own"
                )));
            }
            Ok(())
        }
        (Kind::Ptx, DeviceArch::Cuda { major, minor }) => {
            let (_, target) = read_ptx(bytes).map_err(bad)?;
            let level = target
                .strip_prefix("sm_")
                .and_then(|d| d.parse::<u32>().ok())
                .ok_or_else(|| bad(format!("PTX `.target {target}` is not a plain sm_XX target")))?;
            if artifact.arch != format!("compute_{level}") {
                return Err(bad(format!("the manifest says {} but the PTX targets {target}", artifact.arch)));
            }
            let device_level = major * 10 + minor;
            if !kiln_target::ptx_jits_on(level, device_level) {
                return Err(bad(format!(
                    "the PTX targets {target}, above the device's sm_{device_level}: the driver cannot compile it for this device"
                )));
            }
            Ok(())
        }
        (Kind::Hsaco, DeviceArch::Hip { gfx }) => {
            let h = read_elf(bytes).map_err(|r| bad(format!("not an AMDGPU code object: {r}")))?;
            if h.machine != EM_AMDGPU || h.osabi != ELFOSABI_AMDGPU_HSA {
                return Err(bad(format!("not an AMDGPU HSA code object (ELF machine {}, OS ABI {})", h.machine, h.osabi)));
            }
            let mach = h.flags & 0xff;
            let expected = mach_of(&artifact.arch).ok_or_else(|| bad(format!("kiln-loader does not know the ELF machine of `{}`", artifact.arch)))?;
            if mach != expected {
                let found = gfx_of(mach).map(str::to_string).unwrap_or_else(|| format!("machine 0x{mach:02x}"));
                return Err(bad(format!("the manifest says {} but the code object is for {found}", artifact.arch)));
            }
            let row = kiln_target::gfx(gfx);
            let generic_ok = row.is_some_and(|r| r.generic == Some(artifact.arch.as_str()));
            let compat_ok = matched == Match::HipCompat && row.is_some_and(|r| r.compat == Some(artifact.arch.as_str()));
            if artifact.arch != *gfx && !generic_ok && !compat_ok {
                return Err(bad(format!(
                    "the code object is for {} and the device is {gfx}: ROCm runs a code object only on its own processor",
                    artifact.arch
                )));
            }
            Ok(())
        }
        (kind, _) => Err(bad(format!("a {} cannot be loaded as a module", kind.as_str()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artifact(kind: Kind, arch: &str, bytes: &[u8]) -> Artifact {
        Artifact {
            module: "affine".into(),
            backend: if kind == Kind::Hsaco { Backend::Hip } else { Backend::Cuda },
            arch: arch.into(),
            kind,
            path: format!("x/{arch}/affine"),
            size: bytes.len() as u64,
            sha256: sha256_hex(bytes),
            kernels: vec![],
            ptx_version: None,
            resources: vec![],
            geometry: None,
        }
    }

    /// A minimal ELF64 header with no tables.
    fn elf(machine: u16, osabi: u8, flags: u32) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[6] = 1;
        b[7] = osabi;
        b[18..20].copy_from_slice(&machine.to_le_bytes());
        b[48..52].copy_from_slice(&flags.to_le_bytes());
        b[52..54].copy_from_slice(&64u16.to_le_bytes());
        b
    }

    fn dev(s: &str) -> DeviceArch {
        DeviceArch::parse(s).unwrap()
    }

    #[test]
    fn hash_and_size_must_match() {
        let bytes = b"abc".to_vec();
        let a = artifact(Kind::Ptx, "compute_80", &bytes);
        verify_hash(&a, &bytes).unwrap();
        let e = verify_hash(&a, b"abd").unwrap_err();
        assert!(matches!(&e, Error::HashMismatch { actual_size: 3, .. }), "{e:?}");
        assert!(e.to_string().contains("x/compute_80/affine") && e.to_string().contains(&a.sha256), "{e}");
        // Same hash recorded, other length: still refused.
        let mut short = a.clone();
        short.size = 2;
        assert!(verify_hash(&short, &bytes).is_err());
        // Upper-case hex in a manifest is the same hash.
        let mut upper = a.clone();
        upper.sha256 = upper.sha256.to_uppercase();
        verify_hash(&upper, &bytes).unwrap();
    }

    #[test]
    fn cubins_must_be_for_a_sm_the_device_runs() {
        let b = elf(EM_CUDA, 0x33, 0x5a); // sm_90
        check_blob(&artifact(Kind::Cubin, "sm_90", &b), &b, &dev("sm_90"), Match::Exact).unwrap();
        let e = check_blob(&artifact(Kind::Cubin, "sm_90", &b), &b, &dev("sm_86"), Match::Exact).unwrap_err();
        assert!(e.to_string().contains("cubin is for sm_90 and the device is sm_86"), "{e}");
        // An older sm of the device's major runs (binary compatibility), except on a Jetson.
        let b86 = elf(EM_CUDA, 0x33, 0x56);
        check_blob(&artifact(Kind::Cubin, "sm_86", &b86), &b86, &dev("sm_89"), Match::BinaryCompatible).unwrap();
        let e = check_blob(&artifact(Kind::Cubin, "sm_86", &b86), &b86, &dev("sm_87"), Match::BinaryCompatible).unwrap_err();
        assert!(e.to_string().contains("cubin is for sm_86 and the device is sm_87"), "{e}");
        // An sm_80 cubin recorded as sm_90.
        let b80 = elf(EM_CUDA, 0x33, 0x50);
        let e = check_blob(&artifact(Kind::Cubin, "sm_90", &b80), &b80, &dev("sm_90"), Match::Exact).unwrap_err();
        assert!(e.to_string().contains("manifest says sm_90 but the cubin is for sm_80"), "{e}");
        // An AMD object recorded as a cubin.
        let amd = elf(EM_AMDGPU, ELFOSABI_AMDGPU_HSA, 0x3f);
        assert!(check_blob(&artifact(Kind::Cubin, "sm_90", &amd), &amd, &dev("sm_90"), Match::Exact).unwrap_err().to_string().contains("not CUDA"));
    }

    #[test]
    fn garbage_short_and_truncated_blobs_are_refused() {
        let a = |b: &[u8]| artifact(Kind::Cubin, "sm_90", b);
        for (bytes, says) in [
            (vec![], "too short"),
            (b"\x7fELF".to_vec(), "too short"),
            (vec![0xffu8; 200], "bad magic"),
            (
                {
                    let mut b = elf(EM_CUDA, 0x33, 0x5a);
                    b[4] = 1;
                    b
                },
                "64-bit",
            ),
            (
                {
                    // Claims 3 section headers at offset 64 that are not there.
                    let mut b = elf(EM_CUDA, 0x33, 0x5a);
                    b[40..48].copy_from_slice(&64u64.to_le_bytes());
                    b[58..60].copy_from_slice(&64u16.to_le_bytes());
                    b[60..62].copy_from_slice(&3u16.to_le_bytes());
                    b
                },
                "truncated",
            ),
            (
                {
                    // Offsets that overflow must not wrap around.
                    let mut b = elf(EM_CUDA, 0x33, 0x5a);
                    b[40..48].copy_from_slice(&u64::MAX.to_le_bytes());
                    b[58..60].copy_from_slice(&64u16.to_le_bytes());
                    b[60..62].copy_from_slice(&1u16.to_le_bytes());
                    b
                },
                "truncated",
            ),
        ] {
            let e = check_blob(&a(&bytes), &bytes, &dev("sm_90"), Match::Exact).unwrap_err();
            assert!(matches!(e, Error::BadBlob { .. }) && e.to_string().contains(says), "{says}: {e}");
        }
    }

    #[test]
    fn ptx_target_must_match_and_not_exceed_the_device() {
        let p89 = b"//\n.version 8.4\n.target sm_89\n.address_size 64\n.visible .entry k()\n{\n}\n".to_vec();
        let a = artifact(Kind::Ptx, "compute_89", &p89);
        check_blob(&a, &p89, &dev("sm_89"), Match::Ptx).unwrap();
        check_blob(&a, &p89, &dev("sm_90"), Match::Ptx).unwrap();
        let e = check_blob(&a, &p89, &dev("sm_86"), Match::Ptx).unwrap_err();
        assert!(e.to_string().contains("above the device's sm_86"), "{e}");
        // compute_89 text recorded as compute_80.
        let e = check_blob(&artifact(Kind::Ptx, "compute_80", &p89), &p89, &dev("sm_90"), Match::Ptx).unwrap_err();
        assert!(e.to_string().contains("manifest says compute_80 but the PTX targets sm_89"), "{e}");
        let debug = b".version 8.4\n.target sm_80, debug\n".to_vec();
        check_blob(&artifact(Kind::Ptx, "compute_80", &debug), &debug, &dev("sm_80"), Match::Ptx).unwrap();
        for junk in [&b"hello"[..], b".version 8.4\n", b"\xff\xfe", b".version 8.4\n.target sm_80\n\0"] {
            let e = check_blob(&artifact(Kind::Ptx, "compute_80", junk), junk, &dev("sm_90"), Match::Ptx).unwrap_err();
            assert!(matches!(e, Error::BadBlob { .. }), "{e:?}");
        }
    }

    #[test]
    fn code_objects_must_be_for_the_device_or_its_family() {
        let hs = |mach: u32| elf(EM_AMDGPU, ELFOSABI_AMDGPU_HSA, 0x500 | mach);
        let b = hs(0x3f);
        check_blob(&artifact(Kind::Hsaco, "gfx90a", &b), &b, &dev("gfx90a"), Match::Exact).unwrap();
        let e = check_blob(&artifact(Kind::Hsaco, "gfx90a", &b), &b, &dev("gfx942"), Match::Exact).unwrap_err();
        assert!(e.to_string().contains("for gfx90a and the device is gfx942"), "{e}");
        // gfx1030 code recorded as gfx1100.
        let b1030 = hs(0x36);
        let e = check_blob(&artifact(Kind::Hsaco, "gfx1100", &b1030), &b1030, &dev("gfx1100"), Match::Exact).unwrap_err();
        assert!(e.to_string().contains("manifest says gfx1100 but the code object is for gfx1030"), "{e}");
        // Sibling only under the opt-in, generic always.
        let a1030 = artifact(Kind::Hsaco, "gfx1030", &b1030);
        assert!(check_blob(&a1030, &b1030, &dev("gfx1031"), Match::Exact).is_err());
        check_blob(&a1030, &b1030, &dev("gfx1031"), Match::HipCompat).unwrap();
        assert!(check_blob(&a1030, &b1030, &dev("gfx1100"), Match::HipCompat).is_err());
        let g = hs(0x53);
        check_blob(&artifact(Kind::Hsaco, "gfx10-3-generic", &g), &g, &dev("gfx1034"), Match::HipGeneric).unwrap();
        // A Linux x86 object is not a code object.
        let x86 = elf(62, 0, 0);
        assert!(check_blob(&artifact(Kind::Hsaco, "gfx90a", &x86), &x86, &dev("gfx90a"), Match::Exact).is_err());
        // HIP code never goes to a CUDA device.
        assert!(check_blob(&artifact(Kind::Hsaco, "gfx90a", &b), &b, &dev("sm_90"), Match::Exact).is_err());
    }
}
