#pragma once
// Device memory as a value: DeviceBuffer<T> owns n elements (cudaMalloc / cudaFree), copies to and
// from host vectors, and can be poisoned with a byte pattern. GuardedBuffer<T> adds guard bytes on
// both sides of the n elements (a canary pattern checked after a kernel ran) so that a write past
// either end of an output is caught even when it lands in memory the allocator owns.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cuda/common/cuda_check.h"

namespace dsv4::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n_ > 0) CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), n_ * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);  // no throw from a destructor; a failing free means a dead context
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(n_, o.n_);
    return *this;
  }

  T* get() const { return ptr_; }
  size_t size() const { return n_; }

  void upload(const std::vector<T>& host) {
    if (host.size() != n_)
      throw std::invalid_argument("DeviceBuffer::upload: expected " + std::to_string(n_) + " elements, got " +
                                  std::to_string(host.size()));
    if (n_ > 0) CUDA_CHECK(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    if (n_ > 0) CUDA_CHECK(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  void fill_bytes(uint8_t byte) {
    if (n_ > 0) CUDA_CHECK(cudaMemset(ptr_, byte, n_ * sizeof(T)));
  }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

// n elements of T between two guard zones of kGuardBytes bytes each, filled with kGuardByte.
template <typename T>
class GuardedBuffer {
 public:
  static constexpr size_t kGuardBytes = 256;  // a multiple of every alignment a kernel assumes (16)
  static constexpr uint8_t kGuardByte = 0xA5;

  explicit GuardedBuffer(size_t n) : n_(n), raw_(2 * kGuardBytes + n * sizeof(T)) { raw_.fill_bytes(kGuardByte); }
  T* get() const { return reinterpret_cast<T*>(raw_.get() + kGuardBytes); }
  size_t size() const { return n_; }

  void upload(const std::vector<T>& host) {
    if (host.size() != n_)
      throw std::invalid_argument("GuardedBuffer::upload: expected " + std::to_string(n_) + " elements, got " +
                                  std::to_string(host.size()));
    if (n_ > 0) CUDA_CHECK(cudaMemcpy(get(), host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    if (n_ > 0) CUDA_CHECK(cudaMemcpy(host.data(), get(), n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // Poisons the payload (not the guards) with a byte pattern, e.g. 0xFF (NaN for fp32 and bf16).
  void poison(uint8_t byte) {
    if (n_ > 0) CUDA_CHECK(cudaMemset(get(), byte, n_ * sizeof(T)));
  }
  // Number of guard bytes that no longer hold kGuardByte (0 when nothing wrote outside the payload).
  size_t damaged_guard_bytes() const {
    const std::vector<uint8_t> all = raw_.download();
    size_t bad = 0;
    for (size_t i = 0; i < kGuardBytes; ++i) bad += all[i] != kGuardByte;
    for (size_t i = all.size() - kGuardBytes; i < all.size(); ++i) bad += all[i] != kGuardByte;
    return bad;
  }

 private:
  size_t n_;
  DeviceBuffer<uint8_t> raw_;
};

}  // namespace dsv4::cuda
