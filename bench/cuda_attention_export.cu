// Writes the attention benchmark's inputs (the very bytes bench/cuda_attention_bench.cu times) and
// this project's mma kernel outputs on them to a directory, for bench/python_attention_bench.py to
// run FlashMLA (when installed) and PyTorch gather + einsum on the same tensors and diff the outputs:
//
//   dsv4-cuda-attention-export OUT_DIR
//
// One subdirectory per shape (the largest batch of each decode shape; the script slices the smaller
// batches off its front), each with meta.json and raw little-endian files:
//   decode:  q.bin uint16 [b, s_q, h, 512] (bf16), window_pool.bin / extra_pool.bin uint8 (MODEL1
//            pages, verify/layouts/flashmla_model1.h), window_idx.bin / extra_idx.bin int32
//            [b, s_q, topk], sink.bin fp32 [h], out.bin uint16 [b, s_q, h, 512], lse.bin fp32 [b, h, s_q]
//            (out and lse: this project's mma kernel, bf16 probabilities, at the largest batch;
//            the kernel's rows do not depend on the batch, so the script compares slices);
//   prefill: q.bin [s_q, h, 512], kv.bin uint16 [s_kv, 512], idx.bin int32 [s_q, topk], sink.bin,
//            out.bin, lse.bin fp32 [s_q, h], max_logits.bin fp32 [s_q, h].
#include <cuda_runtime.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/attention_bench_inputs.cuh"
#include "cuda/attention/sparse_mqa_api.h"
#include "cuda/common/cuda_check.h"

using namespace dsv4;
using namespace dsv4::bench;
namespace attn = dsv4::cuda::attention;

namespace {

void make_dir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) throw std::runtime_error("cannot create directory " + path);
}

template <typename T>
void write_device(const std::string& path, const DeviceBuffer<T>& b) {
  const std::vector<T> host = b.download();
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(host.data()), static_cast<std::streamsize>(host.size() * sizeof(T)));
  if (!f) throw std::runtime_error("cannot write " + path);
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  if (!f) throw std::runtime_error("cannot write " + path);
}

// The inputs (the first time, with v2) and the outputs of version v: out_<v>.bin, lse_<v>.bin.
void export_decode(const std::string& dir, DecodeShape shape, attn::Variant v) {
  make_dir(dir);
  const DecodeInputs in(shape);
  const attn::DecodeArgs a = in.args(attn::Probs::bf16);
  const size_t ws_bytes = attn::decode_workspace_bytes(a, v);
  DeviceBuffer<uint8_t> ws(ws_bytes);
  attn::sparse_mqa_decode(a, v, ws.get(), ws_bytes);
  CUDA_CHECK(cudaDeviceSynchronize());
  write_device(dir + "/out_" + variant_name(v) + ".bin", in.out);
  write_device(dir + "/lse_" + variant_name(v) + ".bin", in.lse);
  if (v != attn::Variant::v2) {
    std::printf("exported %s outputs of %s\n", dir.c_str(), variant_name(v));
    return;
  }
  write_device(dir + "/q.bin", in.q);
  write_device(dir + "/window_pool.bin", in.window_pool);
  write_device(dir + "/extra_pool.bin", in.extra_pool);
  write_device(dir + "/window_idx.bin", in.window_idx);
  write_device(dir + "/extra_idx.bin", in.extra_idx);
  write_device(dir + "/sink.bin", in.sink);
  char meta[1024];
  std::snprintf(
      meta, sizeof meta,
      "{\"kind\": \"decode\", \"name\": \"%s\", \"batch\": %d, \"s_q\": %d, \"n_heads\": %d, \"head_dim\": 512,\n"
      " \"topk\": %d, \"extra_topk\": %d, \"page_size\": %d, \"window_pages\": %d, \"extra_page_size\": %d,\n"
      " \"extra_pages\": %lld, \"window_page_bytes\": %lld, \"extra_page_bytes\": %lld,\n"
      " \"softmax_scale\": %.17g, \"flops_per_row\": %.17g, \"bytes\": %.17g, \"batches\": [64, 128, 256]}\n",
      shape.name, shape.batch, shape.s_q, shape.n_heads, kWindowTokens, shape.extra_topk, kWindowPage, shape.batch,
      kExtraPage, static_cast<long long>(int64_t{shape.batch} * shape.extra_tokens / kExtraPage),
      static_cast<long long>(attn::model1_page_bytes(kWindowPage)),
      static_cast<long long>(attn::model1_page_bytes(kExtraPage)), static_cast<double>(a.softmax_scale),
      in.flops() / static_cast<double>(shape.rows()), in.bytes());
  write_text(dir + "/meta.json", meta);
  std::printf("exported %s (batch %d)\n", dir.c_str(), shape.batch);
}

void export_prefill(const std::string& dir, const PrefillShape& shape, attn::Variant v) {
  make_dir(dir);
  const PrefillInputs in(shape);
  attn::sparse_mqa_prefill(in.args(attn::Probs::bf16), v);
  CUDA_CHECK(cudaDeviceSynchronize());
  write_device(dir + "/out_" + variant_name(v) + ".bin", in.out);
  write_device(dir + "/lse_" + variant_name(v) + ".bin", in.lse);
  if (v != attn::Variant::v2) {
    std::printf("exported %s outputs of %s\n", dir.c_str(), variant_name(v));
    return;
  }
  write_device(dir + "/q.bin", in.q);
  write_device(dir + "/kv.bin", in.kv);
  write_device(dir + "/idx.bin", in.idx);
  write_device(dir + "/sink.bin", in.sink);
  char meta[1024];
  std::snprintf(
      meta, sizeof meta,
      "{\"kind\": \"prefill\", \"name\": \"%s\", \"s_q\": %d, \"n_heads\": %d, \"head_dim\": 512, \"topk\": %d,\n"
      " \"s_kv\": %lld, \"softmax_scale\": %.17g, \"flops\": %.17g, \"bytes\": %.17g}\n",
      shape.name, shape.s_q, shape.n_heads, shape.topk, static_cast<long long>(shape.s_kv), 0.044194173824159216,
      in.flops(), in.bytes());
  write_text(dir + "/meta.json", meta);
  std::printf("exported %s\n", dir.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  try {
    const std::string root = argv[1];
    make_dir(root);
    // every shape's inputs and v2 outputs first, then v3's, v4's, v5's, v7's: should a newer one fail on the
    // device (a trap leaves the CUDA context unusable), the comparison still has the earlier data
    for (attn::Variant v :
         {attn::Variant::v2, attn::Variant::v3, attn::Variant::v4, attn::Variant::v5, attn::Variant::v7}) {
      export_decode(root + "/decode_flash", DecodeShape{"Flash_h64_w128+top512", 64, 512, 2048, 256, 2}, v);
      export_decode(root + "/decode_pro", DecodeShape{"Pro_h128_w128+top1024", 128, 1024, 4096, 256, 2}, v);
      export_prefill(root + "/prefill_flash_8k", PrefillShape{"Flash_h64_top512_kv8K", 64, 512, 8192, 4096}, v);
      export_prefill(root + "/prefill_flash_64k", PrefillShape{"Flash_h64_top512_kv64K", 64, 512, 65536, 4096}, v);
      export_prefill(root + "/prefill_pro_8k", PrefillShape{"Pro_h128_top1024_kv8K", 128, 1024, 8192, 4096}, v);
      export_prefill(root + "/prefill_pro_64k", PrefillShape{"Pro_h128_top1024_kv64K", 128, 1024, 65536, 4096}, v);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsv4-cuda-attention-export: %s\n", e.what());
    return 1;
  }
  return 0;
}
