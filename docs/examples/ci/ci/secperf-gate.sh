#!/bin/sh
# ci/secperf-gate.sh BASE: measure the working tree's rule set against BASE's (e.g.
# origin/main) and fail on a regression. Needs root (network namespaces) and
# secperf on PATH. Exit 0: within the thresholds; 5: a threshold failed (the
# regression, named in gate.xml); anything else: the measurement itself failed.
set -u
base=${1:-origin/main}
here=$(dirname "$0")
"$here/build-ruleset.sh" "$base" "$here/build/current.nft"
"$here/build-ruleset.sh" worktree "$here/build/proposed.nft"
secperf check "$here/review.toml" || exit $?
secperf run "$here/review.toml" --out results --junit gate.xml
code=$?
case $code in
  0) echo "secperf: the proposed rule set is within its thresholds" ;;
  5) echo "secperf: the proposed rule set costs more than the thresholds allow (gate.xml)" ;;
  *) echo "secperf: the measurement failed (exit $code); no verdict" ;;
esac
exit $code
