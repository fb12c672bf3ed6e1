#include "backends/cuda/cudnn_fused_conv.h"

#ifdef DETFORGE_HAVE_CUDNN_FRONTEND
#include <cudnn_frontend.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <unordered_map>
#include <vector>

#include "backends/cuda/conv_select.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/kernels.h"
#endif

namespace detforge::cuda {

std::string PlanPick::text() const {
  std::string t = std::to_string(engine) + ";";
  for (size_t i = 0; i < knobs.size(); ++i)
    t += (i ? "," : "") + std::to_string(knobs[i].first) + ":" + std::to_string(knobs[i].second);
  return t;
}

bool PlanPick::parse(const std::string& text, PlanPick* out) {
  PlanPick p;
  const size_t semi = text.find(';');
  if (semi == std::string::npos) return false;
  auto num = [](const std::string& s, int64_t* v) {
    if (s.empty() || s.size() > 18) return false;
    size_t used = 0;
    try {
      *v = std::stoll(s, &used);
    } catch (const std::exception&) {
      return false;
    }
    return used == s.size();
  };
  if (!num(text.substr(0, semi), &p.engine) || p.engine < 0) return false;
  std::string rest = text.substr(semi + 1);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string item = rest.substr(0, comma);
    const size_t colon = item.find(':');
    int64_t k = 0, v = 0;
    if (colon == std::string::npos || !num(item.substr(0, colon), &k) || !num(item.substr(colon + 1), &v)) return false;
    p.knobs.emplace_back(k, v);
    if (comma == std::string::npos) break;
    rest = rest.substr(comma + 1);
    if (rest.empty()) return false;  // a trailing comma
  }
  *out = std::move(p);
  return true;
}

#ifdef DETFORGE_HAVE_CUDNN_FRONTEND
namespace fe = cudnn_frontend;

namespace {

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

class FrontendConv : public FusedConv {
 public:
  fe::graph::Graph graph;
  TensorPtr X, W, B, R, Y;
  int64_t ws = 0;
  cudnnHandle_t h = nullptr;
  std::string name;
  bool rtc = false, lt = false;
  int64_t plan = -1;  // >= 0: the plan index chosen in the graph (ConvTune::in_graph); -1: cuDNN's candidate
  int64_t heur_plans = -1;          // plans from the heuristics; those after them are knob variants
  std::vector<std::pair<int64_t, std::string>> knobbed;  // each knob variant's plan index and change
  std::string knob_ranges;                               // the first engine's knobs: name[min,max]

  std::unordered_map<int64_t, void*> pack(const void* x, const void* w, const void* bias, const void* residual,
                                          void* y) const {
    std::unordered_map<int64_t, void*> p = {{X->get_uid(), const_cast<void*>(x)},
                                            {W->get_uid(), const_cast<void*>(w)},
                                            {Y->get_uid(), y}};
    if (B) p[B->get_uid()] = const_cast<void*>(bias);
    if (R) p[R->get_uid()] = const_cast<void*>(residual);
    return p;
  }

  size_t workspace_bytes() const override { return static_cast<size_t>(ws); }
  const std::string& plan_name() const override { return name; }
  bool runtime_compiled() const override { return rtc; }
  bool uses_cublaslt() const override { return lt; }
  void run(const void* x, const void* w, const void* bias, const void* residual, void* y, void* wsp,
           cudaStream_t s) const override {
    fence_before_library(s);
    auto vp = pack(x, w, bias, residual, y);
    if (cudnnSetStream(h, s) != CUDNN_STATUS_SUCCESS) throw Error("cudnnSetStream failed");
    auto st = plan >= 0 ? graph.execute_plan_at_index(h, vp, wsp, plan) : graph.execute(h, vp, wsp);
    if (!st.is_good()) throw Error("cuDNN graph execute failed: " + st.get_message());
  }
};

TensorPtr nhwc(fe::graph::Graph& g, const char* name, int64_t n, int64_t c, int64_t h, int64_t w) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_dim({n, c, h, w})
                      .set_stride({c * h * w, 1, c * w, c})
                      .set_data_type(fe::DataType_t::HALF));
}

std::string knob_name(fe::KnobType_t t) {
  switch (t) {
    case fe::KnobType_t::TILE_SIZE: return "TILE_SIZE";
    case fe::KnobType_t::TILEK: return "TILEK";
    case fe::KnobType_t::SPLIT_K_BUF: return "SPLIT_K_BUF";
    case fe::KnobType_t::SPLIT_K_SLC: return "SPLIT_K_SLC";
    case fe::KnobType_t::STREAM_K: return "STREAM_K";
    case fe::KnobType_t::SPLIT_P_SLC: return "SPLIT_P_SLC";
    case fe::KnobType_t::KERNEL_CFG: return "KERNEL_CFG";
    case fe::KnobType_t::TILE_CGA_M: return "TILE_CGA_M";
    case fe::KnobType_t::TILE_CGA_N: return "TILE_CGA_N";
    default: return "knob" + std::to_string(static_cast<int64_t>(t));
  }
}

// The heuristic modes whose plans ConvTune::in_graph times; a cached pick is looked up among the
// same list (picked_plan).
const std::vector<fe::HeurMode_t> kTunedModes = {fe::HeurMode_t::A, fe::HeurMode_t::B};

// ConvTune::knob_max_pixels: the heuristics list each engine with one choice of its knobs; for
// the first engines they list, plans with other split counts and tile shapes are added, one knob
// changed at a time. Why: at batch 1 the 20x20 and 40x40 convs run on 26-56 CTAs of 132 SMs at
// 70-130 TFLOP/s (NOTES.md v19), and modes A and B offered no plan that splits K further (v14).
void add_knob_plans(FrontendConv& c, int max_engines) {
  auto& g = c.graph;
  c.heur_plans = g.get_execution_plan_count();
  std::vector<int64_t> engines;
  for (int64_t i = 0; i < c.heur_plans && static_cast<int>(engines.size()) < max_engines; ++i) {
    int64_t eng = -1;
    std::unordered_map<fe::KnobType_t, int64_t> chosen;
    if (!g.get_engine_and_knobs_at_index(i, eng, chosen).is_good() ||
        std::find(engines.begin(), engines.end(), eng) != engines.end())
      continue;
    engines.push_back(eng);
    std::vector<fe::Knob> knobs;
    if (!g.get_knobs_for_engine(eng, knobs).is_good()) continue;
    if (c.knob_ranges.empty()) {
      c.knob_ranges = "engine " + std::to_string(eng) + " knobs";
      for (const fe::Knob& k : knobs)
        c.knob_ranges += " " + knob_name(k.type) + "[" + std::to_string(k.minValue) + "," +
                         std::to_string(k.maxValue) + "]";
    }
    for (const fe::Knob& k : knobs) {
      // Split knobs at a few counts; the tile shape over its whole range (precompiled engines
      // such as 41 list 24 tile sizes; their plans build without NVRTC).
      const bool split = k.type == fe::KnobType_t::SPLIT_K_SLC || k.type == fe::KnobType_t::SPLIT_K_BUF ||
                         k.type == fe::KnobType_t::STREAM_K || k.type == fe::KnobType_t::SPLIT_P_SLC;
      const bool tile = k.type == fe::KnobType_t::TILE_SIZE || k.type == fe::KnobType_t::TILEK;
      const int64_t step = k.stride > 0 ? k.stride : 1;
      if ((!split && !tile) || k.maxValue <= k.minValue || (tile && (k.maxValue - k.minValue) / step > 32)) continue;
      std::vector<int64_t> values;
      if (split)
        values = {0, 1, 2, 3, 4, 6, 8, 12, 16};
      else
        for (int64_t v = k.minValue; v <= k.maxValue; v += step) values.push_back(v);
      const std::string kname = knob_name(k.type);
      for (int64_t v : values) {
        if (v < k.minValue || v > k.maxValue || (v - k.minValue) % step) continue;
        auto want = chosen;
        if (want.count(k.type) && want[k.type] == v) continue;
        want[k.type] = v;
        const int64_t before = g.get_execution_plan_count();
        (void)g.create_execution_plan(eng, want);  // a config that failed its query does not build
        if (g.get_execution_plan_count() > before)
          c.knobbed.emplace_back(before, "engine " + std::to_string(eng) + " " + kname + "=" + std::to_string(v));
      }
    }
  }
}

// ConvTune::in_graph: builds up to t.max_plans of the listed plans, times each inside a captured
// graph and returns the index to run (-1 when none could be built). *report: "<us> vs <us>".
int64_t tune_in_graph(FrontendConv& c, const ConvShape& s, const ConvTune& t, size_t ws_limit, std::string* report) {
  auto& g = c.graph;
  std::vector<int64_t> built;
  const int64_t heur = c.heur_plans >= 0 ? c.heur_plans : g.get_execution_plan_count();
  for (int64_t i = 0; i < g.get_execution_plan_count(); ++i) {
    if (i < heur && static_cast<int>(built.size()) >= t.max_plans) continue;  // knob variants come on top
    int64_t ws = 0;
    if (g.build_plan_at_index(i).is_good() && g.get_workspace_size_plan_at_index(i, ws).is_good() &&
        ws <= static_cast<int64_t>(ws_limit))
      built.push_back(i);
  }
  auto knob_note = [&](int64_t taken) {
    if (c.heur_plans < 0) return std::string();
    const auto n = std::count_if(built.begin(), built.end(), [&](int64_t i) { return i >= heur; });
    std::string r = "; " + std::to_string(n) + " of " + std::to_string(c.knobbed.size()) + " knob variants built";
    for (const auto& [i, what] : c.knobbed)
      if (i == taken) r += ", taken: " + what;
    return r + "; " + c.knob_ranges;
  };
  if (built.size() < 2) {
    if (!built.empty()) *report = "graph-tuned over 1 plan" + knob_note(built[0]);
    return built.empty() ? -1 : built[0];
  }
  const size_t ny = randomize_conv_inputs(s, const_cast<void*>(t.x), c.R ? const_cast<void*>(t.residual) : nullptr,
                                          t.stream);
  auto vp = c.pack(t.x, t.w, t.bias, t.residual, t.y);
  if (cudnnSetStream(c.h, t.stream) != CUDNN_STATUS_SUCCESS) throw Error("cudnnSetStream failed");
  auto run = [&](int64_t i) -> std::function<void()> {
    return [&, i] {
      auto st = g.execute_plan_at_index(c.h, vp, t.ws, i);
      if (!st.is_good()) throw Error("cuDNN plan " + std::to_string(i) + ": " + st.get_message());
    };
  };
  const double first_us = graph_time_us(run(built[0]), t.stream);
  const auto ref = download_half(t.y, ny, t.stream);
  std::vector<std::function<void()>> others;
  for (size_t k = 1; k < built.size(); ++k) others.push_back(run(built[k]));
  double best_us = first_us;
  const int k = fastest_matching(others, ref, t.y, t.stream, 0.98, &best_us);  // >= 2 % faster, same output
  const int64_t best = k >= 0 ? built[k + 1] : built[0];
  char buf[96];
  std::snprintf(buf, sizeof buf, "graph-tuned over %zu plans: %.2f us, first %.2f us", built.size(), best_us, first_us);
  *report = buf + knob_note(best);
  return best;
}

bool pick_at(const FrontendConv& c, int64_t i, PlanPick* out) {
  int64_t eng = -1;
  std::unordered_map<fe::KnobType_t, int64_t> knobs;
  if (!c.graph.get_engine_and_knobs_at_index(i, eng, knobs).is_good() || eng < 0) return false;
  out->engine = eng;
  out->knobs.clear();
  for (const auto& [k, v] : knobs) out->knobs.emplace_back(static_cast<int64_t>(k), v);
  std::sort(out->knobs.begin(), out->knobs.end());
  return true;
}

// The plan's behaviour notes and workspace; nullptr (with `why`) when the workspace is above the limit.
std::unique_ptr<FusedConv> finish_plan(std::unique_ptr<FrontendConv> c, bool at, size_t ws_limit, std::string* why) {
  auto& g = c->graph;
  std::vector<fe::BehaviorNote_t> notes;
  if ((at ? g.get_behavior_notes_for_plan_at_index(c->plan, notes) : g.get_behavior_notes(notes)).is_good())
    for (auto n : notes) {
      c->rtc = c->rtc || n == fe::BehaviorNote_t::RUNTIME_COMPILATION;
      c->lt = c->lt || n == fe::BehaviorNote_t::CUBLASLT_DEPENDENCY;
    }
  auto st = at ? g.get_workspace_size_plan_at_index(c->plan, c->ws) : g.get_workspace_size(c->ws);
  if (!st.is_good()) {
    *why = "get_workspace_size: " + st.get_message();
    return nullptr;
  }
  if (static_cast<size_t>(c->ws) > ws_limit) {
    *why = "workspace " + std::to_string(c->ws) + " bytes above the limit";
    return nullptr;
  }
  return c;
}

// The listed plan (kTunedModes) whose engine and knobs are `want`'s, or -1. For a pick with a knob
// this frontend has no name for (see picked_plan).
int64_t listed_index(const FrontendConv& c, const PlanPick& want) {
  for (int64_t i = 0; i < c.graph.get_execution_plan_count(); ++i) {
    PlanPick p;
    if (pick_at(c, i, &p) && p == want) return i;
  }
  return -1;
}

// ConvTune::pick: the one plan of an earlier load, built directly (no timing; a runtime-compiled
// plan still compiles once, as the untuned default's does).
std::unique_ptr<FusedConv> picked_plan(std::unique_ptr<FrontendConv> c, const ConvTune& t, size_t ws_limit,
                                       std::string* why, std::string* plan_name) {
  auto& g = c->graph;
  auto fail = [&](const char* step, fe::error_t e) {
    *why = "cached plan " + t.pick->text() + ": " + step + ": " + e.get_message();
    return nullptr;
  };
  // A knob of type 0 (NOT_SET) is one the backend reports and this frontend cannot name, and
  // create_execution_plan refuses it. Measured (H100, cuDNN 9.19, session 30): the stem conv's
  // engine 32 reads back as "32;0:2,2:2,6:2,7:0" and was timed again at every load. Such a pick
  // can only be a plan the heuristics listed (a knob variant built from it would have failed the
  // same way), so it is found again in their list: a heuristics query, still no timing.
  const bool unnamed = std::any_of(t.pick->knobs.begin(), t.pick->knobs.end(),
                                   [](const auto& kv) { return kv.first == static_cast<int64_t>(fe::KnobType_t::NOT_SET); });
  if (unnamed) {
    if (auto e = g.create_execution_plans(kTunedModes); !e.is_good())
      return fail("create_execution_plans", e);
  } else {
    std::unordered_map<fe::KnobType_t, int64_t> knobs;
    for (const auto& [k, v] : t.pick->knobs) knobs[static_cast<fe::KnobType_t>(k)] = v;
    if (auto e = g.create_execution_plan(t.pick->engine, knobs); !e.is_good()) return fail("create_execution_plan", e);
  }
  if (conv_plans_deterministic()) g.deselect_numeric_notes({fe::NumericalNote_t::NONDETERMINISTIC});
  if (auto e = g.check_support(); !e.is_good()) return fail("check_support", e);
  const int64_t plans = g.get_execution_plan_count();
  const int64_t index = unnamed ? listed_index(*c, *t.pick) : 0;
  if (unnamed && index < 0) {
    *why = "cached plan " + t.pick->text() + ": not among the " + std::to_string(plans) + " listed plans";
    return nullptr;
  }
  if (!unnamed && plans != 1) {
    *why = "cached plan " + t.pick->text() + ": " + std::to_string(plans) + " plans";
    return nullptr;
  }
  if (auto e = g.build_plan_at_index(index); !e.is_good()) return fail("build_plan_at_index", e);
  c->plan = index;
  PlanPick got;
  if (!pick_at(*c, index, &got) || got != *t.pick) {
    *why = "cached plan " + t.pick->text() + " built as " + got.text();
    return nullptr;
  }
  if (!g.get_plan_name_at_index(index, c->name).is_good()) c->name = "?";
  c->name += " (cached tuning)";
  if (plan_name) *plan_name = c->name;
  if (t.taken) *t.taken = got;
  return finish_plan(std::move(c), true, ws_limit, why);
}

}  // namespace

std::unique_ptr<FusedConv> make_fused_conv(cudnnHandle_t h, const ConvShape& s, bool has_bias, bool has_residual,
                                           graph::Act act, size_t ws_limit, std::string* why, const ConvTune* tune,
                                           std::string* plan_name, bool res_after_act) {
  if (act != graph::Act::none && act != graph::Act::relu && act != graph::Act::silu) {
    *why = "activation not fusable";
    return nullptr;
  }
  auto c = std::make_unique<FrontendConv>();
  c->h = h;
  auto& g = c->graph;
  g.set_io_data_type(fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  c->X = nhwc(g, "x", s.B, s.Ci, s.H, s.W);
  c->W = nhwc(g, "w", s.Co, s.Ci, s.kh, s.kw);
  auto attr = fe::graph::Conv_fprop_attributes()
                  .set_padding({s.pad, s.pad})
                  .set_stride({s.stride, s.stride})
                  .set_dilation({1, 1});
  TensorPtr t = g.conv_fprop(c->X, c->W, attr);
  t->set_data_type(fe::DataType_t::FLOAT);
  auto add = [&](TensorPtr a, TensorPtr b) {
    auto o = g.pointwise(a, b, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::ADD));
    o->set_data_type(fe::DataType_t::FLOAT);
    return o;
  };
  if (has_bias) {
    c->B = g.tensor(fe::graph::Tensor_attributes()
                        .set_name("b")
                        .set_dim({1, s.Co, 1, 1})
                        .set_stride({s.Co, 1, s.Co, s.Co})
                        .set_data_type(fe::DataType_t::HALF));
    t = add(t, c->B);
  }
  const bool res_first = has_residual && !(res_after_act && act != graph::Act::none);
  if (res_first) {
    c->R = nhwc(g, "r", s.B, s.Co, s.Ho, s.Wo);
    t = add(t, c->R);
  }
  if (act != graph::Act::none) {
    auto mode = act == graph::Act::relu ? fe::PointwiseMode_t::RELU_FWD : fe::PointwiseMode_t::SWISH_FWD;
    t = g.pointwise(t, fe::graph::Pointwise_attributes().set_mode(mode));
    t->set_data_type(fe::DataType_t::FLOAT);
  }
  if (has_residual && !res_first) {
    c->R = nhwc(g, "r", s.B, s.Co, s.Ho, s.Wo);
    t = add(t, c->R);
  }
  if (!has_bias && !has_residual && act == graph::Act::none) {
    *why = "nothing to fuse";
    return nullptr;
  }
  t->set_output(true).set_data_type(fe::DataType_t::HALF);
  c->Y = t;
  auto ok = [&](fe::error_t e, const char* step) {
    if (e.is_good()) return true;
    *why = std::string(step) + ": " + e.get_message();
    return false;
  };
  g.deselect_workspace_greater_than(static_cast<int64_t>(ws_limit));
  if (!ok(g.validate(), "validate") || !ok(g.build_operation_graph(h), "build_operation_graph")) return nullptr;
  if (tune && tune->pick) return picked_plan(std::move(c), *tune, ws_limit, why, plan_name);
  if (!ok(g.create_execution_plans(tune && tune->in_graph && tune->max_plans > 0
                                       ? kTunedModes
                                       : std::vector<fe::HeurMode_t>{fe::HeurMode_t::A}),
          "create_execution_plans"))
    return nullptr;
  if (tune && tune->in_graph && tune->max_plans > 0 && tune->knob_max_pixels > 0 &&
      int64_t{s.B} * s.Ho * s.Wo <= tune->knob_max_pixels)
    add_knob_plans(*c, 2);
  // A replayed graph must give the same bits (tests/gpu/test_cuda_determinism.cpp); plans that
  // cuDNN marks non-deterministic reduce partial sums through atomics.
  if (conv_plans_deterministic()) g.deselect_numeric_notes({fe::NumericalNote_t::NONDETERMINISTIC});
  if (!ok(g.check_support(), "check_support")) return nullptr;
  bool tuned = false;
  std::string tune_report;
  if (tune && tune->in_graph && tune->max_plans > 0) {
    c->plan = tune_in_graph(*c, s, *tune, ws_limit, &tune_report);
  } else if (tune && tune->max_plans > 0) {
    // Measured on the H200 (fp16, batch 1): the heuristic's first plan is not always the
    // fastest for the small-spatial convs of r18vd; timing a few candidates is cheap next to
    // the NVRTC compile of each runtime-fusion plan, which is what max_plans bounds.
    const int64_t count = g.get_execution_plan_count();
    int built = 0;
    for (int64_t i = 0; i < count && i < tune->max_plans; ++i)
      if (g.build_plan_at_index(i).is_good()) ++built;
    if (built > 0) {
      std::unordered_map<int64_t, void*> pack = {{c->X->get_uid(), const_cast<void*>(tune->x)},
                                                 {c->W->get_uid(), const_cast<void*>(tune->w)},
                                                 {c->Y->get_uid(), tune->y}};
      if (c->B) pack[c->B->get_uid()] = const_cast<void*>(tune->bias);
      if (c->R) pack[c->R->get_uid()] = const_cast<void*>(tune->residual);
      if (cudnnSetStream(h, tune->stream) == CUDNN_STATUS_SUCCESS && g.autotune(h, pack, tune->ws).is_good())
        tuned = true;
    }
  }
  const bool at = c->plan >= 0;  // a plan index of tune_in_graph, not cuDNN's candidate
  if (!at && !tuned && !ok(g.build_plans(), "build_plans")) return nullptr;
  if (!(at ? g.get_plan_name_at_index(c->plan, c->name) : g.get_plan_name(c->name)).is_good()) c->name = "?";
  if (!tune_report.empty()) c->name += " (" + tune_report + ")";
  if (plan_name) *plan_name = c->name + (tuned ? " (tuned)" : "");
  if (at && tune->taken && !pick_at(*c, c->plan, tune->taken)) tune->taken->engine = -1;
  return finish_plan(std::move(c), at, ws_limit, why);
}

#else

std::unique_ptr<FusedConv> make_fused_conv(cudnnHandle_t, const ConvShape&, bool, bool, graph::Act, size_t,
                                           std::string* why, const ConvTune*, std::string*, bool) {
  *why = "built without the cuDNN frontend headers (DETFORGE_CUDNN_FRONTEND_INCLUDE)";
  return nullptr;
}

#endif

}  // namespace detforge::cuda
