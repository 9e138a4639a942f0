#!/usr/bin/env bash
# Live resize latency end to end on fakegpu (bench/resize_bench.py): `vgpu resize`, the
# scheduler, the device plugin and every CUDA process of the container; fails when the
# p99 of "applied in every process after the command returned" is over 1 s.
# usage: bench/resize.sh BUILD [ROUNDS]. Needs root and mount namespaces (/etc/vgpu is
# bound privately, as the device plugin mounts it in a container).
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
[ -x "$build/bin/vgpu" ] || { echo "no $build/bin/vgpu: build first"; exit 1; }
if [ "$(id -u)" != 0 ] || ! unshare --mount --propagation private true 2>/dev/null; then
    # As CTest's integration.resize_latency, a skip that fails under CI (tests/lib).
    if [ -n "${VGPU_RESIZE_AS_TEST:-}" ]; then
        . tests/lib/vg_skip.sh
        vg_skip "root and mount namespaces (a private /etc/vgpu)"
    fi
    echo "skipped: needs root and mount namespaces (a private /etc/vgpu)"
    exit 0
fi
# /etc/vgpu: a tmpfs in the private namespace, or an overlay of /etc where there is none.
exec unshare --mount --propagation private /bin/sh -c '
    if [ -d /etc/vgpu ]; then mount -t tmpfs tmpfs /etc/vgpu; else
        w=$(mktemp -d); mkdir -p "$w/up" "$w/work"
        mount -t overlay overlay -o "lowerdir=/etc,upperdir=$w/up,workdir=$w/work" /etc
        mkdir /etc/vgpu; fi
    exec /usr/bin/python3 -W ignore bench/resize_bench.py "$0" "$PWD" "$1"' "$build" "${2:-20}"
