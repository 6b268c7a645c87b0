//! The same module must export the same kernels on every target: a kernel
//! that one compiler dropped (an `#if` on the arch, a failed template) would
//! otherwise surface only when a user on that GPU calls it.

use std::collections::{BTreeMap, BTreeSet};

/// One module's kernel sets, by target name (`compute_80`, `sm_90`, `gfx90a`).
#[derive(Default, Debug)]
pub struct KernelSets {
    sets: BTreeMap<String, BTreeSet<String>>,
}

impl KernelSets {
    pub fn add(&mut self, target: &str, kernels: &[String]) {
        self.sets.insert(target.to_string(), kernels.iter().cloned().collect());
    }

    /// Differences against `reference`'s set (the PTX), one line per target
    /// that differs, naming up to 8 kernels each way. Empty when all agree.
    pub fn differences(&self, reference: &str) -> Vec<String> {
        let Some(want) = self.sets.get(reference) else {
            return vec![format!("no {reference} artifact to compare with")];
        };
        let mut out = Vec::new();
        for (target, have) in &self.sets {
            if target == reference {
                continue;
            }
            let missing: Vec<&String> = want.difference(have).collect();
            let extra: Vec<&String> = have.difference(want).collect();
            if missing.is_empty() && extra.is_empty() {
                continue;
            }
            let list = |v: &[&String]| {
                let mut s = v.iter().take(8).map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
                if v.len() > 8 {
                    s.push_str(&format!(", ... ({} in all)", v.len()));
                }
                s
            };
            let mut line = format!("{target}: {} kernels vs {} in {reference}", have.len(), want.len());
            if !missing.is_empty() {
                line.push_str(&format!("; missing {}", list(&missing)));
            }
            if !extra.is_empty() {
                line.push_str(&format!("; extra {}", list(&extra)));
            }
            out.push(line);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_missing_and_extra_kernels_per_target() {
        let mut k = KernelSets::default();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        k.add("compute_80", &s(&["a", "b", "c"]));
        k.add("sm_90", &s(&["a", "b", "c"]));
        k.add("gfx90a", &s(&["a", "c", "z"]));
        let d = k.differences("compute_80");
        assert_eq!(d, ["gfx90a: 3 kernels vs 3 in compute_80; missing b; extra z"]);
        assert!(KernelSets::default().differences("compute_80")[0].contains("no compute_80"));
    }
}
