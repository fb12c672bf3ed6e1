// Two r18vd engines' outputs (logits, boxes, query indices) at batch `B` compared query by query.
// A near-tie in the encoder's top-k may reorder the selected queries (a swap shifts every later
// position), so queries are matched by anchor index; scores (sigmoid of the logits) and boxes
// must then agree within `tol`, and all but 10 queries must be matched.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "backends/engine.h"

namespace detforge::test {

inline void expect_r18vd_outputs_agree(const std::vector<HostTensor>& a, const std::vector<HostTensor>& b, int64_t B,
                                       double tol, const char* label) {
  const auto& qi0 = a[2].data;
  const auto& qi1 = b[2].data;
  const int64_t nq = static_cast<int64_t>(qi0.size()) / B, nc = static_cast<int64_t>(a[0].data.size()) / (B * nq);
  // Scores, as the fp16 parity test compares them: a logit of -7 may move by 0.3 through three
  // fp16 decoder layers while its score moves by 3e-4.
  auto score = [](float v) { return 1.f / (1.f + std::exp(-v)); };
  int same = 0;
  double max_score = 0, max_box = 0;
  for (int64_t im = 0; im < B; ++im)
    for (int64_t q1 = 0; q1 < nq; ++q1) {
      int64_t q0 = -1;
      for (int64_t k = 0; k < nq && q0 < 0; ++k)
        if (qi0[im * nq + k] == qi1[im * nq + q1]) q0 = k;
      if (q0 < 0) continue;
      ++same;
      const int64_t i0 = im * nq + q0, i1 = im * nq + q1;
      for (int64_t c = 0; c < nc; ++c) {
        const float s0 = score(a[0].data[i0 * nc + c]), s1 = score(b[0].data[i1 * nc + c]);
        max_score = std::max(max_score, (double)std::fabs(s0 - s1));
        EXPECT_NEAR(s0, s1, tol) << label << ": image " << im << " query " << q1;
      }
      for (int k = 0; k < 4; ++k) {
        const float b0 = a[1].data[i0 * 4 + k], b1 = b[1].data[i1 * 4 + k];
        max_box = std::max(max_box, (double)std::fabs(b0 - b1));
        EXPECT_NEAR(b0, b1, tol) << label << ": image " << im << " query " << q1;
      }
    }
  std::printf("%s: %d of %ld queries matched, max |score diff| %.3g, max |box diff| %.3g\n", label, same,
              (long)(B * nq), max_score, max_box);
  EXPECT_GE(same, B * nq - 10) << label;
}

}  // namespace detforge::test
