// The stage and weight tables against capture-format.md: the exact list of names, and shapes and
// index-space sizes computed by hand from the spec's formulas for prefill, decode and chunked calls.
#include <doctest/doctest.h>

#include <algorithm>

#include "reference/stage_registry.h"
#include "synthetic_capture.h"
#include "verify/capture/weight_names.h"

using namespace dsv4::verify;
namespace ref = dsv4::ref;
using Shape = std::vector<int64_t>;

namespace {
Shape stage_shape(const std::string& name, const ref::CallGeometry& g) {
  const ref::StageDef* s = ref::find_stage(name);
  REQUIRE(s != nullptr);
  return s->shape(g);
}
Shape weight_shape(const std::string& name, const dsv4::ref::ModelConfig& cfg, int ratio) {
  const WeightName* w = find_weight(name);
  REQUIRE(w != nullptr);
  return w->shape(cfg, ratio);
}
}  // namespace

TEST_CASE("stage table: exactly the datasets of capture-format.md, each once") {
  const std::vector<std::string> spec{"x",
                                      "q_latent",
                                      "q",
                                      "kv",
                                      "compressor/entries",
                                      "compressor/state_kv",
                                      "compressor/state_score",
                                      "indexer/q",
                                      "indexer/weights",
                                      "indexer/compressor/entries",
                                      "indexer/compressor/state_kv",
                                      "indexer/compressor/state_score",
                                      "indexer/scores",
                                      "indexer/topk",
                                      "topk_idxs",
                                      "attn/core",
                                      "attn/out_heads",
                                      "attn/wo_a",
                                      "out",
                                      "cache/window_kv",
                                      "cache/compressed_kv",
                                      "cache/indexer_kv",
                                      "cache/compressor_state_kv",
                                      "cache/compressor_state_score",
                                      "cache/indexer_compressor_state_kv",
                                      "cache/indexer_compressor_state_score"};
  std::vector<std::string> table;
  for (const ref::StageDef& s : ref::stages()) table.emplace_back(s.name);
  CHECK(table == spec);
  std::vector<std::string> index, minus_inf;
  for (const ref::StageDef& s : ref::stages()) {
    if (s.is_index()) index.emplace_back(s.name);
    if (s.values == ref::StageValues::finite_or_minus_inf) minus_inf.emplace_back(s.name);
  }
  CHECK(index == std::vector<std::string>{"indexer/topk", "topk_idxs"});
  CHECK(minus_inf == std::vector<std::string>{"compressor/state_score", "indexer/compressor/state_score",
                                              "indexer/scores", "cache/compressor_state_score",
                                              "cache/indexer_compressor_state_score"});
  CHECK(ref::is_stage_group("indexer"));
  CHECK(ref::is_stage_group("indexer/compressor"));
  CHECK(ref::is_stage_group("cache"));
  CHECK_FALSE(ref::is_stage_group("indexer/q"));
  CHECK_FALSE(ref::is_stage_group("attn/core"));
  CHECK(ref::find_stage("foo") == nullptr);
}

TEST_CASE("weight table: the 18 weights of capture-format.md with spec 2.1's linear kinds") {
  std::vector<std::pair<std::string, std::string>> table;
  for (const WeightName& w : weight_names()) table.emplace_back(w.name, w.linear);
  const std::vector<std::pair<std::string, std::string>> spec{{"wq_a", "fp8"},
                                                              {"q_norm", ""},
                                                              {"wq_b", "fp8"},
                                                              {"wkv", "fp8"},
                                                              {"kv_norm", ""},
                                                              {"attn_sink", ""},
                                                              {"wo_a", "bf16"},
                                                              {"wo_b", "fp8"},
                                                              {"compressor/wkv", "fp32"},
                                                              {"compressor/wgate", "fp32"},
                                                              {"compressor/ape", ""},
                                                              {"compressor/norm", ""},
                                                              {"indexer/wq_b", "fp8"},
                                                              {"indexer/weights_proj", "bf16"},
                                                              {"indexer/compressor/wkv", "fp32"},
                                                              {"indexer/compressor/wgate", "fp32"},
                                                              {"indexer/compressor/ape", ""},
                                                              {"indexer/compressor/norm", ""}};
  CHECK(table == spec);
}

TEST_CASE("weight shapes: Flash values of the checkpoint (docs/capture-format.md)") {
  const auto flash = dsv4::ref::ModelConfig::flash();
  CHECK(weight_shape("wq_a", flash, 4) == Shape{1024, 4096});
  CHECK(weight_shape("wq_b", flash, 4) == Shape{32768, 1024});
  CHECK(weight_shape("wkv", flash, 4) == Shape{512, 4096});
  CHECK(weight_shape("wo_a", flash, 4) == Shape{8192, 4096});  // 8 groups x 1024 rows, 8 heads x 512 cols
  CHECK(weight_shape("wo_b", flash, 4) == Shape{4096, 8192});
  CHECK(weight_shape("attn_sink", flash, 0) == Shape{64});
  CHECK(weight_shape("compressor/wkv", flash, 4) == Shape{1024, 4096});
  CHECK(weight_shape("compressor/ape", flash, 4) == Shape{4, 1024});
  CHECK(weight_shape("compressor/wkv", flash, 128) == Shape{512, 4096});
  CHECK(weight_shape("compressor/ape", flash, 128) == Shape{128, 512});
  CHECK(weight_shape("indexer/wq_b", flash, 4) == Shape{8192, 1024});
  CHECK(weight_shape("indexer/weights_proj", flash, 4) == Shape{64, 4096});
  CHECK(weight_shape("indexer/compressor/wkv", flash, 4) == Shape{256, 4096});
  CHECK(weight_shape("indexer/compressor/ape", flash, 4) == Shape{4, 256});
  CHECK(weight_shape("indexer/compressor/norm", flash, 4) == Shape{128});
}

TEST_CASE("call geometry: entries, index widths and kv rows, worked by hand") {
  const auto cfg = testing::micro_config();  // W 8, index_topk 4
  struct Row {
    int ratio;
    int64_t start_pos, seqlen;
    int64_t n_new, n_before, n_visible, k, window, K, kv_rows;
  };
  const Row rows[] = {
      // ratio 4 prefill of 10: entries 0,1 complete (tokens 3, 7); k = min(4, 10/4) = 2;
      // window min(10, 8) = 8; kv = 10 fresh rows + 2 entries.
      {4, 0, 10, 2, 0, 2, 2, 8, 10, 12},
      // decode at 10: no block completes (11/4 = 10/4 = 2); kv = ring 8 + 2 entries.
      {4, 10, 1, 0, 2, 2, 2, 8, 10, 10},
      // decode at 11 completes entry 2 (token 11 = 2*4+3).
      {4, 11, 1, 1, 2, 3, 3, 8, 11, 11},
      // chunked 11..16: entries 2, 3 complete; k = min(4, 17/4) = 4; kv = ring 8 + fresh 6 + 4 entries.
      {4, 11, 6, 2, 2, 4, 4, 8, 12, 18},
      // ratio 128 prefill of 130: entry 0 completes; K = window 8 + 1 entry.
      {128, 0, 130, 1, 0, 32, 4, 8, 9, 131},
      // ratio 128 decode at 255 completes entry 1; both entries are attended.
      {128, 255, 1, 1, 1, 64, 4, 8, 10, 10},
      // ratio 0: window only; prefill of 3 has width 3.
      {0, 0, 3, 0, 0, 0, 0, 3, 3, 3},
      {0, 20, 1, 0, 0, 5, 4, 8, 8, 8},
      {0, 5, 4, 0, 0, 2, 2, 8, 8, 12},
  };
  for (const Row& r : rows) {
    CAPTURE(r.ratio);
    CAPTURE(r.start_pos);
    CAPTURE(r.seqlen);
    ref::CallGeometry g{&cfg, r.ratio, 1, r.seqlen, r.start_pos};
    if (r.ratio != 0) {
      CHECK(g.new_entries(r.ratio) == r.n_new);
      CHECK(g.entries_before(r.ratio) == r.n_before);
    }
    CHECK(g.indexer_visible() == r.n_visible);
    CHECK(g.indexer_topk() == r.k);
    CHECK(g.window_width() == r.window);
    CHECK(g.topk_width() == r.K);
    CHECK(g.kv_rows() == r.kv_rows);
  }
  // Flash: a 4096-token prefill on a CSA layer selects 512 of 1024 visible entries.
  const auto flash = dsv4::ref::ModelConfig::flash();
  ref::CallGeometry g{&flash, 4, 1, 4096, 0};
  CHECK(g.indexer_topk() == 512);
  CHECK(g.topk_width() == 128 + 512);
}

TEST_CASE("stage shapes: micro config, ratio 4 prefill of 10 tokens, batch 2") {
  const auto cfg = testing::micro_config();  // dim 128, H 2, d 128, q_lora 128, G 2 x 64, IH 2 x ID 64
  ref::CallGeometry g{&cfg, 4, 2, 10, 0};
  CHECK(stage_shape("x", g) == Shape{2, 10, 128});
  CHECK(stage_shape("q", g) == Shape{2, 10, 2, 128});
  CHECK(stage_shape("compressor/entries", g) == Shape{2, 2, 128});
  CHECK(stage_shape("compressor/state_kv", g) == Shape{2, 8, 256});  // coff*r = 8, coff*d = 256
  CHECK(stage_shape("indexer/q", g) == Shape{2, 10, 2, 64});
  CHECK(stage_shape("indexer/weights", g) == Shape{2, 10, 2});
  CHECK(stage_shape("indexer/compressor/state_score", g) == Shape{2, 8, 128});
  CHECK(stage_shape("indexer/scores", g) == Shape{2, 10, 2});
  CHECK(stage_shape("indexer/topk", g) == Shape{2, 10, 2});
  CHECK(stage_shape("topk_idxs", g) == Shape{2, 10, 10});
  CHECK(stage_shape("attn/wo_a", g) == Shape{2, 10, 2, 64});
  CHECK(stage_shape("cache/window_kv", g) == Shape{2, 8, 128});
  CHECK(stage_shape("cache/compressed_kv", g) == Shape{2, 0, 128});
  ref::CallGeometry hca{&cfg, 128, 1, 1, 200};
  CHECK(stage_shape("compressor/state_kv", hca) == Shape{1, 128, 128});
  CHECK(stage_shape("cache/compressed_kv", hca) == Shape{1, 1, 128});
  CHECK(stage_shape("compressor/entries", hca) == Shape{1, 0, 128});
  CHECK(ref::in_scope(ref::find_stage("compressor/entries")->scope, 128));
  CHECK_FALSE(ref::in_scope(ref::find_stage("compressor/entries")->scope, 0));
  CHECK_FALSE(ref::in_scope(ref::find_stage("indexer/topk")->scope, 128));
}
