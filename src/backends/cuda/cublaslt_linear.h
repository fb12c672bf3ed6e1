// One linear layer, y[M,N] = x[M,K] W[N,K]^T + b (+ residual) (+ ReLU), through cuBLASLt for
// one row count M (= batch * tokens). Row-major y is column-major y^T, so the call computes
// y^T = W x^T with A = W (transposed), B = x.
//
// fp32: CUBLAS_COMPUTE_32F (never _FAST_TF32). fp16: half storage, CUBLAS_COMPUTE_32F
// accumulation. Only ReLU is fused in the epilogue: cuBLASLt's GELU epilogue is the tanh
// approximation (up to 4.7e-4 off the erf form the model needs), so GELU, SiLU and sigmoid
// are left to the caller's kernel.
#pragma once
#include <cublasLt.h>

#include <cstddef>
#include <string>
#include <vector>

namespace detforge::cuda {

class LtLinear {
 public:
  // sm_target > 0: cuBLASLt's heuristic plans for that many SMs (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET),
  // leaving the others to kernels on concurrent streams.
  LtLinear(cublasLtHandle_t h, int M, int N, int K, bool half, bool bias, bool relu, bool residual,
           size_t ws_limit, const std::string& what, int sm_target = 0);
  ~LtLinear();
  LtLinear(const LtLinear&) = delete;
  LtLinear& operator=(const LtLinear&) = delete;
  void run(const void* x, const void* w, const void* bias, const void* residual, void* y, void* ws,
           cudaStream_t s) const;
  size_t workspace_bytes() const { return ws_sizes_[chosen_]; }
  // The heuristic's deterministic candidates (up to 8, its order; 0 is what run() uses until
  // choose()); DETFORGE_CUDA_LT_TUNE times them (CudaEngine::tune_lt).
  int candidates() const { return static_cast<int>(algos_.size()); }
  void run_candidate(int k, const void* x, const void* w, const void* bias, const void* residual, void* y, void* ws,
                     cudaStream_t s) const;
  void choose(int k);
  int chosen() const { return chosen_; }

 private:
  cublasLtHandle_t h_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos_;
  std::vector<size_t> ws_sizes_;
  int chosen_ = 0;
  void check_candidate(int k) const;  // throws naming the linear when k is out of range
  bool residual_ = false;
  std::string what_;
};

}  // namespace detforge::cuda
