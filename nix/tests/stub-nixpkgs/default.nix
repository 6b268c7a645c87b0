# kiln's stub of nixpkgs: `import nixpkgs { system; config; }` as the flake
# calls it, with just the functions and packages the flake names.
#
# What it models faithfully: mkDerivation's unfree-licence check (the
# flake's allowUnfreePredicate is exercised for real), callPackage, mkShell
# (a `stdenv` with a `setup` script that puts every input's bin/ on PATH, which
# `nix develop` sources), runCommand, and store-name rules (through
# `derivation` itself).
#
# What it stands in for: fetchurl downloads nothing; its output is a text file
# naming the URLs and sha256 it was asked for. The packages are scripts that
# print their name and version; dpkg-deb -x copies that text file into the
# target folder, so a stub sysroot shows which fetches were unpacked, in
# which order. buildRustPackage instantiates but refuses to build.
#
# Builders are /bin/bash running a script file, unsandboxed (Debian's
# nix.conf turns the sandbox off; the test's NIX_CONFIG does too). Never
# `bash -c` ending in a coreutils command: coreutils closes stdout and stderr
# before it exits, Nix takes the closed log pipe for the builder's end and
# kills it, and the build fails with signal 9 about half the time.
{
  system,
  config ? { },
  overlays ? [ ],
}:
let
  lib = import ./lib.nix;

  unfreeLicences = attrs: builtins.filter (l: !(l.free or true)) (lib.toList (attrs.meta.license or [ ]));
  # nixpkgs' check-meta, reduced to the licence rule.
  allowed =
    attrs:
    unfreeLicences attrs == [ ]
    || (config.allowUnfree or false)
    || (config.allowUnfreePredicate or (_: false)) attrs;
  checkMeta =
    name: attrs:
    allowed attrs
    || throw "Package ‘${name}’ has an unfree license (‘${
      builtins.concatStringsSep "’, ‘" (map (l: l.shortName) (unfreeLicences attrs))
    }’), refusing to evaluate. (kiln's stub nixpkgs applies nixpkgs' licence check.)";

  stdenvSetup = derivation {
    name = "stub-stdenv";
    inherit system;
    builder = "/bin/bash";
    args = [
      "-e"
      ./make-stdenv.sh
    ];
    setup = ./setup.sh;
  };

  mkDerivation =
    attrs:
    let
      name = attrs.name or "${attrs.pname}-${attrs.version}";
      drv = derivation (
        removeAttrs attrs [
          "meta"
          "passthru"
          "cargoLock"
          "packages"
        ]
        // {
          inherit name system;
          # As stdenv does; `nix develop` writes the environment to each of $outputs.
          outputs = attrs.outputs or [ "out" ];
          builder = "/bin/bash";
          args = [
            "-e"
            ./builder.sh
          ];
          stdenv = stdenvSetup;
          nativeBuildInputs = (attrs.nativeBuildInputs or [ ]) ++ (attrs.packages or [ ]);
        }
      );
      # Like nixpkgs (lib.extendDerivation): the licence check fires when the
      # derivation is instantiated or built, not when passthru is read.
      checked = checkMeta name attrs;
    in
    drv
    // {
      drvPath = assert checked; drv.drvPath;
      outPath = assert checked; drv.outPath;
      meta = attrs.meta or { };
      version = attrs.version or "";
    }
    // (attrs.passthru or { });

  # A package that is a directory of scripts printing "<name> <version>".
  tool =
    pname: version: bins:
    mkDerivation {
      inherit pname version bins;
      buildCommand = ''
        mkdir -p "$out/bin"
        for b in $bins; do
          printf '#!/bin/bash\necho "%s %s (kiln stub nixpkgs)"\n' "$b" "$version" > "$out/bin/$b"
          chmod +x "$out/bin/$b"
        done
      '';
    };

  pkgs = {
    inherit lib system;

    stdenv = {
      inherit mkDerivation;
    };
    stdenvNoCC = {
      inherit mkDerivation;
    };

    callPackage =
      path: args:
      let
        f = import path;
      in
      f (builtins.intersectAttrs (builtins.functionArgs f) pkgs // args);

    runCommand =
      name: env: buildCommand:
      mkDerivation (env // { inherit name buildCommand; });

    mkShell =
      attrs:
      mkDerivation (
        {
          name = "nix-shell";
          buildCommand = "echo kiln-stub-shell > \"$out\"";
        }
        // attrs
      );

    fetchurl =
      {
        url ? null,
        urls ? [ url ],
        sha256 ? null,
        hash ? null,
        name ? baseNameOf (builtins.head urls),
        meta ? { },
      }:
      assert (sha256 != null || hash != null) || throw "fetchurl ${name}: no hash given";
      assert
        (builtins.all (u: builtins.isString u && u != "") urls)
        || throw "fetchurl ${name}: every URL must be a non-empty string";
      mkDerivation {
        inherit name urls meta;
        expectedHash = if sha256 != null then sha256 else hash;
        buildCommand = ''
          {
            echo "name=$name"
            for u in $urls; do echo "url=$u"; done
            echo "sha256=$expectedHash"
          } > "$out"
        '';
      };

    rustPlatform.buildRustPackage =
      args:
      assert
        builtins.pathExists args.cargoLock.lockFile
        || throw "buildRustPackage: cargoLock.lockFile ${toString args.cargoLock.lockFile} does not exist";
      mkDerivation (
        args
        // {
          buildCommand = ''
            echo "kiln's stub nixpkgs cannot build Rust: build this with real nixpkgs" >&2
            exit 1
          '';
        }
      );

    # `nix develop` runs the shell with its nixpkgs input's bashInteractive.
    bashInteractive = mkDerivation {
      pname = "bash-interactive";
      version = "host";
      buildCommand = ''
        mkdir -p "$out/bin"
        ln -s /bin/bash "$out/bin/bash"
      '';
    };

    rustc = tool "rustc" "1.91.0" [ "rustc" ];
    cargo = tool "cargo" "1.91.0" [ "cargo" ];
    clippy = tool "clippy" "1.91.0" [
      "cargo-clippy"
      "clippy-driver"
    ];
    rustfmt = tool "rustfmt" "1.91.0" [
      "rustfmt"
      "cargo-fmt"
    ];
    cargo-nextest = tool "cargo-nextest" "0.9.111" [
      "cargo-nextest"
    ];
    bubblewrap = tool "bubblewrap" "0.11.0" [ "bwrap" ];
    nixfmt = tool "nixfmt" "1.1.0" [ "nixfmt" ];
    dpkg = mkDerivation {
      pname = "dpkg";
      version = "stub";
      dpkgDeb = ./dpkg-deb.sh;
      buildCommand = ''
        mkdir -p "$out/bin"
        cp "$dpkgDeb" "$out/bin/dpkg-deb"
        chmod +x "$out/bin/dpkg-deb"
      '';
    };
  };
in
assert overlays == [ ] || throw "kiln's stub nixpkgs takes no overlays";
pkgs
