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
  c = pins.candle;
  # The same file the xtask would fetch with cargo, verified by the same sha256.
  crate = fetchurl {
    name = "${c.crate}-${c.version}.crate";
    urls = [
      "https://static.crates.io/crates/${c.crate}/${c.crate}-${c.version}.crate"
      "https://crates.io/api/v1/crates/${c.crate}/${c.version}/download"
    ];
    inherit (c) sha256;
  };
in
rustPlatform.buildRustPackage {
  pname = "kiln-dist";
  inherit version src;
  cargoLock.lockFile = src + "/Cargo.lock";

  nativeBuildInputs = [ bubblewrap ];
  KILN_SYSROOT = sysroot;

  # The builder has no network, and the xtask fetches candle-kernels with
  # cargo. The fixed-output fetch above has the pinned bytes, so they go where
  # kiln keeps verified sources (crates/kiln-build/src/upstream.rs), which the
  # xtask then uses without fetching.
  buildPhase = ''
    runHook preBuild
    export KILN_CACHE_DIR="$TMPDIR/kiln-cache"
    sources="$KILN_CACHE_DIR/sources"
    mkdir -p "$sources"
    tar -xzf ${crate} -C "$sources"
    dest="$sources/${c.crate}-${c.version}-${builtins.substring 0 16 c.sha256}"
    mv "$sources/${c.crate}-${c.version}" "$dest"
    echo ${c.sha256} > "$dest/.kiln-verified"
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
