# A stand-in for nixpkgs, for testing kiln's flake offline:
#   nix flake check --override-input nixpkgs path:nix/tests/stub-nixpkgs
# (xtask/tests/nix_flake.rs). default.nix says what it models and what not.
{
  description = "kiln's test stub of nixpkgs: the flake's logic without downloads";

  outputs = _: {
    lib = import ./lib.nix;
    # Where `nix develop` looks for the shell it starts (bashInteractive).
    legacyPackages.x86_64-linux = import ./default.nix { system = "x86_64-linux"; };
  };
}
