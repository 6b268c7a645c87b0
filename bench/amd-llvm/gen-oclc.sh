#!/bin/sh
# gen-oclc.sh OUTDIR ISA_VERSION...  (run where llvm-as is the LLVM that will link them)
# Writes the AMDGPU device libraries' control libraries (oclc_*.bc) as textual IR and
# assembles them: each is one hidden linkonce_odr constant in address space 4, exactly what
# rocm-device-libs' oclc/src/*.cl compile to (shape read back with llvm-dis from Debian's
# rocm-device-libs-21 7.0.2+dfsg-3). ISA_VERSION is major*1000+minor*100+stepping:
# gfx950 -> 9500, gfx1200 -> 12000, gfx1201 -> 12001.
set -eu
out=$1; shift; mkdir -p "$out"
dl='target datalayout = "m:e-e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32-p7:160:256:256:32-p8:128:128:128:48-p9:192:256:256:32-i64:64-v16:16-v24:32-v32:32-v48:64-v96:128-v192:256-v256:256-v512:512-v1024:1024-v2048:2048-n32:64-S32-A5-G1-ni:7:8:9"'
one() { # file, then "name type value align" lines
  f=$1; shift
  { echo "$dl"; echo 'target triple = "amdgcn-amd-amdhsa"'
    for g in "$@"; do set -- $g
      echo "@$1 = linkonce_odr hidden local_unnamed_addr addrspace(4) constant $2 $3, align $4"; done
  } > "$out/$f.ll"
  llvm-as "$out/$f.ll" -o "$out/$f.bc" && rm "$out/$f.ll"
}
for v in 0 1; do
  s=$([ $v = 1 ] && echo on || echo off)
  one oclc_unsafe_math_$s "__oclc_unsafe_math_opt i8 $v 1"
  one oclc_finite_only_$s "__oclc_finite_only_opt i8 $v 1"
  one oclc_correctly_rounded_sqrt_$s "__oclc_correctly_rounded_sqrt32 i8 $v 1"
  one oclc_daz_opt_$s                      # empty since ROCm 6.x (denormal mode is a function attribute)
  one oclc_wavefrontsize64_$s "__oclc_wavefrontsize64 i8 $v 1" "__oclc_wavefrontsize_log2 i32 $((5 + v)) 4"
done
for a in 400 500 600; do one oclc_abi_version_$a "__oclc_ABI_version i32 $a 4"; done
for v in "$@"; do
  n=$(( v / 1000 ))$(printf %x $(( v % 1000 / 100 )))$(printf %x $(( v % 100 )))
  one oclc_isa_version_$n "__oclc_ISA_version i32 $v 4"
done
