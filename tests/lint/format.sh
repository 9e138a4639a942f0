#!/usr/bin/env bash
# Formatting is the machine's job: every C file matches .clang-format.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/vg_skip.sh
command -v clang-format >/dev/null || vg_skip "clang-format (Debian package clang-format)"
files=$(find src tests bench demo -name '*.[ch]' 2>/dev/null)
[ -n "$files" ] || exit 0
clang-format --dry-run --Werror $files
echo "formatting ok"
