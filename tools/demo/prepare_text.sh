#!/usr/bin/env bash
# prepare_text.sh — build the demo model's training text from Debian's King James Bible.
#
# Installs bible-kjv (the `bible` command) and bible-kjv-text (its data) when missing, dumps
# Genesis 1:1 to Revelation 22:21, strips the verse references and writes one verse per line,
# split deterministically by chapter (chapters are numbered 0..1188 in canonical order):
#   chapter % 20 == 19 -> heldout.txt  (every 20th chapter, ~5%: the perplexity figure)
#   chapter % 20 == 9  -> valid.txt    (~5%: early stopping / model selection only)
#   otherwise          -> train.txt    (~90%)
# Output goes to OUT_DIR (default .dev/demo/ in the repository root, git-ignored through
# .git/info/exclude). Owned by the demo-model area (tools/demo/). The KJV text is public domain.
#
# Usage: tools/demo/prepare_text.sh [OUT_DIR]
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-"$root/.dev/demo"}

# Keep the output folder out of git without touching .gitignore (owned by the lead).
if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
    exclude=$(git -C "$root" rev-parse --git-path info/exclude)
    case "$exclude" in /*) ;; *) exclude="$root/$exclude" ;; esac
    mkdir -p "$(dirname "$exclude")"
    grep -qxF '/.dev/' "$exclude" 2>/dev/null || echo '/.dev/' >>"$exclude"
fi

if ! command -v bible >/dev/null 2>&1 || [ ! -e /usr/lib/bible.data ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "prepare_text: installing bible-kjv and bible-kjv-text (Debian)" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq bible-kjv bible-kjv-text >&2
fi

mkdir -p "$out"
raw="$out/kjv_raw.txt"
bible -f Gen1:1-Rev22:21 >"$raw"

# Every line must be "<Book><chapter>:<verse> <text>"; anything else means the dump format
# changed and the split below would be wrong, so stop.
if bad=$(grep -nvE '^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ ' "$raw" | head -3) && [ -n "$bad" ]; then
    echo "prepare_text: unexpected line(s) in the bible dump:" >&2
    echo "$bad" >&2
    exit 1
fi

LC_ALL=C awk -v out="$out" '
    BEGIN { chap = -1; prev = "" }
    {
        ref = $1
        key = ref; sub(/:[0-9]+$/, "", key)          # "Ge1:1" -> "Ge1"
        if (key != prev) { chap++; prev = key }
        text = substr($0, length(ref) + 2)
        gsub(/[ \t\r]+/, " ", text)
        sub(/^ /, "", text); sub(/ $/, "", text)
        if (text == "") next
        m = chap % 20
        if (m == 19)     f = out "/heldout.txt"
        else if (m == 9) f = out "/valid.txt"
        else             f = out "/train.txt"
        print text > f
        n[f]++
    }
    END {
        printf "chapters %d\n", chap + 1 > "/dev/stderr"
        for (f in n) printf "%s: %d verses\n", f, n[f] > "/dev/stderr"
        if (chap + 1 != 1189) { print "prepare_text: expected 1189 chapters" > "/dev/stderr"; exit 1 }
    }' "$raw"

rm -f "$raw"
( cd "$out" && wc -lwc train.txt valid.txt heldout.txt && sha256sum train.txt valid.txt heldout.txt ) >&2
