// Model configurations: V4-Flash and V4-Pro as in docs/math.md (configurations), and tiny().
#include "reference/config.h"

#include <sstream>
#include <stdexcept>

namespace dsv4::ref {

namespace {

// Layers 0 and 1 use `first_two`; layers 2 .. n_layers-1 alternate even -> 4 (CSA), odd -> 128 (HCA);
// the MTP layer (the last entry) uses 0.
std::vector<int> v4_compress_ratios(int n_layers, int first_two) {
  std::vector<int> ratios;
  for (int layer = 0; layer < n_layers; ++layer) ratios.push_back(layer < 2 ? first_two : (layer % 2 == 0 ? 4 : 128));
  ratios.push_back(0);
  return ratios;
}

// The values every V4 model shares (DeepSeek's inference/config.json and ModelArgs defaults).
ModelConfig v4_common() {
  ModelConfig c;
  c.head_dim = 512;
  c.rope_head_dim = 64;
  c.o_lora_rank = 1024;
  c.window_size = 128;
  c.index_n_heads = 64;
  c.index_head_dim = 128;
  c.rope_theta = 10000;
  c.compress_rope_theta = 160000;
  c.original_seq_len = 65536;
  c.rope_factor = 16;
  c.beta_fast = 32;
  c.beta_slow = 1;
  c.norm_eps = 1e-6;
  c.max_seq_len = 4096;
  return c;
}

bool is_power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }

// Collects the first broken rule as "ModelConfig '<name>': <field> = <value>: <rule>".
class Checker {
 public:
  explicit Checker(const std::string& config) : config_(config) {}
  template <typename T>
  void require(bool ok, const char* field, T value, const std::string& rule) const {
    if (ok) return;
    std::ostringstream m;
    m << "ModelConfig '" << config_ << "': " << field << " = " << value << " breaks the rule: " << rule;
    throw std::invalid_argument(m.str());
  }

 private:
  std::string config_;
};

}  // namespace

ModelConfig ModelConfig::flash() {
  ModelConfig c = v4_common();
  c.name = "flash";
  c.dim = 4096;
  c.n_heads = 64;
  c.q_lora_rank = 1024;
  c.o_groups = 8;
  c.index_topk = 512;
  c.compress_ratios = v4_compress_ratios(43, 0);
  return c;
}

ModelConfig ModelConfig::pro() {
  ModelConfig c = v4_common();
  c.name = "pro";
  c.dim = 7168;
  c.n_heads = 128;
  c.q_lora_rank = 1536;
  c.o_groups = 16;
  c.index_topk = 1024;
  c.compress_ratios = v4_compress_ratios(61, 128);
  return c;
}

ModelConfig ModelConfig::tiny() {
  ModelConfig c = v4_common();  // RoPE / YaRN constants and norm_eps as Flash
  c.name = "tiny";
  c.dim = 256;
  c.n_heads = 4;
  c.head_dim = 128;  // nope 64 (one FP8 block) + rope 64
  c.rope_head_dim = 64;
  c.q_lora_rank = 128;
  c.o_groups = 2;
  c.o_lora_rank = 64;
  c.window_size = 16;
  c.index_n_heads = 4;
  c.index_head_dim = 128;
  c.index_topk = 8;
  c.max_seq_len = 1024;
  c.compress_ratios = {0, 4, 128, 0};
  return c;
}

ModelConfig ModelConfig::by_name(const std::string& name) {
  if (name == "flash") return flash();
  if (name == "pro") return pro();
  if (name == "tiny") return tiny();
  throw std::invalid_argument("unknown model config '" + name + "': expected flash, pro or tiny");
}

void ModelConfig::validate() const {
  const Checker c(name);
  const auto positive = [&](const char* field, int v) { c.require(v > 0, field, v, "must be positive"); };
  positive("dim", dim);
  positive("n_heads", n_heads);
  positive("head_dim", head_dim);
  positive("rope_head_dim", rope_head_dim);
  positive("q_lora_rank", q_lora_rank);
  positive("o_groups", o_groups);
  positive("o_lora_rank", o_lora_rank);
  positive("index_n_heads", index_n_heads);
  positive("index_head_dim", index_head_dim);
  c.require(window_size >= 1, "window_size", window_size, "must be >= 1");
  c.require(index_topk >= 1, "index_topk", index_topk, "must be >= 1");

  // RoPE works on interleaved pairs of the last rope_head_dim dims; at least one nope dim remains.
  c.require(rope_head_dim % 2 == 0, "rope_head_dim", rope_head_dim, "must be even (interleaved pairs)");
  c.require(rope_head_dim < head_dim, "rope_head_dim", rope_head_dim,
            "must be < head_dim = " + std::to_string(head_dim));
  // The nope dims are FP8 fake-quantized in blocks of 64 (act_quant block 64).
  c.require(nope_dim() % 64 == 0, "head_dim - rope_head_dim", nope_dim(),
            "must be a multiple of 64 (the FP8 block of the kv nope dims)");
  // The indexer head is Hadamard-rotated (power of two), FP4-quantized in blocks of 32, and
  // carries RoPE on its last rope_head_dim dims.
  c.require(is_power_of_two(index_head_dim), "index_head_dim", index_head_dim,
            "must be a power of two (Hadamard transform)");
  c.require(index_head_dim % 32 == 0, "index_head_dim", index_head_dim, "must be a multiple of 32 (the FP4 block)");
  c.require(index_head_dim >= rope_head_dim, "index_head_dim", index_head_dim,
            "must be >= rope_head_dim = " + std::to_string(rope_head_dim));
  c.require(n_heads % o_groups == 0, "n_heads", n_heads, "must be divisible by o_groups = " + std::to_string(o_groups));
  // The inputs of the FP8 linears are quantized in 1x128 blocks: wq_a and wkv read dim, wq_b and
  // indexer.wq_b read q_lora_rank, wo_b reads o_groups * o_lora_rank. (wo_a is bf16: no rule.)
  c.require(dim % 128 == 0, "dim", dim, "must be a multiple of 128 (FP8 1x128 input blocks of wq_a, wkv)");
  c.require(q_lora_rank % 128 == 0, "q_lora_rank", q_lora_rank,
            "must be a multiple of 128 (FP8 1x128 input blocks of wq_b, indexer.wq_b)");
  c.require((o_groups * o_lora_rank) % 128 == 0, "o_groups * o_lora_rank", o_groups * o_lora_rank,
            "must be a multiple of 128 (FP8 1x128 input blocks of wo_b)");

  c.require(max_seq_len > 0 && max_seq_len % 128 == 0, "max_seq_len", max_seq_len,
            "must be a positive multiple of 128");
  c.require(norm_eps > 0, "norm_eps", norm_eps, "must be positive");
  c.require(rope_theta > 0, "rope_theta", rope_theta, "must be positive");
  c.require(compress_rope_theta > 0, "compress_rope_theta", compress_rope_theta, "must be positive");
  c.require(original_seq_len >= 0, "original_seq_len", original_seq_len, "must be >= 0 (0: no YaRN)");
  if (original_seq_len > 0) {
    c.require(rope_factor > 0, "rope_factor", rope_factor, "must be positive when YaRN is on");
    c.require(beta_fast > beta_slow && beta_slow > 0, "beta_fast", beta_fast,
              "must be > beta_slow = " + std::to_string(beta_slow) + " > 0 when YaRN is on");
  }

  c.require(!compress_ratios.empty(), "compress_ratios.size()", compress_ratios.size(),
            "must be >= 1 (one ratio per layer)");
  for (size_t layer = 0; layer < compress_ratios.size(); ++layer) {
    const int r = compress_ratios[layer];
    const std::string field = "compress_ratios[" + std::to_string(layer) + "]";
    c.require(r == 0 || r == 4 || r == 128, field.c_str(), r, "must be 0, 4 or 128");
  }
}

}  // namespace dsv4::ref
