#!/usr/bin/env bash
# The dist beyond one machine, measured on this one (docs/distributed.md):
#
#   single       an empty-cache `cargo xtask dist` (every module, every target, crates)
#   shards N     N shards, each on its own empty cache as on its own runner, one after
#                the other; then `dist merge` on a further empty cache; the merged
#                folder compared byte for byte with the single-machine one
#   remote       a dist on an empty cache with a warm remote cache and --no-compile
#
# Every cache is empty of compiled objects but shares the real cache's unpacked
# toolchain and sources (symbolic links), so provisioning is not measured. With
# KILN_BENCH_REMOTE=1, `shards` writes back to a remote cache (nginx with WebDAV PUT on
# loopback, serving $OUT/remote) that `remote` then reads. While each step runs the
# load average is sampled every 5 s: the machine is shared, and its other users'
# compiles slow every figure here; the table says how loaded it was.
#
# Usage: cargo build -p xtask && bash bench/dist-shards.sh single|shards N|remote [OUT]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
phase=${1:?"single, shards N or remote"}
if [ "$phase" = shards ]; then n=${2:?"shards N"}; shift; fi
out=${2:-$root/target/bench-shards}
xtask=$root/target/debug/xtask
[ -x "$xtask" ] || { echo "build xtask first: cargo build -p xtask" >&2; exit 1; }
real=${KILN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln}
mkdir -p "$out"
times=$out/times.tsv

fresh_cache() {
  rm -rf "$1"
  mkdir -p "$1"
  ln -s "$real/toolchains" "$1/toolchains"
  ln -s "$real/sources" "$1/sources"
}

# Runs "$@" with its log in $out/<label>.log; appends label, wall seconds, and the
# mean and peak 1-minute load average while it ran to times.tsv.
timed() {
  local label=$1
  shift
  local samples=$out/$label.load
  : >"$samples"
  (while :; do cut -d' ' -f1 /proc/loadavg >>"$samples"; sleep 5; done) &
  local sampler=$!
  local start end rc=0
  start=$(date +%s.%N)
  "$@" >"$out/$label.log" 2>&1 || rc=$?
  end=$(date +%s.%N)
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  local load
  load=$(awk '{ s += $1; if ($1 > m) m = $1 } END { if (NR) printf "%.1f\t%.1f", s / NR, m; else printf "-\t-" }' "$samples")
  printf '%s\t%.1f\t%s\n' "$label" "$(echo "$end - $start" | bc)" "$load" | tee -a "$times"
  if [ $rc -ne 0 ]; then
    echo "$label failed ($rc); the end of $out/$label.log:" >&2
    tail -20 "$out/$label.log" >&2
    exit $rc
  fi
}

nginx_pid=
start_nginx() {
  local dir=$out/nginx port
  mkdir -p "$dir/tmp" "$out/remote/kiln"
  printf 'bench:{PLAIN}bench\n' >"$dir/htpasswd"
  printf 'machine 127.0.0.1 login bench password bench\n' >"$dir/netrc"
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  cat >"$dir/nginx.conf" <<EOF
daemon off; master_process off; worker_processes 1;
pid $dir/nginx.pid; error_log $dir/error.log;
events { worker_connections 64; }
http {
  access_log $dir/access.log; client_max_body_size 0;
  client_body_temp_path $dir/tmp/body; proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi; uwsgi_temp_path $dir/tmp/uwsgi; scgi_temp_path $dir/tmp/scgi;
  server {
    listen 127.0.0.1:$port; root $out/remote;
    location / { dav_methods PUT; create_full_put_path on;
      limit_except GET HEAD { auth_basic kiln; auth_basic_user_file $dir/htpasswd; } }
  }
}
EOF
  /usr/sbin/nginx -c "$dir/nginx.conf" -e "$dir/error.log" &
  nginx_pid=$!
  trap 'kill $nginx_pid 2>/dev/null || true' EXIT
  for _ in $(seq 50); do (echo >/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
  export KILN_REMOTE_CACHE=http://127.0.0.1:$port/kiln KILN_REMOTE_CACHE_NETRC=$dir/netrc
}

same_as_single() {
  if [ -d "$out/single" ]; then
    if diff -r "$1" "$out/single" >/dev/null; then
      echo "$1: byte for byte the single-machine dist ($(find "$1" -type f | wc -l) files)" | tee -a "$times"
    else
      echo "$1: DIFFERS from the single-machine dist" | tee -a "$times"
      exit 1
    fi
  fi
}

cores=$(nproc)
echo "# $(date -u +%FT%TZ) $phase ${n:-} on $(uname -n), $cores cores; label, wall s, mean load, peak load" >>"$times"
case $phase in
  single)
    fresh_cache "$out/cache-single"
    KILN_CACHE_DIR=$out/cache-single timed single "$xtask" dist --locked --out "$out/single"
    ;;
  shards)
    [ "${KILN_BENCH_REMOTE:-0}" = 1 ] && start_nginx
    parts=()
    for k in $(seq "$n"); do
      fresh_cache "$out/cache-$n-$k"
      KILN_CACHE_DIR=$out/cache-$n-$k timed "shard-$k-of-$n" "$xtask" dist --shard "$k/$n" --locked --out "$out/part-$k-of-$n"
      parts+=("$out/part-$k-of-$n")
    done
    fresh_cache "$out/cache-merge-$n"
    KILN_CACHE_DIR=$out/cache-merge-$n timed "merge-$n" "$xtask" dist merge --locked --out "$out/merged-$n" "${parts[@]}"
    same_as_single "$out/merged-$n"
    ;;
  remote)
    start_nginx
    unset KILN_REMOTE_CACHE_NETRC
    fresh_cache "$out/cache-remote"
    KILN_CACHE_DIR=$out/cache-remote timed remote "$xtask" dist --locked --no-compile --remote-cache-read-only --out "$out/from-remote"
    grep -h "remote cache .*hits" "$out/remote.log" | tee -a "$times"
    same_as_single "$out/from-remote"
    ;;
  *)
    echo "unknown phase $phase: single, shards N or remote" >&2
    exit 1
    ;;
esac
