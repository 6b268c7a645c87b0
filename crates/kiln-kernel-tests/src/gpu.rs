//! Which GPUs this machine has, by the arch names kiln's legs use (`sm_90`, `gfx90a`).
//!
//! NVIDIA: through kiln-loader's CUDA device enumeration (the driver's compute
//! capability). AMD: from the KFD topology in sysfs (`gfx_target_version`),
//! which needs neither ROCm user space nor device permissions and is not
//! changed by `HSA_OVERRIDE_GFX_VERSION`; `rocminfo` when sysfs has none.

use std::path::Path;

use kiln_loader::{Backend, Device, DeviceArch};

/// A GPU found on this machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalGpu {
    pub backend: Backend,
    /// `sm_90`, `gfx90a`.
    pub arch: String,
    /// What it is and where it was seen (`NVIDIA H100 80GB HBM3, CUDA device 0`).
    pub description: String,
}

/// Everything found, and why a backend found nothing.
#[derive(Clone, Debug, Default)]
pub struct Detection {
    pub gpus: Vec<LocalGpu>,
    /// One line per backend that found nothing (driver missing, no device, ...).
    pub notes: Vec<String>,
}

impl Detection {
    pub fn has(&self, arch: &str) -> bool {
        self.gpus.iter().any(|g| g.arch == arch)
    }
}

/// The leg name of a device arch: `sm_90`, `gfx90a`.
pub fn arch_name(arch: &DeviceArch) -> String {
    match arch {
        DeviceArch::Cuda { major, minor } => format!("sm_{major}{minor}"),
        DeviceArch::Hip { gfx } => gfx.clone(),
    }
}

pub const KFD_NODES: &str = "/sys/class/kfd/kfd/topology/nodes";

pub fn detect() -> Detection {
    let mut d = Detection::default();
    match Device::enumerate(Backend::Cuda) {
        Ok(devices) if !devices.is_empty() => {
            for info in devices {
                d.gpus.push(LocalGpu {
                    backend: Backend::Cuda,
                    arch: arch_name(&info.arch),
                    description: format!("{}, CUDA device {} ({})", info.name, info.ordinal, info.driver_version),
                });
            }
        }
        Ok(_) => d.notes.push("NVIDIA: the driver reports no device".into()),
        Err(e) => d.notes.push(format!("NVIDIA: {e}")),
    }
    let kfd = kfd_gpus(Path::new(KFD_NODES));
    if !kfd.is_empty() {
        d.gpus.extend(kfd);
    } else {
        match rocminfo_gpus() {
            Ok(found) if !found.is_empty() => d.gpus.extend(found),
            Ok(_) => d.notes.push(format!("AMD: no GPU node in {KFD_NODES}, and rocminfo lists no gfx agent")),
            Err(why) => d.notes.push(format!("AMD: no GPU node in {KFD_NODES} (amdgpu driver not loaded?), and {why}")),
        }
    }
    d
}

/// KFD writes a GPU's ISA as `gfx_target_version major*10000 + minor*100 +
/// stepping`, and LLVM names the processor `gfx<major><minor><stepping>` with
/// minor and stepping as one hex digit each: 90010 is gfx90a, 100300 gfx1030,
/// 110000 gfx1100, 90402 gfx942. 0 is a CPU node.
pub fn gfx_from_target_version(v: u32) -> Option<String> {
    let (major, minor, stepping) = (v / 10000, (v / 100) % 100, v % 100);
    if major == 0 || minor > 15 || stepping > 15 {
        return None;
    }
    Some(format!("gfx{major}{minor:x}{stepping:x}"))
}

/// The GPU nodes of a KFD topology folder (`nodes/<n>/properties`).
pub fn kfd_gpus(nodes: &Path) -> Vec<LocalGpu> {
    let Ok(entries) = std::fs::read_dir(nodes) else { return Vec::new() };
    let mut found: Vec<(u32, LocalGpu)> = Vec::new();
    for entry in entries.flatten() {
        let Ok(node) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(text) = std::fs::read_to_string(entry.path().join("properties")) else { continue };
        let field = |key: &str| {
            text.lines().find_map(|l| {
                let mut it = l.split_whitespace();
                (it.next() == Some(key)).then(|| it.next().and_then(|v| v.parse::<u32>().ok())).flatten()
            })
        };
        let Some(gfx) = field("gfx_target_version").and_then(gfx_from_target_version) else { continue };
        let render = field("drm_render_minor").map(|m| format!(", /dev/dri/renderD{m}")).unwrap_or_default();
        found.push((node, LocalGpu { backend: Backend::Hip, arch: gfx, description: format!("KFD node {node}{render}") }));
    }
    found.sort_by_key(|(n, _)| *n);
    found.into_iter().map(|(_, g)| g).collect()
}

fn rocminfo_gpus() -> Result<Vec<LocalGpu>, String> {
    let out = std::process::Command::new("rocminfo").output().map_err(|e| format!("rocminfo cannot run ({e})"))?;
    if !out.status.success() {
        return Err(format!("rocminfo failed ({})", out.status));
    }
    Ok(parse_rocminfo(&String::from_utf8_lossy(&out.stdout)))
}

/// The `Name: gfx…` lines of rocminfo's agent list, one per GPU agent.
pub fn parse_rocminfo(text: &str) -> Vec<LocalGpu> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("Name:").map(str::trim))
        .filter(|n| n.starts_with("gfx"))
        .filter_map(|n| DeviceArch::parse(n).ok())
        .enumerate()
        .map(|(i, a)| LocalGpu { backend: Backend::Hip, arch: arch_name(&a), description: format!("rocminfo GPU agent {i}") })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_versions_decode_to_llvm_processor_names() {
        for (v, name) in [
            (90010, "gfx90a"),
            (100300, "gfx1030"),
            (110000, "gfx1100"),
            (90402, "gfx942"),
            (90008, "gfx908"),
            (90012, "gfx90c"),
            (110501, "gfx1151"),
            (120001, "gfx1201"),
            (120000, "gfx1200"),
            (90500, "gfx950"),
        ] {
            assert_eq!(gfx_from_target_version(v).as_deref(), Some(name), "{v}");
            assert!(DeviceArch::parse(name).is_ok(), "{name} is a processor LLVM knows");
        }
        assert_eq!(gfx_from_target_version(0), None);
        assert_eq!(gfx_from_target_version(91600), None);
    }

    #[test]
    fn kfd_topology_gpu_nodes_only() {
        let dir = std::env::temp_dir().join(format!("kiln-kfd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (node, props) in [
            ("0", "cpu_cores_count 16\nsimd_count 0\ngfx_target_version 0\n"),
            ("2", "simd_count 440\ngfx_target_version 90010\ndrm_render_minor 129\n"),
            ("1", "simd_count 60\ngfx_target_version 100300\ndrm_render_minor 128\n"),
        ] {
            std::fs::create_dir_all(dir.join(node)).unwrap();
            std::fs::write(dir.join(node).join("properties"), props).unwrap();
        }
        let gpus = kfd_gpus(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        let archs: Vec<&str> = gpus.iter().map(|g| g.arch.as_str()).collect();
        assert_eq!(archs, ["gfx1030", "gfx90a"]);
        assert_eq!(gpus[0].description, "KFD node 1, /dev/dri/renderD128");
        assert!(kfd_gpus(Path::new("/nonexistent/kfd")).is_empty());
    }

    #[test]
    fn rocminfo_agents() {
        let text = "Agent 1\n  Name:                    AMD EPYC 7763\nAgent 2\n  Name:                    gfx90a\n  Marketing Name:          AMD Instinct MI210\n  ISA 1\n    Name:                    amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-\n";
        let gpus = parse_rocminfo(text);
        assert_eq!(gpus.len(), 1);
        assert_eq!(gpus[0].arch, "gfx90a");
    }
}
