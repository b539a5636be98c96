#!/usr/bin/env bash
# Copies the header-only dependencies (Eigen, doctest) and Google Benchmark (headers + shared
# library) of this build machine into .deps/, an ignored folder a device call can carry, for
# run_on_h200.sh's fallback build when the device machine lacks them.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.deps/' .git/info/exclude 2>/dev/null || echo '/.deps/' >> .git/info/exclude
rm -rf .deps && mkdir -p .deps/include .deps/lib
cp -r /usr/include/eigen3/Eigen /usr/include/eigen3/unsupported /usr/include/doctest /usr/include/benchmark .deps/include/
cp -P /usr/lib/x86_64-linux-gnu/libbenchmark.so* .deps/lib/
du -sh .deps
