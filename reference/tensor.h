#pragma once
// The oracle's value types. Every activation is held in double: exact mode computes the
// mathematics in fp64, and official mode rounds these doubles to the formats DeepSeek's code holds
// (bf16, fp32, fp8, fp4 values are all exactly representable in double), so one code path serves
// every precision policy.
#include <Eigen/Core>

#include <cstdint>
#include <vector>

namespace dsv4::ref {

// Row-major so that a token is a contiguous row, as in C-order HDF5 and PyTorch buffers.
using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::VectorXd;
using RowRef = Eigen::Ref<Eigen::RowVectorXd>;
using ConstRowRef = Eigen::Ref<const Eigen::RowVectorXd>;
using Index = Eigen::Index;

// Token-major index lists: one row per query token, -1 marks an unused slot.
using IndexMat = Eigen::Matrix<int32_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

}  // namespace dsv4::ref
