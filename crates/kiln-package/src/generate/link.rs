//! The crates linked by their build scripts: the static library's slices
//! (`-ffi-<i>`, cut by [`crate::slices`]) and NVIDIA's static CUDA runtime
//! (`-cudart`) they call.

use std::{fs, path::Path};

use anyhow::{bail, Context, Result};
use kiln_manifest::{
    kiln_target::host_object::{self, Host, BUILD_HOST},
    Kind,
};

use super::{
    text::{dir_size, exact_req, lib_name, write, Gen, Vars},
    Crate,
};
use crate::slices;

/// A link crate this one calls: its name, exact version requirement, and folder in the workspace.
struct Dep {
    name: String,
    version: String,
    path: String,
}

/// One crate per slice, in link order, per host CPU the library's host code
/// is built for; a slice that calls into others ([`slices::Slice::calls`])
/// depends on their crates, so rustc links it first.
pub fn slices(g: &Gen) -> Result<Vec<(&'static Host, Crate)>> {
    let Some(set_lib) = &g.inp.set.staticlib else {
        bail!("set `{}` has no static library: the drop-in's `ffi` module needs one", g.inp.set.name);
    };
    let hosts: Vec<&'static Host> = set_lib
        .hosts
        .iter()
        .map(|cpu| host_object::host(cpu).with_context(|| format!("static library `{}`: no host CPU `{cpu}` in kiln-target", set_lib.name)))
        .collect::<Result<_>>()?;
    if hosts.len() != g.inp.slices.len() {
        bail!("static library `{}` is built for {} host CPU(s), and {} sets of slices were made", set_lib.name, hosts.len(), g.inp.slices.len());
    }
    let (cudart_main, cudart_version) = &g.cudart;
    let mut crates = Vec::new();
    for (&host, folder) in hosts.iter().zip(g.inp.slices) {
        let path = format!("cuda/lib/{}lib{}.a", if host == BUILD_HOST { String::new() } else { format!("{}/", host.cpu) }, set_lib.name);
        let Some(lib) = g.inp.manifest.artifacts.iter().find(|a| a.kind == Kind::Staticlib && a.path == path) else {
            bail!("the manifest has no static library {path}: the drop-in's `ffi` module needs one for {} hosts", host.cpu);
        };
        let stem = slices::crate_stem(&g.main, host);
        for (i, slice) in slices::read(folder)?.into_iter().enumerate() {
            let name = slices::link_crate(&g.main, &stem, i);
            let suffix = name.strip_prefix(&format!("{}-", g.main)).expect("a link crate is named after the main crate").to_string();
            let dir = g.out.join("parts").join(&suffix);
            // These pieces are the set's kernels, compiled: they carry its licence
            // texts, and those of the inputs compiled into them (CUTLASS's).
            let license = g.compiled_licenses(&dir)?;
            let mut deps: Vec<Dep> = slice
                .calls
                .iter()
                .map(|&j| {
                    let name = slices::link_crate(&g.main, &stem, j);
                    let path = name.strip_prefix(&format!("{}-", g.main)).expect("named after the main crate").to_string();
                    Dep { name, version: exact_req(&g.version), path }
                })
                .collect();
            // Fat objects call NVIDIA's runtime; per-target host objects call the main crate's own (its `launch.rs`).
            if !per_target(g) {
                deps.push(Dep { name: format!("{cudart_main}-cudart"), version: exact_req(cudart_version), path: "cudart".into() });
            }
            // The first slice of each host's library in kiln's drop-in, which every consumer links, carries the CUDA link stand-ins.
            let drop_in = g.inp.set.artifact_crate.as_ref().is_some_and(|c| c.api == kiln_pins::CrateApi::Kiln);
            let link_stubs: &[crate::link_stubs::StubLib] = if drop_in && i == 0 { stand_ins(g)? } else { &[] };
            let lib_crate = LinkCrate {
                name: &name,
                lib: &slice.lib,
                payload: &folder.join(slice.payload()),
                raw_bytes: slice.raw_bytes,
                sha256: &slice.sha256,
                description: &format!("Part {i} of {}' prebuilt static library ({}: {}).", g.upstream().0, lib.arch, slice.members.join(", ")),
                system_libs: &["stdc++"],
                depends_on: &deps,
                license: &license,
                link_stubs,
            };
            write_crate(g, &dir, &lib_crate)?;
            let z = dir_size(&dir.join("payload"))?;
            crates.push((host, Crate { name, dir, raw_bytes: slice.raw_bytes, payload_bytes: z, borrowed: false }));
        }
    }
    Ok(crates)
}

/// The CUDA runtime's crate: this set's own, or (for a set whose crates use
/// another set's, [`Gen::cudart`]) a copy of that set's, generated the same
/// way so that the workspace packages (the copy itself is not published).
pub fn cudart(g: &Gen) -> Result<Crate> {
    let (main, version) = &g.cudart;
    let name = format!("{main}-cudart");
    let dir = g.out.join("parts").join("cudart");
    let files = g.inp.toolchain;
    let data = fs::read(&files.cudart_static).with_context(|| format!("cannot read {}", files.cudart_static.display()))?;
    let lib = format!("{}_cudart", lib_name(main));
    let lib_crate = LinkCrate {
        name: &name,
        lib: &lib,
        payload: g.inp.cudart_payload,
        raw_bytes: data.len() as u64,
        sha256: &kiln_manifest::sha256_hex(&data),
        description: "NVIDIA's static CUDA runtime (libcudart_static.a, redistributable under the CUDA EULA's Attachment A), which the prebuilt static library calls; it loads libcuda.so.1 at run time.",
        system_libs: &["rt", "pthread", "dl"],
        depends_on: &[],
        license: "",
        link_stubs: &[],
    };
    write_crate_as(g, &dir, &lib_crate, main, version)?;
    g.licenses(&dir)?;
    fs::copy(&files.nvidia_license, dir.join("LICENSE-NVIDIA")).with_context(|| format!("cannot copy {}", files.nvidia_license.display()))?;
    let z = dir_size(&dir.join("payload"))?;
    Ok(Crate { name, dir, raw_bytes: data.len() as u64, payload_bytes: z, borrowed: false })
}

/// Whether the set's static library is built per target: host objects
/// calling the main crate's runtime, not NVIDIA's (docs/static-library.md).
fn per_target(g: &Gen) -> bool {
    g.inp.set.staticlib.as_ref().is_some_and(|l| l.kernels == kiln_pins::LibKernels::PerTarget)
}

/// The CUDA link stand-ins: CUDA 12's (the toolchain's stubs) and each pinned
/// further major's, read by the dist; the drop-in's first slice carries them.
fn stand_ins<'a>(g: &Gen<'a>) -> Result<&'a [crate::link_stubs::StubLib]> {
    let link_stubs = g.inp.link_stubs;
    crate::link_stubs::check_complete(link_stubs)?;
    if link_stubs.is_empty() {
        bail!("no CUDA link stand-ins to package: the dist reads them from the toolchain's stubs and [cuda_link_stubs]");
    }
    Ok(link_stubs)
}

/// A crate whose build script inflates a static library and links it.
struct LinkCrate<'a> {
    name: &'a str,
    /// The library's name (`lib<lib>.a`).
    lib: &'a str,
    /// Its compressed bytes, and the size and sha256 they inflate to.
    payload: &'a Path,
    raw_bytes: u64,
    sha256: &'a str,
    description: &'a str,
    system_libs: &'a [&'a str],
    /// The link crates whose libraries this one calls.
    depends_on: &'a [Dep],
    /// The `license` expression (empty: the CUDA runtime's, a `license-file`).
    license: &'a str,
    /// The CUDA libraries whose stand-ins its build script makes on request (the runtime's crate only).
    link_stubs: &'a [crate::link_stubs::StubLib],
}

fn write_crate(g: &Gen, dir: &Path, c: &LinkCrate) -> Result<()> {
    write_crate_as(g, dir, c, &g.main, &g.version)
}

/// Writes the crate as part of `main`'s crates at `version`.
fn write_crate_as(g: &Gen, dir: &Path, c: &LinkCrate, main: &str, version: &str) -> Result<()> {
    let payload_rel = format!("payload/lib{}.a.zst", c.lib);
    fs::create_dir_all(dir.join("payload"))?;
    let bytes = super::checked_payload(&format!("lib{}.a (crate {})", c.lib, c.name), c.payload, c.raw_bytes, c.sha256)?;
    fs::write(dir.join(&payload_rel), bytes).with_context(|| format!("cannot write {}", dir.join(&payload_rel).display()))?;
    write(
        &dir.join("src/link.rs"),
        format!(
            "// Generated by kiln: what build.rs links.\npub const PAYLOAD: &str = {payload_rel:?};\npub const LIB: &str = {:?};\n\
             pub const SHA256: &str = {:?};\npub const RAW_BYTES: u64 = {};\npub const SYSTEM_LIBS: &[&str] = &{:?};\n{}",
            c.lib,
            c.sha256,
            c.raw_bytes,
            c.system_libs,
            crate::link_stubs::rust_table(c.link_stubs)
        ),
    )?;
    write(&dir.join("build.rs"), g.template("link/build.rs")?)?;
    // The CUDA link stand-ins, one self-contained file (it does nothing where the table is empty).
    write(&dir.join("src/stubs.rs"), g.template("link/stubs.rs")?)?;
    // The library's CPU against the build's target, before anything links.
    write(&dir.join("src/host.rs"), g.template("link/host.rs")?)?;
    // The one bounded reader, the main crate's own (the build script includes it).
    write(&dir.join("src/inflate.rs"), g.template("main/src/inflate.rs")?)?;
    // rustc links only the crates a crate names: without the `extern crate`,
    // the dependency's static library (the CUDA runtime this one calls)
    // would be left out of the link.
    let link_dep: String = c.depends_on.iter().map(|d| format!("\nextern crate {} as _;\n", lib_name(&d.name))).collect();
    write(
        &dir.join("src/lib.rs"),
        format!("//! {}\n//! Linked by its build script; no Rust items. Generated by kiln.\n#![no_std]\n{link_dep}", c.description),
    )?;
    let mut deps =
        String::from("\n[build-dependencies]\nruzstd = { version = \"0.9\", default-features = false, features = [\"std\"] }\nsha2 = \"0.10\"\n");
    if !c.depends_on.is_empty() {
        deps.push_str("\n[dependencies]\n");
        for d in c.depends_on {
            deps.push_str(&format!("{} = {{ version = \"{}\", path = \"../{}\" }}\n", d.name, d.version, d.path));
        }
    }
    let cudart = c.lib.ends_with("cudart");
    let mut vars = Vars::new();
    vars.insert("NAME", c.name.to_string());
    vars.insert("LIB_NAME", lib_name(c.name));
    vars.insert("VERSION", version.to_string());
    vars.insert("DESCRIPTION", c.description.to_string());
    vars.insert("MAIN", main.to_string());
    vars.insert("REPOSITORY", crate::sources::REPOSITORY.to_string());
    vars.insert("LICENSE", c.license.to_string());
    vars.insert("EXTRA_PACKAGE", format!("build = \"build.rs\"\nlinks = \"{}\"\n", c.lib));
    vars.insert("DEPENDENCIES", deps);
    let mut toml = g.filled("part/Cargo.toml.in", &vars)?;
    if cudart {
        toml = toml.replace("license = \"\"", "license-file = \"LICENSE-NVIDIA\"");
    }
    write(&dir.join("Cargo.toml"), toml)
}
