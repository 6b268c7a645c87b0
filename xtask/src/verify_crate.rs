//! `cargo xtask verify-crate`: a kiln crate rebuilt from its provenance
//! record and compared byte for byte (kiln_dist::verify_crate does the work).

use std::path::Path;

use anyhow::{bail, Result};

use kiln_manifest::shown;
use kiln_publish::attest;

use crate::flags;

pub fn run(pins_path: &Path, v: flags::VerifyCrate) -> Result<()> {
    let pins = crate::load_pins(pins_path)?;
    let root = crate::project_root();
    let path = Path::new(&v.krate);
    let (bytes, what, file_name, beside) = if path.is_file() || v.krate.ends_with(".crate") {
        let bytes = kiln_package::crate_file::read(path)?;
        let file_name = path.file_name().map_or(v.krate.clone(), |n| n.to_string_lossy().into_owned());
        (bytes, path.display().to_string(), file_name, path.parent().map(|d| d.join(attest::FILE)))
    } else {
        let (name, version) = kiln_publish::registry::name_at_version(&v.krate, "verify-crate's CRATE")?;
        let (name, version) = (name.as_str(), version.as_str());
        let lookup = kiln_publish::registry::Lookup::from_process()?;
        let registry = kiln_publish::registry::Registry::resolve(&v.registry, &lookup)?;
        let bytes = {
            crate::say(format!("downloading {} {} from registry `{}` ({})", shown(name), shown(version), registry.name, shown(&registry.index)));
            registry.download(name, version)?
        };
        let (name, version) = (shown(name), shown(version));
        (bytes, format!("{name} {version} from registry `{}`", registry.name), format!("{name}-{version}.crate"), None)
    };
    // The signature first: a crate that is not what was signed needs no rebuild.
    let signature = match attest::verdict(&bytes, &what, &file_name, v.attestation.as_deref(), beside.as_deref(), v.trusted_key.as_deref())? {
        attest::Verdict::Verified { attestation, checked } => {
            format!(
                "signed: {} names it as {} and is signed by the trusted key (keyid {})",
                attestation.display(),
                checked.subject,
                shown(&checked.keyid)
            )
        }
        attest::Verdict::Unchecked(a) => format!("signature not checked: {} is there, give --trusted-key KEY.pub to check it", a.display()),
        attest::Verdict::Absent => "no signature checked: no attestation given or beside the crate (docs/signing.md)".to_string(),
    };
    crate::say(format!("{what}: {signature}"));
    // The rebuild's folder: a scratch folder of the cache, removed on an error and on SIGINT/SIGTERM,
    // and, held by its lock while this runs, by the next run or `cache gc` after a SIGKILL.
    kiln_toolchain::cache::remove_scratch_on_signal()?;
    let scratch = kiln_toolchain::Cache::from_env()?.scratch("verify-crate")?;
    let opt_in = v.rebuild_opt_in_set;
    let verdict = kiln_dist::verify_crate::check_with(&pins, &root, &bytes, &what, scratch.path(), opt_in, &|l| crate::say(l))?;
    if verdict.reproduced {
        println!(
            "{} {}: reproduced: the rebuild is the same .crate, byte for byte ({} files in its record)",
            verdict.name, verdict.version, verdict.files
        );
        println!("{} {}: {signature}", verdict.name, verdict.version);
        return Ok(());
    }
    println!("{} {}: NOT reproduced; {} difference(s):", verdict.name, verdict.version, verdict.differences.len());
    for d in &verdict.differences {
        println!("  {d}");
    }
    bail!("{what} is not what its provenance record says kiln built")
}
