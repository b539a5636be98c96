#!/usr/bin/env bash
# The main job: build (Release) and replay the bundled captures through the CPU oracle, printing
# the per-stage report. Until the verifier lands this runs one full V4 layer through the oracle.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
./build/release/reference/tools/dsv4-oracle-demo "$@"
