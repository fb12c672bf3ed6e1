// The r18vd engine (fp16, batch 2) with its convs on our own kernels, per DETFORGE_CUDA_OWN_CONV
// mode: direct_force (the six convs the halo-tiled 3x3 kernel supports: the stem's 32->32 and
// 32->64, stage 0's four 64->64), force (every conv on the fastest own variant, the wgmma family
// of conv_igemm included), and the timed choices direct and 1 (own kernels only where they beat
// cuDNN's fused plan and match its output; mode 1 also with DETFORGE_CUDA_OWN_CONV_MARGIN=1.3,
// which takes halo-tiled kernels up to 30 % slower than cuDNN alone). Each keeps the library engine's
// outputs within the fp16 tolerance of the other engine comparisons, and its graph equals its
// eager forward bit for bit.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cuda/conv_select.h"
#include "backends/cuda/cuda_engine.h"
#include "detforge/types.h"
#include "engine_settings.h"
#include "gpu_test_util.h"
#include "io/bundle_graph.h"
#include "r18_bundle.h"
#include "r18_compare.h"
#include "r18_settings_check.h"

namespace detforge::test {
namespace {

class CudaOwnConvEngine : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaOwnConvEngine, R18vdKeepsTheOutputs) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  const std::string settings = GetParam();  // "DETFORGE_CUDA_OWN_CONV=<mode>[ more settings]"
  const std::string mode = settings.substr(settings.find('=') + 1, settings.find(' ') - settings.find('=') - 1);
  expect_settings_keep_r18vd_outputs(settings, 53, [&](cuda::CudaEngine& e) {
    const std::string summary = e.conv_fusion_summary(2);
    std::printf("%s: %s\n", settings.c_str(), summary.c_str());
    if (mode == "direct_force") EXPECT_EQ(summary.rfind("6 convs on own", 0), 0u) << summary;
    if (mode == "force") EXPECT_EQ(summary.rfind("0 convs on own", 0), std::string::npos) << summary;
    if (mode == "direct_force" || mode == "direct")
      EXPECT_NE(summary.find(" 0 linears on own"), std::string::npos) << summary;
  });
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaOwnConvEngine,
                         ::testing::Values("DETFORGE_CUDA_OWN_CONV=direct_force", "DETFORGE_CUDA_OWN_CONV=direct",
                                           "DETFORGE_CUDA_OWN_CONV=force", "DETFORGE_CUDA_OWN_CONV=1",
                                           "DETFORGE_CUDA_OWN_CONV=1 DETFORGE_CUDA_OWN_CONV_MARGIN=1.3",
                                           "DETFORGE_CUDA_TUNE=1"));  // mode 1 at margin 1.3, plus conv plan tuning

// The margin setting's parse: 1 when unset, the number when in [0.5, 2], an error otherwise.
TEST(CudaOwnConvSettings, MarginFromTheEnvironmentNeedsNoDevice) {
  unsetenv("DETFORGE_CUDA_OWN_CONV_MARGIN");
  EXPECT_EQ(cuda::own_conv_margin_from_env(), 1.0);
  setenv("DETFORGE_CUDA_OWN_CONV_MARGIN", "1.25", 1);
  EXPECT_EQ(cuda::own_conv_margin_from_env(), 1.25);
  for (const char* bad : {"abc", "1.2x", "0.4", "2.5", "nan", "-1"}) {
    setenv("DETFORGE_CUDA_OWN_CONV_MARGIN", bad, 1);
    EXPECT_THROW(cuda::own_conv_margin_from_env(), Error) << bad;
  }
  unsetenv("DETFORGE_CUDA_OWN_CONV_MARGIN");
  EXPECT_EQ(cuda::own_conv_margin_from_env(1.3), 1.3);  // DETFORGE_CUDA_TUNE=1's default
}

// The mode's parse: the caller's default when unset (off, or mode 1 under DETFORGE_CUDA_TUNE=1),
// an explicit 0 off whatever that default, unknown words an error.
TEST(CudaOwnConvSettings, ModeFromTheEnvironmentNeedsNoDevice) {
  unsetenv("DETFORGE_CUDA_OWN_CONV");
  EXPECT_EQ(cuda::own_conv_mode_from_env(), cuda::OwnConvMode::off);
  EXPECT_EQ(cuda::own_conv_mode_from_env(cuda::OwnConvMode::fastest), cuda::OwnConvMode::fastest);
  setenv("DETFORGE_CUDA_OWN_CONV", "0", 1);
  EXPECT_EQ(cuda::own_conv_mode_from_env(cuda::OwnConvMode::fastest), cuda::OwnConvMode::off);
  setenv("DETFORGE_CUDA_OWN_CONV", "direct", 1);
  EXPECT_EQ(cuda::own_conv_mode_from_env(cuda::OwnConvMode::fastest), cuda::OwnConvMode::direct);
  setenv("DETFORGE_CUDA_OWN_CONV", "sometimes", 1);
  EXPECT_THROW(cuda::own_conv_mode_from_env(), Error);
  unsetenv("DETFORGE_CUDA_OWN_CONV");
}

}  // namespace
}  // namespace detforge::test
