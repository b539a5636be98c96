#pragma once
// Model configuration (docs/math.md): the V4-Flash and V4-Pro values, the
// per-layer compress ratios, and small configurations for tests.
#include <string>
#include <vector>

namespace dsv4::ref {

struct ModelConfig {
  std::string name;
  int dim = 0;            // model width
  int n_heads = 0;        // H
  int head_dim = 0;       // d = 512 (nope 448 + rope 64)
  int rope_head_dim = 0;  // 64: interleaved RoPE on the last rope_head_dim dims
  int q_lora_rank = 0;
  int o_groups = 0;  // G
  int o_lora_rank = 0;
  int window_size = 0;     // 128
  int index_n_heads = 0;   // IH
  int index_head_dim = 0;  // ID
  int index_topk = 0;
  double rope_theta = 0;           // base of the plain table (ratio-0 layers)
  double compress_rope_theta = 0;  // base of the YaRN table (ratio 4 / 128 layers)
  int original_seq_len = 0;
  double rope_factor = 0;
  double beta_fast = 0;
  double beta_slow = 0;
  double norm_eps = 0;
  int max_seq_len = 0;
  std::vector<int> compress_ratios;  // one per layer, the MTP layer last

  int nope_dim() const { return head_dim - rope_head_dim; }

  // Throws std::invalid_argument naming the field and the rule it breaks.
  void validate() const;

  static ModelConfig flash();  // DeepSeek-V4-Flash
  static ModelConfig pro();    // DeepSeek-V4-Pro
  // Small dims with the same structure (head_dim 128 = nope 64 + rope 64, window 16, ...) for
  // tests and fixtures: every stage runs with the same code, in milliseconds.
  static ModelConfig tiny();
  // By name: "flash", "pro" or "tiny"; throws std::invalid_argument otherwise.
  static ModelConfig by_name(const std::string& name);
};

}  // namespace dsv4::ref
