#include "demo/scenes.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace detforge::demo {
namespace {

constexpr double kPi = 3.14159265358979323846;

// splitmix64: tiny, fast and the same everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  int range(int lo, int hi) { return lo + int(next() % uint64_t(hi - lo + 1)); }  // [lo, hi]

 private:
  uint64_t s_;
};

using Rgb = std::array<double, 3>;
using Pt = std::pair<double, double>;

Rgb random_colour(Rng& r) { return {double(r.range(0, 255)), double(r.range(0, 255)), double(r.range(0, 255))}; }

struct Canvas {
  int w, h;
  std::vector<double> px;  // float RGB while composing the background
  Rgb get(int x, int y) const {
    const double* p = &px[(size_t(y) * w + x) * 3];
    return {p[0], p[1], p[2]};
  }
  void set(int x, int y, const Rgb& c) {
    if (x < 0 || y < 0 || x >= w || y >= h) return;
    double* p = &px[(size_t(y) * w + x) * 3];
    p[0] = c[0];
    p[1] = c[1];
    p[2] = c[2];
  }
};

// Background: a linear or radial gradient between two colours, 3-9 soft blobs, a few faint
// stripes or none, and per-pixel noise. The photo crops of the training scenes are textured;
// this gives comparable clutter without shipping photos.
void paint_background(Canvas& c, Rng& r) {
  const Rgb a = random_colour(r), b = random_colour(r);
  const bool radial = r.uniform() < 0.35;
  const double ang = r.uniform(0, 2 * kPi), ca = std::cos(ang), sa = std::sin(ang);
  const double rcx = r.uniform(0, c.w), rcy = r.uniform(0, c.h), rmax = std::hypot(c.w, c.h);
  for (int y = 0; y < c.h; ++y)
    for (int x = 0; x < c.w; ++x) {
      double t = radial ? std::hypot(x - rcx, y - rcy) / rmax
                        : 0.5 + ((x - c.w / 2.0) * ca + (y - c.h / 2.0) * sa) / rmax;
      t = std::clamp(t, 0.0, 1.0);
      c.set(x, y, {a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t, a[2] + (b[2] - a[2]) * t});
    }
  const int blobs = r.range(3, 9);
  for (int i = 0; i < blobs; ++i) {
    const Rgb col = random_colour(r);
    const double bx = r.uniform(0, c.w), by = r.uniform(0, c.h);
    const double sx = r.uniform(30, 220), sy = r.uniform(30, 220), strength = r.uniform(0.3, 0.8);
    const int x0 = std::max(0, int(bx - 3 * sx)), x1 = std::min(c.w, int(bx + 3 * sx));
    const int y0 = std::max(0, int(by - 3 * sy)), y1 = std::min(c.h, int(by + 3 * sy));
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x) {
        const double dx = (x - bx) / sx, dy = (y - by) / sy;
        const double wgt = strength * std::exp(-0.5 * (dx * dx + dy * dy));
        const Rgb p = c.get(x, y);
        c.set(x, y, {p[0] + (col[0] - p[0]) * wgt, p[1] + (col[1] - p[1]) * wgt, p[2] + (col[2] - p[2]) * wgt});
      }
  }
  if (r.uniform() < 0.4) {  // faint stripes
    const double period = r.uniform(8, 40), amp = r.uniform(6, 20), sang = r.uniform(0, kPi);
    const double cs = std::cos(sang), sn = std::sin(sang);
    for (int y = 0; y < c.h; ++y)
      for (int x = 0; x < c.w; ++x) {
        const double v = amp * std::sin(2 * kPi * (x * cs + y * sn) / period);
        const Rgb p = c.get(x, y);
        c.set(x, y, {p[0] + v, p[1] + v, p[2] + v});
      }
  }
  const double noise = r.uniform(2, 18);
  for (double& v : c.px) v += noise * (r.uniform() + r.uniform() + r.uniform() - 1.5);
}

// The polygon of each non-round class, as scenes.py builds it.
std::vector<Pt> shape_polygon(int cls, double cx, double cy, double rad, double rot) {
  std::vector<Pt> pts;
  auto regular = [&](int n, double r0, double r1) {
    for (int i = 0; i < n; ++i) {
      const double rr = (i % 2 == 0) ? r0 : r1;
      const double a = rot + 2 * kPi * i / n;
      pts.emplace_back(cx + rr * std::cos(a), cy + rr * std::sin(a));
    }
  };
  switch (cls) {
    case 1: regular(4, rad, rad); break;         // square
    case 2: regular(3, rad, rad); break;         // triangle
    case 7: regular(6, rad, rad); break;         // hexagon
    case 4: regular(10, rad, rad * 0.45); break;  // star
    case 3:                                       // diamond
      for (double a : {0.0, kPi / 2, kPi, 3 * kPi / 2})
        pts.emplace_back(cx + rad * 0.6 * std::cos(rot + a), cy + rad * std::sin(rot + a));
      break;
    case 5: {  // cross
      const double w = rad * 0.35;
      const double q[12][2] = {{-w, -rad}, {w, -rad}, {w, -w}, {rad, -w}, {rad, w}, {w, w},
                               {w, rad},   {-w, rad}, {-w, w}, {-rad, w}, {-rad, -w}, {-w, -w}};
      const double c = std::cos(rot), s = std::sin(rot);
      for (const auto& p : q) pts.emplace_back(cx + p[0] * c - p[1] * s, cy + p[0] * s + p[1] * c);
      break;
    }
  }
  return pts;
}

// Even-odd scanline fill; pixel (x, y) is the point (x, y), as in PIL's ImageDraw.
void fill_polygon(Canvas& c, const std::vector<Pt>& pts, const Rgb& col) {
  double ymin = 1e9, ymax = -1e9;
  for (const auto& p : pts) {
    ymin = std::min(ymin, p.second);
    ymax = std::max(ymax, p.second);
  }
  std::vector<double> xs;
  for (int y = std::max(0, int(std::ceil(ymin))); y <= std::min(c.h - 1, int(std::floor(ymax))); ++y) {
    xs.clear();
    for (size_t i = 0; i < pts.size(); ++i) {
      const Pt& a = pts[i];
      const Pt& b = pts[(i + 1) % pts.size()];
      if ((a.second <= y && b.second > y) || (b.second <= y && a.second > y))
        xs.push_back(a.first + (y - a.second) * (b.first - a.first) / (b.second - a.second));
    }
    std::sort(xs.begin(), xs.end());
    for (size_t k = 0; k + 1 < xs.size(); k += 2)
      for (int x = std::max(0, int(std::ceil(xs[k]))); x <= std::min(c.w - 1, int(std::floor(xs[k + 1]))); ++x)
        c.set(x, y, col);
  }
}

void draw_polyline(Canvas& c, const std::vector<Pt>& pts, const Rgb& col) {  // 1-px closed outline
  for (size_t i = 0; i < pts.size(); ++i) {
    const Pt& a = pts[i];
    const Pt& b = pts[(i + 1) % pts.size()];
    const int steps = int(std::ceil(std::max(std::fabs(b.first - a.first), std::fabs(b.second - a.second)))) + 1;
    for (int s = 0; s <= steps; ++s) {
      const double t = double(s) / steps;
      c.set(int(std::lround(a.first + (b.first - a.first) * t)), int(std::lround(a.second + (b.second - a.second) * t)), col);
    }
  }
}

// Disc of radius `rad`; pixels closer than `inner` to the centre are left alone (rings).
void fill_annulus(Canvas& c, double cx, double cy, double rad, double inner, const Rgb& col) {
  for (int y = std::max(0, int(cy - rad) - 1); y <= std::min(c.h - 1, int(cy + rad) + 1); ++y)
    for (int x = std::max(0, int(cx - rad) - 1); x <= std::min(c.w - 1, int(cx + rad) + 1); ++x) {
      const double d2 = (x - cx) * (x - cx) + (y - cy) * (y - cy);
      if (d2 <= rad * rad && (inner <= 0 || d2 > inner * inner)) c.set(x, y, col);
    }
}

Rgb mean_colour(const Canvas& c, int x0, int y0, int x1, int y1) {
  Rgb m{0, 0, 0};
  int n = 0;
  for (int y = std::max(0, y0); y < std::min(c.h, y1); y += 3)
    for (int x = std::max(0, x0); x < std::min(c.w, x1); x += 3) {
      const Rgb p = c.get(x, y);
      for (int k = 0; k < 3; ++k) m[k] += p[k];
      ++n;
    }
  for (double& v : m) v /= std::max(n, 1);
  return m;
}

double colour_distance(const Rgb& a, const Rgb& b) {
  return std::sqrt((a[0] - b[0]) * (a[0] - b[0]) + (a[1] - b[1]) * (a[1] - b[1]) + (a[2] - b[2]) * (a[2] - b[2]));
}

double overlap_of_smaller(const Box& a, const Box& b) {
  const double ix = std::max(0.0, double(std::min(a.x1, b.x1) - std::max(a.x0, b.x0)));
  const double iy = std::max(0.0, double(std::min(a.y1, b.y1) - std::max(a.y0, b.y0)));
  const double aa = double(a.x1 - a.x0) * (a.y1 - a.y0), ab = double(b.x1 - b.x0) * (b.y1 - b.y0);
  return ix * iy / std::max(1.0, std::min(aa, ab));
}

DemoScene make_scene(uint32_t seed, int index, int width, int height) {
  Rng r((uint64_t(seed) << 32) ^ (uint64_t(uint32_t(index)) * 0x9E3779B97F4A7C15ull) ^ 0xD1B54A32D192ED03ull);
  Canvas c{width, height, std::vector<double>(size_t(width) * height * 3)};
  paint_background(c, r);
  DemoScene scene;
  const auto& names = shape_class_names();
  const int want = r.range(3, 7);
  for (int tries = 0; int(scene.truth.size()) < want && tries < 200; ++tries) {
    const int cls = r.range(0, 7);
    // Log-uniform radius like scenes.py (14..170 there on 640x640; a bit narrower here so
    // that every shape fits whole in 640x480).
    const double rmax = std::min(110.0, std::min(width, height) / 2.0 - 4);
    const double rad = std::exp(r.uniform(std::log(std::min(18.0, rmax)), std::log(rmax)));
    const double cx = r.uniform(rad + 2, c.w - rad - 2), cy = r.uniform(rad + 2, c.h - rad - 2);
    const double rot = r.uniform(0, 2 * kPi);
    std::vector<Pt> pts;
    Box box;
    if (cls == 0 || cls == 6) {
      box = {float(cx - rad), float(cy - rad), float(cx + rad), float(cy + rad)};
    } else {
      pts = shape_polygon(cls, cx, cy, rad, rot);
      box = {1e9f, 1e9f, -1e9f, -1e9f};
      for (const auto& p : pts) {
        box.x0 = std::min(box.x0, float(p.first));
        box.y0 = std::min(box.y0, float(p.second));
        box.x1 = std::max(box.x1, float(p.first));
        box.y1 = std::max(box.y1, float(p.second));
      }
    }
    bool clash = false;
    for (const Detection& d : scene.truth) clash |= overlap_of_smaller(box, d.box) > 0.05;
    if (clash) continue;
    // A colour that stands out from what lies under the shape (the training scenes draw any
    // colour; a demo should not hide its shapes).
    const Rgb under = mean_colour(c, int(box.x0), int(box.y0), int(box.x1) + 1, int(box.y1) + 1);
    Rgb col = random_colour(r);
    for (int k = 0; k < 20 && colour_distance(col, under) < 110; ++k) col = random_colour(r);
    const bool outline = r.uniform() < 0.5;
    const Rgb oc = random_colour(r);
    if (cls == 0) {
      fill_annulus(c, cx, cy, rad, 0, col);
      if (outline) fill_annulus(c, cx, cy, rad, rad - std::max(1, int(rad * 0.08)), oc);
    } else if (cls == 6) {
      fill_annulus(c, cx, cy, rad, rad - std::max(2, int(rad * 0.3)), col);
    } else {
      fill_polygon(c, pts, col);
      if (outline) draw_polyline(c, pts, oc);
    }
    Detection d;
    d.box = box;
    d.score = 1.0f;
    d.label = cls;
    d.label_name = names[size_t(cls)];
    scene.truth.push_back(d);
  }
  scene.image.width = c.w;
  scene.image.height = c.h;
  scene.image.rgb.resize(c.px.size());
  for (size_t i = 0; i < c.px.size(); ++i) scene.image.rgb[i] = uint8_t(std::clamp(std::lround(c.px[i]), 0L, 255L));
  return scene;
}

}  // namespace

const std::vector<std::string>& shape_class_names() {
  static const std::vector<std::string> names = {"circle", "square", "triangle", "diamond",
                                                 "star",   "cross",  "ring",     "hexagon"};
  return names;
}

std::vector<DemoScene> make_demo_scenes(int count, uint32_t seed, int width, int height) {
  if (count < 0) throw Error("demo scene count must not be negative, got " + std::to_string(count));
  if (width < 64 || height < 64 || width > 4096 || height > 4096)
    throw Error("demo scene size " + std::to_string(width) + "x" + std::to_string(height) + " is out of range (64..4096)");
  std::vector<DemoScene> scenes(static_cast<size_t>(count));
#pragma omp parallel for schedule(dynamic)
  for (int i = 0; i < count; ++i) scenes[size_t(i)] = make_scene(seed, i, width, height);
  return scenes;
}

std::vector<ImageU8> make_demo_images(int count, uint32_t seed, int width, int height) {
  std::vector<ImageU8> images;
  for (DemoScene& s : make_demo_scenes(count, seed, width, height)) images.push_back(std::move(s.image));
  return images;
}

}  // namespace detforge::demo
