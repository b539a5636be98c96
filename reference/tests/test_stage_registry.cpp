// The stage registry (reference/stage_registry.h): one row per Stage in enum order, and the row's
// fields agree with each other and with what AttentionLayer::forward fills.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "reference/config.h"
#include "reference/kv_cache.h"
#include "reference/layer.h"
#include "reference/stage_registry.h"
#include "reference/weights.h"

using namespace dsv4::ref;

TEST_CASE("registry rows are in enum order, named once, and consistent") {
  std::set<std::string_view> names;
  int i = 0;
  for (const StageDef& s : stages()) {
    INFO(s.name);
    CHECK(static_cast<int>(s.id) == i++);
    CHECK(&stage(s.id) == &s);
    CHECK(find_stage(s.name) == &s);
    CHECK(names.insert(s.name).second);
    const bool input = s.name == "x" || s.is_cache();
    CHECK(s.is_compared() == !input);
    CHECK((s.entry == StageEntry::none) == input);
    CHECK((s.dense_result != nullptr) + (s.index_result != nullptr) == (input ? 0 : 1));
    CHECK((s.index_result != nullptr) == s.is_index());
    CHECK((s.comparison == Comparison::index_set) == s.is_index());
    CHECK((s.comparison == Comparison::index_set) == s.tie_scores.has_value());
    CHECK((s.comparison == Comparison::dense_state) ==
          (!s.is_cache() && s.name.find("state_") != std::string_view::npos));
    CHECK((s.held == Held::index) == s.is_index());
  }
  CHECK(stages().size() == 26);
  CHECK(find_stage("foo") == nullptr);
  CHECK(is_stage_group("indexer"));
  CHECK(is_stage_group("indexer/compressor"));
  CHECK_FALSE(is_stage_group("indexer/q"));
}

TEST_CASE("every computed stage of a layer's ratio is a non-empty result of forward, and only those") {
  const ModelConfig cfg = ModelConfig::tiny();
  for (int ratio : {0, 4, 128}) {
    INFO("ratio ", ratio);
    const AttentionLayer layer(cfg, AttentionWeights::random(cfg, ratio, 11), PrecisionPolicy::official());
    auto cache = make_ring_cache(cfg, ratio, 1);
    const int64_t s = 2 * (ratio == 0 ? 4 : ratio) + 1;  // completes two entries
    Mat x = Mat::Random(s, cfg.dim);
    const StageOutputs o = layer.forward(x, 0, *cache, 0);
    for (const StageDef& st : stages()) {
      if (!st.is_compared()) continue;
      INFO(st.name);
      const bool filled = st.dense_result ? st.dense_result(o)->size() > 0 : st.index_result(o)->size() > 0;
      CHECK(filled == in_scope(st.scope, ratio));
    }
  }
}
