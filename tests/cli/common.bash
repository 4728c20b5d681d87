# common.bash — sourced by tests/cli/*.sh (not a test itself: tests/run.sh runs *.sh only).
# Moves to the repository root and defines: B (the build folder, absolute), LMC (the CLI),
# ok / bad (count a passed / failed check; bad prints why), finish (prints the RESULT line
# tests/run.sh adds up and exits non-zero on any failure).
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
B=${BUILD:-build}
case $B in /*) ;; *) B=$PWD/$B ;; esac
LMC=$B/lmc
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
finish() { echo "RESULT $pass $fail"; [ "$fail" -eq 0 ]; exit $?; }
