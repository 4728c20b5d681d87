#!/usr/bin/env bash
# mlock.sh — --mlock: the same greedy ids as without it (mapped and --no-mmap); a server started with
# it holds the demo model file's bytes locked (/proc/PID/status VmLck at least the file's size, and
# nothing locked without the flag); with a locked-memory limit too small for the file the load fails
# with a message naming --mlock and the limit (run as nobody when the test runs as root, which may
# lock beyond any limit). Under a sanitizer's runtime, where mlock does nothing, only the ids.
set -u
source "$(dirname "$0")/common.bash"
T=$(mktemp -d)
SPID=
trap '[ -n "$SPID" ] && kill "$SPID" 2>/dev/null; rm -rf "$T"' EXIT
FX=tests/fixtures/llama
want=$("$LMC" generate -m "$FX" --ids 1,2,3 -n 8 --greedy --print-ids 2>/dev/null)
for extra in "" --no-mmap; do
    got=$("$LMC" generate -m "$FX" --ids 1,2,3 -n 8 --greedy --print-ids --mlock $extra 2>"$T/err")
    [ -n "$want" ] && [ "$got" = "$want" ] && ok || bad "--mlock $extra: ids '$got', without: '$want' ($(cat "$T/err"))"
done
locked_kb() { # LOG [serve options]: VmLck of a server on the demo model, in kB (empty when it did not start)
    local log=$1
    shift
    : >"$log"
    "$LMC" serve -m models/demo --port 0 "$@" 2>"$log" &
    SPID=$!
    for _ in $(seq 300); do
        grep -q "listening on" "$log" && break
        kill -0 "$SPID" 2>/dev/null || break
        sleep 0.1
    done
    grep -q "listening on" "$log" && awk '/^VmLck:/ {print $2}' "/proc/$SPID/status"
    kill "$SPID" 2>/dev/null
    wait "$SPID" 2>/dev/null
    SPID=
}
# the sanitizers' runtimes make mlock a no-op that reports success: nothing to measure under them
if ldd "$LMC" 2>/dev/null | grep -q "libasan\|libtsan\|libmsan"; then
    echo "mlock.sh: $LMC is built with a sanitizer (mlock does nothing there): VmLck and the limit not checked" >&2
    finish
fi
file_kb=$(( $(stat -c %s models/demo/model.safetensors) / 1024 ))
kb=$(locked_kb "$T/s1.log" --mlock)
[ -n "$kb" ] && [ "$kb" -ge "$file_kb" ] && ok || bad "--mlock server: VmLck '$kb' kB < the file's $file_kb kB ($(tail -c 300 "$T/s1.log"))"
kb=$(locked_kb "$T/s2.log")
[ "$kb" = 0 ] && ok || bad "server without --mlock: VmLck '$kb' kB"
# a limit of 64 kB: the load must fail. Root may lock beyond any limit (CAP_IPC_LOCK): it runs as nobody then.
as=()
[ "$(id -u)" = 0 ] && command -v setpriv >/dev/null && as=(setpriv --reuid=65534 --regid=65534 --clear-groups)
# nobody must be able to read the binary and the fixture (a checkout under a private home may not be)
[ ${#as[@]} -gt 0 ] && ! "${as[@]}" bash -c 'exec "$0" inspect "$1"' "$LMC" "$FX" >/dev/null 2>&1 && as=()
if "${as[@]}" bash -c 'ulimit -l 64 && exec "$0" generate -m "$1" --ids 1,2 -n 2 --mlock' "$LMC" "$FX" >/dev/null 2>"$T/lim"; then
    echo "mlock.sh: locking beyond a 64 kB limit succeeded (this user may): the failure path is not checked" >&2
else
    grep -q -- "--mlock: cannot lock" "$T/lim" && grep -q "ulimit -l: 65536 bytes" "$T/lim" && ok ||
        bad "--mlock over the limit: unclear error: $(cat "$T/lim")"
fi
finish
