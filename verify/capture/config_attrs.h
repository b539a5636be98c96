#pragma once
// The attributes of /config (capture-format.md) and the ref::ModelConfig fields they fill.
#include <string_view>

#include "reference/config.h"

namespace dsv4::verify {

struct ConfigIntAttr {
  std::string_view name;
  int ref::ModelConfig::*field;
};
struct ConfigRealAttr {
  std::string_view name;
  double ref::ModelConfig::*field;
};

inline constexpr ConfigIntAttr kConfigIntAttrs[] = {
    {"dim", &ref::ModelConfig::dim},
    {"n_heads", &ref::ModelConfig::n_heads},
    {"head_dim", &ref::ModelConfig::head_dim},
    {"rope_head_dim", &ref::ModelConfig::rope_head_dim},
    {"q_lora_rank", &ref::ModelConfig::q_lora_rank},
    {"o_groups", &ref::ModelConfig::o_groups},
    {"o_lora_rank", &ref::ModelConfig::o_lora_rank},
    {"window_size", &ref::ModelConfig::window_size},
    {"index_n_heads", &ref::ModelConfig::index_n_heads},
    {"index_head_dim", &ref::ModelConfig::index_head_dim},
    {"index_topk", &ref::ModelConfig::index_topk},
    {"original_seq_len", &ref::ModelConfig::original_seq_len},
    {"max_seq_len", &ref::ModelConfig::max_seq_len},
};

inline constexpr ConfigRealAttr kConfigRealAttrs[] = {
    {"rope_theta", &ref::ModelConfig::rope_theta},   {"compress_rope_theta", &ref::ModelConfig::compress_rope_theta},
    {"rope_factor", &ref::ModelConfig::rope_factor}, {"beta_fast", &ref::ModelConfig::beta_fast},
    {"beta_slow", &ref::ModelConfig::beta_slow},     {"norm_eps", &ref::ModelConfig::norm_eps},
};

// The string attribute of /config naming the precision policy ("official" = DeepSeek's numerics).
inline constexpr std::string_view kConfigPrecisionAttr = "precision";

}  // namespace dsv4::verify
