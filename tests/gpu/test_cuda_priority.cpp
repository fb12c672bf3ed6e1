// DETFORGE_CUDA_PRIORITY on the r18vd-shaped model: mode 1 (the capturing stream's attribute) and
// mode 2 (the attribute set on the captured nodes). Priority changes when blocks start, not what
// they compute: the outputs are bit for bit those of mode 0. Every kernel node of a critical op is
// counted as set or refused, and at least one mode sets some (both unmeasured: NOTES.md v14).
#include <algorithm>
#include <cstdio>
#include <string>
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
  std::vector<HostTensor> out[3];
  int most_set = 0;
  for (int mode = 0; mode < 3; ++mode) {
    SCOPED_TRACE("DETFORGE_CUDA_PRIORITY=" + std::to_string(mode));
    auto eng = fp16_engine(lb.graph, 1, {"DETFORGE_CUDA_PRIORITY=" + std::to_string(mode)});
    auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
    ASSERT_NE(e, nullptr);
    ASSERT_TRUE(e->graph_captured(1));
    const int crit = e->critical_op_count(), n = static_cast<int>(e->graph().ops.size());
    EXPECT_GT(crit, n / 4);  // the backbone, encoder and decoder chains
    EXPECT_LT(crit, n);      // not the shortcut convs, value projections, class heads
    const int set = e->graph_prioritized(1), refused = e->graph_priority_refused(1);
    if (mode == 0) EXPECT_EQ(set + refused, 0);
    if (mode > 0) EXPECT_GE(set + refused, crit / 2);  // a node or more per critical op
    most_set = std::max(most_set, mode > 0 ? set : 0);
    EXPECT_EQ(e->graph_check(1), "equal");
    std::printf("priority %d: %d of %d ops critical; kernel nodes at the greatest priority %d, refused %d\n", mode,
                crit, n, set, refused);
    out[mode] = e->run(px.data(), 1);
  }
  EXPECT_GT(most_set, 0) << "neither mode gave any kernel node the greatest priority";
  for (int mode = 1; mode < 3; ++mode) {
    ASSERT_EQ(out[0].size(), out[mode].size());
    for (size_t o = 0; o < out[0].size(); ++o) EXPECT_EQ(out[0][o].data, out[mode][o].data) << "mode " << mode << " output " << o;
  }
}

}  // namespace
}  // namespace detforge::test
