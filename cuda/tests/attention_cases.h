#pragma once
// Test inputs of the CUDA sparse MQA kernels and what the oracle says about them
// (reference/stages/sparse_mqa.h), host-only: the GPU test (test_cuda_attention.cpp) runs the
// kernels on these cases, the host test (test_cuda_attention_host.cpp) runs the checks' mutations
// without a GPU.
//
// A case holds values, not bytes: the pools' rows (on the MODEL1 grid: FP8 e4m3 nope dims with a
// UE8M0 scale per 64, bf16 rope dims), the index lists in FlashMLA's form, q as bf16 codes, the sink.
// Tokens no valid slot references are NaN rows (the GPU test writes NaN bytes for them), so any
// stray read shows.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "reference/tensor.h"

namespace dsv4::cuda::attention::testing {

// What sparse_mqa(q, kv, sink, indices, n_heads, scale, policy) is given.
struct OracleInputs {
  ref::Mat q;             // [rows, n_heads * d]
  ref::Mat kv;            // [n, d]
  ref::Vec sink;          // [n_heads] (-inf: no sink)
  ref::IndexMat indices;  // [rows, slots] (-1: skip)
  int n_heads = 0;
  double scale = 0;  // the fp32 scale the kernels get, as a double
};

// Decode: FlashMLA's flash_mla_with_kvcache inputs, as values.
struct DecodeCase {
  std::string name;
  int batch = 1, s_q = 1, n_heads = 64;
  float scale = 0.044194173824159216f;  // 512^-0.5 in fp32
  int page_size = 256, extra_page_size = 64;
  ref::Mat pool_rows;   // [pages * page_size, 512]
  ref::Mat extra_rows;  // [extra_pages * extra_page_size, 512]
  int topk = 0, extra_topk = 0;
  std::vector<int32_t> list;           // [batch * s_q * topk]
  std::vector<int32_t> extra_list;     // [batch * s_q * extra_topk]
  std::vector<int32_t> lengths;        // [batch] or empty (no topk_length)
  std::vector<int32_t> extra_lengths;  // [batch] or empty
  std::vector<uint16_t> q;             // [batch * s_q * n_heads * 512] bf16 codes
  std::vector<float> sink;             // [n_heads] or empty (no sink)

  int64_t rows() const { return int64_t{batch} * s_q; }
  // Whether slot k of a list of row r is valid (within its length, an entry of its pool).
  bool valid(int64_t row, int slot) const;
  OracleInputs oracle_inputs() const;
};

// Prefill: FlashMLA's flash_mla_sparse_fwd inputs, as values.
struct PrefillCase {
  std::string name;
  int s_q = 1, n_heads = 64, head_dim = 512;
  float scale = 0.044194173824159216f;
  ref::Mat kv;  // [s_kv, head_dim] bf16 values (NaN: unreferenced)
  int topk = 0;
  std::vector<int32_t> list;     // [s_q * topk]
  std::vector<int32_t> lengths;  // [s_q] or empty
  std::vector<uint16_t> q;       // [s_q * n_heads * head_dim] bf16 codes
  std::vector<float> sink;       // [n_heads] or empty

  int64_t rows() const { return s_q; }
  bool valid(int64_t row, int slot) const;
  OracleInputs oracle_inputs() const;
};

// ---- building cases -----------------------------------------------------------------------------

// How a random case's index lists are damaged (the adversarial inputs of docs/cuda-attention.md "Checks").
struct Damage {
  double invalid_fraction = 0;     // this share of the slots gets an invalid entry (anywhere)
  int invalid_leading_blocks = 0;  // rows with an odd index: slots [0, 64 * this) all invalid
  bool empty_rows = false;         // every third row: no valid slot at all
  bool lengths = false;            // topk_length / extra_topk_length (prefill: per row) cut the lists
  bool out_of_range = false;       // invalid entries are >= the pool / s_kv, INT_MIN, INT_MAX, -123456
};

struct DecodeShape {
  std::string name;
  int batch = 1, s_q = 2, n_heads = 64;
  int topk = 128, extra_topk = 512;
  int page_size = 256, extra_page_size = 64;
  int window_tokens = 128;  // each sequence's tokens in the window pool
  int extra_tokens = 2048;  // each sequence's tokens in the compressed pool
  double kv_sigma = 0.3;    // spread of the kv values (logit spread follows)
  Damage damage;
  int sink_kind = 0;  // 0 random N(0,1), 1 none, 2 +inf, 3 -inf, 4 +80 (large), 5 -1e4, 6 mixed
};
DecodeCase make_decode_case(const DecodeShape& shape, std::mt19937_64& gen);

struct PrefillShape {
  std::string name;
  int s_q = 8, n_heads = 64, head_dim = 512;
  int64_t s_kv = 1000;
  int topk = 512;
  double kv_sigma = 0.3;
  Damage damage;
  int sink_kind = 0;
};
PrefillCase make_prefill_case(const PrefillShape& shape, std::mt19937_64& gen);

// Sets every kv row no valid slot references to NaN (after the lists are final).
void poison_unreferenced(DecodeCase& c);
void poison_unreferenced(PrefillCase& c);

// Values on the MODEL1 grid: nope dims FP8 e4m3 x UE8M0 per 64 (the oracle's fake-quant), rope bf16.
void to_model1_grid(ref::Mat& rows);

// ---- the oracle's answer and the bounds ---------------------------------------------------------

enum class ProbsKind { bf16, fp32 };

// Per query row and head: the oracle's output and what the checks need (docs/cuda-attention.md,
// "Checks"). lse and max_logit come from the oracle's own logits f32(scale * f32(q.kv)).
struct Expected {
  ref::Mat out;          // [rows, H*d] the oracle (official policy, or official with fp32 probabilities)
  ref::Mat lse;          // [rows, H] natural log, sink excluded; +inf for no valid slot
  ref::Mat max_logit;    // [rows, H] -inf for no valid slot
  ref::Mat weight_abs;   // [rows, H*d] C = sum_j w_j |v_j|, w_j = e^(s_j - M) / (sum e^(s_i - M) + e^(sink - M))
  ref::Mat weight_sq;    // [rows, H*d] sum_j (w_j v_j)^2
  ref::Mat rho_det;      // [rows, H] relative bound of everything but the probability rounding
  ref::Mat lse_bound;    // [rows, H]
  ref::Mat logit_bound;  // [rows, H] D: how far a kernel's fp32-accumulated logit may be from the oracle's
  int n_heads = 0, head_dim = 0;
  ProbsKind probs = ProbsKind::bf16;
};
Expected expected(const OracleInputs& in, ProbsKind probs);

// The outcome of one comparison; `report` names the worst element / row and the bound it broke.
struct Check {
  bool ok = true;
  int64_t bad = 0;         // elements (or rows) outside their bound
  double max_abs = 0;      // largest |got - expected|
  double max_rel = 0;      // largest |got - expected| / |expected| over nonzero expected
  double worst_ratio = 0;  // largest error / bound (<= 1 passes)
  std::string report;
};

// out (bf16 codes [rows, H*d]) against e.out: per element |got - exp| <= rho C (1 + 2^-7) +
// 2^-8 (|got| + |exp|) with rho = 2 u_P + rho_det; NaN / inf at exactly the same places; per
// (row, head) cos-diff within the statistical bound. docs/cuda-attention.md derives both.
Check check_out(const Expected& e, const std::vector<uint16_t>& got);
// lse [rows, H] (row-major as the expected matrix): |got - exp| <= lse_bound, +inf exactly where expected.
Check check_lse(const Expected& e, const std::vector<float>& got);
// max_logits [rows, H]: |got - exp| <= logit_bound, -inf exactly where expected.
Check check_max_logit(const Expected& e, const std::vector<float>& got);
// Bitwise: out codes equal to the oracle's bf16 codes, except at most `allowed_rows` (row, head)
// pairs whose values differ by one bf16 ulp (v1: exp's last bit, docs/cuda-attention.md).
Check check_out_bitwise(const Expected& e, const std::vector<uint16_t>& got, int allowed_rows);

// The oracle's output as bf16 codes (what a bitwise check compares with).
std::vector<uint16_t> bf16_codes(const ref::Mat& m);
// bf16 codes [rows, cols] -> values.
ref::Mat bf16_values(const std::vector<uint16_t>& codes, ref::Index rows, ref::Index cols);

}  // namespace dsv4::cuda::attention::testing
