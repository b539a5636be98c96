// The CUDA backend: the compressor stages (main and indexer) run on the kernels of cuda/compressor
// through their oracle-typed wrappers (cuda/compressor/oracle_mirror.h); the gate projections
// wkv(x), wgate(x) and every other stage come from the oracle. Built with the kernels only when the
// build has them (target dsv4_cuda defines DSV4_HAVE_CUDA for this file); otherwise asking for it
// says so. Extension point: a stage gets a kernel by overriding its ref::StageProvider entry here
// and listing the entry in computes() (docs/architecture.md "Add a kernel").
#include "verify/replay/backend.h"

#include "reference/layer.h"

#ifdef DSV4_HAVE_CUDA
#include <cuda_runtime.h>

#include "cuda/compressor/oracle_mirror.h"
#endif

namespace dsv4::verify {

#ifdef DSV4_HAVE_CUDA
namespace {

class CudaBackend : public ref::StageProvider {
 public:
  std::string name() const override { return "cuda"; }
  bool computes(ref::StageEntry entry) const override { return entry == ref::StageEntry::compress; }
  ref::CompressorOutput compress(const ref::AttentionLayer& l, ref::CompressorKind kind, const ref::Mat& x,
                                 int64_t start_pos, ref::CompressorState& state) const override {
    const ref::CompressorWeights& w =
        kind == ref::CompressorKind::main ? l.weights().compressor : l.weights().indexer.compressor;
    const ref::CompressorProjections proj = ref::compressor_projections(w, x, l.policy());
    return cuda::compress(w, kind, proj, start_pos, state, l.rope(), l.config().norm_eps);
  }
};

}  // namespace

std::unique_ptr<ref::StageProvider> make_cuda_backend(const std::string& precision) {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    throw BackendUnavailable(std::string("cuda backend not built / no GPU: the build has the kernels, but no GPU is usable (") +
                             (status != cudaSuccess ? cudaGetErrorString(status) : "no device") + ")");
  }
  if (precision != "official") {
    throw BackendUnavailable("cuda backend: the kernels implement the official precision only, the replay asks for '" +
                             precision + "'");
  }
  return std::make_unique<CudaBackend>();
}
#else
std::unique_ptr<ref::StageProvider> make_cuda_backend(const std::string&) {
  throw BackendUnavailable(
      "cuda backend not built / no GPU: this dsv4-verify was built without the CUDA kernels (configure with nvcc on "
      "the PATH and -DDSV4_BUILD_CUDA=ON)");
}
#endif

}  // namespace dsv4::verify
