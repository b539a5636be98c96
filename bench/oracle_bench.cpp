// dsv4-oracle-bench: the CPU oracle's stages at tiny and V4-Flash dims, against a plain Eigen double
// GEMM of the same shapes, and one whole V4-Flash CSA layer prefill.
//
//   dsv4-oracle-bench                                   every stage benchmark (a few minutes)
//   dsv4-oracle-bench --benchmark_filter=FlashLayer     the V4-Flash ratio-4 layer, prefill of 4096
//                                                       tokens, official policy (tens of seconds)
//
// The FlashLayer benchmark is registered only when the filter names it. Times are wall clock
// (UseRealTime: the work runs on OpenMP threads); GFLOP/s counts 2*M*N*K per GEMM-shaped product
// and the useful multiply-adds of the indexer scores and of attention (masked pairs not counted).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "reference/config.h"
#include "reference/kv_cache.h"
#include "reference/layer.h"
#include "reference/numerics/storage.h"
#include "reference/parallel.h"
#include "reference/precision.h"
#include "reference/primitives/linear.h"
#include "reference/primitives/rope.h"
#include "reference/stages/compressor.h"
#include "reference/stages/indexer.h"
#include "reference/stages/output_projection.h"
#include "reference/stages/sparse_mqa.h"
#include "reference/weights.h"

namespace {

using namespace dsv4::ref;

// Uniform values in [-scale, scale], rounded to `storage`. -> [rows, cols]
Mat random_mat(Index rows, Index cols, double scale, uint64_t seed, Storage storage = Storage::bf16) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-scale, scale);
  Mat m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = round_to(storage, u(rng));
  return m;
}

// Sets the OpenMP thread count for a scope.
class Threads {
 public:
  explicit Threads(int n) : before_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~Threads() { omp_set_num_threads(before_); }
  Threads(const Threads&) = delete;
  Threads& operator=(const Threads&) = delete;

 private:
  int before_;
};

// CPU seconds of every thread of the process.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Runs body once per iteration on `threads` threads and reports, for `flops` per iteration:
// GFLOP/s over the wall clock, and core_GFLOP/s over the CPU time of all threads (the rate of one
// busy core: it stays meaningful when other processes share the machine). tokens/s when tokens > 0.
void run_timed(benchmark::State& state, int threads, double flops, int64_t tokens, const std::function<void()>& body) {
  const Threads scope(threads);
  double seconds = 0, cpu_seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = process_cpu_seconds();
    body();
    cpu_seconds += process_cpu_seconds() - c0;
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double iterations = static_cast<double>(state.iterations());
  if (flops > 0) {
    state.counters["GFLOP/s"] = flops * iterations / seconds / 1e9;
    state.counters["core_GFLOP/s"] = flops * iterations / cpu_seconds / 1e9;
    state.counters["GFLOP"] = flops / 1e9;
  }
  state.counters["threads"] = threads;
  if (tokens > 0) state.counters["tokens/s"] = static_cast<double>(tokens) * iterations / seconds;
}

// Stage benchmarks repeat for at least half a second; whole-layer ones run a fixed count.
benchmark::internal::Benchmark* configure(benchmark::internal::Benchmark* b, int64_t iterations = 0) {
  b->UseRealTime()->Unit(benchmark::kMillisecond);
  return iterations > 0 ? b->Iterations(iterations) : b->MinTime(0.5);
}

std::vector<int> thread_counts() {
  const int all = omp_get_max_threads();
  return all > 1 ? std::vector<int>{1, all} : std::vector<int>{1};
}

// ---- GEMM-shaped projections ----------------------------------------------------------------

struct Projection {
  std::string name;
  Index n, k;  // weight [n, k]
};

std::vector<Projection> projections(const ModelConfig& c) {
  return {{"wq_a", c.q_lora_rank, c.dim},
          {"wq_b", Index{c.n_heads} * c.head_dim, c.q_lora_rank},
          {"wkv", c.head_dim, c.dim},
          {"indexer.wq_b", Index{c.index_n_heads} * c.index_head_dim, c.q_lora_rank},
          {"wo_b", c.dim, Index{c.o_groups} * c.o_lora_rank}};
}

// A plain Eigen GEMM y = x W^T, the rows split into one contiguous block per thread.
void eigen_gemm(const Eigen::Ref<const Mat>& x, const Eigen::Ref<const Mat>& W, Eigen::Ref<Mat> y) {
  const int blocks = omp_get_max_threads();
  const Index rows = (x.rows() + blocks - 1) / blocks;
  parallel_for(blocks, [&](int64_t b) {
    const Index first = b * rows, n = std::min(rows, x.rows() - first);
    if (n > 0) y.middleRows(first, n).noalias() = x.middleRows(first, n) * W.transpose();
  });
}

void register_gemms(const ModelConfig& cfg, Index m) {
  for (const Projection& proj : projections(cfg)) {
    const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(proj.n) * static_cast<double>(proj.k);
    const std::string shape = cfg.name + "/" + proj.name + "/M" + std::to_string(m);
    for (int threads : thread_counts()) {
      const std::string suffix = shape + "/threads:" + std::to_string(threads);
      configure(
          benchmark::RegisterBenchmark(("Gemm/linear_fp8_block128/" + suffix).c_str(), [=](benchmark::State& state) {
            const Mat x = random_mat(m, proj.k, 2.0, 1);
            const Mat W = fp8_weight_fake_quant(random_mat(proj.n, proj.k, 1.0 / std::sqrt(double(proj.k)), 2));
            run_timed(state, threads, flops, 0,
                      [&] { benchmark::DoNotOptimize(linear_fp8_block128(x, W, Storage::bf16)); });
          }));
      configure(benchmark::RegisterBenchmark(("Gemm/linear_exact/" + suffix).c_str(), [=](benchmark::State& state) {
        const Mat x = random_mat(m, proj.k, 2.0, 1);
        const Mat W = random_mat(proj.n, proj.k, 1.0 / std::sqrt(double(proj.k)), 2);
        run_timed(state, threads, flops, 0, [&] { benchmark::DoNotOptimize(linear_exact(x, W, Storage::fp64)); });
      }));
      configure(benchmark::RegisterBenchmark(("Gemm/eigen_double/" + suffix).c_str(), [=](benchmark::State& state) {
        const Mat x = random_mat(m, proj.k, 2.0, 1);
        const Mat W = random_mat(proj.n, proj.k, 1.0 / std::sqrt(double(proj.k)), 2);
        Mat y(m, proj.n);
        run_timed(state, threads, flops, 0, [&] {
          eigen_gemm(x, W, y);
          benchmark::DoNotOptimize(y.data());
        });
      }));
    }
  }
}

// The grouped wo_a (G products [M, H*d/G] x [R, H*d/G]^T) against the same products in Eigen.
void register_wo_a(const ModelConfig& cfg, Index m) {
  const Index group_in = Index{cfg.n_heads} * cfg.head_dim / cfg.o_groups;
  const double flops = 2.0 * double(m) * double(cfg.o_groups) * double(cfg.o_lora_rank) * double(group_in);
  const std::string shape = cfg.name + "/wo_a/M" + std::to_string(m);
  configure(benchmark::RegisterBenchmark(("Gemm/grouped_wo_a/" + shape).c_str(), [=](benchmark::State& state) {
    AttentionWeights w;
    w.wo_a = random_mat(Index{cfg.o_groups} * cfg.o_lora_rank, group_in, 1.0 / std::sqrt(double(group_in)), 3);
    const Mat o = random_mat(m, Index{cfg.n_heads} * cfg.head_dim, 1.0, 4);
    const PrecisionPolicy p = PrecisionPolicy::official();
    run_timed(state, omp_get_max_threads(), flops, 0, [&] { benchmark::DoNotOptimize(grouped_wo_a(w, o, cfg, p)); });
  }));
  configure(benchmark::RegisterBenchmark(("Gemm/eigen_double/" + shape).c_str(), [=](benchmark::State& state) {
    const Mat wo_a = random_mat(Index{cfg.o_groups} * cfg.o_lora_rank, group_in, 1.0 / std::sqrt(double(group_in)), 3);
    const Mat o = random_mat(m, Index{cfg.n_heads} * cfg.head_dim, 1.0, 4);
    Mat y(m, Index{cfg.o_groups} * cfg.o_lora_rank);
    run_timed(state, omp_get_max_threads(), flops, 0, [&] {
      for (int g = 0; g < cfg.o_groups; ++g)
        eigen_gemm(o.middleCols(g * group_in, group_in), wo_a.middleRows(g * cfg.o_lora_rank, cfg.o_lora_rank),
                   y.middleCols(g * cfg.o_lora_rank, cfg.o_lora_rank));
      benchmark::DoNotOptimize(y.data());
    });
  }));
}

// ---- Compressor, indexer scores, sparse attention ---------------------------------------------

CompressorWeights random_compressor(const ModelConfig& cfg, int ratio, int head_dim, uint64_t seed) {
  CompressorWeights w;
  w.ratio = ratio;
  w.head_dim = head_dim;
  const Index width = Index{w.coff()} * head_dim;
  const double scale = 1.0 / std::sqrt(double(cfg.dim));
  w.wkv = random_mat(width, cfg.dim, scale, seed);
  w.wgate = random_mat(width, cfg.dim, scale, seed + 1);
  w.ape = random_mat(ratio, width, 0.5, seed + 2, Storage::fp32);
  w.norm = Vec::Ones(head_dim);
  return w;
}

void register_compressor(const ModelConfig& cfg, int ratio, CompressorKind kind, Index s) {
  const int head_dim = kind == CompressorKind::main ? cfg.head_dim : cfg.index_head_dim;
  const std::string name = std::string("Compressor/") + (kind == CompressorKind::main ? "main" : "indexer") + "/ratio" +
                           std::to_string(ratio) + "/" + cfg.name + "/s" + std::to_string(s);
  const int coff = ratio == 4 ? 2 : 1;
  const double flops = 2.0 * 2.0 * double(s) * coff * head_dim * double(cfg.dim);  // wkv and wgate
  configure(benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& state) {
    const CompressorWeights w = random_compressor(cfg, ratio, head_dim, 5);
    const Mat x = random_mat(s, cfg.dim, 2.0, 6);
    const PrecisionPolicy p = PrecisionPolicy::official();
    const RopeTable rope = RopeTable::for_layer(cfg, ratio, p);
    run_timed(state, omp_get_max_threads(), flops, s, [&] {
      CompressorState st = CompressorState::fresh(ratio, head_dim);
      benchmark::DoNotOptimize(compress(w, kind, x, 0, st, rope, cfg.norm_eps, p));
    });
  }));
}

// Visible (query, entry) pairs of a prefill of s tokens: entry j is visible from t when j < (t+1)/4.
double visible_pairs(Index s) {
  double pairs = 0;
  for (Index t = 0; t < s; ++t) pairs += double((t + 1) / 4);
  return pairs;
}

void register_indexer_scores(const ModelConfig& cfg, Index s) {
  const std::string name = "IndexerScores/" + cfg.name + "/s" + std::to_string(s);
  const double flops = 2.0 * cfg.index_n_heads * cfg.index_head_dim * visible_pairs(s);
  configure(benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& state) {
    const Mat q = random_mat(s, Index{cfg.index_n_heads} * cfg.index_head_dim, 1.0, 7);
    const Mat weights = random_mat(s, cfg.index_n_heads, 0.05, 8);
    const Mat keys = random_mat(s / 4, cfg.index_head_dim, 1.0, 9);
    const PrecisionPolicy p = PrecisionPolicy::official();
    run_timed(state, omp_get_max_threads(), flops, s,
              [&] { benchmark::DoNotOptimize(indexer_scores(q, weights, keys, 0, 4, p)); });
  }));
}

// Keys per query of a CSA prefill of s tokens: the window and min(topk, (t+1)/4) entries.
int64_t attended_keys(const ModelConfig& cfg, int ratio, int64_t t) {
  int64_t keys = std::min<int64_t>(t + 1, cfg.window_size);
  if (ratio == 4) keys += std::min<int64_t>(cfg.index_topk, (t + 1) / 4);
  if (ratio == 128) keys += (t + 1) / 128;
  return keys;
}

void register_sparse_mqa(const ModelConfig& cfg, Index s) {
  const std::string name = "SparseMqa/" + cfg.name + "/s" + std::to_string(s);
  double keys = 0;
  for (Index t = 0; t < s; ++t) keys += double(attended_keys(cfg, 4, t));
  const double flops = 4.0 * cfg.n_heads * cfg.head_dim * keys;  // q.k and p.v
  configure(benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& state) {
    const Index n_entries = s / 4, k = std::min<Index>(cfg.index_topk, n_entries);
    const Mat q = random_mat(s, Index{cfg.n_heads} * cfg.head_dim, 1.0, 10);
    const Mat kv = random_mat(s + n_entries, cfg.head_dim, 1.0, 11);
    const Vec sink = Vec::Zero(cfg.n_heads);
    // Prefill layout: the window's positions, then the first visible entries (which ones does not
    // change the cost), -1 elsewhere.
    const Index width = std::min<Index>(s, cfg.window_size);
    IndexMat idx = IndexMat::Constant(s, width + k, -1);
    for (Index t = 0; t < s; ++t) {
      const Index first = std::max<Index>(0, t - cfg.window_size + 1);
      for (Index c = 0; c < width && first + c <= t; ++c) idx(t, c) = static_cast<int32_t>(first + c);
      for (Index j = 0; j < std::min<Index>(k, (t + 1) / 4); ++j) idx(t, width + j) = static_cast<int32_t>(s + j);
    }
    const PrecisionPolicy p = PrecisionPolicy::official();
    run_timed(state, omp_get_max_threads(), flops, s, [&] {
      benchmark::DoNotOptimize(sparse_mqa(q, kv, sink, idx, cfg.n_heads, std::pow(double(cfg.head_dim), -0.5), p));
    });
  }));
}

// ---- Whole layer ---------------------------------------------------------------------------------

// FLOPs of one prefill of s tokens: 2*M*N*K per projection (the compressors' wkv and wgate
// included), the indexer scores over visible pairs, and attention (q.k and p.v) over the keys
// each query attends to.
double layer_prefill_flops(const ModelConfig& c, int ratio, Index s) {
  const double m = double(s);
  const double hd = double(c.n_heads) * c.head_dim;
  double f = 2 * m * c.q_lora_rank * c.dim                                     // wq_a
             + 2 * m * hd * c.q_lora_rank                                      // wq_b
             + 2 * m * c.head_dim * c.dim                                      // wkv
             + 2 * m * c.o_lora_rank * hd                                      // wo_a: G groups of [R, H*d/G]
             + 2 * m * c.dim * c.o_groups * double(c.o_lora_rank);             // wo_b
  if (ratio != 0) f += 2 * 2 * m * (ratio == 4 ? 2 : 1) * c.head_dim * c.dim;  // compressor wkv, wgate
  if (ratio == 4) {
    f += 2 * m * double(c.index_n_heads) * c.index_head_dim * c.q_lora_rank;  // indexer wq_b
    f += 2 * m * c.index_n_heads * double(c.dim);                             // weights_proj
    f += 2 * 2 * m * 2 * c.index_head_dim * double(c.dim);                    // indexer compressor
    f += 2.0 * c.index_n_heads * c.index_head_dim * visible_pairs(s);         // indexer scores
  }
  double keys = 0;
  for (Index t = 0; t < s; ++t) keys += double(attended_keys(c, ratio, t));
  return f + 4.0 * hd * keys;
}

void register_layer_prefill(const std::string& name, const ModelConfig& cfg, int ratio, Index s) {
  configure(benchmark::RegisterBenchmark(
                name.c_str(),
                [=](benchmark::State& state) {
                  const AttentionLayer layer(cfg, AttentionWeights::random(cfg, ratio, 1), PrecisionPolicy::official());
                  const Mat x = random_mat(s, cfg.dim, 2.0, 12);
                  auto cache = make_ring_cache(cfg, ratio, 1);
                  run_timed(state, omp_get_max_threads(), layer_prefill_flops(cfg, ratio, s), s,
                            [&] { benchmark::DoNotOptimize(layer.forward(x, 0, *cache, 0)); });
                }),
            1);
}

// One decode step after a prefill of `context` tokens (the prefill is outside the timing; each
// iteration decodes the next position).
void register_layer_decode(const std::string& name, const ModelConfig& cfg, int ratio, Index context, Index steps) {
  configure(benchmark::RegisterBenchmark(
                name.c_str(),
                [=](benchmark::State& state) {
                  const AttentionLayer layer(cfg, AttentionWeights::random(cfg, ratio, 1), PrecisionPolicy::official());
                  const Mat x = random_mat(context + steps, cfg.dim, 2.0, 13);
                  auto cache = make_ring_cache(cfg, ratio, 1);
                  layer.forward(x.topRows(context), 0, *cache, 0);
                  Index pos = context;
                  run_timed(state, omp_get_max_threads(), 0, 1, [&] {
                    benchmark::DoNotOptimize(layer.forward(x.middleRows(pos, 1), pos, *cache, 0));
                    ++pos;
                  });
                }),
            steps);
}

bool filter_names(int argc, char** argv, const std::string& word) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--benchmark_filter=", 0) == 0 && arg.find(word) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const ModelConfig tiny = ModelConfig::tiny();
  const ModelConfig flash = ModelConfig::flash();

  register_gemms(tiny, 384);
  register_gemms(flash, 384);  // 384 = 8 chunks of 48 rows: no padding in the oracle's linear
  register_wo_a(tiny, 384);
  register_wo_a(flash, 384);
  for (const ModelConfig* cfg : {&tiny, &flash}) {
    register_compressor(*cfg, 4, CompressorKind::main, 1024);
    register_compressor(*cfg, 4, CompressorKind::indexer, 1024);
    register_compressor(*cfg, 128, CompressorKind::main, 1024);
    register_indexer_scores(*cfg, 2048);
    register_sparse_mqa(*cfg, 1024);
  }
  for (int ratio : {0, 4, 128}) {
    register_layer_prefill("TinyLayer/prefill/ratio" + std::to_string(ratio) + "/s1024", tiny, ratio, 1024);
    register_layer_decode("TinyLayer/decode/ratio" + std::to_string(ratio) + "/after1024", tiny, ratio, 1000, 16);
  }
  if (filter_names(argc, argv, "FlashLayer")) {
    register_layer_prefill("FlashLayer/prefill/ratio4/s4096/official", flash, 4, 4096);
  }

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
