#!/bin/sh
# ci/build-ruleset.sh REVISION OUT: the rule set at REVISION (a git revision, or
# "worktree" for the files as they are), with the testbed's accepts appended.
set -eu
rev=$1 out=$2
here=$(dirname "$0")
mkdir -p "$(dirname "$out")"
if [ "$rev" = worktree ]; then
  cat "$here/../rules/firewall.nft" > "$out"
else
  git show "$rev:rules/firewall.nft" > "$out"
fi
cat "$here/testbed.nft" >> "$out"
