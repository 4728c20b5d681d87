#!/usr/bin/env bash
# run.sh — runs every test program and adds up their results.
#
# Each C test binary in $BUILD/tests and each script tests/cli/*.sh prints a
# line "RESULT <passed> <failed>"; tests/oracle/*.mjs (node) do the same.
# The run ends with the line "N passed, N failed" and exits non-zero on any failure.
set -u
BUILD=${BUILD:-build}
export BUILD
cd "$(dirname "$0")/.."
passed=0; failed=0
run_one() {
    local name=$1; shift
    local out rc
    out=$("$@" 2>&1); rc=$?
    local line
    line=$(printf '%s\n' "$out" | grep -E '^RESULT [0-9]+ [0-9]+$' | tail -n 1)
    if [ -z "$line" ]; then
        printf '%s\n' "$out" | tail -n 30
        echo "FAIL $name: no RESULT line (exit $rc)"
        failed=$((failed + 1)); return
    fi
    local p f
    p=$(echo "$line" | cut -d' ' -f2); f=$(echo "$line" | cut -d' ' -f3)
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    passed=$((passed + p)); failed=$((failed + f))
    if [ "$f" -ne 0 ]; then printf '%s\n' "$out" | grep -v '^RESULT' | tail -n 60; fi
    printf '%-28s %4d passed, %d failed\n' "$name" "$p" "$f"
}
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    run_one "$(basename "$t")" "$t"
done
for t in tests/cli/*.sh; do
    [ -f "$t" ] || continue
    run_one "$(basename "$t")" bash "$t"
done
if [ -d tests/oracle ] && command -v node >/dev/null; then
    for t in tests/oracle/*.mjs; do
        [ -f "$t" ] || continue
        run_one "$(basename "$t")" node "$t"
    done
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
