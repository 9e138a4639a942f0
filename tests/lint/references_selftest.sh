#!/usr/bin/env bash
# references.py must find every kind of dangling reference and leave real ones alone:
# run it on a small made-up repository, once broken and once clean.
set -euo pipefail
lint="$(cd "$(dirname "$0")" && pwd)/references.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/docs" "$tmp/src/mod" "$tmp/tests/unit" "$tmp/bench"
: > "$tmp/README.md"
: > "$tmp/src/mod/mod.h"
: > "$tmp/src/mod/mod.c"
: > "$tmp/bench/tool.c"
printf '# Page\n' > "$tmp/docs/page.md"

# Clean: existing files, URLs, variables, placeholders, programs named without ".c".
cat > "$tmp/docs/good.md" <<'MD'
See [the page](page.md#page), [README](../README.md), [up](https://example.org/x.md),
page.md, docs/page.md, `src/mod/mod.{h,c}`, `src/mod/*.c`, `src/<module>/`, bench/tool,
<https://github.com/grpc/grpc/blob/master/doc/statuscodes.md>, $OUT/summary.md.
MD
printf '/* Convention: docs/page.md; see src/mod/mod.h. */\n#include "mod/mod.h"\n' \
    > "$tmp/src/mod/good.c"
out=$(python3 "$lint" "$tmp") || { echo "clean tree refused:"; echo "$out"; exit 1; }

# Broken: one of each kind.
printf 'A [link](missing.md) and [dir](../nowhere/).\n' > "$tmp/docs/bad.md"
printf '/* Error convention (GUIDE.md §1), facts in notes/trace-facts.md. */\n' \
    > "$tmp/src/mod/bad.c"
printf '# runs tests/unit/gone.sh, see docs/renamed.md\n# and mod/gone.h\n' > "$tmp/tests/unit/bad.sh"
if out=$(python3 "$lint" "$tmp"); then
    echo "broken tree accepted:"; echo "$out"; exit 1
fi
for want in "docs/bad.md:1: link to a file the repository does not have: missing.md" \
            "docs/bad.md:1: link to a file the repository does not have: ../nowhere/" \
            "src/mod/bad.c:1: mention to a file the repository does not have: GUIDE.md" \
            "src/mod/bad.c:1: mention to a file the repository does not have: notes/trace-facts.md" \
            "tests/unit/bad.sh:1: path to a file the repository does not have: tests/unit/gone.sh" \
            "tests/unit/bad.sh:1: mention to a file the repository does not have: docs/renamed.md" \
            "tests/unit/bad.sh:2: module path to a file the repository does not have: src/mod/gone.h"; do
    grep -qF "$want" <<< "$out" || { echo "not reported: $want"; echo "$out"; exit 1; }
done
n=$(grep -c 'does not have' <<< "$out")
[ "$n" -eq 7 ] || { echo "expected 7 reports, got $n:"; echo "$out"; exit 1; }
echo "references.py finds each kind of dangling reference and only those"
