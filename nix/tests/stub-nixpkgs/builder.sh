# Every stub derivation's builder (default.nix says why a script file).
source "$stdenv/setup"
genericBuild
