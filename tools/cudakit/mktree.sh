#!/usr/bin/env bash
# mktree.sh NAME [WORKTREE] — packs a git worktree's source files (tracked and untracked, not
# ignored; default: this checkout) into .dev/NAME/tree.tar.xz of this checkout, for devrun.sh:
# a device run of a worktree's half-done sources without touching the main tree. MKTREE_EXTRA:
# more paths of the worktree to pack (a new fixture folder, tools/oracle).
set -euo pipefail
R=$(cd "$(dirname "$0")/.." && pwd)
N=$1; W=${2:-$R}
mkdir -p "$R/.dev/$N"
cd "$W"
git ls-files -co --exclude-standard src apps include bench Makefile tests/cuda tests/unit tests/test.h tests/cli tests/run.sh ${MKTREE_EXTRA:-} \
    | tar -cJf "$R/.dev/$N/tree.tar.xz" -T -
ls -la "$R/.dev/$N/tree.tar.xz"
