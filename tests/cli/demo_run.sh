#!/usr/bin/env bash
# demo_run.sh — `make run` (the README's first command) writes real English:
# at least 50 words, at least 80% of them in the system word list. This
# proves the trained demo model answered, not a random one.
set -u
source "$(dirname "$0")/common.bash"
DICT=/usr/share/dict/words
# (under `make asan` the inherited MAKEFLAGS make the nested make announce its directory: drop that line)
out=$(make -s --no-print-directory BUILD="$B" run 2>/dev/null); rc=$?
out=$(printf '%s\n' "$out" | grep -v '^make\[[0-9]*\]: ')
[ "$rc" -eq 0 ] && ok || bad "make run exited $rc"
case "$out" in "In the beginning"*) ok ;; *) bad "make run does not start with the prompt: ${out:0:80}" ;; esac
if [ -f "$DICT" ]; then
    words=$(printf '%s' "$out" | tr -c "A-Za-z'\n" ' ' | tr ' ' '\n' | sed "s/'s\$//; s/'//g" | grep -v '^$')
    n=$(printf '%s\n' "$words" | grep -c .)
    known=$(printf '%s\n' "$words" | tr 'A-Z' 'a-z' | grep -c -x -i -F -f <(tr 'A-Z' 'a-z' < "$DICT"))
    [ "$n" -ge 50 ] && ok || bad "only $n words"
    [ $((known * 100)) -ge $((n * 80)) ] && ok || bad "only $known of $n words are English"
    echo "demo run: $n words, $known in $DICT" >&2
else
    bad "no word list at $DICT (install wamerican)"
fi
# a random-weight model of the same shape would not pass: check the test can fail
rand=$(printf 'xq zzv blorf %.0s' $(seq 1 30))
n2=$(printf '%s' "$rand" | tr ' ' '\n' | grep -c .)
k2=$(printf '%s' "$rand" | tr ' ' '\n' | grep -c -x -i -F -f <(tr 'A-Z' 'a-z' < "$DICT") || true)
[ $((k2 * 100)) -lt $((n2 * 80)) ] && ok || bad "the English check accepts gibberish"
finish
