#!/usr/bin/env bash
# One device call: build with the project's CMake, run the GPU tests, compute-sanitizer memcheck and
# racecheck on a small case, the C++ benchmark and the PyTorch eager / torch.compile script. Logs go
# to $OUT (at most 8 files come back): env.txt build.log tests.log sanitizer.log bench.txt bench.json
# torch.txt ncu.txt. The last lines printed are a short summary.
#
#   COMMIT=<sha> OUT=<dir> bash cuda/run_on_h200.sh [steps...]
#   (steps: build test sanitize bench torch ncu; default all)
#
# If the project's CMake configure fails on that machine (a dependency missing), the script builds
# the same targets by hand from .deps/ (headers and libbenchmark carried from the build machine:
# cuda/stage_deps.sh makes it).
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
STEPS=${*:-build test sanitize bench torch ncu}
BUILD=$ROOT/build/h200
JOBS=$(nproc)
has() { [[ " $STEPS " == *" $1 "* ]]; }
summary=()

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: ${COMMIT:-unknown}"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  nvcc --version | tail -2
  cmake --version | head -1
  g++ --version | head -1
  python3 -c 'import torch; print("torch", torch.__version__)'
} > "$OUT/env.txt" 2>&1

TEST_BIN=$BUILD/cuda/test_cuda_compressor
HOST_BIN=$BUILD/cuda/test_cuda_host
BENCH_BIN=$BUILD/cuda/dsv4-cuda-compressor-bench

manual_build() {  # the same targets without CMake, from carried headers (.deps)
  local D=$ROOT/.deps M=$BUILD/manual
  mkdir -p "$M/obj"
  local CXXF="-O3 -std=c++20 -march=x86-64-v3 -ffp-contract=off -fopenmp -DEIGEN_DONT_PARALLELIZE -I$ROOT -I$D/include"
  local NVF="-O3 -std=c++17 --generate-code=arch=compute_90,code=[compute_90,sm_90] -fmad=false -Xcompiler=-ffp-contract=off -I$ROOT -I$D/include"
  local srcs=$(ls reference/*.cpp reference/numerics/*.cpp reference/primitives/*.cpp reference/stages/*.cpp \
               cuda/compressor/*.cpp)
  printf '%s\n' $srcs | xargs -P "$JOBS" -I{} sh -c "g++ $CXXF -c {} -o $M/obj/\$(echo {} | tr / _).o" || return 1
  printf '%s\n' cuda/compressor/*.cu | xargs -P "$JOBS" -I{} sh -c "nvcc $NVF -c {} -o $M/obj/\$(echo {} | tr / _).o" || return 1
  local LIBS="-L/usr/local/cuda/lib64 -lcudart_static -ldl -lrt -lpthread -fopenmp"
  g++ $CXXF cuda/tests/test_cuda_compressor.cpp cuda/tests/gpu_test_main.cpp $M/obj/*.o $LIBS -o "$M/test_cuda_compressor" || return 1
  g++ $CXXF cuda/tests/test_cuda_host.cpp reference/tests/doctest_main.cpp $M/obj/*.o $LIBS -o "$M/test_cuda_host" || return 1
  nvcc $NVF bench/cuda_compressor_bench.cu $M/obj/*.o -Xcompiler=-fopenmp -L$D/lib -lbenchmark -lpthread -o "$M/dsv4-cuda-compressor-bench" || true
  TEST_BIN=$M/test_cuda_compressor HOST_BIN=$M/test_cuda_host BENCH_BIN=$M/dsv4-cuda-compressor-bench
  export LD_LIBRARY_PATH=$D/lib:${LD_LIBRARY_PATH:-}
}

USE_CTEST=1
if has build; then
  t0=$SECONDS
  {
    if cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSV4_BUILD_BENCH=ON -DDSV4_BUILD_CUDA=ON; then
      cmake --build "$BUILD" -j "$JOBS" --target test_cuda_compressor test_cuda_host dsv4-cuda-compressor-bench
    else
      echo "=== project configure failed: manual build from .deps ==="
      USE_CTEST=0
      manual_build
    fi
  } > "$OUT/build.log" 2>&1
  rc=$?
  summary+=("build rc=$rc ($((SECONDS - t0)) s, ctest=$USE_CTEST)")
  tail -25 "$OUT/build.log"
fi
[[ -f $BUILD/manual/test_cuda_compressor ]] && { USE_CTEST=0; TEST_BIN=$BUILD/manual/test_cuda_compressor;
  HOST_BIN=$BUILD/manual/test_cuda_host; BENCH_BIN=$BUILD/manual/dsv4-cuda-compressor-bench;
  export LD_LIBRARY_PATH=$ROOT/.deps/lib:${LD_LIBRARY_PATH:-}; }

if has test; then
  t0=$SECONDS
  if [[ $USE_CTEST == 1 ]]; then
    timeout 300 ctest --test-dir "$BUILD" -L "gpu|cuda-host" -V --timeout 280 > "$OUT/tests.log" 2>&1
  else
    { timeout 280 "$TEST_BIN"; timeout 30 "$HOST_BIN"; } > "$OUT/tests.log" 2>&1
  fi
  rc=$?
  summary+=("tests rc=$rc ($((SECONDS - t0)) s): $(grep -E 'tests passed|test cases:' "$OUT/tests.log" | tr '\n' ' ')")
fi

if has sanitize; then
  t0=$SECONDS
  {
    for tool in memcheck racecheck; do
      echo "=== compute-sanitizer --tool $tool ==="
      timeout 170 compute-sanitizer --tool "$tool" --error-exitcode 9 "$TEST_BIN" \
        --test-case="extend from mid-block*,bad arguments*"
      echo "exit code: $?"
    done
  } > "$OUT/sanitizer.log" 2>&1
  summary+=("sanitize ($((SECONDS - t0)) s): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|exit code' "$OUT/sanitizer.log" | tr '\n' ' ')")
fi

if has bench; then
  t0=$SECONDS
  timeout 180 "$BENCH_BIN" --benchmark_out="$OUT/bench.json" --benchmark_out_format=json > "$OUT/bench.txt" 2>&1
  rc=$?
  summary+=("bench rc=$rc ($((SECONDS - t0)) s)")
  grep -E "CopyD2D|Prefill|Decode" "$OUT/bench.txt" | sed -E 's/ +/ /g; s/manual_time //' | cut -c1-150 | head -40
fi

if has torch; then
  t0=$SECONDS
  PYTHONUNBUFFERED=1 timeout 240 python3 bench/torch_compressor_bench.py > "$OUT/torch.txt" 2>&1
  rc=$?
  summary+=("torch rc=$rc ($((SECONDS - t0)) s)")
  tail -8 "$OUT/torch.txt"
fi

if has ncu; then  # hardware counters of the second launch of each tuned prefill kernel
  t0=$SECONDS
  timeout 150 ncu --clock-control none --kernel-id "::regex:c4_prefill_v4|c128_prefill_tuned|online_prefill_kernel:2" \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,lts__t_bytes.sum \
    "$BENCH_BIN" --benchmark_filter='Prefill/(C4Main_d512/tuned|C128_d512/tuned|C128Online)' > "$OUT/ncu.txt" 2>&1
  summary+=("ncu rc=$? ($((SECONDS - t0)) s)")
  grep -E "c4_prefill|c128_prefill|online_prefill|duration|dram__bytes|pct|inst_executed|lts__t" "$OUT/ncu.txt" | cut -c1-150 | head -40
fi

printf '%s\n' "${summary[@]}"
