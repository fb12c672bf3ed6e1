#include "backends/cuda/cublaslt_linear.h"

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {

namespace {
void check(cublasStatus_t st, const char* call, const std::string& what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw Error("cuBLASLt error in " + std::string(call) + " for " + what + ": status " +
                std::to_string(static_cast<int>(st)));
}
}  // namespace
#define DF_LT(call) check((call), #call, what_)

LtLinear::LtLinear(cublasLtHandle_t h, int M, int N, int K, bool half, bool bias, bool relu, bool residual,
                   size_t ws_limit, const std::string& what, int sm_target)
    : h_(h), residual_(residual), what_(what) {
  const cudaDataType_t dt = half ? CUDA_R_16F : CUDA_R_32F;
  DF_LT(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  DF_LT(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  DF_LT(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  cublasLtEpilogue_t epi = bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
  DF_LT(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (bias) {
    cudaDataType_t bt = dt;
    DF_LT(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
  }
  if (sm_target > 0)
    DF_LT(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sm_target, sizeof(sm_target)));
  DF_LT(cublasLtMatrixLayoutCreate(&a_, dt, K, N, K));  // W: col-major K x N, op T -> N x K
  DF_LT(cublasLtMatrixLayoutCreate(&b_, dt, K, M, K));  // x: col-major K x M
  DF_LT(cublasLtMatrixLayoutCreate(&c_, dt, N, M, N));  // y: col-major N x M
  cublasLtMatmulPreference_t pref = nullptr;
  DF_LT(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t lim = ws_limit;
  DF_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lim, sizeof(lim)));
  cublasLtMatmulHeuristicResult_t res[8];
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h_, op_, a_, b_, c_, c_, pref, 8, res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  check(st, "cublasLtMatmulAlgoGetHeuristic", what_);
  if (found == 0)
    throw Error("linear " + what_ + ": cuBLASLt has no algorithm for M=" + std::to_string(M) + " N=" +
                std::to_string(N) + " K=" + std::to_string(K));
  for (int k = 0; k < found; ++k) {
    // An in-place split-K reduction may accumulate through atomics: not bit-reproducible, so
    // never a candidate (the first result is kept whatever it is, as before).
    int32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
    size_t got = 0;
    if (k > 0 && cublasLtMatmulAlgoConfigGetAttribute(&res[k].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                                      sizeof(scheme), &got) == CUBLAS_STATUS_SUCCESS &&
        scheme == CUBLASLT_REDUCTION_SCHEME_INPLACE)
      continue;
    algos_.push_back(res[k].algo);
    ws_sizes_.push_back(res[k].workspaceSize);
  }
  choose(0);
}

void LtLinear::check_candidate(int k) const {
  if (k < 0 || k >= candidates()) throw Error("linear " + what_ + ": no cuBLASLt candidate " + std::to_string(k));
}

void LtLinear::choose(int k) {
  check_candidate(k);
  chosen_ = k;
}

LtLinear::~LtLinear() {
  if (c_) cublasLtMatrixLayoutDestroy(c_);
  if (b_) cublasLtMatrixLayoutDestroy(b_);
  if (a_) cublasLtMatrixLayoutDestroy(a_);
  if (op_) cublasLtMatmulDescDestroy(op_);
}

void LtLinear::run(const void* x, const void* w, const void* bias, const void* residual, void* y, void* ws,
                   cudaStream_t s) const {
  run_candidate(chosen_, x, w, bias, residual, y, ws, s);
}

void LtLinear::run_candidate(int k, const void* x, const void* w, const void* bias, const void* residual, void* y,
                             void* ws, cudaStream_t s) const {
  check_candidate(k);
  fence_before_library(s);
  const float one = 1.f, zero = 0.f;
  if (bias) DF_LT(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  // The residual enters as C with beta = 1, before the epilogue: y = act(xW^T + res + b).
  const void* c = residual_ ? residual : y;
  DF_LT(cublasLtMatmul(h_, op_, &one, w, a_, x, b_, residual_ ? &one : &zero, c, c_, y, c_, &algos_[k], ws,
                       ws_sizes_[k], s));
}

}  // namespace detforge::cuda
