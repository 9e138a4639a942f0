#!/usr/bin/env bash
# A check that must refuse its input: passes only when COMMAND exits non-zero AND its
# output matches the extended regular expression REGEX (over the whole output, so `.*` may
# span lines, as in CTest). CTest's PASS_REGULAR_EXPRESSION ignores the exit status (a
# check that printed the message and exited 0 would pass), so tests use this instead
# (tests/lint/skips.sh rejects PASS_REGULAR_EXPRESSION).
# Usage: expect_fail.sh REGEX COMMAND [ARG...]
set -uo pipefail
regex=$1
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" = 0 ]; then
    echo "FAIL: the command succeeded; it must refuse: $*"
    exit 1
fi
if [ "$rc" = 77 ]; then
    echo "FAIL: the command skipped (77); it must refuse: $*"
    exit 1
fi
if ! grep -qzE -- "$regex" <<<"$out"; then
    echo "FAIL: exit $rc, but the output does not match /$regex/"
    exit 1
fi
echo "ok: refused (exit $rc) with /$regex/"
