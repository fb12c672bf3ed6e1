// DETFORGE_CUDA_GREEN_SMS (cuda_green.h, cuda_green_ops.cpp): a green context's stream runs its
// blocks on its partition's SMs only, and its events order the other streams; the r18vd engine
// with the decoder's value projections on that stream captures a graph that equals its eager
// forward and gives the default engine's outputs within the fp16 tolerance; the value
// projections are found on the host (no device).
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "backends/cuda/cuda_engine.h"
#include "backends/cuda/cuda_green.h"
#include "engine_settings.h"
#include "gpu_test_util.h"
#include "io/bundle_graph.h"
#include "r18_bundle.h"
#include "r18_compare.h"

namespace detforge::test {
namespace {

// The distinct SMs that `blocks` spinning blocks ran on when launched on s.
std::set<unsigned> sms_used(cudaStream_t s, int blocks) {
  unsigned* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, sizeof(unsigned) * blocks), cudaSuccess);
  cuda::record_block_sms(d, blocks, 200000, s);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  std::vector<unsigned> h(blocks);
  cudaMemcpy(h.data(), d, sizeof(unsigned) * blocks, cudaMemcpyDeviceToHost);
  cudaFree(d);
  return {h.begin(), h.end()};
}

TEST(CudaGreenRules, R18vdDecoderValueLinearsAreTheValueProjections) {
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto v = cuda::decoder_value_linears(lb.graph);
  ASSERT_EQ(v.size(), 3u);
  for (size_t k = 0; k < v.size(); ++k)
    EXPECT_EQ(lb.graph.ops[v[k]].name, "model.decoder.layers." + std::to_string(k) + ".encoder_attn.value_proj");
}

TEST(CudaGreen, StreamRunsOnItsPartitionOnly) {
  DETFORGE_REQUIRE_GPU();
  int sm_count = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  cuda::GreenStream g(0, 16);
  ASSERT_NE(g.stream(), nullptr) << g.problem();
  EXPECT_GE(g.sms(), 16);
  EXPECT_LT(g.sms(), sm_count);
  const int blocks = 4 * sm_count;
  const auto green = sms_used(g.stream(), blocks);
  EXPECT_LE(static_cast<int>(green.size()), g.sms()) << "blocks of the green stream ran outside its partition";
  EXPECT_GE(static_cast<int>(green.size()), g.sms() / 2) << "the probe's blocks should spread over the partition";
  cudaStream_t plain = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&plain, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_GT(static_cast<int>(sms_used(plain, blocks).size()), g.sms()) << "a plain stream's blocks use every SM";

  // An event of the green context, recorded on its stream, orders a plain stream after it.
  const std::vector<float> src = random_vec(1 << 16, -1, 1, 5);
  DevBuf a(src, false), b(src.size(), false), c(src.size(), false);
  cudaEvent_t ev = g.make_event();
  cuda::late_copy(a.get(), b.get(), src.size() * 4, 2000000, g.stream());  // a slow copy a -> b
  ASSERT_EQ(cudaEventRecord(ev, g.stream()), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(plain, ev, 0), cudaSuccess);
  cuda::plain_copy(b.get(), c.get(), src.size() * 4, plain);  // b -> c, after it
  ASSERT_EQ(cudaStreamSynchronize(plain), cudaSuccess);
  EXPECT_EQ(c.download(), src);
  cudaEventDestroy(ev);
  cudaStreamDestroy(plain);
}

TEST(CudaGreen, NoPartitionForTheWholeGpuSaysWhy) {
  DETFORGE_REQUIRE_GPU();
  int sm_count = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  cuda::GreenStream g(0, sm_count);
  EXPECT_EQ(g.stream(), nullptr);
  EXPECT_NE(g.problem().find("SMs asked for"), std::string::npos) << g.problem();
  EXPECT_THROW(g.make_event(), Error);
}

// The r18vd engine (fp16, batch 1 and 2) with the value projections on a 16-SM green stream,
// under the default LATE_VALUE (3) and with the projections free to start at once (0).
void r18vd_green(const std::string& late_value) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& g = lb.graph;
  const auto px = random_vec(2 * input_values_per_image(g), 0, 1, 77);
  const auto base = fp16_engine(g, 2, {late_value});
  auto eng = fp16_engine(g, 2, {"DETFORGE_CUDA_GREEN_SMS=16 " + late_value});
  auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
  ASSERT_NE(e, nullptr);
  for (int B : {1, 2}) {
    SCOPED_TRACE("batch " + std::to_string(B));
    const auto want = base->run(px.data(), B);
    const auto got = eng->run(px.data(), B);
    const auto st = e->green_stats(B);
    EXPECT_GE(st.sms, 16) << st.problem;
    EXPECT_EQ(st.ops, 3) << "the three value projections on the green stream";
    EXPECT_TRUE(e->graph_captured(B));
    EXPECT_EQ(e->graph_check(B), "equal");
    EXPECT_GE(e->graph_streams(B), 2);
    expect_r18vd_outputs_agree(want, got, B, 1e-2, "green vs default");
    // Replays give the same bits (the green stream's events order its consumers).
    const auto again = eng->run(px.data(), B);
    for (size_t o = 0; o < got.size(); ++o) EXPECT_EQ(again[o].data, got[o].data) << "output " << o;
  }
}

TEST(CudaGreen, R18vdValueProjectionsOnTheGreenStream) { r18vd_green(""); }
TEST(CudaGreen, R18vdValueProjectionsOnTheGreenStreamFromTheStart) { r18vd_green("DETFORGE_CUDA_LATE_VALUE=0"); }

}  // namespace
}  // namespace detforge::test
