// Mutation tests (docs/math.md "Numerics variants"): for each bug class kernels have in the field, a
// capture made by the oracle with that bug injected at one stage (synth's MutatedStages) must fail
// first at that stage, in stage-local and in chained replay, and the replay's diagnosis must name
// the bug; the clean capture must pass every stage in both modes. Tiny dims here; Flash dims in
// the "slow" suite.

#include <doctest/doctest.h>

#include <bit>
#include <map>
#include <optional>
#include <string>

#include "reference/mutation.h"
#include "reference/stage_registry.h"
#include "verify/replay/diagnose.h"
#include "verify/replay/replay.h"
#include "verify/replay/synth.h"

using namespace dsv4::verify;
namespace ref = dsv4::ref;

namespace {

struct Dims {
  const char* name;    // the captures' cache key
  const char* config;  // SynthOptions::config
  std::vector<int> ratios;
  std::vector<int64_t> calls;
  int batch;
};

// Tiny: one CSA layer (ratio 4: every stage there is but the HCA compressor's, which is the same
// code with r = 128), a 13-token prefill (3 C4 entries) then 3 decodes (the one at 15 completes
// entry 3). Flash: one CSA layer, an 8-token prefill (2 entries) and a decode.
const Dims kTiny{"tiny", "tiny", {4}, {13, 1, 1, 1}, 2};
const Dims kTinyEveryRatio{"tiny-every-ratio", "tiny", {0, 4, 128}, {13, 1, 1, 1}, 2};
const Dims kFlash{"flash", "flash", {4}, {8, 1}, 1};

Capture synthesize(const Dims& dims, std::optional<ref::Mutation> m, bool quantization_edges) {
  SynthOptions o;
  o.config = dims.config;
  o.ratios = dims.ratios;
  o.calls = dims.calls;
  o.batch = dims.batch;
  o.seed = 3;
  o.mutation = m;
  o.quantization_edges = quantization_edges;
  return synthesize_capture(o);
}

// The captures of the cases, made once: the clean one of each (dims, edges), and the latest
// mutated one (a mutation's two cases run one after the other). Flash captures take seconds.
const Capture& make_capture(const Dims& dims, std::optional<ref::Mutation> m, bool quantization_edges) {
  static std::map<std::pair<std::string, bool>, Capture> clean;
  static std::optional<std::pair<std::string, Capture>> last_mutated;
  if (!m) {
    const auto key = std::pair{std::string(dims.name), quantization_edges};
    auto it = clean.find(key);
    if (it == clean.end()) it = clean.emplace(key, synthesize(dims, std::nullopt, quantization_edges)).first;
    return it->second;
  }
  const std::string key = std::string(dims.name) + (quantization_edges ? " edges " : " ") + m->name();
  if (!last_mutated || last_mutated->first != key) last_mutated.emplace(key, synthesize(dims, m, quantization_edges));
  return last_mutated->second;
}

Report replay(const Capture& c, ReplayMode mode, bool diagnose) {
  ReplayOptions o;
  o.mode = mode;
  o.diagnose = diagnose ? DiagnoseScope::failing : DiagnoseScope::none;
  return replay_capture(c, o);
}

// The first (layer, call) where the mutated capture's dataset of the stage differs from the clean one.
std::optional<std::pair<int, int>> first_difference(const Capture& clean, const Capture& mutated,
                                                    const std::string& stage) {
  for (const auto& [index, layer] : clean.layers)
    for (const CallCapture& call : layer.calls) {
      if (!call.has(stage)) continue;
      const Tensor& a = call.stage(stage);
      const Tensor& b = mutated.layers.at(index).calls.at(call.index).stage(stage);
      for (size_t i = 0; i < a.values.size(); ++i)
        if (std::bit_cast<uint64_t>(a.values[i]) != std::bit_cast<uint64_t>(b.values[i]))
          return std::pair{index, call.index};
    }
  return std::nullopt;
}

// The diagnosis of the mutated stage, at its first differing call, reproduces the capture bit for
// bit with the injected mutation (and no variant does better).
void check_diagnosis(const Capture& clean, const Capture& mutated, const ref::Mutation& m) {
  const std::string stage(ref::stage(m.stage).name);
  const auto at = first_difference(clean, mutated, stage);
  REQUIRE_MESSAGE(at.has_value(), "the mutation changed nothing in ", stage);
  const Diagnosis d = diagnose_stage(mutated, at->first, at->second, m.stage, ref::PrecisionPolicy::official());
  INFO(d.summary());
  CHECK(d.oracle_differing > 0);
  REQUIRE_FALSE(d.trials.empty());
  CHECK(d.trials.front().reproduces());
  bool named = false;
  for (const VariantTrial& t : d.trials) named |= t.reproduces() && t.mutation == m.name();
  CHECK(named);
}

// The verdict: the first failing record of the replay is the mutated stage.
// (The diagnosis is checked by its own case, on the first differing call: not repeated here.)
void check_fails_first_at(const Capture& mutated, const ref::Mutation& m, ReplayMode mode) {
  const Report r = replay(mutated, mode, /*diagnose=*/false);
  INFO(to_string(mode), " ", m.name());
  REQUIRE(r.first_failure().has_value());
  CHECK(r.first_failure()->stage == ref::stage(m.stage).name);
}

// One bug class: the diagnosis names it, and the replay fails first at its stage in both modes.
void check_mutation(const Dims& dims, const char* name, bool quantization_edges) {
  const ref::Mutation m = ref::Mutation::parse(name);
  const Capture& clean = make_capture(dims, std::nullopt, quantization_edges);
  const Capture& mutated = make_capture(dims, m, quantization_edges);
  check_diagnosis(clean, mutated, m);
  check_fails_first_at(mutated, m, ReplayMode::stage_local);
  // Chained: a record's verdict is the stage's own error (the stage recomputed from the captured
  // inputs, docs/tolerances.md "Chained replay"), so the first failure is the same stage.
  check_fails_first_at(mutated, m, ReplayMode::chained);
}

// Probabilities not rounded to bf16, judged as a producer of another probability convention (a
// capture without the attribute probs_convention, or --probs-convention any: the tolerance row's
// bound; docs/tolerances.md "Probability flips"): every record passes in both modes, and
// `replay --diagnose` (the stages that pass without being bitwise) still names the bug.
void check_passes_as_any_convention_but_diagnosed(const Dims& dims, const char* name) {
  const ref::Mutation m = ref::Mutation::parse(name);
  const Capture& mutated = make_capture(dims, m, false);
  REQUIRE(mutated.probs_convention == "deepseek");  // synth's oracle declares it
  Capture unlabelled = mutated;
  unlabelled.probs_convention.clear();
  for (ReplayMode mode : {ReplayMode::stage_local, ReplayMode::chained}) {
    INFO(to_string(mode));
    CHECK(replay(unlabelled, mode, false).counts().failed == 0);
  }
  ReplayOptions o;
  o.diagnose = DiagnoseScope::differing;
  o.probs_convention = ProbsConvention::any;
  const Report r = replay_capture(mutated, o);
  bool named = false;
  for (const Record& rec : r.records)
    if (rec.diagnosis) {
      INFO(rec.stage, ": ", rec.diagnosis->summary());
      CHECK(rec.stage == ref::stage(m.stage).name);
      REQUIRE_FALSE(rec.diagnosis->trials.empty());
      CHECK(rec.diagnosis->trials.front().reproduces());
      for (const VariantTrial& t : rec.diagnosis->trials) named |= t.reproduces() && t.mutation == m.name();
    }
  CHECK(named);
}

}  // namespace

TEST_CASE("mutations: the clean capture (every ratio, pre-quantization datasets) passes every stage in both modes") {
  const Capture& clean = make_capture(kTinyEveryRatio, std::nullopt, false);
  for (ReplayMode mode : {ReplayMode::stage_local, ReplayMode::chained}) {
    const Report r = replay(clean, mode, true);
    CHECK_FALSE(r.first_failure().has_value());
    CHECK(r.counts().failed == 0);
  }
}

// One case per bug class of the verifier's list: the diagnosis names it (bitwise), and the
// replay's verdict fails first at its stage in both modes. The synthetic captures hold the
// pre-quantization datasets, so the quantizer bugs (rounding, floors, scales, skipped) fail at
// their stage on the quantizer's own input (docs/tolerances.md "Which bug fails where"). A few run
// in every suite (the sanitizer build too); the rest carry the label "slow" (the Release CI runs
// them, the sanitizer build does not: about 3 s each).
#define MUTATION_CASE(DIMS, NAME, WHAT, EDGES)                                                                  \
  TEST_CASE("mutation " NAME " (" WHAT ") is diagnosed as itself and fails first at its stage in both modes") { \
    check_mutation(DIMS, NAME, EDGES);                                                                          \
  }
#define ANY_CONVENTION_CASE(DIMS, NAME, WHAT)                                       \
  TEST_CASE("mutation " NAME " (" WHAT                                              \
            ") passes as a producer of any probability convention and is named by " \
            "--diagnose") {                                                         \
    check_passes_as_any_convention_but_diagnosed(DIMS, NAME);                       \
  }

MUTATION_CASE(kTiny, "kv:round-toward-zero", "FP8 truncation", false)
MUTATION_CASE(kTiny, "indexer/q:ties-toward-zero", "FP4 ties toward zero", false)
MUTATION_CASE(kTiny, "q:rope-position+1", "RoPE at t+1", false)
MUTATION_CASE(kTiny, "attn/core:sink-dropped", "sink dropped", false)
MUTATION_CASE(kTiny, "topk_idxs:index-replaced", "one index replaced", false)
MUTATION_CASE(kTiny, "q_latent:one-ulp-high", "every element one ulp high", false)
MUTATION_CASE(kTiny, "attn/core:one-ulp-high", "every element one ulp high", false)

TEST_SUITE("slow") {
  // FP8 of kv and of the main compressor's entries.
  MUTATION_CASE(kTiny, "kv:quant-skipped", "FP8 quantization skipped", false)
  MUTATION_CASE(kTiny, "kv:ties-toward-zero", "FP8 ties toward zero", false)
  MUTATION_CASE(kTiny, "kv:ue8m0-floor", "UE8M0 floor", false)
  MUTATION_CASE(kTiny, "compressor/entries:quant-skipped", "FP8 quantization skipped", false)
  MUTATION_CASE(kTiny, "compressor/entries:round-toward-zero", "FP8 truncation", false)
  MUTATION_CASE(kTiny, "compressor/entries:ties-toward-zero", "FP8 ties toward zero", false)
  // FP4 of the indexer's q and entries.
  MUTATION_CASE(kTiny, "indexer/q:quant-skipped", "FP4 quantization skipped", false)
  MUTATION_CASE(kTiny, "indexer/q:round-toward-zero", "FP4 truncation", false)
  MUTATION_CASE(kTiny, "indexer/q:amax-floor-1e-4", "FP4 amax floor 1e-4", true)
  MUTATION_CASE(kTiny, "indexer/q:ue8m0-floor", "UE8M0 floor", false)
  MUTATION_CASE(kTiny, "indexer/compressor/entries:quant-skipped", "FP4 quantization skipped", false)
  MUTATION_CASE(kTiny, "indexer/compressor/entries:ties-toward-zero", "FP4 ties toward zero", false)
  // RoPE.
  MUTATION_CASE(kTiny, "kv:rope-position+1", "RoPE at t+1", false)
  MUTATION_CASE(kTiny, "indexer/q:rope-position+1", "RoPE at t+1", false)
  MUTATION_CASE(kTiny, "compressor/entries:rope-position+1", "RoPE of entry j at 4j+1", false)
  MUTATION_CASE(kTiny, "indexer/compressor/entries:rope-position+1", "RoPE of entry j at 4j+1", false)
  MUTATION_CASE(kTiny, "indexer/compressor/entries:rope-block-end", "RoPE of entry j at 4j+3", false)
  MUTATION_CASE(kTiny, "q:rope-first-dims", "RoPE on the wrong half", false)
  MUTATION_CASE(kTiny, "q:rope-halves", "RoPE on halves", false)
  // Compressor, indexer, attention.
  MUTATION_CASE(kTiny, "compressor/entries:ape-shift+1", "ape shifted by one", false)
  MUTATION_CASE(kTiny, "indexer/scores:causal+1", "causal boundary off by one", false)
  MUTATION_CASE(kTiny, "attn/core:softmax-scale-nope-dim", "softmax scale from the wrong head dim", false)
  // Stores: a value scaled, one ulp high, an index replaced.
  MUTATION_CASE(kTiny, "kv:scaled-1.1", "a value scaled by 1.1", false)
  MUTATION_CASE(kTiny, "indexer/q:scaled-0.5", "indexer q scaled by 0.5", false)
  MUTATION_CASE(kTiny, "indexer/topk:index-replaced", "one index replaced", false)
  // Every bf16 stage one ulp high: each flip may lie within reach of a boundary, but they all go
  // one way (gate "rounding bias", against the oracle's value before its bf16 rounding).
  MUTATION_CASE(kTiny, "q:one-ulp-high", "every element one ulp high", false)
  MUTATION_CASE(kTiny, "indexer/weights:one-ulp-high", "every element one ulp high", false)
  MUTATION_CASE(kTiny, "indexer/scores:one-ulp-high", "every element one ulp high", false)
  MUTATION_CASE(kTiny, "attn/out_heads:one-ulp-high", "every element one ulp high", false)
  MUTATION_CASE(kTiny, "attn/wo_a:one-ulp-high", "every element one ulp high", false)
  MUTATION_CASE(kTiny, "out:one-ulp-high", "every element one ulp high", false)
  // Probabilities not rounded to bf16: seen by the per-element bound of DeepSeek's probability
  // convention, which the synthetic captures declare (docs/tolerances.md "Probability flips"); the
  // row's bound, for a producer of another convention, lets it through.
  MUTATION_CASE(kTiny, "attn/core:probs-fp32", "probabilities not rounded to bf16", false)
  ANY_CONVENTION_CASE(kTiny, "attn/core:probs-fp32", "probabilities not rounded to bf16")

  // At Flash dims (about 25 s each): the classes whose effect depends on the dims (the sink's weight
  // among 64+ slots, the scale's head dim, FP4 ties at index_head_dim 128, bf16 probabilities).
  TEST_CASE("mutations at Flash dims: the clean capture passes every stage in both modes") {
    const Capture& clean = make_capture(kFlash, std::nullopt, false);
    for (ReplayMode mode : {ReplayMode::stage_local, ReplayMode::chained})
      CHECK(replay(clean, mode, true).counts().failed == 0);
  }
  MUTATION_CASE(kFlash, "indexer/q:ties-toward-zero", "FP4 ties toward zero at Flash dims", false)
  MUTATION_CASE(kFlash, "attn/core:softmax-scale-nope-dim", "softmax scale from the wrong head dim at Flash dims",
                false)
  MUTATION_CASE(kFlash, "attn/core:probs-fp32", "probabilities not rounded to bf16 at Flash dims", false)
  MUTATION_CASE(kFlash, "attn/core:sink-dropped", "sink dropped at Flash dims", false)
}
