// A kernel project's test in miniature, built against the installed package: the oracle computes
// q_latent (reference/stages/projections.h) under the official policy; a "kernel result" is
// compared with it against the installed official tolerance table. The oracle's own result must
// pass and a result with one element off by 1.0 must fail, else the comparison proves nothing.
// Exit 0 when both verdicts are as expected.
#include <cstdio>
#include <span>

#include "reference/config.h"
#include "reference/precision.h"
#include "reference/stages/projections.h"
#include "reference/weights.h"
#include "verify/compare/dense.h"
#include "verify/tolerance/tolerance_table.h"

namespace ref = dsv4::ref;
namespace verify = dsv4::verify;

namespace {

verify::Status compare(const ref::Mat& oracle, const ref::Mat& kernel, const verify::Tolerance& tolerance) {
  const int64_t shape[] = {oracle.rows(), oracle.cols()};
  return verify::compare_dense(std::span<const double>(oracle.data(), oracle.size()),
                               std::span<const double>(kernel.data(), kernel.size()), shape, tolerance)
      .status;
}

}  // namespace

int main() {
  const ref::ModelConfig cfg = ref::ModelConfig::tiny();
  const ref::AttentionWeights weights = ref::AttentionWeights::random(cfg, 0, 7);
  ref::Mat x(3, cfg.dim);  // [s, dim]
  for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<double>((i * 37) % 101) / 50.0 - 1.0;

  const ref::Mat oracle = ref::q_latent(weights, x, cfg, ref::PrecisionPolicy::official());  // [s, q_lora_rank]
  const verify::ToleranceTable table = verify::ToleranceTable::for_precision("official", DSV4_TOLERANCES);
  const verify::Tolerance& tolerance = table.at("q_latent");

  ref::Mat perturbed = oracle;
  perturbed(1, 2) += 1.0;
  const verify::Status same = compare(oracle, oracle, tolerance);
  const verify::Status off = compare(oracle, perturbed, tolerance);
  std::printf("q_latent [%ld, %ld], tolerances %s: oracle vs itself %s, one element off by 1.0 %s\n",
              static_cast<long>(oracle.rows()), static_cast<long>(oracle.cols()), table.source().c_str(),
              verify::to_string(same).c_str(), verify::to_string(off).c_str());
  return same == verify::Status::pass && off == verify::Status::fail ? 0 : 1;
}
