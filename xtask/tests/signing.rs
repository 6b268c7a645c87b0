//! `cargo xtask sign` and `verify-crate --trusted-key` on this checkout's real
//! crates (a copy of target/dist's `crates/`, hard-linked), with keys made for
//! the test: a signed dist verifies; a crate whose bytes changed, a statement
//! signed by another key, a statement changed after signing, a missing
//! attestation and a key that is not a public key are each refused with one
//! message naming the crate, the attestation and the key, before any rebuild.
//! Keys openssl writes work too. The signed crate's full verify-crate (the
//! rebuild) is its own test.
//!
//! Needs `cargo xtask dist` of this checkout (`cargo xtask test` runs it first).

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use base64::Engine;
use kiln_manifest::sha256_hex;
use kiln_publish::attest;

const CRATE: &str = "kiln-candle-kernels-sm90";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn xtask(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask")).args(args).current_dir(repo()).output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// target/dist's crates.json and .crate files, hard-linked into `to/crates/`; the crate CRATE's file.
fn dist_copy(to: &Path) -> PathBuf {
    let from = repo().join("target/dist/crates");
    let json = fs::read_to_string(from.join("crates.json")).expect("target/dist has no crates: run `cargo xtask dist` first");
    fs::create_dir_all(to.join("crates")).unwrap();
    fs::write(to.join("crates/crates.json"), &json).unwrap();
    let records: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
    for r in &records {
        let file = r["file"].as_str().unwrap();
        let src = repo().join("target/dist").join(file);
        if fs::hard_link(&src, to.join(file)).is_err() {
            fs::copy(&src, to.join(file)).unwrap();
        }
    }
    to.join(records.iter().find(|r| r["name"] == CRATE).unwrap()["file"].as_str().unwrap())
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_signed_dist_verifies_and_each_bad_signature_is_refused_naming_the_crate() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let krate = dist_copy(&t.join("dist"));
    let name = krate.file_name().unwrap().to_str().unwrap().to_string();
    let bytes = fs::read(&krate).unwrap();

    // A key pair; never replaced.
    let key = t.join("key");
    let (ok, log) = xtask(&["sign", "--generate-key", s(&key)]);
    assert!(ok && log.contains("-----BEGIN PUBLIC KEY-----"), "{log}");
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&fs::metadata(&key).unwrap().permissions()) & 0o777, 0o600);
    let public = t.join("key.pub");
    let (ok, log) = xtask(&["sign", "--generate-key", s(&key)]);
    assert!(!ok && log.contains(&format!("{} exists: kiln does not replace a key", key.display())), "{log}");

    // Signed: one statement naming every crate of crates.json by sha256.
    let (ok, log) = xtask(&["sign", "--key", s(&key), "--dist", s(&t.join("dist"))]);
    assert!(ok && log.contains("signed ") && log.contains(" crates with "), "{log}");
    let attestation = t.join("dist/crates").join(attest::FILE);
    let checked = attest::check(&bytes, "the crate", &name, &attestation, &attest::trusted_key(&public).unwrap(), &public).unwrap();
    assert_eq!(checked.subject, name);
    let line = fs::read_to_string(&attestation).unwrap();
    let envelope: attest::Envelope = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(envelope.payload_type, attest::PAYLOAD_TYPE);
    let body = base64::engine::general_purpose::STANDARD.decode(&envelope.payload).unwrap();
    let statement: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(statement["predicateType"], attest::PREDICATE_TYPE);
    let records: Vec<serde_json::Value> = serde_json::from_str(&fs::read_to_string(t.join("dist/crates/crates.json")).unwrap()).unwrap();
    assert_eq!(statement["subject"].as_array().unwrap().len(), records.len());
    for r in &records {
        let file = Path::new(r["file"].as_str().unwrap()).file_name().unwrap().to_str().unwrap();
        let subject = statement["subject"].as_array().unwrap().iter().find(|s| s["name"] == file);
        assert_eq!(subject.unwrap()["digest"]["sha256"], r["sha256"], "{r}");
    }

    let refused = |krate: &Path, att: Option<&Path>, key: &Path| {
        let mut args = vec!["verify-crate", s(krate), "--trusted-key", s(key)];
        if let Some(a) = att {
            args.extend(["--attestation", s(a)]);
        }
        let (ok, log) = xtask(&args);
        assert!(!ok, "{log}");
        assert!(!log.contains("rebuilding"), "refused before any rebuild:\n{log}");
        log
    };

    // The crate's bytes changed after signing (the attestation beside a copy of it).
    let changed_dir = t.join("changed");
    fs::create_dir(&changed_dir).unwrap();
    let changed = changed_dir.join(&name);
    let mut other = bytes.clone();
    let n = other.len() / 2;
    other[n] ^= 0xff;
    fs::write(&changed, &other).unwrap();
    fs::copy(&attestation, changed_dir.join(attest::FILE)).unwrap();
    let log = refused(&changed, None, &public);
    assert!(log.contains(&format!("{}: signature NOT verified with the trusted key {}", changed.display(), public.display())), "{log}");
    assert!(
        log.contains(&format!(
            "signs {name} with sha256 {}, the crate has sha256 {}: its bytes changed after it was signed",
            sha256_hex(&bytes),
            sha256_hex(&other)
        )),
        "{log}"
    );
    assert!(log.contains(&format!("{}:1:", changed_dir.join(attest::FILE).display())), "names the attestation and its line:\n{log}");

    // Signed by another key.
    let other_key = t.join("other");
    assert!(xtask(&["sign", "--generate-key", s(&other_key)]).0);
    let other_dist = t.join("other-dist");
    dist_copy(&other_dist);
    assert!(xtask(&["sign", "--key", s(&other_key), "--dist", s(&other_dist)]).0);
    let other_attestation = other_dist.join("crates").join(attest::FILE);
    let other_id = attest::keyid(&attest::trusted_key(&t.join("other.pub")).unwrap());
    let log = refused(&krate, Some(&other_attestation), &public);
    assert!(log.contains(&format!("{}: signature NOT verified", krate.display())), "{log}");
    assert!(log.contains(&format!("signed by another key (keyid {other_id}), not the trusted one")), "{log}");

    // The statement changed after signing: the changed crate's sha256 put in, the signature kept.
    let forged_dir = t.join("forged");
    fs::create_dir(&forged_dir).unwrap();
    let forged_body = String::from_utf8(body.clone()).unwrap().replace(&sha256_hex(&bytes), &sha256_hex(&other));
    assert_ne!(forged_body.as_bytes(), &body[..]);
    let forged = attest::Envelope {
        payload: base64::engine::general_purpose::STANDARD.encode(forged_body),
        payload_type: envelope.payload_type.clone(),
        signatures: envelope.signatures.iter().map(|s| attest::Sig { keyid: s.keyid.clone(), sig: s.sig.clone() }).collect(),
    };
    fs::write(forged_dir.join(attest::FILE), serde_json::to_string(&forged).unwrap() + "\n").unwrap();
    fs::write(forged_dir.join(&name), &other).unwrap();
    let log = refused(&forged_dir.join(&name), None, &public);
    assert!(log.contains("the signature by the trusted key does not match the statement: the statement was changed after it was signed"), "{log}");

    // A key required, no attestation anywhere.
    let alone = t.join("alone");
    fs::create_dir(&alone).unwrap();
    fs::write(alone.join(&name), &bytes).unwrap();
    let log = refused(&alone.join(&name), None, &public);
    assert!(log.contains(&format!("no attestation to check with the trusted key {}: give --attestation FILE", public.display())), "{log}");

    // The private key given as the trusted one.
    let log = refused(&krate, None, &key);
    assert!(log.contains(&format!("{} is not an ed25519 public key in PEM", key.display())), "{log}");
    assert!(!log.contains("PRIVATE KEY-----\n"), "no key material is printed:\n{log}");
}

#[test]
fn keys_that_openssl_writes_sign_and_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let krate = dist_copy(&t.join("dist"));
    let (key, public) = (t.join("k.pem"), t.join("k.pub.pem"));
    let openssl = |args: &[&str]| assert!(Command::new("openssl").args(args).status().expect("openssl (Debian's openssl package)").success());
    openssl(&["genpkey", "-algorithm", "ed25519", "-out", s(&key)]);
    openssl(&["pkey", "-in", s(&key), "-pubout", "-out", s(&public)]);
    let (ok, log) = xtask(&["sign", "--key", s(&key), "--dist", s(&t.join("dist"))]);
    assert!(ok, "{log}");
    let name = krate.file_name().unwrap().to_str().unwrap();
    let att = t.join("dist/crates").join(attest::FILE);
    let checked = attest::check(&fs::read(&krate).unwrap(), "c", name, &att, &attest::trusted_key(&public).unwrap(), &public).unwrap();
    assert_eq!(checked.subject, name);
    // A file that is no key at all.
    let (ok, log) = xtask(&["sign", "--key", s(&public), "--dist", s(&t.join("dist"))]);
    assert!(!ok && log.contains(&format!("{} is not an ed25519 private key in PKCS#8 PEM", public.display())), "{log}");
}

#[test]
fn a_signed_crate_of_this_checkout_is_verified_then_reproduced() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let krate = dist_copy(&t.join("dist"));
    let key = t.join("key");
    assert!(xtask(&["sign", "--generate-key", s(&key)]).0);
    assert!(xtask(&["sign", "--key", s(&key), "--dist", s(&t.join("dist"))]).0);
    let (ok, log) = xtask(&["verify-crate", s(&krate), "--trusted-key", s(&t.join("key.pub"))]);
    assert!(ok, "{log}");
    let name = krate.file_name().unwrap().to_str().unwrap();
    assert!(
        log.contains(&format!("{CRATE} 0.11.1+kiln.1: signed: {} names it as {name}", t.join("dist/crates").join(attest::FILE).display())),
        "{log}"
    );
    assert!(log.contains(&format!("{CRATE} 0.11.1+kiln.1: reproduced")), "{log}");
}
