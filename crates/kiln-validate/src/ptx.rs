//! PTX text: its ISA version, target and `.entry` kernels.

use anyhow::{bail, Result};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ptx {
    /// `.version`, e.g. `8.4` (decides the oldest driver that can JIT it).
    pub version: String,
    /// `.target`, e.g. `sm_80`.
    pub target: String,
    pub entries: Vec<String>,
}

pub fn read(text: &str) -> Result<Ptx> {
    let mut version = None;
    let mut target = None;
    let mut entries = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(v) = line.strip_prefix(".version ") {
            version = Some(v.trim().to_string());
        } else if let Some(t) = line.strip_prefix(".target ") {
            target = Some(t.split(',').next().unwrap_or("").trim().to_string());
        } else if let Some(pos) = line.find(".entry ") {
            // `.visible .entry name(` or `.entry name (`
            let name: String = line[pos + 7..].trim_start().chars().take_while(|c| *c != '(' && !c.is_whitespace()).collect();
            if !name.is_empty() {
                entries.push(name);
            }
        }
    }
    let (Some(version), Some(target)) = (version, target) else {
        bail!("not PTX: no .version/.target directive");
    };
    entries.sort();
    Ok(Ptx { version, target, entries })
}

/// Reads and checks that the PTX targets `compute_NN` (PTX says `sm_NN`).
pub fn check(text: &str, sm: u32) -> Result<Ptx> {
    let ptx = read(text)?;
    if ptx.target != format!("sm_{sm}") {
        bail!("PTX targets {} but compute_{sm} was asked for", ptx.target);
    }
    if ptx.entries.is_empty() {
        bail!("PTX has no .entry kernels");
    }
    Ok(ptx)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_entries_version_and_target() {
        let text =
            "//\n.version 8.4\n.target sm_80\n.address_size 64\n\n\t// .globl\tb\n.visible .entry b(\n\t.param .u64 x\n)\n{\n}\n.entry a (\n)\n";
        let ptx = super::read(text).unwrap();
        assert_eq!(ptx.version, "8.4");
        assert_eq!(ptx.target, "sm_80");
        assert_eq!(ptx.entries, ["a", "b"]);
        assert!(super::check(text, 90).unwrap_err().to_string().contains("sm_80"));
        assert!(super::read("garbage").is_err());
    }
}
