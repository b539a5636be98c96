// The layer's results do not depend on the OpenMP thread count, nor on the run: a tiny layer's
// prefill and decodes with 1 thread, with 2 threads, and again, are bitwise identical.
#include <doctest/doctest.h>
#include <omp.h>

#include <string>
#include <vector>

#include "reference/kv_cache.h"
#include "reference/layer.h"
#include "reference/tests/layer_test_support.h"

namespace dsv4::ref {
namespace {

using testing::Call;
using testing::check_same_outputs;
using testing::random_tokens;
using testing::run_calls;

// Prefill 37 tokens, a chunk of 20, 6 decodes, a chunk across position 128, with `threads` OpenMP threads.
std::vector<Call> run_with_threads(const AttentionLayer& layer, const Mat& x, int threads) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  auto cache = make_paged_cache(layer.config(), layer.compress_ratio(), 1, 3);
  std::vector<Call> calls = run_calls(layer, x, {0, 37, 57, 58, 59, 60, 61, 62, 63, 140}, *cache, 0);
  omp_set_num_threads(before);
  return calls;
}

TEST_CASE("one thread and two threads and a second run give bitwise identical outputs") {
  const ModelConfig cfg = ModelConfig::tiny();
  for (int ratio : {0, 4, 128}) {
    CAPTURE(ratio);
    const AttentionLayer layer(cfg, AttentionWeights::random(cfg, ratio, 17), PrecisionPolicy::official());
    const Mat x = random_tokens(cfg.dim, 140, 18);
    const std::vector<Call> one = run_with_threads(layer, x, 1);
    const std::vector<Call> two = run_with_threads(layer, x, 2);
    const std::vector<Call> again = run_with_threads(layer, x, 2);
    REQUIRE(one.size() == two.size());
    for (size_t c = 0; c < one.size(); ++c) {
      check_same_outputs(one[c].out, two[c].out, "1 vs 2 threads, call " + std::to_string(c));
      check_same_outputs(two[c].out, again[c].out, "second run, call " + std::to_string(c));
    }
  }
}

}  // namespace
}  // namespace dsv4::ref
