# The stub stdenv's setup, sourced by builder.sh and by `nix develop`.
# Inputs' bin/ first, then the host's tools: stub builds are unsandboxed.
PATH=/usr/bin:/bin
for input in $nativeBuildInputs $buildInputs; do
    if [ -d "$input/bin" ]; then
        PATH="$input/bin:$PATH"
    fi
done
export PATH

genericBuild() {
    if [ -n "${buildCommand:-}" ]; then
        eval "$buildCommand"
    else
        eval "${buildPhase:-}"
        eval "${installPhase:-}"
    fi
}
