//! The publish plan of the real packaged crates (target/dist/crates, from
//! `cargo xtask dist`; `KILN_DIST_DIR` names another dist folder): the upload
//! metadata cargo would send, where each dependency is said to come from,
//! and what crates.io would get. Nothing is sent here; xtask/tests/publish.rs
//! publishes for real.

use std::path::{Path, PathBuf};

use kiln_publish::{metadata::NewCrate, packaged, plan, CRATES_IO_INDEX};
use kiln_test_registry as server;

fn dist() -> PathBuf {
    let dir = std::env::var_os("KILN_DIST_DIR").map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/dist"), PathBuf::from);
    assert!(
        dir.join(packaged::crates_json()).is_file(),
        "{} has no {}: run `cargo xtask dist` first (`cargo xtask test` does), or set KILN_DIST_DIR",
        dir.display(),
        packaged::crates_json()
    );
    dir
}

fn item<'a>(p: &'a plan::Plan, name: &str) -> &'a plan::Item {
    p.items.iter().find(|i| i.meta.name == name).unwrap_or_else(|| panic!("{name} is not in the plan"))
}

fn dep<'a>(m: &'a NewCrate, name: &str) -> &'a kiln_publish::metadata::NewDep {
    m.deps.iter().find(|d| d.name == name).unwrap_or_else(|| panic!("{} has no dependency {name}", m.name))
}

#[test]
fn metadata_as_cargo_would_send_it_to_another_registry() {
    let crates = packaged::load(&dist()).unwrap();
    let count = crates.len();
    let p = plan::build(crates, "http://127.0.0.1:1/index/", false).unwrap();
    assert_eq!(p.problems, Vec::<String>::new());
    assert_eq!(p.items.len(), count);
    assert!(p.items.iter().all(|i| i.skip.is_none()));

    let main = &item(&p, "kiln-candle-kernels").meta;
    let v = main.vers.clone();
    assert!(v.contains("+kiln."), "{v}");
    // The family comes from the registry published to; the rest from crates.io.
    let manifest = dep(main, "kiln-manifest");
    assert_eq!((manifest.registry.as_deref(), manifest.kind.as_str(), manifest.optional), (None, "normal", false));
    let sm90 = dep(main, "kiln-candle-kernels-sm90");
    assert_eq!(
        (sm90.registry.as_deref(), sm90.optional, sm90.version_req.as_str()),
        (None, true, format!("={}", v.split('+').next().unwrap()).as_str())
    );
    assert_eq!(dep(main, "ruzstd").registry.as_deref(), Some(CRATES_IO_INDEX));
    assert!(!dep(main, "ruzstd").default_features);
    assert_eq!(dep(main, "ruzstd").features, vec!["std".to_string()]);
    assert_eq!(main.features["sm90"], vec!["dep:kiln-candle-kernels-sm90".to_string()]);
    assert!(main.readme.as_deref().is_some_and(|r| r.contains("[patch.crates-io]")), "the README's text is sent");
    assert_eq!(main.readme_file.as_deref(), Some("README.md"));
    assert_eq!(main.license.as_deref(), Some("MIT OR Apache-2.0"));
    assert!(main.description.as_deref().is_some_and(|d| d.contains("candle-kernels")));

    let cudart = &item(&p, "kiln-candle-kernels-cudart").meta;
    assert_eq!((cudart.license.as_deref(), cudart.license_file.as_deref()), (None, Some("LICENSE-NVIDIA")));
    assert_eq!(cudart.links.as_deref(), Some("kiln_candle_kernels_cudart"));
    assert!(cudart.deps.iter().all(|d| d.kind == "build"), "{:?}", cudart.deps);

    let ffi0 = &item(&p, "kiln-candle-kernels-ffi-0");
    assert!(ffi0.packaged.files.iter().any(|f| f == "LICENSE-MIT") && ffi0.packaged.files.iter().any(|f| f == "LICENSE-APACHE"));
    // Its host code runs on the main crate's runtime: it links no other crate of the family.
    assert!(!ffi0.meta.deps.iter().any(|d| d.name.starts_with("kiln-candle-kernels")), "{:?}", ffi0.meta.deps);
    assert_eq!(dep(main, "kiln-candle-kernels-ffi-0").registry, None);

    // Every crate comes after all of its dependencies among them.
    for (n, i) in p.items.iter().enumerate() {
        for d in &i.meta.deps {
            if let Some(at) = p.items.iter().position(|j| j.meta.name == d.name) {
                assert!(at < n, "{} is uploaded before its dependency {}", i.meta.name, d.name);
            }
        }
    }

    // The index line a registry writes for it: renames and `dep:` features as
    // cargo reads them.
    let entry = server::index_entry(main, &item(&p, "kiln-candle-kernels").packaged.bytes);
    assert_eq!(entry.cksum, item(&p, "kiln-candle-kernels").packaged.record.sha256);
    assert_eq!(entry.v, 2);
    assert!(entry.features2.contains_key("sm90") && !entry.features.contains_key("sm90"));
    assert!(entry.features.contains_key("default"));
}

#[test]
fn crates_io_gets_everything_but_the_drop_in() {
    let p = plan::build(packaged::load(&dist()).unwrap(), "https://index.crates.io/", true).unwrap();
    assert_eq!(p.problems, Vec::<String>::new());
    let shim = item(&p, "candle-kernels");
    let why = shim.skip.as_deref().expect("the drop-in is not for crates.io");
    assert!(why.contains("candle's own crate"), "{why}");
    assert!(p.items.iter().filter(|i| i.skip.is_some()).count() == 1);
    // On crates.io every dependency is from crates.io itself: no registry.
    for i in &p.items {
        assert!(i.meta.deps.iter().all(|d| d.registry.is_none()), "{}: {:?}", i.meta.name, i.meta.deps);
    }
}
