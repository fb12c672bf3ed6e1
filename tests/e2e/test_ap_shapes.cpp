// AP sanity: `detforge eval` of the r18vd shapes bundle (fp32, CPU) on shapes_val256 gives the
// AP50:95 that pycocotools gives for transformers' detections on the same JPEG files
// (tests/golden/shapes_r18vd/ap_reference.json, made by tests/reference/make_ap_reference.py),
// within 0.002. Runs all 256 images: a few minutes on two cores.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using detforge::test::run_cli;

TEST(ApSanity, R18vdShapesVal256MatchesTransformers) {
  DETFORGE_REQUIRE_SHARED();
  auto dir = detforge::test::scratch_dir("ap");
  auto ck = detforge::test::shared_dir() / "models/rtdetr_v2_r18vd_shapes";
  auto b = run_cli({"build", ck.string(), "-o", (dir / "r18.bundle").string()});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  auto r = run_cli({"eval", (dir / "r18.bundle").string(), "--dataset",
                    (detforge::test::shared_dir() / "data/shapes_val256").string(), "--json",
                    (dir / "report.json").string(), "--markdown", (dir / "report.md").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto rep = nlohmann::json::parse(std::ifstream(dir / "report.json"));
  auto ref = nlohmann::json::parse(
      std::ifstream(detforge::test::source_dir() / "tests/golden/shapes_r18vd/ap_reference.json"));
  double ours = rep.at("ap50_95"), theirs = ref.at("ap50_95");
  EXPECT_NEAR(ours, theirs, 0.002) << "detforge " << ours << " vs transformers " << theirs;
  EXPECT_NEAR(rep.at("ap50").get<double>(), ref.at("ap50").get<double>(), 0.002);
  EXPECT_TRUE(fs::exists(dir / "report.md"));
}
