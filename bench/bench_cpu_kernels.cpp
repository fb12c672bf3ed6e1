// Google Benchmark for the CPU backend: the own kernels at RT-DETR r18vd's shapes (one op per
// graph, so the timing is the kernel plus the executor's per-op overhead) and, when ../shared
// holds the r18vd checkpoint, the whole batch-1 forward with its per-op-kind breakdown.
// Threads are the benchmark argument (1, 2, and 0 = all cores).
//   build-cpu/bench/bench_cpu_kernels --benchmark_filter=R18vd
#include <benchmark/benchmark.h>

#include <filesystem>
#include <map>
#include <random>

#include "backends/cpu/cpu_engine.h"
#include "families/rt_detr_v2/bundle_builder.h"
#include "io/bundle_graph.h"

namespace {

using namespace detforge;
using graph::OpKind;
using graph::TensorId;

std::vector<float> random_vec(size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 r(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(r);
  return v;
}

struct OneOp {
  graph::Graph g;
  std::vector<std::vector<float>> feeds;
  TensorId in(const std::string& name, std::vector<int64_t> shape, float lo = -1, float hi = 1) {
    TensorId id = g.add_activation(name, shape);
    g.inputs.push_back(id);
    int64_t n = 1;
    for (auto d : shape) n *= d;
    feeds.push_back(random_vec(size_t(n), lo, hi, unsigned(feeds.size() + 1)));
    return id;
  }
  void op(OpKind k, std::vector<TensorId> ins, std::vector<int64_t> out_shape, nlohmann::json attrs,
          graph::DType dt = graph::DType::f32) {
    TensorId out = g.add_activation("out", out_shape, dt);
    graph::Op o;
    o.kind = k;
    o.name = "bench";
    o.inputs = std::move(ins);
    o.outputs = {out};
    o.attrs = std::move(attrs);
    g.add_op(std::move(o));
    g.outputs.push_back(out);
  }
};

void run_one(benchmark::State& st, const OneOp& net) {
  EngineOptions opt;
  opt.threads = int(st.range(0));
  cpu::CpuEngine e(net.g, opt);
  std::vector<const float*> ptrs;
  for (auto& f : net.feeds) ptrs.push_back(f.data());
  for (auto _ : st) benchmark::DoNotOptimize(e.run_inputs(ptrs, 1));
  st.counters["threads"] = e.threads();
}

void BM_MsDeformAttn_r18vd(benchmark::State& st) {
  OneOp n;
  const int Q = 300, H = 8, NL = 3, P = 4;
  TensorId v = n.in("value", {8400, 256}), off = n.in("off", {Q, H * NL * P * 2}, -3, 3),
           lg = n.in("logit", {Q, H * NL * P}), ref = n.in("ref", {Q, 4}, 0.05f, 0.95f);
  TensorId ps = n.g.add_const("ps", {NL * P}, std::vector<float>(NL * P, 0.25f));
  n.op(OpKind::ms_deform_attn, {v, off, lg, ref, ps}, {Q, 256},
       {{"heads", H}, {"levels", NL}, {"points", P}, {"offset_scale", 0.5},
        {"spatial_shapes", {{80, 80}, {40, 40}, {20, 20}}}, {"level_start", {0, 6400, 8000}}});
  run_one(st, n);
}

void BM_Attention_aifi(benchmark::State& st) {
  OneOp n;
  TensorId q = n.in("q", {400, 256}), k = n.in("k", {400, 256}), v = n.in("v", {400, 256});
  n.op(OpKind::attention, {q, k, v}, {400, 256}, {{"heads", 8}, {"scale", 0.1767767f}});
  run_one(st, n);
}

void BM_LayerNorm_residual_8400(benchmark::State& st) {
  OneOp n;
  TensorId x = n.in("x", {8400, 256}), r = n.in("r", {8400, 256});
  TensorId g = n.g.add_const("g", {256}, std::vector<float>(256, 1.f));
  TensorId b = n.g.add_const("b", {256}, std::vector<float>(256, 0.f));
  n.op(OpKind::layer_norm, {x, g, b, r}, {8400, 256}, {{"eps", 1e-5}});
  run_one(st, n);
}

void BM_TopkRows_8400x80(benchmark::State& st) {
  OneOp n;
  TensorId s = n.in("scores", {8400, 80}, -8, 2);
  n.op(OpKind::topk_rows, {s}, {300}, {{"k", 300}}, graph::DType::i32);
  run_one(st, n);
}

void BM_AvgPoolCeil_160(benchmark::State& st) {
  OneOp n;
  TensorId x = n.in("x", {160, 160, 64});
  n.op(OpKind::avg_pool2d, {x}, {80, 80, 64}, {{"kernel", 2}, {"stride", 2}, {"ceil_mode", true}});
  run_one(st, n);
}

// The whole r18vd forward (fp32, batch 1, 640x640) from the shared checkpoint.
void BM_R18vdForward(benchmark::State& st) {
  const std::filesystem::path ckpt = std::filesystem::path(DETFORGE_SHARED_DIR) / "models/rtdetr_v2_r18vd_shapes";
  if (!std::filesystem::exists(ckpt / "model.safetensors")) {
    st.SkipWithError("../shared/models/rtdetr_v2_r18vd_shapes is absent");
    return;
  }
  const auto bundle = std::filesystem::temp_directory_path() / "detforge_bench_cpu_r18vd.bundle";
  if (!std::filesystem::exists(bundle)) {
    rt_detr_v2::BuildOptions o;
    o.checkpoint = ckpt.string();
    o.output = bundle.string();
    rt_detr_v2::build_bundle(o);
  }
  auto lb = load_bundle_graph(bundle.string());
  EngineOptions opt;
  opt.threads = int(st.range(0));
  cpu::CpuEngine e(lb.graph, opt);
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]);
  auto px = random_vec(size_t(in.numel()), 0.f, 1.f, 5);
  e.run(px.data(), 1);  // warm-up
  e.set_profiling(true);
  for (auto _ : st) benchmark::DoNotOptimize(e.run(px.data(), 1));
  std::map<std::string, double> by_kind;
  for (const auto& t : e.op_times()) by_kind[t.kind] += t.ms;
  for (const auto& [k, ms] : by_kind) st.counters[k + "_ms"] = ms / std::max(1, e.profiled_runs());
  st.counters["threads"] = e.threads();
  st.counters["arena_MB"] = double(e.arena_bytes()) / 1e6;
}

}  // namespace

BENCHMARK(BM_MsDeformAttn_r18vd)->Arg(1)->Arg(2)->Arg(0)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Attention_aifi)->Arg(1)->Arg(2)->Arg(0)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LayerNorm_residual_8400)->Arg(1)->Arg(2)->Arg(0)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TopkRows_8400x80)->Arg(1)->Arg(2)->Arg(0)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AvgPoolCeil_160)->Arg(1)->Arg(2)->Arg(0)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_R18vdForward)->Arg(1)->Arg(2)->Arg(0)->Unit(benchmark::kMillisecond)->Iterations(5);

BENCHMARK_MAIN();
