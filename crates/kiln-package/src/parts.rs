//! How the artifacts are spread over crates. Everything at once is several
//! times the crates.io limit, so: the main crate carries the API, the
//! manifest and the PTX (the drop-in's `Module::ptx()`); one optional crate
//! per sm carries its SASS and one per gfx arch its HSACO (consumers can
//! leave archs out), one (`hip`) the per-module bundles of every gfx arch for
//! `Module::hsaco()`; the static library is split by object into as many
//! crates as its size needs, plus one for the CUDA runtime it links.

use kiln_manifest::{Kind, Manifest};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// The drop-in API, the manifest and the PTX.
    Main,
    /// A table of compressed artifacts, optional behind a feature.
    Table { feature: String },
    /// A slice of the static library, linked by its build script.
    Link { index: usize },
    /// NVIDIA's static CUDA runtime, which the static library calls.
    Cudart,
}

#[derive(Clone, Debug)]
pub struct Part {
    /// `sm90`, `gfx90a`, `ffi-0`, `cudart`; empty for the main crate.
    pub suffix: String,
    pub role: Role,
    /// Dist paths of the artifacts it carries (tables and main).
    pub paths: Vec<String>,
}

/// The part crate (and feature) of the HIP code-object bundles.
pub const HIP_BUNDLES: &str = "hip";

fn feature_of(arch: &str) -> String {
    arch.replace('_', "")
}

/// The main crate and the table crates (the static library is split later,
/// by size, in [`crate::slices`]).
pub fn tables(manifest: &Manifest) -> Vec<Part> {
    let mut main = Part { suffix: String::new(), role: Role::Main, paths: Vec::new() };
    let mut tables: Vec<Part> = Vec::new();
    for a in &manifest.artifacts {
        match a.kind {
            Kind::Ptx => main.paths.push(a.path.clone()),
            Kind::Cubin | Kind::Hsaco => {
                let suffix = feature_of(&a.arch);
                match tables.iter_mut().find(|p| p.suffix == suffix) {
                    Some(p) => p.paths.push(a.path.clone()),
                    None => tables.push(Part { suffix: suffix.clone(), role: Role::Table { feature: suffix }, paths: vec![a.path.clone()] }),
                }
            }
            // One crate for every module's bundle: `Module::hsaco()` needs the
            // bundle of every carried gfx arch, whichever the device is.
            Kind::Bundle => match tables.iter_mut().find(|p| p.suffix == HIP_BUNDLES) {
                Some(p) => p.paths.push(a.path.clone()),
                None => {
                    tables.push(Part { suffix: HIP_BUNDLES.into(), role: Role::Table { feature: HIP_BUNDLES.into() }, paths: vec![a.path.clone()] })
                }
            },
            Kind::Staticlib => {}
        }
    }
    tables.sort_by(|a, b| a.suffix.cmp(&b.suffix));
    std::iter::once(main).chain(tables).collect()
}

/// Greedy split of sized items into groups of at most `budget` bytes (an
/// item larger than the budget gets a group of its own), keeping order.
pub fn split(sizes: &[u64], budget: u64) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut used = 0;
    for (i, &s) in sizes.iter().enumerate() {
        if groups.is_empty() || used + s > budget {
            groups.push(Vec::new());
            used = 0;
        }
        groups.last_mut().unwrap().push(i);
        used += s;
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keeps_order_and_budget() {
        assert_eq!(split(&[4, 4, 4, 9, 1], 8), vec![vec![0, 1], vec![2], vec![3], vec![4]]);
        assert_eq!(split(&[], 8), Vec::<Vec<usize>>::new());
    }
}
