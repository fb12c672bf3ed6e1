#include "eval/coco_dataset.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/atomic_file.h"
#include "detforge/types.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace detforge::eval {
namespace {

std::string read_text(const fs::path& path, const std::string& what) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error("cannot read " + what + " " + path.string() + ": no such file");
  if (fs::is_directory(path, ec)) throw Error("cannot read " + what + " " + path.string() + ": it is a folder");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + what + " " + path.string() + ": cannot open it");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error("cannot read " + what + " " + path.string() + ": I/O error");
  return ss.str();
}

json parse_json(const std::string& text, const std::string& what) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw Error(what + ": not valid JSON (" + std::string(e.what()) + ")");
  }
}

// Integer ids: JSON integers, or floats with an integral value (some tools write 1.0).
int64_t get_id(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) throw Error(where + ": missing \"" + key + "\"");
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_float()) {
    double v = it->get<double>();
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9e15) return static_cast<int64_t>(v);
  }
  throw Error(where + ": \"" + key + "\" must be an integer, got " + it->dump());
}

double get_number(const json& v, const std::string& where) {
  if (!v.is_number()) throw Error(where + " must be a number, got " + v.dump());
  double d = v.get<double>();
  if (!std::isfinite(d)) throw Error(where + " is not finite");
  return d;
}

void get_bbox(const json& obj, double out[4], const std::string& where) {
  auto it = obj.find("bbox");
  if (it == obj.end()) throw Error(where + ": missing \"bbox\"");
  if (!it->is_array() || it->size() != 4)
    throw Error(where + ": \"bbox\" must be [x, y, w, h], got " + it->dump());
  for (int i = 0; i < 4; ++i) out[i] = get_number((*it)[i], where + ": bbox[" + std::to_string(i) + "]");
}

const json& get_array(const json& root, const char* key, const std::string& what) {
  auto it = root.find(key);
  if (it == root.end()) throw Error(what + ": missing \"" + std::string(key) + "\" list");
  if (!it->is_array()) throw Error(what + ": \"" + std::string(key) + "\" must be a list");
  return *it;
}

}  // namespace

CocoDataset CocoDataset::load_dir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error("COCO dataset " + dir.string() + " is not a folder (expected instances.json and images/)");
  fs::path ann = dir / "instances.json";
  if (!fs::exists(ann, ec))
    throw Error("COCO dataset " + dir.string() + " has no instances.json (pass --annotations FILE --images DIR)");
  fs::path imgs = dir / "images";
  if (!fs::is_directory(imgs, ec)) throw Error("COCO dataset " + dir.string() + " has no images/ folder");
  return load(ann, imgs);
}

CocoDataset CocoDataset::load(const fs::path& annotations_json, const fs::path& images_dir) {
  std::string what = "COCO annotations " + annotations_json.string();
  CocoDataset ds = parse(read_text(annotations_json, "COCO annotations"), what);
  ds.annotations_path = annotations_json;
  ds.images_dir = images_dir;
  return ds;
}

CocoDataset CocoDataset::parse(const std::string& json_text, const std::string& what) {
  json root = parse_json(json_text, what);
  if (!root.is_object()) throw Error(what + ": top level must be an object with images, annotations, categories");
  CocoDataset ds;
  const json& images = get_array(root, "images", what);
  ds.images.reserve(images.size());
  for (size_t i = 0; i < images.size(); ++i) {
    const json& j = images[i];
    std::string where = what + ": images[" + std::to_string(i) + "]";
    if (!j.is_object()) throw Error(where + " must be an object");
    CocoImage img;
    img.id = get_id(j, "id", where);
    if (auto it = j.find("file_name"); it != j.end()) {
      if (!it->is_string()) throw Error(where + ": \"file_name\" must be a string");
      img.file_name = it->get<std::string>();
    }
    if (j.contains("width")) img.width = static_cast<int>(get_id(j, "width", where));
    if (j.contains("height")) img.height = static_cast<int>(get_id(j, "height", where));
    ds.images.push_back(std::move(img));
  }
  const json& cats = get_array(root, "categories", what);
  for (size_t i = 0; i < cats.size(); ++i) {
    const json& j = cats[i];
    std::string where = what + ": categories[" + std::to_string(i) + "]";
    if (!j.is_object()) throw Error(where + " must be an object");
    CocoCategory c;
    c.id = get_id(j, "id", where);
    auto it = j.find("name");
    if (it == j.end() || !it->is_string()) throw Error(where + ": \"name\" must be a string");
    c.name = it->get<std::string>();
    ds.categories.push_back(std::move(c));
  }
  ds.build_index(what);
  const json& anns = get_array(root, "annotations", what);
  ds.annotations.reserve(anns.size());
  for (size_t i = 0; i < anns.size(); ++i) {
    const json& j = anns[i];
    std::string where = what + ": annotations[" + std::to_string(i) + "]";
    if (!j.is_object()) throw Error(where + " must be an object");
    CocoAnnotation a;
    a.id = get_id(j, "id", where);
    a.image_id = get_id(j, "image_id", where);
    a.category_id = get_id(j, "category_id", where);
    get_bbox(j, a.bbox, where);
    if (auto it = j.find("area"); it != j.end())
      a.area = get_number(*it, where + ": area");
    else
      a.area = a.bbox[2] * a.bbox[3];
    if (auto it = j.find("iscrowd"); it != j.end()) {
      if (it->is_boolean()) a.iscrowd = it->get<bool>();
      else if (it->is_number_integer()) a.iscrowd = it->get<int64_t>() != 0;
      else throw Error(where + ": \"iscrowd\" must be 0 or 1, got " + it->dump());
    }
    if (!ds.image_index_.count(a.image_id))
      throw Error(where + ": image_id " + std::to_string(a.image_id) + " is not in \"images\"");
    if (!ds.category_index_.count(a.category_id))
      throw Error(where + ": category_id " + std::to_string(a.category_id) + " is not in \"categories\"");
    ds.annotations.push_back(a);
  }
  return ds;
}

void CocoDataset::build_index(const std::string& what) {
  image_index_.clear();
  category_index_.clear();
  for (size_t i = 0; i < images.size(); ++i)
    if (!image_index_.emplace(images[i].id, i).second)
      throw Error(what + ": image id " + std::to_string(images[i].id) + " appears twice");
  for (size_t i = 0; i < categories.size(); ++i)
    if (!category_index_.emplace(categories[i].id, i).second)
      throw Error(what + ": category id " + std::to_string(categories[i].id) + " appears twice");
}

const CocoImage* CocoDataset::find_image(int64_t id) const {
  auto it = image_index_.find(id);
  return it == image_index_.end() ? nullptr : &images[it->second];
}

const CocoCategory* CocoDataset::find_category(int64_t id) const {
  auto it = category_index_.find(id);
  return it == category_index_.end() ? nullptr : &categories[it->second];
}

std::vector<CocoResult> parse_coco_results(const std::string& json_text, const std::string& what) {
  json root = parse_json(json_text, what);
  if (!root.is_array()) throw Error(what + ": COCO results must be a JSON list of detections");
  std::vector<CocoResult> out;
  out.reserve(root.size());
  for (size_t i = 0; i < root.size(); ++i) {
    const json& j = root[i];
    std::string where = what + ": [" + std::to_string(i) + "]";
    if (!j.is_object()) throw Error(where + " must be an object");
    CocoResult r;
    r.image_id = get_id(j, "image_id", where);
    r.category_id = get_id(j, "category_id", where);
    get_bbox(j, r.bbox, where);
    auto it = j.find("score");
    if (it == j.end()) throw Error(where + ": missing \"score\"");
    r.score = get_number(*it, where + ": score");
    out.push_back(r);
  }
  return out;
}

std::vector<CocoResult> load_coco_results(const fs::path& path) {
  return parse_coco_results(read_text(path, "COCO results"), "COCO results " + path.string());
}

void save_coco_results(const std::vector<CocoResult>& results, const fs::path& path) {
  json arr = json::array();
  for (const CocoResult& r : results)
    arr.push_back({{"image_id", r.image_id},
                   {"category_id", r.category_id},
                   {"bbox", {r.bbox[0], r.bbox[1], r.bbox[2], r.bbox[3]}},
                   {"score", r.score}});
  write_file_atomically(path, arr.dump() + "\n");
}

}  // namespace detforge::eval
