//! The generated crates' one payload reader (template/main/src/inflate.rs,
//! which the main crate's `payload.rs` and the link crates' build script
//! call): it inflates at most the declared size, then stops with an error.

#[path = "../template/main/src/inflate.rs"]
mod inflate;

use inflate::inflate_exactly;

fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(bytes, 3).unwrap()
}

#[test]
fn a_payload_inflates_to_exactly_its_declared_size() {
    let data = b"kernel bytes".repeat(100);
    assert_eq!(inflate_exactly("cuda/sm_90/m.cubin", &zstd(&data), data.len() as u64).unwrap(), data);
    let short = inflate_exactly("cuda/sm_90/m.cubin", &zstd(&data), data.len() as u64 + 1).unwrap_err();
    assert!(short.contains("cuda/sm_90/m.cubin") && short.contains("not the 1201 declared"), "{short}");
    let not_zstd = inflate_exactly("p", b"not zstd at all", 3).unwrap_err();
    assert!(not_zstd.contains("not zstd"), "{not_zstd}");
}

#[test]
fn a_payload_that_inflates_beyond_its_declared_size_stops_with_an_error() {
    // 64 MiB of zeros in a few KB: a reader without the bound inflates it all.
    let bomb = zstd(&vec![0u8; 64 << 20]);
    assert!(bomb.len() < 64 << 10, "{}", bomb.len());
    let e = inflate_exactly("hip/gfx90a/m.hsaco", &bomb, 4096).unwrap_err();
    assert!(e.contains("hip/gfx90a/m.hsaco") && e.contains("more than the 4096 bytes declared"), "{e}");
    // One byte over is caught too.
    let e = inflate_exactly("lib.a", &zstd(&[7u8; 101]), 100).unwrap_err();
    assert!(e.contains("more than the 100 bytes"), "{e}");
}
