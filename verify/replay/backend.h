#pragma once
// What computes each stage during a replay: a ref::StageProvider (reference/stage_provider.h). The
// oracle computes every stage; the CUDA backend overrides the entries it has kernels for and
// inherits the rest, so the replay swaps backends without knowing which code runs.
#include <memory>
#include <stdexcept>
#include <string>

#include "reference/stage_provider.h"

namespace dsv4::verify {

// A backend that cannot run here (not built, no device, a precision it does not implement).
class BackendUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "cpu" (or "oracle") or "cuda"; `precision` is the policy the replay runs. Throws
// BackendUnavailable saying why (e.g. "cuda backend not built / no GPU: ..."),
// std::invalid_argument for an unknown name.
std::unique_ptr<ref::StageProvider> make_backend(const std::string& name, const std::string& precision);

// The CUDA backend (cuda_backend.cpp): the stages cuda/ has kernels for, when the build has them
// (DSV4_HAVE_CUDA), every other stage from the oracle. Throws BackendUnavailable when not built,
// without a usable GPU, or for a precision other than official.
std::unique_ptr<ref::StageProvider> make_cuda_backend(const std::string& precision);

}  // namespace dsv4::verify
