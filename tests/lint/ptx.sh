#!/usr/bin/env bash
# The PTX the real-GPU suite loads must be plain ASCII: a driver's PTX JIT refuses a
# module with any other byte, comments included (CUDA_ERROR_INVALID_PTX on an H200 with
# driver 580), while fakegpu accepts it. Usage: ptx.sh [FILE...] (default: every .ptx).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -eq 0 ]; then
    mapfile -t files < <(git ls-files '*.ptx' 2>/dev/null || find . -name '*.ptx')
    set -- "${files[@]}"
fi
if hits=$(LC_ALL=C grep -HnP '[^\x00-\x7F]' "$@"); then
    echo "non-ASCII bytes in PTX (a real driver refuses the module):"
    echo "$hits"
    exit 1
fi
echo "PTX is ASCII ($# files)"
