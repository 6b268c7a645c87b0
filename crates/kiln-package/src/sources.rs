//! What the crates are made from besides the artifacts: kiln-package's
//! template, the two leaf crates packaged beside them, and the files the
//! pinned toolchain provides (the static CUDA runtime, licence texts). The
//! one place that knows where each lives.

use std::path::{Path, PathBuf};

/// kiln's repository, as a literal for `concat!` (the user agent, the
/// attestation's build type): [`REPOSITORY`] and every URL below it start from it.
#[macro_export]
macro_rules! repository {
    () => {
        "https://github.com/kiln-gpu/kiln"
    };
}

/// The repository the generated crates name.
pub const REPOSITORY: &str = repository!();

/// kiln's own trees the crates are generated from, in a checkout.
#[derive(Clone, Debug)]
pub struct Sources {
    /// `crates/kiln-package/template`: the hand-written crate code.
    pub template: PathBuf,
    /// `crates/kiln-manifest` and `crates/kiln-target`, packaged alongside (the crates depend on them).
    pub kiln_manifest: PathBuf,
    pub kiln_target: PathBuf,
    /// The generator's own code: a fix to it must repackage.
    pub generator: PathBuf,
}

impl Sources {
    pub fn in_repo(repo: &Path) -> Sources {
        Sources {
            template: repo.join("crates/kiln-package/template"),
            kiln_manifest: repo.join("crates/kiln-manifest"),
            kiln_target: repo.join("crates/kiln-target"),
            generator: repo.join("crates/kiln-package/src"),
        }
    }

    /// Every tree whose files make the crates (for a cache key).
    pub fn trees(&self) -> [&Path; 4] {
        [&self.template, &self.kiln_manifest, &self.kiln_target, &self.generator]
    }
}

/// The pinned toolchain's files that the crates carry.
#[derive(Clone, Debug)]
pub struct ToolchainFiles {
    /// NVIDIA's static CUDA runtime, which the prebuilt static library calls.
    pub cudart_static: PathBuf,
    /// Its licence (the CUDA EULA).
    pub nvidia_license: PathBuf,
    /// The Apache-2.0 text (from the toolchain's common-licenses).
    pub apache_license: PathBuf,
    /// NVIDIA's link stubs (`libcuda.so`, `libcublas.so`, ...): the functions
    /// and sonames the CUDA runtime crate's stand-ins are made from ([`crate::link_stubs`]).
    pub cuda_stubs: PathBuf,
}

impl ToolchainFiles {
    /// In the provisioned sysroot at `root`.
    pub fn in_sysroot(root: &Path) -> ToolchainFiles {
        ToolchainFiles {
            cudart_static: root.join("usr/lib/x86_64-linux-gnu/libcudart_static.a"),
            nvidia_license: root.join("usr/share/doc/nvidia-cuda-dev/copyright"),
            apache_license: root.join("usr/share/common-licenses/Apache-2.0"),
            cuda_stubs: root.join("usr/lib/x86_64-linux-gnu/stubs"),
        }
    }
}

/// Every file under `dir`, sorted (a generated crate, a tree of kiln's the
/// crates are made from); anything but files and folders is an error.
pub fn files_under(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    use anyhow::Context as _;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("cannot list {}", d.display()))? {
            let e = e?;
            let t = e.file_type()?;
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                out.push(e.path());
            } else {
                anyhow::bail!("{}: not a file or a folder (a link, a socket, a FIFO): refused", e.path().display());
            }
        }
    }
    out.sort();
    Ok(out)
}
