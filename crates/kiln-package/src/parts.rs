//! How the artifacts are spread over crates. Everything at once is several
//! times the crates.io limit, so: the main crate carries the API, the
//! manifest and the PTX (the drop-in's `Module::ptx()`); one optional crate
//! per sm carries its SASS and one per gfx arch its HSACO (consumers can
//! leave archs out), one (`hip`) the per-module bundles of every gfx arch for
//! `Module::hsaco()`; the static library is split by object into as many
//! crates as its size needs, plus one for the CUDA runtime it links.
//!
//! A consumer narrows the per-arch crates to its GPUs with cargo's own means,
//! a `--cfg kiln_gpu="sm90"` in its rustflags (repeatable): each table part is
//! a dependency for the target `cfg(...)` of [`present_cfg`], so cargo builds
//! and downloads only the parts named, and every part when none is.

use kiln_manifest::{Backend, Kind, Manifest, Targets};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// The drop-in API, the manifest and the PTX.
    Main,
    /// A table of compressed artifacts, optional behind a feature, for the
    /// GPUs it serves.
    Table { feature: String, serves: Serves },
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

/// Which GPUs a table part's artifacts are for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Serves {
    /// One arch of a backend, named in `kiln_gpu` by the part's feature (`sm90`, `gfx1100`).
    Gpu(Backend),
    /// Every gfx arch (the HIP bundles).
    EveryHipGpu,
}

/// The part crate (and feature) of the HIP code-object bundles.
pub const HIP_BUNDLES: &str = "hip";

/// The cfg name a consumer narrows the GPUs with (`--cfg kiln_gpu="sm90"`).
pub const GPU_CFG: &str = "kiln_gpu";

/// The `kiln_gpu` values the table parts answer to (their features), with
/// their backend, in the order of the manifest's `targets` (NVIDIA first).
pub fn gpu_values(plan: &[Part], targets: &Targets) -> Vec<(String, Backend)> {
    let mut gpus: Vec<(String, Backend)> = plan
        .iter()
        .filter_map(|p| match &p.role {
            Role::Table { feature, serves: Serves::Gpu(backend) } => Some((feature.clone(), *backend)),
            _ => None,
        })
        .collect();
    let order: Vec<String> = targets.cuda_sass.iter().chain(&targets.hip).map(|t| feature_of(t)).collect();
    gpus.sort_by_key(|(v, _)| order.iter().position(|o| o == v).unwrap_or(usize::MAX));
    gpus
}

/// The cfg predicate (for `[target.'cfg(...)'.dependencies]` and the main
/// crate's `#[cfg(...)]`) under which a table part is part of the build:
/// the consumer names no carried GPU (the default, every GPU; a key-value cfg
/// does not set the bare name, so "none named" is `not(any(...))` over every
/// value), or names one the part serves. `None` for a part that is not a table.
pub fn present_cfg(part: &Part, gpus: &[(String, Backend)]) -> Option<String> {
    let Role::Table { feature, serves } = &part.role else { return None };
    let named = |v: &str| format!("{GPU_CFG} = \"{v}\"");
    let all: Vec<String> = gpus.iter().map(|(v, _)| named(v)).collect();
    let mut mine: Vec<String> = match serves {
        Serves::Gpu(_) => vec![named(feature)],
        Serves::EveryHipGpu => gpus.iter().filter(|(_, b)| *b == Backend::Hip).map(|(v, _)| named(v)).collect(),
    };
    mine.insert(0, format!("not(any({}))", all.join(", ")));
    Some(format!("any({})", mine.join(", ")))
}

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
                    None => tables.push(Part {
                        suffix: suffix.clone(),
                        role: Role::Table { feature: suffix, serves: Serves::Gpu(a.backend) },
                        paths: vec![a.path.clone()],
                    }),
                }
            }
            // One crate for every module's bundle: `Module::hsaco()` needs the
            // bundle of every carried gfx arch, whichever the device is.
            Kind::Bundle => match tables.iter_mut().find(|p| p.suffix == HIP_BUNDLES) {
                Some(p) => p.paths.push(a.path.clone()),
                None => tables.push(Part {
                    suffix: HIP_BUNDLES.into(),
                    role: Role::Table { feature: HIP_BUNDLES.into(), serves: Serves::EveryHipGpu },
                    paths: vec![a.path.clone()],
                }),
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

    fn table(feature: &str, serves: Serves) -> Part {
        Part { suffix: feature.into(), role: Role::Table { feature: feature.into(), serves }, paths: Vec::new() }
    }

    #[test]
    fn a_part_is_present_unless_the_consumer_names_gpus_it_does_not_serve() {
        let plan = [
            Part { suffix: String::new(), role: Role::Main, paths: Vec::new() },
            table("gfx1100", Serves::Gpu(Backend::Hip)),
            table("hip", Serves::EveryHipGpu),
            table("sm90", Serves::Gpu(Backend::Cuda)),
        ];
        let targets = Targets { hip: vec!["gfx1100".into()], code_object_version: 5, cuda_ptx: vec![], cuda_sass: vec!["sm_90".into()] };
        let gpus = gpu_values(&plan, &targets);
        assert_eq!(gpus, [("sm90".to_string(), Backend::Cuda), ("gfx1100".to_string(), Backend::Hip)]);
        let none = r#"not(any(kiln_gpu = "sm90", kiln_gpu = "gfx1100"))"#;
        assert_eq!(present_cfg(&plan[0], &gpus), None);
        assert_eq!(present_cfg(&plan[1], &gpus).unwrap(), format!(r#"any({none}, kiln_gpu = "gfx1100")"#));
        assert_eq!(present_cfg(&plan[2], &gpus).unwrap(), format!(r#"any({none}, kiln_gpu = "gfx1100")"#));
        assert_eq!(present_cfg(&plan[3], &gpus).unwrap(), format!(r#"any({none}, kiln_gpu = "sm90")"#));
    }
}
