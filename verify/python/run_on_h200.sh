#!/usr/bin/env bash
# One device call for the Python package: build dsv4_oracle without HDF5 (verify/python/device/,
# headers carried in .deps-python by verify/python/stage_device_deps.sh), run its pytest suite with
# the GPU tests, then the FlashMLA and DeepGEMM checks when their packages import. Files in $OUT (8
# at most come back): py_build.log py_tests.log flashmla.log flashmla_check.{json,md} deepgemm.log
# deepgemm_check.{json,md}. The last lines printed are a summary.
#
#   OUT=<dir> FLASHMLA_DIR=<dir holding flash_mla> [DEEPGEMM_DIR=<dir>] [FLASHMLA_COMMIT=<sha>] \
#     bash verify/python/run_on_h200.sh [build] [test] [flashmla] [deepgemm]
#   FLASHMLA_MODELS (default flash,pro), FLASHMLA_BATCHES (default 1,2,32,74,128)
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
STEPS=${*:-build test flashmla deepgemm}
BUILD=$ROOT/build/device-python
has() { [[ " $STEPS " == *" $1 "* ]]; }
summary=()
export PYTHONPATH=$BUILD:${FLASHMLA_DIR:-}:${DEEPGEMM_DIR:-}:${PYTHONPATH:-}
export DSV4_REPO=$ROOT PYTHONUNBUFFERED=1

if has build; then
  t0=$SECONDS
  { cmake -S verify/python/device -B "$BUILD" -G Ninja -DDSV4_DEPS="$ROOT/.deps-python" &&
    cmake --build "$BUILD" -j "$(nproc)"; } > "$OUT/py_build.log" 2>&1
  summary+=("build rc=$? ($((SECONDS - t0)) s)")
  tail -5 "$OUT/py_build.log"
fi
if has test; then
  t0=$SECONDS
  timeout 300 python3 -m pytest -q -p no:cacheprovider -rs verify/python/tests > "$OUT/py_tests.log" 2>&1
  summary+=("pytest rc=$? ($((SECONDS - t0)) s): $(tail -1 "$OUT/py_tests.log")")
fi
if has flashmla; then
  t0=$SECONDS
  timeout 560 python3 -m dsv4_oracle.flashmla_check --out "$OUT" --models "${FLASHMLA_MODELS:-flash,pro}" \
    --batches "${FLASHMLA_BATCHES:-1,2,32,74,128}" > "$OUT/flashmla.log" 2>&1
  summary+=("flashmla_check rc=$? ($((SECONDS - t0)) s): $(tail -1 "$OUT/flashmla.log")")
fi
if has deepgemm; then
  t0=$SECONDS
  timeout 300 python3 -m dsv4_oracle.deepgemm_check --out "$OUT" > "$OUT/deepgemm.log" 2>&1
  summary+=("deepgemm_check rc=$? ($((SECONDS - t0)) s): $(tail -1 "$OUT/deepgemm.log")")
fi
printf '%s\n' "${summary[@]}"
