//! The same module must export the same kernels on every target: a kernel
//! that one compiler dropped (an `#if` on the arch, a failed template) would
//! otherwise surface only when a user on that GPU calls it.
//!
//! candle does gate some kernels on the NVIDIA arch on purpose (the fp8
//! ones need `__CUDA_ARCH__ >= 890`), so for CUDA targets "the same" means:
//! everything the floor PTX has, and never fewer kernels on a newer arch.

use std::collections::{BTreeMap, BTreeSet};

/// How a target's kernels must relate to the reference's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Exactly the reference's kernels (AMD: compiled as one fixed arch level).
    Equal,
    /// At least the reference's kernels (newer NVIDIA archs add gated ones).
    Superset,
}

/// One module's kernel sets, by target name (`compute_80`, `sm_90`, `gfx90a`).
#[derive(Default, Debug)]
pub struct KernelSets {
    sets: BTreeMap<String, BTreeSet<String>>,
}

fn list(v: &[&String]) -> String {
    let mut s = v.iter().take(8).map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
    if v.len() > 8 {
        s.push_str(&format!(", ... ({} in all)", v.len()));
    }
    s
}

impl KernelSets {
    pub fn add(&mut self, target: &str, kernels: &[String]) {
        self.sets.insert(target.to_string(), kernels.iter().cloned().collect());
    }

    /// Differences against `reference`'s set (the floor PTX), one line per
    /// target that breaks its rule. Empty when all agree.
    pub fn differences(&self, reference: &str, rule: impl Fn(&str) -> Rule) -> Vec<String> {
        let Some(want) = self.sets.get(reference) else {
            return vec![format!("no {reference} artifact to compare with")];
        };
        let mut out = Vec::new();
        for (target, have) in &self.sets {
            if target == reference {
                continue;
            }
            let missing: Vec<&String> = want.difference(have).collect();
            let extra: Vec<&String> = match rule(target) {
                Rule::Equal => have.difference(want).collect(),
                Rule::Superset => Vec::new(),
            };
            if missing.is_empty() && extra.is_empty() {
                continue;
            }
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

    /// Each of `targets` must carry every kernel of `reference`: one line per
    /// target that lacks some (extra kernels are fine).
    pub fn covering(&self, reference: &str, targets: &[String]) -> Vec<String> {
        let Some(want) = self.sets.get(reference) else { return Vec::new() };
        let mut out = Vec::new();
        for t in targets {
            let Some(have) = self.sets.get(t) else { continue };
            let missing: Vec<&String> = want.difference(have).collect();
            if !missing.is_empty() {
                out.push(format!("{t} lacks {} kernel(s) that {reference} has: {}", missing.len(), list(&missing)));
            }
        }
        out
    }

    /// Each target in `ascending` (by arch level) must keep every kernel of
    /// the one before it.
    pub fn monotonic(&self, ascending: &[String]) -> Vec<String> {
        let present: Vec<&String> = ascending.iter().filter(|t| self.sets.contains_key(*t)).collect();
        let mut out = Vec::new();
        for pair in present.windows(2) {
            let (lo, hi) = (&self.sets[pair[0]], &self.sets[pair[1]]);
            let lost: Vec<&String> = lo.difference(hi).collect();
            if !lost.is_empty() {
                out.push(format!("{} lacks {} kernel(s) that {} has: {}", pair[1], lost.len(), pair[0], list(&lost)));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn amd_targets_must_match_exactly_and_cuda_targets_may_add() {
        let mut k = KernelSets::default();
        k.add("compute_80", &s(&["a", "b", "c"]));
        k.add("sm_90", &s(&["a", "b", "c", "f8"]));
        k.add("gfx90a", &s(&["a", "c", "z"]));
        let rule = |t: &str| if t.starts_with("gfx") { Rule::Equal } else { Rule::Superset };
        assert_eq!(k.differences("compute_80", rule), ["gfx90a: 3 kernels vs 3 in compute_80; missing b; extra z"]);
        assert!(KernelSets::default().differences("compute_80", rule)[0].contains("no compute_80"));
    }

    #[test]
    fn covering_names_each_target_that_lacks_a_kernel() {
        let mut k = KernelSets::default();
        k.add("sm_89", &s(&["a", "f8"]));
        k.add("gfx1030", &s(&["a", "f8", "extra"]));
        k.add("gfx90a", &s(&["a"]));
        assert_eq!(k.covering("sm_89", &s(&["gfx1030", "gfx90a"])), ["gfx90a lacks 1 kernel(s) that sm_89 has: f8"]);
        assert!(k.covering("sm_80", &s(&["gfx90a"])).is_empty(), "no such reference built: nothing to cover");
    }

    #[test]
    fn newer_archs_never_lose_kernels() {
        let mut k = KernelSets::default();
        k.add("sm_80", &s(&["a"]));
        k.add("sm_89", &s(&["a", "f8"]));
        k.add("sm_90", &s(&["a"]));
        assert_eq!(k.monotonic(&s(&["sm_80", "sm_86", "sm_89", "sm_90"])), ["sm_90 lacks 1 kernel(s) that sm_89 has: f8"]);
    }
}
