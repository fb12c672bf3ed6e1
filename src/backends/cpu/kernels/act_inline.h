// Inline copies of graph::apply_act's formulas, so elementwise loops can inline and vectorise
// them. Same expressions as src/graph/ir.cpp (GELU is the erf form); test_cpu_elementwise
// checks them against apply_act.
#pragma once
#include <cmath>

#include "graph/ir.h"

namespace detforge::cpu {

template <graph::Act A>
inline float act_t(float x) {
  if constexpr (A == graph::Act::relu) return x > 0.f ? x : 0.f;
  else if constexpr (A == graph::Act::silu) return x / (1.f + std::exp(-x));
  else if constexpr (A == graph::Act::gelu) return 0.5f * x * (1.f + std::erf(x * 0.70710678118654752440f));
  else if constexpr (A == graph::Act::sigmoid) return 1.f / (1.f + std::exp(-x));
  else return x;
}

// Calls f.template operator()<A>() with the activation as a compile-time constant.
template <class F>
inline void with_act(graph::Act a, F&& f) {
  switch (a) {
    case graph::Act::none: f.template operator()<graph::Act::none>(); break;
    case graph::Act::relu: f.template operator()<graph::Act::relu>(); break;
    case graph::Act::silu: f.template operator()<graph::Act::silu>(); break;
    case graph::Act::gelu: f.template operator()<graph::Act::gelu>(); break;
    case graph::Act::sigmoid: f.template operator()<graph::Act::sigmoid>(); break;
  }
}

}  // namespace detforge::cpu
