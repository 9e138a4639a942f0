#!/usr/bin/env bash
# Keeps the error-path conventions of docs/development.md from sliding back:
#  - system errors are formatted with vg_err_errno / VG_STRERROR, never strerror()
#    (not thread-safe, and hand-formatted messages drift apart);
#  - scope cleanup is spelled VG_AUTO_FREE / VG_AUTO_CLOSE (base/auto.h);
#  - fakegpu's own names are fg_* / FG_*, never cu_* beside CUDA's cu*.
# Modules listed in PENDING have not been converted yet; take one off the list when it is.
set -euo pipefail
cd "$(dirname "$0")/../.."
# Modules not yet converted (none today): an extended regex of paths to leave alone.
PENDING='^$'
status=0

hits=$(grep -rnE '(^|[^_[:alnum:]])strerror[[:space:]]*\(' --include='*.c' --include='*.h' \
           src bench 2>/dev/null | grep -Ev "$PENDING" || true)
if [ -n "$hits" ]; then
    echo "strerror() used; use vg_err_errno(err, errno, ...) or VG_STRERROR(e):"
    echo "$hits"
    status=1
fi

hits=$(grep -rnE '\bVG_AUTO(FREE|CLOSE)\b' --include='*.c' --include='*.h' src tests bench \
           2>/dev/null | grep -Ev "$PENDING" | grep -v '^src/base/mem.h:' || true)
if [ -n "$hits" ]; then
    echo "old cleanup spelling; use VG_AUTO_FREE / VG_AUTO_CLOSE:"
    echo "$hits"
    status=1
fi

hits=$(grep -rnE '\b(cu_[a-z]|CU_K_)' src/fakegpu 2>/dev/null | grep -v 'cu_array_format_bytes' || true)
if [ -n "$hits" ]; then
    echo "fakegpu's own names take the fg_ / FG_ prefix, not cu_ (CUDA's):"
    echo "$hits"
    status=1
fi

# An error formatted from its own message (vsnprintf over its own input): wrap it instead.
hits=$(grep -rnE 'vg_err_(set|errno)\((err|&err),[^;]*([^[:alnum:]_.>]err->msg|[^[:alnum:]_.>]err\.msg)' \
           --include='*.c' src 2>/dev/null || true)
if [ -n "$hits" ]; then
    echo "an error formatted from its own message; use vg_err_wrap(err, ...):"
    echo "$hits"
    status=1
fi

[ "$status" = 0 ] && echo "error-path conventions hold"
exit "$status"
