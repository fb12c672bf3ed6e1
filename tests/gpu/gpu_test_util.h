// Helpers for the GPU tests: skip without a device, device buffers in fp32 or fp16 storage,
// random inputs, and comparisons. Every test here carries the ctest label "gpu".
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/half.h"

namespace detforge::test {

inline bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// Kernel tests parameterised over the storage type (GetParam(): true = fp16), with the tolerances
// of a comparison against a host loop; they skip when no GPU is visible.
class StorageParamTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible";
  }
  bool half() const { return GetParam(); }
  float atol() const { return half() ? 2e-2f : 1e-5f; }
  float rtol() const { return half() ? 1e-2f : 1e-5f; }
};

// A device buffer holding fp32 values in fp32 or fp16 storage.
class DevBuf {
 public:
  DevBuf(size_t n, bool half) : n_(n), half_(half) {
    if (cudaMalloc(&p_, n * (half ? 2 : 4) + 16) != cudaSuccess) throw std::runtime_error("cudaMalloc");
    cudaMemset(p_, 0xff, n * (half ? 2 : 4));  // poison: NaN in both formats
  }
  DevBuf(const std::vector<float>& v, bool half) : DevBuf(v.size(), half) { upload(v); }
  ~DevBuf() { cudaFree(p_); }
  DevBuf(const DevBuf&) = delete;
  void upload(const std::vector<float>& v) {
    if (half_) {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = fp32_to_fp16(v[i]);
      cudaMemcpy(p_, h.data(), h.size() * 2, cudaMemcpyHostToDevice);
    } else {
      cudaMemcpy(p_, v.data(), v.size() * 4, cudaMemcpyHostToDevice);
    }
  }
  std::vector<float> download() const {
    cudaDeviceSynchronize();
    std::vector<float> v(n_);
    if (half_) {
      std::vector<uint16_t> h(n_);
      cudaMemcpy(h.data(), p_, n_ * 2, cudaMemcpyDeviceToHost);
      for (size_t i = 0; i < n_; ++i) v[i] = fp16_to_fp32(h[i]);
    } else {
      cudaMemcpy(v.data(), p_, n_ * 4, cudaMemcpyDeviceToHost);
    }
    return v;
  }
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
  size_t n_;
  bool half_;
};

// Values as the device sees them: rounded through fp16 when half.
inline std::vector<float> quantize(std::vector<float> v, bool half) {
  if (half)
    for (auto& x : v) x = fp16_to_fp32(fp32_to_fp16(x));
  return v;
}

inline std::vector<float> random_vec(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// max |a-b| <= atol + rtol*|b| for every element, and no NaN.
inline ::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& want, float atol,
                                        float rtol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) || std::fabs(got[i] - want[i]) > atol + rtol * std::fabs(want[i]))
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << want[i];
  }
  return ::testing::AssertionSuccess();
}

}  // namespace detforge::test

#define DETFORGE_REQUIRE_GPU()                                                   \
  do {                                                                           \
    if (!::detforge::test::have_gpu()) GTEST_SKIP() << "no CUDA device visible"; \
  } while (0)
