#!/usr/bin/env bash
# docs/architecture.md is the map: every module under src/ and every program under
# src/cmd/ appears in it by its source path.
set -uo pipefail
cd "$(dirname "$0")/../.."
fail=0
for d in src/*/ src/cmd/*/; do
    d=${d%/}
    [ "$d" = src/cmd ] && continue
    grep -qF "\`$d/" docs/architecture.md || { echo "FAIL: docs/architecture.md does not name $d/"; fail=1; }
done
[ "$fail" = 1 ] || echo "ok: every module and program is on the architecture page"
exit $fail
