#pragma once
// Precision policy: a value with one switch per place where DeepSeek's code rounds, so that a
// stage never forks on a mode name. `exact` is the mathematics (fp64, no quantization);
// `official` reproduces DeepSeek's inference code; the other named policies are the alternatives
// the accuracy report compares (dsv4-verify precision-report, docs/precision.md).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reference/numerics/block_quant.h"
#include "reference/numerics/storage.h"
#include "reference/numerics_variant.h"

namespace dsv4::ref {

// How the projections DeepSeek runs through fp8_gemm (wq_a, wq_b, wkv, wo_b, indexer.wq_b) compute.
enum class LinearKind {
  exact,         // y = x W^T with fp64 accumulation, then rounded to the activation storage
  fp8_block128,  // DeepSeek: x quantized 1x128 (e4m3, UE8M0), per-128-K-block fp32 partial sums,
                 // scaled and accumulated in fp32, output rounded to the activation storage
};

struct PrecisionPolicy {
  std::string name;
  Storage activations = Storage::bf16;   // where the code holds bf16 tensors (x, q, kv, o, ...)
  Storage fp32_tensors = Storage::fp32;  // where it holds fp32 (compressor kv/score/state and
                                         // pooling, norm and RoPE internals, softmax sums)
  LinearKind fp8_linears = LinearKind::fp8_block128;
  std::optional<BlockFormat> kv_nope;      // fake-quant of the 448 nope dims of window/compressed kv
  std::optional<BlockFormat> indexer_qk;   // fake-quant of indexer q and indexer compressed k
  bool indexer_q_quant = true;             // indexer_qk applies to the indexer q too (off: to the
                                           // compressed keys only; q stays in the activation storage)
  bool indexer_hadamard = true;            // rotate indexer q and k before quantizing them
  Storage indexer_scores = Storage::bf16;  // q.k, relu, *w and the head sum of the indexer
  Storage attn_probs = Storage::bf16;      // probabilities before P.V in sparse attention
  bool attn_online_blocks = true;          // softmax walked in blocks of 64 indices with a running
                                           // max, as kernel.py's sparse_attn does (else one pass)
  NumericsVariant variant;                 // DeepSeek's arithmetic unless a bug class is simulated

  static PrecisionPolicy exact();
  static PrecisionPolicy official();
  // Every named policy (exact, official, fp8-indexer, fp8-indexer-no-hadamard,
  // fp4-indexer-no-hadamard, no-kv-quant, bf16, fp32, mxfp4-indexer, nvfp4-indexer, and the policies
  // that change one switch of official: fp32-probs, fp32-indexer-scores, fp8-indexer-keys-only,
  // fp4-indexer-keys-only). New policies go at the end: the existing ones keep their order.
  static std::vector<PrecisionPolicy> all_named();
  // By name: a named policy, or "<named>-no-hadamard", the named policy with the indexer's Hadamard
  // rotation off (only for a policy that quantizes the indexer q/k and whose variant is not itself
  // named). Throws std::invalid_argument listing the known names otherwise.
  static PrecisionPolicy by_name(const std::string& name);

  std::string describe() const;  // one line with every switch (and the variant, when not DeepSeek's), for reports
  // (switch, value) for every switch, in describe()'s order.
  std::vector<std::pair<std::string, std::string>> switches() const;
  // The switches whose values differ from `base`'s, as "switch=value (base: value)" joined by ", ";
  // "none" when every switch is the same. The report's "what differs from official" line.
  std::string differences_from(const PrecisionPolicy& base) const;
};

// p with the activation storage fp64: a primitive (linear, RMSNorm, RoPE) given it returns its value
// before the final rounding to p.activations, i.e. the fp32 (or exact) value DeepSeek's code casts to
// bf16. The *_before_rounding functions of reference/stages/ give it to their last step only.
PrecisionPolicy unrounded_output(PrecisionPolicy p);

}  // namespace dsv4::ref
