// Library kernels side by side on two streams, outside the engine: the r18vd engine's captured
// graph differs from its eager forward when cuDNN's precompiled sm90 convs (engine 41) overlap
// each other or cuBLASLt GEMMs (NOTES.md v11: conflicting_convs named backbone stage 1's 3x3/2
// conv and its 2x2/2 shortcut; 1x1 convs as cuBLASLt linears beside the ordered chain broke it
// too). Here the same shapes run alone: a captured two-stream graph (one op per stream, fork and
// join) replayed on changing inputs must give the bits of the two ops run one after the other.
// They passed (0 of 240 replays differ, ninth session): the engine's defect was early-start
// edges from stream capture, not the kernels themselves (NOTES.md v12).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "library_ops.h"

namespace detforge::test {
namespace {

// Runs a and b serially for every input version (the reference), then captures a and b on two
// streams and replays the graph `reps` times over the versions; returns how many replays gave
// other bits than the serial run.
int overlapped_replays_that_differ(Op& a, Op& b, int reps, std::string* first) {
  cudaStream_t s0 = nullptr, s1 = nullptr;
  cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
  std::vector<std::vector<uint16_t>> ra(kInputs), rb(kInputs);
  for (int k = 0; k < kInputs; ++k) {
    a.use_input(k, s0);
    b.use_input(k, s0);
    a.launch(s0);
    b.launch(s0);
    cudaStreamSynchronize(s0);
    ra[k] = a.output();
    rb[k] = b.output();
  }
  cudaEvent_t fork = nullptr, join = nullptr;
  cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
  cudaEventCreateWithFlags(&join, cudaEventDisableTiming);
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ex = nullptr;
  cudaStreamBeginCapture(s0, cudaStreamCaptureModeThreadLocal);
  cudaEventRecord(fork, s0);
  cudaStreamWaitEvent(s1, fork, 0);
  a.launch(s0);
  b.launch(s1);
  cudaEventRecord(join, s1);
  cudaStreamWaitEvent(s0, join, 0);
  EXPECT_EQ(cudaStreamEndCapture(s0, &g), cudaSuccess);
  EXPECT_EQ(cudaGraphInstantiate(&ex, g, 0), cudaSuccess);
  int differ = 0;
  for (int r = 0; r < reps && ex; ++r) {
    const int k = r % kInputs;
    a.use_input(k, s0);
    b.use_input(k, s0);
    cudaGraphLaunch(ex, s0);
    cudaStreamSynchronize(s0);
    const bool da = a.output() != ra[k], db = b.output() != rb[k];
    if ((da || db) && differ++ == 0)
      *first = "replay " + std::to_string(r) + ": " + (da ? a.name : "") + (da && db ? " and " : "") + (db ? b.name : "");
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  if (ex) cudaGraphExecDestroy(ex);
  if (g) cudaGraphDestroy(g);
  cudaEventDestroy(fork);
  cudaEventDestroy(join);
  cudaStreamDestroy(s0);
  cudaStreamDestroy(s1);
  return differ;
}

class CudaLibraryOverlap : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible";
    ASSERT_EQ(cudnnCreate(&dnn_), CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtCreate(&lt_), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    if (dnn_) cudnnDestroy(dnn_);
    if (lt_) cublasLtDestroy(lt_);
  }
  void expect_overlap_safe(Op& a, Op& b) {
    std::printf("overlap: %s | %s\n", a.name.c_str(), b.name.c_str());
    std::string first;
    const int d = overlapped_replays_that_differ(a, b, 240, &first);
    std::printf("  %d of 240 replays differ from the serial run%s%s\n", d, d ? ", first " : "", first.c_str());
    EXPECT_EQ(d, 0) << a.name << " beside " << b.name << ": " << first;
  }
  cudnnHandle_t dnn_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
};

// Backbone stage 1's first conv (3x3/2, 64 -> 128 at 160x160, ReLU) and its shortcut (the
// avg-pool folded 2x2/2 conv): the pair conflicting_convs named, each reading its own input here.
TEST_F(CudaLibraryOverlap, Stage1ConvAndItsShortcutConv) {
  auto a = conv_op(dnn_, shape(160, 64, 128, 3, 2, 1), graph::Act::relu, 1);
  auto b = conv_op(dnn_, shape(160, 64, 128, 2, 2, 0), graph::Act::none, 101);
  expect_overlap_safe(*a, *b);
}

// The same pair reading one input buffer, as in the engine.
TEST_F(CudaLibraryOverlap, Stage1ConvAndItsShortcutConvOnOneInput) {
  auto a = conv_op(dnn_, shape(160, 64, 128, 3, 2, 1), graph::Act::relu, 1);
  auto b = conv_op(dnn_, shape(160, 64, 128, 2, 2, 0), graph::Act::none, 101);
  b->read_input_of(*a);
  expect_overlap_safe(*a, *b);
}

// Stage 1's 3x3/2 conv beside a cuBLASLt GEMM of stage 0's 1x1 shortcut shape (25600 x 64 x 64)
// and of an encoder input projection (6400 x 256 x 128).
TEST_F(CudaLibraryOverlap, Stage1ConvAndCublasLtGemms) {
  auto a = conv_op(dnn_, shape(160, 64, 128, 3, 2, 1), graph::Act::relu, 1);
  auto g1 = gemm_op(lt_, 25600, 64, 64, 201);
  expect_overlap_safe(*a, *g1);
  auto g2 = gemm_op(lt_, 6400, 256, 128, 301);
  expect_overlap_safe(*a, *g2);
}

// Two more engine-41 convs of the backbone side by side: stage 2's 3x3/2 (128 -> 256 at 80x80)
// and its shortcut (2x2/2).
TEST_F(CudaLibraryOverlap, Stage2ConvAndItsShortcutConv) {
  auto a = conv_op(dnn_, shape(80, 128, 256, 3, 2, 1), graph::Act::relu, 7);
  auto b = conv_op(dnn_, shape(80, 128, 256, 2, 2, 0), graph::Act::none, 107);
  expect_overlap_safe(*a, *b);
}

}  // namespace
}  // namespace detforge::test
