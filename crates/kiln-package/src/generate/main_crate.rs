//! The main crate: the drop-in API (the template's `main/src`), the manifest
//! and the PTX, the generated module table, candle's `ffi` declarations, and
//! a dependency on every part crate (the tables optional, behind features,
//! and built only for the GPUs the consumer names: [`crate::parts::present_cfg`]),
//! and the build script that checks what the consumer named.

use std::{fmt::Write as _, fs};

use anyhow::{Context, Result};

use super::{
    payload,
    text::{lib_name, table, write, Gen},
    Crate,
};
use crate::parts::{Part, Role, GPU_CFG};
use crate::record::{EMBEDDED_MANIFEST, PAYLOAD_DIR};
use kiln_manifest::kiln_target::host_object::Host;

/// What the main crate (and the shim, for the features) says about the parts.
#[derive(Default)]
pub struct Deps {
    /// `[dependencies]` lines for the link parts.
    pub dependencies: String,
    /// `[target.'cfg(...)'.dependencies]` tables for the table parts.
    target_dependencies: String,
    /// `[features]` lines: one per table part.
    pub features: String,
    /// The shim's features, forwarding to the main crate's.
    pub shim_features: String,
    pub defaults: Vec<String>,
    /// `generated.rs`: the table parts' `FILES`, each behind its feature.
    part_pushes: String,
    /// `generated.rs`: the link parts, named so that rustc links them.
    extern_crates: String,
    /// `generated.rs`: each table part's feature and the folder of its artifacts.
    table_parts: Vec<(String, String)>,
    /// `gpus.rs`: the `kiln_gpu` values, with their backend.
    gpus: Vec<(String, kiln_manifest::Backend)>,
    /// `gpus.rs`: the host CPUs the link parts carry code for (none: no static library).
    hosts: Vec<&'static str>,
}

impl Deps {
    /// Deps for the table parts of `plan` to come: `kiln_gpu` answers to theirs.
    pub fn new(plan: &[Part], targets: &kiln_manifest::Targets) -> Deps {
        Deps { gpus: crate::parts::gpu_values(plan, targets), ..Default::default() }
    }

    /// A table part, optional behind its feature (on by default), and a
    /// dependency only for the GPUs the consumer names (every one by default).
    pub fn table(&mut self, g: &Gen, part: &Part, name: &str) {
        let Role::Table { feature, .. } = &part.role else { unreachable!("only table parts are optional") };
        let present = crate::parts::present_cfg(part, &self.gpus).expect("a table part");
        let _ = writeln!(
            self.target_dependencies,
            "\n[target.'cfg({present})'.dependencies]\n{name} = {{ version = \"{}\", path = \"../parts/{}\", optional = true }}",
            g.exact, part.suffix
        );
        let _ = writeln!(self.features, "{feature} = [\"dep:{name}\"]");
        let _ = writeln!(self.shim_features, "{feature} = [\"{}/{feature}\"]", g.main);
        self.defaults.push(format!("\"{feature}\""));
        let _ = writeln!(self.part_pushes, "    #[cfg(all(feature = \"{feature}\", {present}))]\n    v.push({}::FILES);", lib_name(name));
        // A table holds one arch's artifacts (or the bundles): one folder of
        // the dist, `cuda/sm_90/` (the static library's cubins below it too).
        let folder = part.paths.first().map_or(String::new(), |p| p.split_inclusive('/').take(2).collect());
        self.table_parts.push((feature.clone(), folder));
    }

    /// A link part of host code for `host`: always on where the library is built
    /// for one CPU; built for several, each CPU's parts are dependencies only of a
    /// build for that CPU (`cfg(target_arch)`), so a consumer downloads its own.
    pub fn link(&mut self, g: &Gen, c: &Crate, host: &'static Host, several: bool) {
        let suffix = c.name.strip_prefix(&format!("{}-", g.main)).unwrap_or(&c.name);
        let dep = format!("{} = {{ version = \"{}\", path = \"../parts/{suffix}\" }}", c.name, g.exact);
        // Not referenced from Rust: without `extern crate` rustc would not link it.
        let krate = format!("extern crate {} as _;", lib_name(&c.name));
        if several {
            let cfg = format!("target_arch = \"{}\"", host.cpu);
            let _ = writeln!(self.target_dependencies, "\n[target.'cfg({cfg})'.dependencies]\n{dep}");
            let _ = writeln!(self.extern_crates, "#[cfg({cfg})]\n{krate}");
        } else {
            let _ = writeln!(self.dependencies, "{dep}");
            let _ = writeln!(self.extern_crates, "{krate}");
        }
        if !self.hosts.contains(&host.cpu) {
            self.hosts.push(host.cpu);
        }
    }
}

/// The template's hand-written sources of the main crate.
const SOURCES: [&str; 12] =
    ["lib.rs", "inflate.rs", "payload.rs", "ptx.rs", "kiln.rs", "fatbin.rs", "choose.rs", "image.rs", "hip.rs", "narrow.rs", "launch.rs", "hosts.rs"];

pub fn write_crate(g: &Gen, main_part: &Part, deps: &Deps) -> Result<Crate> {
    let dir = g.out.join("main");
    let (mut raw, mut z) = (0, 0);
    for p in &main_part.paths {
        let (r, c) = payload(g.inp, &dir, p)?;
        raw += r;
        z += c;
    }
    // The manifest as JSON is 5 MB: embedded as text it made each consumer's build of this crate
    // slower (docs/benchmarks.md, "Kiln's crates in a consumer's build"); `kiln::manifest_json()`
    // inflates it at first use and checks it against the sha256 generated.rs gives it.
    let manifest_z = crate::compress::zstd(g.inp.manifest_json.as_bytes())?;
    write(&dir.join(PAYLOAD_DIR).join(EMBEDDED_MANIFEST), manifest_z)?;
    let mut vars = g.common(&g.main);
    vars.insert("PART_DEPENDENCIES", deps.dependencies.clone());
    vars.insert("FEATURES", deps.features.clone());
    vars.insert("DEFAULT_FEATURES", deps.defaults.join(", "));
    vars.insert("TARGET_DEPENDENCIES", deps.target_dependencies.clone());
    write(&dir.join("Cargo.toml"), g.filled("main/Cargo.toml.in", &vars)?)?;
    write(&dir.join("build.rs"), g.template("main/build.rs")?)?;
    write(&dir.join("src/gpus.rs"), gpus_rs(deps))?;
    write(&dir.join("README.md"), g.filled("main/README.md.in", &vars)?)?;
    for f in SOURCES {
        write(&dir.join("src").join(f), g.template(&format!("main/src/{f}"))?)?;
    }
    let ffi_rs = g.inp.ffi_rs;
    let ffi = fs::read_to_string(ffi_rs).with_context(|| format!("cannot read {}", ffi_rs.display()))?;
    write(
        &dir.join("src/ffi.rs"),
        format!(
            "//! {} {}'s `ffi` declarations, copied verbatim from the pinned crate by kiln;\n\
             //! the functions are defined by the prebuilt static library in the `-ffi-*` part crates.\n\
             #![allow(unexpected_cfgs)]\n{ffi}",
            g.upstream().0,
            g.upstream().1
        ),
    )?;
    write(&dir.join("src/generated.rs"), generated_rs(g, main_part, deps))?;
    g.licenses(&dir)?;
    Ok(Crate { name: g.main.clone(), dir, raw_bytes: raw, payload_bytes: z, borrowed: false })
}

/// The module ids and names, the PTX levels, and the payload tables.
fn generated_rs(g: &Gen, main: &Part, deps: &Deps) -> String {
    let set = g.inp.set;
    let modules = &set.modules;
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
    let lib = set.staticlib.as_ref().map_or("", |l| l.name.as_str());
    let _ = writeln!(s, "/// The static library, whose per-target cubins are the modules `<LIBRARY>/<file stem>`.");
    let _ = writeln!(s, "pub(crate) const LIBRARY: &str = {lib:?};");
    let levels: Vec<String> = set.targets.cuda_ptx.iter().map(|l| format!("({}, {:?})", l.0, l.ptx())).collect();
    let _ = writeln!(s, "pub(crate) const PTX_LEVELS: [(u32, &str); {}] = [{}];\n", levels.len(), levels.join(", "));
    let _ = writeln!(s, "/// Each optional part: its feature, the dist folder of what it carries, and whether its feature is on.");
    let _ = writeln!(s, "pub(crate) const TABLE_PARTS: [TablePart; {}] = [", deps.table_parts.len());
    for (f, dir) in &deps.table_parts {
        let _ = writeln!(s, "    TablePart {{ feature: {f:?}, dir: {dir:?}, feature_on: cfg!(feature = {f:?}) }},");
    }
    s.push_str("];\n\n");
    let _ = writeln!(s, "/// Each `{GPU_CFG}` value this release answers to, and whether the consumer named it.");
    let _ = writeln!(s, "pub(crate) const GPU_NAMED: [(&str, bool); {}] = [", deps.gpus.len());
    for (v, _) in &deps.gpus {
        let _ = writeln!(s, "    ({v:?}, cfg!({GPU_CFG} = {v:?})),");
    }
    s.push_str("];\n\n");
    s.push_str(&deps.extern_crates);
    let json = g.inp.manifest_json;
    let manifest = format!("{PAYLOAD_DIR}/{EMBEDDED_MANIFEST}");
    let _ = writeln!(s, "\n/// The embedded manifest ({manifest}): its size and sha256 as JSON.");
    let _ = writeln!(
        s,
        "pub(crate) const MANIFEST_JSON: (&str, u64, &str) = ({manifest:?}, {}, {:?});",
        json.len(),
        kiln_manifest::sha256_hex(json.as_bytes())
    );
    let _ = writeln!(s, "pub(crate) static MANIFEST_JSON_ZST: &[u8] = include_bytes!(\"../{manifest}\");\n");
    s.push_str(&crate::record::recorded_rs(g.inp.manifest));
    let _ = writeln!(s, "\nstatic OWN: &[(&str, &[u8])] = {};\n", table(&main.paths));
    s.push_str("pub(crate) fn part_tables() -> Vec<&'static [(&'static str, &'static [u8])]> {\n");
    s.push_str("    #[allow(unused_mut)]\n    let mut v: Vec<&'static [(&'static str, &'static [u8])]> = vec![OWN];\n");
    s.push_str(&deps.part_pushes);
    s.push_str("    v\n}\n");
    s
}

/// `gpus.rs`, which the build script includes: the values `kiln_gpu` takes.
fn gpus_rs(deps: &Deps) -> String {
    let mut s = format!(
        "// Generated by kiln from the dist manifest: do not edit.\n\n/// The `{GPU_CFG}` values this release answers to, each with its backend.\n"
    );
    let _ = writeln!(s, "const KILN_GPUS: [(&str, &str); {}] = [", deps.gpus.len());
    for (v, backend) in &deps.gpus {
        let _ = writeln!(s, "    ({v:?}, {:?}),", backend.as_str());
    }
    s.push_str("];\n");
    let _ = writeln!(s, "/// The CPUs (`target_arch`) its prebuilt static library has host code for; empty: it has none.");
    let _ = writeln!(s, "const KILN_HOSTS: [&str; {}] = {:?};", deps.hosts.len(), deps.hosts);
    s
}

/// `quantized` → `Quantized`, `fused_ops` → `FusedOps`.
fn camel(module: &str) -> String {
    module
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
        })
        .collect()
}
