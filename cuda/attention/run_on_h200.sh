#!/usr/bin/env bash
# One device call for the attention kernels (docs/cuda-attention.md): build, the GPU and host tests,
# compute-sanitizer (memcheck, racecheck, initcheck) on the small cases, the C++ benchmark, the
# export of its inputs and the Python FlashMLA / PyTorch comparison on them, ncu counters of the
# tuned kernels, `dsv4-verify replay --backend cuda` of the bundled captures (both modes; appended
# to tests.log). Logs go to $OUT (at most 8 files come back): env.txt build.log tests.log
# sanitizer.log bench.txt bench.json python.txt ncu.txt. The last lines printed are a summary.
#
#   OUT=<dir> bash cuda/attention/run_on_h200.sh [steps...]
#   (steps: build test replay sanitize bench python ncu; default all; about 8 minutes in all)
#
# FlashMLA is used only if `import flash_mla` works on the machine (built there from a fetched copy
# by whoever runs this; nothing of it is in this repository). If the project's CMake configure fails
# on the machine, the targets are built by hand from .deps/ (cuda/stage_deps.sh makes it here).
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
STEPS=${*:-build test replay sanitize bench python ncu}
BUILD=$ROOT/build/h200-attention
JOBS=$(nproc)
has() { [[ " $STEPS " == *" $1 "* ]]; }
summary=()

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo "${COMMIT:-unknown}")"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  nvcc --version | tail -2
  cmake --version | head -1
  g++ --version | head -1
  python3 -c 'import torch; print("torch", torch.__version__)'
  python3 -c 'import flash_mla, os; print("flash_mla", os.path.dirname(flash_mla.__file__))' 2>&1 | tail -1
} > "$OUT/env.txt" 2>&1

BIN=$BUILD/cuda
TARGETS="test_cuda_attention test_cuda_attention_host test_cuda_attention_model1 dsv4-cuda-attention-bench dsv4-cuda-attention-export dsv4-verify"

manual_build() {  # the same targets without CMake, from carried headers and libraries (.deps)
  local D=$ROOT/.deps M=$BUILD/manual
  mkdir -p "$M/obj"
  local CXXF="-O3 -std=c++20 -march=x86-64-v3 -ffp-contract=off -fopenmp -DEIGEN_DONT_PARALLELIZE -I$ROOT -I$D/include -I$D/include/eigen3"
  local NVF="-O3 -std=c++17 --generate-code=arch=compute_90,code=[compute_90,sm_90] -fmad=false -Xcompiler=-ffp-contract=off -I$ROOT -I$D/include"
  local srcs=$(ls reference/*.cpp reference/numerics/*.cpp reference/primitives/*.cpp reference/stages/*.cpp \
               cuda/attention/*.cpp cuda/tests/attention_cases.cpp verify/layouts/*.cpp 2>/dev/null)
  printf '%s\n' $srcs | xargs -P "$JOBS" -I{} sh -c "g++ $CXXF -c {} -o $M/obj/\$(echo {} | tr / _).o" || return 1
  printf '%s\n' cuda/attention/*.cu | xargs -P "$JOBS" -I{} sh -c "nvcc $NVF -c {} -o $M/obj/\$(echo {} | tr / _).o" || return 1
  local LIBS="-L/usr/local/cuda/lib64 -lcudart_static -lcublas -ldl -lrt -lpthread -fopenmp"
  g++ $CXXF cuda/tests/test_cuda_attention.cpp cuda/tests/gpu_test_main.cpp $M/obj/*.o $LIBS -o "$M/test_cuda_attention" || return 1
  g++ $CXXF cuda/tests/test_cuda_attention_host.cpp reference/tests/doctest_main.cpp $M/obj/*.o $LIBS -o "$M/test_cuda_attention_host" || return 1
  nvcc $NVF bench/cuda_attention_bench.cu $M/obj/*.o -Xcompiler=-fopenmp -L$D/lib -lbenchmark -lcublas -lpthread -o "$M/dsv4-cuda-attention-bench" || true
  nvcc $NVF bench/cuda_attention_export.cu $M/obj/*.o -Xcompiler=-fopenmp -lcublas -o "$M/dsv4-cuda-attention-export" || true
  export LD_LIBRARY_PATH=$D/lib:${LD_LIBRARY_PATH:-}
}

USE_CTEST=1
if has build; then
  t0=$SECONDS
  {
    if cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSV4_BUILD_BENCH=ON -DDSV4_BUILD_CUDA=ON; then
      cmake --build "$BUILD" -j "$JOBS" --target $TARGETS
    else
      echo "=== project configure failed: manual build from .deps ==="
      manual_build
    fi
  } > "$OUT/build.log" 2>&1
  rc=$?
  summary+=("build rc=$rc ($((SECONDS - t0)) s)")
  tail -15 "$OUT/build.log"
fi
if [[ -f $BUILD/manual/test_cuda_attention ]]; then
  USE_CTEST=0
  BIN=$BUILD/manual
  export LD_LIBRARY_PATH=$ROOT/.deps/lib:${LD_LIBRARY_PATH:-}
fi

if has test; then
  t0=$SECONDS
  if [[ $USE_CTEST == 1 ]]; then
    timeout 420 ctest --test-dir "$BUILD" -R "test_cuda_attention" -V --timeout 400 > "$OUT/tests.log" 2>&1
  else
    { timeout 400 "$BIN/test_cuda_attention"; timeout 60 "$BIN/test_cuda_attention_host"; } > "$OUT/tests.log" 2>&1
  fi
  rc=$?
  summary+=("tests rc=$rc ($((SECONDS - t0)) s): $(grep -E 'tests passed|tests failed|test cases:' "$OUT/tests.log" | tr '\n' ' ')")
  grep -E "within bounds|bitwise equal|worst error|FAILED|ERROR|failed" "$OUT/tests.log" | cut -c1-200 | head -40
fi

if has replay && [[ $USE_CTEST == 1 ]]; then  # every attention stage of the bundled captures on the kernels
  t0=$SECONDS
  {
    for f in data/captures/*.h5; do
      for mode in stage-local chained; do
        echo "=== dsv4-verify replay $f --backend cuda --mode $mode ==="
        timeout 120 "$BUILD/verify/cli/dsv4-verify" replay "$f" --backend cuda --mode "$mode" 2>&1 | tail -25
        echo "exit code: ${PIPESTATUS[0]}"
      done
    done
  } >> "$OUT/tests.log" 2>&1
  summary+=("replay ($((SECONDS - t0)) s): $(grep -c 'exit code: 0' "$OUT/tests.log") of $(grep -c 'exit code:' "$OUT/tests.log") replays exit 0")
fi

if has sanitize; then
  t0=$SECONDS
  {
    for tool in memcheck racecheck initcheck; do
      echo "=== compute-sanitizer --tool $tool ==="
      timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 9 "$BIN/test_cuda_attention" --test-case="sanitizer*"
      echo "exit code: $?"
    done
  } > "$OUT/sanitizer.log" 2>&1
  summary+=("sanitize ($((SECONDS - t0)) s): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|exit code' "$OUT/sanitizer.log" | tr '\n' ' ')")
fi

if has bench; then
  t0=$SECONDS
  timeout 240 "$BIN/dsv4-cuda-attention-bench" --benchmark_out="$OUT/bench.json" --benchmark_out_format=json > "$OUT/bench.txt" 2>&1
  summary+=("bench rc=$? ($((SECONDS - t0)) s)")
  grep -E "Decode|Prefill|Output|Ceiling" "$OUT/bench.txt" | sed -E 's/ +/ /g; s/manual_time //' | cut -c1-160 | head -40
fi

if has python; then
  t0=$SECONDS
  CASES=${CASES:-/tmp/dsv4-attention-cases}
  {
    rm -rf "$CASES"
    timeout 120 "$BIN/dsv4-cuda-attention-export" "$CASES" && \
      PYTHONUNBUFFERED=1 timeout 300 python3 bench/python_attention_bench.py "$CASES"
  } > "$OUT/python.txt" 2>&1
  summary+=("python rc=$? ($((SECONDS - t0)) s)")
  rm -rf "$CASES"
  tail -12 "$OUT/python.txt" | cut -c1-300
fi

if has ncu; then  # hardware counters of one launch (the second) of the tuned kernel per benchmark
  t0=$SECONDS
  METRICS=gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,lts__t_bytes.sum,smsp__average_warp_latency_issue_stalled_barrier,smsp__average_warp_latency_issue_stalled_short_scoreboard,smsp__average_warp_latency_issue_stalled_mio_throttle,smsp__average_warp_latency_issue_stalled_math_pipe_throttle
  : > "$OUT/ncu.txt"
  for filter in 'Decode/Flash.*/bf16P/mma/128' 'Decode/Pro.*/bf16P/mma/128' 'Prefill/Flash_h64_top512_kv8K/bf16P/mma' 'Prefill/Pro_h128_top1024_kv8K/bf16P/mma'; do
    echo "=== $filter ===" >> "$OUT/ncu.txt"
    timeout 100 ncu --clock-control none --kernel-name regex:mma_kernel --launch-skip 1 --launch-count 1 --metrics "$METRICS" \
      "$BIN/dsv4-cuda-attention-bench" --benchmark_filter="$filter" >> "$OUT/ncu.txt" 2>&1
  done
  summary+=("ncu rc=$? ($((SECONDS - t0)) s)")
  grep -E "===|duration|pct|wavefronts|conflicts|inst_executed|stalled|bytes" "$OUT/ncu.txt" | cut -c1-160 | head -70
fi

printf '%s\n' "${summary[@]}"
