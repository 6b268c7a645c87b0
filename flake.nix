{
  description = "kiln: candle's GPU kernels as reproducible, prebuilt artifacts, built with the toolchain pinned in pins.toml";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  # docs/nix.md: how to use this, what each output is, how to bump a pin.
  outputs =
    { self, nixpkgs }:
    let
      inherit (nixpkgs) lib;

      # The pinned toolchain is Debian's amd64 build: no other system runs it.
      systems = [ "x86_64-linux" ];

      pins = import ./nix/pins.nix { file = ./pins.toml; };
      cargoToml = builtins.fromTOML (builtins.readFile ./Cargo.toml);

      # CUDA is unfree. Admit NVIDIA's CUDA EULA and nothing else, so that any
      # other unfree licence still stops evaluation.
      cudaLicences = with lib.licenses; [
        nvidiaCuda
        nvidiaCudaRedist
      ];
      allowUnfreePredicate =
        pkg:
        lib.all (licence: (licence.free or true) || builtins.elem licence cudaLicences) (
          lib.toList (pkg.meta.license or [ ])
        );

      kiln = lib.genAttrs systems (
        system:
        import ./nix/packages.nix {
          pkgs = import nixpkgs {
            inherit system;
            config = { inherit allowUnfreePredicate; };
          };
          inherit pins cargoToml;
          src = self;
        }
      );
      forEach = f: lib.mapAttrs (_: f) kiln;
    in
    {
      packages = forEach (k: {
        inherit (k) sysroot dist;
        default = k.dist;
      });

      devShells = forEach (k: {
        default = k.shell;
        pins = k.pinsShell;
      });

      checks = forEach (k: {
        pins = k.pinsCheck;
        sysroot = k.sysroot;
      });

      formatter = forEach (k: k.formatter);
    };
}
