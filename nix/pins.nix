# pins.toml as the flake sees it: read with builtins.fromTOML and checked the
# way crates/kiln-pins checks the parts the flake uses, so that a pin file the
# xtask would reject fails here with the same message instead of turning into
# a half-right toolchain. No version is written in this file or any other Nix
# file: every one comes from the pin file.
#
# Builtins only (no nixpkgs lib), so that the checks behave the same against
# real nixpkgs and against the stub in nix/tests/stub-nixpkgs.
{ file }:
let
  name = baseNameOf (toString file);
  raw = builtins.fromTOML (builtins.readFile file);

  fail = message: help: throw "${name}: ${message}${if help == null then "" else "\n  help: ${help}"}";
  keysHelp = "see docs/pins.md for the pin file's keys";
  updateHelp = "run `cargo xtask pins update` after changing a compiler pin (`nix develop .#pins` gives a shell for it that does not need the closure)";

  # A missing table is a user error, not an evaluation accident: say which.
  get =
    set: key: what:
    if builtins.isAttrs set && set ? ${key} then set.${key} else fail "${what} is missing" keysHelp;

  isSha256 = s: builtins.isString s && builtins.match "[0-9a-f]{64}" s != null;
  all = pred: builtins.foldl' (ok: x: ok && pred x) true;

  schema = raw.schema or null;
  toolchain = get raw "toolchain" "[toolchain]";
  mirrors = get toolchain "mirrors" "toolchain.mirrors";

  # Kernel sets ([sets.<name>], docs/kernel-sets.md). A set's source is a
  # crate (crate, version, sha256) or a folder of the repository (path).
  sets = get raw "sets" "[sets]";
  setNames = builtins.attrNames sets;
  sourceOf = n: get sets.${n} "source" "sets.${n}.source";
  crateSets = builtins.filter (n: (sourceOf n) ? crate) setNames;
  # What a plain `cargo xtask dist` builds: the sets without `default = false`.
  defaultCrateSets = builtins.filter (n: sets.${n}.default or true) crateSets;
  checkSet =
    n:
    isSha256 ((sourceOf n).sha256 or null)
    || fail "sets.${n}.source.sha256 is not a sha256 (64 lowercase hex digits)" null;

  # The compilers, in the order `cargo xtask pins check` prints them: four,
  # then the newer AMD compiler's two when one is pinned (clang_next).
  roles = [
    "nvcc"
    "clang"
    "hip"
    "rocm_device_libs"
  ]
  ++ (
    if toolchain ? clang_next then
      [
        "clang_next"
        "rocm_device_libs_next"
      ]
    else
      [ ]
  );
  compilers = map (
    role:
    let
      pin = get toolchain role "toolchain.${role}";
    in
    {
      inherit role;
      package = get pin "package" "toolchain.${role}.package";
      version = get pin "version" "toolchain.${role}.version";
    }
  ) roles;

  closure =
    if toolchain ? closure then
      get toolchain.closure "debs" "toolchain.closure.debs"
    else
      fail "the toolchain's package closure ([toolchain.closure]) is missing" "run `cargo xtask pins update` to resolve it from [toolchain]";

  byName = builtins.listToAttrs (
    map (d: {
      inherit (d) name;
      value = d;
    }) closure
  );

  # pool/<component>/<prefix>/<source package>/<file>: the component says
  # whether a package is free (the flake's licence metadata needs that).
  poolParts =
    d:
    let
      m = builtins.match "pool/([^/]+)/[^/]+/([^/]+)/[^/]+" d.path;
    in
    if m == null then
      fail "closure package ${d.name} has path `${d.path}`, which is not pool/<component>/<prefix>/<source>/<file>" updateHelp
    else
      {
        component = builtins.elemAt m 0;
        source = builtins.elemAt m 1;
      };

  checkDeb =
    d:
    if !(isSha256 (d.sha256 or null)) then
      fail "closure package ${d.name or "(unnamed)"}: `${toString (d.sha256 or "")}` is not a sha256 (64 lowercase hex digits)" updateHelp
    else
      true;

  checkCompiler =
    c:
    let
      found = byName.${c.package} or null;
    in
    if found == null then
      fail "${c.package} is pinned to ${c.version} but [toolchain.closure] is missing it" updateHelp
    else if found.version != c.version then
      fail "${c.package} is pinned to ${c.version} but [toolchain.closure] has ${found.version}" updateHelp
    else
      true;

  checkMirror =
    m:
    if builtins.match "(https?|file)://.*[^/]" m == null then
      fail "mirror `${m}` must be an http(s):// or file:// URL without a trailing slash" null
    else
      true;

  valid =
    (
      schema == 2
      || fail "unsupported schema ${toString schema}; this flake reads schema 2" (
        if schema == 1 then "move [candle] into [sets.candle] and [crate] into [sets.candle.crate] (docs/kernel-sets.md)" else null
      )
    )
    && (
      (toolchain.distribution or null) == "debian"
      || fail "only `debian` toolchains are supported (toolchain.distribution)" null
    )
    && (mirrors != [ ] || fail "toolchain.mirrors is empty: kiln needs somewhere to download from" null)
    && all checkMirror mirrors
    && all checkDeb closure
    && (
      builtins.length (builtins.attrNames byName) == builtins.length closure
      || fail "a package is listed twice in [toolchain.closure]" updateHelp
    )
    && all checkCompiler compilers
    && (setNames != [ ] || fail "the pin file has no kernel set ([sets.<name>])" null)
    && all checkSet crateSets
    && (
      !(toolchain ? ptxas)
      || isSha256 (toolchain.ptxas.sha256 or null)
      || fail "toolchain.ptxas.sha256 is not a sha256 (64 lowercase hex digits)" null
    );

  # Rust sorts the closure by name (names are unique) before hashing; Nix
  # compares strings byte by byte, as Rust does.
  sorted = builtins.sort (a: b: a.name < b.name) closure;

  # Must equal kiln_toolchain::sysroot::identity: xtask/tests/nix_flake.rs
  # compares the two, and the xtask refuses a sysroot whose record differs.
  identity = builtins.hashString "sha256" (
    "kiln-sysroot v1\n"
    + builtins.concatStringsSep "" (map (d: "${d.name} ${d.version} ${d.arch} ${d.sha256}\n") sorted)
  );
in
assert valid;
{
  inherit file identity compilers;
  suite = get toolchain "suite" "toolchain.suite";

  # The record kiln writes into a sysroot (kiln_toolchain::sysroot::Record).
  record = {
    inherit identity;
    debs = map (d: { inherit (d) name version sha256; }) sorted;
  };

  # In file order, which is the order the xtask unpacks them in: later
  # packages overwrite earlier ones the same way in both.
  debs = map (
    d:
    {
      inherit (d)
        name
        version
        arch
        sha256
        path
        ;
      # Every mirror, tried in order, as the xtask does.
      urls = map (m: "${m}/${d.path}") mirrors;
    }
    // poolParts d
  ) closure;

  # The newer ptxas's wheel (PyPI), when pinned: the xtask takes it from its
  # cache's wheels/<sha256>.whl, where the dist derivation puts a fixed-output fetch.
  ptxas =
    if toolchain ? ptxas then
      {
        url = get toolchain.ptxas "url" "toolchain.ptxas.url";
        inherit (toolchain.ptxas) sha256;
      }
    else
      null;

  # The source crates of the default sets: the dist derivation fetches each
  # (the xtask checks it against the same sha256 again).
  crates = map (
    n:
    let
      s = sourceOf n;
    in
    {
      crate = get s "crate" "sets.${n}.source.crate";
      version = get s "version" "sets.${n}.source.version";
      inherit (s) sha256;
    }
  ) defaultCrateSets;
}
