//! `cargo xtask verify-crate`: a kiln crate rebuilt from its provenance
//! record and compared byte for byte (kiln_dist::verify_crate does the work).

use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::flags;

pub fn run(pins_path: &Path, v: flags::VerifyCrate) -> Result<()> {
    let pins = crate::load_pins(pins_path)?;
    let root = crate::project_root();
    let (bytes, what) = if Path::new(&v.krate).is_file() || v.krate.ends_with(".crate") {
        let path = Path::new(&v.krate);
        (std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?, path.display().to_string())
    } else {
        let Some((name, version)) = v.krate.split_once('@') else {
            bail!("`{}` is neither a .crate file nor NAME@VERSION (e.g. kiln-candle-kernels-sm90@0.11.1+kiln.1)", v.krate)
        };
        let lookup = kiln_publish::registry::Lookup::from_process()?;
        let registry = kiln_publish::registry::Registry::resolve(&v.registry, &lookup)?;
        crate::say(format!("downloading {name} {version} from registry `{}` ({})", registry.name, registry.index));
        (registry.download(name, version)?, format!("{name} {version} from registry `{}`", registry.name))
    };
    let scratch = tempfile::Builder::new().prefix("kiln-verify-crate-").tempdir().context("cannot make a temporary folder")?;
    let verdict = kiln_dist::verify_crate::check(&pins, &root, &bytes, &what, scratch.path(), &|l| crate::say(l))?;
    if verdict.reproduced {
        println!(
            "{} {}: reproduced: the rebuild is the same .crate, byte for byte ({} files in its record)",
            verdict.name, verdict.version, verdict.files
        );
        return Ok(());
    }
    println!("{} {}: NOT reproduced; {} difference(s):", verdict.name, verdict.version, verdict.differences.len());
    for d in &verdict.differences {
        println!("  {d}");
    }
    bail!("{what} is not what its provenance record says kiln built")
}
