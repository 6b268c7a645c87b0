//! The root filesystem writer and the OCI layout, on small packages made here:
//! the same inputs give the same bytes whatever their timestamps, and every
//! problem the writer refuses is named.

use std::{
    collections::BTreeMap,
    fs,
    io::{Read, Write},
    path::Path,
};

use kiln_container::{
    oci::{self, History, ImageConfig, RootFs, RunConfig},
    rootfs::{self, Extra, Input},
};
use tar::{EntryType, Header};

const EPOCH: u64 = 1_793_491_200;

/// A fresh folder, removed when the test ends, passed or not.
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("kiln-container-test-{name}-")).tempdir().unwrap()
}

/// An entry of a test archive: path, type, mode, uid, content (or link target).
#[derive(Clone)]
struct E(&'static str, EntryType, u32, u64, &'static str);

fn tar_of(entries: &[E], mtime: u64) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for E(path, kind, mode, uid, data) in entries {
        let mut h = Header::new_gnu();
        h.set_entry_type(*kind);
        h.set_mode(*mode);
        h.set_uid(*uid);
        h.set_gid(0);
        h.set_mtime(mtime);
        match kind {
            EntryType::Symlink => {
                h.set_size(0);
                b.append_link(&mut h, path, data).unwrap();
            }
            _ => {
                h.set_size(data.len() as u64);
                b.append_data(&mut h, path, data.as_bytes()).unwrap();
            }
        }
    }
    b.into_inner().unwrap()
}

fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// A .deb (ar: debian-binary, control.tar.gz, data.tar.gz) whose data archive
/// holds `entries`, all stamped `mtime`.
fn deb(path: &Path, entries: &[E], mtime: u64) -> Input {
    let control = gz(&tar_of(&[E("./control", EntryType::Regular, 0o644, 0, "Package: test\nVersion: 1\nArchitecture: all\n")], mtime));
    let data = gz(&tar_of(entries, mtime));
    let mut ar = b"!<arch>\n".to_vec();
    for (name, bytes) in [("debian-binary", b"2.0\n".to_vec()), ("control.tar.gz", control), ("data.tar.gz", data)] {
        ar.extend_from_slice(format!("{name:<16}{mtime:<12}{:<6}{:<6}{:<8}{:<10}`\n", 0, 0, "100644", bytes.len()).as_bytes());
        ar.extend_from_slice(&bytes);
        if bytes.len() % 2 == 1 {
            ar.push(b'\n');
        }
    }
    fs::write(path, ar).unwrap();
    Input::Deb { path: path.to_path_buf(), what: path.file_name().unwrap().to_string_lossy().into_owned() }
}

fn base_entries() -> Vec<E> {
    vec![
        E("./", EntryType::Directory, 0o755, 0, ""),
        E("./usr/", EntryType::Directory, 0o755, 0, ""),
        E("./usr/bin/", EntryType::Directory, 0o755, 0, ""),
        E("./usr/bin/tool", EntryType::Regular, 0o755, 0, "#!/bin/sh\necho tool\n"),
        E("./tmp/", EntryType::Directory, 0o1777, 0, ""),
        E("./bin", EntryType::Symlink, 0o777, 0, "usr/bin"),
        E("./usr/share/ca-certificates/mozilla/B.crt", EntryType::Regular, 0o644, 0, "b"),
        E("./usr/share/ca-certificates/mozilla/A.crt", EntryType::Regular, 0o644, 0, "a\n"),
    ]
}

fn write(inputs: &[Input], extras: &[Extra]) -> anyhow::Result<(Vec<u8>, rootfs::Summary)> {
    let mut out = Vec::new();
    let summary = rootfs::write(inputs, extras, EPOCH, &mut out, &|_| {})?;
    Ok((out, summary))
}

/// (path, type, mode, uid, mtime, content or target) of every entry, in order.
fn listing(tar_bytes: &[u8]) -> Vec<(String, EntryType, u32, u64, u64, String)> {
    let mut a = tar::Archive::new(tar_bytes);
    a.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let h = e.header().clone();
            let path = e.path().unwrap().to_string_lossy().into_owned();
            let mut data = String::new();
            if h.entry_type() == EntryType::Symlink {
                data = e.link_name().unwrap().unwrap().to_string_lossy().into_owned();
            } else {
                e.read_to_string(&mut data).unwrap();
            }
            (path, h.entry_type(), h.mode().unwrap(), h.uid().unwrap(), h.mtime().unwrap(), data)
        })
        .collect()
}

#[test]
fn the_same_packages_give_the_same_bytes_whatever_their_timestamps() {
    let dir_tmp = scratch("same");
    let dir = dir_tmp.path();
    let a = deb(&dir.join("a.deb"), &base_entries(), 1_000);
    let b = deb(&dir.join("b.deb"), &base_entries(), 2_000_000_000);
    let extras = [Extra::CaBundle("etc/ssl/certs/ca-certificates.crt".into())];
    let (one, s1) = write(std::slice::from_ref(&a), &extras).unwrap();
    let (two, s2) = write(&[b], &extras).unwrap();
    let (three, _) = write(&[a], &extras).unwrap();
    assert_eq!(one, two, "the packages' own timestamps reached the tar");
    assert_eq!(one, three);
    assert_eq!(s1, s2);
    assert_eq!(s1.bytes, one.len() as u64);
    assert_eq!(s1.sha256, kiln_manifest::sha256_hex(&one));
}

#[test]
fn entries_are_owned_by_root_stamped_once_and_parents_come_first() {
    let dir_tmp = scratch("listing");
    let dir = dir_tmp.path();
    let a = deb(&dir.join("a.deb"), &base_entries(), 1_000);
    let extras = [
        Extra::Dir(".kiln".into(), 0o755),
        Extra::File(".kiln/record.json".into(), 0o644, b"{}".to_vec()),
        Extra::Symlink("usr/local/bin/cc".into(), "/usr/bin/gcc-13".into()),
        Extra::CaBundle("etc/ssl/certs/ca-certificates.crt".into()),
    ];
    let (bytes, summary) = write(&[a], &extras).unwrap();
    let list = listing(&bytes);
    assert_eq!(summary.entries, list.len());
    for (path, _, _, uid, mtime, _) in &list {
        assert_eq!((*uid, *mtime), (0, EPOCH), "{path}");
    }
    let paths: Vec<&str> = list.iter().map(|e| e.0.trim_end_matches('/')).collect();
    for (i, p) in paths.iter().enumerate() {
        if let Some((parent, _)) = p.rsplit_once('/') {
            let at = paths.iter().position(|q| q == &parent).unwrap_or_else(|| panic!("no parent entry for {p}"));
            assert!(at < i, "{parent} comes after {p}");
        }
    }
    let find = |p: &str| list.iter().find(|e| e.0.trim_end_matches('/') == p).unwrap_or_else(|| panic!("no {p}")).clone();
    assert_eq!(find("tmp").2, 0o1777, "the sticky bit is the package's");
    assert_eq!(find("usr/bin/tool").2, 0o755);
    assert_eq!(find("bin").5, "usr/bin");
    assert_eq!(find("usr/local/bin/cc").5, "/usr/bin/gcc-13");
    assert_eq!(find("usr/local").1, EntryType::Directory, "missing parents are made");
    // Certificates in byte order of their paths, each ending in a newline.
    assert_eq!(find("etc/ssl/certs/ca-certificates.crt").5, "a\nb\n");
    assert_eq!(*paths.last().unwrap(), "etc/ssl/certs/ca-certificates.crt", "extras come after the packages, in order");
}

#[test]
fn a_path_from_two_packages_is_refused_naming_both() {
    let dir_tmp = scratch("conflict");
    let dir = dir_tmp.path();
    let a = deb(&dir.join("first.deb"), &base_entries(), 1);
    let b = deb(&dir.join("second.deb"), &[E("./usr/bin/tool", EntryType::Regular, 0o755, 0, "other")], 1);
    let e = format!("{:#}", write(&[a, b], &[]).unwrap_err());
    assert!(e.contains("/usr/bin/tool") && e.contains("first.deb") && e.contains("second.deb"), "{e}");
    // The same directory from both is fine; with another mode it is not.
    let dir2_tmp = scratch("conflict-dir");
    let dir2 = dir2_tmp.path();
    let a = deb(&dir2.join("first.deb"), &base_entries(), 1);
    let b = deb(&dir2.join("second.deb"), &[E("./usr/", EntryType::Directory, 0o755, 0, ""), E("./tmp/", EntryType::Directory, 0o755, 0, "")], 1);
    let e = format!("{:#}", write(&[a, b], &[]).unwrap_err());
    assert!(e.contains("`/tmp`") && e.contains("first.deb (a directory, mode 1777)") && e.contains("second.deb (a directory, mode 755)"), "{e}");
}

#[test]
fn a_file_below_a_symlinked_directory_is_refused() {
    let dir_tmp = scratch("below-link");
    let dir = dir_tmp.path();
    let a = deb(&dir.join("base.deb"), &base_entries(), 1);
    let b = deb(&dir.join("old.deb"), &[E("./bin/sh", EntryType::Regular, 0o755, 0, "")], 1);
    let e = format!("{:#}", write(&[a, b], &[]).unwrap_err());
    assert!(e.contains("`/bin/sh`") && e.contains("lies below `/bin`"), "{e}");
}

#[test]
fn packages_owned_by_anyone_but_root_are_refused() {
    let dir_tmp = scratch("owner");
    let dir = dir_tmp.path();
    let a = deb(&dir.join("a.deb"), &[E("./srv/", EntryType::Directory, 0o755, 1000, "")], 1);
    let e = format!("{:#}", write(&[a], &[]).unwrap_err());
    assert!(e.contains("owned by 1000:0"), "{e}");
}

#[test]
fn rust_components_land_below_the_prefix_without_installer_files() {
    let dir_tmp = scratch("rust");
    let dir = dir_tmp.path();
    let top = "rustc-9.9.9-x86_64-unknown-linux-gnu";
    let entries = vec![
        E("rustc-9.9.9-x86_64-unknown-linux-gnu/install.sh", EntryType::Regular, 0o755, 1000, "#!/bin/sh\n"),
        E("rustc-9.9.9-x86_64-unknown-linux-gnu/rustc/bin/rustc", EntryType::Regular, 0o755, 1000, "ELF"),
        E("rustc-9.9.9-x86_64-unknown-linux-gnu/rustc/manifest.in", EntryType::Regular, 0o644, 1000, "file:bin/rustc\n"),
        E("rustc-9.9.9-x86_64-unknown-linux-gnu/rustc/lib/librustc_driver.so", EntryType::Regular, 0o644, 1000, "so"),
        E("rustc-9.9.9-x86_64-unknown-linux-gnu/components", EntryType::Regular, 0o644, 1000, "rustc\n"),
    ];
    let path = dir.join(format!("{top}.tar.gz"));
    fs::write(&path, gz(&tar_of(&entries, 5))).unwrap();
    let input = Input::RustArchive { path, what: "rustc 9.9.9".into(), prefix: "usr/local".into() };
    let (bytes, _) = write(&[input], &[]).unwrap();
    let paths: Vec<String> = listing(&bytes).into_iter().map(|e| e.0.trim_end_matches('/').to_string()).collect();
    assert_eq!(paths, ["usr", "usr/local", "usr/local/bin", "usr/local/bin/rustc", "usr/local/lib", "usr/local/lib/librustc_driver.so"]);
}

#[test]
fn a_missing_certificate_source_is_an_error_not_an_empty_bundle() {
    let dir_tmp = scratch("no-certs");
    let dir = dir_tmp.path();
    let a = deb(&dir.join("a.deb"), &[E("./etc/", EntryType::Directory, 0o755, 0, "")], 1);
    let e = format!("{:#}", write(&[a], &[Extra::CaBundle("etc/ca.crt".into())]).unwrap_err());
    assert!(e.contains("no certificates") && e.contains("ca-certificates"), "{e}");
}

fn config(diff_id: &str) -> ImageConfig {
    ImageConfig {
        created: kiln_container::time::rfc3339(EPOCH),
        architecture: "amd64".into(),
        os: "linux".into(),
        config: RunConfig { env: vec!["PATH=/usr/bin".into()], cmd: vec!["/bin/sh".into()], working_dir: "/".into(), labels: BTreeMap::new() },
        rootfs: RootFs { kind: "layers".into(), diff_ids: vec![format!("sha256:{diff_id}")] },
        history: vec![History { created: kiln_container::time::rfc3339(EPOCH), created_by: "test".into(), comment: String::new() }],
    }
}

fn image(dir: &Path, input: &Input) -> oci::Image {
    let mut layer = oci::LayerWriter::create(dir).unwrap();
    let summary = rootfs::write(std::slice::from_ref(input), &[], EPOCH, &mut layer, &|_| {}).unwrap();
    oci::write_layout(dir, "test", layer.finish().unwrap(), &config(&summary.sha256)).unwrap()
}

#[test]
fn an_image_written_twice_has_one_digest_and_reads_back() {
    let dir_tmp = scratch("oci");
    let dir = dir_tmp.path();
    let input = deb(&dir.join("a.deb"), &base_entries(), 1);
    let one = image(&dir.join("one.oci"), &input);
    let two = image(&dir.join("two.oci"), &input);
    assert_eq!(one.digest, two.digest);
    assert_eq!(one.layer, two.layer);
    assert!(!dir.join("one.oci.part").exists(), "the staging folder is moved into place");
    assert_eq!(oci::verify_layout(&one.dir).unwrap().digest, one.digest);
    let index: serde_json::Value = serde_json::from_slice(&fs::read(one.dir.join("index.json")).unwrap()).unwrap();
    assert_eq!(index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"], oci::REF_NAME);
    assert_eq!(fs::read_to_string(one.dir.join("oci-layout")).unwrap(), r#"{"imageLayoutVersion":"1.0.0"}"#);

    // A layer that is not the one the manifest names is caught.
    let blob = one.dir.join("blobs/sha256").join(one.layer.digest.trim_start_matches("sha256:"));
    let mut bytes = fs::read(&blob).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    fs::write(&blob, bytes).unwrap();
    let e = oci::verify_layout(&one.dir).unwrap_err().to_string();
    assert!(e.contains(&one.layer.digest), "{e}");
}

/// The layer's bytes may not depend on how the tar reaches the compressor: a
/// `.deb` is read from a pipe, whose reads come in whatever sizes the pipe had.
#[test]
fn the_layer_is_the_same_however_its_input_is_split() {
    let dir_tmp = scratch("chunks");
    let dir = dir_tmp.path();
    // Compressible, but not trivially: text with a running counter.
    let data: Vec<u8> = (0..400_000u32).flat_map(|i| format!("line {i} of {}\n", i % 977).into_bytes()).collect();
    let mut digests = Vec::new();
    for (n, sizes) in [vec![1 << 20], vec![1, 7, 4096, 65_537], vec![8191, 3], vec![data.len()]].into_iter().enumerate() {
        let out = dir.join(format!("split{n}.oci"));
        let mut w = oci::LayerWriter::create(&out).unwrap();
        let (mut at, mut k) = (0, 0);
        while at < data.len() {
            let end = (at + sizes[k % sizes.len()]).min(data.len());
            w.write_all(&data[at..end]).unwrap();
            at = end;
            k += 1;
        }
        let layer = w.finish().unwrap();
        digests.push((layer.digest.clone(), layer.size));
    }
    assert!(digests.windows(2).all(|w| w[0] == w[1]), "{digests:?}");
}
