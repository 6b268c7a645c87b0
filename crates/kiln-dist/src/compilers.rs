//! Asks the provisioned compilers what they are before trusting them: a
//! sysroot handed in by `KILN_SYSROOT` or a container could hold other
//! versions than the pins say, and a missing gfx device library would only
//! show up as a compile error deep into a build.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use kiln_build::store;
use kiln_manifest::{Package, Toolchain};
use kiln_pins::{role, upstream_version, HipArch, PackagePin, Pins};
use kiln_toolchain::{
    sysroot::JOB_DIR,
    wheel::{self, Tool},
    Cache, Mount, Runner,
};

/// The version in `nvcc --version` output (`... release 12.4, V12.4.131`).
pub fn nvcc_version(text: &str) -> Option<String> {
    let v = text.lines().find_map(|l| l.rsplit_once(", V").map(|(_, v)| v.trim().to_string()))?;
    (!v.is_empty()).then_some(v)
}

/// The version in `clang --version` output (`Debian clang version 17.0.6 (22+b2)`).
pub fn clang_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.contains("clang version "))?;
    let rest = &line[line.find("clang version ")? + 14..];
    Some(rest.split_whitespace().next()?.to_string())
}

fn mismatch(what: &str, found: &str, pin: &PackagePin) -> anyhow::Error {
    anyhow::anyhow!(
        "the toolchain's {what} is {found}, but pins.toml pins {} {} (upstream {})\n  \
         The sysroot in use is not the pinned one: unset KILN_SYSROOT, or rebuild it from this pins.toml.",
        pin.package,
        pin.version,
        upstream_version(&pin.version)
    )
}

/// The pinned newer ptxas, unpacked from its wheel and run once in the
/// sandbox (`ptxas --version` must name the pinned version): a binary that
/// cannot run against the sysroot's libraries fails here, not in every job.
pub fn ptxas(runner: &Runner, cache: &Cache, pins: &Pins) -> Result<Option<Tool>> {
    let Some(pin) = &pins.toolchain.ptxas else { return Ok(None) };
    let tool = wheel::tool(cache, pin, PTXAS_MEMBER)?;
    let dir = cache.scratch("ptxas-check")?;
    let result = (|| -> Result<String> {
        store::link_or_copy(&tool.path, &dir.join("ptxas"))?;
        let log = dir.join("version.log");
        let mounts = [Mount { host: dir.to_path_buf(), at: JOB_DIR.into(), writable: true }];
        let status = runner.run(&mounts, JOB_DIR, &[format!("{JOB_DIR}/ptxas"), "--version".into()], &log)?;
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if !status.success() {
            bail!("the pinned ptxas ({}) does not run in the toolchain's sandbox ({status}):\n{text}", tool.origin);
        }
        Ok(text)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    let text = result?;
    let v = nvcc_version(&text).with_context(|| format!("cannot read a version from `ptxas --version`:\n{text}"))?;
    if v != pin.version {
        bail!(
            "the ptxas in {} says it is {v}, but pins.toml pins {} {}: the wheel does not hold what its name says",
            pin.file_name(),
            pin.package,
            pin.version
        );
    }
    Ok(Some(tool))
}

/// Where ptxas is inside the `nvidia-cuda-nvcc-cu12` wheel.
pub const PTXAS_MEMBER: &str = "nvidia/cuda_nvcc/bin/ptxas";

/// Checks every compiler against its pin, and the device libraries for every
/// AMD arch of `hip`; returns the toolchain's identity for the manifest (with
/// the pinned ptxas, when the build uses it).
pub fn check(runner: &Runner, pins: &Pins, ptxas: Option<&Tool>, hip_archs: &[HipArch]) -> Result<Toolchain> {
    let t = &pins.toolchain;
    let mut reported = BTreeMap::new();

    let out = runner.output(&["nvcc".into(), "--version".into()]).context("cannot run the toolchain's nvcc")?;
    let v = nvcc_version(&out).with_context(|| format!("cannot read a version from `nvcc --version`:\n{out}"))?;
    if v != upstream_version(&t.nvcc.version) {
        return Err(mismatch(role::NVCC, &v, &t.nvcc));
    }
    reported.insert(role::NVCC.to_string(), v);

    // Every pinned AMD compiler that this build uses: its version, then the
    // HIP headers they share, then one ISA bitcode file per gfx target it
    // builds; without that file the compile fails with "cannot find ROCm
    // device library" (Debian 12's ROCm for gfx11).
    let root = &runner.sysroot().root;
    let by_compiler: Vec<(kiln_pins::HipCompiler, Vec<&HipArch>)> =
        pins.hip_compilers().into_iter().map(|c| (c, hip_archs.iter().filter(|a| pins.hip_compiler(a).role == c.role).collect())).collect();
    for (c, _) in &by_compiler {
        let major = c.clang.package.trim_start_matches("clang-");
        let out = runner
            .output(&[format!("clang++-{major}"), "--version".into()])
            .with_context(|| format!("cannot run the toolchain's {}", c.clang.package))?;
        let v = clang_version(&out).with_context(|| format!("cannot read a version from `clang++-{major} --version`:\n{out}"))?;
        if v != upstream_version(&c.clang.version) {
            return Err(mismatch(c.role, &v, c.clang));
        }
        reported.insert(c.role.to_string(), v);
    }

    let header = root.join("usr/include/hip/hip_version.h");
    let text = std::fs::read_to_string(&header).with_context(|| format!("the toolchain has no HIP headers ({})", header.display()))?;
    let define = |name: &str| text.lines().find_map(|l| l.strip_prefix(&format!("#define {name} ")).map(|v| v.trim().to_string()));
    let hip = format!("{}.{}", define("HIP_VERSION_MAJOR").unwrap_or_default(), define("HIP_VERSION_MINOR").unwrap_or_default());
    if !upstream_version(&t.hip.version).starts_with(&format!("{hip}.")) {
        return Err(mismatch("HIP (hip_version.h)", &hip, &t.hip));
    }
    reported.insert(role::HIP.to_string(), hip);

    for (c, archs) in by_compiler.iter().filter(|(_, archs)| !archs.is_empty()) {
        let bitcode = root.join(c.bitcode_dir());
        let missing: Vec<String> = archs
            .iter()
            .filter(|arch| !bitcode.join(format!("oclc_isa_version_{}.bc", arch.as_str().trim_start_matches("gfx"))).is_file())
            .map(|arch| arch.to_string())
            .collect();
        if !missing.is_empty() {
            bail!(
                "the pinned ROCm device libraries ({} {}, for {}) have no bitcode for {} (looked in {}); \
                 pin a rocm-device-libs version that supports them, or drop them from pins.toml [targets].hip",
                c.rocm_device_libs.package,
                c.rocm_device_libs.version,
                c.clang.package,
                missing.join(", "),
                bitcode.display()
            );
        }
        reported.insert(c.device_libs_role.to_string(), upstream_version(&c.rocm_device_libs.version).to_string());
    }
    // The first device libraries are reported even when no arch of this build needs them, as always.
    reported.insert(role::ROCM_DEVICE_LIBS.to_string(), upstream_version(&t.rocm_device_libs.version).to_string());

    let closure = pins.closure()?;
    let mut packages = BTreeMap::new();
    for (role, pin) in pins.compilers() {
        let deb = closure.find(&pin.package).context("a compiler is missing from the closure")?;
        packages.insert(role.to_string(), Package { package: pin.package.clone(), version: pin.version.clone(), sha256: deb.sha256.clone() });
    }
    if let (Some(_), Some(pin)) = (ptxas, &t.ptxas) {
        packages.insert(role::PTXAS.into(), Package { package: pin.package.clone(), version: pin.version.clone(), sha256: pin.sha256.clone() });
        reported.insert(role::PTXAS.into(), pin.version.clone());
    }
    Ok(Toolchain { identity: runner.sysroot().identity.clone(), distribution: t.distribution.clone(), suite: t.suite.clone(), packages, reported })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_versions_the_way_debian_and_the_compilers_write_them() {
        let nvcc =
            "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.4, V12.4.131\nBuild cuda_12.4.r12.4/compiler.34097967_0\n";
        assert_eq!(nvcc_version(nvcc).as_deref(), Some("12.4.131"));
        assert_eq!(clang_version("Debian clang version 17.0.6 (22+b2)\nTarget: x86_64").as_deref(), Some("17.0.6"));
        assert_eq!(nvcc_version("garbage"), None);
    }
}
