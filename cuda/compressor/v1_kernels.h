#pragma once
// The v1 kernels, launched by the c4_* / c128_* entry points for Variant::v1: one thread per
// (entry, channel) pooling into an fp32 buffer, then one thread per entry running
// postprocess_entry_serial. Slow on purpose: the reference point of the version ladder. Also the
// state-write pass every prefill version shares.
#include <cuda_runtime.h>

#include "cuda/compressor/compressor_api.h"
#include "cuda/compressor/kernel_args.h"

namespace dsv4::cuda::detail {

// Pools every entry of the plan (ratio 4 or 128) into a.pooled [n_items, d]; reads the state, does
// not write it.
void v1_pool_prefill(const CompressorParams& p, const CompressorArgs& a, cudaStream_t stream);

// Writes each decode token into its state row and, for a completing block, pools into a.pooled row
// b and (ratio 4) shifts the current block into the previous rows.
void v1_decode_pool(const CompressorParams& p, const CompressorArgs& a, cudaStream_t stream);

// entries[i] = postprocess(pooled[i]) for the plan's entries / the decode rows that complete.
void v1_postprocess_prefill(const CompressorParams& p, const CompressorArgs& a, cudaStream_t stream);
void v1_postprocess_decode(const CompressorParams& p, const CompressorArgs& a, cudaStream_t stream);

// The state-write pass of a ratio-4 / ratio-128 prefill (every version): afterwards each state
// holds what the oracle's meaningful_rows(start_pos + length) lists.
void state_write_pass(const CompressorParams& p, const CompressorArgs& a, cudaStream_t stream);

// A stream-ordered scratch buffer of n floats (cudaMallocAsync / cudaFreeAsync).
class ScratchFloats {
 public:
  ScratchFloats(size_t n, cudaStream_t stream);
  ~ScratchFloats();
  ScratchFloats(const ScratchFloats&) = delete;
  ScratchFloats& operator=(const ScratchFloats&) = delete;
  float* get() const { return ptr_; }

 private:
  float* ptr_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace dsv4::cuda::detail
