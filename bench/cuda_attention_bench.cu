// Google Benchmark of the CUDA sparse MQA kernels and the output path on one GPU, timed with CUDA
// events (manual time: the mean of 10 back-to-back launches per iteration). Counters:
//   TFLOPS  FlashMLA's count, 2 h (512 + 512) per attended key (every key here is valid);
//   bytes_per_second  the bytes the call must move (attention_bench_inputs.cuh: q, out, every
//           distinct KV token once (584 B MODEL1, 1024 B bf16 prefill rows per query as FlashMLA
//           counts them), indices, lse).
// Shapes (s_q 2, FP8 MODEL1 KV, sink on): V4-Flash h 64, window 128 + top-512 of 2048 compressed
// tokens per sequence; V4-Pro h 128, 128 + top-1024 of 4096; batch 64 / 128 / 256. Prefill: 4096
// queries, Flash h 64 top-512 and Pro h 128 top-1024 over 8K and 64K bf16 rows. In the same run: a
// cuBLAS bf16 GEMM (8192^3) as the tensor-core ceiling, inverse RoPE and the grouped wo_a.
//
//   dsv4-cuda-attention-bench [--benchmark_filter=...] [--benchmark_out=file.json --benchmark_out_format=json]
#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/attention_bench_inputs.cuh"
#include "cuda/attention/output_path.h"
#include "cuda/attention/sparse_mqa_api.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device_buffer.h"

using namespace dsv4;
using namespace dsv4::bench;
namespace attn = dsv4::cuda::attention;

namespace {

constexpr int kLaunches = 10;

class EventTimer {
 public:
  EventTimer() {
    CUDA_CHECK(cudaEventCreate(&start_));
    CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  // Seconds per launch of `launch`, averaged over kLaunches back-to-back launches.
  template <class F>
  double time(F&& launch) {
    CUDA_CHECK(cudaEventRecord(start_));
    for (int i = 0; i < kLaunches; ++i) launch();
    CUDA_CHECK(cudaEventRecord(stop_));
    CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms * 1e-3 / kLaunches;
  }

 private:
  cudaEvent_t start_, stop_;
};

void set_counters(benchmark::State& state, double flops, double bytes) {
  state.counters["TFLOPS"] = benchmark::Counter(flops / 1e12, benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
}

template <class F>
void run_timed(benchmark::State& state, F&& launch) {
  EventTimer timer;
  launch();  // warm-up (and the first launch's one-time attribute setting)
  CUDA_CHECK(cudaDeviceSynchronize());
  for (auto _ : state) state.SetIterationTime(timer.time(launch));
}

const DecodeShape kFlash{"Flash_h64_w128+top512", 64, 512, 2048, 0, 2};
const DecodeShape kPro{"Pro_h128_w128+top1024", 128, 1024, 4096, 0, 2};

void BM_Decode(benchmark::State& state, DecodeShape shape, attn::Variant variant, attn::Probs probs) {
  shape.batch = static_cast<int>(state.range(0));
  const DecodeInputs in(shape);
  const attn::DecodeArgs a = in.args(probs);
  const size_t ws_bytes = attn::decode_workspace_bytes(a, variant);
  DeviceBuffer<uint8_t> ws(ws_bytes);
  run_timed(state, [&] { attn::sparse_mqa_decode(a, variant, ws.get(), ws_bytes); });
  set_counters(state, in.flops(), in.bytes());
  state.counters["splits"] =
      attn::decode_splits(shape.batch, shape.s_q, shape.n_heads, in.shape.topk() + shape.extra_topk, [] {
        int sms = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
        return sms;
      }());
}

void BM_Prefill(benchmark::State& state, PrefillShape shape, attn::Variant variant, attn::Probs probs) {
  const PrefillInputs in(shape);
  const attn::PrefillArgs a = in.args(probs);
  run_timed(state, [&] { attn::sparse_mqa_prefill(a, variant); });
  set_counters(state, in.flops(), in.bytes());
}

// inverse RoPE over `tokens` x h heads (in place), positions 0..tokens-1.
void BM_InverseRope(benchmark::State& state, int n_heads) {
  const int64_t tokens = state.range(0);
  DeviceBuffer<uint16_t> o(static_cast<size_t>(tokens * n_heads * attn::kHeadDim));
  fill_bf16_kernel<<<1024, 256>>>(o.get(), static_cast<int64_t>(o.size()), 31);
  std::vector<int64_t> pos(static_cast<size_t>(tokens));
  for (int64_t i = 0; i < tokens; ++i) pos[static_cast<size_t>(i)] = i;
  std::vector<float> table(static_cast<size_t>(tokens * attn::kRopeDims), 0.5f);
  DeviceBuffer<int64_t> dpos(pos);
  DeviceBuffer<float> dtable(table);
  run_timed(state, [&] {
    attn::inverse_rope_heads(o.get(), o.get(), tokens, n_heads, attn::kHeadDim, dpos.get(), dtable.get(), tokens);
  });
  // the rope dims are read and written
  set_counters(state, 0, static_cast<double>(tokens) * n_heads * 64 * 2 * 2);
}

// grouped wo_a: [tokens, G * H*512/G] x [G*1024, H*512/G] -> [tokens, G*1024].
void BM_WoA(benchmark::State& state, int n_heads, int groups) {
  const int64_t tokens = state.range(0);
  const int width = n_heads * attn::kHeadDim / groups, rank = 1024;
  DeviceBuffer<uint16_t> o(static_cast<size_t>(tokens * groups * width)),
      w(static_cast<size_t>(int64_t{groups} * rank * width)), out(static_cast<size_t>(tokens * groups * rank));
  fill_bf16_kernel<<<1024, 256>>>(o.get(), static_cast<int64_t>(o.size()), 32);
  fill_bf16_kernel<<<1024, 256>>>(w.get(), static_cast<int64_t>(w.size()), 33);
  attn::GroupedWoA gemm;
  run_timed(state, [&] { gemm.run(o.get(), w.get(), out.get(), tokens, groups, width, rank); });
  set_counters(state, 2.0 * tokens * groups * rank * width,
               2.0 * (static_cast<double>(o.size()) + static_cast<double>(w.size()) + static_cast<double>(out.size())));
}

// The tensor-core ceiling in the same run: cuBLAS bf16 GEMM n^3, fp32 accumulation.
void BM_CublasGemm(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  DeviceBuffer<uint16_t> a(static_cast<size_t>(n) * n), b(a.size()), c(a.size());
  fill_bf16_kernel<<<1024, 256>>>(a.get(), static_cast<int64_t>(a.size()), 41);
  fill_bf16_kernel<<<1024, 256>>>(b.get(), static_cast<int64_t>(b.size()), 42);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    state.SkipWithError("cublasCreate failed");
    return;
  }
  const float alpha = 1, beta = 0;
  run_timed(state, [&] {
    cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.get(), CUDA_R_16BF, n, b.get(), CUDA_R_16BF, n, &beta,
                 c.get(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  });
  cublasDestroy(h);
  set_counters(state, 2.0 * n * n * static_cast<double>(n), 3.0 * 2 * n * static_cast<double>(n));
}

// v3, v4, v5, then v7 run last: they are the newest kernels, and should one fail on the device (a trap leaves
// the CUDA context unusable), every other number of the suite has been measured and printed before.
void register_all() {
  using attn::Probs;
  using dsv4::cuda::Variant;
  const auto probs_name = [](Probs p) { return p == Probs::bf16 ? "/bf16P/" : "/fp32P/"; };
  const PrefillShape prefills[] = {{"Flash_h64_top512_kv8K", 64, 512, 8192, 4096},
                                   {"Flash_h64_top512_kv64K", 64, 512, 65536, 4096},
                                   {"Pro_h128_top1024_kv8K", 128, 1024, 8192, 4096},
                                   {"Pro_h128_top1024_kv64K", 128, 1024, 65536, 4096}};
  // v1 on a sixteenth of the queries (it is slow: the oracle's double arithmetic), beside v2 to v7.
  const PrefillShape small{"Flash_h64_top512_kv8K_q256", 64, 512, 8192, 256};
  const auto register_version = [&](Variant v) {
    for (const DecodeShape& s : {kFlash, kPro})
      for (Probs p : {Probs::bf16, Probs::fp32}) {
        const std::string name = std::string("Decode/") + s.name + probs_name(p) + variant_name(v);
        benchmark::RegisterBenchmark(name.c_str(), BM_Decode, s, v, p)
            ->Arg(64)
            ->Arg(128)
            ->Arg(256)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond)
            ->Iterations(20);
      }
    for (const PrefillShape& s : prefills)
      for (Probs p : {Probs::bf16, Probs::fp32}) {
        const std::string name = std::string("Prefill/") + s.name + probs_name(p) + variant_name(v);
        benchmark::RegisterBenchmark(name.c_str(), BM_Prefill, s, v, p)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond)
            ->Iterations(10);
      }
    const std::string name = std::string("Prefill/") + small.name + "/bf16P/" + variant_name(v);
    benchmark::RegisterBenchmark(name.c_str(), BM_Prefill, small, v, Probs::bf16)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->Iterations(10);
  };

  for (const DecodeShape& s : {kFlash, kPro}) {
    const std::string name = std::string("Decode/") + s.name + "/bf16P/v1";
    benchmark::RegisterBenchmark(name.c_str(), BM_Decode, s, Variant::v1, Probs::bf16)
        ->Arg(64)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->Iterations(2);
  }
  const std::string small_v1 = std::string("Prefill/") + small.name + "/bf16P/v1";
  benchmark::RegisterBenchmark(small_v1.c_str(), BM_Prefill, small, Variant::v1, Probs::bf16)
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond)
      ->Iterations(2);
  register_version(Variant::v2);

  benchmark::RegisterBenchmark("Output/InverseRope/Flash_h64", BM_InverseRope, 64)
      ->Arg(256)
      ->Arg(4096)
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond)
      ->Iterations(20);
  benchmark::RegisterBenchmark("Output/WoA/Flash_h64_G8", BM_WoA, 64, 8)
      ->Arg(256)
      ->Arg(4096)
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond)
      ->Iterations(20);
  benchmark::RegisterBenchmark("Output/WoA/Pro_h128_G16", BM_WoA, 128, 16)
      ->Arg(256)
      ->Arg(4096)
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond)
      ->Iterations(20);
  benchmark::RegisterBenchmark("Ceiling/CublasGemm_bf16", BM_CublasGemm)
      ->Arg(8192)
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond)
      ->Iterations(10);

  register_version(Variant::v3);
  register_version(Variant::v4);
  register_version(Variant::v5);
  register_version(Variant::v7);
}

}  // namespace

int main(int argc, char** argv) {
  if (cuda::device_count() == 0) {
    std::printf("no CUDA device: nothing to benchmark\n");
    return 0;
  }
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
