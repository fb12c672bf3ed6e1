// The r18vd architecture with COCO's 80 classes (PekingU/rtdetr_v2_r18vd's shapes; synthetic
// weights, as `detforge synth-checkpoint --preset r18vd` writes them). Every other GPU engine test
// uses the 8-class model, whose 16-byte score rows take the one-kernel top-k; 80 classes make
// 160-byte rows, for which the engine splits the top-k by default (DETFORGE_CUDA_TOPK_SPLIT=2,
// NOTES.md v22). Both paths must pick the same queries, so the outputs are the same bits.
#include <cmath>
#include <string>
#include <vector>

#include "backends/cuda/cuda_engine.h"
#include "detforge/types.h"
#include "engine_settings.h"
#include "families/rt_detr_v2/synth.h"
#include "gpu_test_util.h"
#include "io/bundle_graph.h"
#include "r18_bundle.h"

namespace detforge::test {
namespace {

std::string coco80_bundle() {
  static const std::string path = [] {
    rt_detr_v2::SynthOptions so;
    so.preset = "r18vd";
    so.num_labels = 80;
    so.seed = 3;
    so.force = true;
    rt_detr_v2::write_synth_checkpoint(gpu_test_dir() / "coco80_ckpt", so);
    return build_test_bundle(gpu_test_dir() / "coco80_ckpt", "coco80.bundle");
  }();
  return path;
}

TEST(CudaCoco80Engine, SplitTopkIsTheDefaultAndPicksTheSameQueries) {
  DETFORGE_REQUIRE_GPU();
  LoadedBundle lb = load_bundle_graph(coco80_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  const int batch = 2;
  std::vector<float> px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]) * batch, 0, 1, 80);
  std::vector<HostTensor> out[2];
  const char* settings[2] = {"", "DETFORGE_CUDA_TOPK_SPLIT=0"};
  for (int k = 0; k < 2; ++k) {
    SCOPED_TRACE(settings[k]);
    auto eng = fp16_engine(lb.graph, batch, {settings[k]});
    auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
    ASSERT_NE(e, nullptr);
    ASSERT_TRUE(e->graph_captured(batch));
    EXPECT_EQ(e->graph_check(batch), "equal");
    out[k] = e->run(px.data(), batch);
    ASSERT_EQ(out[k].size(), 3u);  // logits, boxes, query indices
    ASSERT_EQ(out[k][0].data.size(), size_t{batch} * 300 * 80);
    for (float v : out[k][0].data) ASSERT_TRUE(std::isfinite(v));
  }
  for (size_t o = 0; o < out[0].size(); ++o) EXPECT_EQ(out[0][o].data, out[1][o].data) << "output " << o;
}

}  // namespace
}  // namespace detforge::test
