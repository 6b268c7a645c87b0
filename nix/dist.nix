# `cargo xtask dist --locked` as a derivation: the dist folder (kernels,
# manifest.json) built with the flake's sysroot and checked against the
# committed artifacts.lock, so the output is exactly the locked artifacts.
{
  rustPlatform,
  fetchurl,
  bubblewrap,
  src,
  version,
  sysroot,
  pins,
}:
let
  # The same files the xtask would fetch with cargo (one per default kernel
  # set whose source is a crate), verified by the same sha256.
  fetchCrate =
    c:
    fetchurl {
      name = "${c.crate}-${c.version}.crate";
      urls = [
        "https://static.crates.io/crates/${c.crate}/${c.crate}-${c.version}.crate"
        "https://crates.io/api/v1/crates/${c.crate}/${c.version}/download"
      ];
      inherit (c) sha256;
    };
  crates = builtins.concatStringsSep ":" (map (c: "${fetchCrate c}") pins.crates);
  # Blackwell's ptxas, verified by its pinned sha256 here and again by the xtask,
  # which reads it from its cache's wheels/ folder instead of downloading it.
  ptxasWheel =
    if pins.ptxas == null then
      null
    else
      fetchurl {
        name = baseNameOf pins.ptxas.url;
        inherit (pins.ptxas) url sha256;
      };
  placeWheel =
    if ptxasWheel == null then
      ""
    else
      ''
        mkdir -p "$KILN_CACHE_DIR/wheels"
        cp "$ptxasWheel" "$KILN_CACHE_DIR/wheels/${pins.ptxas.sha256}.whl"
      '';
in
rustPlatform.buildRustPackage {
  pname = "kiln-dist";
  inherit version src;
  cargoLock.lockFile = src + "/Cargo.lock";

  nativeBuildInputs = [ bubblewrap ];
  KILN_SYSROOT = sysroot;
  inherit ptxasWheel;

  # The builder has no network, and the xtask would fetch the source crates
  # with cargo: KILN_SOURCE_CRATES hands it the fixed-output fetches above
  # instead (`:`-separated), which the xtask checks against the same pinned sha256.
  buildPhase = ''
    runHook preBuild
    export KILN_CACHE_DIR="$TMPDIR/kiln-cache"
    export KILN_SOURCE_CRATES=${crates}
    ${placeWheel}
    cargo xtask dist --locked
    runHook postBuild
  '';

  installPhase = ''
    runHook preInstall
    cp -r target/dist "$out"
    runHook postInstall
  '';

  # The workspace's tests run in the dev shell and CI, not here.
  doCheck = false;
  # Stripping would change the static library that artifacts.lock hashes.
  dontFixup = true;
}
