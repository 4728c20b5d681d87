#!/usr/bin/env bash
# serve_cli.sh — `lmc serve` as a command: usage errors exit 2, runtime errors exit 1 with
# one clear line, a port already in use is refused, --host binds where asked (IPv6 too),
# and SIGTERM/SIGINT stop it with exit 0. Prints `RESULT <passed> <failed>`.
set -u
source "$(dirname "$0")/common.bash"
E=$(mktemp)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -f "$E" "$E".*; }
trap cleanup EXIT
expect_rc() { # expected-rc description cmd...
    local want=$1 what=$2; shift 2
    timeout 20 "$@" >/dev/null 2>"$E"
    local rc=$?
    if [ "$rc" -eq "$want" ]; then ok; else bad "$what: exit $rc, expected $want ($(head -c 300 "$E"))"; fi
}
# Start a server in the background; sets PORT from its "listening on" line (empty on failure).
start() { # logfile args...
    local log=$1; shift
    "$LMC" serve --port 0 "$@" 2>"$log" &
    pids+=($!)
    PID=$!
    PORT=
    for _ in $(seq 100); do
        PORT=$(sed -n 's/.*listening on http:\/\/.*:\([0-9]*\) .*/\1/p' "$log")
        [ -n "$PORT" ] && return 0
        kill -0 "$PID" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
stop_rc() { # signal pid → exit status (waits up to 10 s)
    kill -"$1" "$2"
    for _ in $(seq 100); do kill -0 "$2" 2>/dev/null || break; sleep 0.1; done
    wait "$2"
}

expect_rc 0 "serve --help" "$LMC" serve --help
expect_rc 2 "unknown option" "$LMC" serve --bogus
expect_rc 2 "port out of range" "$LMC" serve --port 70000
expect_rc 2 "port not a number" "$LMC" serve --port http
expect_rc 2 "max-seqs 0" "$LMC" serve --max-seqs 0
expect_rc 2 "missing option value" "$LMC" serve --api-key
expect_rc 1 "missing model" "$LMC" serve -m /nonexistent/model --port 0
[ "$(wc -l < "$E")" -eq 1 ] && grep -q /nonexistent/model "$E" && ok || bad "missing model: not one line naming the path: $(cat "$E")"
expect_rc 1 "unresolvable host" "$LMC" serve --host no.such.host.invalid --port 0
[ "$(wc -l < "$E")" -eq 1 ] && ok || bad "bad host: not one line: $(cat "$E")"

if start "$E.a" --max-seqs 2; then
    ok
    curl -sf "http://127.0.0.1:$PORT/health" | grep -q '"ok"' && ok || bad "health on 127.0.0.1"
    expect_rc 1 "port in use" "$LMC" serve --port "$PORT"
    grep -q "cannot listen" "$E" && ok || bad "port in use: unclear message: $(cat "$E")"
    stop_rc TERM "$PID"; rc=$?
    [ "$rc" -eq 0 ] && ok || bad "SIGTERM exit $rc"
    grep -q "stopped" "$E.a" && ok || bad "no 'stopped' line after SIGTERM"
else
    bad "server did not start: $(cat "$E.a")"
fi

if ! grep -q " lo$" /proc/net/if_inet6 2>/dev/null; then
    echo "(no IPv6 loopback here: the ::1 case is skipped)" >&2
elif start "$E.b" --host ::1; then
    curl -sf "http://[::1]:$PORT/health" | grep -q '"ok"' && ok || bad "health on ::1"
    stop_rc INT "$PID"; rc=$?
    [ "$rc" -eq 0 ] && ok || bad "SIGINT exit $rc"
else
    bad "server on ::1 did not start: $(cat "$E.b")"
fi
finish
