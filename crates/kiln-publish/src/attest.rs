//! Signed statements of what a dist packaged, checkable with a local key.
//!
//! [`sign`] writes one [in-toto Statement v1] naming every `.crate` of
//! `crates/crates.json` (file name and sha256) with a [SLSA provenance v1]
//! predicate, in a [DSSE] envelope signed with an ed25519 key, as one line of
//! `crates/attestation.intoto.jsonl`: the shape GitHub's
//! `actions/attest-build-provenance` signs too (there with a Sigstore
//! certificate instead of a key; docs/signing.md). [`check`] is what
//! `cargo xtask verify-crate --trusted-key` runs: some line of the file must be
//! signed by the trusted key and name the crate's sha256; anything else is one
//! error naming the crate, the file and the key.
//!
//! Keys are the PEM files openssl writes (`openssl genpkey -algorithm ed25519`,
//! `openssl pkey -pubout`) or [`generate_key`] does.
//!
//! [in-toto Statement v1]: https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md
//! [SLSA provenance v1]: https://slsa.dev/spec/v1.0/provenance
//! [DSSE]: https://github.com/secure-systems-lab/dsse/blob/master/protocol.md

use std::{
    fs,
    io::{Read, Write},
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use base64::{
    engine::general_purpose::{STANDARD as B64, STANDARD_PAD_INDIFFERENT, URL_SAFE_PAD_INDIFFERENT},
    Engine,
};
use ed25519_dalek::{
    pkcs8::{spki::der::pem::LineEnding, DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey},
    Signature, Signer, SigningKey, VerifyingKey,
};
use kiln_manifest::{sha256_hex, shown};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The signed statements, in the dist's `crates/` folder beside `crates.json`.
pub const FILE: &str = "attestation.intoto.jsonl";
/// DSSE's payload type for in-toto statements.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
pub const PREDICATE_TYPE: &str = "https://slsa.dev/provenance/v1";
/// What the statement says built the subjects (SLSA's `buildType`).
pub const BUILD_TYPE: &str = concat!(kiln_package::repository!(), "/blob/main/docs/signing.md#dist-v1");

/// A DSSE envelope, as JSON.
#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    pub payload_type: String,
    /// The statement's bytes, base64.
    pub payload: String,
    pub signatures: Vec<Sig>,
}

#[derive(Serialize, Deserialize, Debug)]
pub struct Sig {
    #[serde(default)]
    pub keyid: String,
    /// The signature over [`pae`], base64.
    pub sig: String,
}

/// DSSE's pre-authentication encoding: what is signed.
pub fn pae(payload_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!("DSSEv1 {} {payload_type} {} ", payload_type.len(), body.len()).into_bytes();
    out.extend_from_slice(body);
    out
}

/// A key's id: the sha256 of its 32 public bytes.
pub fn keyid(key: &VerifyingKey) -> String {
    sha256_hex(key.as_bytes())
}

/// Creates `path` for writing, exclusively and never through a link (a
/// planted link, even one pointing nowhere, is refused naming the path).
fn create_new(path: &Path, mode: u32, what: &str) -> Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true).mode(mode).custom_flags(libc::O_NOFOLLOW);
    match options.open(path) {
        Ok(f) => Ok(f),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let link = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
            let link = if link { " (a symbolic link)" } else { "" };
            bail!("{} exists{link}: kiln does not replace {what} or write through a link; give another file", path.display())
        }
        Err(e) => Err(e).with_context(|| format!("cannot create {}", path.display())),
    }
}

/// The git checkout `path` would be written into, if any: the nearest
/// folder above it holding `.git`. A private key there is one `git add .`
/// away from being published.
pub fn checkout_of(path: &Path) -> Option<PathBuf> {
    let abs = if path.is_absolute() { path.to_path_buf() } else { std::env::current_dir().ok()?.join(path) };
    abs.ancestors().skip(1).find(|d| fs::symlink_metadata(d.join(".git")).is_ok()).map(Path::to_path_buf)
}

/// Where docs/signing.md keeps private keys: `$XDG_CONFIG_HOME/kiln`, else `~/.config/kiln`.
pub fn key_home() -> Option<PathBuf> {
    std::env::var_os("XDG_CONFIG_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".config")))
        .map(|d| d.join("kiln"))
}

/// Writes a new key pair: `path` (the private key, PKCS#8 PEM, mode 0600)
/// and `path.pub` (the public key, SubjectPublicKeyInfo PEM, 0644), each
/// created exclusively and never through a link. Refuses to replace
/// either, and a `path` inside a git checkout (naming it). Returns the
/// public key's PEM.
pub fn generate_key(path: &Path) -> Result<String> {
    let public_path = public_path(path);
    if let Some(checkout) = checkout_of(path) {
        let home = key_home().map_or("a folder outside it".to_string(), |h| format!("{}/", h.display()));
        bail!(
            "refusing to write the private key {} inside the git checkout {}: one `git add` would publish it. Give a \
             path outside any checkout, e.g. {home}{} (docs/signing.md)",
            path.display(),
            checkout.display(),
            path.file_name().map_or("release.key".into(), |n| n.to_string_lossy())
        );
    }
    let mut seed = [0u8; 32];
    fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut seed)).context("cannot read /dev/urandom for a new key")?;
    let key = SigningKey::from_bytes(&seed);
    let private = key.to_pkcs8_pem(LineEnding::LF).map_err(|e| anyhow::anyhow!("cannot encode the private key: {e}"))?;
    let public = key.verifying_key().to_public_key_pem(LineEnding::LF).map_err(|e| anyhow::anyhow!("cannot encode the public key: {e}"))?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let mut f = create_new(path, 0o600, "a key")?;
    // Both files created before either is written: nothing is left half-made.
    let mut p = match create_new(&public_path, 0o644, "a key") {
        Ok(p) => p,
        Err(e) => {
            drop(f);
            fs::remove_file(path).ok(); // made just now, empty
            return Err(e);
        }
    };
    let written = f.write_all(private.as_bytes()).and_then(|()| f.sync_all()).and_then(|()| p.write_all(public.as_bytes()));
    if let Err(e) = written {
        fs::remove_file(path).ok();
        fs::remove_file(&public_path).ok();
        return Err(e).with_context(|| format!("cannot write {} and {}", path.display(), public_path.display()));
    }
    Ok(public)
}

/// Where [`generate_key`] puts the public key of `private`.
pub fn public_path(private: &Path) -> PathBuf {
    let mut s = private.as_os_str().to_owned();
    s.push(".pub");
    PathBuf::from(s)
}

/// An ed25519 private key from a PKCS#8 PEM file.
pub fn signing_key(path: &Path) -> Result<SigningKey> {
    let der = key_der(path, Want::Private).map_err(|what| {
        anyhow::anyhow!(
            "{} is not an ed25519 private key in PKCS#8 PEM: it is {what}; make one with `cargo xtask sign --generate-key FILE` or `openssl genpkey -algorithm ed25519`",
            path.display()
        )
    })?;
    SigningKey::from_pkcs8_der(&der).map_err(|e| anyhow::anyhow!("{} is not an ed25519 private key in PKCS#8 PEM ({e})", path.display()))
}

/// An ed25519 public key from a PEM file (`-----BEGIN PUBLIC KEY-----`).
pub fn trusted_key(path: &Path) -> Result<VerifyingKey> {
    let der = key_der(path, Want::Public).map_err(|what| {
        anyhow::anyhow!(
            "{} is not an ed25519 public key in PEM: it is {what}; give the FILE.pub that `cargo xtask sign --generate-key FILE` wrote, or `openssl pkey -pubout`'s output",
            path.display()
        )
    })?;
    VerifyingKey::from_public_key_der(&der).map_err(|e| anyhow::anyhow!("{} is not an ed25519 public key in PEM ({e})", path.display()))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Want {
    Public,
    Private,
}

/// Key algorithms by OID, to name what a key file holds.
const ALGORITHMS: &[(&str, &str)] = &[
    ("1.2.840.113549.1.1.1", "RSA"),
    ("1.2.840.113549.1.1.10", "RSA-PSS"),
    ("1.2.840.10045.2.1", "elliptic-curve (ECDSA)"),
    ("1.2.840.10040.4.1", "DSA"),
    ("1.3.101.110", "X25519"),
    ("1.3.101.111", "X448"),
    ("1.3.101.112", "Ed25519"),
    ("1.3.101.113", "Ed448"),
];

/// `an X25519 public key (algorithm OID 1.3.101.110)`.
fn algorithm(oid: &str, kind: &str) -> String {
    match ALGORITHMS.iter().find(|(o, _)| *o == oid) {
        Some((_, name)) => format!("{} {name} {kind} (algorithm OID {oid})", if name.starts_with(['E', 'R', 'X']) { "an" } else { "a" }),
        None => format!("a {kind} of an algorithm kiln does not know (OID {oid})"),
    }
}

/// The DER of an Ed25519 key of kind `want` in the PEM file `path`, or what
/// the file is instead (for the error).
fn key_der(path: &Path, want: Want) -> Result<Vec<u8>, String> {
    use ed25519_dalek::pkcs8::{spki::der::pem, spki::SubjectPublicKeyInfoRef, PrivateKeyInfo};
    let bytes = fs::read(path).map_err(|e| format!("a file kiln cannot read ({e})"))?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err("an empty file".into());
    }
    let Some(text) = std::str::from_utf8(&bytes).ok().filter(|t| !t.contains('\0')) else {
        return Err("a binary file, not PEM text (a DER key? `openssl pkey -inform DER -in FILE -out FILE.pem` converts one)".into());
    };
    let text = text.trim_start();
    if text.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----") {
        return Err("an OpenSSH private key, not PKCS#8: kiln signs with a PKCS#8 PEM key (`cargo xtask sign --generate-key FILE`)".into());
    }
    if ["ssh-ed25519 ", "ssh-rsa ", "ssh-dss ", "ecdsa-sha2-", "sk-ssh-", "sk-ecdsa-"].iter().any(|p| text.starts_with(p)) {
        return Err("an OpenSSH public key: convert it with `ssh-keygen -e -m PKCS8 -f FILE > FILE.pem`".into());
    }
    let (label, der) = pem::decode_vec(text.as_bytes()).map_err(|e| format!("not a PEM file ({e})"))?;
    let oid = match (label, want) {
        ("PUBLIC KEY", Want::Public) => SubjectPublicKeyInfoRef::try_from(&der[..]).map(|k| k.algorithm.oid.to_string()).map_err(|e| e.to_string()),
        ("PRIVATE KEY", Want::Private) => PrivateKeyInfo::try_from(&der[..]).map(|k| k.algorithm.oid.to_string()).map_err(|e| e.to_string()),
        ("PRIVATE KEY", Want::Public) => return Err("a private key (PKCS#8); never give it away: the public key is its .pub file".into()),
        ("PUBLIC KEY", Want::Private) => return Err("a public key; signing takes the private key".into()),
        ("ENCRYPTED PRIVATE KEY", _) => return Err("an encrypted private key: `openssl pkey -in FILE -out PLAIN.pem` decrypts it".into()),
        ("RSA PRIVATE KEY" | "RSA PUBLIC KEY", _) => return Err("an RSA key (PKCS#1 PEM)".into()),
        ("EC PRIVATE KEY", _) => return Err("an elliptic-curve key (SEC1 PEM)".into()),
        ("CERTIFICATE", _) => return Err("an X.509 certificate, not a key".into()),
        (other, _) => return Err(format!("a PEM `{}` block, not a key", shown(other))),
    };
    let kind = if want == Want::Public { "public key" } else { "private key" };
    match oid {
        Ok(oid) if oid.as_str() == "1.3.101.112" => Ok(der),
        Ok(oid) => Err(algorithm(&oid, kind)),
        Err(e) => Err(format!("a damaged {kind} ({e})")),
    }
}

/// DSSE's base64, as its spec allows: standard or URL-safe, with or without padding.
pub fn base64_decode(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
    STANDARD_PAD_INDIFFERENT.decode(text).or_else(|e| URL_SAFE_PAD_INDIFFERENT.decode(text).map_err(|_| e))
}

/// The statement for `crates`: each subject a `.crate` file name and its sha256.
pub fn statement(crates: &[crate::packaged::Packaged]) -> serde_json::Value {
    let subject: Vec<_> = crates
        .iter()
        .map(|p| {
            let name = Path::new(&p.record.file).file_name().map_or(p.record.file.clone(), |n| n.to_string_lossy().into_owned());
            json!({"name": name, "digest": {"sha256": p.record.sha256}})
        })
        .collect();
    let crates_json: Vec<_> = crates.iter().map(|p| json!({"name": p.name(), "version": p.version()})).collect();
    json!({
        "_type": STATEMENT_TYPE,
        "subject": subject,
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"crates": crates_json},
            },
            "runDetails": {"builder": {"id": concat!(kiln_package::repository!(), "/blob/main/docs/signing.md#local-key")}},
        },
    })
}

/// One signed envelope around `statement`.
pub fn envelope(statement: &serde_json::Value, key: &SigningKey) -> Envelope {
    let body = serde_json::to_vec(statement).expect("a JSON value serializes");
    let sig = key.sign(&pae(PAYLOAD_TYPE, &body));
    Envelope {
        payload_type: PAYLOAD_TYPE.into(),
        payload: B64.encode(&body),
        signatures: vec![Sig { keyid: keyid(&key.verifying_key()), sig: B64.encode(sig.to_bytes()) }],
    }
}

/// Signs every crate of the dist at `dist` (each first checked against
/// `crates.json`) into `crates/attestation.intoto.jsonl`, written whole or
/// not at all. Returns the file and how many crates it names.
pub fn sign(dist: &Path, key: &SigningKey) -> Result<(PathBuf, usize)> {
    let crates = crate::packaged::load(dist)?;
    let line = serde_json::to_string(&envelope(&statement(&crates), key))?;
    let dir = dist.join(kiln_package::record::CRATES_DIR);
    let out = dir.join(FILE);
    let tmp = dir.join(format!(".{FILE}.tmp.{}", std::process::id()));
    // Created exclusively, never through a link planted at its name; the rename replaces
    // whatever is at `out` (a link itself, never its target).
    let mut f =
        create_new(&tmp, 0o644, "a file it did not make").with_context(|| format!("cannot write the attestation beside {}", out.display()))?;
    let written = f.write_all(format!("{line}\n").as_bytes()).and_then(|()| f.sync_all()).and_then(|()| fs::rename(&tmp, &out));
    if let Err(e) = written {
        fs::remove_file(&tmp).ok();
        return Err(e).with_context(|| format!("cannot write {}", out.display()));
    }
    // The dist folder's listing names the attestation too, so the next dist still finds a folder it wrote.
    kiln_fs::reseal(dist, &[&format!("{}/{FILE}", kiln_package::record::CRATES_DIR)])?;
    Ok((out, crates.len()))
}

/// What [`check`] found.
#[derive(Debug, PartialEq, Eq)]
pub struct Checked {
    /// The subject's name in the statement.
    pub subject: String,
    /// The trusted key's id.
    pub keyid: String,
}

/// `bytes` (`what`, whose file name is `file_name`) is a subject of a
/// statement in `attestation` signed by `key` (read from `key_file`). The
/// error names the crate, the attestation file (and line) and the key.
pub fn check(bytes: &[u8], what: &str, file_name: &str, attestation: &Path, key: &VerifyingKey, key_file: &Path) -> Result<Checked> {
    let text = fs::read_to_string(attestation).with_context(|| format!("{what}: cannot read the attestation {}", attestation.display()))?;
    let sha = sha256_hex(bytes);
    let id = keyid(key);
    let mut problems = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let at = format!("{}:{}", attestation.display(), n + 1);
        match statement_signed_by(line, key, &id) {
            Err(why) => problems.push(format!("{at}: {why}")),
            Ok(statement) => {
                if statement["predicateType"] != PREDICATE_TYPE {
                    problems.push(format!(
                        "{at}: signed by the trusted key, but a statement of predicateType {}, not a release signature (predicateType `{PREDICATE_TYPE}`): refused",
                        shown(&statement["predicateType"].to_string())
                    ));
                    continue;
                }
                let subjects = statement["subject"].as_array().cloned().unwrap_or_default();
                let digest = |s: &serde_json::Value| s["digest"]["sha256"].as_str().unwrap_or_default().to_string();
                // Hex, compared as hex: upper case is the same digest.
                if let Some(s) = subjects.iter().find(|s| digest(s).eq_ignore_ascii_case(&sha)) {
                    return Ok(Checked { subject: shown(s["name"].as_str().unwrap_or_default()).into_owned(), keyid: id });
                }
                match subjects.iter().find(|s| s["name"] == file_name) {
                    Some(s) => problems.push(format!(
                        "{at}: signs {} with sha256 {}, the crate has sha256 {sha}: its bytes changed after it was signed",
                        shown(file_name),
                        shown(&digest(s))
                    )),
                    None => problems.push(format!("{at}: signed by the trusted key, names no crate {} nor sha256 {sha}", shown(file_name))),
                }
            }
        }
    }
    if problems.is_empty() {
        problems.push(format!("{}: holds no statement", attestation.display()));
    }
    bail!("{what}: signature NOT verified with the trusted key {} (keyid {id}):\n  {}", key_file.display(), problems.join("\n  "))
}

/// The statement of one DSSE envelope line, if the trusted key signed it.
fn statement_signed_by(line: &str, key: &VerifyingKey, id: &str) -> Result<serde_json::Value, String> {
    let env: Envelope = serde_json::from_str(line).map_err(|e| format!("not a DSSE envelope ({e})"))?;
    if env.payload_type != PAYLOAD_TYPE {
        return Err(format!("payloadType is `{}`, not `{PAYLOAD_TYPE}`", shown(&env.payload_type)));
    }
    if env.signatures.is_empty() {
        return Err("the envelope has no signatures: nothing signed it".into());
    }
    let body = base64_decode(&env.payload).map_err(|e| format!("the payload is not base64 ({e})"))?;
    let signed = pae(&env.payload_type, &body);
    let verifies = |s: &Sig| {
        let Ok(raw) = base64_decode(&s.sig) else { return false };
        Signature::from_slice(&raw).is_ok_and(|sig| key.verify_strict(&signed, &sig).is_ok())
    };
    if !env.signatures.iter().any(verifies) {
        let ids: Vec<&str> = env.signatures.iter().map(|s| s.keyid.as_str()).collect();
        return Err(if ids.contains(&id) {
            "the signature by the trusted key does not match the statement: the statement was changed after it was signed".to_string()
        } else {
            let named: Vec<String> = ids.iter().map(|k| if k.is_empty() { "none given".into() } else { shown(k).into_owned() }).collect();
            format!("signed by another key (keyid {}), not the trusted one", named.join(", "))
        });
    }
    let statement: serde_json::Value = serde_json::from_slice(&body).map_err(|e| format!("the signed payload is not JSON ({e})"))?;
    if statement["_type"] != STATEMENT_TYPE {
        return Err(format!("the signed payload is not an in-toto statement (_type {})", shown(&statement["_type"].to_string())));
    }
    Ok(statement)
}

/// What verify-crate says about signatures: [`Verdict::Verified`] or why not checked.
#[derive(Debug)]
pub enum Verdict {
    Verified {
        attestation: PathBuf,
        checked: Checked,
    },
    /// An attestation is there but no key was given to check it with.
    Unchecked(PathBuf),
    /// Neither given nor beside the crate.
    Absent,
}

/// verify-crate's signature step: `attestation` (else `beside`, the default
/// file next to a `.crate`, if it exists) checked with `key_file` when given;
/// a key without an attestation is an error (the user required one).
pub fn verdict(
    bytes: &[u8],
    what: &str,
    file_name: &str,
    attestation: Option<&Path>,
    beside: Option<&Path>,
    key_file: Option<&Path>,
) -> Result<Verdict> {
    let found = attestation.map(Path::to_path_buf).or_else(|| beside.filter(|p| p.is_file()).map(Path::to_path_buf));
    match (found, key_file) {
        (Some(a), Some(k)) => Ok(Verdict::Verified { checked: check(bytes, what, file_name, &a, &trusted_key(k)?, k)?, attestation: a }),
        (Some(a), None) => Ok(Verdict::Unchecked(a)),
        (None, Some(k)) => bail!(
            "{what}: no attestation to check with the trusted key {}: give --attestation FILE (the {FILE} that `cargo xtask sign` wrote beside the crates)",
            k.display()
        ),
        (None, None) => Ok(Verdict::Absent),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    const CRATE: &[u8] = b"the bytes of a .crate";

    fn key() -> SigningKey {
        SigningKey::from_bytes(&[7; 32])
    }

    fn statement_of(predicate_type: &str, digest: &str) -> serde_json::Value {
        json!({
            "_type": STATEMENT_TYPE,
            "subject": [{"name": "c-1.0.0.crate", "digest": {"sha256": digest}}],
            "predicateType": predicate_type,
            "predicate": {},
        })
    }

    /// `check` of [`CRATE`] against one attestation line `env`.
    fn check_line(env: &Envelope) -> Result<Checked> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(FILE);
        fs::write(&file, serde_json::to_string(env).unwrap()).unwrap();
        check(CRATE, "c.crate", "c-1.0.0.crate", &file, &key().verifying_key(), Path::new("k.pub"))
    }

    #[test]
    fn a_release_signature_verifies_and_a_statement_of_another_predicate_type_is_refused_naming_it() {
        assert!(check_line(&envelope(&statement_of(PREDICATE_TYPE, &sha256_hex(CRATE)), &key())).is_ok());
        let revocation = envelope(&statement_of("https://example.com/revocation/v1", &sha256_hex(CRATE)), &key());
        let e = format!("{:#}", check_line(&revocation).unwrap_err());
        assert!(
            e.contains("a statement of predicateType \"https://example.com/revocation/v1\", not a release signature") && e.contains(PREDICATE_TYPE),
            "{e}"
        );
    }

    #[test]
    fn dsse_base64_is_read_standard_or_url_safe_with_or_without_padding() {
        // Bytes whose base64 holds `+` and `/` (and so `-` and `_` URL-safe).
        let st = json!({"_type": STATEMENT_TYPE, "subject": [{"name": "c-1.0.0.crate", "digest": {"sha256": sha256_hex(CRATE)}}],
            "predicateType": PREDICATE_TYPE, "predicate": {"x": "\u{fbff}\u{fbff}?>?>~~"}});
        let mut env = envelope(&st, &key());
        let raw_payload = B64.decode(&env.payload).unwrap();
        let raw_sig = B64.decode(&env.signatures[0].sig).unwrap();
        env.payload = URL_SAFE_NO_PAD.encode(&raw_payload);
        env.signatures[0].sig = URL_SAFE_NO_PAD.encode(&raw_sig);
        assert!(env.payload.contains(['-', '_']) || env.signatures[0].sig.contains(['-', '_']), "the test needs URL-safe characters");
        check_line(&env).unwrap();
        env.payload = base64::engine::general_purpose::STANDARD_NO_PAD.encode(&raw_payload);
        check_line(&env).unwrap();
    }

    #[test]
    fn an_upper_case_digest_is_the_same_digest() {
        let env = envelope(&statement_of(PREDICATE_TYPE, &sha256_hex(CRATE).to_ascii_uppercase()), &key());
        check_line(&env).unwrap();
    }

    #[test]
    fn an_envelope_without_signatures_and_text_from_it_are_named_escaped() {
        let mut env = envelope(&statement_of(PREDICATE_TYPE, &sha256_hex(CRATE)), &key());
        env.signatures.clear();
        let e = format!("{:#}", check_line(&env).unwrap_err());
        assert!(e.contains("the envelope has no signatures") && !e.contains("keyid )"), "{e}");
        let mut env = envelope(&statement_of(PREDICATE_TYPE, &sha256_hex(CRATE)), &SigningKey::from_bytes(&[9; 32]));
        env.signatures[0].keyid = "\x1b]0;owned\x07".into();
        let e = format!("{:#}", check_line(&env).unwrap_err());
        assert!(e.contains("signed by another key (keyid \\u{1b}]0;owned\\u{7})") && !e.contains('\x1b'), "{e}");
        let mut env = envelope(&statement_of(PREDICATE_TYPE, &sha256_hex(CRATE)), &key());
        env.payload_type = "\x1b[2Jx".into();
        let e = format!("{:#}", check_line(&env).unwrap_err());
        assert!(e.contains("payloadType is `\\u{1b}[2Jx`") && !e.contains('\x1b'), "{e}");
    }

    #[test]
    fn each_wrong_key_file_says_what_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            ("-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VuAyEArbYmnv2woVzNjaY3/2oGyAKQcWGJbpNfEq8dttGqNVo=\n-----END PUBLIC KEY-----\n", "an X25519 public key (algorithm OID 1.3.101.110)"),
            ("-----BEGIN PUBLIC KEY-----\nMEMwBQYDK2VxAzoAFQsxlRj3h0FeozymoLtnshc3mI++DplfzLLjpSKzMoQ7QjrB\nJHXusX3SlL2OnrKMeZ9iF6QFEVoA\n-----END PUBLIC KEY-----\n", "an Ed448 public key (algorithm OID 1.3.101.113)"),
            ("-----BEGIN PUBLIC KEY-----\nMIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQDOJRPfXypovzl3kqLHL4JtbFYK\nKmQGGrXreF2zpF7GixeU/74HflbErUktHW7iVjpR5dOi5mfNwFkbdQYnovfCb8jn\n6eRQdu+PvDTQwu72oVeB0kp/YgHyLcgU3pONHn6zAFQx5/PemLyDbKaW/ufVeKMu\nH6CAKs/f+bq88Vm4iwIDAQAB\n-----END PUBLIC KEY-----\n", "an RSA public key (algorithm OID 1.2.840.113549.1.1.1)"),
            ("", "it is an empty file"),
            ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHRlc3QgdGVzdCB0ZXN0IHRlc3QgdGVzdCB0ZXN0IHRl me@host\n", "an OpenSSH public key: convert it with `ssh-keygen -e -m PKCS8"),
            ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE=\n-----END OPENSSH PRIVATE KEY-----\n", "an OpenSSH private key"),
        ];
        for (i, (text, want)) in cases.iter().enumerate() {
            let f = dir.path().join(format!("k{i}.pub"));
            fs::write(&f, text).unwrap();
            let e = format!("{:#}", trusted_key(&f).unwrap_err());
            assert!(e.contains("is not an ed25519 public key in PEM") && e.contains(want) && !e.contains("NUL"), "{want}: {e}");
        }
        let f = dir.path().join("good.pub");
        fs::write(&f, key().verifying_key().to_public_key_pem(LineEnding::LF).unwrap()).unwrap();
        assert_eq!(trusted_key(&f).unwrap(), key().verifying_key());
        let e = format!("{:#}", signing_key(&f).unwrap_err());
        assert!(e.contains("is not an ed25519 private key in PKCS#8 PEM: it is a public key"), "{e}");
    }

    /// Issue 34: `sign --generate-key` wrote through a link planted at
    /// `FILE.pub` (a dangling one passed its `exists()` check), and into a git
    /// checkout; now each file is created exclusively and never through a
    /// link, nothing half-made is left, and a checkout is refused by name.
    #[test]
    fn keys_are_never_written_through_a_planted_link_nor_into_a_checkout() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        let target = t.join("elsewhere/authorized_keys");
        fs::create_dir_all(target.parent().unwrap()).unwrap();
        let key = t.join("keys/release.key");
        fs::create_dir_all(key.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&target, public_path(&key)).unwrap();
        let e = format!("{:#}", generate_key(&key).unwrap_err());
        assert!(e.contains("release.key.pub exists (a symbolic link)"), "{e}");
        assert!(!target.exists(), "the key was written through the planted link");
        assert!(!key.exists(), "the private key of a refused pair is not left behind");
        // The private key's name planted too.
        std::os::unix::fs::symlink(&target, &key).unwrap();
        assert!(format!("{:#}", generate_key(&key).unwrap_err()).contains("release.key exists (a symbolic link)"));
        assert!(!target.exists());

        let checkout = t.join("checkout");
        fs::create_dir_all(checkout.join(".git")).unwrap();
        let e = format!("{:#}", generate_key(&checkout.join("sub/release.key")).unwrap_err());
        assert!(e.contains(&checkout.display().to_string()) && e.contains("git checkout") && e.contains("release.key"), "{e}");
        assert!(!checkout.join("sub").exists());

        let fine = t.join("outside/release.key");
        generate_key(&fine).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(fs::metadata(&fine).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(signing_key(&fine).is_ok() && trusted_key(&public_path(&fine)).is_ok());
    }

    /// The attestation's temporary file is never written through a link planted at its name.
    #[test]
    fn the_attestation_is_never_written_through_a_planted_link() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("victim");
        let planted = tmp.path().join(format!(".{FILE}.tmp.{}", std::process::id()));
        std::os::unix::fs::symlink(&target, &planted).unwrap();
        let e = format!("{:#}", create_new(&planted, 0o644, "a file it did not make").unwrap_err());
        assert!(e.contains(&planted.display().to_string()) && e.contains("symbolic link"), "{e}");
        assert!(!target.exists());
    }
}
