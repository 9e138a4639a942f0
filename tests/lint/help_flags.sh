#!/usr/bin/env bash
# Every program's --help is one usage with one meaning per flag: it exits 0, has exactly
# one "usage:" line, and lists no flag twice (a flag's own line starts with "  --").
# Usage: help_flags.sh BIN_DIR
set -uo pipefail
bin=$1
fail=0
for p in vgpu vgpu-scheduler vgpu-device-plugin vgpu-dra-plugin vgpu-monitor vgpu-sim; do
    out=$("$bin/$p" --help 2>&1)
    rc=$?
    [ "$rc" = 0 ] || { echo "FAIL: $p --help exits $rc"; fail=1; }
    n=$(grep -ci '^usage:' <<<"$out")
    [ "$n" = 1 ] || { echo "FAIL: $p --help prints $n usages"; fail=1; }
    dups=$(grep -oE '^  --[a-z][a-z0-9-]*' <<<"$out" | sort | uniq -d | tr -d ' ' | tr '\n' ' ')
    [ -z "$dups" ] || { echo "FAIL: $p --help lists more than once: $dups"; fail=1; }
    [ "$fail" = 1 ] || echo "ok: $p"
done
exit $fail
