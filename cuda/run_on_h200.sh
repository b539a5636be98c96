#!/usr/bin/env bash
# One device call: configure and build every GPU target (CMake target dsv4-gpu), then run the ctest
# labels of the steps asked for. Kernel families register their GPU tests, sanitizer runs,
# benchmarks, PyTorch scripts and ncu runs in cuda/CMakeLists.txt (dsv4_gpu_test, dsv4_gpu_bench,
# dsv4_torch_bench); this script names no binary and no kernel.
#
#   OUT=<dir> COMMIT=<sha> bash cuda/run_on_h200.sh [steps...]     (default: every step)
#     build     configure (the full project; if that fails, DSV4_CUDA_ONLY=ON from .deps, see
#               cuda/stage_deps.sh) and build target dsv4-gpu               -> build.log
#     test      ctest labels gpu and cuda-host                               -> tests.log
#     sanitize  ctest label gpu-sanitize (memcheck, racecheck, initcheck)    -> sanitizer.log
#     bench     ctest label gpu-bench (Google Benchmark suites)              -> bench.txt, bench.json
#     torch     ctest label gpu-torch (PyTorch alternatives)                 -> torch.txt, bench.json
#     ncu       ctest label gpu-ncu (Nsight Compute on the main kernels)     -> ncu.txt
#   FAMILY=<regex>   run only the ctest tests whose names match (e.g. FAMILY='indexer|topk')
#   STEP_TIMEOUT=<s> wall-clock limit of each step's ctest run (default 540)
#
# At most 8 files come back from a device call: env.txt plus the logs above (bench.json merges
# every suite's JSON under build/h200/bench-results). The last lines printed are a summary.
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
STEPS=${*:-build test sanitize bench torch ncu}
BUILD=$ROOT/build/h200
JOBS=$(nproc)
STEP_TIMEOUT=${STEP_TIMEOUT:-540}
FILTER=()
[[ -n ${FAMILY:-} ]] && FILTER=(-R "$FAMILY")
has() { [[ " $STEPS " == *" $1 "* ]]; }
summary=()

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: ${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  nvcc --version | tail -2
  cmake --version | head -1
  g++ --version | head -1
  command -v compute-sanitizer ncu
  python3 -c 'import torch; print("torch", torch.__version__)'
} > "$OUT/env.txt" 2>&1

# ctest over the tests carrying one label; its verbose output goes to a log.
run_label() {  # <label regex> <log>
  timeout "$STEP_TIMEOUT" ctest --test-dir "$BUILD" -L "$1" "${FILTER[@]}" -V --timeout "$STEP_TIMEOUT" > "$2" 2>&1
}
ctest_counts() {  # <log>: ctest's own tally line and the number of skipped tests (no GPU, exit 77)
  echo "$(grep -E "tests passed|tests failed|No tests were found" "$1" | tail -1), $(grep -c '(Skipped)' "$1") skipped"
}
merge_bench_json() {  # every suite's JSON, one object keyed by suite name
  python3 - "$BUILD/bench-results" "$OUT/bench.json" <<'PY'
import json, pathlib, sys
out = {}
for p in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    try:
        out[p.stem] = json.loads(p.read_text())
    except ValueError as e:
        out[p.stem] = {"error": f"unreadable JSON: {e}"}
pathlib.Path(sys.argv[2]).write_text(json.dumps(out, indent=1))
PY
}

if has build; then
  t0=$SECONDS
  {
    mode=full
    if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSV4_BUILD_BENCH=ON -DDSV4_BUILD_CUDA=ON; then
      echo "=== the full configure failed: configuring the CUDA-only build from .deps (cuda/stage_deps.sh) ==="
      mode=cuda-only
      rm -rf "$BUILD"
      cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSV4_BUILD_BENCH=ON -DDSV4_BUILD_CUDA=ON \
        -DDSV4_CUDA_ONLY=ON -DCMAKE_PREFIX_PATH="$ROOT/.deps" || echo "=== the CUDA-only configure failed too ==="
    fi
    targets=(dsv4-gpu)
    [[ $mode == full ]] && targets+=(dsv4-verify)
    cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}"
  } > "$OUT/build.log" 2>&1
  rc=$?
  summary+=("build rc=$rc ($((SECONDS - t0)) s, $(grep -c 'Building' "$OUT/build.log") objects)")
  tail -25 "$OUT/build.log"
fi

if has test; then
  t0=$SECONDS
  run_label '^(gpu|cuda-host)$' "$OUT/tests.log"
  summary+=("tests rc=$? ($((SECONDS - t0)) s): $(ctest_counts "$OUT/tests.log")")
  grep -E "\*\*\*Failed|Timeout|reproduces this case" "$OUT/tests.log" | head -20
fi

if has sanitize; then
  t0=$SECONDS
  run_label '^gpu-sanitize$' "$OUT/sanitizer.log"
  summary+=("sanitize rc=$? ($((SECONDS - t0)) s): $(ctest_counts "$OUT/sanitizer.log"); $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer.log" | sort | uniq -c | tr '\n' ' ')")
fi

if has bench; then
  t0=$SECONDS
  run_label '^gpu-bench$' "$OUT/bench.txt"
  summary+=("bench rc=$? ($((SECONDS - t0)) s): $(ctest_counts "$OUT/bench.txt")")
  merge_bench_json
  grep -E "^[0-9]+: [A-Za-z]+/" "$OUT/bench.txt" | sed -E 's/^[0-9]+: //; s/ +/ /g; s/manual_time //' | cut -c1-150 | head -60
fi

if has torch; then
  t0=$SECONDS
  run_label '^gpu-torch$' "$OUT/torch.txt"
  summary+=("torch rc=$? ($((SECONDS - t0)) s): $(ctest_counts "$OUT/torch.txt")")
  merge_bench_json
  grep -vE "^(UpdateCTestConfiguration|Test project|Constructing|Checking|Updating|Test command|Environment|Parse|Added|Start|test )" "$OUT/torch.txt" | tail -20
fi

if has ncu; then
  t0=$SECONDS
  run_label '^gpu-ncu$' "$OUT/ncu.txt"
  summary+=("ncu rc=$? ($((SECONDS - t0)) s): $(ctest_counts "$OUT/ncu.txt")")
  grep -E "^[0-9]+:   [a-z_]+.*\(|duration|dram__bytes|pct|inst_executed|lts__t" "$OUT/ncu.txt" | cut -c1-160 | head -60
fi

printf '%s\n' "${summary[@]}"
