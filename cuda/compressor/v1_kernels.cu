// The v1 kernels and the state-write pass. See v1_kernels.h.
#include <cmath>

#include "cuda/common/cuda_check.h"
#include "cuda/common/launch_checks.h"
#include "cuda/compressor/pooling.cuh"
#include "cuda/compressor/postprocess_serial.cuh"
#include "cuda/compressor/rows.cuh"
#include "cuda/compressor/v1_kernels.h"

namespace dsv4::cuda::detail {
namespace {

constexpr int kThreads = 128;

unsigned blocks_for(int64_t n, const char* who) { return grid_blocks(n, kThreads, who); }

// One channel of ratio 4's 8-row window for entry j: rows 0..3 the previous block's "a" half
// (channel c), rows 4..7 this block's "b" half (channel d + c); block 0 has kv 0, logit -inf there.
__device__ void c4_window_channel(const ChunkDesc& ch, int64_t j, int c, int d, const float* kv, const float* score,
                                  const float* ape, const float* skv, const float* sscore, float (&wkv)[8],
                                  float (&ws)[8]) {
  const int width = 2 * d;
  for (int i = 0; i < 8; ++i) {
    const int64_t t = 4 * (j - 1) + i;
    const int col = i < 4 ? c : d + c;
    if (t < 0) {
      wkv[i] = 0.0f;
      ws[i] = -INFINITY;
      continue;
    }
    const RowRef row = token_row(ch, 4, t, kv, score, skv, sscore, width);
    wkv[i] = row.kv[col];
    ws[i] = row.from_input ? row.score[col] + ape[(t % 4) * width + col] : row.score[col];
  }
}

// Ratio 128: max over the 128 rows, then the sums in row order (rows are read twice).
__device__ float c128_pool_channel(const ChunkDesc& ch, int64_t j, int c, int d, const float* kv, const float* score,
                                   const float* ape, const float* skv, const float* sscore) {
  float m = -INFINITY;
  for (int i = 0; i < 128; ++i) {
    const int64_t t = 128 * j + i;
    const RowRef row = token_row(ch, 128, t, kv, score, skv, sscore, d);
    const float s = row.from_input ? row.score[c] + ape[i * d + c] : row.score[c];
    m = fmaxf(m, s);
  }
  float den = 0, num = 0;
  for (int i = 0; i < 128; ++i) {
    const int64_t t = 128 * j + i;
    const RowRef row = token_row(ch, 128, t, kv, score, skv, sscore, d);
    const float s = row.from_input ? row.score[c] + ape[i * d + c] : row.score[c];
    const float e = expf(s - m);
    den += e;
    num += row.kv[c] * e;
  }
  return num / den;
}

__global__ void pool_prefill_v1(int ratio, int d, const CompressorArgs a) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= a.n_items * d) return;
  const int64_t item = idx / d;
  const int c = static_cast<int>(idx % d);
  const EntryDesc e = a.items[item];
  const ChunkDesc ch = e.chunk;
  const int64_t state_size = (ratio == 4 ? 8LL * 2 * d : 128LL * d);
  const float* skv = sequence_state<const float>(a.state_kv, ch.state_index, state_size);
  const float* sscore = sequence_state<const float>(a.state_score, ch.state_index, state_size);
  if (ratio == 4) {
    float wkv[8], ws[8];
    c4_window_channel(ch, e.entry, c, d, a.kv, a.score, a.ape, skv, sscore, wkv, ws);
    a.pooled[item * d + c] = pool_channel<8>(wkv, ws);
  } else {
    a.pooled[item * d + c] = c128_pool_channel(ch, e.entry, c, d, a.kv, a.score, a.ape, skv, sscore);
  }
}

// One thread per (sequence, channel c < d); ratio 4 owns columns c and d + c of the state.
__global__ void pool_decode_v1(int ratio, int d, const CompressorArgs a) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(a.batch) * d) return;
  const int b = static_cast<int>(idx / d);
  const int c = static_cast<int>(idx % d);
  const int64_t pos = a.positions[b];
  const int slot = static_cast<int>(pos % ratio);
  const int coff = ratio == 4 ? 2 : 1;
  const int width = coff * d;
  const int64_t state_size = static_cast<int64_t>(coff) * ratio * width;
  float* skv = sequence_state(a.state_kv, a.state_index[b], state_size);
  float* sscore = sequence_state(a.state_score, a.state_index[b], state_size);
  float* pooled = a.pooled;
  const int offset = ratio == 4 ? 4 : 0;
  for (int h = 0; h < coff; ++h) {
    const int col = h * d + c;
    skv[(offset + slot) * width + col] = a.kv[static_cast<int64_t>(b) * width + col];
    sscore[(offset + slot) * width + col] = a.score[static_cast<int64_t>(b) * width + col] + a.ape[slot * width + col];
  }
  if (slot != ratio - 1) return;
  if (ratio == 4) {
    float wkv[8], ws[8];
    const int64_t block = pos / 4;
    for (int i = 0; i < 4; ++i) {
      wkv[i] = block == 0 ? 0.0f : skv[i * width + c];
      ws[i] = block == 0 ? -INFINITY : sscore[i * width + c];
      wkv[4 + i] = skv[(4 + i) * width + d + c];
      ws[4 + i] = sscore[(4 + i) * width + d + c];
    }
    pooled[static_cast<int64_t>(b) * d + c] = pool_channel<8>(wkv, ws);
    for (int i = 0; i < 4; ++i)
      for (int h = 0; h < 2; ++h) {
        skv[i * width + h * d + c] = skv[(4 + i) * width + h * d + c];
        sscore[i * width + h * d + c] = sscore[(4 + i) * width + h * d + c];
      }
  } else {
    float m = -INFINITY;
    for (int i = 0; i < 128; ++i) m = fmaxf(m, sscore[i * width + c]);
    float den = 0, num = 0;
    for (int i = 0; i < 128; ++i) {
      const float e = expf(sscore[i * width + c] - m);
      den += e;
      num += skv[i * width + c] * e;
    }
    pooled[static_cast<int64_t>(b) * d + c] = num / den;
  }
}

__global__ void postprocess_prefill_v1(int d, Kind kind, const CompressorArgs a) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= a.n_items) return;
  postprocess_entry_serial(a.pooled + item * d, d, kind, a.norm, a.eps, a.rope + a.items[item].entry * kRopeDim,
                           a.entries + item * d);
}

__global__ void postprocess_decode_v1(int ratio, int d, Kind kind, const CompressorArgs a) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= a.batch || (a.positions[b] + 1) % ratio != 0) return;
  postprocess_entry_serial(a.pooled + static_cast<int64_t>(b) * d, d, kind, a.norm, a.eps,
                           a.rope + a.positions[b] / ratio * kRopeDim, a.entries + static_cast<int64_t>(b) * d);
}

// One thread per (chunk, column): reads everything its column needs, then writes it, so no thread
// writes what another reads. Ratio 4: rows [0, 4) get the last block completed in this call (some
// of its tokens may still sit in rows [4, 8) from an earlier call); rows 4 + t mod 4 get the new
// tokens of the final partial block. Ratio 128: rows t mod 128 get the new tokens of the final
// partial block.
__global__ void write_state(int ratio, int d, const CompressorArgs a) {
  const int coff = ratio == 4 ? 2 : 1;
  const int width = coff * d;
  const int chunk = blockIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (chunk >= a.n_chunks || col >= width) return;
  const ChunkDesc ch = a.chunks[chunk];
  if (ch.length == 0) return;
  const int64_t state_size = static_cast<int64_t>(coff) * ratio * width;
  float* skv = sequence_state(a.state_kv, ch.state_index, state_size);
  float* sscore = sequence_state(a.state_score, ch.state_index, state_size);
  const float* kv = a.kv;
  const float* score = a.score;
  const float* ape = a.ape;
  const int64_t end = ch.start_pos + ch.length;
  const int64_t tail_start = end / ratio * ratio;  // first token of the final partial block
  auto input = [&](int64_t t, float& k, float& s) {
    const int64_t row = ch.first_row + (t - ch.start_pos);
    k = kv[row * width + col];
    s = score[row * width + col] + ape[(t % ratio) * width + col];
  };
  if (ratio == 4) {
    float prev_kv[4], prev_s[4];
    const bool completed = end / 4 > ch.start_pos / 4;
    if (completed) {
      const int64_t last = end / 4 - 1;
      for (int i = 0; i < 4; ++i) {
        const int64_t t = 4 * last + i;
        if (t >= ch.start_pos) {
          input(t, prev_kv[i], prev_s[i]);
        } else {
          prev_kv[i] = skv[(4 + i) * width + col];
          prev_s[i] = sscore[(4 + i) * width + col];
        }
      }
      for (int i = 0; i < 4; ++i) {
        skv[i * width + col] = prev_kv[i];
        sscore[i * width + col] = prev_s[i];
      }
    }
  }
  const int offset = ratio == 4 ? 4 : 0;
  for (int64_t t = tail_start > ch.start_pos ? tail_start : ch.start_pos; t < end; ++t) {
    float k, s;
    input(t, k, s);
    skv[(offset + t % ratio) * width + col] = k;
    sscore[(offset + t % ratio) * width + col] = s;
  }
}

}  // namespace

void v1_pool_prefill(const CompressorParams& p, const CompressorArgs& a, cudaStream_t stream) {
  const int64_t n = a.n_items * p.head_dim;
  if (n == 0) return;
  pool_prefill_v1<<<blocks_for(n, "v1_pool_prefill"), kThreads, 0, stream>>>(p.ratio, p.head_dim, a);
  CUDA_CHECK_LAUNCH();
}

void v1_decode_pool(const CompressorParams& p, const CompressorArgs& a, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(a.batch) * p.head_dim;
  if (n == 0) return;
  pool_decode_v1<<<blocks_for(n, "v1_decode_pool"), kThreads, 0, stream>>>(p.ratio, p.head_dim, a);
  CUDA_CHECK_LAUNCH();
}

void v1_postprocess_prefill(const CompressorParams& p, const CompressorArgs& a, cudaStream_t stream) {
  if (a.n_items == 0) return;
  postprocess_prefill_v1<<<blocks_for(a.n_items, "v1_postprocess_prefill"), kThreads, 0, stream>>>(p.head_dim, p.kind,
                                                                                                   a);
  CUDA_CHECK_LAUNCH();
}

void v1_postprocess_decode(const CompressorParams& p, const CompressorArgs& a, cudaStream_t stream) {
  if (a.batch == 0) return;
  postprocess_decode_v1<<<blocks_for(a.batch, "v1_postprocess_decode"), kThreads, 0, stream>>>(p.ratio, p.head_dim,
                                                                                               p.kind, a);
  CUDA_CHECK_LAUNCH();
}

void state_write_pass(const CompressorParams& p, const CompressorArgs& a, cudaStream_t stream) {
  if (a.n_chunks == 0) return;
  const int width = p.coff() * p.head_dim;
  const dim3 grid(blocks_for(width, "state_write_pass"), static_cast<unsigned>(a.n_chunks));
  write_state<<<grid, kThreads, 0, stream>>>(p.ratio, p.head_dim, a);
  CUDA_CHECK_LAUNCH();
}

ScratchFloats::ScratchFloats(size_t n, cudaStream_t stream) : stream_(stream) {
  if (n > 0) CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&ptr_), n * sizeof(float), stream));
}

ScratchFloats::~ScratchFloats() {
  if (ptr_) cudaFreeAsync(ptr_, stream_);
}

}  // namespace dsv4::cuda::detail
