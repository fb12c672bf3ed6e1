#include "eval/label_map.h"

#include <algorithm>
#include <cctype>
#include <unordered_map>

namespace detforge::eval {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string some_names(const std::vector<std::string>& names, size_t max = 8) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < max; ++i) s += (i ? ", " : "") + ("\"" + names[i] + "\"");
  if (names.size() > max) s += ", ... (" + std::to_string(names.size()) + " in all)";
  return s.empty() ? "(none)" : s;
}

}  // namespace

int LabelMap::matched() const {
  return static_cast<int>(std::count_if(category_of_label.begin(), category_of_label.end(),
                                        [](int64_t c) { return c >= 0; }));
}

LabelMap map_labels_by_name(const std::vector<std::string>& model_labels, const CocoDataset& ds) {
  std::unordered_map<std::string, int64_t> by_name;
  std::vector<std::string> cat_names;
  for (const CocoCategory& c : ds.categories) {
    auto [it, fresh] = by_name.emplace(lower(c.name), c.id);
    if (!fresh)
      throw Error("dataset categories " + std::to_string(it->second) + " and " + std::to_string(c.id) +
                  " share the name \"" + c.name + "\": cannot map model labels by name");
    cat_names.push_back(c.name);
  }
  LabelMap m;
  m.category_of_label.assign(model_labels.size(), -1);
  for (size_t i = 0; i < model_labels.size(); ++i) {
    auto it = by_name.find(lower(model_labels[i]));
    if (it != by_name.end()) m.category_of_label[i] = it->second;
    else m.unmatched.push_back(model_labels[i]);
  }
  if (m.matched() == 0)
    throw Error("no model label matches a dataset category by name: model labels " + some_names(model_labels) +
                "; dataset categories " + some_names(cat_names));
  return m;
}

int64_t append_coco_results(const Detections& dets, int64_t image_id, const LabelMap& map, int max_dets,
                            std::vector<CocoResult>& out) {
  int64_t dropped = 0;
  int kept = 0;
  for (const Detection& d : dets.items) {
    if (kept >= max_dets) break;
    int64_t cat = map.category(d.label);
    if (cat < 0) {
      ++dropped;
      continue;
    }
    CocoResult r;
    r.image_id = image_id;
    r.category_id = cat;
    r.bbox[0] = d.box.x0;
    r.bbox[1] = d.box.y0;
    r.bbox[2] = static_cast<double>(d.box.x1) - d.box.x0;
    r.bbox[3] = static_cast<double>(d.box.y1) - d.box.y0;
    r.score = d.score;
    out.push_back(r);
    ++kept;
  }
  return dropped;
}

}  // namespace detforge::eval
