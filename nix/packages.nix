# Everything the flake provides for one system, built from one nixpkgs.
{
  pkgs,
  pins,
  src,
  cargoToml,
}:
let
  inherit (pkgs) lib;

  # nixpkgs' Rust comes from the locked nixpkgs; the floor is the workspace's
  # own rust-version, read from Cargo.toml rather than repeated here.
  rustVersion = cargoToml.workspace.package.rust-version;
  rust =
    if lib.versionAtLeast pkgs.rustc.version rustVersion then
      [
        pkgs.rustc
        pkgs.cargo
        pkgs.clippy
        pkgs.rustfmt
      ]
    else
      throw "nixpkgs' rustc ${pkgs.rustc.version} is older than the workspace's rust-version ${rustVersion} (Cargo.toml): update the nixpkgs input with `nix flake update` (docs/nix.md)";

  sysroot = pkgs.callPackage ./sysroot.nix { inherit pins; };

  # One variable per compiler pin, `<package> <version>` as `cargo xtask pins
  # check` prints it: what the shell says it provides, straight from the pins.
  compilerVars = builtins.listToAttrs (
    map (c: {
      name = "KILN_TOOLCHAIN_${lib.toUpper c.role}";
      value = "${c.package} ${c.version}";
    }) pins.compilers
  );

  short = builtins.substring 0 12 pins.identity;
in
{
  inherit sysroot;

  # RFC 166 style, the official Nix format (`nix fmt`).
  formatter = pkgs.nixfmt;

  dist = pkgs.callPackage ./dist.nix {
    inherit src sysroot pins;
    inherit (cargoToml.workspace.package) version;
  };

  shell = pkgs.mkShell (
    {
      packages = rust ++ [
        pkgs.cargo-nextest
        # The xtask runs every compiler in a bubblewrap sandbox rooted at KILN_SYSROOT.
        pkgs.bubblewrap
        pkgs.dpkg
      ];
      # The one variable the xtask reads from the shell: use this toolchain
      # instead of provisioning one (it still checks the record against the pins).
      KILN_SYSROOT = sysroot;
      KILN_TOOLCHAIN_IDENTITY = pins.identity;
      shellHook = ''
        echo "kiln: pinned toolchain ${short} (${pins.suite}) at $KILN_SYSROOT" >&2
      '';
    }
    // compilerVars
  );

  # For `cargo xtask pins update` while the closure disagrees with a freshly
  # edited compiler pin, which the default shell refuses to evaluate. apt-get
  # and Debian's archive keyring come from the host (docs/nix.md).
  pinsShell = pkgs.mkShell { packages = rust; };

  # Cheap: instantiates the sysroot and every fetch (so the pins, the licences
  # and the unfree predicate are all checked) and writes the record and the
  # fetch list, without downloading anything.
  pinsCheck = builtins.seq sysroot.drvPath (
    pkgs.runCommand "kiln-pins-${short}"
      {
        record = builtins.toJSON pins.record;
        fetches = lib.concatMapStrings (d: "${d.name} ${builtins.head d.urls} ${d.sha256}\n") pins.debs;
        passAsFile = [
          "record"
          "fetches"
        ];
      }
      ''
        mkdir -p "$out"
        cp "$recordPath" "$out/sysroot.json"
        cp "$fetchesPath" "$out/fetches"
        echo ${pins.identity} > "$out/identity"
      ''
  );
}
