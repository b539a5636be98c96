#pragma once
// Models of activations with outliers for the synthetic inputs of a precision report. Real
// activations carry a few channels 100-1000 times the median ("massive activations") and outlier
// channels in q and k; x ~ N(0, 1) with random weights has none, so it cannot show what block scales
// and the indexer's Hadamard rotation are for. These are models, not captures of a model:
//   heavy channels of x   x[t, c] = sign_c * x_heavy_scale + z[t, c] for a fixed set of channels c
//                         (the same for every token; signs and channels drawn per seed);
//   heavy-tailed rows     z[t, c] Student-t with x_tail_dof degrees of freedom, scaled to variance 1
//                         (0: N(0, 1));
//   heavy q/k channels    a fixed set of dims of every head is qk_heavy_scale times larger in the
//                         projected q and k, in the attention (rows of wq_b; the kv_norm and
//                         compressor norm weights) and in the indexer (rows of its wq_b; its
//                         compressor's norm weight): the weights are changed, then put back on the
//                         checkpoint's grids (FP8 128x128 blocks, bf16 norms).
// The default model is plain (N(0, 1) x, weights as drawn) and draws exactly what the synthetic
// inputs drew before models existed.
#include <cstdint>
#include <string>
#include <vector>

#include "reference/config.h"
#include "reference/tensor.h"
#include "reference/weights.h"

namespace dsv4::verify {

struct ActivationModel {
  int x_heavy_channels = 0;    // heavy channels of x (0: none)
  double x_heavy_scale = 100;  // their offset, in standard deviations of the other channels
  int x_tail_dof = 0;          // degrees of freedom of the Student-t entries (0: normal; >= 3 otherwise)
  int qk_heavy_channels = 0;   // heavy dims of every q/k head (0: none)
  double qk_heavy_scale = 10;  // their gain over the other dims

  bool plain() const { return x_heavy_channels == 0 && x_tail_dof == 0 && qk_heavy_channels == 0; }
  // One line for the report's input, e.g. "x: 4 heavy channels at +-100 sd, Student-t(4) rows;
  // q/k: 2 heavy dims per head x 10" ("x ~ N(0, 1), weights as drawn" when plain).
  std::string describe() const;
  // Throws std::invalid_argument naming the command-line option, expected and found.
  void validate(const ref::ModelConfig& cfg) const;
};

// `count` distinct channels of [0, n), ascending, drawn from `seed`.
std::vector<int> heavy_channels(int count, int n, uint64_t seed);

// One sequence's attention input under the model, rounded to bf16 (DeepSeek holds x in bf16).
// heavy: x's heavy channels (heavy_channels(m.x_heavy_channels, dim, ...)), each with its sign drawn
// from `seed` too. -> [tokens, dim]
ref::Mat model_x(const ActivationModel& m, int64_t tokens, int dim, const std::vector<int>& heavy, uint64_t seed);

// The weights that give the projected q and k their heavy dims (see above): `attention_dims` of
// [0, head_dim) in the attention's q and kv, `indexer_dims` of [0, index_head_dim) in the indexer's
// q and keys (ratio-4 layers only). Nothing changes when m.qk_heavy_channels is 0.
void add_heavy_qk_dims(ref::AttentionWeights& w, const ref::ModelConfig& cfg, const ActivationModel& m,
                       const std::vector<int>& attention_dims, const std::vector<int>& indexer_dims);

}  // namespace dsv4::verify
