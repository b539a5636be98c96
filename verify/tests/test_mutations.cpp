// Mutation tests (docs/math.md "Numerics variants"): for each bug class kernels have in the field, a
// capture made by the oracle with that bug injected at one stage (synth's MutatedStages) must fail
// first at that stage, in stage-local and in chained replay, and the replay's diagnosis must name
// the bug; the clean capture must pass every stage in both modes. Tiny dims here; Flash dims in
// the "slow" suite.
//
// Cases marked kNeedsComparators pass stage-locally with the comparators of main today (a tolerance
// row that a one-step flip everywhere, or a bug confined to a few elements, stays within): their
// verdict checks carry doctest::should_fail, so they turn red the day the rounding-aware
// comparators make them fail at their stage, and the mark must come off. The diagnosis checks hold
// for every case today: they compare bit for bit.
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
  const char* config;
  std::vector<int> ratios;
  std::vector<int64_t> calls;
  int batch;
};

// Tiny: a layer of each ratio, a 13-token prefill (3 C4 entries) then 3 decodes (the one at 15
// completes entry 3). Flash: one CSA layer, an 8-token prefill (2 entries) and a decode.
const Dims kTiny{"tiny", {0, 4, 128}, {13, 1, 1, 1}, 2};
const Dims kFlash{"flash", {4}, {8, 1}, 1};

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
    const auto key = std::pair{std::string(dims.config), quantization_edges};
    auto it = clean.find(key);
    if (it == clean.end()) it = clean.emplace(key, synthesize(dims, std::nullopt, quantization_edges)).first;
    return it->second;
  }
  const std::string key = std::string(dims.config) + (quantization_edges ? " edges " : " ") + m->name();
  if (!last_mutated || last_mutated->first != key) last_mutated.emplace(key, synthesize(dims, m, quantization_edges));
  return last_mutated->second;
}

Report replay(const Capture& c, ReplayMode mode, bool diagnose) {
  ReplayOptions o;
  o.mode = mode;
  o.diagnose = diagnose ? DiagnoseScope::failing : DiagnoseScope::none;
  return replay_capture(c, o);
}

const Record& record_of(const Report& r, const StageId& id) {
  for (const Record& rec : r.records)
    if (rec.id() == id) return rec;
  FAIL("no record ", id.stage);
  return r.records.front();
}

// The first (layer, call) where the mutated capture's dataset of the stage differs from the clean one.
std::optional<std::pair<int, int>> first_difference(const Capture& clean, const Capture& mutated, const std::string& stage) {
  for (const auto& [index, layer] : clean.layers)
    for (const CallCapture& call : layer.calls) {
      if (!call.has(stage)) continue;
      const Tensor& a = call.stage(stage);
      const Tensor& b = mutated.layers.at(index).calls.at(call.index).stage(stage);
      for (size_t i = 0; i < a.values.size(); ++i)
        if (std::bit_cast<uint64_t>(a.values[i]) != std::bit_cast<uint64_t>(b.values[i])) return std::pair{index, call.index};
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
void check_fails_first_at(const Capture& mutated, const ref::Mutation& m, ReplayMode mode) {
  const Report r = replay(mutated, mode, /*diagnose=*/mode == ReplayMode::stage_local);
  INFO(to_string(mode), " ", m.name());
  REQUIRE(r.first_failure().has_value());
  CHECK(r.first_failure()->stage == ref::stage(m.stage).name);
  if (mode == ReplayMode::stage_local) {
    const Record& first = record_of(r, *r.first_failure());
    REQUIRE(first.diagnosis.has_value());
    INFO(first.diagnosis->summary());
    CHECK(first.diagnosis->trials.front().reproduces());
  }
}

void check_diagnosed(const Dims& dims, const char* name, bool quantization_edges) {
  const ref::Mutation m = ref::Mutation::parse(name);
  const Capture& clean = make_capture(dims, std::nullopt, quantization_edges);
  check_diagnosis(clean, make_capture(dims, m, quantization_edges), m);
}

void check_verdicts(const Dims& dims, const char* name, bool quantization_edges) {
  const ref::Mutation m = ref::Mutation::parse(name);
  const Capture& mutated = make_capture(dims, m, quantization_edges);
  check_fails_first_at(mutated, m, ReplayMode::stage_local);
  // Chained: every stage before the mutated one is bitwise the oracle's, so the first failure is
  // the same stage; with the chained tolerances derived from the replay's own input error
  // (docs/tolerances.md), the stages after it may fail too, but not before.
  check_fails_first_at(mutated, m, ReplayMode::chained);
}

// Known misses of main's comparators (see the file comment).
const auto kNeedsComparators = doctest::should_fail();

}  // namespace

TEST_CASE("mutations: the clean capture passes every stage in both modes") {
  const Capture& clean = make_capture(kTiny, std::nullopt, false);
  for (ReplayMode mode : {ReplayMode::stage_local, ReplayMode::chained}) {
    const Report r = replay(clean, mode, true);
    CHECK_FALSE(r.first_failure().has_value());
    CHECK(r.counts().failed == 0);
  }
}

// Two cases per bug class of the verifier's list: the diagnosis names it (bitwise, holds today),
// and the replay's verdict fails first at its stage (kNeedsComparators where main misses it).
#define MUTATION_CASES(DIMS, NAME, WHAT, EDGES, DECORATOR)                                              \
  TEST_CASE("mutation " NAME " (" WHAT ") is diagnosed as itself") { check_diagnosed(DIMS, NAME, EDGES); } \
  TEST_CASE("mutation " NAME " (" WHAT ") fails first at its stage in both modes" DECORATOR) {          \
    check_verdicts(DIMS, NAME, EDGES);                                                                  \
  }

MUTATION_CASES(kTiny, "kv:quant-skipped", "FP8 quantization skipped", false, * kNeedsComparators)
MUTATION_CASES(kTiny, "kv:round-toward-zero", "FP8 truncation", false, * kNeedsComparators)
MUTATION_CASES(kTiny, "indexer/q:ties-toward-zero", "FP4 ties toward zero", false, * kNeedsComparators)
MUTATION_CASES(kTiny, "indexer/q:amax-floor-1e-4", "FP4 amax floor 1e-4", true, * kNeedsComparators)
MUTATION_CASES(kTiny, "kv:amax-floor-6x2^-126", "FP8 amax floor 6x2^-126", true, * kNeedsComparators)
MUTATION_CASES(kTiny, "kv:ue8m0-floor", "UE8M0 floor", false, )
MUTATION_CASES(kTiny, "indexer/q:ue8m0-floor", "UE8M0 floor", false, * kNeedsComparators)
MUTATION_CASES(kTiny, "q:rope-position+1", "RoPE at t+1", false, )
MUTATION_CASES(kTiny, "kv:rope-position+1", "RoPE at t+1", false, )
MUTATION_CASES(kTiny, "indexer/q:rope-position+1", "RoPE at t+1", false, * kNeedsComparators)
MUTATION_CASES(kTiny, "compressor/entries:rope-position+1", "RoPE of entry j at 4j+1", false, )
MUTATION_CASES(kTiny, "indexer/compressor/entries:rope-block-end", "RoPE of entry j at 4j+3", false, * kNeedsComparators)
MUTATION_CASES(kTiny, "q:rope-first-dims", "RoPE on the wrong half", false, )
MUTATION_CASES(kTiny, "q:rope-halves", "RoPE on halves", false, )
MUTATION_CASES(kTiny, "compressor/entries:ape-shift+1", "ape shifted by one", false, )
MUTATION_CASES(kTiny, "indexer/scores:causal+1", "causal boundary off by one", false, )
MUTATION_CASES(kTiny, "attn/core:softmax-scale-nope-dim", "softmax scale from the wrong head dim", false, )
MUTATION_CASES(kTiny, "attn/core:probs-fp32", "probabilities not rounded to bf16", false, * kNeedsComparators)
MUTATION_CASES(kTiny, "attn/core:sink-dropped", "sink dropped", false, )
MUTATION_CASES(kTiny, "topk_idxs:index-replaced", "one index replaced", false, )
MUTATION_CASES(kTiny, "q_latent:one-ulp-high", "every element one ulp high", false, * kNeedsComparators)
MUTATION_CASES(kTiny, "kv:scaled-1.1", "a value scaled by 1.1", false, * kNeedsComparators)

TEST_SUITE("slow") {
  TEST_CASE("mutations at Flash dims: the clean capture passes every stage in both modes") {
    const Capture& clean = make_capture(kFlash, std::nullopt, false);
    for (ReplayMode mode : {ReplayMode::stage_local, ReplayMode::chained})
      CHECK(replay(clean, mode, true).counts().failed == 0);
  }
  MUTATION_CASES(kFlash, "kv:quant-skipped", "FP8 quantization skipped at Flash dims", false, * kNeedsComparators)
  MUTATION_CASES(kFlash, "kv:round-toward-zero", "FP8 truncation at Flash dims", false, * kNeedsComparators)
  MUTATION_CASES(kFlash, "indexer/q:ties-toward-zero", "FP4 ties toward zero at Flash dims", false, * kNeedsComparators)
  MUTATION_CASES(kFlash, "q:rope-position+1", "RoPE at t+1 at Flash dims", false, )
  MUTATION_CASES(kFlash, "attn/core:softmax-scale-nope-dim", "softmax scale from the wrong head dim at Flash dims", false, )
  MUTATION_CASES(kFlash, "attn/core:probs-fp32", "probabilities not rounded to bf16 at Flash dims", false, * kNeedsComparators)
  MUTATION_CASES(kFlash, "attn/core:sink-dropped", "sink dropped at Flash dims", false, )
}
