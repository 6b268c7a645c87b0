//! Writes the artifact crates from `template/`: the hand-written logic lives
//! there; this file only fills in names, versions and data tables.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use kiln_manifest::{Kind, Manifest};
use kiln_pins::Pins;
use object::read::archive::ArchiveFile;

use crate::{
    compress,
    parts::{self, Part, Role},
    CRATES_IO_LIMIT,
};

/// Makes a static library named by the first argument from (member name, object file) pairs.
pub type Archiver<'a> = dyn Fn(&str, Vec<(String, PathBuf)>) -> Result<PathBuf> + 'a;

/// What the generator reads besides the manifest.
pub struct Inputs<'a> {
    pub pins: &'a Pins,
    pub manifest: &'a Manifest,
    /// A folder holding every artifact at its manifest path.
    pub dist: &'a Path,
    /// candle-kernels' `src/ffi.rs` from the pinned crate.
    pub ffi_rs: &'a Path,
    /// `libcudart_static.a` and NVIDIA's licence, from the pinned toolchain.
    pub cudart_static: &'a Path,
    pub nvidia_license: &'a Path,
    /// The Apache-2.0 text (from the pinned toolchain's common-licenses).
    pub apache_license: &'a Path,
    /// `crates/kiln-package/template`.
    pub template: &'a Path,
    /// `crates/kiln-manifest` and `crates/kiln-target`, packaged alongside (the crates depend on them).
    pub kiln_manifest: &'a Path,
    pub kiln_target: &'a Path,
    pub kiln_version: &'a str,
    pub repository: &'a str,
    /// Archives objects (name, file) into a static library with the pinned `ar`.
    pub archive: &'a Archiver<'a>,
}

/// One generated crate.
#[derive(Clone, Debug)]
pub struct Crate {
    pub name: String,
    pub dir: PathBuf,
    /// Bytes of artifacts before and after compression.
    pub raw_bytes: u64,
    pub payload_bytes: u64,
}

/// Compressed payload per crate stays under this, leaving room for the
/// tarball's own overhead below crates.io's limit.
const PAYLOAD_BUDGET: u64 = CRATES_IO_LIMIT * 8 / 10;

fn lib_name(name: &str) -> String {
    name.replace('-', "_")
}

fn camel(module: &str) -> String {
    module
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
        })
        .collect()
}

fn fill(template: &str, vars: &BTreeMap<&str, String>) -> Result<String> {
    let mut out = template.to_string();
    for (k, v) in vars {
        out = out.replace(&format!("{{{{{k}}}}}"), v);
    }
    if let Some(at) = out.find("{{") {
        let end = out[at..].find("}}").map_or(out.len(), |e| at + e + 2);
        bail!("template placeholder {} has no value", &out[at..end]);
    }
    Ok(out)
}

fn write(path: &Path, text: impl AsRef<[u8]>) -> Result<()> {
    if let Some(p) = path.parent() {
        fs::create_dir_all(p)?;
    }
    fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// Compresses `src` into `dir/payload/<rel>.zst`; returns (raw, compressed) sizes.
fn payload(dir: &Path, rel: &str, src: &[u8]) -> Result<(u64, u64)> {
    let z = compress::zstd(src)?;
    write(&dir.join("payload").join(format!("{rel}.zst")), &z)?;
    Ok((src.len() as u64, z.len() as u64))
}

fn table(paths: &[String]) -> String {
    let mut s = String::from("&[\n");
    for p in paths {
        let _ = writeln!(s, "    ({p:?}, include_bytes!(\"../payload/{p}.zst\")),");
    }
    s.push(']');
    s
}

/// Generates the crates' workspace in `out` (which must not exist yet).
pub fn generate(inp: &Inputs, out: &Path) -> Result<Vec<Crate>> {
    let pins = inp.pins;
    let main_name = pins.artifact_crate.name.clone();
    let version = pins.crate_version();
    let exact = exact_req(&version);
    let read_t = |rel: &str| fs::read_to_string(inp.template.join(rel)).with_context(|| format!("template file {rel} is missing"));
    let apache = fs::read_to_string(inp.apache_license).with_context(|| format!("cannot read {}", inp.apache_license.display()))?;
    let mit = read_t("LICENSE-MIT")?;
    let licenses = |dir: &Path| -> Result<()> {
        write(&dir.join("LICENSE-MIT"), &mit)?;
        write(&dir.join("LICENSE-APACHE"), &apache)
    };
    let mut crates = Vec::new();
    let targets = {
        let t = &inp.manifest.targets;
        let mut v: Vec<String> = t.cuda_sass.clone();
        v.extend(t.hip.iter().cloned());
        v.join(", ")
    };

    // kiln-target and kiln-manifest, each as its own published crate, their sources as they are.
    let mut vars = BTreeMap::new();
    vars.insert("VERSION", inp.kiln_version.to_string());
    vars.insert("REPOSITORY", inp.repository.to_string());
    for (name, src) in [("kiln-target", inp.kiln_target), ("kiln-manifest", inp.kiln_manifest)] {
        let dir = out.join(name);
        write(&dir.join("Cargo.toml"), fill(&read_t(&format!("{name}/Cargo.toml.in"))?, &vars)?)?;
        fs::create_dir_all(dir.join("src"))?;
        for entry in fs::read_dir(src.join("src"))? {
            let entry = entry?;
            fs::copy(entry.path(), dir.join("src").join(entry.file_name()))?;
        }
        licenses(&dir)?;
        crates.push(Crate { name: name.into(), dir, raw_bytes: 0, payload_bytes: 0 });
    }

    let plan = parts::tables(inp.manifest);
    let link_parts = split_staticlib(inp, out, &main_name, &version, &licenses)?;
    let cudart = cudart_part(inp, out, &main_name, &version, &licenses)?;

    let common = |name: &str| {
        let mut v = BTreeMap::new();
        v.insert("NAME", name.to_string());
        v.insert("LIB_NAME", lib_name(name));
        v.insert("VERSION", version.clone());
        v.insert("MAIN", main_name.clone());
        v.insert("REPOSITORY", inp.repository.to_string());
        v.insert("KILN_VERSION", inp.kiln_version.to_string());
        v.insert("CANDLE_VERSION", pins.candle.version.clone());
        v.insert("TARGETS", targets.clone());
        v.insert("EXACT", exact.clone());
        v.insert("UPSTREAM", pins.candle.crate_name.clone());
        v.insert("UPSTREAM_LIB", lib_name(&pins.candle.crate_name));
        v
    };

    let mut main_deps = String::new();
    let mut features = String::new();
    let mut shim_features = String::new();
    let mut defaults = Vec::new();
    let mut part_pushes = String::new();
    for part in plan.iter().filter(|p| p.role != Role::Main) {
        let Role::Table { feature } = &part.role else { unreachable!() };
        let name = format!("{main_name}-{}", part.suffix);
        let dir = out.join("parts").join(&part.suffix);
        let (raw, z) = write_table_part(inp, &dir, part, &common(&name), &licenses)?;
        crates.push(Crate { name: name.clone(), dir, raw_bytes: raw, payload_bytes: z });
        let _ = writeln!(main_deps, "{name} = {{ version = \"{exact}\", path = \"../parts/{}\", optional = true }}", part.suffix);
        let _ = writeln!(features, "{feature} = [\"dep:{name}\"]");
        let _ = writeln!(shim_features, "{feature} = [\"{main_name}/{feature}\"]");
        defaults.push(format!("\"{feature}\""));
        let _ = writeln!(part_pushes, "    #[cfg(feature = \"{feature}\")]\n    v.push({}::FILES);", lib_name(&name));
    }
    let mut extern_crates = String::new();
    for (suffix, name) in &link_parts {
        let _ = writeln!(main_deps, "{name} = {{ version = \"{exact}\", path = \"../parts/{suffix}\" }}");
        // Not referenced from Rust: without `extern crate` rustc would not link it.
        let _ = writeln!(extern_crates, "extern crate {} as _;", lib_name(name));
    }
    crates.extend(link_parts_info(out, &link_parts)?);
    crates.push(cudart);

    // The main crate.
    let main = out.join("main");
    let main_part = &plan[0];
    let mut raw_total = 0;
    let mut z_total = 0;
    for p in &main_part.paths {
        let bytes = fs::read(inp.dist.join(p)).with_context(|| format!("{p} is not in the dist folder"))?;
        let (r, z) = payload(&main, p, &bytes)?;
        raw_total += r;
        z_total += z;
    }
    write(&main.join("payload/manifest.json"), inp.manifest.to_json())?;
    let mut vars = common(&main_name);
    vars.insert("PART_DEPENDENCIES", main_deps);
    vars.insert("FEATURES", features);
    vars.insert("DEFAULT_FEATURES", defaults.join(", "));
    write(&main.join("Cargo.toml"), fill(&read_t("main/Cargo.toml.in")?, &vars)?)?;
    write(&main.join("README.md"), fill(&read_t("main/README.md.in")?, &vars)?)?;
    for f in ["lib.rs", "payload.rs", "ptx.rs", "kiln.rs", "fatbin.rs", "choose.rs", "image.rs", "hip.rs"] {
        write(&main.join("src").join(f), read_t(&format!("main/src/{f}"))?)?;
    }
    let ffi = fs::read_to_string(inp.ffi_rs).with_context(|| format!("cannot read {}", inp.ffi_rs.display()))?;
    write(
        &main.join("src/ffi.rs"),
        format!(
            "//! candle-kernels {}'s `ffi` declarations, copied verbatim from the pinned crate by kiln;\n\
             //! the functions are defined by the prebuilt static library in the `-ffi-*` part crates.\n\
             #![allow(unexpected_cfgs)]\n{ffi}",
            pins.candle.version
        ),
    )?;
    write(&main.join("src/generated.rs"), generated_rs(pins, main_part, &part_pushes, &extern_crates))?;
    licenses(&main)?;
    crates.push(Crate { name: main_name.clone(), dir: main, raw_bytes: raw_total, payload_bytes: z_total });

    // The drop-in under upstream's name (see template/shim/src/lib.rs.in for why).
    let shim = out.join("shim");
    let mut vars = common(&main_name);
    // candle-core converts `ptx()` into cudarc's `Ptx`: the drop-in always can.
    let _ = writeln!(shim_features, "cudarc = [\"{main_name}/cudarc\"]");
    vars.insert("FEATURES", shim_features);
    vars.insert("DEFAULT_FEATURES", defaults.iter().cloned().chain(["\"cudarc\"".to_string()]).collect::<Vec<_>>().join(", "));
    write(&shim.join("Cargo.toml"), fill(&read_t("shim/Cargo.toml.in")?, &vars)?)?;
    write(&shim.join("README.md"), fill(&read_t("shim/README.md.in")?, &vars)?)?;
    write(&shim.join("src/lib.rs"), fill(&read_t("shim/src/lib.rs.in")?, &vars)?)?;
    licenses(&shim)?;
    crates.push(Crate { name: pins.candle.crate_name.clone(), dir: shim, raw_bytes: 0, payload_bytes: 0 });

    let mut members: Vec<String> = vec!["\"kiln-target\"".into(), "\"kiln-manifest\"".into(), "\"main\"".into(), "\"shim\"".into()];
    members.push("\"parts/*\"".into());
    write(
        &out.join("Cargo.toml"),
        format!("# Generated by kiln: the kernel-artifact crates.\n[workspace]\nresolver = \"2\"\nmembers = [{}]\n", members.join(", ")),
    )?;
    for c in &crates {
        if c.payload_bytes > PAYLOAD_BUDGET {
            bail!(
                "{} would carry {:.1} MB of compressed payload, over the {:.1} MB budget per crate; split it further",
                c.name,
                c.payload_bytes as f64 / 1e6,
                PAYLOAD_BUDGET as f64 / 1e6
            );
        }
    }
    Ok(crates)
}

/// `=0.11.1` for version `0.11.1+kiln.1`: cargo ignores build metadata in a
/// requirement (and warns that it does), so the requirement says only what
/// it means. crates.io (like kiln's test registry) refuses two versions that
/// differ only in metadata, so `=` still names exactly one crate there.
fn exact_req(version: &str) -> String {
    format!("={}", version.split_once('+').map_or(version, |(v, _)| v))
}

fn generated_rs(pins: &Pins, main: &Part, part_pushes: &str, extern_crates: &str) -> String {
    let modules = &pins.candle.modules;
    let mut s = String::from("// Generated by kiln from pins.toml and the dist manifest: do not edit.\n\n");
    s.push_str("#[repr(u32)]\n#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]\npub enum Id {\n");
    for m in modules {
        let _ = writeln!(s, "    {},", camel(m));
    }
    s.push_str("}\n\n");
    let _ = writeln!(s, "pub const ALL_IDS: [Id; {}] = [", modules.len());
    for m in modules {
        let _ = writeln!(s, "    Id::{},", camel(m));
    }
    s.push_str("];\n\n");
    for (i, m) in modules.iter().enumerate() {
        let _ = writeln!(s, "pub const {}: Module = Module {{ index: {i}, name: {m:?} }};", m.to_uppercase());
    }
    let _ = writeln!(s, "\npub(crate) const MODULE_NAMES: [&str; {}] = {:?};", modules.len(), modules);
    let levels: Vec<String> = pins.targets.cuda_ptx.iter().map(|l| format!("({}, {:?})", l.0, l.ptx())).collect();
    let _ = writeln!(s, "pub(crate) const PTX_LEVELS: [(u32, &str); {}] = [{}];\n", levels.len(), levels.join(", "));
    s.push_str(extern_crates);
    let _ = writeln!(s, "\nstatic OWN: &[(&str, &[u8])] = {};\n", table(&main.paths));
    s.push_str("pub(crate) fn part_tables() -> Vec<&'static [(&'static str, &'static [u8])]> {\n");
    s.push_str("    #[allow(unused_mut)]\n    let mut v: Vec<&'static [(&'static str, &'static [u8])]> = vec![OWN];\n");
    s.push_str(part_pushes);
    s.push_str("    v\n}\n");
    s
}

fn write_table_part(
    inp: &Inputs,
    dir: &Path,
    part: &Part,
    vars: &BTreeMap<&str, String>,
    licenses: &dyn Fn(&Path) -> Result<()>,
) -> Result<(u64, u64)> {
    let (mut raw, mut z) = (0, 0);
    for p in &part.paths {
        let bytes = fs::read(inp.dist.join(p)).with_context(|| format!("{p} is not in the dist folder"))?;
        let (r, c) = payload(dir, p, &bytes)?;
        raw += r;
        z += c;
    }
    let mut vars = vars.clone();
    vars.insert("DESCRIPTION", format!("Prebuilt candle kernels for {}.", part.suffix));
    vars.insert("LICENSE", "MIT OR Apache-2.0".into());
    vars.insert("EXTRA_PACKAGE", String::new());
    vars.insert("DEPENDENCIES", String::new());
    write(&dir.join("Cargo.toml"), fill(&fs::read_to_string(inp.template.join("part/Cargo.toml.in"))?, &vars)?)?;
    write(
        &dir.join("src/lib.rs"),
        format!(
            "//! Compressed kernel artifacts for {}, used by the `{}` crate. Generated by kiln.\n#![no_std]\n\n\
             pub static FILES: &[(&str, &[u8])] = {};\n",
            part.suffix,
            vars["MAIN"],
            table(&part.paths)
        ),
    )?;
    licenses(dir)?;
    Ok((raw, z))
}

/// Splits the static library by object into crates of at most the budget.
/// Returns (suffix, crate name) per part, in link order.
fn split_staticlib(inp: &Inputs, out: &Path, main: &str, version: &str, licenses: &dyn Fn(&Path) -> Result<()>) -> Result<Vec<(String, String)>> {
    let Some(lib) = inp.manifest.artifacts.iter().find(|a| a.kind == Kind::Staticlib) else {
        bail!("the manifest has no static library: the drop-in's `ffi` module needs one");
    };
    let bytes = fs::read(inp.dist.join(&lib.path))?;
    let archive = ArchiveFile::parse(&*bytes).with_context(|| format!("{} is not an ar archive", lib.path))?;
    let scratch = out.join(".objects");
    fs::create_dir_all(&scratch)?;
    let mut objects = Vec::new();
    let mut sizes = Vec::new();
    for member in archive.members() {
        let member = member?;
        let name = String::from_utf8_lossy(member.name()).trim_end_matches('/').to_string();
        let data = member.data(&*bytes)?;
        let path = scratch.join(&name);
        fs::write(&path, data)?;
        sizes.push(compress::zstd(data)?.len() as u64);
        objects.push((name, path));
    }
    let mut result = Vec::new();
    for (i, group) in parts::split(&sizes, PAYLOAD_BUDGET * 9 / 10).into_iter().enumerate() {
        let suffix = format!("ffi-{i}");
        let name = format!("{main}-{suffix}");
        let libname = format!("{}_{}", lib_name(main), i);
        let members: Vec<(String, PathBuf)> = group.iter().map(|&k| objects[k].clone()).collect();
        let names: Vec<&str> = members.iter().map(|(n, _)| n.as_str()).collect();
        let archived = (inp.archive)(&libname, members.clone())?;
        let data = fs::read(&archived)?;
        let dir = out.join("parts").join(&suffix);
        write_link_part(
            inp,
            &dir,
            &name,
            version,
            &libname,
            &data,
            &format!("Part {i} of candle-kernels' prebuilt static library ({}: {}).", lib.arch, names.join(", ")),
            &["stdc++"],
            Some(&format!("{main}-cudart")),
        )?;
        // These pieces are candle's kernels, compiled: they carry its licence texts.
        licenses(&dir)?;
        result.push((suffix, name));
    }
    fs::remove_dir_all(&scratch).ok();
    Ok(result)
}

fn link_parts_info(out: &Path, parts: &[(String, String)]) -> Result<Vec<Crate>> {
    parts
        .iter()
        .map(|(suffix, name)| {
            let dir = out.join("parts").join(suffix);
            let z = dir_size(&dir.join("payload"))?;
            let raw = fs::read_to_string(dir.join("src/link.rs"))?
                .lines()
                .find_map(|l| l.strip_prefix("pub const RAW_BYTES: u64 = ").and_then(|v| v.trim_end_matches(';').parse().ok()))
                .unwrap_or(0);
            Ok(Crate { name: name.clone(), dir, raw_bytes: raw, payload_bytes: z })
        })
        .collect()
}

fn dir_size(dir: &Path) -> Result<u64> {
    let mut n = 0;
    for e in fs::read_dir(dir)? {
        let e = e?;
        n += if e.file_type()?.is_dir() { dir_size(&e.path())? } else { e.metadata()?.len() };
    }
    Ok(n)
}

#[allow(clippy::too_many_arguments)]
fn write_link_part(
    inp: &Inputs,
    dir: &Path,
    name: &str,
    version: &str,
    libname: &str,
    data: &[u8],
    description: &str,
    system_libs: &[&str],
    depends_on: Option<&str>,
) -> Result<()> {
    let payload_rel = format!("payload/lib{libname}.a.zst");
    write(&dir.join(&payload_rel), compress::zstd(data)?)?;
    let sha = kiln_manifest::sha256_hex(data);
    write(
        &dir.join("src/link.rs"),
        format!(
            "// Generated by kiln: what build.rs links.\npub const PAYLOAD: &str = {payload_rel:?};\npub const LIB: &str = {libname:?};\n\
             pub const SHA256: &str = {sha:?};\npub const RAW_BYTES: u64 = {};\npub const SYSTEM_LIBS: &[&str] = &{system_libs:?};\n",
            data.len()
        ),
    )?;
    write(&dir.join("build.rs"), fs::read_to_string(inp.template.join("link/build.rs"))?)?;
    // rustc links only the crates a crate names: without the `extern crate`,
    // the dependency's static library (the CUDA runtime this one calls)
    // would be left out of the link.
    let link_dep = depends_on.map_or(String::new(), |d| format!("\nextern crate {} as _;\n", lib_name(d)));
    write(
        &dir.join("src/lib.rs"),
        format!("//! {description}\n//! Linked by its build script; no Rust items. Generated by kiln.\n#![no_std]\n{link_dep}"),
    )?;
    let mut deps =
        String::from("\n[build-dependencies]\nruzstd = { version = \"0.9\", default-features = false, features = [\"std\"] }\nsha2 = \"0.10\"\n");
    if let Some(dep) = depends_on {
        let suffix = dep.rsplit_once('-').map_or(dep, |(_, s)| s);
        deps.push_str(&format!("\n[dependencies]\n{dep} = {{ version = \"{}\", path = \"../{suffix}\" }}\n", exact_req(version)));
    }
    let mut vars = BTreeMap::new();
    vars.insert("NAME", name.to_string());
    vars.insert("LIB_NAME", lib_name(name));
    vars.insert("VERSION", version.to_string());
    vars.insert("DESCRIPTION", description.to_string());
    vars.insert("MAIN", inp.pins.artifact_crate.name.clone());
    vars.insert("REPOSITORY", inp.repository.to_string());
    vars.insert("LICENSE", if libname.ends_with("cudart") { String::new() } else { "MIT OR Apache-2.0".into() });
    vars.insert("EXTRA_PACKAGE", format!("build = \"build.rs\"\nlinks = \"{libname}\"\n"));
    vars.insert("DEPENDENCIES", deps);
    let mut toml = fill(&fs::read_to_string(inp.template.join("part/Cargo.toml.in"))?, &vars)?;
    if libname.ends_with("cudart") {
        toml = toml.replace("license = \"\"", "license-file = \"LICENSE-NVIDIA\"");
    }
    write(&dir.join("Cargo.toml"), toml)
}

fn cudart_part(inp: &Inputs, out: &Path, main: &str, version: &str, licenses: &dyn Fn(&Path) -> Result<()>) -> Result<Crate> {
    let name = format!("{main}-cudart");
    let dir = out.join("parts").join("cudart");
    let data = fs::read(inp.cudart_static).with_context(|| format!("cannot read {}", inp.cudart_static.display()))?;
    let libname = format!("{}_cudart", lib_name(main));
    write_link_part(
        inp,
        &dir,
        &name,
        version,
        &libname,
        &data,
        "NVIDIA's static CUDA runtime (libcudart_static.a, redistributable under the CUDA EULA's Attachment A), which the prebuilt static library calls; it loads libcuda.so.1 at run time.",
        &["rt", "pthread", "dl"],
        None,
    )?;
    licenses(&dir)?;
    fs::copy(inp.nvidia_license, dir.join("LICENSE-NVIDIA")).with_context(|| format!("cannot copy {}", inp.nvidia_license.display()))?;
    let z = dir_size(&dir.join("payload"))?;
    Ok(Crate { name, dir, raw_bytes: data.len() as u64, payload_bytes: z })
}
