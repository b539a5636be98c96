// Google Benchmark of the CUDA compressors on one GPU, timed with CUDA events (manual time).
// Effective bandwidth = the bytes a kernel must move (each input read once, each output written
// once: counted per case below) / time, reported as bytes_per_second. In the same run: a
// device-to-device copy (bytes read + written) as the ceiling.
//
// Prefill: 4 sequences x 65536 tokens from position 0 (the spec's "64K tokens x batch 4").
// Decode: batch 128, one step; "all" = every sequence completes a block this step (the worst case),
// "mixed" = positions spread so 1 in r completes; a decode case reports the time of one step out
// of 100 (back-to-back launches on a stream, or one CUDA graph of the 100).
//
//   dsv4-cuda-compressor-bench [--benchmark_filter=...] [--benchmark_out=file.json]
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_buffer.h"
#include "cuda/common/numerics.cuh"
#include "cuda/compressor/compressor_api.h"

using namespace dsv4::cuda;

namespace {

constexpr int64_t kPrefillBatch = 4;
constexpr int64_t kPrefillTokens = 65536;
constexpr int kDecodeBatch = 128;
constexpr int kDecodeSteps = 100;

// Deterministic pseudo-random fill in [lo, hi) (never zeros: they hide unwritten outputs and can
// run faster than real data).
__global__ void fill_kernel(float* p, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint64_t z = (static_cast<uint64_t>(i) + seed) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    p[i] = lo + (hi - lo) * static_cast<float>(z >> 40) * 0x1p-24f;
  }
}

DeviceBuffer<float> random_buffer(int64_t n, uint64_t seed, float lo, float hi) {
  DeviceBuffer<float> b(static_cast<size_t>(n));
  fill_kernel<<<1024, 256>>>(b.get(), n, seed, lo, hi);
  CUDA_CHECK_LAUNCH();
  return b;
}

// Weights and tables of one compressor, on the device.
struct Layer {
  CompressorParams params;
  DeviceBuffer<float> ape, norm, rope;
  Layer(int ratio, int d, Kind kind, int64_t rope_entries)
      : ape(random_buffer(ratio * (ratio == 4 ? 2 : 1) * d, 1, -1, 1)),
        norm(random_buffer(d, 2, 0.5f, 1.5f)),
        rope(random_buffer(rope_entries * kRopeDim, 3, -1, 1)) {
    params.ratio = ratio;
    params.head_dim = d;
    params.kind = kind;
    params.norm_eps = 1e-6;
    params.ape = ape.get();
    params.norm = norm.get();
    params.rope = rope.get();
    params.rope_entries = rope_entries;
  }
};

class EventTimer {
 public:
  explicit EventTimer(cudaStream_t stream = nullptr) : stream_(stream) {
    CUDA_CHECK(cudaEventCreate(&start_));
    CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  void start() { CUDA_CHECK(cudaEventRecord(start_, stream_)); }
  double stop_seconds() {
    CUDA_CHECK(cudaEventRecord(stop_, stream_));
    CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms * 1e-3;
  }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_, stop_;
};

void report(benchmark::State& state, double bytes_per_iteration) {
  state.SetBytesProcessed(static_cast<int64_t>(bytes_per_iteration * static_cast<double>(state.iterations())));
  state.counters["MB"] = bytes_per_iteration / 1e6;
}

// ---- the ceiling -----------------------------------------------------------------------------

void BM_CopyD2D(benchmark::State& state) {
  const int64_t n = 2LL << 30;  // 2 GiB each way
  DeviceBuffer<uint8_t> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  a.fill_bytes(0x5A);
  EventTimer t;
  for (auto _ : state) {
    t.start();
    CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), static_cast<size_t>(n), cudaMemcpyDeviceToDevice));
    state.SetIterationTime(t.stop_seconds());
  }
  report(state, 2.0 * static_cast<double>(n));
}

// ---- prefill ---------------------------------------------------------------------------------

enum Which { kC4Main, kC4Indexer, kC128, kC128Online };

void BM_Prefill(benchmark::State& state, Which which, Variant variant) {
  const int ratio = which == kC4Main || which == kC4Indexer ? 4 : 128;
  const int d = which == kC4Indexer ? 128 : 512;
  const int coff = ratio == 4 ? 2 : 1;
  const int64_t width = coff * d;
  const int64_t rows = kPrefillBatch * kPrefillTokens;
  Layer layer(ratio, d, which == kC4Indexer ? Kind::indexer : Kind::main, kPrefillTokens / ratio);
  std::vector<SequenceChunk> chunks;
  for (int64_t b = 0; b < kPrefillBatch; ++b)
    chunks.push_back({0, static_cast<int32_t>(kPrefillTokens), b * kPrefillTokens, static_cast<int32_t>(b)});
  const BatchPlan plan(chunks, ratio);
  const DeviceBuffer<float> kv = random_buffer(rows * width, 11, -2, 2);
  const DeviceBuffer<float> score = random_buffer(rows * width, 12, -3, 3);
  const bool online = which == kC128Online;
  const int64_t state_size = online ? online_state_floats(d) : state_floats(ratio, d);
  DeviceBuffer<float> state_kv(static_cast<size_t>(kPrefillBatch * state_size));
  DeviceBuffer<float> state_score(static_cast<size_t>(kPrefillBatch * state_size));
  DeviceBuffer<uint16_t> entries(static_cast<size_t>(plan.n_entries() * d));
  auto run = [&] {
    if (online)
      c128_online_prefill(layer.params, plan, kv.get(), score.get(), state_kv.get(), entries.get(), nullptr);
    else if (ratio == 4)
      c4_prefill(layer.params, plan, kv.get(), score.get(), state_kv.get(), state_score.get(), entries.get(), nullptr,
                 variant);
    else
      c128_prefill(layer.params, plan, kv.get(), score.get(), state_kv.get(), state_score.get(), entries.get(), nullptr,
                   variant);
  };
  run();  // warm-up: module load, first-touch
  CUDA_CHECK(cudaDeviceSynchronize());
  EventTimer t;
  for (auto _ : state) {
    t.start();
    run();
    state.SetIterationTime(t.stop_seconds());
  }
  // Bytes a compressor must move: kv and score read once, entries (bf16) written, one RoPE row
  // (64 fp32) read per entry, the state rows of the final partial block written (ratio 4 also the
  // 4 previous rows), ape and norm read once.
  const double n = static_cast<double>(plan.n_entries());
  const double state_rows = online ? 3.0 / 2 : (ratio == 4 ? 4.0 : 0.0);  // online: 3 d floats, no score
  const double bytes = 2.0 * static_cast<double>(rows * width) * 4 + n * d * 2 + n * kRopeDim * 4 +
                       kPrefillBatch * state_rows * 2 * width * 4 + static_cast<double>(ratio * width + d) * 4;
  report(state, bytes);
  state.counters["entries"] = n;
}

// ---- decode ----------------------------------------------------------------------------------

// timing: "stream" = 100 back-to-back launches between two events (launch overhead included where
// the CPU cannot keep ahead); "graph" = the same 100 steps captured in a CUDA graph and replayed.
void BM_Decode(benchmark::State& state, Which which, Variant variant, bool all_complete, bool graph) {
  const int ratio = which == kC4Main || which == kC4Indexer ? 4 : 128;
  const int d = which == kC4Indexer ? 128 : 512;
  const int coff = ratio == 4 ? 2 : 1;
  const int64_t width = coff * d;
  const bool online = which == kC128Online;
  Layer layer(ratio, d, which == kC4Indexer ? Kind::indexer : Kind::main, 8192);
  std::vector<int64_t> positions;
  std::vector<int32_t> states;
  int completing = 0;
  for (int b = 0; b < kDecodeBatch; ++b) {
    // all: position 1000 r + r - 1; mixed: 1000 r + (b mod r), so 1 in r completes.
    positions.push_back(1000LL * ratio + (all_complete ? ratio - 1 : b % ratio));
    states.push_back(b);
    completing += (positions.back() + 1) % ratio == 0;
  }
  const DecodePlan plan(positions, states, ratio);
  const DeviceBuffer<float> kv = random_buffer(kDecodeBatch * width, 21, -2, 2);
  const DeviceBuffer<float> score = random_buffer(kDecodeBatch * width, 22, -3, 3);
  const int64_t state_size = online ? online_state_floats(d) : state_floats(ratio, d);
  DeviceBuffer<float> state_kv = random_buffer(kDecodeBatch * state_size, 23, -2, 2);
  DeviceBuffer<float> state_score = random_buffer(kDecodeBatch * state_size, 24, -3, 3);
  if (online) {  // a valid online state: max, positive sum, mean
    fill_kernel<<<64, 256>>>(state_kv.get(), kDecodeBatch * state_size, 25, 1, 2);
    CUDA_CHECK_LAUNCH();
  }
  DeviceBuffer<uint16_t> entries(static_cast<size_t>(kDecodeBatch * d));
  DeviceBuffer<float> pooled(static_cast<size_t>(kDecodeBatch * d));  // v1 needs one; no scratch in a graph
  float* pool_out = variant == Variant::v1 ? pooled.get() : nullptr;
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto step = [&] {
    if (online)
      c128_online_decode(layer.params, plan, kv.get(), score.get(), state_kv.get(), entries.get(), pool_out, stream);
    else if (ratio == 4)
      c4_decode(layer.params, plan, kv.get(), score.get(), state_kv.get(), state_score.get(), entries.get(), pool_out,
                variant, stream);
    else
      c128_decode(layer.params, plan, kv.get(), score.get(), state_kv.get(), state_score.get(), entries.get(), pool_out,
                  variant, stream);
  };
  CUDA_CHECK(cudaDeviceSynchronize());
  step();
  CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kDecodeSteps; ++i) step();
    CUDA_CHECK(cudaStreamEndCapture(stream, &g));
    CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    CUDA_CHECK(cudaGraphDestroy(g));
    CUDA_CHECK(cudaGraphLaunch(exec, stream));  // warm-up replay
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  EventTimer t(stream);
  for (auto _ : state) {
    t.start();
    if (graph)
      CUDA_CHECK(cudaGraphLaunch(exec, stream));
    else
      for (int i = 0; i < kDecodeSteps; ++i) step();
    state.SetIterationTime(t.stop_seconds() / kDecodeSteps);
  }
  if (exec) CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaStreamDestroy(stream));
  // Bytes of one step: the new rows read and written into the state; for every completing
  // sequence its pooled rows read, its entry written and (ratio 4) 4 rows of both arrays shifted.
  double bytes = 0;
  if (online) {
    bytes = kDecodeBatch * (2.0 * d * 4 + 2 * 3.0 * d * 4) + completing * (d * 2.0 + kRopeDim * 4.0);
  } else {
    bytes = kDecodeBatch * 2.0 * (2 * width * 4);
    const double pooled_rows = ratio == 4 ? 8.0 * d : 128.0 * d;  // channels read, per array
    const double shift = ratio == 4 ? 2.0 * 4 * width * 4 * 2 : 0;
    bytes += completing * (2 * pooled_rows * 4 + d * 2.0 + kRopeDim * 4.0 + shift);
  }
  report(state, bytes);
  state.counters["completing"] = completing;
}

// Fixed iteration counts keep one run short: a prefill iteration is one call, a decode iteration
// 100 steps.
void register_all() {
  benchmark::RegisterBenchmark("CopyD2D/2GiB", BM_CopyD2D)
      ->UseManualTime()
      ->Iterations(30)
      ->Unit(benchmark::kMicrosecond);
  struct P {
    const char* name;
    Which which;
  };
  const std::vector<Variant> c4_versions{Variant::v1, Variant::v2, Variant::v3};
  const std::vector<Variant> two_versions{Variant::v1, Variant::v3};
  for (P p : {P{"C4Main_d512", kC4Main}, P{"C4Indexer_d128", kC4Indexer}, P{"C128_d512", kC128}})
    for (Variant v : p.which == kC128 ? two_versions : c4_versions) {
      const std::string name = std::string("Prefill/") + p.name + "/" + variant_name(v) + "/4x65536";
      benchmark::RegisterBenchmark(name.c_str(), BM_Prefill, p.which, v)
          ->UseManualTime()
          ->Iterations(v == Variant::v1 ? 5 : 30)
          ->Unit(benchmark::kMicrosecond);
    }
  // Online C128 has one version (the entry points take none; the argument is unused).
  benchmark::RegisterBenchmark("Prefill/C128Online_d512/4x65536", BM_Prefill, kC128Online, Variant::v3)
      ->UseManualTime()
      ->Iterations(30)
      ->Unit(benchmark::kMicrosecond);
  for (P p : {P{"C4Main_d512", kC4Main}, P{"C4Indexer_d128", kC4Indexer}, P{"C128_d512", kC128},
              P{"C128Online_d512", kC128Online}})
    for (Variant v : two_versions)
      for (bool all : {true, false})
        for (bool graph : {false, true}) {
          if (p.which == kC128Online && v == Variant::v1) continue;  // one version, run as v3
          if (v == Variant::v1 && graph) continue;
          const std::string version = p.which == kC128Online ? "" : std::string("/") + variant_name(v);
          const std::string name = std::string("Decode/") + p.name + version + (all ? "/all" : "/mixed") +
                                   (graph ? "/graph" : "/stream") + "/b128";
          benchmark::RegisterBenchmark(name.c_str(), BM_Decode, p.which, v, all, graph)
              ->UseManualTime()
              ->Iterations(v == Variant::v1 ? 2 : 20)
              ->Unit(benchmark::kMicrosecond);
        }
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
  benchmark::AddCustomContext("l2_bytes", std::to_string(prop.l2CacheSize));
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
