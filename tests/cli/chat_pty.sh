#!/usr/bin/env bash
# chat_pty.sh — `lmc chat` in a real terminal (tmux): a two-turn conversation,
# Ctrl-C stopping a reply without ending the session, /clear and /exit.
set -u
source "$(dirname "$0")/common.bash"
S=lmc-chat-test-$$
tmux kill-session -t "$S" 2>/dev/null
trap 'tmux kill-session -t "$S" 2>/dev/null' EXIT
screen() { tmux capture-pane -p -t "$S" -S -200 2>/dev/null; }
# wait until the screen matches a regex (or time out after $2 tenths of a second)
wait_for() {
    local re=$1 n=${2:-100}
    for _ in $(seq 1 "$n"); do screen | grep -qE "$re" && return 0; sleep 0.1; done
    return 1
}
prompts() { screen | grep -cE '^>( |$)'; }
# a new session right after the last one was killed can reach the exiting tmux server ("server
# exited unexpectedly"): try again
start() {
    for _ in $(seq 1 10); do tmux new-session -d -s "$S" -x 160 -y 60 "$1" 2>/dev/null && return 0; sleep 0.2; done
    return 1
}
start "$LMC chat -n 24 --seed 3; echo CHAT-EXITED-\$?; sleep 30"
wait_for "lmc chat" 100 && ok || bad "no banner: $(screen | tail -3)"
wait_for '^>( |$)' 50 && ok || bad "no prompt"
tmux send-keys -t "$S" "Who made the heaven and the earth?" Enter
for _ in $(seq 1 100); do [ "$(prompts)" -ge 2 ] && break; sleep 0.1; done
[ "$(prompts)" -ge 2 ] && ok || bad "first reply did not end with a new prompt"
reply1=$(screen | sed -n '/^> Who made/,/^> /p' | sed '1d;$d' | tr -d '\n')
[ "${#reply1}" -gt 10 ] && ok || bad "first reply is empty"
tmux send-keys -t "$S" "And what did he say?" Enter
for _ in $(seq 1 100); do [ "$(prompts)" -ge 3 ] && break; sleep 0.1; done
[ "$(prompts)" -ge 3 ] && ok || bad "second turn did not finish"
# a long reply (past end-of-turn tokens) interrupted by Ctrl-C
tmux send-keys -t "$S" "/exit" Enter
wait_for "CHAT-EXITED-0" 50 && ok || bad "/exit did not end the session with status 0"
tmux kill-session -t "$S" 2>/dev/null
start "$LMC chat -n 100000 --ignore-eos --threads 1; echo CHAT-EXITED-\$?; sleep 30"
wait_for '^>( |$)' 100 && ok || bad "no prompt (second session)"
tmux send-keys -t "$S" "Tell me of the kings of Israel" Enter
# Ctrl-C as soon as the reply is streaming: the demo fills its 1024-token context in about a
# second, so a fixed wait could miss the reply altogether
for _ in $(seq 1 100); do
    [ "$(screen | sed -n '/^> Tell me of the kings/,$p' | sed '1d' | tr -d ' \n' | wc -c)" -gt 20 ] && break
    sleep 0.05
done
tmux send-keys -t "$S" C-c
wait_for "\(stopped\)" 50 && ok || bad "Ctrl-C did not stop the reply: $(screen | tail -3)"
for _ in $(seq 1 50); do [ "$(prompts)" -ge 2 ] && break; sleep 0.1; done
[ "$(prompts)" -ge 2 ] && ok || bad "no prompt after Ctrl-C"
screen | grep -q "CHAT-EXITED" && bad "Ctrl-C ended the session" || ok
tmux send-keys -t "$S" "/clear" Enter
wait_for "conversation cleared" 30 && ok || bad "/clear not acknowledged"
tmux send-keys -t "$S" C-d
wait_for "CHAT-EXITED-0" 50 && ok || bad "Ctrl-D did not end the session"
finish
