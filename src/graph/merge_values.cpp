// merge_value_projections: RT-DETR's three decoder layers each project the same encoder memory
// [8400, 256] into their deformable attention's value. On the H200 (fp16, batch 1) these are
// three 8400x256x256 GEMMs of ~5.5 us each, held back behind the top-k (DETFORGE_CUDA_LATE_VALUE)
// and then slowing the decoder's first small kernels while they hold the SMs
// (ab-2026-12-04-session12, call 2 timeline). One 8400x768x256 GEMM does the same work in one
// launch, and each ms_deform_attn reads its value as a column slice (attr v_col, row stride 768).
#include <algorithm>
#include <map>

#include "graph/pass_util.h"
#include "graph/passes.h"

namespace detforge::graph {

int merge_value_projections(Graph& g) {
  const auto cons = consumers(g);
  // Per input tensor, the value linears that read it, in op order.
  std::map<TensorId, std::vector<int>> groups;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op& l = g.ops[i];
    const TensorId y = l.outputs[0];
    if (!plain_constant_linear(g, l) || !read_only_as_deform_values(g, cons, y)) continue;
    // Read once per op, as a whole value (not yet a slice of an earlier merge).
    const bool whole = std::all_of(cons[y].begin(), cons[y].end(), [&](int c) {
      return std::count(g.ops[c].inputs.begin(), g.ops[c].inputs.end(), y) == 1 && !g.ops[c].attrs.contains("v_col");
    });
    if (whole) groups[l.inputs[0]].push_back(static_cast<int>(i));
  }
  std::vector<char> dead(g.ops.size(), 0);
  int n = 0;
  for (const auto& [input, ids] : groups) {
    if (ids.size() < 2) continue;
    std::vector<const Op*> ls;
    for (int i : ids) ls.push_back(&g.ops[i]);
    const std::string name = g.ops[ids[0]].name + "(" + std::to_string(ids.size()) + " value projections)";
    auto merged = stack_linears(g, ls, name);
    if (!merged) continue;
    int64_t col = 0;
    for (int i : ids) {
      const TensorId y = g.ops[i].outputs[0];
      for (int c : cons[y]) {
        g.ops[c].inputs[0] = merged->outputs[0];
        g.ops[c].attrs["v_col"] = col;
      }
      col += g.tensor(y).shape[1];
      dead[i] = 1;
    }
    // In the first projection's place: every member reads only `input`, which exists by then.
    dead[ids[0]] = 0;
    g.ops[ids[0]] = std::move(*merged);
    n += static_cast<int>(ids.size());
  }
  erase_ops(g, dead);
  return n;
}

}  // namespace detforge::graph
