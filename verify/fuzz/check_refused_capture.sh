#!/usr/bin/env bash
# A damaged capture must not take dsv4-verify down: `dsv4-verify inspect FILE` exits 2 within the
# read time limit (plus start-up), prints nothing on stdout and exactly one line on stderr, naming
# the file. Used by the fuzzing regression tests (verify/fuzz/CMakeLists.txt) over the inputs that
# crashed, hung or exhausted libhdf5 1.10.8 in-process (docs/capture-format.md, "Fuzzing the reader").
# usage: check_refused_capture.sh DSV4_VERIFY FILE READ_SECONDS
set -uo pipefail
verify=$1 file=$2 seconds=$3
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT

start=$(date +%s%N)
DSV4_READ_SECONDS=$seconds "$verify" inspect "$file" >"$out" 2>"$err"
status=$?
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
echo "exit $status after $elapsed_ms ms: $(cat "$err")"

fail() { echo "FAIL: $*"; exit 1; }
[[ $status == 2 ]] || fail "exit status $status, expected 2"
[[ ! -s $out ]] || fail "stdout is not empty: $(head -c 300 "$out")"
[[ $(wc -l <"$err") == 1 ]] || fail "expected one line on stderr, found $(wc -l <"$err")"
grep -qF "dsv4-verify inspect: invalid capture: $file: " "$err" || fail "the line does not name the file"
((elapsed_ms < (seconds + 30) * 1000)) || fail "took $elapsed_ms ms, past the $seconds s limit"
