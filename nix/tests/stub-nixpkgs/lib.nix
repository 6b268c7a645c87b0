# The part of nixpkgs' lib that kiln's flake uses, with nixpkgs' semantics.
# The licences carry nixpkgs' fields, so that comparing them (the flake's
# allowUnfreePredicate does) behaves as it does against nixpkgs.
let
  all = pred: builtins.foldl' (ok: x: ok && pred x) true;
  any = pred: builtins.foldl' (ok: x: ok || pred x) false;
in
{
  inherit all any;

  toList = x: if builtins.isList x then x else [ x ];

  unique = builtins.foldl' (acc: x: if builtins.elem x acc then acc else acc ++ [ x ]) [ ];

  genAttrs =
    names: f:
    builtins.listToAttrs (
      map (name: {
        inherit name;
        value = f name;
      }) names
    );

  inherit (builtins) mapAttrs;

  concatMapStrings = f: list: builtins.concatStringsSep "" (map f list);

  versionAtLeast = v: min: builtins.compareVersions v min >= 0;

  toUpper = builtins.replaceStrings (builtins.genList (i: builtins.substring i 1 "abcdefghijklmnopqrstuvwxyz") 26) (
    builtins.genList (i: builtins.substring i 1 "ABCDEFGHIJKLMNOPQRSTUVWXYZ") 26
  );

  licenses = {
    free = {
      shortName = "free";
      fullName = "Unspecified free software license";
      deprecated = false;
      free = true;
      redistributable = true;
    };
    unfree = {
      shortName = "unfree";
      fullName = "Unfree";
      deprecated = false;
      free = false;
      redistributable = false;
    };
    nvidiaCuda = {
      shortName = "CUDA EULA";
      fullName = "CUDA Toolkit End User License Agreement (EULA)";
      url = "https://docs.nvidia.com/cuda/eula/index.html#cuda-toolkit-supplement-license-agreement";
      deprecated = false;
      free = false;
      redistributable = false;
    };
    nvidiaCudaRedist = {
      shortName = "CUDA EULA";
      fullName = "CUDA Toolkit End User License Agreement (EULA)";
      url = "https://docs.nvidia.com/cuda/eula/index.html#cuda-toolkit-supplement-license-agreement";
      deprecated = false;
      free = false;
      redistributable = true;
    };
  };
}
