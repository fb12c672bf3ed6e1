#include "graph/ir.h"

#include <cmath>
#include <unordered_map>

#include "detforge/types.h"

namespace detforge::graph {

namespace {
template <class E, size_t N>
const char* name_of(const char* const (&names)[N], E e) {
  auto i = static_cast<size_t>(e);
  return i < N ? names[i] : "?";
}
template <class E, size_t N>
E parse_name(const char* const (&names)[N], const std::string& s, const char* what) {
  for (size_t i = 0; i < N; ++i)
    if (s == names[i]) return static_cast<E>(i);
  throw Error(std::string("unknown ") + what + " '" + s + "'");
}
const char* const kDTypeNames[] = {"f32", "f16", "bf16", "fp8_e4m3", "i32"};
const char* const kOpNames[] = {"conv2d",     "batch_norm", "max_pool2d",   "avg_pool2d",
                                "upsample_nearest2x", "concat", "add", "mul_rows",
                                "activation", "linear",     "layer_norm",   "attention",
                                "ms_deform_attn", "topk_rows", "gather_rows", "box_refine",
                                "reshape"};
const char* const kActNames[] = {"none", "relu", "silu", "gelu", "sigmoid"};
}  // namespace

const char* dtype_name(DType t) { return name_of(kDTypeNames, t); }
DType dtype_from_name(const std::string& s) { return parse_name<DType>(kDTypeNames, s, "dtype"); }
size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::fp8_e4m3: return 1;
  }
  return 4;
}
const char* op_kind_name(OpKind k) { return name_of(kOpNames, k); }
OpKind op_kind_from_name(const std::string& s) { return parse_name<OpKind>(kOpNames, s, "op kind"); }
const char* act_name(Act a) { return name_of(kActNames, a); }
Act act_from_name(const std::string& s) { return parse_name<Act>(kActNames, s, "activation"); }

float apply_act(Act a, float x) {
  switch (a) {
    case Act::none: return x;
    case Act::relu: return x > 0.f ? x : 0.f;
    case Act::silu: return x / (1.f + std::exp(-x));
    case Act::gelu: return 0.5f * x * (1.f + std::erf(x * 0.70710678118654752440f));
    case Act::sigmoid: return 1.f / (1.f + std::exp(-x));
  }
  return x;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

int Op::attr_int(const char* key) const {
  if (!attrs.contains(key)) throw Error("op " + name + " (" + op_kind_name(kind) + ") lacks attribute '" + key + "'");
  return attrs.at(key).get<int>();
}
int Op::attr_int_or(const char* key, int dflt) const { return attrs.contains(key) ? attr_int(key) : dflt; }
float Op::attr_float(const char* key) const {
  if (!attrs.contains(key)) throw Error("op " + name + " (" + op_kind_name(kind) + ") lacks attribute '" + key + "'");
  return attrs.at(key).get<float>();
}
bool Op::res_after_act() const { return attr_int_or("res_after_act", 0) != 0; }
Act Op::act() const { return attrs.contains("act") ? act_from_name(attrs.at("act").get<std::string>()) : Act::none; }

TensorId Graph::add_tensor(Tensor t) {
  tensors.push_back(std::move(t));
  return static_cast<TensorId>(tensors.size() - 1);
}
TensorId Graph::add_const(std::string name, std::vector<int64_t> shape, std::vector<float> data) {
  Tensor t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.is_const = true;
  if (static_cast<int64_t>(data.size()) != t.numel())
    throw Error("constant " + t.name + ": " + std::to_string(data.size()) + " values for " +
                std::to_string(t.numel()) + " elements");
  t.data = std::move(data);
  return add_tensor(std::move(t));
}
TensorId Graph::add_activation(std::string name, std::vector<int64_t> shape, DType dt) {
  Tensor t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.dtype = dt;
  return add_tensor(std::move(t));
}
void Graph::add_op(Op op) { ops.push_back(std::move(op)); }

TensorId Graph::find(const std::string& name) const {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name) return static_cast<TensorId>(i);
  return kNoTensor;
}

namespace {

// Why `width` columns from column `col` do not fit rows `ld` wide ("" when they do).
std::string column_slice_error(const std::string& what, int64_t ld, int64_t width, int64_t col) {
  if (col >= 0 && col + width <= ld) return "";
  return what + " has " + std::to_string(ld) + " columns, the op reads " + std::to_string(width) + " from column " +
         std::to_string(col);
}

}  // namespace

AttentionColumns attention_columns(const Op& op) {
  return {op.attr_int_or("q_col", 0), op.attr_int_or("k_col", 0), op.attr_int_or("v_col", 0)};
}

std::string attention_columns_error(const Graph& g, const Op& op) {
  const auto cols = attention_columns(op);
  const int64_t col[3] = {cols.q, cols.k, cols.v};
  if (op.inputs.size() != 3 || op.outputs.size() != 1) return "attention needs 3 inputs and 1 output";
  const auto& out = g.tensor(op.outputs[0]).shape;
  if (out.size() != 2) return "the output is not [rows, channels]";
  for (int i = 0; i < 3; ++i) {
    const auto& s = g.tensor(op.inputs[i]).shape;
    if (s.size() != 2) return "input " + std::to_string(i) + " is not [rows, channels]";
    if (auto why = column_slice_error("input " + std::to_string(i), s[1], out[1], col[i]); !why.empty()) return why;
  }
  return "";
}

DeformColumns deform_columns(const Graph& g, const Op& op) {
  auto width = [&](const std::vector<TensorId>& ts, size_t i) -> int64_t {
    if (ts.size() <= i) return 0;
    const auto& s = g.tensor(ts[i]).shape;
    return s.size() == 2 ? s[1] : 0;
  };
  const int64_t hlp = int64_t{op.attr_int("heads")} * op.attr_int("levels") * op.attr_int("points");
  DeformColumns c;
  c.off_col = op.attr_int_or("off_col", 0);
  c.aw_col = op.attr_int_or("aw_col", 0);
  c.v_col = op.attr_int_or("v_col", 0);
  c.off_ld = width(op.inputs, 1);
  c.aw_ld = width(op.inputs, 2);
  c.v_ld = width(op.inputs, 0);
  c.off_width = hlp * 2;
  c.aw_width = hlp;
  c.v_width = width(op.outputs, 0);
  return c;
}

std::string deform_columns_error(const Graph& g, const Op& op) {
  if (op.inputs.size() != 5 || op.outputs.size() != 1) return "ms_deform_attn needs 5 inputs and 1 output";
  const auto& off = g.tensor(op.inputs[1]).shape;
  const auto& aw = g.tensor(op.inputs[2]).shape;
  if (off.size() != 2) return "input 1 (offsets) is not [queries, columns]";
  if (aw.size() != 2) return "input 2 (logits) is not [queries, columns]";
  if (g.tensor(op.inputs[0]).shape.size() != 2) return "input 0 (value) is not [tokens, columns]";
  if (g.tensor(op.outputs[0]).shape.size() != 2) return "the output is not [queries, channels]";
  if (off[0] != aw[0])
    return "offsets have " + std::to_string(off[0]) + " rows, logits " + std::to_string(aw[0]);
  const auto c = deform_columns(g, op);
  if (auto why = column_slice_error("input 1 (offsets)", c.off_ld, c.off_width, c.off_col); !why.empty()) return why;
  if (auto why = column_slice_error("input 2 (logits)", c.aw_ld, c.aw_width, c.aw_col); !why.empty()) return why;
  return column_slice_error("input 0 (value)", c.v_ld, c.v_width, c.v_col);
}

void Graph::validate() const {
  std::vector<char> ready(tensors.size(), 0);
  auto check_id = [&](TensorId id, const std::string& where) {
    if (id < 0 || static_cast<size_t>(id) >= tensors.size())
      throw Error("graph: " + where + " refers to tensor id " + std::to_string(id) + " out of range");
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (t.is_const) {
      ready[i] = 1;
      if (!t.data.empty() && static_cast<int64_t>(t.data.size()) != t.numel())
        throw Error("graph: constant " + t.name + " has " + std::to_string(t.data.size()) + " values for shape of " +
                    std::to_string(t.numel()));
    }
  }
  for (TensorId id : inputs) {
    check_id(id, "graph input");
    ready[id] = 1;
  }
  for (const Op& op : ops) {
    if (op.attrs.contains("res_after_act") && (op.kind != OpKind::conv2d || op.inputs.size() != 4))
      throw Error("graph: op " + op.name + " (" + op_kind_name(op.kind) +
                  ") has res_after_act, which only a conv2d with a residual input may have");
    for (TensorId id : op.inputs) {
      check_id(id, "op " + op.name);
      if (!ready[id])
        throw Error("graph: op " + op.name + " (" + op_kind_name(op.kind) + ") reads " + tensors[id].name +
                    " before anything produces it");
    }
    for (TensorId id : op.outputs) {
      check_id(id, "op " + op.name);
      if (tensors[id].is_const) throw Error("graph: op " + op.name + " writes constant " + tensors[id].name);
      if (ready[id]) throw Error("graph: tensor " + tensors[id].name + " is produced twice (again by " + op.name + ")");
      ready[id] = 1;
    }
  }
  for (TensorId id : outputs) {
    check_id(id, "graph output");
    if (!ready[id]) throw Error("graph: output " + tensors[id].name + " is never produced");
  }
}

nlohmann::json Graph::to_json() const {
  nlohmann::json jt = nlohmann::json::array();
  for (const Tensor& t : tensors)
    jt.push_back({{"name", t.name}, {"shape", t.shape}, {"dtype", dtype_name(t.dtype)}, {"const", t.is_const}});
  nlohmann::json jo = nlohmann::json::array();
  for (const Op& op : ops)
    jo.push_back({{"kind", op_kind_name(op.kind)}, {"name", op.name}, {"inputs", op.inputs},
                  {"outputs", op.outputs}, {"attrs", op.attrs}});
  return {{"tensors", jt}, {"ops", jo}, {"inputs", inputs}, {"outputs", outputs}};
}

Graph Graph::from_json(const nlohmann::json& j) {
  Graph g;
  try {
    for (const auto& t : j.at("tensors")) {
      Tensor x;
      x.name = t.at("name").get<std::string>();
      x.shape = t.at("shape").get<std::vector<int64_t>>();
      for (auto d : x.shape)
        if (d < 0 || d > (int64_t{1} << 31)) throw Error("graph: tensor " + x.name + " has a bad dimension");
      x.dtype = dtype_from_name(t.at("dtype").get<std::string>());
      x.is_const = t.at("const").get<bool>();
      g.tensors.push_back(std::move(x));
    }
    for (const auto& o : j.at("ops")) {
      Op op;
      op.kind = op_kind_from_name(o.at("kind").get<std::string>());
      op.name = o.at("name").get<std::string>();
      op.inputs = o.at("inputs").get<std::vector<TensorId>>();
      op.outputs = o.at("outputs").get<std::vector<TensorId>>();
      op.attrs = o.at("attrs");
      g.ops.push_back(std::move(op));
    }
    g.inputs = j.at("inputs").get<std::vector<TensorId>>();
    g.outputs = j.at("outputs").get<std::vector<TensorId>>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("graph JSON is malformed: ") + e.what());
  }
  return g;
}

}  // namespace detforge::graph
