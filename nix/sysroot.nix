# The pinned toolchain as one store path in kiln's sysroot layout
# (crates/kiln-toolchain/src/sysroot.rs): every .deb of [toolchain.closure]
# fetched by its pinned sha256 and unpacked with `dpkg-deb -x` in the order the
# xtask unpacks them, the folders the sandbox mounts on, and the record that
# `cargo xtask` checks before it trusts a KILN_SYSROOT.
#
# The compilers are Debian's builds, not nixpkgs' (whose CUDA and ROCm
# versions differ from the pins): a fixed-output fetch cannot yield other
# bytes than the pinned ones, so this is the toolchain the container and the
# xtask's own provisioning produce, with the same identity.
{
  lib,
  stdenvNoCC,
  fetchurl,
  dpkg,
  pins,
}:
let
  # Folders kiln_toolchain::sysroot::MOUNT_POINTS names, and the record's path
  # (sysroot::RECORD); xtask/tests/nix_flake.rs fails if these drift.
  mountPoints = [
    "kiln/src"
    "kiln/hip"
    "kiln/kernels"
    "kiln/job"
  ];

  # Debian's non-free packages here are NVIDIA's CUDA toolkit; any other
  # non-free package gets the generic unfree licence, which the flake's
  # allowUnfreePredicate refuses, so that adding one is a decision.
  licenceOf =
    d:
    if d.component != "non-free" then
      lib.licenses.free
    else if d.source == "nvidia-cuda-toolkit" then
      lib.licenses.nvidiaCuda
    else
      lib.licenses.unfree;

  # Debian versions hold `~` and epoch colons; store path names allow neither.
  storeName = builtins.replaceStrings [ "~" ":" ] [ "_" "_" ];

  fetch =
    d:
    fetchurl {
      name = storeName "${d.name}_${d.version}_${d.arch}.deb";
      inherit (d) urls sha256;
      meta.license = licenceOf d;
    };
  fetches = map fetch pins.debs;

  sysroot = stdenvNoCC.mkDerivation {
    name = "kiln-sysroot-${builtins.substring 0 12 pins.identity}";

    debs = fetches;
    inherit mountPoints;
    nativeBuildInputs = [ dpkg ];

    record = builtins.toJSON pins.record;
    passAsFile = [ "record" ];

    # buildCommand, not phases: the fixup phase would strip and patch Debian's
    # binaries, which run unchanged with this folder as `/` under bubblewrap.
    buildCommand = ''
      mkdir -p "$out"
      for deb in $debs; do
        dpkg-deb -x "$deb" "$out"
      done
      for dir in $mountPoints; do
        mkdir -p "$out/$dir"
      done
      mkdir -p "$out/.kiln"
      cp "$recordPath" "$out/.kiln/sysroot.json"
    '';

    passthru = {
      inherit (pins) identity record;
      inherit fetches;
    };

    meta = {
      description = "kiln's pinned GPU toolchain (nvcc, clang/HIP, ROCm device libraries) from Debian ${pins.suite}";
      license = lib.unique (map licenceOf pins.debs);
      platforms = [ "x86_64-linux" ];
    };
  };
in
# Instantiate every fetch before the sysroot itself, so that a package the
# unfree predicate refuses is named in the error, not only the sysroot.
builtins.deepSeq (map (f: f.drvPath) fetches) sysroot
