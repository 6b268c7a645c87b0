//! kiln-target and kiln-manifest, each as its own published crate, their
//! sources as they are: the artifact crates depend on them.

use std::fs;

use anyhow::Result;

use super::{
    text::{write, Gen, Vars},
    Crate,
};

pub fn crates(g: &Gen) -> Result<Vec<Crate>> {
    let mut vars = Vars::new();
    vars.insert("VERSION", g.inp.kiln_version.to_string());
    vars.insert("REPOSITORY", crate::sources::REPOSITORY.to_string());
    let s = g.inp.sources;
    let mut crates = Vec::new();
    for (name, src) in [("kiln-target", &s.kiln_target), ("kiln-manifest", &s.kiln_manifest)] {
        let dir = g.out.join(name);
        write(&dir.join("Cargo.toml"), g.filled(&format!("{name}/Cargo.toml.in"), &vars)?)?;
        fs::create_dir_all(dir.join("src"))?;
        for entry in fs::read_dir(src.join("src"))? {
            let entry = entry?;
            fs::copy(entry.path(), dir.join("src").join(entry.file_name()))?;
        }
        g.licenses(&dir)?;
        crates.push(Crate { name: name.into(), dir, raw_bytes: 0, payload_bytes: 0, borrowed: false });
    }
    Ok(crates)
}
