#!/usr/bin/env bash
# Rejects the C library calls vgpu bans (docs/style.md §4): unbounded copies and formatting,
# unchecked number parsing, and the non-reentrant tokenizer.
set -euo pipefail
cd "$(dirname "$0")/../.."
pattern='\b(sprintf|vsprintf|strcpy|strcat|atoi|atol|atoll|strtok|gets)[[:space:]]*\('
if hits=$(grep -rnE "$pattern" --include='*.c' --include='*.h' src tests bench demo 2>/dev/null \
          | grep -v 'tests/lint/'); then
    echo "banned functions used (see docs/style.md §4):"
    echo "$hits"
    exit 1
fi
echo "no banned functions"
