#!/usr/bin/env bash
# A test may skip locally when a prerequisite is missing, never under CI (tests/lib/README.md).
# 1. Every skip goes through tests/lib/vg_skip.{sh,py,h}: no test exits 77 or calls
#    cmocka's skip() or unittest's skips by itself.
# 2. Real skipping tests, with their prerequisite taken away, skip without CI and fail
#    with CI=true: sim_cli.sh without the openb trace, grpc_interop.py without grpc
#    (python3 -S: no site packages), test_sim without the trace.
# Usage: skips.sh TEST_SIM
set -uo pipefail
cd "$(dirname "$0")/../.."
test_sim=$1
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# 1. Skips that bypass the helpers, in any letter case (unittest.SkipTest, pytest.skip,
#    skipIf ...), in the tests and in the scripts of bench/, images/ and demo/.
hits=$(grep -rniE --include='*.sh' --include='*.py' --include='*.c' --include='*.h' \
    -e 'exit[ (]*77\b' -e '(^|[^_[:alnum:]])skip\(\)' \
    -e 'skiptest|unittest\.skip|pytest\.skip|skipif|skipunless' \
    tests bench images demo | grep -v -e '^tests/lib/' -e '^tests/lint/skips.sh:' -e '^tests/fuzz/corpus/')
if [ -n "$hits" ]; then
    bad "skips that bypass tests/lib/vg_skip.*:"
    echo "$hits"
fi
# CTest's PASS_REGULAR_EXPRESSION ignores the exit status: a check that must refuse
# goes through tests/lib/expect_fail.sh (non-zero exit AND the message).
hits=$(grep -rn --include='*.cmake' --include='CMakeLists.txt' 'PASS_REGULAR_EXPRESSION' \
    tests bench src cmake CMakeLists.txt)
if [ -n "$hits" ]; then
    bad "PASS_REGULAR_EXPRESSION ignores the exit status; use tests/lib/expect_fail.sh:"
    echo "$hits"
fi

# 2. Run them: rc without CI must be the skip, with CI=true a failure.
nowhere=$(mktemp -d)
trap 'rm -rf "$nowhere"' EXIT
check() { # name expected_local_rc command...
    local name=$1 want=$2
    shift 2
    local out rc
    out=$(env -u CI "$@" 2>&1)
    rc=$?
    [ "$rc" = "$want" ] || bad "$name without CI: exit $rc, want $want (skip): $out"
    grep -q "skipping: missing" <<<"$out" || bad "$name without CI does not say what is missing: $out"
    out=$(env CI=true "$@" 2>&1)
    rc=$?
    { [ "$rc" != 0 ] && [ "$rc" != 77 ]; } || bad "$name with CI=true: exit $rc, want a failure: $out"
    grep -q "missing under CI" <<<"$out" || bad "$name with CI=true does not say why it fails: $out"
    echo "ok: $name skips locally, fails under CI"
}
check sim_cli.sh 77 env VGPU_OPENB_DIR="$nowhere" tests/integration/sim_cli.sh /bin/false "$nowhere"
check grpc_interop.py 77 /usr/bin/python3 -S tests/integration/grpc_interop.py x y z
check test_sim 77 env VGPU_OPENB_DIR="$nowhere" "$test_sim"
# CI=false and CI=0 are not CI.
out=$(env CI=false VGPU_OPENB_DIR="$nowhere" tests/integration/sim_cli.sh /bin/false "$nowhere" 2>&1)
[ $? = 77 ] || bad "CI=false is treated as CI: $out"
exit $fail
