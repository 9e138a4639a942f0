#!/usr/bin/env bash
# `make` with no target builds into build/, as the README says: the default goal is `all`,
# whose recipe runs the CMake build. `make -n` prints the recipe without running it.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=$(make -n BUILD=build-make-default-check 2>&1)
if ! grep -q 'cmake --build build-make-default-check' <<<"$out"; then
    echo "FAIL: make with no target does not build; make -n printed:"
    echo "$out"
    exit 1
fi
echo "ok: make with no target runs the build"
