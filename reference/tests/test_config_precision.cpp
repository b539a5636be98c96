// Model configurations against DeepSeek's published configurations (docs/math.md), validate()'s rules one by one, and
// the named precision policies.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include "reference/config.h"
#include "reference/precision.h"

using namespace dsv4::ref;

namespace {

int count(const std::vector<int>& v, int x) { return static_cast<int>(std::count(v.begin(), v.end(), x)); }

// The message of the std::invalid_argument that validate() throws ("" when it accepts).
std::string validation_error(const ModelConfig& c) {
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("flash: the values of DeepSeek's config") {
  const ModelConfig c = ModelConfig::flash();
  CHECK(c.name == "flash");
  CHECK(c.dim == 4096);
  CHECK(c.n_heads == 64);
  CHECK(c.head_dim == 512);
  CHECK(c.rope_head_dim == 64);
  CHECK(c.nope_dim() == 448);
  CHECK(c.q_lora_rank == 1024);
  CHECK(c.o_groups == 8);
  CHECK(c.o_lora_rank == 1024);
  CHECK(c.window_size == 128);
  CHECK(c.index_n_heads == 64);
  CHECK(c.index_head_dim == 128);
  CHECK(c.index_topk == 512);
  CHECK(c.rope_theta == 10000);
  CHECK(c.compress_rope_theta == 160000);
  CHECK(c.original_seq_len == 65536);
  CHECK(c.rope_factor == 16);
  CHECK(c.beta_fast == 32);
  CHECK(c.beta_slow == 1);
  CHECK(c.norm_eps == 1e-6);
  CHECK(c.max_seq_len == 4096);
  // 43 layers + MTP: [0, 0, 4, 128, 4, 128, ..., 4, 0]
  REQUIRE(c.compress_ratios.size() == 44);
  CHECK(count(c.compress_ratios, 0) == 3);
  CHECK(count(c.compress_ratios, 4) == 21);
  CHECK(count(c.compress_ratios, 128) == 20);
  CHECK(c.compress_ratios[0] == 0);
  CHECK(c.compress_ratios[1] == 0);
  CHECK(c.compress_ratios[2] == 4);
  CHECK(c.compress_ratios[3] == 128);
  CHECK(c.compress_ratios[41] == 128);
  CHECK(c.compress_ratios[42] == 4);
  CHECK(c.compress_ratios[43] == 0);
}

TEST_CASE("pro: the values of DeepSeek's config") {
  const ModelConfig c = ModelConfig::pro();
  CHECK(c.name == "pro");
  CHECK(c.dim == 7168);
  CHECK(c.n_heads == 128);
  CHECK(c.head_dim == 512);
  CHECK(c.rope_head_dim == 64);
  CHECK(c.q_lora_rank == 1536);
  CHECK(c.o_groups == 16);
  CHECK(c.o_lora_rank == 1024);
  CHECK(c.window_size == 128);
  CHECK(c.index_n_heads == 64);
  CHECK(c.index_head_dim == 128);
  CHECK(c.index_topk == 1024);
  CHECK(c.rope_theta == 10000);
  CHECK(c.compress_rope_theta == 160000);
  CHECK(c.original_seq_len == 65536);
  CHECK(c.rope_factor == 16);
  CHECK(c.beta_fast == 32);
  CHECK(c.beta_slow == 1);
  CHECK(c.norm_eps == 1e-6);
  CHECK(c.max_seq_len == 4096);
  // 61 layers + MTP: [128, 128, 4, 128, ..., 4, 0]
  REQUIRE(c.compress_ratios.size() == 62);
  CHECK(count(c.compress_ratios, 128) == 31);
  CHECK(count(c.compress_ratios, 4) == 30);
  CHECK(count(c.compress_ratios, 0) == 1);
  CHECK(c.compress_ratios[0] == 128);
  CHECK(c.compress_ratios[1] == 128);
  CHECK(c.compress_ratios[2] == 4);
  CHECK(c.compress_ratios[3] == 128);
  CHECK(c.compress_ratios[60] == 4);
  CHECK(c.compress_ratios[61] == 0);
}

TEST_CASE("tiny: small dims with V4's structure") {
  const ModelConfig c = ModelConfig::tiny();
  CHECK(c.name == "tiny");
  CHECK(c.dim == 256);
  CHECK(c.n_heads == 4);
  CHECK(c.head_dim == 128);
  CHECK(c.nope_dim() == 64);
  CHECK(c.rope_head_dim == 64);
  CHECK(c.q_lora_rank == 128);
  CHECK(c.o_groups == 2);
  CHECK(c.o_lora_rank == 64);
  CHECK(c.window_size == 16);
  CHECK(c.index_n_heads == 4);
  CHECK(c.index_head_dim == 128);
  CHECK(c.index_topk == 8);
  CHECK(c.max_seq_len == 1024);
  CHECK(c.norm_eps == 1e-6);
  CHECK(c.compress_ratios == std::vector<int>{0, 4, 128, 0});
  const ModelConfig f = ModelConfig::flash();
  CHECK(c.rope_theta == f.rope_theta);
  CHECK(c.compress_rope_theta == f.compress_rope_theta);
  CHECK(c.original_seq_len == f.original_seq_len);
  CHECK(c.rope_factor == f.rope_factor);
  CHECK(c.beta_fast == f.beta_fast);
  CHECK(c.beta_slow == f.beta_slow);
}

TEST_CASE("by_name and validate() accept the three configs") {
  for (const std::string name : {"flash", "pro", "tiny"}) {
    CAPTURE(name);
    const ModelConfig c = ModelConfig::by_name(name);
    CHECK(c.name == name);
    CHECK(validation_error(c) == "");
  }
  CHECK_THROWS_AS(ModelConfig::by_name("v3"), std::invalid_argument);
}

TEST_CASE("validate() rejects each broken rule, naming the field and the value") {
  struct Case {
    const char* what;
    std::function<void(ModelConfig&)> mutate;
    std::string field;  // must appear in the message, with the value
    std::string value;
  };
  const Case cases[] = {
      {"dim not positive", [](ModelConfig& c) { c.dim = 0; }, "dim", "0"},
      {"dim not a multiple of 128 (wq_a, wkv input)", [](ModelConfig& c) { c.dim = 192; }, "dim", "192"},
      {"n_heads negative", [](ModelConfig& c) { c.n_heads = -4; }, "n_heads", "-4"},
      {"head_dim not positive", [](ModelConfig& c) { c.head_dim = 0; }, "head_dim", "0"},
      {"rope_head_dim odd", [](ModelConfig& c) { c.rope_head_dim = 63; }, "rope_head_dim", "63"},
      {"rope_head_dim == head_dim", [](ModelConfig& c) { c.rope_head_dim = 128; }, "rope_head_dim", "128"},
      {"nope dims not a multiple of 64", [](ModelConfig& c) { c.rope_head_dim = 32; }, "head_dim - rope_head_dim",
       "96"},
      {"q_lora_rank not a multiple of 128", [](ModelConfig& c) { c.q_lora_rank = 96; }, "q_lora_rank", "96"},
      {"o_groups not dividing n_heads", [](ModelConfig& c) { c.o_groups = 3; }, "n_heads", "4"},
      {"o_groups * o_lora_rank not a multiple of 128", [](ModelConfig& c) { c.o_lora_rank = 32; },
       "o_groups * o_lora_rank", "64"},
      {"o_lora_rank not positive", [](ModelConfig& c) { c.o_lora_rank = 0; }, "o_lora_rank", "0"},
      {"window_size 0", [](ModelConfig& c) { c.window_size = 0; }, "window_size", "0"},
      {"index_topk 0", [](ModelConfig& c) { c.index_topk = 0; }, "index_topk", "0"},
      {"index_n_heads 0", [](ModelConfig& c) { c.index_n_heads = 0; }, "index_n_heads", "0"},
      {"index_head_dim not a power of two", [](ModelConfig& c) { c.index_head_dim = 96; }, "index_head_dim", "96"},
      {"index_head_dim not a multiple of 32",
       [](ModelConfig& c) {
         c.index_head_dim = 16;
         c.rope_head_dim = 16;
         c.head_dim = 80;
       },
       "index_head_dim", "16"},
      {"index_head_dim below rope_head_dim", [](ModelConfig& c) { c.index_head_dim = 32; }, "index_head_dim", "32"},
      {"max_seq_len not a multiple of 128", [](ModelConfig& c) { c.max_seq_len = 1000; }, "max_seq_len", "1000"},
      {"norm_eps 0", [](ModelConfig& c) { c.norm_eps = 0; }, "norm_eps", "0"},
      {"rope_theta 0", [](ModelConfig& c) { c.rope_theta = 0; }, "rope_theta", "0"},
      {"beta_fast below beta_slow", [](ModelConfig& c) { c.beta_fast = 0.5; }, "beta_fast", "0.5"},
      {"no layers", [](ModelConfig& c) { c.compress_ratios.clear(); }, "compress_ratios.size()", "0"},
      {"compress ratio 8", [](ModelConfig& c) { c.compress_ratios[2] = 8; }, "compress_ratios[2]", "8"},
  };
  for (const Case& k : cases) {
    CAPTURE(k.what);
    ModelConfig c = ModelConfig::tiny();
    k.mutate(c);
    const std::string msg = validation_error(c);
    CAPTURE(msg);
    CHECK(msg.find("'tiny'") != std::string::npos);
    CHECK(msg.find(k.field + " = " + k.value) != std::string::npos);
    CHECK(msg.find("must") != std::string::npos);  // the rule follows
  }
  // wo_a is a bf16 linear: the width of one output group, n_heads * head_dim / o_groups, needs no
  // 1x128 blocks. head_dim 192 (nope 128 + rope 64) with one head per group makes it 192.
  ModelConfig c = ModelConfig::tiny();
  c.head_dim = 192;
  c.o_groups = 4;
  c.o_lora_rank = 32;  // wo_b reads 4 * 32 = 128
  CHECK(c.n_heads * c.head_dim / c.o_groups % 128 != 0);
  CHECK(validation_error(c) == "");
}

TEST_CASE("precision: exact and official") {
  const PrecisionPolicy e = PrecisionPolicy::exact();
  CHECK(e.name == "exact");
  CHECK(e.activations == Storage::fp64);
  CHECK(e.fp32_tensors == Storage::fp64);
  CHECK(e.fp8_linears == LinearKind::exact);
  CHECK(!e.kv_nope);
  CHECK(!e.indexer_qk);
  CHECK(e.indexer_hadamard);
  CHECK(e.indexer_scores == Storage::fp64);
  CHECK(e.attn_probs == Storage::fp64);
  CHECK(!e.attn_online_blocks);

  const PrecisionPolicy o = PrecisionPolicy::official();
  CHECK(o.name == "official");
  CHECK(o.activations == Storage::bf16);
  CHECK(o.fp32_tensors == Storage::fp32);
  CHECK(o.fp8_linears == LinearKind::fp8_block128);
  REQUIRE(o.kv_nope);
  CHECK(*o.kv_nope == BlockFormat{Element::e4m3, 64, ScaleRule::ue8m0_ceil});
  REQUIRE(o.indexer_qk);
  CHECK(*o.indexer_qk == BlockFormat{Element::e2m1, 32, ScaleRule::ue8m0_ceil});
  CHECK(o.indexer_hadamard);
  CHECK(o.indexer_scores == Storage::bf16);
  CHECK(o.attn_probs == Storage::bf16);
  CHECK(o.attn_online_blocks);
}

TEST_CASE("precision: the named alternatives differ from official exactly where their names say") {
  const PrecisionPolicy o = PrecisionPolicy::official();
  // Everything but name, indexer_qk, indexer_hadamard and kv_nope equals official.
  const auto like_official = [&](const PrecisionPolicy& p) {
    return p.activations == o.activations && p.fp32_tensors == o.fp32_tensors && p.fp8_linears == o.fp8_linears &&
           p.indexer_scores == o.indexer_scores && p.attn_probs == o.attn_probs &&
           p.attn_online_blocks == o.attn_online_blocks;
  };
  const BlockFormat fp8_head{Element::e4m3, 128, ScaleRule::ue8m0_ceil};
  const BlockFormat fp4{Element::e2m1, 32, ScaleRule::ue8m0_ceil};
  const BlockFormat mx{Element::e2m1, 32, ScaleRule::e8m0_floor};
  const BlockFormat nv{Element::e2m1, 16, ScaleRule::nvfp4_e4m3};
  struct Expect {
    const char* name;
    std::optional<BlockFormat> indexer_qk;
    bool hadamard;
    bool kv_quant;
  };
  const Expect expected[] = {{"fp8-indexer", fp8_head, true, true},
                             {"fp8-indexer-no-hadamard", fp8_head, false, true},
                             {"fp4-indexer-no-hadamard", fp4, false, true},
                             {"no-kv-quant", fp4, true, false},
                             {"mxfp4-indexer", mx, true, true},
                             {"nvfp4-indexer", nv, true, true}};
  for (const Expect& x : expected) {
    CAPTURE(x.name);
    const PrecisionPolicy p = PrecisionPolicy::by_name(x.name);
    CHECK(like_official(p));
    CHECK(p.indexer_qk == x.indexer_qk);
    CHECK(p.indexer_hadamard == x.hadamard);
    CHECK(p.kv_nope.has_value() == x.kv_quant);
    if (x.kv_quant) CHECK(*p.kv_nope == *o.kv_nope);
  }

  for (auto [name, s] : {std::pair{"bf16", Storage::bf16}, {"fp32", Storage::fp32}}) {
    CAPTURE(name);
    const PrecisionPolicy p = PrecisionPolicy::by_name(name);
    CHECK(p.activations == s);
    CHECK(p.fp32_tensors == s);
    CHECK(p.indexer_scores == s);
    CHECK(p.attn_probs == s);
    CHECK(p.fp8_linears == LinearKind::exact);
    CHECK(!p.kv_nope);
    CHECK(!p.indexer_qk);
  }
}

TEST_CASE("precision: the one-switch policies differ from official in that switch alone") {
  const PrecisionPolicy o = PrecisionPolicy::official();
  const std::pair<const char*, const char*> expected[] = {
      {"fp32-probs", "attn_probs=fp32 (official: bf16)"},
      {"fp32-indexer-scores", "indexer_scores=fp32 (official: bf16)"},
      {"fp4-indexer-keys-only", "indexer_qk=e2m1/b32/ue8m0(keys-only) (official: e2m1/b32/ue8m0)"},
      {"fp8-indexer-keys-only", "indexer_qk=e4m3/b128/ue8m0(keys-only) (official: e2m1/b32/ue8m0)"}};
  for (const auto& [name, differences] : expected) {
    CAPTURE(name);
    const PrecisionPolicy p = PrecisionPolicy::by_name(name);
    CHECK(p.differences_from(o) == differences);
    CHECK(p.indexer_q_quant == (std::string(name).find("keys-only") == std::string::npos));
  }
  // Against its FP8 parent, the FP8 keys-only policy leaves only the query unquantized.
  CHECK(PrecisionPolicy::by_name("fp8-indexer-keys-only").differences_from(PrecisionPolicy::by_name("fp8-indexer")) ==
        "indexer_qk=e4m3/b128/ue8m0(keys-only) (fp8-indexer: e4m3/b128/ue8m0)");
  CHECK(o.differences_from(o) == "none");
  CHECK(PrecisionPolicy::by_name("no-kv-quant").differences_from(o) == "kv_nope=none (official: e4m3/b64/ue8m0)");
}

TEST_CASE("precision: adding policies leaves every earlier named policy's switches as they were") {
  // The switches of the policies named before the one-switch policies were added, written out: a
  // stage reads only switches, so the same switches give the same results bit for bit. Every
  // earlier policy quantizes the indexer q with its keys (the switch added with the keys-only ones).
  const std::pair<const char*, const char*> earlier[] = {
      {"exact",
       "activations=fp64 fp32_tensors=fp64 fp8_linears=exact kv_nope=none indexer_qk=none "
       "indexer_hadamard=on indexer_scores=fp64 attn_probs=fp64 attn_online_blocks=off"},
      {"official",
       "activations=bf16 fp32_tensors=fp32 fp8_linears=fp8_block128 kv_nope=e4m3/b64/ue8m0 "
       "indexer_qk=e2m1/b32/ue8m0 indexer_hadamard=on indexer_scores=bf16 attn_probs=bf16 "
       "attn_online_blocks=on"},
      {"fp8-indexer",
       "activations=bf16 fp32_tensors=fp32 fp8_linears=fp8_block128 kv_nope=e4m3/b64/ue8m0 "
       "indexer_qk=e4m3/b128/ue8m0 indexer_hadamard=on indexer_scores=bf16 attn_probs=bf16 "
       "attn_online_blocks=on"},
      {"fp8-indexer-no-hadamard",
       "activations=bf16 fp32_tensors=fp32 fp8_linears=fp8_block128 "
       "kv_nope=e4m3/b64/ue8m0 indexer_qk=e4m3/b128/ue8m0 indexer_hadamard=off "
       "indexer_scores=bf16 attn_probs=bf16 attn_online_blocks=on"},
      {"fp4-indexer-no-hadamard",
       "activations=bf16 fp32_tensors=fp32 fp8_linears=fp8_block128 "
       "kv_nope=e4m3/b64/ue8m0 indexer_qk=e2m1/b32/ue8m0 indexer_hadamard=off "
       "indexer_scores=bf16 attn_probs=bf16 attn_online_blocks=on"},
      {"no-kv-quant",
       "activations=bf16 fp32_tensors=fp32 fp8_linears=fp8_block128 kv_nope=none "
       "indexer_qk=e2m1/b32/ue8m0 indexer_hadamard=on indexer_scores=bf16 attn_probs=bf16 "
       "attn_online_blocks=on"},
      {"bf16",
       "activations=bf16 fp32_tensors=bf16 fp8_linears=exact kv_nope=none indexer_qk=none "
       "indexer_hadamard=on indexer_scores=bf16 attn_probs=bf16 attn_online_blocks=on"},
      {"fp32",
       "activations=fp32 fp32_tensors=fp32 fp8_linears=exact kv_nope=none indexer_qk=none "
       "indexer_hadamard=on indexer_scores=fp32 attn_probs=fp32 attn_online_blocks=on"},
      {"mxfp4-indexer",
       "activations=bf16 fp32_tensors=fp32 fp8_linears=fp8_block128 kv_nope=e4m3/b64/ue8m0 "
       "indexer_qk=e2m1/b32/e8m0-floor indexer_hadamard=on indexer_scores=bf16 attn_probs=bf16 "
       "attn_online_blocks=on"},
      {"nvfp4-indexer",
       "activations=bf16 fp32_tensors=fp32 fp8_linears=fp8_block128 kv_nope=e4m3/b64/ue8m0 "
       "indexer_qk=e2m1/b16/nvfp4-e4m3 indexer_hadamard=on indexer_scores=bf16 attn_probs=bf16 "
       "attn_online_blocks=on"}};
  const std::vector<PrecisionPolicy> all = PrecisionPolicy::all_named();
  REQUIRE(all.size() >= std::size(earlier));
  for (size_t i = 0; i < std::size(earlier); ++i) {
    CAPTURE(earlier[i].first);
    CHECK(all[i].name == earlier[i].first);  // the earlier policies keep their places in the list
    CHECK(all[i].describe() == std::string(earlier[i].first) + ": " + earlier[i].second);
    CHECK(all[i].indexer_q_quant);
  }
}

TEST_CASE("precision: every named policy round-trips by name, unknown names throw listing them") {
  const std::vector<PrecisionPolicy> all = PrecisionPolicy::all_named();
  const std::vector<std::string> names = {"exact",
                                          "official",
                                          "fp8-indexer",
                                          "fp8-indexer-no-hadamard",
                                          "fp4-indexer-no-hadamard",
                                          "no-kv-quant",
                                          "bf16",
                                          "fp32",
                                          "mxfp4-indexer",
                                          "nvfp4-indexer",
                                          "fp32-probs",
                                          "fp32-indexer-scores",
                                          "fp8-indexer-keys-only",
                                          "fp4-indexer-keys-only"};
  REQUIRE(all.size() == names.size());
  std::set<std::string> descriptions;
  for (size_t i = 0; i < all.size(); ++i) {
    CAPTURE(names[i]);
    CHECK(all[i].name == names[i]);
    CHECK(PrecisionPolicy::by_name(names[i]).name == names[i]);
    descriptions.insert(all[i].describe().substr(all[i].name.size()));  // the switches only
  }
  CHECK(descriptions.size() == all.size());  // no two policies are the same switches

  CHECK(PrecisionPolicy::official().describe() ==
        "official: activations=bf16 fp32_tensors=fp32 fp8_linears=fp8_block128 kv_nope=e4m3/b64/ue8m0 "
        "indexer_qk=e2m1/b32/ue8m0 indexer_hadamard=on indexer_scores=bf16 attn_probs=bf16 "
        "attn_online_blocks=on");
  try {
    PrecisionPolicy::by_name("fp16");
    FAIL("by_name accepted an unknown name");
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    CHECK(msg.find("'fp16'") != std::string::npos);
    for (const std::string& n : names) CHECK(msg.find(n) != std::string::npos);
  }
}

TEST_CASE("precision: <named>-no-hadamard is the named policy without the rotation, where it means something") {
  const PrecisionPolicy nv = PrecisionPolicy::by_name("nvfp4-indexer-no-hadamard");
  CHECK(nv.name == "nvfp4-indexer-no-hadamard");
  CHECK(nv.differences_from(PrecisionPolicy::by_name("nvfp4-indexer")) == "indexer_hadamard=off (nvfp4-indexer: on)");
  const PrecisionPolicy keys = PrecisionPolicy::by_name("fp8-indexer-keys-only-no-hadamard");
  CHECK(!keys.indexer_hadamard);
  CHECK(!keys.indexer_q_quant);
  // A variant that is a named policy is refused with its name; so is a policy whose indexer q/k are
  // not quantized (the rotation is there for the block quantization) and an unknown base.
  CHECK_THROWS_WITH_AS(PrecisionPolicy::by_name("official-no-hadamard"), doctest::Contains("fp4-indexer-no-hadamard"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(PrecisionPolicy::by_name("fp8-indexer-no-hadamard-no-hadamard"), doctest::Contains("unknown"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(PrecisionPolicy::by_name("bf16-no-hadamard"), doctest::Contains("unknown"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(PrecisionPolicy::by_name("fp6-no-hadamard"), doctest::Contains("unknown"),
                       std::invalid_argument);
}
