// Google Benchmark of the CUDA lightning indexer and top-k on one GPU, timed with CUDA events
// (manual time). The numbers of docs/cuda-indexer.md:
//   Logits/prefill  V4-Flash shape: 64 heads x 128, s 4096 queries x n keys (n 1024 .. 16384), every
//                   query reading every key (DeepGEMM's non-causal benchmark); FLOP = 2 s n 64 128,
//                   reported as items_per_second = FLOP/s (TFLOPS = items_per_second / 1e12);
//   Logits/decode   batch 128 x 65536 keys of a paged cache, one query each, v2 to v7 on the same
//                   inputs: bytes = the cache's bytes (code bytes + 4-byte scale word a key) + the fp32
//                   logits written, reported as bytes_per_second (effective bandwidth);
//   TopK            262144 candidates x batch 1 and 16384 x batch 128, k 512 (and 1024; relu'd scores; x20:
//                   20 back-to-back calls a timed iteration, the time a call); TopK/launch: the launch
//                   alone at those shapes (an empty kernel with the shared memory of v5);
//   QPath           4096 tokens x 64 heads;
//   CopyD2D         the memory ceiling.
// The PyTorch alternatives (bf16 einsum, torch.topk) run in bench/torch_indexer_bench.py in the same
// device call.
//
//   dsv4-cuda-indexer-bench [--benchmark_filter=...] [--benchmark_out=file.json]
#include <benchmark/benchmark.h>
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_buffer.h"
#include "cuda/indexer/indexer_api.h"
#include "cuda/topk/topk_api.h"

using namespace dsv4::cuda;

namespace {

constexpr int kHeads = 64;

// Random code bytes (no e4m3 NaN code), UE8M0 scale bytes near 2^0, fp32 values.
__global__ void fill_codes(uint8_t* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint64_t z = (static_cast<uint64_t>(i) + seed) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    uint8_t b = static_cast<uint8_t>(z >> 40);
    if ((b & 0x7f) == 0x7f) b ^= 1;
    p[i] = b;
  }
}
__global__ void fill_bytes(uint8_t* p, int64_t n, uint8_t lo, int spread, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = static_cast<uint8_t>(lo + ((static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull + seed) >> 59) % spread);
}
__global__ void fill_floats(float* p, int64_t n, float lo, float hi, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint64_t z = (static_cast<uint64_t>(i) + seed) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    p[i] = lo + (hi - lo) * static_cast<float>(z >> 40) * 0x1p-24f;
  }
}

DeviceBuffer<uint8_t> random_codes(int64_t n, uint64_t seed) {
  DeviceBuffer<uint8_t> b(static_cast<size_t>(n));
  fill_codes<<<1024, 256>>>(b.get(), n, seed);
  CUDA_CHECK_LAUNCH();
  return b;
}
DeviceBuffer<uint8_t> scale_bytes(int64_t n, uint64_t seed) {  // UE8M0 codes 125 .. 128
  DeviceBuffer<uint8_t> b(static_cast<size_t>(n));
  fill_bytes<<<1024, 256>>>(b.get(), n, 125, 4, seed);
  CUDA_CHECK_LAUNCH();
  return b;
}
DeviceBuffer<float> random_floats(int64_t n, float lo, float hi, uint64_t seed) {
  DeviceBuffer<float> b(static_cast<size_t>(n));
  fill_floats<<<1024, 256>>>(b.get(), n, lo, hi, seed);
  CUDA_CHECK_LAUNCH();
  return b;
}

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
  void start() { CUDA_CHECK(cudaEventRecord(start_)); }
  double stop_seconds() {
    CUDA_CHECK(cudaEventRecord(stop_));
    CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms * 1e-3;
  }

 private:
  cudaEvent_t start_, stop_;
};

template <class F>
void time_it(benchmark::State& state, F&& run) {
  run();  // warm-up: module load, first touch
  CUDA_CHECK(cudaDeviceSynchronize());
  EventTimer t;
  for (auto _ : state) {
    t.start();
    run();
    state.SetIterationTime(t.stop_seconds());
  }
}

// ---- the ceiling ------------------------------------------------------------------------------------

void BM_CopyD2D(benchmark::State& state) {
  const int64_t n = 2LL << 30;
  DeviceBuffer<uint8_t> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  a.fill_bytes(0x5A);
  time_it(state,
          [&] { CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), static_cast<size_t>(n), cudaMemcpyDeviceToDevice)); });
  state.SetBytesProcessed(static_cast<int64_t>(2.0 * n * static_cast<double>(state.iterations())));
}

// ---- logits -------------------------------------------------------------------------------------------

struct Queries {
  DeviceBuffer<uint8_t> codes, scales;
  DeviceBuffer<float> weights;
  int64_t count;
  Queries(int64_t s, IndexerFormat f)
      : codes(random_codes(s * kHeads * code_bytes(f), 1)),
        scales(scale_bytes(s * kHeads * 4, 2)),
        weights(random_floats(s * kHeads, -0.05f, 0.05f, 3)),
        count(s) {}
  IndexerQueries view() const { return {codes.get(), scales.get(), weights.get(), count}; }
};

void BM_LogitsPrefill(benchmark::State& state, IndexerFormat f, ScoreStorage st, Variant v, int64_t s, int64_t n) {
  const Queries q(s, f);
  const DeviceBuffer<uint8_t> kc = random_codes(n * code_bytes(f), 4), ksc = scale_bytes(n * 4, 5);
  const DeviceBuffer<int32_t> ks(std::vector<int32_t>(static_cast<size_t>(s), 0));
  const DeviceBuffer<int32_t> ke(std::vector<int32_t>(static_cast<size_t>(s), static_cast<int32_t>(n)));
  DeviceBuffer<float> logits(static_cast<size_t>(s * n));
  time_it(state, [&] {
    indexer_logits_prefill({kHeads, f, st}, q.view(), {kc.get(), ksc.get(), n}, ks.get(), ke.get(), logits.get(), n, v);
  });
  const double flop = 2.0 * static_cast<double>(s) * n * kHeads * kIndexerDim;
  state.SetItemsProcessed(static_cast<int64_t>(flop * static_cast<double>(state.iterations())));
  state.counters["TFLOPS"] = benchmark::Counter(flop * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["logit_GBps"] =
      benchmark::Counter(4.0 * static_cast<double>(s) * n * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_LogitsDecode(benchmark::State& state, IndexerFormat f, ScoreStorage st, IndexerCacheLayout layout, Variant v,
                     int batch, int64_t context) {
  const Queries q(batch, f);
  PagedKeys pk;
  pk.format = f;
  pk.layout = layout;
  pk.page_keys = layout == IndexerCacheLayout::deepgemm ? 64 : 32;
  const int64_t pages_per_seq = (context + pk.page_keys - 1) / pk.page_keys;
  pk.pool_pages = batch * pages_per_seq;
  // Random bytes for codes and scale words alike (the timing does not depend on their values).
  const DeviceBuffer<uint8_t> pool = random_codes(pk.pool_pages * pk.page_bytes(), 6);
  // Pages in a scrambled order (a multiplicative permutation of the pool).
  std::vector<int32_t> table(static_cast<size_t>(pk.pool_pages));
  for (int64_t i = 0; i < pk.pool_pages; ++i)
    table[static_cast<size_t>(i)] = static_cast<int32_t>((i * 2654435761LL) % pk.pool_pages);
  const DeviceBuffer<int32_t> dtable(table);
  pk.pool = pool.get();
  pk.block_table = dtable.get();
  pk.table_stride = static_cast<int>(pages_per_seq);
  const DeviceBuffer<int32_t> lens(std::vector<int32_t>(static_cast<size_t>(batch), static_cast<int32_t>(context)));
  DeviceBuffer<float> logits(static_cast<size_t>(batch * context));
  time_it(state, [&] { indexer_logits_decode({kHeads, f, st}, q.view(), pk, lens.get(), logits.get(), context, v); });
  const double bytes = static_cast<double>(batch) * context * (code_bytes(f) + kIndexerScaleBytes + 4.0) +
                       static_cast<double>(batch) * kHeads * (code_bytes(f) + 8.0);
  state.SetBytesProcessed(static_cast<int64_t>(bytes * static_cast<double>(state.iterations())));
  state.counters["MB"] = bytes * 1e-6;
  // The cache alone (code bytes and scale word of every key), the figure DeepGEMM-style reports quote.
  state.counters["cache_TBps"] =
      benchmark::Counter(static_cast<double>(batch) * context * (code_bytes(f) + kIndexerScaleBytes) * 1e-12,
                         benchmark::Counter::kIsIterationInvariantRate);
}

// ---- top-k -------------------------------------------------------------------------------------------

// relu: every negative score replaced by 0, half the candidates on one plateau (a single head's
// relu(q . k) logits): the histogram's same-bin atomics and the plateau path of v3.
__global__ void relu_inplace(float* p, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = p[i] > 0.0f ? p[i] : 0.0f;
}

// calls: back-to-back calls a timed iteration, the time reported a call (1: the single-call event
// timing, which includes the launch; 20: the launches overlap the previous kernels).
void BM_TopK(benchmark::State& state, Variant v, int rows, int64_t n, int k, bool relu, int calls = 1) {
  const DeviceBuffer<float> scores = random_floats(rows * n, -1.0f, 1.0f, 7);
  if (relu) {
    relu_inplace<<<1024, 256>>>(scores.get(), rows * n);
    CUDA_CHECK_LAUNCH();
  }
  const DeviceBuffer<int32_t> lens(std::vector<int32_t>(static_cast<size_t>(rows), static_cast<int32_t>(n)));
  DeviceBuffer<int32_t> out(static_cast<size_t>(rows) * k);
  if (calls == 1) {
    time_it(state, [&] { topk(rows, scores.get(), n, lens.get(), n, k, 0, out.get(), v); });
  } else {
    topk(rows, scores.get(), n, lens.get(), n, k, 0, out.get(), v);  // warm-up
    CUDA_CHECK(cudaDeviceSynchronize());
    EventTimer t;
    for (auto _ : state) {
      t.start();
      for (int i = 0; i < calls; ++i) topk(rows, scores.get(), n, lens.get(), n, k, 0, out.get(), v);
      state.SetIterationTime(t.stop_seconds() / calls);
    }
  }
  state.counters["candidates"] = static_cast<double>(rows) * n;
}

// The launch alone at top-k's shapes: CTAs of 1024 threads and about v5's shared memory (225 KiB)
// meeting one cluster barrier; cluster CTAs a cluster, ctas in all (16-CTA clusters need the
// non-portable attribute and a GPC with 16 free SMs: the row is skipped where the shape cannot run).
constexpr int kTopkShapeSmem = 225 * 1024;
__global__ void __launch_bounds__(1024, 1) topk_launch_shape() { cooperative_groups::this_cluster().sync(); }

void BM_TopKLaunch(benchmark::State& state, int cluster, int ctas, int calls) {
  CUDA_CHECK(cudaFuncSetAttribute(topk_launch_shape, cudaFuncAttributeMaxDynamicSharedMemorySize, kTopkShapeSmem));
  if (cluster > 8 &&
      cudaFuncSetAttribute(topk_launch_shape, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
    (void)cudaGetLastError();
    state.SkipWithError("16-CTA clusters refused");
    return;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(ctas));
  config.blockDim = dim3(1024);
  config.dynamicSmemBytes = kTopkShapeSmem;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = static_cast<unsigned>(cluster);
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, topk_launch_shape, &config) != cudaSuccess || clusters < 1) {
    (void)cudaGetLastError();
    state.SkipWithError("this cluster shape is not schedulable here");
    return;
  }
  auto launch = [&] {
    for (int i = 0; i < calls; ++i) CUDA_CHECK(cudaLaunchKernelEx(&config, topk_launch_shape));
    CUDA_CHECK_LAUNCH();
  };
  launch();  // warm-up
  CUDA_CHECK(cudaDeviceSynchronize());
  EventTimer t;
  for (auto _ : state) {
    t.start();
    launch();
    state.SetIterationTime(t.stop_seconds() / calls);
  }
}

// ---- q path --------------------------------------------------------------------------------------------

void BM_QPath(benchmark::State& state, IndexerFormat f, Variant v, int64_t s) {
  DeviceBuffer<uint16_t> x(static_cast<size_t>(s * kHeads * kIndexerDim)), wx(static_cast<size_t>(s * kHeads));
  x.fill_bytes(0x3F);
  wx.fill_bytes(0x3F);
  const DeviceBuffer<float> rope = random_floats(s * 64, -1, 1, 8);
  DeviceBuffer<uint8_t> codes(static_cast<size_t>(s * kHeads * code_bytes(f))),
      scales(static_cast<size_t>(s * kHeads * 4));
  DeviceBuffer<uint16_t> values(static_cast<size_t>(s * kHeads * kIndexerDim));
  DeviceBuffer<float> weights(static_cast<size_t>(s * kHeads));
  time_it(state, [&] {
    indexer_q({kHeads, f, true, 0.01f}, s, x.get(), rope.get(), wx.get(),
              {codes.get(), scales.get(), values.get(), weights.get()}, v);
  });
  const double bytes =
      static_cast<double>(s) * kHeads * (kIndexerDim * 2.0 * 2 + code_bytes(f) + 4 + 2 + 4) + s * 64 * 4.0;
  state.SetBytesProcessed(static_cast<int64_t>(bytes * static_cast<double>(state.iterations())));
}

void register_all() {
  auto reg = [](const std::string& name, auto fn, int iterations) {
    benchmark::RegisterBenchmark(name.c_str(), fn)
        ->UseManualTime()
        ->Iterations(iterations)
        ->Unit(benchmark::kMicrosecond);
  };
  reg("CopyD2D/2GiB", BM_CopyD2D, 20);
  for (IndexerFormat f : {IndexerFormat::fp8, IndexerFormat::fp4})
    for (ScoreStorage st : {ScoreStorage::fp32, ScoreStorage::bf16})
      for (int64_t n : {1024, 2048, 4096, 8192, 16384}) {
        const std::string name = std::string("Logits/prefill/") + format_name(f) + "/" + storage_name(st) +
                                 "/v2/s4096/n" + std::to_string(n);
        reg(
            name, [=](benchmark::State& s) { BM_LogitsPrefill(s, f, st, Variant::v2, 4096, n); }, 10);
      }
  // v3 and v4 (the persistent TMA kernels: FP8 only; FP4 with them runs v2) beside v2 on the same
  // inputs; v4 is v3 with keys on the MMA's M axis (the shorter epilogue), v3 its comparison.
  for (Variant v : {Variant::v3, Variant::v4})
    for (ScoreStorage st : {ScoreStorage::fp32, ScoreStorage::bf16})
      for (int64_t n : {1024, 2048, 4096, 8192, 16384}) {
        const std::string name = std::string("Logits/prefill/fp8/") + storage_name(st) + "/" + variant_name(v) +
                                 "/s4096/n" + std::to_string(n);
        reg(
            name, [=](benchmark::State& s) { BM_LogitsPrefill(s, IndexerFormat::fp8, st, v, 4096, n); }, 10);
      }
  // v1 (one thread per logit, double arithmetic): a small shape, the ladder's starting point.
  reg(
      "Logits/prefill/fp8/bf16/v1/s256/n1024",
      [](benchmark::State& s) { BM_LogitsPrefill(s, IndexerFormat::fp8, ScoreStorage::bf16, Variant::v1, 256, 1024); },
      2);
  for (IndexerFormat f : {IndexerFormat::fp8, IndexerFormat::fp4})
    for (IndexerCacheLayout layout : {IndexerCacheLayout::deepgemm, IndexerCacheLayout::interleaved})
      for (ScoreStorage st : {ScoreStorage::fp32, ScoreStorage::bf16})
        for (Variant v : {Variant::v2, Variant::v3, Variant::v4, Variant::v5, Variant::v6, Variant::v7}) {
          // v6 runs v5 (v4) on the interleaved layout, v7 runs v6 there and for FP4 (kept as its control row).
          if ((v == Variant::v6 || v == Variant::v7) && layout == IndexerCacheLayout::interleaved) continue;
          const std::string name = std::string("Logits/decode/") + format_name(f) + "/" +
                                   (layout == IndexerCacheLayout::deepgemm ? "deepgemm" : "interleaved") + "/" +
                                   storage_name(st) + "/" + variant_name(v) + "/b128/ctx65536";
          reg(
              name, [=](benchmark::State& s) { BM_LogitsDecode(s, f, st, layout, v, 128, 65536); }, 10);
        }
  reg(
      "Logits/decode/fp8/deepgemm/fp32/v1/b8/ctx4096",
      [](benchmark::State& s) {
        BM_LogitsDecode(s, IndexerFormat::fp8, ScoreStorage::fp32, IndexerCacheLayout::deepgemm, Variant::v1, 8, 4096);
      },
      2);
  // Top-k: v5 beside v4 and v3 (the versions it follows), v1, v2 and (bench/torch_indexer_bench.py)
  // torch.topk.
  for (Variant v : {Variant::v1, Variant::v2, Variant::v3, Variant::v4, Variant::v5})
    for (int k : {512, 1024}) {
      reg(
          std::string("TopK/") + variant_name(v) + "/b1/n262144/k" + std::to_string(k),
          [=](benchmark::State& s) { BM_TopK(s, v, 1, 262144, k, false); }, 50);
      reg(
          std::string("TopK/") + variant_name(v) + "/b128/n16384/k" + std::to_string(k),
          [=](benchmark::State& s) { BM_TopK(s, v, 128, 16384, k, false); }, 50);
    }
  // 20 back-to-back calls a timed iteration: the kernel without most of the launch.
  for (Variant v : {Variant::v3, Variant::v4, Variant::v5}) {
    reg(
        std::string("TopK/") + variant_name(v) + "/b1/n262144/k512/x20",
        [=](benchmark::State& s) { BM_TopK(s, v, 1, 262144, 512, false, 20); }, 20);
    reg(
        std::string("TopK/") + variant_name(v) + "/b128/n16384/k512/x20",
        [=](benchmark::State& s) { BM_TopK(s, v, 128, 16384, 512, false, 20); }, 20);
  }
  // The launch alone at the shapes of 262144 x 1 (one cluster of 16 or 8 CTAs) and 16384 x 128.
  for (int calls : {1, 20}) {
    const std::string x = calls == 1 ? "" : "/x20";
    const int iterations = calls == 1 ? 50 : 20;
    reg(
        "TopK/launch/c16" + x, [=](benchmark::State& s) { BM_TopKLaunch(s, 16, 16, calls); }, iterations);
    reg(
        "TopK/launch/c8" + x, [=](benchmark::State& s) { BM_TopKLaunch(s, 8, 8, calls); }, iterations);
    reg(
        "TopK/launch/c1x128" + x, [=](benchmark::State& s) { BM_TopKLaunch(s, 1, 128, calls); }, iterations);
  }
  for (Variant v : {Variant::v2, Variant::v3, Variant::v4, Variant::v5}) {
    reg(
        std::string("TopK/") + variant_name(v) + "/b1/n262144/k512/relu",
        [=](benchmark::State& s) { BM_TopK(s, v, 1, 262144, 512, true); }, 50);
    reg(
        std::string("TopK/") + variant_name(v) + "/b128/n16384/k512/relu",
        [=](benchmark::State& s) { BM_TopK(s, v, 128, 16384, 512, true); }, 50);
  }
  for (IndexerFormat f : {IndexerFormat::fp4, IndexerFormat::fp8})
    for (Variant v : {Variant::v1, Variant::v2})
      reg(
          std::string("QPath/") + format_name(f) + "/" + variant_name(v) + "/s4096",
          [=](benchmark::State& s) { BM_QPath(s, f, v, 4096); }, 20);
}

}  // namespace

int main(int argc, char** argv) {
  if (device_count() == 0) {
    std::printf("no CUDA device: nothing to measure\n");
    return 77;
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  benchmark::AddCustomContext("gpu", prop.name);
  benchmark::AddCustomContext("sm_count", std::to_string(prop.multiProcessorCount));
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
