// DETFORGE_CUDA_PRIORITY=1 on the r18vd-shaped model: the kernels of the ops on the longest path
// get the greatest graph-node priority, and the outputs are bit for bit those without (priority
// changes when blocks start, not what they compute).
#include <cstdio>
#include <vector>

#include "backends/cuda/cuda_engine.h"
#include "engine_settings.h"
#include "gpu_test_util.h"
#include "io/bundle_graph.h"
#include "r18_bundle.h"

namespace detforge::test {
namespace {

TEST(CudaPriority, R18vdCriticalKernelsPrioritizedSameOutputs) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  std::vector<float> px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]), 0, 1, 31);
  std::vector<HostTensor> out[2];
  for (int k = 0; k < 2; ++k) {
    auto eng = fp16_engine(lb.graph, 1, {k == 0 ? "DETFORGE_CUDA_PRIORITY=0" : "DETFORGE_CUDA_PRIORITY=1"});
    auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
    ASSERT_NE(e, nullptr);
    ASSERT_TRUE(e->graph_captured(1));
    const int crit = e->critical_op_count(), n = static_cast<int>(e->graph().ops.size());
    EXPECT_GT(crit, n / 4);  // the backbone, encoder and decoder chains
    EXPECT_LT(crit, n);      // not the shortcut convs, value projections, class heads
    if (k == 0) EXPECT_EQ(e->graph_prioritized(1), 0);
    if (k == 1) EXPECT_GE(e->graph_prioritized(1), crit / 2);
    EXPECT_EQ(e->graph_check(1), "equal");
    std::printf("priority %d: %d of %d ops critical, %d kernel nodes prioritized\n", k, crit, n,
                e->graph_prioritized(1));
    out[k] = e->run(px.data(), 1);
  }
  ASSERT_EQ(out[0].size(), out[1].size());
  for (size_t o = 0; o < out[0].size(); ++o) EXPECT_EQ(out[0][o].data, out[1][o].data) << "output " << o;
}

}  // namespace
}  // namespace detforge::test
