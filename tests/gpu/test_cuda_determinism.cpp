// The captured r18vd graph replayed many times on one input must give bit-identical outputs:
// the 4-stream schedule (graph/stream_schedule) orders every pair of ops that touch the same
// arena bytes, and the kernels it runs have a fixed reduction order. A race (an op reading
// bytes before their writer finished, or overwriting them before their last reader) shows as a
// replay that differs; so does a kernel that reduces through atomics. Below, the scheduling
// settings that are on by default, each turned off against the default engine.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_engine.h"
#include "core/half.h"
#include "detforge/types.h"
#include "engine_settings.h"
#include "gpu_test_util.h"
#include "io/bundle_graph.h"
#include "op_diff.h"
#include "output_diff.h"
#include "r18_bundle.h"

namespace detforge::test {
namespace {

// The default engine (convs free to overlap, early-start edges into library kernels made full but
// for the cuDNN engine-41 convs, which wait: FULL_EDGES=3) with and without its graph check (the
// schedule itself must hold, not only its fallback), without PDL, on one stream (a race between
// streams would pass there) and with the legacy conv API, each replayed 40 times. With the edges
// as captured up to 28 of 40 replays differed on the H200 (sixth and seventh sessions); the cause
// is in NOTES.md v12 (cuda_settings.h at full_edges_).
class CudaDeterminism : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaDeterminism, R18vdGraphReplaysAreBitIdentical) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  const size_t per = static_cast<size_t>(in[0] * in[1] * in[2]);
  const std::vector<float> px = random_vec(per * 2, 0, 1, 11);
  auto eng = fp16_engine(lb.graph, 2, {GetParam()});
  auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->graph_captured(2));
  const auto first = e->run(px.data(), 2);
  int differing = 0, first_bad = -1;
  std::string how;
  for (int r = 0; r < 40; ++r) {
    const auto again = e->run(px.data(), 2);
    bool same = again.size() == first.size();
    for (size_t o = 0; same && o < first.size(); ++o) same = again[o].data == first[o].data;
    if (!same) {
      ++differing;
      if (first_bad < 0) {
        first_bad = r;
        how = describe_difference(first, again);
      }
    }
  }
  EXPECT_EQ(differing, 0) << "first differing replay: " << first_bad << " (streams " << e->graph_streams(2)
                          << "):" << how;
}

INSTANTIATE_TEST_SUITE_P(R18vd, CudaDeterminism,
                         ::testing::Values("", "DETFORGE_CUDA_GRAPH_CHECK=0", "DETFORGE_CUDA_PDL=0", "DETFORGE_CUDA_STREAMS=1", "DETFORGE_CUDA_FUSED_CONV=0"));

// Batch 1, the shape `detforge eval` runs: the captured graph (ops on several streams) must give
// the bits of the eager forward (the same kernels and plans, one stream) for every input. Why:
// on the H200 (2026-12-03, seventh session) with fused convs free to overlap (CONV_HANDLES=0, then
// the default) every one of 16 inputs differed, and the fp16 detections on shapes_val256 failed
// the fp16-vs-fp32 agreement (precision 0.905, AP 0.662 vs fp32 0.7115), while ordering the fused
// convs (CONV_HANDLES=2, then the default) passed (0.998, AP 0.7114) but failed 1 of 16 inputs now
// and then; replays of one batch-2 input caught that race only now and then. Since the ninth
// session the early-start edges into library kernels are made full (NOTES.md v12) and the convs
// overlap freely again. With the graph check (default) every setting here passes:
// the check falls back to a schedule that agrees (it prints what it found); the default schedule
// must also pass without it. Partial orderings (CONV_HANDLES=3, 4, 5, 7, 8) did not, on the H200.
class CudaGraphEqualsEager : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaGraphEqualsEager, R18vdBatch1OnManyInputs) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  const size_t per = static_cast<size_t>(in[0] * in[1] * in[2]);
  const std::string setting = GetParam();
  auto eng = fp16_engine(lb.graph, 1, {setting});
  auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->graph_captured(1));
  std::printf("edges: %d changed, %d made programmatic (into engine-41 convs, FULL_EDGES=3, the default)\n",
              e->graph_edges_hardened(1), e->graph_edges_made_early(1));
  if (setting.empty()) {
    EXPECT_GT(e->graph_edges_made_early(1), 0);
    // the record of which conv runs how (plan names), for the device log
    for (size_t i = 0; i < e->graph().ops.size(); ++i)
      if (e->graph().ops[i].kind == graph::OpKind::conv2d)
        std::printf("conv %s: %s\n", e->graph().ops[i].name.c_str(), e->op_launch_summary(1, i).c_str());
  }
  int differing = 0;
  std::string how;
  for (int k = 0; k < 16; ++k) {
    const std::vector<float> px = random_vec(per, 0, 1, 100 + k);
    const auto graph_out = e->run(px.data(), 1);
    const auto eager_out = e->run_eager(px.data(), 1);
    if (same_outputs(graph_out, eager_out) || differing++ > 0) continue;
    how = "input " + std::to_string(k) + ":" + describe_difference(eager_out, graph_out);
    // Which side is off (22nd session: ~1 in 60 inputs differ, replays of one input never do):
    // the graph again on the same input, whose arena now holds this input's eager leftovers.
    const auto again = e->run(px.data(), 1);
    how += std::string("; the graph again on this input: ") +
           (same_outputs(again, eager_out) ? "equals eager" : "differs from eager") +
           (same_outputs(again, graph_out) ? ", equals its first run" : ", differs from its first run");
  }
  std::printf("graph check (%s): %s\n", setting.empty() ? "default" : setting.c_str(), e->graph_check(1).c_str());
  EXPECT_EQ(differing, 0) << "of 16 inputs (streams " << e->graph_streams(1) << ", graph check: " << e->graph_check(1)
                          << "), first " << how;
}

INSTANTIATE_TEST_SUITE_P(R18vd, CudaGraphEqualsEager,
                         ::testing::Values("", "DETFORGE_CUDA_GRAPH_CHECK=0", "DETFORGE_CUDA_STREAMS=1",
                                           "DETFORGE_CUDA_CONV_HANDLES=9 DETFORGE_CUDA_GRAPH_CHECK=0",
                                           "DETFORGE_CUDA_FULL_EDGES=1 DETFORGE_CUDA_GRAPH_CHECK=0"));

// Every byte an op reads was written earlier in the same forward: with the arena filled with NaN
// bytes right before a forward (CudaEngine::poison_arena), the eager forward and the captured
// graph must still give the usual eager bits. Why: the graph-versus-eager defect of overlapping
// library convs (NOTES.md v11) has two kinds of explanation. A consumer reading its input before
// the producer finished would read NaN here (finite leftovers of the previous forward without the
// poison). Weaker than it looks: a ReLU turns a NaN read into 0, and the defect it was written
// for (an early start, NOTES.md v12) passed it without a NaN.
// DISABLED_EdgesAsCaptured is that diagnostic on the graph that fails (run it with
// --gtest_also_run_disabled_tests).
class CudaPoisonedArena : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaPoisonedArena, R18vdForwardsReadOnlyWhatTheyWrote) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  const size_t per = static_cast<size_t>(in[0] * in[1] * in[2]);
  auto eng = fp16_engine(lb.graph, 1, {GetParam()});
  auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->graph_captured(1));
  int eager_differ = 0, graph_differ = 0, graph_nonfinite = 0;
  std::string how;
  for (int k = 0; k < 8; ++k) {
    const std::vector<float> px = random_vec(per, 0, 1, 300 + k);
    const auto eager = e->run_eager(px.data(), 1);
    e->poison_arena();
    const auto eager_p = e->run_eager(px.data(), 1);
    e->poison_arena();
    const auto graph_p = e->run(px.data(), 1);
    if (!same_outputs(eager, eager_p) && eager_differ++ == 0)
      how += " eager, input " + std::to_string(k) + ":" + describe_difference(eager, eager_p);
    if (!same_outputs(eager, graph_p) && graph_differ++ == 0)
      how += " graph, input " + std::to_string(k) + ":" + describe_difference(eager, graph_p);
    bool finite = true;
    for (const auto& t : graph_p)
      for (float v : t.data) finite = finite && std::isfinite(v);
    graph_nonfinite += !finite;
  }
  std::printf("poisoned arena (%s): eager differs on %d of 8 inputs, graph on %d (non-finite outputs on %d)%s\n",
              GetParam(), eager_differ, graph_differ, graph_nonfinite, how.c_str());
  EXPECT_EQ(eager_differ, 0) << how;
  EXPECT_EQ(graph_differ, 0) << how;
}

INSTANTIATE_TEST_SUITE_P(R18vd, CudaPoisonedArena, ::testing::Values("", "DETFORGE_CUDA_GRAPH_CHECK=0"));
INSTANTIATE_TEST_SUITE_P(DISABLED_EdgesAsCaptured, CudaPoisonedArena,
                         ::testing::Values("DETFORGE_CUDA_FULL_EDGES=0 DETFORGE_CUDA_GRAPH_CHECK=0"));

// The captured graph holds every ordering of the schedule: for each byte hazard between two ops
// (overlapping arena bytes, one writing), every graph node of the later op is reachable from every
// node of the earlier one (CudaEngine::capture_misses_hazards). Run on the default schedule and on
// the ones that gave wrong bits. They passed too (ninth session): the edges were all there, but 50
// of them into library kernels were programmatic (early-start) ones, which the engine now makes
// full (harden_edges; NOTES.md v12). The count of those is printed as captured.
class CudaCaptureHazards : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaCaptureHazards, R18vdGraphOrdersEveryHazard) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  auto eng = fp16_engine(lb.graph, 2, {GetParam()});
  auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
  ASSERT_NE(e, nullptr);
  for (int b : {1, 2}) {
    ASSERT_TRUE(e->graph_captured(b));
    int checked = 0, early = 0;
    const std::string missing = e->capture_misses_hazards(b, &checked, &early);
    std::printf("capture hazards (%s, batch %d, streams %d): %d checked, %d programmatic edges into library ops as "
                "captured (%d made full in the engine's graph)%s%s\n",
                GetParam(), b, e->graph_streams(b), checked, early, e->graph_edges_hardened(b),
                missing.empty() ? ", all ordered" : ": ", missing.c_str());
    EXPECT_GT(checked, 100) << "the capture recorded too few nodes to check";
    EXPECT_EQ(missing, "");
  }
}

INSTANTIATE_TEST_SUITE_P(R18vd, CudaCaptureHazards,
                         ::testing::Values("", "DETFORGE_CUDA_CONV_HANDLES=0 DETFORGE_CUDA_GRAPH_CHECK=0",
                                           "DETFORGE_CUDA_CONV_LINEAR=2 DETFORGE_CUDA_GRAPH_CHECK=0"));

// Where replays start to differ (DETFORGE_CUDA_SNAPSHOTS=1 copies every op's output inside the
// graph): per differing replay, the first ops in issue order whose output changed, and how many
// ops changed. The first changed op is where a race lands: its producers' snapshots are
// unchanged, so either it read bytes that were not yet (or no longer) its input, or it is not
// deterministic itself. The copies add graph nodes and may move the timing.
// DETFORGE_CUDA_* settings in the environment apply.
TEST(CudaDeterminism, R18vdFirstOpThatDiffersBetweenReplays) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  const std::vector<float> px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]) * 2, 0, 1, 11);
  auto eng = fp16_engine(lb.graph, 2, {"DETFORGE_CUDA_SNAPSHOTS=1"});
  auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->graph_captured(2));
  e->run(px.data(), 2);
  const auto first = e->op_snapshots(2);
  ASSERT_GT(first.size(), 100u);
  int differing = 0;
  std::string report;
  for (int r = 0; r < 30; ++r) {
    e->run(px.data(), 2);
    std::string firsts;
    const int changed = changed_ops(*e, 2, first, e->op_snapshots(2), &firsts);
    if (changed) {
      ++differing;
      report += "\n  replay " + std::to_string(r) + ": " + std::to_string(changed) + " ops changed, first:" + firsts;
    }
  }
  EXPECT_EQ(differing, 0) << "replays that differ from the first (streams " << e->graph_streams(2) << "):" << report;
}

// The same op-by-op view for CudaGraphEqualsEager: per input (batch 1), the first ops whose
// output differs between the captured graph and the eager forward.
TEST(CudaDeterminism, R18vdFirstOpWhereGraphAndEagerDiffer) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  auto eng = fp16_engine(lb.graph, 1, {"DETFORGE_CUDA_SNAPSHOTS=1"});
  auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->graph_captured(1));
  int differing = 0;
  std::string report;
  for (int k = 0; k < 4; ++k) {
    const std::vector<float> px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]), 0, 1, 200 + k);
    e->run(px.data(), 1);
    const auto graph_ops = e->op_snapshots(1);
    e->run_eager(px.data(), 1);
    std::string firsts;
    const int changed = changed_ops(*e, 1, e->op_snapshots(1), graph_ops, &firsts);
    if (changed) {
      ++differing;
      report += "\n  input " + std::to_string(k) + ": " + std::to_string(changed) + " ops differ, first:" + firsts;
    }
  }
  EXPECT_EQ(differing, 0) << "inputs where graph and eager differ (streams " << e->graph_streams(1) << "):" << report;
}

// DETFORGE_CUDA_SNAPSHOTS takes each op's copy after the launch that writes its output: with
// arena reuse off every output survives the forward, so each snapshot of a graph replay must
// equal the op's output as the forward left it (op_outputs), bit for bit. The layer norms that
// their adds launch (LN_ADD) and the box steps' refined boxes are taken at the later launch; the
// upsamples the concats read from the source, which no launch writes, have none. Until session
// 13 the copy sat at the absorbed op's own place and read bytes not yet written.
TEST(CudaDeterminism, R18vdSnapshotsEqualTheOutputsTheForwardLeft) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  auto eng = fp16_engine(lb.graph, 1, {"DETFORGE_CUDA_SNAPSHOTS=1 DETFORGE_CUDA_ARENA_REUSE=0"});
  auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->graph_captured(1));
  EXPECT_EQ(e->ln_adds(), 3);
  EXPECT_EQ(e->upsample_concats(), 2);
  const std::vector<float> px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]), 0, 1, 77);
  e->run(px.data(), 1);
  const auto snaps = e->op_snapshots(1);
  const auto outs = e->op_outputs(1);
  const graph::Graph& g = e->graph();
  int layer_norms = 0, upsamples = 0, compared = 0;
  size_t o = 0;
  for (const auto& sn : snaps) {
    while (o < outs.size() && static_cast<int>(outs[o].op) < sn.op) ++o;
    ASSERT_LT(o, outs.size());
    ASSERT_EQ(static_cast<int>(outs[o].op), sn.op);
    EXPECT_TRUE(sn.bytes == outs[o].bytes) << sn.name << " (op " << sn.op << ", " << e->op_launch_summary(1, sn.op) << ")";
    ++compared;
    layer_norms += g.ops[sn.op].kind == graph::OpKind::layer_norm;
  }
  for (const auto& op : g.ops) upsamples += op.kind == graph::OpKind::upsample_nearest2x;
  for (const auto& sn : snaps) upsamples -= g.ops[sn.op].kind == graph::OpKind::upsample_nearest2x;
  int all_layer_norms = 0;
  for (const auto& op : g.ops) all_layer_norms += op.kind == graph::OpKind::layer_norm;
  EXPECT_EQ(layer_norms, all_layer_norms) << "every layer norm, the three inside their adds' launches too";
  EXPECT_EQ(upsamples, 2) << "the two upsamples read from the source have no snapshot";
  std::printf("snapshots: %d compared with the forward's outputs\n", compared);
}

// Where the captured graph and the eager forward part, without touching the graph: with
// DETFORGE_CUDA_ARENA_REUSE=0 every op's output survives the forward, so both runs are read back
// op by op (CudaEngine::op_outputs; snapshots inside the graph hid the defect). Per input: the
// first ops whose outputs differ and by how much (a few ulps: arithmetic that depends on what
// runs beside it; large: a kernel that read or wrote wrong bytes). A diagnostic: run with
// --gtest_also_run_disabled_tests and the settings under study in the environment (e.g.
// DETFORGE_CUDA_CONV_HANDLES=0 DETFORGE_CUDA_GRAPH_CHECK=0).
TEST(CudaDeterminism, DISABLED_R18vdFirstOpWhereGraphAndEagerDifferWithoutReuse) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  auto eng = fp16_engine(lb.graph, 2, {"DETFORGE_CUDA_ARENA_REUSE=0"});
  auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
  ASSERT_NE(e, nullptr);
  for (int batch : {1, 2}) {
    ASSERT_TRUE(e->graph_captured(batch));
    int differing = 0;
    std::string report;
    for (int k = 0; k < 8; ++k) {
      const std::vector<float> px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]) * batch, 0, 1, 400 + k);
      e->run(px.data(), batch);
      const auto g = e->op_outputs(batch);
      e->run_eager(px.data(), batch);
      const auto x = e->op_outputs(batch);
      ASSERT_EQ(g.size(), x.size());
      std::string firsts;
      const int ops = changed_outputs(*e, batch, g, x, &firsts);
      if (ops) {
        ++differing;
        report += "\n  input " + std::to_string(k) + ": " + std::to_string(ops) + " ops differ, first:" + firsts;
      }
    }
    std::printf("graph vs eager without arena reuse (batch %d, streams %d, graph check: %s, programmatic edges made "
                "full: %d): %d of 8 inputs differ%s\n",
                batch, e->graph_streams(batch), e->graph_check(batch).c_str(), e->graph_edges_hardened(batch),
                differing, report.c_str());
    EXPECT_EQ(differing, 0) << "batch " << batch;
  }
}

// Which fused convs must not overlap: with them free to (CONV_HANDLES=0) and the graph check off,
// CudaEngine::conflicting_convs searches for a smallest set whose ordering makes the batch-1
// graph equal the eager forward for one input. In the eighth session, with the early-start edges
// as captured, it named backbone stage 1's 3x3/2 conv and its shortcut (the producer and the
// consumer of one early start, NOTES.md v12). With those edges made full (the default since the
// ninth session) no conv needs ordering: the first trial, nothing ordered, must already agree.
TEST(CudaDeterminism, R18vdConvsThatMustNotOverlap) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  auto eng = fp16_engine(lb.graph, 1, {"DETFORGE_CUDA_CONV_HANDLES=0", "DETFORGE_CUDA_GRAPH_CHECK=0"});
  auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
  ASSERT_NE(e, nullptr);
  std::string log;
  const auto names = e->conflicting_convs(1, &log);
  std::printf("%s", log.c_str());
  for (const auto& n : names) std::printf("must not overlap: %s\n", n.c_str());
  EXPECT_NE(log.find("trial 1: 0 ordered -> equal"), std::string::npos) << log;
  EXPECT_TRUE(names.empty());
  EXPECT_TRUE(e->graph_captured(1));  // captured again with its own schedule
}

// No op writes past the end of its output (DETFORGE_CUDA_ARENA_GUARD=1: guard bytes after every
// arena buffer, filled before the op and read back after it, in an eager forward). Such a write
// would land in a neighbouring buffer that another stream may be reading or writing (passed in
// the eighth session; CudaStrayWrites below checks the whole arena).
TEST(CudaDeterminism, R18vdNoOpWritesPastItsOutput) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  const std::vector<float> px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]) * 2, 0, 1, 13);
  auto eng = fp16_engine(lb.graph, 2, {"DETFORGE_CUDA_ARENA_GUARD=1"});
  auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
  ASSERT_NE(e, nullptr);
  for (int b : {1, 2}) {
    e->run(px.data(), b);  // the inputs the guarded forward then uses
    std::string list;
    for (const auto& s : e->arena_overruns(b)) list += "\n  " + s;
    EXPECT_TRUE(list.empty()) << "batch " << b << ", ops that wrote past an output:" << list;
  }
}

// No op changes arena bytes outside the outputs the schedule knows it writes
// (CudaEngine::stray_writes: the arena compared before and after each op of an eager forward).
// Such a write is harmless in the eager order when the victim's producer runs later and
// overwrites it, and wrong results when a stream schedule runs that producer first: the one
// explanation of the graph-versus-eager defect that fits every observation so far (NOTES.md v12).
class CudaStrayWrites : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaStrayWrites, R18vdNoOpWritesOutsideItsOutputs) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  const std::vector<float> px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]) * 2, 0, 1, 17);
  auto eng = fp16_engine(lb.graph, 2, {GetParam()});
  auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
  ASSERT_NE(e, nullptr);
  for (int b : {1, 2}) {
    e->run(px.data(), b);  // the inputs the checked forward then uses
    const auto found = e->stray_writes(b);
    std::string list;
    for (const auto& s : found) list += "\n  " + s;
    std::printf("stray writes (%s, batch %d): %zu ops%s\n", GetParam(), b, found.size(), list.c_str());
    EXPECT_TRUE(found.empty()) << "batch " << b << ", ops that wrote outside their outputs:" << list;
  }
}

INSTANTIATE_TEST_SUITE_P(R18vd, CudaStrayWrites,
                         ::testing::Values("", "DETFORGE_CUDA_ROW_MLP=1", "DETFORGE_CUDA_CONV_LINEAR=2",
                                           "DETFORGE_CUDA_OWN_CONV=1"));

// Engine settings that change how the forward is scheduled, not what it computes: turned off,
// the outputs must be bit-identical to the default engine's. MEMSET_KERNELS rewrites cuDNN's
// memset nodes as kernel nodes (the same bytes written), EARLY_OUTPUTS converts outputs on their
// producer's stream, DAG_REUSE plans the arena without false dependencies (each on by default).
class CudaSchedulingSetting : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaSchedulingSetting, GivesTheDefaultOutputsBitForBit) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  const std::vector<float> px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]) * 2, 0, 1, 12);
  const std::string var = GetParam();
  std::vector<HostTensor> out[2];
  for (int k = 0; k < 2; ++k) {
    auto eng = fp16_engine(lb.graph, 2, {k ? var + "=0" : ""});
    auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
    ASSERT_NE(e, nullptr);
    ASSERT_TRUE(e->graph_captured(2));
    if (var == "DETFORGE_CUDA_MEMSET_KERNELS")
      std::printf("memset nodes run as kernels: %d (batch 2, %s)\n", e->graph_memsets_replaced(2), k ? "off" : "on");
    out[k] = e->run(px.data(), 2);
  }
  ASSERT_EQ(out[0].size(), out[1].size());
  for (size_t o = 0; o < out[0].size(); ++o) EXPECT_EQ(out[0][o].data, out[1][o].data) << out[0][o].name;
}

INSTANTIATE_TEST_SUITE_P(R18vd, CudaSchedulingSetting,
                         ::testing::Values("DETFORGE_CUDA_MEMSET_KERNELS", "DETFORGE_CUDA_EARLY_OUTPUTS",
                                           "DETFORGE_CUDA_DAG_REUSE"));

}  // namespace
}  // namespace detforge::test
