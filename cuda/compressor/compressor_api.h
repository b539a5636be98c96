#pragma once
// CUDA compressors (docs/math.md "compressor/entries"; the oracle is reference/stages/compressor.h):
// softmax pooling of the gate inputs plus the fused post-processing (bf16, RMSNorm, RoPE at the
// entry's position, FP8 nope fake-quant or Hadamard + FP4) that writes the cache entries.
//
// Inputs are what production feeds these kernels: the compressor projections kv = wkv(x) and
// score = wgate(x), fp32 [tokens, coff*d] (coff = 2 for ratio 4), tokens of several sequences
// concatenated (a ragged batch); ape [ratio, coff*d] fp32; the RMSNorm weight [d] fp32; a RoPE table
// computed on the host from the oracle's RopeTable (rope_table() in oracle_mirror.h), so no device
// sinf/cosf enters. All pointers are device pointers.
//
// State is DeepSeek's layout (reference CompressorState) in fp32, one per sequence in a pool:
// state_kv and state_score [pool, coff*r, coff*d]; ratio 4 keeps the previous complete block in rows
// [0, 4) and the current block in rows [4, 8); ratio 128 keeps the current block in rows [0, 128).
// Online C128 keeps [pool, 3, d]: running max, running sum, normalized running mean.
//
// Outputs: entries as bf16 codes [n, d] (the fake-quantized values DeepSeek caches in its bf16
// kv_cache; the packed 584-byte FP8 page layout is not produced here) and, optionally, the pooled
// fp32 values [n, d] before post-processing (nullptr: not written). Precision: DeepSeek's official
// policy (FP8 e4m3 blocks of 64 with UE8M0 scales; FP4 e2m1 blocks of 32 with UE8M0 scales).
// Head dims: 128 and 512 (the indexer: 128).
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "cuda/common/device_buffer.h"
#include "cuda/common/kinds.h"

namespace dsv4::cuda {

// Versions (Variant, cuda/common/kinds.h; docs/cuda-compressor.md has the ladder):
//   v1  every entry point: one thread per (entry, channel) pooling, then one thread per entry
//       running the serial post-processing (the oracle's order);
//   v2  the C4 prefill only: the first fused kernel (one 128-thread slab per entry, 16-byte loads,
//       post-processing fused), kept as the ladder's reference point;
//   v3  every entry point: the fused kernels with a consecutive-row fast path, one descriptor
//       load, bit-built powers of two in the fake-quant and written fmaf numerators (the C4 prefill
//       at 96 registers, the C128 kernels as 512-thread blocks merging 4 slabs).
// The online C128 kernels have one version. Asking an entry point for a version it does not have
// throws std::invalid_argument.
// The head dims the kernels are instantiated for: 128 (the indexer's, and the main compressor of
// small configs) and 512 (V4's main compressor); the indexer kind takes 128 only.
constexpr bool takes_head_dim(Kind kind, int head_dim) {
  return kind == Kind::main ? head_dim == 128 || head_dim == 512 : head_dim == 128;
}

struct CompressorParams {
  int ratio = 4;       // 4 (overlap, coff 2) or 128
  int head_dim = 512;  // d: takes_head_dim
  Kind kind = Kind::main;
  double norm_eps = 1e-6;
  const float* ape = nullptr;   // [ratio, coff*d]
  const float* norm = nullptr;  // [d]
  const float* rope = nullptr;  // [rope_entries, 64]: (cos, sin) of pair i for entry j at [j*64 + 2i]
  int64_t rope_entries = 0;     // entry j uses position j*ratio; every entry written must be < this
  int coff() const { return ratio == 4 ? 2 : 1; }
};

// One sequence's part of a ragged batch.
struct SequenceChunk {
  int64_t start_pos = 0;    // tokens of this sequence already in its state (0: fresh state)
  int32_t length = 0;       // its new tokens in this call
  int64_t first_row = 0;    // row of its first new token in the ragged kv / score input
  int32_t state_index = 0;  // its state in the pool
};

// Device-side descriptions (16-byte aligned, read by the kernels).
struct ChunkDesc {
  int64_t start_pos;
  int64_t first_row;
  int32_t length;
  int32_t state_index;
};
struct EntryDesc {
  ChunkDesc chunk;  // a copy of its chunk's description: one 32-byte load gives a block everything
  int64_t entry;    // its index j in the sequence (RoPE position j*ratio); output row = this item's index
};
static_assert(sizeof(EntryDesc) == 32, "one entry description = 32 bytes");

// The completed entries of a ragged batch, in chunk order: chunk c owns output rows
// [entry_offset(c), entry_offset(c+1)), entries j = start_pos/r, ..., (start_pos+length)/r - 1.
class BatchPlan {
 public:
  BatchPlan(const std::vector<SequenceChunk>& chunks, int ratio);
  int ratio() const { return ratio_; }
  int n_chunks() const { return static_cast<int>(host_chunks_.size()); }
  int64_t n_entries() const { return static_cast<int64_t>(host_items_.size()); }
  int64_t n_rows() const { return n_rows_; }        // rows the ragged input must have
  int n_states() const { return n_states_; }        // states the pool must have
  int64_t max_entry() const { return max_entry_; }  // largest entry index j written (-1: none)
  int64_t entry_offset(int chunk) const { return offsets_.at(chunk); }
  const std::vector<SequenceChunk>& chunks() const { return host_chunks_; }
  const ChunkDesc* device_chunks() const { return chunks_.get(); }
  const EntryDesc* device_items() const { return items_.get(); }

 private:
  int ratio_;
  std::vector<SequenceChunk> host_chunks_;
  std::vector<EntryDesc> host_items_;
  std::vector<int64_t> offsets_;
  int64_t n_rows_ = 0;
  int n_states_ = 0;
  int64_t max_entry_ = -1;
  DeviceBuffer<ChunkDesc> chunks_;
  DeviceBuffer<EntryDesc> items_;
};

// One decode step of a batch: sequence b has position positions[b] (its new token is input row b),
// state state_index[b]. Its entry, if its block completes ((position + 1) % r == 0), goes to output
// row b; other rows are not written.
class DecodePlan {
 public:
  DecodePlan(const std::vector<int64_t>& positions, const std::vector<int32_t>& state_index, int ratio);
  int ratio() const { return ratio_; }
  int batch() const { return static_cast<int>(positions_.size()); }
  bool completes(int b) const { return (positions_.at(b) + 1) % ratio_ == 0; }
  int n_states() const { return n_states_; }
  int64_t max_entry() const { return max_entry_; }
  const std::vector<int64_t>& positions() const { return positions_; }
  const int64_t* device_positions() const { return dev_positions_.get(); }
  const int32_t* device_state_index() const { return dev_state_index_.get(); }

 private:
  int ratio_;
  std::vector<int64_t> positions_;
  int n_states_ = 0;
  int64_t max_entry_ = -1;
  DeviceBuffer<int64_t> dev_positions_;
  DeviceBuffer<int32_t> dev_state_index_;
};

// ---- ratio 4 (CSA, overlap) and ratio 128 (HCA), DeepSeek's stored state -----------------------
// Prefill / extend: any start_pos per sequence. Two launches: the compress pass (reads the state),
// then the state-write pass. kv, score [plan.n_rows(), coff*d]; entries, pooled [plan.n_entries(), d].
void c4_prefill(const CompressorParams& p, const BatchPlan& plan, const float* kv, const float* score, float* state_kv,
                float* state_score, uint16_t* entries, float* pooled, Variant v, cudaStream_t stream = nullptr);
void c128_prefill(const CompressorParams& p, const BatchPlan& plan, const float* kv, const float* score,
                  float* state_kv, float* state_score, uint16_t* entries, float* pooled, Variant v,
                  cudaStream_t stream = nullptr);
// One-token decode: writes the token into its state row and, when its block completes, pools and
// writes the entry (one launch for v3; v1 adds a post-processing launch).
// kv, score [batch, coff*d]; entries, pooled [batch, d].
void c4_decode(const CompressorParams& p, const DecodePlan& plan, const float* kv, const float* score, float* state_kv,
               float* state_score, uint16_t* entries, float* pooled, Variant v, cudaStream_t stream = nullptr);
void c128_decode(const CompressorParams& p, const DecodePlan& plan, const float* kv, const float* score,
                 float* state_kv, float* state_score, uint16_t* entries, float* pooled, Variant v,
                 cudaStream_t stream = nullptr);

// ---- online C128 (running max / sum / mean per channel; one version) ----------------------------
// state [pool, 3, d]. The same fp32 step per token in prefill and decode, so both give bitwise equal
// results on the GPU. Prefill: compress pass, then a write pass that replays the last block.
void c128_online_prefill(const CompressorParams& p, const BatchPlan& plan, const float* kv, const float* score,
                         float* state, uint16_t* entries, float* pooled, cudaStream_t stream = nullptr);
void c128_online_decode(const CompressorParams& p, const DecodePlan& plan, const float* kv, const float* score,
                        float* state, uint16_t* entries, float* pooled, cudaStream_t stream = nullptr);

// Sizes of one sequence's state, in floats.
inline int64_t state_floats(int ratio, int head_dim) {
  const int coff = ratio == 4 ? 2 : 1;
  return static_cast<int64_t>(coff) * ratio * coff * head_dim;
}
inline int64_t online_state_floats(int head_dim) { return 3LL * head_dim; }

}  // namespace dsv4::cuda
