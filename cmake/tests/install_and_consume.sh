#!/usr/bin/env bash
# Installs the build into a temporary prefix and uses it as a user would:
#   1. cmake --install puts the binary, libraries, headers, tolerance tables and package in place;
#   2. the installed dsv4-verify, with the prefix moved elsewhere, replays a bundled capture using the
#      tolerance tables it finds relative to itself (the source and build trees play no part);
#   3. the binary copied alone exits 2 with one line saying where it looked, and runs with
#      DSV4_DATA_DIR;
#   4. a consumer project (cmake/tests/consumer/) finds the package with find_package(dsv4_oracle),
#      builds, runs one oracle stage and one comparison.
# usage: install_and_consume.sh SOURCE_DIR BUILD_DIR GENERATOR CXX_COMPILER [CXX_LAUNCHER]
set -euo pipefail
source_dir=$1 build_dir=$2 generator=$3 cxx=$4 launcher=${5:-}
capture="$source_dir/data/captures/synth-tiny-r0-p13-d6.h5"

# Outside the build tree: a binary under it would find the build's share/dsv4_oracle.
work=$(mktemp -d /tmp/dsv4-install-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

echo "== cmake --install $build_dir --prefix $work/prefix"
cmake --install "$build_dir" --prefix "$work/prefix" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
mv "$work/prefix" "$work/moved"  # the package and the binary must not depend on where they were installed
prefix="$work/moved"
for f in bin/dsv4-verify include/dsv4_oracle/reference/layer.h include/dsv4_oracle/verify/compare/dense.h \
         share/dsv4_oracle/tolerances/official.json share/dsv4_oracle/plot_precision_report.py; do
  [[ -f $prefix/$f ]] || fail "$f is not installed"
done
config=$(find "$prefix" -name dsv4_oracleConfig.cmake)
[[ -n $config ]] || fail "no dsv4_oracleConfig.cmake installed"
for lib in reference verify; do
  [[ -n $(find "$prefix" -name "libdsv4_$lib.a") ]] || fail "libdsv4_$lib.a is not installed"
done

echo "== the installed dsv4-verify, moved, replays $capture"
out=$(cd / && "$prefix/bin/dsv4-verify" replay "$capture") || fail "installed dsv4-verify replay exited $?"
grep -qx "tolerances: $prefix/share/dsv4_oracle/tolerances/official.json" <<<"$out" ||
  fail "the replay did not use the installed tolerance table: $(grep tolerances <<<"$out")"

echo "== the binary alone: exit 2 and one line; with DSV4_DATA_DIR it runs"
mkdir "$work/alone"
cp "$prefix/bin/dsv4-verify" "$work/alone/"
status=0
"$work/alone/dsv4-verify" replay "$capture" >"$work/out" 2>"$work/err" || status=$?
[[ $status == 2 ]] || fail "the binary alone exited $status, expected 2"
[[ $(wc -l <"$work/err") == 1 ]] || fail "expected one line on stderr, got: $(cat "$work/err")"
grep -q "cannot find the data directory.*$work/alone.*DSV4_DATA_DIR" "$work/err" || fail "unexpected message: $(cat "$work/err")"
[[ ! -s $work/out ]] || fail "the failed replay printed a report"
echo "   $(cat "$work/err")"
DSV4_DATA_DIR="$prefix/share/dsv4_oracle" "$work/alone/dsv4-verify" replay "$capture" >/dev/null ||
  fail "the binary alone with DSV4_DATA_DIR exited $?"

echo "== a consumer project: find_package(dsv4_oracle), one oracle stage, one comparison"
cmake -S "$source_dir/cmake/tests/consumer" -B "$work/consumer" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx" ${launcher:+-DCMAKE_CXX_COMPILER_LAUNCHER="$launcher"} \
  >"$work/consumer-configure.log" 2>&1 || { cat "$work/consumer-configure.log"; fail "configuring the consumer"; }
cmake --build "$work/consumer" >"$work/consumer-build.log" 2>&1 || { cat "$work/consumer-build.log"; fail "building the consumer"; }
"$work/consumer/consumer" || fail "the consumer exited $?"
echo "installed, moved, used: pass"
