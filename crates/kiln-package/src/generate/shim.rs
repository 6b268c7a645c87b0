//! The drop-in under upstream's name (template/shim/src/lib.rs.in says why):
//! re-exports the main crate, with the same features.

use anyhow::Result;

use super::{
    main_crate::Deps,
    text::{write, Gen},
    Crate,
};

pub fn write_crate(g: &Gen, deps: &Deps) -> Result<Crate> {
    let dir = g.out.join("shim");
    let mut vars = g.common(&g.main);
    // candle-core converts `ptx()` into cudarc's `Ptx`: the drop-in always can.
    vars.insert("FEATURES", format!("{}cudarc = [\"{}/cudarc\"]\n", deps.shim_features, g.main));
    vars.insert("DEFAULT_FEATURES", deps.defaults.iter().cloned().chain(["\"cudarc\"".to_string()]).collect::<Vec<_>>().join(", "));
    for f in ["Cargo.toml", "README.md", "src/lib.rs"] {
        write(&dir.join(f), g.filled(&format!("shim/{f}.in"), &vars)?)?;
    }
    g.licenses(&dir)?;
    Ok(Crate { name: g.upstream().0.to_string(), dir, raw_bytes: 0, payload_bytes: 0, borrowed: false })
}
