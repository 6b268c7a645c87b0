//! `Module::hsaco()`: the module's code objects for every gfx arch this crate
//! was built for, as one clang offload bundle (`hip/bundle/<module>.hipfb`,
//! in the `hip` part crate). `hipModuleLoadData` reads the bundle and loads
//! the entry whose arch is the device's; a device whose arch the bundle lacks
//! gets `hipErrorNoBinaryForGpu` from the runtime (kiln's `kiln::select` says
//! so before any load).

use std::sync::OnceLock;

use crate::{payload, MODULE_NAMES};

pub(crate) fn bundle(index: usize) -> &'static [u8] {
    static BUNDLES: OnceLock<Vec<OnceLock<&'static [u8]>>> = OnceLock::new();
    let cells = BUNDLES.get_or_init(|| MODULE_NAMES.iter().map(|_| OnceLock::new()).collect());
    cells[index].get_or_init(|| {
        let module = MODULE_NAMES[index];
        let path = format!("hip/bundle/{module}.hipfb");
        if payload::find(&path).is_none() {
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
