#pragma once
// The one argument every compressor kernel takes: the device pointers and sizes of a launch, built
// once per call from the host API's arguments (prefill_args / decode_args). Passed by value, it
// lands in the kernel's parameter space as the separate arguments did.
#include <cstdint>

#include "cuda/compressor/compressor_api.h"

namespace dsv4::cuda {

struct CompressorArgs {
  // The call's gate inputs [rows, coff*d]: prefill the ragged rows of the plan's chunks, decode row
  // b = the new token of batch row b.
  const float* kv = nullptr;
  const float* score = nullptr;
  // Weights and tables (CompressorParams).
  const float* ape = nullptr;   // [ratio, coff*d]
  const float* norm = nullptr;  // [d]
  const float* rope = nullptr;  // [rope_entries, 64]
  double eps = 0;
  // State pool: stored kv and score [pool, coff*ratio, coff*d]; online C128 keeps its
  // [pool, 3, d] in state_kv (state_score unused). A prefill's compress pass only reads it.
  float* state_kv = nullptr;
  float* state_score = nullptr;
  // Outputs [rows, d]: entries as bf16 codes, pooled fp32 (nullptr: not written).
  uint16_t* entries = nullptr;
  float* pooled = nullptr;
  // Prefill: the plan's completed entries (output row = item index) and its chunks.
  const EntryDesc* items = nullptr;
  int64_t n_items = 0;
  const ChunkDesc* chunks = nullptr;
  int n_chunks = 0;
  // Decode: batch row b has position positions[b] and state state_index[b].
  int batch = 0;
  const int64_t* positions = nullptr;
  const int32_t* state_index = nullptr;
};

inline CompressorArgs prefill_args(const CompressorParams& p, const BatchPlan& plan, const float* kv,
                                   const float* score, float* state_kv, float* state_score, uint16_t* entries,
                                   float* pooled) {
  CompressorArgs a;
  a.kv = kv;
  a.score = score;
  a.ape = p.ape;
  a.norm = p.norm;
  a.rope = p.rope;
  a.eps = p.norm_eps;
  a.state_kv = state_kv;
  a.state_score = state_score;
  a.entries = entries;
  a.pooled = pooled;
  a.items = plan.device_items();
  a.n_items = plan.n_entries();
  a.chunks = plan.device_chunks();
  a.n_chunks = plan.n_chunks();
  return a;
}

inline CompressorArgs decode_args(const CompressorParams& p, const DecodePlan& plan, const float* kv,
                                  const float* score, float* state_kv, float* state_score, uint16_t* entries,
                                  float* pooled) {
  CompressorArgs a;
  a.kv = kv;
  a.score = score;
  a.ape = p.ape;
  a.norm = p.norm;
  a.rope = p.rope;
  a.eps = p.norm_eps;
  a.state_kv = state_kv;
  a.state_score = state_score;
  a.entries = entries;
  a.pooled = pooled;
  a.batch = plan.batch();
  a.positions = plan.device_positions();
  a.state_index = plan.device_state_index();
  return a;
}

}  // namespace dsv4::cuda
