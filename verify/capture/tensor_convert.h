#pragma once
// Between capture tensors (the file's shapes) and the oracle's values (reference/tensor.h):
//   a batched stage tensor [b, n, ...] is b matrices [n, prod(...)], one per sequence, so
//   q [b,s,H,d] <-> b x Mat [s, H*d], attn/wo_a [b,s,G,o_lora_rank] <-> b x Mat [s, G*o_lora_rank],
//   compressor/state_kv [b, coff*r, coff*d] <-> b x Mat [coff*r, coff*d];
//   a weight [rows, cols] is a Mat, a weight [n] a Vec.
// Bad shapes throw std::invalid_argument naming both shapes.
#include <cstdint>
#include <string>
#include <vector>

#include "reference/stages/compressor.h"
#include "reference/tensor.h"
#include "verify/capture/capture.h"

namespace dsv4::verify {

// [b, n, ...] (rank >= 2) -> b matrices [n, prod(...)]
std::vector<ref::Mat> to_mats(const Tensor& t);
// Same for index tensors; values must be integers in int32 range.
std::vector<ref::IndexMat> to_index_mats(const Tensor& t);
// b matrices [n, c] -> a tensor of `shape` = [b, n, ...] with prod(...) == c.
Tensor from_mats(const std::vector<ref::Mat>& mats, std::vector<int64_t> shape, std::string dtype = "float32");
Tensor from_index_mats(const std::vector<ref::IndexMat>& mats, std::vector<int64_t> shape);

// compressor/state_kv and compressor/state_score [b, coff*r, coff*d] -> b states of ratio r, head dim d.
std::vector<ref::CompressorState> to_compressor_states(const Tensor& kv, const Tensor& score, int ratio, int head_dim);

// Weights: [rows, cols] <-> Mat, [n] <-> Vec.
ref::Mat to_mat(const Tensor& t);
ref::Vec to_vec(const Tensor& t);
Tensor weight_tensor(const ref::Mat& m);
Tensor weight_tensor(const ref::Vec& v);
inline void assign_weight(ref::Mat& m, const Tensor& t) { m = to_mat(t); }
inline void assign_weight(ref::Vec& v, const Tensor& t) { v = to_vec(t); }

}  // namespace dsv4::verify
