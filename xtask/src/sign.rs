//! `cargo xtask sign`: the dist's crates in one signed in-toto statement
//! (kiln_publish::attest does the work; docs/signing.md).

use anyhow::Result;

use crate::flags::Sign;

pub fn run(f: Sign) -> Result<()> {
    if let Some(path) = f.generate_key {
        let public = kiln_publish::attest::generate_key(&path)?;
        let public_path = kiln_publish::attest::public_path(&path);
        println!("wrote the private key {} (keep it secret) and the public key {}:", path.display(), public_path.display());
        print!("{public}");
        println!(
            "sign with `cargo xtask sign --key {}`; consumers check with `cargo xtask verify-crate FILE --trusted-key {}`",
            path.display(),
            public_path.display()
        );
        return Ok(());
    }
    let key_file = f.key.expect("clap requires --key without --generate-key");
    let key = kiln_publish::attest::signing_key(&key_file)?;
    let (file, n) = kiln_publish::attest::sign(&f.dist, &key)?;
    let keyid = kiln_publish::attest::keyid(&key.verifying_key());
    println!("signed {n} crates with {} (keyid {keyid}) into {}", key_file.display(), file.display());
    Ok(())
}
