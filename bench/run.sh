#!/usr/bin/env bash
# make bench: runs every bench/<name>.sh against a build directory and prints their
# markdown tables. docs/benchmarks.md records the figures with this command.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
command -v valgrind >/dev/null || { echo "make bench needs valgrind (apt-get install -y valgrind)"; exit 1; }
echo "# vgpu benchmarks ($(date -u +%Y-%m-%d), $(uname -m), $(nproc) cores, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown))"
failed=""
for script in bench/*.sh; do
    [ "$(basename "$script")" = run.sh ] && continue
    echo
    echo "## $(basename "$script" .sh)"
    echo
    # A benchmark that misses a stated target exits non-zero: the others still run, and
    # make bench fails at the end naming each miss.
    bash "$script" "$build" || failed="$failed $(basename "$script" .sh)"
done
if [ -n "$failed" ]; then
    echo "make bench: targets missed or benchmarks failed:$failed" >&2
    exit 1
fi
