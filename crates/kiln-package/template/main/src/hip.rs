//! `Module::hsaco()`: the module's code objects for every gfx arch this crate
//! was built for, the LLVM generic targets' included, as one clang offload
//! bundle (`hip/bundle/<module>.hipfb`, in the `hip` part crate).
//! `hipModuleLoadData` reads the bundle and loads the entry whose arch is the
//! device's, else, from ROCm 6.4 on, the entry of its family's generic target
//! (the rule `kiln::select` follows); a device it finds neither for gets
//! `hipErrorNoBinaryForGpu` from the runtime (`kiln::select_on_hip` says so,
//! naming the ROCm needed, before any load).

use std::sync::OnceLock;

use crate::{payload, MODULE_NAMES};

pub(crate) fn bundle(index: usize) -> &'static [u8] {
    static BUNDLES: OnceLock<Vec<OnceLock<&'static [u8]>>> = OnceLock::new();
    let cells = BUNDLES.get_or_init(|| MODULE_NAMES.iter().map(|_| OnceLock::new()).collect());
    cells[index].get_or_init(|| {
        let module = MODULE_NAMES[index];
        let path = format!("hip/bundle/{module}.hipfb");
        if payload::find(&path).is_none() {
            if let Some(part) = crate::narrow::part_of(&path).filter(|p| p.feature_on) {
                panic!(
                    "{}: Module::hsaco() of {module} needs the HIP code-object bundles (the `{}` part), which this build leaves out: \
                     it is {}, no AMD GPU; name yours, e.g. {}",
                    env!("CARGO_PKG_NAME"),
                    part.feature,
                    crate::narrow::describe(),
                    first_hip_value().map_or_else(|| "an AMD GPU's value".to_string(), crate::narrow::advice)
                );
            }
            let archs: Vec<String> = crate::kiln::manifest()
                .artifacts
                .iter()
                .filter(|a| a.module == module && a.kind == crate::kiln::Kind::Bundle)
                .map(|a| a.arch.clone())
                .collect();
            panic!(
                "{}: Module::hsaco() of {module} needs the HIP code-object bundles, which come with the crate's `hip` feature \
                 (off in this build){}",
                env!("CARGO_PKG_NAME"),
                if archs.is_empty() { String::new() } else { format!("; its bundle holds {}", archs.join(", ")) }
            );
        }
        let bytes = payload::verified(&path).unwrap_or_else(|e| panic!("{module}: {e}"));
        Box::leak(bytes.into_boxed_slice())
    })
}

/// The `kiln_gpu` value of a gfx arch kiln built, for the example.
fn first_hip_value() -> Option<&'static str> {
    let a = crate::kiln::built().artifacts.iter().find(|a| a.kind == crate::kiln::Kind::Hsaco)?;
    crate::narrow::part_of(&a.path).map(|p| p.feature)
}
