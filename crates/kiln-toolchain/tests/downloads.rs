//! Download verification against a real HTTP server on loopback, with the
//! same client (curl) kiln uses for the pinned packages.

use std::{
    collections::HashMap,
    fs,
    io::{BufRead, BufReader, Write},
    net::TcpListener,
    sync::Arc,
};

use kiln_pins::Deb;
use kiln_toolchain::{
    cache::publish_dir,
    fetch::{self, HashMismatch},
    Cache,
};

/// Serves `files` (path → bytes) on 127.0.0.1; anything else is a 404.
fn serve(files: HashMap<String, Vec<u8>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let files = Arc::new(files);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let files = files.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request = String::new();
                reader.read_line(&mut request).unwrap();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                        break;
                    }
                }
                let path = request.split_whitespace().nth(1).unwrap_or("/").to_string();
                match files.get(&path) {
                    Some(body) => {
                        write!(stream, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len()).unwrap();
                        stream.write_all(body).unwrap();
                    }
                    None => write!(stream, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").unwrap(),
                }
            });
        }
    });
    format!("http://{addr}")
}

/// A fresh folder, removed when the test ends, passed or not: bind it for as long as it is used.
fn temp(label: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("kiln-dl-{label}-")).tempdir().unwrap()
}

fn deb(body: &[u8]) -> Deb {
    Deb {
        name: "hello".into(),
        version: "1.0-1".into(),
        arch: "amd64".into(),
        sha256: kiln_manifest::sha256_hex(body),
        size: body.len() as u64,
        path: "pool/main/h/hello/hello_1.0-1_amd64.deb".into(),
    }
}

#[test]
fn a_download_with_the_pinned_hash_is_kept() {
    let body = b"the pinned bytes".to_vec();
    let url = serve(HashMap::from([("/f".to_string(), body.clone())]));
    let tmp = temp("good");
    let dir = tmp.path();
    let dest = dir.join("f");
    fetch::download_verified(&format!("{url}/f"), &kiln_manifest::sha256_hex(&body), fetch::Limit::Exactly(body.len() as u64), "f", &dest).unwrap();
    assert_eq!(fs::read(&dest).unwrap(), body);
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_hash_mismatch_stops_and_leaves_nothing_behind() {
    let url = serve(HashMap::from([("/f".to_string(), b"tampered bytes".to_vec())]));
    let tmp = temp("bad");
    let dir = tmp.path();
    let dest = dir.join("f");
    let pinned = kiln_manifest::sha256_hex(b"the pinned bytes");
    let err = fetch::download_verified(&format!("{url}/f"), &pinned, fetch::Limit::AtMost(1 << 20), "hello 1.0", &dest).unwrap_err();
    let mismatch = err.downcast_ref::<HashMismatch>().expect("a HashMismatch");
    assert_eq!(mismatch.expected, pinned);
    assert_eq!(mismatch.actual, kiln_manifest::sha256_hex(b"tampered bytes"));
    let text = err.to_string();
    assert!(text.contains("hello 1.0") && text.contains(&pinned) && text.contains("discarded"), "{text}");
    assert_eq!(fs::read_dir(dir).unwrap().count(), 0, "no file and no .part left");
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn mirrors_are_tried_in_order_but_a_wrong_hash_never_falls_through() {
    let body = b"deb bytes".to_vec();
    let d = deb(&body);
    let empty = serve(HashMap::new());
    let good = serve(HashMap::from([(format!("/{}", d.path), body.clone())]));
    let evil = serve(HashMap::from([(format!("/{}", d.path), b"other bytes".to_vec())]));

    let tmp = temp("mirrors");
    let cache = Cache::at(tmp.path().to_path_buf()).unwrap();
    let got = fetch::fetch_deb(&cache, &[empty.clone(), good.clone()], &d).unwrap();
    assert_eq!(fs::read(&got).unwrap(), body);
    assert_eq!(got.file_name().unwrap().to_string_lossy(), format!("{}.deb", d.sha256), "cached by content");

    // A cached package damaged after its download is checked again, evicted and fetched anew.
    let mut damaged = body.clone();
    damaged[0] ^= 1;
    fs::write(&got, &damaged).unwrap();
    let again = fetch::fetch_deb(&cache, std::slice::from_ref(&good), &d).unwrap();
    assert_eq!(fs::read(&again).unwrap(), body, "the damaged copy was replaced by the pinned bytes");
    // ... and if the mirror now serves other bytes too, it fails closed, leaving nothing cached.
    fs::write(&got, &damaged).unwrap();
    let err = fetch::fetch_deb(&cache, std::slice::from_ref(&evil), &d).unwrap_err();
    assert!(err.downcast_ref::<HashMismatch>().is_some(), "{err:#}");
    assert!(!got.exists(), "neither the damaged copy nor the mirror's bytes are kept");

    let tmp = temp("evil");
    let cache = Cache::at(tmp.path().to_path_buf()).unwrap();
    let err = fetch::fetch_deb(&cache, &[evil, good], &d).unwrap_err();
    assert!(err.downcast_ref::<HashMismatch>().is_some(), "{err:#}");

    let tmp = temp("none");
    let cache = Cache::at(tmp.path().to_path_buf()).unwrap();
    let err = fetch::fetch_deb(&cache, &[empty], &d).unwrap_err().to_string();
    assert!(err.contains("could not download hello 1.0-1") && err.contains("404"), "{err}");
    // A pin gone from every mirror says what to do, naming the bytes a remote cache would need.
    assert!(err.contains("cargo xtask pins update") && err.contains(&format!("sha256 {}", d.sha256)) && err.contains("snapshot.debian.org"), "{err}");
}

#[test]
fn kiln_cache_dir_moves_the_cache() {
    let tmp = temp("env");
    let dir = tmp.path();
    std::env::set_var(kiln_toolchain::cache::ENV, dir);
    let cache = Cache::from_env().unwrap();
    assert_eq!(cache.root(), dir.canonicalize().unwrap());
    assert!(cache.debs().starts_with(dir.canonicalize().unwrap()));
}

#[test]
fn racing_publishers_leave_one_whole_entry() {
    let tmp = temp("race");
    let cache = Cache::at(tmp.path().to_path_buf()).unwrap();
    let dest = cache.objects().join("entry");
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let cache = cache.clone();
            let dest = dest.clone();
            std::thread::spawn(move || {
                let tmp = cache.scratch("job").unwrap();
                fs::write(tmp.join("out"), format!("writer {i}")).unwrap();
                publish_dir(&tmp, &dest).unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let text = fs::read_to_string(dest.join("out")).unwrap();
    assert!(text.starts_with("writer "), "{text}");
    assert_eq!(fs::read_dir(cache.tmp()).unwrap().count(), 0, "losers' scratch folders are removed");
}

#[test]
fn what_a_download_killed_mid_way_leaves_is_never_taken_for_the_package() {
    // A `kill -9` during a download leaves `<sha>.part.<pid>` with some of
    // the bytes and no `<sha>.deb`: the next fetch ignores it and downloads whole.
    let body = b"the whole package".to_vec();
    let d = deb(&body);
    let good = serve(HashMap::from([(format!("/{}", d.path), body.clone())]));
    let tmp = temp("killed");
    let cache = Cache::at(tmp.path().to_path_buf()).unwrap();
    fs::create_dir_all(cache.debs()).unwrap();
    let dest = cache.debs().join(format!("{}.deb", d.sha256));
    fs::write(dest.with_extension("part.999999"), &body[..5]).unwrap();
    let got = fetch::fetch_deb(&cache, &[good], &d).unwrap();
    assert_eq!(got, dest);
    assert_eq!(fs::read(&got).unwrap(), body);
}

#[test]
fn a_full_disk_names_the_folder_and_no_other_mirror_is_blamed() {
    // Before: curl's "(23) Failure writing output", then the next mirror's error.
    // A 64 KiB tmpfs needs root (CAP_SYS_ADMIN); elsewhere the case is skipped, saying so.
    let tmp = temp("full");
    let mnt = tmp.path().join("small");
    fs::create_dir(&mnt).unwrap();
    let mounted = std::process::Command::new("mount").args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"]).arg(&mnt).status();
    if !mounted.is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED a_full_disk_names_the_folder_and_no_other_mirror_is_blamed: cannot mount a small tmpfs (not root?)");
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.clone());
    let body = vec![42u8; 1 << 20];
    let d = deb(&body);
    let first = serve(HashMap::from([(format!("/{}", d.path), body.clone())]));
    let second = serve(HashMap::from([(format!("/{}", d.path), body.clone())]));
    let cache = Cache::at(mnt.clone()).unwrap();
    let err = format!("{:#}", fetch::fetch_deb(&cache, &[first.clone(), second.clone()], &d).unwrap_err());
    assert!(err.contains("disk is full") && err.contains(&cache.debs().display().to_string()), "names the folder: {err}");
    assert!(err.contains(&first) && !err.contains(&second), "the second mirror was neither tried nor blamed: {err}");
    assert_eq!(fs::read_dir(cache.debs()).unwrap().count(), 0, "nothing half-written is left");
}
