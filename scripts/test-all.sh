#!/usr/bin/env bash
# Builds everything and runs every test through ctest: the Release build (oracle, verifier, CUDA
# kernels when nvcc is found; GPU tests are labelled "gpu" and skipped without a GPU), then the
# oracle and verifier tests again under AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs"

cmake --preset sanitize >/dev/null
cmake --build --preset sanitize -j "$jobs"
ctest --preset sanitize -j "$jobs"
