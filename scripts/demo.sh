#!/usr/bin/env bash
# The main job: build dsv4-verify (Release) and replay every bundled capture (data/captures/*.h5)
# through the CPU oracle, stage-locally, printing the per-stage report of each. Extra arguments go
# to every replay (e.g. --mode chained, --stage attn/). Exit status: 0 when every
# replay passes, 1 when a stage fails, 2 on bad input.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target dsv4-verify
verify=./build/release/verify/cli/dsv4-verify

status=0
summaries=()
report=$(mktemp)
trap 'rm -f "$report"' EXIT
for capture in data/captures/*.h5; do
  echo
  echo "=== $capture"
  "$verify" inspect "$capture" | sed -n '2,4p'
  rc=0
  "$verify" replay "$capture" "$@" | tee "$report" || rc=$?
  summaries+=("$(tail -n 1 "$report")  $capture")
  if (( rc > status )); then status=$rc; fi
done
echo
echo "=== all captures"
printf '%s\n' "${summaries[@]}"
exit "$status"
